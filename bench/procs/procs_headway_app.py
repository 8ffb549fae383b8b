"""headway's app in ``run.sh``: the module the process pool's children
import (``python -m headway._child`` finds ``app`` here), so it lives at
the top level of a module of its own.

``PROCS_URL`` is the Redis URL; ``PROCS_LAYOUT`` is ``headway``
(``RedisBroker(url)``, the default) or ``celery``
(``RedisBroker.celery(url)``, Celery's layout and message format). The
task names are Celery's app's, so a queue Celery's producer filled is
drained here as it is there.
"""

import os

import headway

from procs_body import noop as _noop
from procs_body import spin as _spin

URL = os.environ.get("PROCS_URL", "redis://127.0.0.1:6379/0")
LAYOUT = os.environ.get("PROCS_LAYOUT", "headway")

app = headway.App(headway.RedisBroker.celery(URL) if LAYOUT == "celery" else headway.RedisBroker(URL))


@app.task(name="procs.spin")
def spin(n):
    return _spin(n)


@app.task(name="procs.noop")
def noop():
    return _noop()
