"""headway (Python) in the side-by-side benchmark (run by ``compare.sh``;
prints one JSON line).

    python vs_headway.py URL N RTT [--layout headway|celery] [--tuned] [--ids PATH]

The worker runs at headway's defaults (``app.worker(queue)``: concurrency 4,
prefetch concurrency × 4) unless ``--tuned`` is given: then concurrency
``HEADWAY_BENCH_CONCURRENCY`` (8) and prefetch ``HEADWAY_BENCH_PREFETCH``
(512), a separate, labelled row of the table. After every drain the script
reads each drained run's state back and exits 1 unless all N are SUCCESS.

``--layout headway`` (``RedisBroker(url)``), with no worker running:

1. enqueue: N ``noop.delay(i)`` from this one thread (each call returns once
   Redis has the message), then — flushed away afterwards — N more as
   ``group`` sends of 1000 signatures (one publish per 1000);
2. drain: a worker starts on the N queued by step 1; the clock runs from
   ``start()`` until it has settled all N (results stored);
3. round trip: RTT sequential ``noop.delay(i).get()`` with the worker idle;
4. last (flushed away afterwards): N ``noop.delay(i)`` from THREADS threads of
   this one process, each call still returning once Redis has the message —
   the GIL is released while a send waits, so the sends of many threads share
   the multiplexed connection's pipeline.

``--layout celery`` (``RedisBroker.celery(url)``): Celery's queue ``celery``
(headway's ``default`` on that layout) already holds N ``bench.noop`` messages a real Celery producer sent
(``vs_celery.py fill``, whose ids are in ``--ids PATH``); step 2 drains them (results stored in Celery's
result format), step 3 round-trips through headway's client on that layout,
and step 1, last and with the worker stopped, times headway's producer on
Celery's layout.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from typing import Any

import headway

CONCURRENCY = int(os.environ.get("HEADWAY_BENCH_CONCURRENCY", "8"))
PREFETCH = int(os.environ.get("HEADWAY_BENCH_PREFETCH", "512"))
BATCH = 1000
THREADS = int(os.environ.get("HEADWAY_BENCH_THREADS", "16"))


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def ticks(pid: int | str) -> int:
    """CPU clock ticks (user + system) a process has used so far; 0 if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError):
        return 0
    return int(fields[11]) + int(fields[12])


def split(before: tuple[int, int], after: tuple[int, int], n: int) -> dict[str, float]:
    """CPU µs per task on the worker's side and on redis-server's."""
    per = 1e6 / os.sysconf("SC_CLK_TCK") / n
    return {"worker": (after[0] - before[0]) * per, "redis": (after[1] - before[1]) * per}


def until(cond: Any, deadline: float, what: str) -> None:
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"headway-py: timed out waiting for {what}")
        time.sleep(0.0005)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("n", type=int)
    ap.add_argument("rtt", type=int)
    ap.add_argument("--layout", choices=["headway", "celery"], default="headway")
    ap.add_argument("--tuned", action="store_true", help="concurrency 8, prefetch 512 (not the defaults)")
    ap.add_argument("--ids", default=None, help="the drained runs' ids (the Celery layout: the filler's)")
    a = ap.parse_args()
    n: int = a.n
    deadline = time.monotonic() + float(os.environ.get("HEADWAY_BENCH_TIMEOUT", "600"))
    celery = a.layout == "celery"
    # headway's "default" is Celery's "celery" list on Celery's layout.
    queue = "default"

    def make() -> tuple[headway.App, Any]:
        broker = headway.RedisBroker.celery(a.url) if celery else headway.RedisBroker(a.url)
        app = headway.App(broker)

        @app.task(name="bench.noop", queue=queue)
        def noop(i: int) -> None:
            return None

        return app, noop

    ids: list[str] = []

    def enqueue(noop: Any) -> float:
        delay = noop.delay
        keep = ids.append
        t0 = time.perf_counter()
        for i in range(n):
            keep(delay(i).id)
        return n / (time.perf_counter() - t0)

    def bulk(noop: Any) -> float:
        t0 = time.perf_counter()
        for s in range(0, n, BATCH):
            headway.group([noop.s(i) for i in range(s, min(n, s + BATCH))]).send()
        return n / (time.perf_counter() - t0)

    def threaded(noop: Any) -> float:
        per = n // THREADS
        delay = noop.delay

        def one(base: int) -> None:
            for i in range(base, base + per):
                delay(i)

        ts = [threading.Thread(target=one, args=(k * per,)) for k in range(THREADS)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return per * THREADS / (time.perf_counter() - t0)

    out: dict[str, Any] = {}
    app, noop = make()
    if not celery:
        out["enqueue"] = enqueue(noop)
        out["enqueue_how"] = "noop.delay(i) loop"
    redis_pid = os.environ.get("HEADWAY_BENCH_REDIS_PID", "0")
    if celery:
        if not a.ids:
            raise SystemExit("headway-py: --layout celery needs --ids (the Celery filler's ids)")
        with open(a.ids) as f:
            ids = f.read().split()
    w = app.worker(queue, concurrency=CONCURRENCY, prefetch=PREFETCH) if a.tuned else app.worker(queue)
    c0 = (ticks("self"), ticks(redis_pid))
    t0 = time.perf_counter()
    w.start()
    until(lambda: w.settled >= a.n, deadline, f"the drain ({w.settled}/{a.n})")
    out["drain"] = a.n / (time.perf_counter() - t0)
    out["drain_cpu_us"] = split(c0, (ticks("self"), ticks(redis_pid)), a.n)
    # Every drained run must have its SUCCESS stored (read back, one by one).
    ok = sum(1 for t in ids if app.handle(t).state() == "SUCCESS")
    if ok != n or len(ids) != n:
        raise SystemExit(f"headway-py: {ok} of {n} drained runs are SUCCESS ({len(ids)} ids)")
    out["verified_success"] = ok
    lat, handles = [], []
    for i in range(a.rtt):
        s = time.perf_counter()
        h = noop.delay(i)
        h.get(timeout=30)
        lat.append((time.perf_counter() - s) * 1000)
        handles.append(h)
        if time.monotonic() > deadline:
            raise SystemExit("headway-py: timed out in the round trips")
    out["p50"], out["p99"] = pct(lat, 0.5), pct(lat, 0.99)
    # Where a round trip goes: get() of a result already stored (a fresh
    # handle each, so nothing is cached) is the client's fetch alone.
    fetch = []
    for h in handles:
        h2 = app.handle(h.id)
        s = time.perf_counter()
        h2.get(timeout=30)
        fetch.append((time.perf_counter() - s) * 1000)
    out["get_stored_p50"] = pct(fetch, 0.5)
    w.stop(5.0)
    if celery:
        out["enqueue"] = enqueue(noop)
        out["enqueue_how"] = "noop.delay(i) loop, headway's producer on Celery's layout"
    # The bulk send last: what it leaves queued is flushed by compare.sh.
    out["enqueue_bulk"] = bulk(noop)
    out["enqueue_bulk_how"] = f"group of {BATCH} signatures per send"
    out["enqueue_threads"] = threaded(noop)
    out["enqueue_threads_how"] = f"noop.delay(i) from {THREADS} threads of one process"
    out["settings"] = f"concurrency {w.concurrency}, prefetch {w.prefetch}" + (
        " (tuned)"
        if a.tuned
        else " reaching up to 8 × that while runs are short (headway's defaults)"
    )
    print(json.dumps(out))


if __name__ == "__main__":
    main()
