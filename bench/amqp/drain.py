"""One contender of the RabbitMQ drain (see README.md).

    python drain.py fill N             # Celery's producer queues N bench.noop runs
    python drain.py headway            # a headway worker at its defaults (threads, concurrency 4)
    python drain.py count N            # waits for N results; prints the JSON summary

The broker and the backend come from BENCH_AMQP and BENCH_REDIS. Both
workers run the same body (``body.py``): it answers ``[start, end]``, so a
drain's time is read from the stored results (first start to last end)
rather than from the driver's polling.
"""

from __future__ import annotations

import json
import os
import sys
import time

AMQP = os.environ["BENCH_AMQP"]
REDIS = os.environ["BENCH_REDIS"]


def fill(n: int) -> None:
    from cel_app import app

    with app.producer_or_acquire() as producer:
        for i in range(n):
            app.send_task("bench.noop", (i,), producer=producer)
    app.close()


def headway_worker() -> None:
    import headway

    from body import noop

    app = headway.App(AMQP, backend=REDIS)
    app.task(name="bench.noop")(noop)
    app.worker().run()


def count(n: int, limit: float) -> None:
    import redis

    r = redis.Redis.from_url(REDIS)
    deadline = time.monotonic() + limit
    while r.dbsize() < n:
        if time.monotonic() > deadline:
            print(json.dumps({"ok": False, "why": f"only {r.dbsize()} of {n} results in {limit} s"}))
            sys.exit(1)
        time.sleep(0.2)
    spans = []
    bad = 0
    for key in r.scan_iter("celery-task-meta-*", count=1000):
        meta = json.loads(r.get(key))
        if meta["status"] != "SUCCESS":
            bad += 1
            continue
        spans.append(meta["result"])
    first = min(s for s, _ in spans)
    last = max(e for _, e in spans)
    print(json.dumps({"ok": bad == 0 and len(spans) == n, "results": len(spans), "failed": bad,
                      "drain_s": last - first, "runs_per_s": len(spans) / (last - first)}))


if __name__ == "__main__":
    what = sys.argv[1]
    if what == "fill":
        fill(int(sys.argv[2]))
    elif what == "headway":
        headway_worker()
    elif what == "count":
        count(int(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else 300.0)
    else:
        sys.exit(f"unknown step {what!r}")
