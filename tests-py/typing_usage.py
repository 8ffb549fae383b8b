"""A type-checked usage file: `mypy --strict tests-py/typing_usage.py`.

Not a test module (pytest does not collect it); test_typing.py runs mypy on
it and stubtest on the package. Each assert_type pins what a user's checker
infers, so a stub that drifts from the runtime fails here.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta
from collections.abc import Callable
from typing import Any, assert_never, assert_type

import headway
from headway import (
    Backoff,
    Breaker,
    Bucket,
    Gate,
    Jitter,
    Later,
    Limits,
    Make,
    Pool,
    Pooled,
    Ready,
    Retry,
    Shed,
    Stale,
    Taken,
    Wait,
    Ward,
    Window,
    pick,
    retry,
    retrying,
)


class Conn:
    def query(self) -> int:
        return 1


def client(pool: Pool[Conn], now: float) -> int:
    t = pool.take(now, roll=0.5)
    assert_type(t, Ready[Conn] | Stale[Conn] | Make | Wait | Later | Shed)
    match t:
        case Ready(conn):
            assert_type(conn, Conn)
            n = conn.query()
            pool.give(conn, now)
            return n
        case Stale(conn):
            assert_type(conn, Conn)
            return 0
        case Make():
            c = Conn()
            pool.made(c, now)
            return c.query()
        case Wait():
            return -1
        case Later(delay):
            assert_type(delay, float)
            return -2
        case Shed():
            return -3
        case _:
            assert_never(t)


def answers(t: Taken[Conn]) -> str:
    if isinstance(t, Ready):
        assert_type(t.item, Conn)
    return repr(t)


pool: Pool[Conn] = Pool(
    limits=Limits(size=4, keep=timedelta(minutes=5)),
    ward=Ward(breaker=Breaker(k=2.0), backoff=Backoff(jitter=Jitter.EQUAL)),
)
assert_type(pool.live, int)
assert_type(pool.evict(), list[Conn])
assert_type(pool.close(), list[Conn])
assert_type(pool.refusal(1.0), float)
assert_type(pick([pool, Pool()], first=0.1, second=0.9), int | None)

b = Backoff(base=0.05, attempts=5, jitter="full")
assert_type(b.delay(1, random=0.3, previous=timedelta(milliseconds=20)), float)
assert_type(b.schedule([0.1, 0.2]), list[float])
assert_type(b.more(2), bool)
assert_type(b.jitter, Jitter)

bucket = Bucket(10.0, burst=20.0)
assert_type(bucket.take(n=2), bool)
assert_type(bucket.next(), float)
window = Window(1000, timedelta(days=1))
assert_type(window.left(), int)
gate = Gate(64)
with gate as g:
    assert_type(g, Gate)


@retry
def fetch(url: str, *, tries: int = 0) -> bytes:
    return url.encode()


assert_type(fetch("x", tries=1), bytes)


@retry(backoff=Backoff(attempts=5), on=(ConnectionError, TimeoutError))
async def afetch(url: str) -> bytes:
    return url.encode()


policy = retry(backoff=b, on=OSError)
assert_type(policy, Retry)
assert_type(policy.call(fetch, "y"), bytes)
assert_type(retrying(len, "abc"), int)


async def open_conn() -> Conn:
    return Conn()


async def close_conn(c: Conn) -> None:
    pass


async def main() -> None:
    assert_type(await afetch("z"), bytes)
    await bucket.wait(1.0)
    async with gate:
        pass
    pooled = Pooled(open_conn, close_conn, limits=Limits(size=2), timeout=1.0)
    assert_type(pooled, Pooled[Conn])
    async with pooled.acquire() as conn:
        assert_type(conn, Conn)
    n = await pooled.use(lambda c: c.query())
    assert_type(n, int)

    async def q(c: Conn) -> str:
        return str(c.query())

    assert_type(await pooled.use(q), str)
    await pooled.aclose()
    sync = Pooled(Conn, None)
    assert_type(sync, Pooled[Conn])
    with sync.acquire() as c2:
        assert_type(c2, Conn)
    assert_type(sync.use_sync(lambda c: c.query()), int)
    sync.close()


# ---------------------------------------------------------------- tasks

from datetime import datetime, timezone  # noqa: E402

from headway import (  # noqa: E402
    App,
    AsyncTask,
    Context,
    Cron,
    Every,
    Exponential,
    Fixed,
    Handle,
    Signature,
    Task,
    chain,
    chord,
    group,
)
from headway.schedule import Scheduler  # noqa: E402
from headway.testing import VirtualClock, push_raw  # noqa: E402

vclock = VirtualClock(start=datetime(2026, 1, 1, tzinfo=timezone.utc))
app = App("memory://", clock=vclock)


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="typed.greet", retries=2, backoff=Fixed(1.0), timeout=5.0, rate="10/m")
def greet(name: str) -> str:
    return f"hello {name}"


@app.task(name="typed.keyed", rate="100/s", rate_scope="global", concurrency_limit=1)
def keyed(k: str) -> str:
    return k


@app.task(bind=True, backoff=Exponential(base=0.5, cap=30.0))
def bound(ctx: Context, n: int) -> list[int]:
    assert_type(ctx.update_state("PROGRESS", {"done": n}), None)
    ctx.update_state(state="STEP", meta=[1, 2])
    return [ctx.attempt, n]


@app.task
async def aadd(x: int, y: int) -> int:
    return x + y


t_add: Task[[int, int], int] = add
t_aadd: AsyncTask[[int, int], int] = aadd
t_bound: Task[[int], list[int]] = bound  # the Context is not the caller's to pass
assert_type(add(1, 2), int)
assert_type(add.delay(1, 2), Handle[int])
assert_type(greet.apply_async(("ada",), countdown=5, priority=3), Handle[str])
assert_type(
    keyed.apply_async(("a",), concurrency_key="cust-7", dedupe_key="k", dedupe_ttl=10.0),
    Handle[str],
)
assert_type(bound.delay(3), Handle[list[int]])
assert_type(aadd.delay(1, 2), Handle[int])
assert_type(add.s(1, 2), Signature[int])
assert_type(add.si(1, 2) | add.s(3), chain)
assert_type(chain(add.s(1, 2), add.s(3)).send(), Handle[Any])
assert_type(group(add.s(i, i) for i in range(3)), group)
assert_type(chord([add.s(1, 1)], add.s(0)).delay(), Handle[Any])
assert_type(app.send("typed.greet", ("ada",)), Handle[Any])
assert_type(app.send_task("elsewhere", kwargs={"a": 1}), Handle[Any])
state: str = app.handle("id").state()
assert_type(app.handle("id").info(), Any)
assert_type(app.task_names(), list[str])


def use_handle(h: Handle[int]) -> int:
    if h.ready() and h.successful():
        return h.get(timeout=1.0)
    h.revoke(terminate=True)
    return -1


async def await_handle(h: Handle[int]) -> int:
    v = await h
    assert_type(v, int)
    return v


async def run_worker() -> None:
    w = app.worker(queues=["default"], concurrency=2)
    w.stop(0.1, wait=False)
    await w.run_async()


beat = app.beat()
beat.add("every", add, (1, 2), Every(60))
beat.add("nightly", "typed.greet", ("ada",), Cron("0 3 * * *", tz="Europe/London"))
assert_type(beat.pending(), list[tuple[str, datetime]])
sched = Scheduler(clock=vclock)
sched.add("job", lambda: None, Every(10))
assert_type(sched.pending(), list[tuple[str, datetime]])
assert_type(headway.current, Callable[[], Context])

dead = app.dead_letters("default", limit=10)
assert_type(dead, list[headway.DeadLetter])
for letter in dead:
    assert_type(letter.reason, str)
    assert_type(letter.queue, str)
    assert_type(letter.id, str | None)
    assert_type(letter.at, datetime)
    assert_type(letter.raw, bytes)
    assert_type(letter.size, int)
assert_type(app.dead_letters(), list[headway.DeadLetter])
assert_type(app.dead_count("default"), int)
assert_type(app.requeue_dead("default"), int)
assert_type(app.requeue_dead("default", 5, ids=["id-1"]), int)
assert_type(app.purge_dead("default"), int)
push_raw(app, "default", b"\x80 not a message")

try:
    headway._native._panic()
except headway.PanicError as e:
    assert_type(e, headway.PanicError)

if __name__ == "__main__":
    asyncio.run(main())


def shared_limits(url: str) -> None:
    """Type-checked only (never called: it would need a Redis)."""
    bucket = headway.SharedBucket(url, "api", 10, burst=20)
    assert_type(bucket.take(n=2), bool)
    assert_type(bucket.next(), float)
    window = headway.SharedWindow(url, "daily", 1000, timedelta(days=1))
    assert_type(window.left(), int)
    gate = headway.SharedGate(url, "db", 8, lease=10.0)
    assert_type(gate.take(), str | None)


async def shared_limits_async(url: str) -> None:
    """Type-checked only, as ``shared_limits``."""
    bucket = headway.SharedBucket(url, "api", 10)
    assert_type(await bucket.atake(), bool)
    assert_type(await headway.SharedWindow(url, "w", 1, 1.0).atake(), bool)
    gate = headway.SharedGate(url, "db", 8)
    permit = await gate.atake()
    if permit is not None:
        assert_type(await gate.arelease(permit), bool)
    await bucket.wait(2)
