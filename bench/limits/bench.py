"""Per-call cost of headway's SharedBucket from Python, beside the `limits`
package on the same Redis.

    pip install -r bench/limits/requirements.txt     # limits[redis]
    python bench/limits/bench.py REDIS_URL [--calls N] [--json]

(`bash bench/limits/run.sh` starts a redis-server, runs this and the Node
side in one run, and writes results.json / results.md.)

Each row is N calls made one after another (each waits for its answer), best
of five rounds (every row once a round), in microseconds per call: the
latency a request pays for its limit check. Every limiter is set so that
every call is granted — the answer a limiter gives most often, and the same
work on every side. The floor row is a bare `PING` through redis-py: the
round trip every row pays. headway's window row is the exact sliding window
(as `limits`' moving window); its bucket has no direct peer in `limits`,
whose nearest is the sliding-window counter. The asyncio rows await one
call at a time on one event loop: headway's `atake()` (on the loop's own
socket) beside `limits`' async storage over redis-py's asyncio client.
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


def best_us_each(named: list[tuple[str, Callable[[], Any], bool]], n: int, rounds: int = 5) -> list[float]:
    """Each call's best round, in µs per call, the rows measured in rounds
    (every row once per round): on a shared or virtual machine the cost of
    a round trip drifts over seconds, and rows run one after another would
    each sample a different stretch of it. A row whose third item is True
    is a coroutine function, awaited on one event loop."""
    loop = asyncio.new_event_loop()

    def batch(call: Callable[[], Any], is_async: bool, k: int) -> None:
        if is_async:

            async def run() -> None:
                for _ in range(k):
                    await call()

            loop.run_until_complete(run())
        else:
            for _ in range(k):
                call()

    for _, call, is_async in named:
        batch(call, is_async, min(n, 200))
    best = [float("inf")] * len(named)
    for _ in range(rounds):
        for i, (_, call, is_async) in enumerate(named):
            t0 = time.perf_counter()
            batch(call, is_async, n)
            best[i] = min(best[i], time.perf_counter() - t0)
    loop.close()
    return [b / n * 1e6 for b in best]


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
    huge = 1e9  # every call granted
    b = headway.SharedBucket(url, f"b-{tag}", huge, burst=huge)
    w = headway.SharedWindow(url, f"w-{tag}", 10**9, 60.0)

    import limits
    from limits import RateLimitItemPerMinute, storage, strategies

    store = storage.storage_from_string(url)
    item = RateLimitItemPerMinute(10**9)
    named: list[tuple[str, Callable[[], Any], bool]] = [
        ("floor: redis-py PING", r.ping, False),
        ("headway SharedBucket.take()", b.take, False),
        ("headway SharedBucket.atake() (asyncio)", b.atake, True),
        ("headway SharedWindow.take() (exact sliding window)", w.take, False),
    ]
    limiters = []
    for name, strat in [
        ("FixedWindowRateLimiter", strategies.FixedWindowRateLimiter),
        ("SlidingWindowCounterRateLimiter", strategies.SlidingWindowCounterRateLimiter),
        ("MovingWindowRateLimiter (exact)", strategies.MovingWindowRateLimiter),
    ]:
        lim = strat(store)
        key = f"l-{tag}-{name}"
        limiters.append((name, lim, key))
        named.append((f"limits {name}.hit()", lambda lim=lim, key=key: lim.hit(item, key), False))
    # The asyncio peer: `limits`' async storage on redis-py's asyncio client.
    from limits.aio import strategies as aio_strategies

    astore = storage.storage_from_string(url.replace("redis://", "async+redis://"), implementation="redispy")
    alim = aio_strategies.FixedWindowRateLimiter(astore)
    akey = f"l-{tag}-async"
    named.append(("limits (asyncio) FixedWindowRateLimiter.hit()", lambda: alim.hit(item, akey), True))
    for (name, _, _), us in zip(named, best_us_each(named, n)):
        row(name, us)
    for name, lim, key in limiters:
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
