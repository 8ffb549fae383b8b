"""``Pooled``: a ``Pool`` with a runtime under it.

The native ``Pool`` only answers one take; the loop around it — who is
served next, who queues, who gives up — is the core's ``Acquires``, the same
machine Node's ``Pooled`` drives. This driver does what it answers:

========== =================================================================
``HAND``   hand the item out
``OPEN``   call ``open``; ``opened`` on success, ``unopened`` on failure
           (then the error propagates, and the ward counts it)
``CLOSE``  close a stale item (already out of the pool), then step again
``SLEEP``  sleep the ward's hold, then step again
``PARK``   wait until woken or the deadline, then step again
========== =================================================================

An acquire that gives up is raised by the step itself: ``PoolTimeout``,
``ShedError`` or ``RuntimeError`` (closed), the core's choice and message.

Waiters are served first parked, first served, sync and async alike. Every
call that frees an item or room (give back, leave, evict, close) tells the
machine, which names the tickets to wake; the driver signals each.

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
from collections.abc import Awaitable, Callable, Generator
from contextlib import closing
from datetime import timedelta
from types import TracebackType
from typing import Any, Generic, TypeVar, cast, overload

from ._native import TAKE_TIMEOUT, Acquires, Limits, Pool, Ward


__all__ = ["Lease", "Pooled"]

T = TypeVar("T")
R = TypeVar("R")

# What Acquires.step answers, in its order; and what the steps yield for an
# async open's awaitable (the binding's own, not an answer of the core's).
_HAND, _OPEN, _CLOSE, _SLEEP, _PARK = range(5)
_AWAIT = -1

log = logging.getLogger("headway")

# How long a caller waits for a connection before being told there is none:
# the core's TAKE_TIMEOUT (HikariCP's connectionTimeout, 30 s).
DEFAULT_TIMEOUT: float = TAKE_TIMEOUT


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

    def _took(self, item: T) -> T:
        self._item, self._held, self.broken = item, True, False
        self._pooled._leases[id(item)] = self
        return item

    def _back(self) -> tuple[T, bool]:
        """Gives the item back: it, and whether to close it now."""
        pooled, item = self._pooled, self._item
        self._item, self._held = None, False
        del pooled._leases[id(item)]
        return item, pooled._release(item, self.broken)

    def _check(self) -> None:
        if self._held:
            raise RuntimeError("this lease already holds an item")

    async def __aenter__(self) -> T:
        self._check()
        return self._took(await self._pooled._aget())

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        item, close = self._back()
        if close:
            await self._pooled._aclose_one(item)

    def __enter__(self) -> T:
        self._check()
        return self._took(self._pooled._get())

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        item, close = self._back()
        if close:
            self._pooled._close_one(item)


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
        # The core ranges both and picks the timer's period when omitted.
        self._acq = Acquires(timeout, evict_every, self.pool.limits)
        self.timeout: float | None = self._acq.timeout
        self.evict_every: float = self._acq.evict_every
        # How to wake each parked ticket, by ticket.
        self._wakers: dict[int, Callable[[], None]] = {}
        # The ward's draw for every take (None: the binding's RNG).
        self._roll: float | None = None
        self._lock = threading.Lock()
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
        items: list[T] = self._acq.close(self.pool)
        self._deliver()
        return items

    def _deliver(self) -> None:
        """Signal every ticket the machine says to wake."""
        wakers = self._wakers
        for t in self._acq.wakes():
            wake = wakers.get(t)
            if wake is not None:
                wake()

    def _release(self, item: T, broken: bool) -> bool:
        """Give an item back; whether the caller must now close it."""
        acq = self._acq
        close: bool = acq.give(self.pool, item, broken)
        if acq.has_wakes:
            self._deliver()
        return close

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
        items: list[T] = self._acq.evict(self.pool)
        if self._acq.has_wakes:
            self._deliver()
        return items

    def _steps(
        self, woken: threading.Event | asyncio.Event, wake: Callable[[], None], aio: bool
    ) -> Generator[tuple[int, Any], Any, None]:
        """The one loop over the core's answers both shells drive. It opens
        items itself and yields what the shell must do — park until a
        deadline, close, sleep, await an async ``open``'s item (sent back, or
        its error thrown in) — and last ``(_HAND, item)``. The shells differ
        only in how they wait, close, sleep and await."""
        acq, pool = self._acq, self.pool
        t = acq.begin()
        self._wakers[t] = wake
        try:
            while True:
                # Cleared before the step: a wake between the step and the
                # wait is kept, not lost.
                woken.clear()
                kind, v = acq.step(pool, t, self._roll)
                if acq.has_wakes:
                    self._deliver()
                if kind == _OPEN:
                    try:
                        v = self._open()
                        if inspect.isawaitable(v):
                            if not aio:
                                _discard(v)
                                raise TypeError(
                                    "`open` returned an awaitable: use `async with "
                                    "acquire()` with an async open"
                                )
                            v = yield _AWAIT, v
                    except Exception:
                        # The backend failed: the ward counts it. (Anything
                        # else, an interrupt, gives the room back below
                        # without blaming the backend.)
                        acq.unopened(pool, t, self._roll)
                        raise
                    if not acq.opened(pool, t, v):
                        # Closed meanwhile: close it; the next step fails as closed.
                        yield _CLOSE, v
                        continue
                    kind = _HAND
                yield kind, v
        finally:
            del self._wakers[t]
            acq.end(pool, t)
            if acq.has_wakes:
                self._deliver()

    # sync ----------------------------------------------------------------

    def _get(self) -> T:
        # Closed: no quick item, and the first step fails as closed.
        if self._thread is None and self.evict_every > 0 and not self._closed:
            self._start_thread()
        got = self._acq.quick(self.pool)
        if got is not None:
            return cast(T, got[0])
        return self._get_slow()

    def _get_slow(self) -> T:
        woken = threading.Event()
        with closing(self._steps(woken, woken.set, aio=False)) as steps:
            kind, v = next(steps)
            while kind != _HAND:
                if kind == _PARK:
                    woken.wait(None if v is None else max(0.0, v - time.monotonic()))
                elif kind == _CLOSE:
                    self._close_one(v)
                else:
                    time.sleep(v)
                kind, v = next(steps)
        return cast(T, v)

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
        if self._task is None and self.evict_every > 0 and not self._closed:
            self._start_task()
        got = self._acq.quick(self.pool)
        if got is not None:
            return cast(T, got[0])
        return await self._aget_slow()

    async def _aget_slow(self) -> T:
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def wake() -> None:
            # Wakes come from whichever thread freed the item.
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if running is loop:
                woken.set()
            else:
                loop.call_soon_threadsafe(woken.set)

        with closing(self._steps(woken, wake, aio=True)) as steps:
            kind, v = next(steps)
            while kind != _HAND:
                sent: Any = None
                err: Exception | None = None
                if kind == _PARK:
                    if v is None:
                        await woken.wait()
                    else:
                        try:
                            async with asyncio.timeout(max(0.0, v - time.monotonic())):
                                await woken.wait()
                        except TimeoutError:
                            pass
                elif kind == _AWAIT:
                    try:
                        sent = await v
                    except Exception as e:
                        err = e
                elif kind == _CLOSE:
                    await self._aclose_one(v)
                else:
                    await asyncio.sleep(v)
                kind, v = steps.throw(err) if err else steps.send(sent)
        return cast(T, v)

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


def _discard(aw: Awaitable[Any]) -> None:
    """Close a coroutine we will not await, so Python does not warn."""
    close = getattr(aw, "close", None)
    if callable(close):
        close()
