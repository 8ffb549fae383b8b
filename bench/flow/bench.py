"""Per-call cost of headway's flow control from Python, beside its peers.

    pip install -r bench/flow/requirements.txt   # tenacity, backoff, pyrate-limiter, limits
    python bench/flow/bench.py [--quick]

Each row is one statement timed by ``timeit`` (a compiled ``for`` loop, no
per-call function wrapper), best of several runs, in nanoseconds per call
with ``time.perf_counter_ns``. "x headway" is the row's cost over headway's
first row in the same group: above 1 the peer is slower. The floor rows are
empty native calls with the same arguments (``_native._noop`` /
``_native._Noop().call``), so the cost of crossing into Rust is visible next
to what headway adds on top of it. A missing peer is skipped, not faked.
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import sys
import timeit
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import headway
from headway import _native

# ---------------------------------------------------------------- helpers


@dataclass
class Row:
    name: str
    ns: float
    note: str = ""


@dataclass
class Group:
    title: str
    rows: list[Row] = field(default_factory=list)


def best_ns(stmt: str, setup: str, env: dict[str, Any], number: int, repeat: int) -> float:
    timer = timeit.Timer(stmt, setup, timer=timeit.default_timer, globals=env)
    return min(timer.repeat(repeat=repeat, number=number)) / number * 1e9


def best_async_ns(make: Callable[[], Any], number: int, repeat: int) -> float:
    """`make()` returns an awaitable-returning callable; time awaiting it."""

    async def run() -> float:
        call = make()
        best = float("inf")
        for _ in range(repeat):
            t0 = timeit.default_timer()
            for _ in range(number):
                await call()
            best = min(best, timeit.default_timer() - t0)
        return best / number * 1e9

    return asyncio.run(run())


def optional(name: str) -> Any:
    try:
        return __import__(name)
    except ImportError:
        return None


# ---------------------------------------------------------------- peers


class HandBucket:
    """A token bucket as people write it in pure Python."""

    __slots__ = ("rate", "burst", "tokens", "at")

    def __init__(self, rate: float, burst: float) -> None:
        import time

        self.rate, self.burst, self.tokens, self.at = rate, burst, burst, time.monotonic()

    def take(self, n: float = 1.0) -> bool:
        import time

        now = time.monotonic()
        tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if tokens >= n:
            self.tokens = tokens - n
            return True
        self.tokens = tokens
        return False


def hand_delay(retry: int, base: float = 0.1, factor: float = 2.0, cap: float = 1.0) -> float:
    import random

    return random.random() * min(cap, base * factor ** (retry - 1))


def answer() -> int:
    return 42


async def aanswer() -> int:
    return 42


# ---------------------------------------------------------------- groups


def groups(number: int, repeat: int) -> list[Group]:
    tenacity = optional("tenacity")
    backoff = optional("backoff")
    pyrate = optional("pyrate_limiter")
    limits = optional("limits")
    env: dict[str, Any] = {
        "headway": headway,
        "_native": _native,
        "HandBucket": HandBucket,
        "hand_delay": hand_delay,
        "answer": answer,
        "tenacity": tenacity,
        "backoff": backoff,
        "pyrate": pyrate,
        "limits": limits,
    }

    def t(stmt: str, setup: str = "pass", n: int | None = None) -> float:
        return best_ns(stmt, setup, env, n or number, repeat)

    out: list[Group] = []
    big = "1e12"

    # Bucket.take -------------------------------------------------------
    g = Group("Bucket.take (admitted)")
    g.rows.append(Row("headway Bucket.take()", t("b.take()", f"b = headway.Bucket({big})"), "now from Rust's monotonic clock"))
    g.rows.append(Row("headway Bucket.take(now)", t("b.take(1.0)", f"b = headway.Bucket({big})"), "explicit time"))
    g.rows.append(Row("hand-rolled pure-Python bucket", t("b.take()", f"b = HandBucket({big}, {big})")))
    if pyrate:
        g.rows.append(Row(
            "pyrate-limiter 4 TokenBucket try_acquire",
            t("l.try_acquire('k', blocking=False)",
              "b = pyrate.StateBucket([pyrate.Rate(10**12, pyrate.Duration.SECOND)], algorithm=pyrate.TokenBucket())\n"
              "l = pyrate.Limiter(b)", n=max(number // 20, 1000)),
        ))
    if limits:
        g.rows.append(Row(
            "limits FixedWindowRateLimiter.hit",
            t("lim.hit(item, 'k')",
              "from limits import storage, strategies, parse\n"
              "lim = strategies.FixedWindowRateLimiter(storage.MemoryStorage())\n"
              "item = parse('1000000000/second')", n=max(number // 10, 1000)),
        ))
    g.rows.append(Row("floor: _native._noop()", t("f()", "f = _native._noop")))
    g.rows.append(Row("floor: _Noop().call()", t("o.call()", "o = _native._Noop()")))
    g.rows.append(Row("floor: _Noop().call(t, n)", t("o.call(1.0, 1.0)", "o = _native._Noop()")))
    out.append(g)

    # Window.take --------------------------------------------------------
    wn = max(number // 10, 1000)
    g = Group("Window.take (admitted; fresh limiter each run)")
    g.rows.append(Row("headway Window.take()", t("w.take()", "w = headway.Window(10**9, 3600.0)", n=wn), "exact, stamps kept"))
    g.rows.append(Row("headway Window.take(now)", t("w.take(1.0)", "w = headway.Window(10**9, 3600.0)", n=wn)))
    if limits:
        g.rows.append(Row(
            "limits MovingWindowRateLimiter.hit",
            t("lim.hit(item, 'k')",
              "from limits import storage, strategies, parse\n"
              "lim = strategies.MovingWindowRateLimiter(storage.MemoryStorage())\n"
              "item = parse('1000000000/hour')", n=wn), "exact, stamps kept",
        ))
        g.rows.append(Row(
            "limits SlidingWindowCounterRateLimiter.hit",
            t("lim.hit(item, 'k')",
              "from limits import storage, strategies, parse\n"
              "lim = strategies.SlidingWindowCounterRateLimiter(storage.MemoryStorage())\n"
              "item = parse('1000000000/hour')", n=wn), "approximate",
        ))
    if pyrate:
        g.rows.append(Row(
            "pyrate-limiter 4 InMemoryBucket (sliding log)",
            t("l.try_acquire('k', blocking=False)",
              "b = pyrate.InMemoryBucket([pyrate.Rate(10**9, pyrate.Duration.HOUR)])\n"
              "l = pyrate.Limiter(b)", n=wn), "exact, stamps kept",
        ))
    g.rows.append(Row("floor: _Noop().call()", t("o.call()", "o = _native._Noop()")))
    out.append(g)

    # Backoff.delay ------------------------------------------------------
    g = Group("Backoff.delay (retry 2)")
    g.rows.append(Row("headway Backoff.delay(2)", t("b.delay(2)", "b = headway.Backoff()"), "draw from Rust's RNG"))
    g.rows.append(Row("headway Backoff.delay(2, random=r)", t("b.delay(2, random=0.5)", "b = headway.Backoff()"), "explicit draw (keyword)"))
    g.rows.append(Row("hand-rolled pure Python", t("hand_delay(2)")))
    if tenacity:
        g.rows.append(Row(
            "tenacity wait_random_exponential(state)",
            t("w(s)",
              "w = tenacity.wait_random_exponential(multiplier=0.1, max=1.0)\n"
              "s = tenacity.RetryCallState(tenacity.Retrying(), None, (), {})\n"
              "s.attempt_number = 2"),
        ))
    if backoff:
        g.rows.append(Row(
            "backoff full_jitter(next(expo))",
            t("j(next(gen))", "gen = backoff.expo(base=2, factor=0.1, max_value=1.0)\nj = backoff.full_jitter\nnext(gen)"),
        ))
    g.rows.append(Row("floor: _Noop().call(r)", t("o.call(2)", "o = _native._Noop()")))
    out.append(g)

    # Pool take + give ---------------------------------------------------
    g = Group("Pool take + give (one idle item)")
    pool_setup = "p = headway.Pool()\nc = object()\np.take(0.0)\np.made(c, 0.0)\np.give(c, 0.0)"
    g.rows.append(Row("headway Pool.take() + give(item)", t("p.give(p.take().item)", pool_setup), "two native calls + a Ready"))
    g.rows.append(Row("headway Pool.take(t) + give(item, t)", t("p.give(p.take(1.0).item, 1.0)", pool_setup)))
    g.rows.append(Row(
        "headway Pooled: with acquire()",
        t("with q.acquire(): pass", "q = headway.Pooled(object, None, evict_every=0)\nwith q.acquire(): pass"),
        "the driver, in Python",
    ))
    def pooled_one() -> Callable[[], Any]:
        q = headway.Pooled(object, None, evict_every=0)

        async def one() -> None:
            async with q.acquire():
                pass

        return one

    g.rows.append(Row(
        "headway Pooled: async with acquire()",
        best_async_ns(pooled_one, max(number // 10, 1000), repeat),
        "awaited in a loop",
    ))
    g.rows.append(Row("hand-rolled list pool (pop/append)", t("free.append(free.pop())", "free = [object()]"), "no ages, no limits"))
    g.rows.append(Row(
        "queue.LifoQueue get_nowait/put_nowait",
        t("q.put_nowait(q.get_nowait())", "import queue\nq = queue.LifoQueue()\nq.put(object())"),
    ))
    g.rows.append(Row("floor: 2 x _Noop().call(t)", t("o.call(1.0); o.call(1.0)", "o = _native._Noop()")))
    out.append(g)

    # @retry success -----------------------------------------------------
    g = Group("@retry-wrapped successful call")
    g.rows.append(Row("headway @retry", t("f()", "f = headway.retry(answer)"), "success path is pure Python"))
    if tenacity:
        g.rows.append(Row(
            "tenacity @retry(stop_after_attempt(3))",
            t("f()", "f = tenacity.retry(stop=tenacity.stop_after_attempt(3), wait=tenacity.wait_random_exponential(0.1, 1.0))(answer)",
              n=max(number // 20, 1000)),
        ))
    if backoff:
        g.rows.append(Row(
            "backoff @on_exception(expo, max_tries=3)",
            t("f()", "f = backoff.on_exception(backoff.expo, Exception, max_tries=3, logger=None)(answer)",
              n=max(number // 10, 1000)),
        ))
    g.rows.append(Row("floor: the bare call", t("answer()")))
    out.append(g)

    # async @retry success -----------------------------------------------
    g = Group("async @retry-wrapped successful call (awaited in a loop)")
    an = max(number // 10, 1000)
    g.rows.append(Row("headway @retry (async def)", best_async_ns(lambda: headway.retry(aanswer), an, repeat)))
    if tenacity:
        g.rows.append(Row(
            "tenacity @retry (async def)",
            best_async_ns(lambda: tenacity.retry(stop=tenacity.stop_after_attempt(3))(aanswer), max(an // 10, 100), repeat),
        ))
    if backoff:
        g.rows.append(Row(
            "backoff @on_exception (async def)",
            best_async_ns(lambda: backoff.on_exception(backoff.expo, Exception, max_tries=3, logger=None)(aanswer), max(an // 10, 100), repeat),
        ))
    g.rows.append(Row("floor: the bare await", best_async_ns(lambda: aanswer, an, repeat)))
    out.append(g)

    # loop overhead, for reading the floors
    g = Group("timing loop itself")
    g.rows.append(Row("empty statement (pass)", t("pass"), "included in every row above"))
    out.append(g)
    return out


def table(gs: list[Group]) -> str:
    lines = ["| operation | implementation | ns/call | x headway | note |", "|---|---|---:|---:|---|"]
    for g in gs:
        ref = g.rows[0].ns
        for i, r in enumerate(g.rows):
            ratio = "1.00" if i == 0 else f"{r.ns / ref:.2f}"
            lines.append(f"| {g.title if i == 0 else ''} | {r.name} | {r.ns:,.0f} | {ratio} | {r.note} |")
    return "\n".join(lines)


def verdicts(gs: list[Group]) -> list[str]:
    def find(title: str, name: str) -> float | None:
        for g in gs:
            if g.title.startswith(title):
                for r in g.rows:
                    if r.name.startswith(name):
                        return r.ns
        return None

    out = []
    take = find("Bucket.take", "headway Bucket.take()")
    hand = find("Bucket.take", "hand-rolled")
    if take is not None and hand is not None:
        ok = take <= 150 and take < hand
        out.append(
            f"- Bucket.take <= 150 ns and under the hand-rolled bucket: {'MET' if ok else 'MISSED'} "
            f"({take:.0f} ns; hand-rolled {hand:.0f} ns, {hand / take:.1f}x)"
        )
    r = find("@retry", "headway @retry")
    ten = find("@retry", "tenacity")
    if r is not None:
        line = f"- @retry success <= 1 us: {'MET' if r <= 1000 else 'MISSED'} ({r:.0f} ns)"
        if ten is not None:
            line += f"; >= 20x faster than tenacity: {'MET' if ten / r >= 20 else 'MISSED'} ({ten / r:.0f}x)"
        out.append(line)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    ap.add_argument("--number", type=int, default=None, help="calls per run for the fast rows")
    ap.add_argument("--repeat", type=int, default=None, help="runs per row (best is kept)")
    a = ap.parse_args()
    number = a.number or (20_000 if a.quick else 400_000)
    repeat = a.repeat or (3 if a.quick else 7)
    gs = groups(number, repeat)
    vers = []
    for mod in ("tenacity", "backoff", "pyrate_limiter", "limits"):
        m = optional(mod)
        if m is not None:
            from importlib.metadata import version

            dist = {"pyrate_limiter": "pyrate-limiter"}.get(mod, mod)
            vers.append(f"{dist} {version(dist)}")
    print(f"Python {platform.python_version()} ({sys.implementation.name}), headway {headway.__version__}; "
          f"{', '.join(vers) or 'no peers installed'}; best of {repeat} runs\n")
    print(table(gs))
    print()
    print("\n".join(verdicts(gs)))


if __name__ == "__main__":
    main()
