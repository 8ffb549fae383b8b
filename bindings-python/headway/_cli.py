"""The ``headway`` command line.

    headway worker -A module:app [-c 4] [-Q a,b]   run a worker
        [--pool process] [--max-tasks-per-child K] [--max-memory-per-child KIB]
        [--time-limit S] [--soft-time-limit S]
        [--metrics-port P [--metrics-host H]] [-E/--task-events]
        [-l/--loglevel warning] [--log-format text|json]
    headway beat -A module:app                     run the app's beat
    headway admin -A module:app [--port 5555]      serve the admin (uvicorn)
    headway inspect WHAT -A module:app             ask every worker process:
        [--json] [--timeout S] [-d NODE,...]       ping, active, reserved,
                                                   scheduled, stats, registered,
                                                   active-queues
    headway control WHAT [ARGS] -A module:app      change them: shutdown,
        [--json] [--timeout S] [-d NODE,...]       rate-limit TASK RATE,
                                                   time-limit TASK SOFT [HARD],
                                                   pool-grow [N], pool-shrink [N],
                                                   add-consumer Q,
                                                   cancel-consumer Q, heartbeat
    headway demo                                   a worker, a retry, a chain,
                                                   a chord and a beat, on the
                                                   memory broker and a virtual
                                                   clock

``-A module:app`` imports ``module`` (the current directory is on the path,
as for Celery's ``-A``) and takes its ``app`` attribute (``module`` alone
means ``module:app``): a ``headway.App``, or a real ``celery.Celery``, whose
tasks a worker then serves on its broker (``_from_celery``). SIGTERM and Ctrl-C stop a worker gracefully: no more
claims, runs in progress get the grace, what it held is given back.

Every command takes ``-l/--loglevel`` (Celery's names: debug, info, warning,
error, critical; default warning) and ``--log-format`` (``text``:
``[<UTC time> <LEVEL> <logger>] <message>``; ``json``: one object a line with
``ts``, ``level``, ``logger``, ``message``, ``worker``, ``task_name``,
``task_id``), the same lines as the Node CLI's; they go to stderr.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import signal
import sys
from collections.abc import Iterator
from types import FrameType
from typing import Any

from . import _log, _native
from .celery.app import _headway_app
from ._tasks import GRACE, App


@contextlib.contextmanager
def _refused(prefix: str = "headway") -> Iterator[None]:
    """A ``ValueError`` raised inside ends the command with its message."""
    try:
        yield
    except ValueError as e:
        raise SystemExit(f"{prefix}: {e}") from e


def _load(spec: str) -> App:
    module, _, attr = spec.partition(":")
    if not module:
        raise SystemExit(f"headway: -A {spec!r}: expected module:app")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        m = importlib.import_module(module)
    except ImportError as e:
        raise SystemExit(f"headway: -A {spec!r}: cannot import {module!r}: {e}") from e
    obj = getattr(m, attr or "app", None)
    with _refused(f"headway: -A {spec!r}"):
        obj = _headway_app(obj)
    if not isinstance(obj, App):
        raise SystemExit(
            f"headway: -A {spec!r}: {module}.{attr or 'app'} is not a headway.App "
            f"(got {type(obj).__name__})"
        )
    # Where a process-pool child imports it from.
    obj._origin = f"{module}:{attr or 'app'}"
    return obj


def _logging(level: str, fmt: str) -> None:
    with _refused():
        fmt = _native.log_format(fmt)
        _log.set_level(level)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_log.JsonFormatter() if fmt == "json" else _log.TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.getLogger("headway").level)


def _say(line: str, **fields: Any) -> None:
    # The printed lines are the core's (the Node CLI prints the same).
    with _refused():
        text = _native.banner(line, json.dumps(fields))
    print(text, flush=True)


def _term(signum: int, frame: FrameType | None) -> None:
    # SIGTERM is a warm shutdown, as Ctrl-C is: raised where the process is,
    # so a signal that lands before run() starts is not lost.
    raise KeyboardInterrupt


def _worker(c: dict[str, Any]) -> int:
    app = _load(c["app"])
    # What the command line gave (the core names it as app.worker takes
    # it), over the app's own defaults (a Celery app's config).
    w = app.worker(queues=c["queues"] or app._queues, **{**app._worker_defaults, **c["worker_options"]})
    if c["task_events"]:
        with _refused():
            app._native.enable_task_events()
    if c["metrics_port"] is not None:
        host = c["metrics_host"]
        with _refused():
            port = app._native.serve_metrics(host, c["metrics_port"])
        _say("metrics", host=host, port=port)
    try:
        signal.signal(signal.SIGTERM, _term)
        _say(
            "worker_ready", name=w.name, app=c["app"], queues=list(w.queues),
            concurrency=w.concurrency, prefetch=w.prefetch, pool=w.pool,
            tasks=list(app.task_names()),
        )
        w.run(grace=GRACE if c["grace"] is None else c["grace"])
    except KeyboardInterrupt:
        pass
    _say("worker_stopped", name=w.name, settled=w.settled)
    return 0


def _beat(c: dict[str, Any]) -> int:
    app = _load(c["app"])
    beat = app.beat()
    try:
        signal.signal(signal.SIGTERM, _term)
        # Each due time as epoch milliseconds: the core prints it.
        entries = [(name, round(when.timestamp() * 1000)) for name, when in beat.pending()]
        _say("beat_ready", app=c["app"], entries=entries)
        beat.run()
    except KeyboardInterrupt:
        pass
    _say("beat_stopped")
    return 0


def _admin(c: dict[str, Any]) -> int:
    from .admin import serve

    app = _load(c["app"])
    worker = None
    if c["worker"]:
        # A worker in this process: what a memory-broker app needs to show
        # anything moving (a Redis app's workers may run anywhere).
        worker = app.worker(concurrency=c["worker"])
        worker.start()
    try:
        signal.signal(signal.SIGTERM, _term)
        serve(app, host=c["host"], port=c["port"], token=c["token"], read_only=c["read_only"])
    except KeyboardInterrupt:
        pass
    finally:
        if worker is not None:
            worker.stop(GRACE if c["grace"] is None else c["grace"])
    _say("admin_stopped")
    return 0


def _remote(c: dict[str, Any]) -> int:
    # Celery's `inspect` / `control`: the words, the sending, the gathering
    # and the text are the core's (the Node CLI prints the same).
    app = _load(c["app"])
    with _refused():
        code, out, err = app._native.remote(json.dumps(c))
    sys.stdout.write(out)
    sys.stderr.write(err)
    sys.stdout.flush()
    return code


def _demo(c: dict[str, Any]) -> int:
    from ._demo import demo

    demo()
    return 0


_RUN = {
    "worker": _worker,
    "beat": _beat,
    "admin": _admin,
    "inspect": _remote,
    "control": _remote,
    "demo": _demo,
}


def main(argv: list[str] | None = None) -> int:
    """Runs the CLI; answers the exit status. The words are read by the
    core's parser (the Node CLI's too): flags, units, defaults and the
    errors naming a bad value are the same in both."""
    try:
        parsed = json.loads(_native.cli_parse(sys.argv[1:] if argv is None else list(argv)))
    except ValueError as e:
        sys.stderr.write(f"headway: {e}\n")
        return 2
    if parsed["kind"] == "help":
        print(parsed["text"])
        return 0
    _logging(parsed["loglevel"], parsed["log_format"])
    status: int = _RUN[parsed["command"]](parsed)
    return status
