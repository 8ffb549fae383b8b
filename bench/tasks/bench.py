"""Memory-broker throughput, send → settled, with a Python no-op body.

    python bench/tasks/bench.py [N]

For each body kind (sync ``def``, ``async def``) and send style (one
``task.delay()`` per run, or one ``group`` of N signatures) it reports:

- ``publish``: sends per second, nothing consuming;
- ``run``: from ``worker.start()`` until the worker has settled all N
  (claim, ack, call the body through the core's HostQueue, store the result);
- ``send→settled``: the whole path, first send to last settle, with the
  worker running while the sends happen (what a service sees).

Calls cross into Python in batches: a runner thread attaches once per busy
stretch and keeps taking calls, and the async pump hands the loop up to 256
calls per ``call_soon_threadsafe``. The per-thread CPU split (``tokio`` vs
``python``) shows where the time goes.

Measured before and after the run path's allocations were cut (concurrency
64, prefetch 1024, alternating builds on a 2-core VM):
``bench/tasks/runs/memory-cbfbaa3.md``, and bench/README.md for what changed.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

import headway

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from costs import threads  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
CONCURRENCY = 64
PREFETCH = 1024


def cpu() -> dict[str, float]:
    """CPU seconds per thread kind (``tokio`` = the core's threads)."""
    return {("tokio" if k.startswith("core") else k): t["user"] + t["sys"] for k, t in threads().items()}


def app_with(kind: str) -> tuple[headway.App, Any]:
    app = headway.App("memory://")
    if kind == "sync":

        @app.task(name="noop")
        def noop(i: int) -> None:
            return None

        return app, noop

    @app.task(name="noop")
    async def anoop(i: int) -> None:
        return None

    return app, anoop


def send(task: Any, style: str, n: int) -> None:
    if style == "delay":
        delay = task.delay
        for i in range(n):
            delay(i)
    else:
        headway.group([task.s(i) for i in range(n)]).send()


def settle(w: headway.Worker, n: int) -> None:
    while w.settled < n:
        time.sleep(0.0005)


def run(kind: str, style: str, n: int) -> None:
    # Publish, then run.
    app, task = app_with(kind)
    t0 = time.perf_counter()
    send(task, style, n)
    t1 = time.perf_counter()
    w = app.worker(concurrency=CONCURRENCY, prefetch=PREFETCH)
    before = cpu()
    t2 = time.perf_counter()
    w.start()
    settle(w, n)
    t3 = time.perf_counter()
    after = cpu()
    w.stop(1.0)
    # The worker running while the sends happen.
    app, task = app_with(kind)
    w = app.worker(concurrency=CONCURRENCY, prefetch=PREFETCH)
    w.start()
    t4 = time.perf_counter()
    send(task, style, n)
    settle(w, n)
    t5 = time.perf_counter()
    w.stop(1.0)
    spent = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in ("tokio", "python")}
    print(
        f"python {kind:5} no-op, {style:5}: publish {n / (t1 - t0):>9,.0f}/s, "
        f"run {n / (t3 - t2):>9,.0f}/s, send→settled {n / (t5 - t4):>9,.0f} tasks/s "
        f"(run cpu: tokio {spent['tokio']:.2f} s, python {spent['python']:.2f} s)"
    )


def main() -> None:
    print(
        f"headway {headway.__version__}: memory broker, {N} tasks, "
        f"concurrency {CONCURRENCY}, prefetch {PREFETCH}"
    )
    for kind in ("sync", "async"):
        for style in ("delay", "group"):
            run(kind, style, N)


if __name__ == "__main__":
    main()
