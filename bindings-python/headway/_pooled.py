"""``Pooled``: a ``Pool`` with a runtime under it.

The native ``Pool`` only answers. ``Pooled`` acts on every one of its six
answers for the caller, the way the moonpool guide's client loop does:

========== =================================================================
``Ready``  hand the item out
``Stale``  close it (it is already out of the pool) and take again
``Make``   call ``open``; ``made`` on success, ``unmade`` on failure (then
           the error propagates, and the ward counts it)
``Wait``   queue until an item comes back or room frees, up to ``timeout``
``Later``  sleep the hold the ward answered, then take again
``Shed``   raise ``headway.ShedError`` at once
========== =================================================================

On the way back ``give`` keeps the item, or answers ``False`` and the item is
closed. An evict timer closes idle items past ``keep`` / ``life``.

A body that raises does not mean its connection broke, so the item is given
back as usual; call ``pooled.drop(conn)`` inside the block to say it broke —
it is then closed and forgotten instead of handed to the next caller.

Errors from ``close`` are logged (logger ``"headway"``) and swallowed: an item
being thrown away is often already dead, and that must not fail the caller.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Awaitable, Callable
from datetime import timedelta
from types import TracebackType
from typing import Any, Generic, TypeAlias, TypeVar, Union, cast, overload

from ._errors import PoolTimeout, ShedError
from ._native import TAKE_TIMEOUT, Later, Limits, Make, Pool, Ready, Shed, Stale, Wait, Ward


__all__ = ["Lease", "Pooled"]

T = TypeVar("T")
R = TypeVar("R")
Taken: TypeAlias = Union[Ready[T], Stale[T], Make, Wait, Later, Shed]

log = logging.getLogger("headway")

# How long a caller waits for a connection before being told there is none:
# the core's TAKE_TIMEOUT (HikariCP's connectionTimeout, 30 s).
DEFAULT_TIMEOUT: float = TAKE_TIMEOUT


def _seconds(name: str, value: float | timedelta | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value != value:  # NaN
            raise ValueError(f"`{name}` must be a number of seconds, not NaN")
        if value < 0:
            raise ValueError(f"`{name}` must not be negative")
        return float(value)
    raise TypeError(
        f"`{name}` must be seconds (a number or a datetime.timedelta), "
        f"not {type(value).__name__}"
    )


class _Unset:
    pass


_UNSET: Any = _Unset()


class Lease(Generic[T]):
    """What ``Pooled.acquire()`` returns: ``async with`` it or ``with`` it.

    Entering takes an item (opening one if the pool says ``Make``), leaving
    gives it back. The same lease can be used by either kind of block, one
    block at a time; the async one awaits an async ``open`` / ``close``, the
    sync one needs sync ones.
    """

    __slots__ = {
        "_pooled": "The ``Pooled`` it takes from.",
        "_item": "The item it holds, if any.",
        "_held": "Whether it holds an item now.",
        "broken": "Set by ``Pooled.drop(item)``: leaving closes the item instead of giving it back.",
    }

    def __init__(self, pooled: Pooled[T]) -> None:
        self._pooled = pooled
        self._item: Any = None
        self._held = False
        #: Set by ``Pooled.drop(item)``: close the item instead of giving it back.
        self.broken = False

    async def __aenter__(self) -> T:
        if self._held:
            raise RuntimeError("this lease already holds an item")
        pooled = self._pooled
        item = await pooled._aget()
        self._item, self._held, self.broken = item, True, False
        pooled._leases[id(item)] = self
        return item

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        pooled, item = self._pooled, self._item
        self._item, self._held = None, False
        del pooled._leases[id(item)]
        if pooled._release(item, self.broken):
            await pooled._aclose_one(item)

    def __enter__(self) -> T:
        if self._held:
            raise RuntimeError("this lease already holds an item")
        pooled = self._pooled
        item = pooled._get()
        self._item, self._held, self.broken = item, True, False
        pooled._leases[id(item)] = self
        return item

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        pooled, item = self._pooled, self._item
        self._item, self._held = None, False
        del pooled._leases[id(item)]
        if pooled._release(item, self.broken):
            pooled._close_one(item)


class Pooled(Generic[T]):
    """A pool that opens, closes, queues and sleeps for you.

    ``open()`` makes an item (it may be ``async def``); ``close(item)`` throws
    one away (may be async, or ``None`` for items that need no closing).
    ``limits`` and ``ward`` are the native ``Pool``'s. ``timeout`` bounds how
    long ``acquire`` waits on ``Wait`` and ``Later`` (default 30 s, HikariCP's
    connectionTimeout; ``None`` waits for ever) before raising
    ``headway.PoolTimeout``. ``evict_every`` is the evict timer's period:
    omitted, the shorter of ``keep`` and ``life``, at least one second (Go
    database/sql's connection cleaner); ``0`` turns the timer off.

    ``async with pooled.acquire() as conn:`` in asyncio code, ``with
    pooled.acquire() as conn:`` in threaded code; ``await pooled.use(fn)`` /
    ``pooled.use_sync(fn)`` call ``fn(conn)`` inside such a block (Node's
    ``pool.use(fn)``). ``close()`` / ``aclose()`` (or ``with`` / ``async with``
    the ``Pooled`` itself) stop the timer and close what is idle; items still
    lent are closed as they come back.
    """

    @overload
    def __init__(
        self,
        open: Callable[[], Awaitable[T]],
        close: Callable[[T], object] | None = None,
        *,
        limits: Limits | None = None,
        ward: Ward | None = None,
        timeout: float | timedelta | None = DEFAULT_TIMEOUT,
        evict_every: float | timedelta | None = None,
    ) -> None: ...
    @overload
    def __init__(
        self,
        open: Callable[[], T],
        close: Callable[[T], object] | None = None,
        *,
        limits: Limits | None = None,
        ward: Ward | None = None,
        timeout: float | timedelta | None = DEFAULT_TIMEOUT,
        evict_every: float | timedelta | None = None,
    ) -> None: ...
    def __init__(
        self,
        open: Callable[[], Any],
        close: Callable[[T], object] | None = None,
        *,
        limits: Limits | None = None,
        ward: Ward | None = None,
        timeout: float | timedelta | None = DEFAULT_TIMEOUT,
        evict_every: float | timedelta | None = None,
    ) -> None:
        if not callable(open):
            raise TypeError(f"`open` must be callable, not {type(open).__name__}")
        if close is not None and not callable(close):
            raise TypeError(
                f"`close` must be callable or None, not {type(close).__name__}"
            )
        self.pool: Pool[T] = Pool(limits=limits, ward=ward)
        self._open = open
        self._closer = close
        self.timeout = _seconds("timeout", timeout)
        every = _seconds("evict_every", evict_every)
        if every is None:
            # The core's choice: the shorter of keep and life, at least 1 s.
            every = self.pool.limits.evict_every
        self.evict_every = every
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._sync_waiting = 0
        self._leases: dict[int, Lease[T]] = {}
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # ------------------------------------------------------------ counts

    @property
    def live(self) -> int:
        """How many exist: idle, lent, and being opened."""
        return self.pool.live

    @property
    def idle(self) -> int:
        """How many sit idle."""
        return self.pool.idle

    @property
    def busy(self) -> int:
        """How many are lent out or being opened."""
        return self.pool.busy

    @property
    def closed(self) -> bool:
        """Whether ``close`` / ``aclose`` has run."""
        return self._closed

    def __repr__(self) -> str:
        return (
            f"Pooled(live={self.live}, idle={self.idle}, busy={self.busy}, "
            f"closed={self._closed})"
        )

    # ------------------------------------------------------------ public

    def acquire(self) -> Lease[T]:
        """A lease on one item: ``async with`` or ``with`` it."""
        return Lease(self)

    @overload
    async def use(self, fn: Callable[[T], Awaitable[R]]) -> R: ...
    @overload
    async def use(self, fn: Callable[[T], R]) -> R: ...
    async def use(self, fn: Callable[[T], Any]) -> Any:
        """``fn(conn)`` inside ``async with acquire()``; awaited if it returns
        an awaitable. Node's ``pool.use(fn)``."""
        if not callable(fn):
            raise TypeError(f"`fn` must be callable, not {type(fn).__name__}")
        async with self.acquire() as conn:
            out = fn(conn)
            if inspect.isawaitable(out):
                return await out
            return out

    def use_sync(self, fn: Callable[[T], R]) -> R:
        """``fn(conn)`` inside ``with acquire()``."""
        if not callable(fn):
            raise TypeError(f"`fn` must be callable, not {type(fn).__name__}")
        with self.acquire() as conn:
            return fn(conn)

    def drop(self, item: T) -> None:
        """Say the item you hold broke: when its block ends it is closed and
        forgotten instead of given back. ``ValueError`` for an item that is
        not held through ``acquire``."""
        lease = self._leases.get(id(item))
        if lease is None or lease._item is not item:
            raise ValueError("`item` is not held through this pool's acquire()")
        lease.broken = True

    def close(self) -> None:
        """Stop the evict timer and close every idle item (sync ``close``).
        Items still lent are closed as they come back. Idempotent."""
        for item in self._shut():
            self._close_one(item)
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    async def aclose(self) -> None:
        """``close`` for asyncio code: awaits an async ``close`` and the evict
        task."""
        task = self._task
        for item in self._shut():
            await self._aclose_one(item)
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    def __enter__(self) -> Pooled[T]:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Pooled[T]:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # ------------------------------------------------------------ internals

    def _shut(self) -> list[T]:
        if self._closed:
            return []
        self._closed = True
        self._stop.set()
        items: list[T] = self.pool.close()
        with self._lock:
            self._cond.notify_all()
        while self._waiters:
            self._wake_future(self._waiters.popleft())
        return items

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this Pooled is closed")

    def _deadline(self) -> float | None:
        return None if self.timeout is None else time.monotonic() + self.timeout

    def _timed_out(self, why: str) -> PoolTimeout:
        return PoolTimeout(f"no item within {self.timeout} s: {why}")

    def _shed(self) -> ShedError:
        return ShedError(
            f"the breaker refuses {self.pool.refusal():.0%} of makes: failing fast"
        )

    def _wake(self) -> None:
        """Room freed or an item came back: wake one waiter of each kind.

        A sync waiter counts itself and takes again under the lock before it
        waits, so reading the count without the lock loses no wake: a release
        that reads 0 happened before that take, which then sees its item.
        """
        if self._sync_waiting:
            with self._lock:
                self._cond.notify()
        waiters = self._waiters
        while waiters:
            fut = waiters.popleft()
            if not fut.done():
                self._wake_future(fut)
                return

    @staticmethod
    def _wake_future(fut: asyncio.Future[None]) -> None:
        def ready() -> None:
            if not fut.done():
                fut.set_result(None)

        loop = fut.get_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            ready()
        else:
            loop.call_soon_threadsafe(ready)

    def _abandon(self, exc: BaseException) -> None:
        """A make was reserved and will not be registered."""
        if isinstance(exc, Exception):
            # The backend failed: the ward counts it (and may hold or shed).
            self.pool.unmade()
        else:
            # Cancelled or interrupted: give the room back without blaming the
            # backend. Dropping an item the pool never registered frees the
            # room its take reserved, and counts nothing.
            self.pool.drop(_NOT_MADE)
        self._wake()

    def _release(self, item: T, broken: bool) -> bool:
        """Give an item back; whether the caller must now close it."""
        if broken or self._closed:
            self.pool.drop(item)
            kept = False
        else:
            kept = self.pool.give(item)
        if self._sync_waiting or self._waiters:
            self._wake()
        return not kept

    def _close_one(self, item: T) -> None:
        if self._closer is None:
            return
        try:
            out = self._closer(item)
            if inspect.isawaitable(out):
                _discard(out)
                raise TypeError(
                    "`close` returned an awaitable: use `async with acquire()` "
                    "and `aclose()` with an async close"
                )
        except Exception:
            log.warning("headway: closing %r failed", item, exc_info=True)

    async def _aclose_one(self, item: T) -> None:
        if self._closer is None:
            return
        try:
            out = self._closer(item)
            if inspect.isawaitable(out):
                await out
        except Exception:
            log.warning("headway: closing %r failed", item, exc_info=True)

    def _evict(self) -> list[T]:
        items: list[T] = self.pool.evict()
        if items:
            self._wake()
        return items

    # sync ----------------------------------------------------------------

    def _get(self) -> T:
        if self._closed:
            raise RuntimeError("this Pooled is closed")
        if self._thread is None and self.evict_every > 0:
            self._start_thread()
        t = self.pool.take()
        if type(t) is Ready:
            return t.item
        return self._get_slow(t)

    def _get_slow(self, t: Taken[T]) -> T:
        deadline = self._deadline()
        pool = self.pool
        while True:
            if type(t) is Ready:
                return t.item
            if type(t) is Make:
                try:
                    item = self._open()
                    if inspect.isawaitable(item):
                        _discard(item)
                        raise TypeError(
                            "`open` returned an awaitable: use `async with "
                            "acquire()` with an async open"
                        )
                except BaseException as e:
                    self._abandon(e)
                    raise
                pool.made(item)
                return cast(T, item)
            if type(t) is Stale:
                self._close_one(t.item)
                self._wake()
            elif type(t) is Wait:
                with self._lock:
                    self._sync_waiting += 1
                    try:
                        # Take again under the lock, counted: see _wake.
                        t = pool.take()
                        if type(t) is Wait:
                            if deadline is None:
                                self._cond.wait()
                            else:
                                left = deadline - time.monotonic()
                                if left <= 0 or not self._cond.wait(left):
                                    raise self._timed_out(
                                        f"the pool is full ({pool.live} live)"
                                    )
                            self._check_open()
                            t = pool.take()
                    finally:
                        self._sync_waiting -= 1
                continue
            elif type(t) is Later:
                delay = t.delay
                if deadline is not None and time.monotonic() + delay > deadline:
                    raise self._timed_out(
                        f"makes are held for {delay:.3f} s after failures"
                    )
                time.sleep(delay)
            elif type(t) is Shed:
                raise self._shed()
            self._check_open()
            t = pool.take()

    def _start_thread(self) -> None:
        with self._lock:
            if self._thread is not None:
                return
            self._thread = threading.Thread(
                target=_evict_thread,
                args=(weakref.ref(self), self._stop, self.evict_every),
                name="headway-evict",
                daemon=True,
            )
        self._thread.start()

    # async ---------------------------------------------------------------

    async def _aget(self) -> T:
        if self._closed:
            raise RuntimeError("this Pooled is closed")
        if self._task is None and self.evict_every > 0:
            self._start_task()
        t = self.pool.take()
        if type(t) is Ready:
            return t.item
        return await self._aget_slow(t)

    async def _aget_slow(self, t: Taken[T]) -> T:
        deadline = self._deadline()
        pool = self.pool
        front = False
        while True:
            if type(t) is Ready:
                return t.item
            if type(t) is Make:
                try:
                    item = self._open()
                    if inspect.isawaitable(item):
                        item = await item
                except BaseException as e:
                    self._abandon(e)
                    raise
                pool.made(item)
                return cast(T, item)
            if type(t) is Stale:
                await self._aclose_one(t.item)
                self._wake()
            elif type(t) is Wait:
                got = await self._await_room(deadline, front)
                front = True
                self._check_open()
                if got is not None:
                    t = got
                    continue
            elif type(t) is Later:
                delay = t.delay
                if deadline is not None and time.monotonic() + delay > deadline:
                    raise self._timed_out(
                        f"makes are held for {delay:.3f} s after failures"
                    )
                await asyncio.sleep(delay)
            elif type(t) is Shed:
                raise self._shed()
            self._check_open()
            t = pool.take()

    async def _await_room(self, deadline: float | None, front: bool) -> Taken[T] | None:
        """Queue for a wake; an answer if taking again right away served."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if front:
            self._waiters.appendleft(fut)
        else:
            self._waiters.append(fut)
        try:
            # Queued first, then taken again: a release on another thread
            # between the Wait and the queueing is not lost.
            t = self.pool.take()
            if type(t) is not Wait:
                return t
            if deadline is None:
                await fut
            else:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError
                async with asyncio.timeout(left):
                    await fut
        except TimeoutError:
            raise self._timed_out(f"the pool is full ({self.pool.live} live)") from None
        except BaseException:
            # Woken but leaving anyway (cancelled): pass the wake on.
            if fut.done() and not fut.cancelled():
                self._wake()
            raise
        finally:
            try:
                self._waiters.remove(fut)
            except ValueError:
                pass
        return None

    def _start_task(self) -> None:
        self._task = asyncio.get_running_loop().create_task(
            _evict_task(weakref.ref(self), self.evict_every), name="headway-evict"
        )


# The timers hold the Pooled weakly, so one that is dropped without close()
# is still collected (and its timer ends).


def _evict_thread(
    ref: weakref.ref[Pooled[Any]], stop: threading.Event, every: float
) -> None:
    while not stop.wait(every):
        pooled = ref()
        if pooled is None or pooled._closed:
            return
        for item in pooled._evict():
            pooled._close_one(item)
        del pooled


async def _evict_task(ref: weakref.ref[Pooled[Any]], every: float) -> None:
    while True:
        await asyncio.sleep(every)
        pooled = ref()
        if pooled is None or pooled._closed:
            return
        for item in pooled._evict():
            await pooled._aclose_one(item)
        del pooled


class _NotMade:
    """Stands for the item a cancelled make never produced."""

    __slots__ = ()


_NOT_MADE = _NotMade()


def _discard(aw: Awaitable[Any]) -> None:
    """Close a coroutine we will not await, so Python does not warn."""
    close = getattr(aw, "close", None)
    if callable(close):
        close()
