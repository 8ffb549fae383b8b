"""The six chapters of the moonpool guide, with explicit times, and the
runnable guide (examples/guide.py) with its whole output asserted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from headway import (
    Backoff,
    Breaker,
    Later,
    Limits,
    Make,
    Pool,
    Ready,
    Shed,
    Stale,
    Taken,
    Wait,
    Ward,
    pick,
)

ROOT = Path(__file__).resolve().parent.parent


def d(t: Taken[int]) -> str:
    match t:
        case Ready(i):
            return f"Ready({i})"
        case Stale(i):
            return f"Stale({i})"
        case Make():
            return "Make"
        case Wait():
            return "Wait"
        case Later(s):
            return f"Later({round(s * 1e9) // 1_000_000} ms)"
        case Shed():
            return "Shed"
    raise AssertionError(t)


def test_01_first_take() -> None:
    pool: Pool[int] = Pool()
    assert pool.live == 0
    assert d(pool.take(0.0)) == "Make"
    pool.made(1, 0.0)
    assert d(pool.take(0.0)) == "Make"
    pool.made(2, 0.0)
    assert (pool.live, pool.idle, pool.busy) == (2, 0, 2)
    assert pool.give(1, 0.0) is True
    assert pool.idle == 1
    assert d(pool.take(1e-9)) == "Ready(1)"


def test_02_limits() -> None:
    small: Pool[int] = Pool(limits=Limits(size=2))
    small.take(0.0)
    small.made(1, 0.0)
    small.take(0.0)
    small.made(2, 0.0)
    assert small.live == 2
    assert small.busy == 2
    assert d(small.take(0.0)) == "Wait"


def test_03_retiring() -> None:
    p: Pool[int] = Pool(limits=Limits(size=4, keep=1.0))
    p.take(0.0)
    p.made(7, 0.0)
    assert p.give(7, 0.0)
    assert p.evict(0.5) == []
    assert p.evict(1.5) == [7]
    assert p.idle == 0
    p.take(0.0)
    p.made(8, 0.0)
    p.give(8, 0.0)
    assert d(p.take(2.0)) == "Stale(8)"
    assert p.live == 0

    aged: Pool[int] = Pool(limits=Limits(size=2, life=4.0))
    aged.take(0.0)
    aged.made(5, 0.0)
    assert aged.give(5, 3.0)
    assert aged.idle == 1
    assert d(aged.take(5.0)) == "Stale(5)"


def test_04_ward() -> None:
    guarded: Pool[int] = Pool(limits=Limits(size=4), ward=Ward(breaker=Breaker()))
    assert guarded.refusal(0.0) == 0.0
    for i in range(8):
        if guarded.take(i * 0.1, roll=0.99) == Make():
            guarded.unmade(i * 0.1, roll=0.5)
    assert abs(guarded.refusal(0.8) - 8 / 9) < 1e-12
    assert d(guarded.take(0.9, roll=0.1)) == "Shed"
    assert d(guarded.take(0.9, roll=0.99)) == "Make"

    held: Pool[int] = Pool(limits=Limits(size=4), ward=Ward(backoff=Backoff()))
    held.take(0.0)
    held.unmade(0.0, roll=0.5)
    assert d(held.take(0.001)) == "Later(49 ms)"
    assert d(held.take(5.0)) == "Make"


def test_05_pick() -> None:
    a: Pool[int] = Pool(limits=Limits(size=4))
    b: Pool[int] = Pool(limits=Limits(size=4))
    a.take(0.0)
    a.made(1, 0.0)
    assert pick([a, b], 0.0, first=0.0, second=0.9) == 1
    assert pick([], 0.0, first=0.0, second=0.0) is None


def test_06_client_loop_every_answer() -> None:
    """The guide's serve(): each of the six answers reached and acted on."""
    seen: list[str] = []
    closed: list[object] = []

    def serve(pool: Pool[object], now: float, roll: float, opens: bool = True) -> None:
        conn: object | None = None
        match pool.take(now, roll=roll):
            case Ready(c):
                seen.append("ready")
                conn = c
            case Stale(c):
                seen.append("stale")
                closed.append(c)
            case Make():
                seen.append("make")
                if opens:
                    conn = object()
                    pool.made(conn, now)
                else:
                    pool.unmade(now, roll=roll)
            case Wait():
                seen.append("wait")
            case Later(_):
                seen.append("later")
            case Shed():
                seen.append("shed")
        if conn is not None and not pool.give(conn, now):
            closed.append(conn)

    pool: Pool[object] = Pool(
        limits=Limits(size=1, keep=10.0),
        ward=Ward(breaker=Breaker(), backoff=Backoff(jitter="rigid")),
    )
    serve(pool, 0.0, 0.99)  # make
    serve(pool, 1.0, 0.99)  # ready
    serve(pool, 20.0, 0.99)  # stale
    serve(pool, 20.0, 0.99, opens=False)  # make, which fails
    serve(pool, 20.05, 0.99)  # later: held 100 ms
    lent = pool.take(21.0, roll=0.99)  # make (room for one)
    assert lent == Make()
    serve(pool, 21.0, 0.99)  # wait: the one room is reserved
    pool.unmade(21.0, roll=0.0)
    # The breaker saw three requests and one accept: refusal 1/4.
    serve(pool, 30.0, 0.1)  # shed
    assert seen == ["make", "ready", "stale", "make", "later", "wait", "shed"]
    assert len(closed) == 1


def test_guide_example_output() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "guide.py")],
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
        timeout=60,
    ).stdout
    assert out == GUIDE_OUTPUT


GUIDE_OUTPUT = """
== 01 The first take
live: 0
take: Make
take: Make
live: 2
give 1: True
idle: 1
take: Ready(1)

== 02 Limits, and what happens at the ceiling
live: 2
busy: 2
take: Wait

== 03 Retiring: idle age and lifetime
evict at 0.5 s: []
evict at 1.5 s: [7]
idle: 0
take at 2 s: Stale(8)
idle: 1
take at 5 s: Stale(5)

== 04 A ward in front
refusal: 0.0
refusal after 8 failed makes: 0.889
take, roll 0.1: Shed
take, roll 0.99: Make
take at 1 ms: Later(49 ms)
take at 5 s: Make

== 05 Picking between pools
pick: 1
pick from none: None

== 06 A client loop
use 1
use 1
close 1
use 1
queue
live: 1 idle: 1
"""
