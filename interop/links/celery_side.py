"""The Celery side of ``interop/run_links.sh``: a real Celery 5.5 app.

Configured from the environment by the harness:

- ``HEADWAY_LINKS_URL``: the Redis URL (broker and result backend).
- ``HEADWAY_LINKS_VT``: kombu's ``visibility_timeout`` in seconds.
- ``HEADWAY_LINKS_SLEEP``: how long ``shared.slow`` sleeps here.
- ``HEADWAY_LINKS_WORKER``: this worker's name in the ledger.

Tasks named ``c.*`` are registered only here; ``shared.slow`` on every side.
Every run appends ``{task, id, side, worker, args, at, parent_id, root_id}``
to the Redis list ``ledger`` so the harness can print and assert who ran
what, and when.
"""

import datetime
import decimal
import json
import os
import time
import uuid

import redis
from celery import Celery

URL = os.environ.get("HEADWAY_LINKS_URL", "redis://127.0.0.1:1/0")
VT = float(os.environ.get("HEADWAY_LINKS_VT", "4"))

app = Celery("links", broker=URL, backend=URL)
app.conf.update(
    broker_transport_options={"visibility_timeout": VT},
    result_backend_transport_options={"visibility_timeout": VT},
    task_default_queue="celery",
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)

_r = redis.Redis.from_url(URL)


def _plain(a):
    """A JSON value as itself; anything else (a datetime, say) as its repr."""
    try:
        json.dumps(a)
        return a
    except TypeError:
        return repr(a)


def note(task, args):
    req = task.request
    _r.rpush("ledger", json.dumps({
        "task": task.name, "id": req.id, "side": "celery",
        "worker": os.environ.get("HEADWAY_LINKS_WORKER", "celery"),
        "args": [_plain(a) for a in args],
        "at": time.time(), "parent_id": req.parent_id, "root_id": req.root_id,
    }))


@app.task(name="c.add", bind=True)
def add(self, x, y=0):
    note(self, (x, y))
    return x + y


@app.task(name="c.mul", bind=True)
def mul(self, x, y):
    note(self, (x, y))
    return x * y


@app.task(name="c.tsum", bind=True)
def tsum(self, xs):
    note(self, (xs,))
    return sum(xs)


@app.task(name="c.record", bind=True)
def record(self, *args):
    note(self, args)
    return list(args)


@app.task(name="c.errback", bind=True)
def errback(self, task_id):
    """A ``link_error`` target of one argument: Celery sends it as a task
    with the failed task's id (a wider one it would call in-process)."""
    note(self, (task_id,))
    return task_id


@app.task(name="c.fail", bind=True)
def fail(self, msg):
    note(self, (msg,))
    raise ValueError(msg)


@app.task(name="c.typed", bind=True)
def typed(self, *args):
    """Answers the type names it was given, and the values themselves."""
    note(self, args)
    native = [isinstance(args[0], datetime.datetime), isinstance(args[1], uuid.UUID),
              isinstance(args[2], decimal.Decimal)]
    return {"native": native, "values": list(args)}


@app.task(name="shared.slow", bind=True, acks_late=True)
def slow(self, label):
    note(self, (label,))
    time.sleep(float(os.environ.get("HEADWAY_LINKS_SLEEP", "0")))
    return "celery:" + label
