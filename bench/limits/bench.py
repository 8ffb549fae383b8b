"""Per-call cost of headway's SharedBucket from Python, beside the `limits`
package on the same Redis.

    pip install -r bench/limits/requirements.txt     # limits[redis]
    python bench/limits/bench.py REDIS_URL [--calls N] [--json]

(`bash bench/limits/run.sh` starts a redis-server, runs this and the Node
side in one run, and writes results.json / results.md.)

Each row is N calls made one after another (each waits for its answer), best
of five runs, in microseconds per call: the latency a request pays for its
limit check. Every limiter is set so that every call is granted — the
answer a limiter gives most often, and the same work on every side. The
floor row is a bare `PING` through redis-py: the round trip every row pays.
headway's window row is the exact sliding window (as `limits`' moving
window); its bucket has no direct peer in `limits`, whose nearest is the
sliding-window counter.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import headway


def best_us(call: Callable[[], Any], n: int, repeat: int = 5) -> float:
    for _ in range(min(n, 200)):
        call()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            call()
        best = min(best, time.perf_counter() - t0)
    return best / n * 1e6


def best_async_us(call: Callable[[], Any], n: int, repeat: int = 5) -> float:
    async def run() -> float:
        for _ in range(min(n, 200)):
            await call()
        best = float("inf")
        for _ in range(repeat):
            t0 = time.perf_counter()
            for _ in range(n):
                await call()
            best = min(best, time.perf_counter() - t0)
        return best / n * 1e6

    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    n, url = args.calls, args.url
    tag = uuid.uuid4().hex[:8]
    rows: list[dict[str, Any]] = []

    def row(name: str, us: float, note: str = "") -> None:
        rows.append({"name": name, "us": round(us, 2), "note": note})
        if not args.json:
            print(f"{name:<58} {us:8.1f} µs/call  {note}")

    import redis

    r = redis.Redis.from_url(url)
    row("floor: redis-py PING", best_us(r.ping, n))

    huge = 1e9  # every call granted
    b = headway.SharedBucket(url, f"b-{tag}", huge, burst=huge)
    row("headway SharedBucket.take()", best_us(b.take, n))
    row("headway SharedBucket.atake() (asyncio)", best_async_us(b.atake, n))
    w = headway.SharedWindow(url, f"w-{tag}", 10**9, 60.0)
    row("headway SharedWindow.take() (exact sliding window)", best_us(w.take, n))

    import limits
    from limits import RateLimitItemPerMinute, storage, strategies

    store = storage.storage_from_string(url)
    item = RateLimitItemPerMinute(10**9)
    for name, strat in [
        ("FixedWindowRateLimiter", strategies.FixedWindowRateLimiter),
        ("SlidingWindowCounterRateLimiter", strategies.SlidingWindowCounterRateLimiter),
        ("MovingWindowRateLimiter (exact)", strategies.MovingWindowRateLimiter),
    ]:
        lim = strat(store)
        key = f"l-{tag}-{name}"
        row(f"limits {name}.hit()", best_us(lambda: lim.hit(item, key), n))
        assert lim.hit(item, key), name

    assert b.take() and w.take()
    versions = {
        "python": sys.version.split()[0],
        "headway": headway.__version__,
        "limits": limits.__version__,
        "redis-py": redis.__version__,
    }
    if args.json:
        print(json.dumps({"calls": n, "rows": rows, "versions": versions}))


if __name__ == "__main__":
    main()
