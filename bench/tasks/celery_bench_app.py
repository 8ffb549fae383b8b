"""The Celery 5.5 app the side-by-side benchmark runs (``compare.sh``).

Celery's defaults throughout — Redis broker and Redis result backend on the
URL in ``HEADWAY_BENCH_URL``, results stored, prefetch multiplier 4, early
ack — so the worker is what a Celery user gets with ``-c 2``. The one
setting given only silences the start-up deprecation warning.
"""

import os

from celery import Celery

URL = os.environ.get("HEADWAY_BENCH_URL", "redis://127.0.0.1:6379/0")

app = Celery("bench", broker=URL, backend=URL)
app.conf.broker_connection_retry_on_startup = True


@app.task(name="bench.noop")
def noop(i):
    """The benchmark's body: nothing. Its ``None`` is stored as the result."""
    return None
