"""Celery's app in ``run.sh``: Redis broker and Redis result backend on
``PROCS_URL``, Celery's defaults otherwise (prefetch multiplier 4, early
ack, JSON). The one setting given only silences a start-up deprecation
warning.
"""

import os

from celery import Celery

from procs_body import noop as _noop
from procs_body import spin as _spin

URL = os.environ.get("PROCS_URL", "redis://127.0.0.1:6379/0")

app = Celery("procs", broker=URL, backend=URL)
app.conf.broker_connection_retry_on_startup = True


@app.task(name="procs.spin")
def spin(n):
    return _spin(n)


@app.task(name="procs.noop")
def noop():
    return _noop()
