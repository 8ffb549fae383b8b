"""Pooled: the six answers acted on, async and sync. Real time here is tiny
(tens of milliseconds): the driver sleeps and waits, the rules are the core's
and are tested with explicit times elsewhere."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest

from headway import (
    Backoff,
    Breaker,
    Jitter,
    Limits,
    Pooled,
    PoolTimeout,
    ShedError,
    Ward,
)


class Conn:
    n = 0

    def __init__(self) -> None:
        Conn.n += 1
        self.id = Conn.n
        self.closed = False

    def __repr__(self) -> str:
        return f"Conn({self.id})"


class Factory:
    """Opens Conns (sync or async), failing the first `fails` times."""

    def __init__(self, fails: int = 0) -> None:
        self.fails = fails
        self.opened: list[Conn] = []
        self.closed: list[Conn] = []

    def open(self) -> Conn:
        if self.fails > 0:
            self.fails -= 1
            raise ConnectionError("refused")
        c = Conn()
        self.opened.append(c)
        return c

    async def aopen(self) -> Conn:
        await asyncio.sleep(0)
        return self.open()

    def close(self, c: Conn) -> None:
        c.closed = True
        self.closed.append(c)

    async def aclose(self, c: Conn) -> None:
        await asyncio.sleep(0)
        self.close(c)


# ---------------------------------------------------------------- async


@pytest.mark.asyncio
async def test_make_then_ready() -> None:
    f = Factory()
    pooled: Pooled[Conn] = Pooled(f.aopen, f.aclose)
    async with pooled.acquire() as a:
        assert isinstance(a, Conn) and pooled.busy == 1
    async with pooled.acquire() as b:
        assert b is a  # Ready: the idle one is reused
    assert len(f.opened) == 1 and pooled.idle == 1
    await pooled.aclose()
    assert f.closed == [a] and pooled.closed


@pytest.mark.asyncio
async def test_stale_is_closed_and_a_new_one_opened() -> None:
    f = Factory()
    pooled: Pooled[Conn] = Pooled(f.aopen, f.aclose, limits=Limits(keep=0.02), evict_every=0)
    async with pooled.acquire() as a:
        pass
    await asyncio.sleep(0.05)
    async with pooled.acquire() as b:
        assert b is not a
    assert f.closed == [a] and len(f.opened) == 2
    await pooled.aclose()


@pytest.mark.asyncio
async def test_wait_times_out() -> None:
    f = Factory()
    pooled: Pooled[Conn] = Pooled(f.aopen, f.aclose, limits=Limits(size=1), timeout=0.03)
    async with pooled.acquire():
        start = time.monotonic()
        with pytest.raises(PoolTimeout, match="full") as e:
            async with pooled.acquire():
                pass  # pragma: no cover
        assert isinstance(e.value, TimeoutError)
        assert time.monotonic() - start >= 0.025
    assert pooled.live == 1 and pooled.busy == 0
    await pooled.aclose()


@pytest.mark.asyncio
async def test_wait_is_served_when_an_item_comes_back() -> None:
    f = Factory()
    pooled: Pooled[Conn] = Pooled(f.aopen, f.aclose, limits=Limits(size=1), timeout=5.0)
    order: list[str] = []

    async def second() -> Conn:
        async with pooled.acquire() as c:
            order.append("second")
            return c

    async with pooled.acquire() as first:
        task = asyncio.create_task(second())
        await asyncio.sleep(0.01)
        assert not task.done()
        order.append("first")
    got = await task
    assert got is first and order == ["first", "second"] and len(f.opened) == 1
    await pooled.aclose()


@pytest.mark.asyncio
async def test_many_waiters_all_served_in_turn() -> None:
    f = Factory()
    pooled: Pooled[Conn] = Pooled(f.aopen, f.aclose, limits=Limits(size=2), timeout=5.0)
    inside = 0
    most = 0

    async def job() -> None:
        nonlocal inside, most
        async with pooled.acquire():
            inside += 1
            most = max(most, inside)
            await asyncio.sleep(0.002)
            inside -= 1

    await asyncio.gather(*(job() for _ in range(20)))
    assert most == 2 and len(f.opened) == 2 and pooled.idle == 2
    await pooled.aclose()


@pytest.mark.asyncio
async def test_shed_raises() -> None:
    f = Factory(fails=100)
    pooled: Pooled[Conn] = Pooled(f.aopen, f.aclose, ward=Ward(breaker=Breaker()))
    pooled._roll = 0.0  # every take rolls 0: a Shed is certain once refused
    # The first make is asked (refusal 0) and fails; the breaker then refuses
    # 1/2 and a roll of 0 is inside that share.
    with pytest.raises(ConnectionError):
        async with pooled.acquire():
            pass  # pragma: no cover
    with pytest.raises(ShedError, match="refuses"):
        async with pooled.acquire():
            pass  # pragma: no cover
    assert pooled.live == 0
    await pooled.aclose()


@pytest.mark.asyncio
async def test_later_sleeps_the_hold_then_makes() -> None:
    f = Factory(fails=1)
    hold = Backoff(base=0.03, cap=0.03, jitter=Jitter.RIGID)
    pooled: Pooled[Conn] = Pooled(f.aopen, f.aclose, ward=Ward(backoff=hold))
    with pytest.raises(ConnectionError, match="refused"):
        async with pooled.acquire():
            pass  # pragma: no cover
    assert pooled.live == 0  # the failed make gave its room back
    start = time.monotonic()
    async with pooled.acquire() as c:
        assert isinstance(c, Conn)
    assert time.monotonic() - start >= 0.02
    await pooled.aclose()


@pytest.mark.asyncio
async def test_later_past_the_timeout_raises_at_once() -> None:
    f = Factory(fails=1)
    hold = Backoff(base=10.0, cap=10.0, jitter=Jitter.RIGID)
    pooled: Pooled[Conn] = Pooled(f.aopen, f.aclose, ward=Ward(backoff=hold), timeout=0.5)
    with pytest.raises(ConnectionError):
        async with pooled.acquire():
            pass  # pragma: no cover
    start = time.monotonic()
    with pytest.raises(PoolTimeout, match="held"):
        async with pooled.acquire():
            pass  # pragma: no cover
    assert time.monotonic() - start < 0.2
    await pooled.aclose()


@pytest.mark.asyncio
async def test_give_false_closes() -> None:
    f = Factory()
    pooled: Pooled[Conn] = Pooled(f.aopen, f.aclose, limits=Limits(size=2, idle=1))
    async with pooled.acquire() as a:
        async with pooled.acquire() as b:
            assert a is not b
    # b came back first and was kept; a found the idle room taken.
    assert f.closed == [a] and pooled.idle == 1 and pooled.live == 1
    await pooled.aclose()
    assert f.closed == [a, b]


@pytest.mark.asyncio
async def test_body_error_gives_back_drop_closes() -> None:
    f = Factory()
    pooled: Pooled[Conn] = Pooled(f.aopen, f.aclose)
    with pytest.raises(KeyError):
        async with pooled.acquire() as a:
            raise KeyError("the body failed, not the connection")
    assert pooled.idle == 1 and not a.closed
    async with pooled.acquire() as b:
        assert b is a
        pooled.drop(b)  # it broke
    assert b.closed and pooled.live == 0
    with pytest.raises(ValueError, match="not held"):
        pooled.drop(b)
    await pooled.aclose()


@pytest.mark.asyncio
async def test_evict_timer_closes_idle_items() -> None:
    f = Factory()
    pooled: Pooled[Conn] = Pooled(
        f.aopen, f.aclose, limits=Limits(keep=0.02), evict_every=0.01
    )
    async with pooled.acquire() as a:
        pass
    assert pooled.idle == 1
    for _ in range(100):
        await asyncio.sleep(0.01)
        if f.closed:
            break
    assert f.closed == [a] and pooled.idle == 0 and pooled.live == 0
    await pooled.aclose()


def test_evict_every_defaults_from_the_ages() -> None:
    assert Pooled(Conn).evict_every == 1800.0  # keep, 30 min
    assert Pooled(Conn, limits=Limits(keep=600, life=120)).evict_every == 120.0
    assert Pooled(Conn, limits=Limits(keep=0.1)).evict_every == 1.0  # floor: 1 s
    assert Pooled(Conn, limits=Limits(keep=0, life=0)).evict_every == 0.0
    assert Pooled(Conn).timeout == 30.0


@pytest.mark.asyncio
async def test_use_and_sync_functions_in_async_mode() -> None:
    f = Factory()
    pooled: Pooled[Conn] = Pooled(f.open, f.close)  # sync open/close work in async too

    async def work(c: Conn) -> int:
        return c.id * 10

    tens = await pooled.use(work)
    assert tens == f.opened[0].id * 10
    assert await pooled.use(lambda c: c.id) == f.opened[0].id
    assert len(f.opened) == 1
    async with pooled:
        pass
    assert pooled.closed and f.closed == f.opened


@pytest.mark.asyncio
async def test_closed_pool_refuses_and_closes_what_comes_back() -> None:
    f = Factory()
    pooled: Pooled[Conn] = Pooled(f.aopen, f.aclose)
    async with pooled.acquire() as a:
        await pooled.aclose()
        assert not a.closed  # lent: the borrower's
    assert a.closed and pooled.live == 0
    with pytest.raises(RuntimeError, match="closed"):
        async with pooled.acquire():
            pass  # pragma: no cover


@pytest.mark.asyncio
async def test_close_wakes_waiters() -> None:
    f = Factory()
    pooled: Pooled[Conn] = Pooled(f.aopen, f.aclose, limits=Limits(size=1), timeout=None)

    async def waiter() -> None:
        async with pooled.acquire():
            pass  # pragma: no cover

    async with pooled.acquire():
        task = asyncio.create_task(waiter())
        await asyncio.sleep(0.01)
        await pooled.aclose()
        with pytest.raises(RuntimeError, match="closed"):
            await task


@pytest.mark.asyncio
async def test_cancelled_open_frees_the_room_without_blaming_the_backend() -> None:
    started = asyncio.Event()

    async def slow_open() -> Conn:
        started.set()
        await asyncio.sleep(10)
        return Conn()  # pragma: no cover

    pooled: Pooled[Conn] = Pooled(
        slow_open, None, limits=Limits(size=1), ward=Ward(backoff=Backoff())
    )

    async def go() -> None:
        async with pooled.acquire():
            pass  # pragma: no cover

    task = asyncio.create_task(go())
    await started.wait()
    assert pooled.live == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert pooled.live == 0
    ward = pooled.pool.ward
    assert ward is not None and ward.failures == 0
    await pooled.aclose()


@pytest.mark.asyncio
async def test_close_errors_are_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    def bad_close(c: Conn) -> None:
        raise OSError("already gone")

    pooled: Pooled[Conn] = Pooled(Conn, bad_close, limits=Limits(size=2, idle=1))
    async with pooled.acquire():
        async with pooled.acquire():
            pass
    assert "closing" in caplog.text and "already gone" in caplog.text
    await pooled.aclose()


# ---------------------------------------------------------------- sync


def test_sync_make_ready_and_close() -> None:
    f = Factory()
    with Pooled(f.open, f.close) as pooled:
        with pooled.acquire() as a:
            assert pooled.busy == 1
        with pooled.acquire() as b:
            assert b is a
        assert pooled.use_sync(lambda c: c) is a
    assert f.closed == [a]


def test_sync_wait_served_by_another_thread() -> None:
    f = Factory()
    pooled: Pooled[Conn] = Pooled(f.open, f.close, limits=Limits(size=1), timeout=5.0)
    got: list[Conn] = []
    entered = threading.Event()

    def second() -> None:
        entered.set()
        with pooled.acquire() as c:
            got.append(c)

    with pooled.acquire() as first:
        t = threading.Thread(target=second)
        t.start()
        entered.wait()
        time.sleep(0.02)
        assert got == []
    t.join(5)
    assert got == [first]
    pooled.close()


def test_sync_wait_times_out() -> None:
    pooled: Pooled[Conn] = Pooled(Conn, None, limits=Limits(size=1), timeout=0.02)
    with pooled.acquire():
        with pytest.raises(PoolTimeout):
            with pooled.acquire():
                pass  # pragma: no cover
    pooled.close()


def test_sync_open_failure_frees_room_and_propagates() -> None:
    f = Factory(fails=1)
    pooled: Pooled[Conn] = Pooled(f.open, f.close, limits=Limits(size=1))
    with pytest.raises(ConnectionError):
        with pooled.acquire():
            pass  # pragma: no cover
    assert pooled.live == 0
    with pooled.acquire() as c:
        assert isinstance(c, Conn)
    pooled.close()


def test_sync_refuses_async_open() -> None:
    f = Factory()
    pooled: Pooled[Conn] = Pooled(f.aopen, f.close)
    with pytest.raises(TypeError, match="awaitable"):
        with pooled.acquire():
            pass  # pragma: no cover
    assert pooled.live == 0
    pooled.close()


def test_sync_evict_thread() -> None:
    f = Factory()
    pooled: Pooled[Conn] = Pooled(f.open, f.close, limits=Limits(keep=0.02), evict_every=0.01)
    with pooled.acquire() as a:
        pass
    for _ in range(100):
        time.sleep(0.01)
        if f.closed:
            break
    assert f.closed == [a] and pooled.live == 0
    pooled.close()
    assert pooled._thread is not None and not pooled._thread.is_alive()


def test_sync_shed() -> None:
    f = Factory(fails=1)
    pooled: Pooled[Conn] = Pooled(f.open, f.close, ward=Ward(breaker=Breaker()))
    pooled._roll = 0.0  # every take rolls 0: a Shed is certain once refused
    with pytest.raises(ConnectionError):
        with pooled.acquire():
            pass  # pragma: no cover
    with pytest.raises(ShedError):
        with pooled.acquire():
            pass  # pragma: no cover
    pooled.close()


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="`open` must be callable"):
        Pooled(3)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="`close` must be callable"):
        Pooled(Conn, "x")  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="invalid `timeout`: must not be negative"):
        Pooled(Conn, timeout=-1)
    with pytest.raises(TypeError, match="`evict_every` must be seconds"):
        Pooled(Conn, evict_every="1m")  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="`limits` must be a Limits"):
        Pooled(Conn, limits=5)  # type: ignore[call-overload]
    pooled: Pooled[Conn] = Pooled(Conn)
    with pytest.raises(TypeError, match="`fn` must be callable"):
        pooled.use_sync(5)  # type: ignore[arg-type]


def _until(cond: Any, limit: float = 2.0) -> None:
    end = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.001)


def test_sync_waiters_first_parked_first_served() -> None:
    # One item; three threads park in turn; a fourth caller arrives just as
    # the item comes back. Each is served in the order it parked, and the
    # latecomer does not barge past the woken waiter.
    f = Factory()
    pooled: Pooled[Conn] = Pooled(f.open, f.close, limits=Limits(size=1), timeout=5)
    order: list[str] = []

    def user(name: str) -> None:
        with pooled.acquire():
            order.append(name)
            time.sleep(0.005)

    lease = pooled.acquire()
    lease.__enter__()
    threads = []
    for i, name in enumerate("ABC"):
        th = threading.Thread(target=user, args=(name,))
        th.start()
        threads.append(th)
        _until(lambda i=i: pooled._acq.parked == i + 1)
    lease.__exit__(None, None, None)
    late = threading.Thread(target=user, args=("D",))
    late.start()
    threads.append(late)
    for th in threads:
        th.join()
    assert order == ["A", "B", "C", "D"]
    pooled.close()


@pytest.mark.asyncio
async def test_async_waiters_first_parked_first_served() -> None:
    f = Factory()
    pooled: Pooled[Conn] = Pooled(f.aopen, f.aclose, limits=Limits(size=1), timeout=5)
    order: list[str] = []

    async def user(name: str) -> None:
        async with pooled.acquire():
            order.append(name)
            await asyncio.sleep(0.002)

    lease = pooled.acquire()
    await lease.__aenter__()
    tasks = []
    for i, name in enumerate("ABC"):
        tasks.append(asyncio.create_task(user(name)))
        while pooled._acq.parked != i + 1:
            await asyncio.sleep(0)
    await lease.__aexit__(None, None, None)
    tasks.append(asyncio.create_task(user("D")))
    await asyncio.gather(*tasks)
    assert order == ["A", "B", "C", "D"]
    await pooled.aclose()
