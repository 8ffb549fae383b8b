"""The Celery side of headway's interop suite: a real Celery 5.5 app.

Configured from the environment so the Rust tests can point it at their own
redis-server:

- ``HEADWAY_INTEROP_URL``: the Redis URL (broker and result backend).
- ``HEADWAY_INTEROP_VT``: kombu's ``visibility_timeout`` in seconds (3600).

Every task records what ran, where and when in the Redis list ``ledger`` so
a test can print and assert which side ran each link.
"""

import json
import os
import time

import redis
from celery import Celery

URL = os.environ.get("HEADWAY_INTEROP_URL", "redis://127.0.0.1:6379/0")
VT = float(os.environ.get("HEADWAY_INTEROP_VT", "3600"))

app = Celery("interop", broker=URL, backend=URL)
app.conf.update(
    broker_transport_options={"visibility_timeout": VT},
    task_default_queue="celery",
    worker_prefetch_multiplier=1,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)

_r = redis.Redis.from_url(URL)


def note(task, *args):
    _r.rpush("ledger", json.dumps({"task": task, "side": "celery", "args": [repr(a) for a in args], "at": time.time()}))


@app.task(name="tasks.add")
def add(x, y=0):
    note("tasks.add", x, y)
    return x + y


@app.task(name="tasks.mul")
def mul(x, y):
    note("tasks.mul", x, y)
    return x * y


@app.task(name="tasks.tsum")
def tsum(xs):
    note("tasks.tsum", xs)
    return sum(xs)


@app.task(name="tasks.boom")
def boom(msg):
    note("tasks.boom", msg)
    raise ValueError(msg)


@app.task(name="tasks.echo")
def echo(*args, **kwargs):
    note("tasks.echo", *args)
    return {"args": list(args), "kwargs": kwargs, "types": [type(a).__name__ for a in args]}


@app.task(name="shared.work", acks_late=True)
def work(label):
    """Runs on both sides. Here it sleeps long, so a test can kill the worker
    while it holds the message (acks_late: the claim stays in ``unacked``)."""
    note("shared.work", label)
    time.sleep(float(os.environ.get("HEADWAY_INTEROP_SLEEP", "0")))
    return "celery:" + label


@app.task(name="bench.noop", ignore_result=True)
def noop(i):
    """The benchmark's task: counts itself and does nothing else."""
    _r.incr("bench.done")
