"""Memory-broker throughput, send → settled, with a Python no-op body.

    python bench/tasks/bench.py [N]

For each body kind (sync ``def``, ``async def``) it publishes N runs — one
``task.delay()`` each, and as one ``group`` — starts a worker, and times the
whole path until the worker has settled all N (publish, claim, ack, call the
body through the core's HostQueue, store the result). Calls cross into
Python in batches: a runner thread attaches once per busy stretch, the async
pump hands the loop up to 256 calls per ``call_soon_threadsafe``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import headway

N = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
CONCURRENCY = 64
PREFETCH = 1024


def run(kind: str, send: str, n: int) -> float:
    app = headway.App("memory://")
    if kind == "sync":

        @app.task(name="noop")
        def noop(i: int) -> None:
            return None

        task: Any = noop
    else:

        @app.task(name="noop")
        async def anoop(i: int) -> None:
            return None

        task = anoop
    start = time.perf_counter()
    if send == "delay":
        delay = task.delay
        for i in range(n):
            delay(i)
    else:
        headway.group([task.s(i) for i in range(n)]).send()
    published = time.perf_counter() - start
    w = app.worker(concurrency=CONCURRENCY, prefetch=PREFETCH)
    w.start()
    while w.settled < n:
        time.sleep(0.001)
    total = time.perf_counter() - start
    w.stop(1.0)
    print(
        f"python {kind:5} no-op, {send:5} send: {n} tasks, publish {n / published:>9,.0f}/s, "
        f"send→settled {n / total:>9,.0f} tasks/s"
    )
    return n / total


def main() -> None:
    print(f"headway {headway.__version__}, memory broker, concurrency {CONCURRENCY}, prefetch {PREFETCH}")
    for kind in ("sync", "async"):
        for send in ("delay", "group"):
            run(kind, send, N)


if __name__ == "__main__":
    main()
