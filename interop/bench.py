"""Celery's drain rate on its own Redis layout: publishes N no-op tasks with
result ignored, starts a prefork worker (2 processes, Celery's defaults
otherwise) and prints messages per second once the queue is drained."""

import os
import subprocess
import sys
import time

from celery_app import _r, app

n = int(sys.argv[1])
for i in range(n):
    app.send_task("bench.noop", args=[i], ignore_result=True)
env = dict(os.environ, HEADWAY_INTEROP_BENCH="1")
worker = subprocess.Popen(
    [sys.executable, "-m", "celery", "-A", "celery_app", "worker", "-c", "2", "-Q", "celery",
     "--without-mingle", "--without-gossip", "--loglevel=WARNING"],
    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
)
try:
    # The clock starts when the worker takes its first message.
    while _r.llen("celery") == n:
        time.sleep(0.001)
    start = time.time()
    while _r.get("bench.done") is None or int(_r.get("bench.done")) < n:
        time.sleep(0.01)
    print(n / (time.time() - start))
finally:
    worker.kill()
