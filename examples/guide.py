"""Six answers, one caller: the moonpool guide, in Python.

The pool is a bookkeeper. It says what to do with a resource; you open it,
close it, and wait. The six chapters walk the whole surface in that order,
and every line this prints is asserted by tests-py/test_guide.py, so the
guide cannot drift from the code.

Every ``now`` is passed explicitly (float seconds) and every draw too, so
the output is the same on every run. Run: ``python examples/guide.py``.
"""

from __future__ import annotations

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


def describe(t: Taken[int]) -> str:
    """One answer, as the text this guide prints."""
    match t:
        case Ready(item):
            return f"Ready({item})"
        case Stale(item):
            return f"Stale({item})"
        case Make():
            return "Make"
        case Wait():
            return "Wait"
        case Later(delay):
            return f"Later({round(delay * 1e9) // 1_000_000} ms)"
        case Shed():
            return "Shed"
    raise AssertionError(t)


def chapter(n: int, title: str) -> None:
    print(f"\n== {n:02d} {title}")


# 01 -------------------------------------------------------------------------
chapter(1, "The first take")
# A pool of ints with the preset limits: ten live (HikariCP, database/sql).
pool: Pool[int] = Pool()
print("live:", pool.live)
print("take:", describe(pool.take(0.0)))  # nothing to lend, room for ten
pool.made(1, 0.0)  # the one we opened, registered as lent
print("take:", describe(pool.take(0.0)))
pool.made(2, 0.0)
print("live:", pool.live)  # two live, nothing idle
print("give 1:", pool.give(1, 0.0))  # True: it kept it
print("idle:", pool.idle)
print("take:", describe(pool.take(1e-9)))  # the most recently returned first

# 02 -------------------------------------------------------------------------
chapter(2, "Limits, and what happens at the ceiling")
small: Pool[int] = Pool(limits=Limits(size=2))
small.take(0.0)
small.made(1, 0.0)
small.take(0.0)
small.made(2, 0.0)
print("live:", small.live)
print("busy:", small.busy)
# Full: not a queue, an answer. The caller decides what Wait means.
print("take:", describe(small.take(0.0)))

# 03 -------------------------------------------------------------------------
chapter(3, "Retiring: idle age and lifetime")
p: Pool[int] = Pool(limits=Limits(size=4, keep=1.0))
p.take(0.0)
p.made(7, 0.0)
p.give(7, 0.0)
print("evict at 0.5 s:", p.evict(0.5))  # nothing is due yet
print("evict at 1.5 s:", p.evict(1.5))  # the idle one is
print("idle:", p.idle)
# A timer can be late, so take checks the age itself: Stale, never skipped.
p.take(0.0)
p.made(8, 0.0)
p.give(8, 0.0)
print("take at 2 s:", describe(p.take(2.0)))
# Lifetime: a returned item keeps the moment it was made.
aged: Pool[int] = Pool(limits=Limits(size=2, life=4.0))
aged.take(0.0)
aged.made(5, 0.0)
aged.give(5, 3.0)
print("idle:", aged.idle)
print("take at 5 s:", describe(aged.take(5.0)))  # made 5 s ago, life 4 s

# 04 -------------------------------------------------------------------------
chapter(4, "A ward in front")
guarded: Pool[int] = Pool(limits=Limits(size=4), ward=Ward(breaker=Breaker()))
print("refusal:", guarded.refusal(0.0))
for i in range(8):
    now = i * 0.1
    if guarded.take(now, roll=0.99) == Make():
        guarded.unmade(now, roll=0.5)  # every make fails
print("refusal after 8 failed makes:", round(guarded.refusal(0.8), 3))
print("take, roll 0.1:", describe(guarded.take(0.9, roll=0.1)))  # inside the refused share
print("take, roll 0.99:", describe(guarded.take(0.9, roll=0.99)))  # outside it
# A backoff holds makes after a failure instead of refusing them.
held: Pool[int] = Pool(limits=Limits(size=4), ward=Ward(backoff=Backoff()))
held.take(0.0)
held.unmade(0.0, roll=0.5)  # held for delay(1, 0.5) = 50 ms from the failure
print("take at 1 ms:", describe(held.take(0.001)))
print("take at 5 s:", describe(held.take(5.0)))

# 05 -------------------------------------------------------------------------
chapter(5, "Picking between pools")
a: Pool[int] = Pool(limits=Limits(size=4))
b: Pool[int] = Pool(limits=Limits(size=4))
a.take(0.0)
a.made(1, 0.0)
print("pick:", pick([a, b], 0.0, first=0.0, second=0.9))  # b has nothing in use
print("pick from none:", pick([], 0.0, first=0.0, second=0.0))

# 06 -------------------------------------------------------------------------
chapter(6, "A client loop")

Conn = int
log: list[str] = []


def use(c: Conn) -> None:
    log.append(f"use {c}")


def close(c: Conn) -> None:
    log.append(f"close {c}")


def open_conn() -> Conn | None:
    return 1


def serve(pool: Pool[Conn], now: float, roll: float) -> None:
    """All six answers in one place: the whole of what a caller writes."""
    conn: Conn | None = None
    match pool.take(now, roll=roll):
        case Ready(c):
            conn = c
        case Stale(c):
            close(c)  # too old; it is ours now, and no longer counted
        case Make():
            opened = open_conn()
            if opened is not None:
                pool.made(opened, now)
                conn = opened
            else:
                pool.unmade(now, roll=roll)
        case Wait():
            log.append("queue")
        case Later(delay):
            log.append(f"later {delay}")
        case Shed():
            log.append("fail fast")
    if conn is not None:
        use(conn)
        if not pool.give(conn, now):  # False: enough idle already
            close(conn)


client: Pool[Conn] = Pool(limits=Limits(size=1, keep=10.0))
serve(client, 0.0, 0.5)  # Make: open, use, give back
serve(client, 1.0, 0.5)  # Ready: reuse the idle one
serve(client, 20.0, 0.5)  # Stale: idle 19 s, past keep; close it
serve(client, 20.0, 0.5)  # Make again
other = client.take(21.0)  # someone else holds the only one...
serve(client, 21.0, 0.5)  # ...so Wait: queue
if isinstance(other, Ready):
    client.give(other.item, 21.0)
print("\n".join(log))
print("live:", client.live, "idle:", client.idle)
