"""A process-pool child: ``python -m headway._child``, started by the core.

The parent (a worker on ``pool="process"``) starts it with its socket on fd 3
and says where the app is in ``HEADWAY_CHILD_APP`` (``module:attr``, or
``/path/script.py:attr`` for a main script, run as ``__mp_main__`` so its
``if __name__ == "__main__"`` block does not start another worker) and the
parent's ``sys.path`` in ``HEADWAY_CHILD_PATH``. The child imports the app,
then serves the parent's runs one at a time; sync bodies run on this, the
main thread, so a soft time limit can interrupt a blocking call with a
signal. When the parent closes the socket the child exits.
"""

from __future__ import annotations

import importlib
import json
import os
import runpy
import signal
import sys
from types import FrameType

from . import _tracing
from .celery.app import _headway_app
from ._serve import Serving
from ._tasks import App


def _wake(signum: int, frame: FrameType | None) -> None:
    # The soft time limit's exception is already pending for this thread;
    # running this handler is what lets it fire inside a blocking call.
    pass


def _load(ref: str) -> App:
    where, _, attr = ref.rpartition(":")
    attr = attr or "app"
    if where.endswith(".py") or os.sep in where:
        obj = runpy.run_path(where, run_name="__mp_main__").get(attr)
    else:
        obj = getattr(importlib.import_module(where), attr, None)
    obj = _headway_app(obj)
    if not isinstance(obj, App):
        raise SystemExit(f"headway child: {ref!r} is not a headway.App (got {type(obj).__name__})")
    return obj


def main() -> None:
    ref = os.environ.pop("HEADWAY_CHILD_APP", "")
    if not ref:
        raise SystemExit("headway child: started without HEADWAY_CHILD_APP (the worker starts it)")
    path = json.loads(os.environ.pop("HEADWAY_CHILD_PATH", "[]"))
    sys.path[:] = [p for p in path if isinstance(p, str)] or sys.path
    app = _load(ref)
    host = app._native.host
    # The parent decides which runs are traced; spans open here, with the
    # tracer provider the app's module set up.
    if app._tracing and _tracing.provided():
        _tracing.enable()
    signal.signal(signal.SIGUSR1, _wake)
    host.as_child(int(signal.SIGUSR1))
    # Async bodies run on this loop thread; sync ones on the main thread,
    # in `serve_child`.
    serving = Serving(host, name="headway-child", sync_threads=0)
    try:
        app._native.serve_child()
    finally:
        serving.close()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
