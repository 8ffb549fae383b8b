"""The running asyncio loop's own socket for the shared limits' awaitables.

``SharedBucket.atake()`` and the others made on the core's runtime cross
threads twice (the loop hands the call to a runtime thread; the answer
comes back through ``call_soon_threadsafe``). For a plain ``redis://`` URL
they go instead over a socket this loop owns, one per URL per loop, as
redis-py's asyncio client does: one wake-up per reply.

Everything the socket carries is decided in the core (``_native._Wire``):
what is written, what each reply means, which URLs are served here, what a
lost socket means. This module makes the socket, writes what the core
gives (the calls of one turn of the loop in one write), feeds what arrives,
gives up a socket that stays silent while calls wait, and chains the calls
a lost socket hands back (made again on the shared link) to the futures
their awaiters hold.
"""

from __future__ import annotations

import asyncio
import random
import weakref
from collections.abc import AsyncGenerator
from typing import Any

from . import _native

_NONE: Any = object()

# Per loop: URL -> its connection, or None when the core serves that URL on
# the shared link only. A loop that is collected takes its entries along:
# a connection holds neither its loop nor its transport (the loop holds the
# transport while it is open), so nothing here keeps a finished loop, or
# its socket, alive.
_conns: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, _Conn | None]] = (
    weakref.WeakKeyDictionary()
)


def future(url: str) -> tuple[Any, asyncio.Future[Any]] | None:
    """The wire for ``url`` on the running loop and a future for one call
    on it, its bytes written at the end of this turn; None when the URL is
    not served here."""
    loop = asyncio.get_running_loop()
    by_url = _conns.get(loop)
    if by_url is None:
        by_url = _conns[loop] = {}
        _closers[loop] = _close_at_shutdown(by_url)
    conn = by_url.get(url, _NONE)
    if conn is _NONE:
        native = _native._Wire.open(url)
        conn = by_url[url] = None if native is None else _Conn(native)
    if conn is None:
        return None
    if not conn.due:
        conn.due = True
        loop.call_soon(conn.flush)
    return conn.native, loop.create_future()


# Per loop: the async generator that closes its connections when the loop
# shuts down (below).
_closers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


async def _closing(by_url: dict[str, _Conn | None]) -> AsyncGenerator[None, None]:
    try:
        yield
    finally:
        for conn in by_url.values():
            if conn is not None:
                conn.close()


def _close_at_shutdown(by_url: dict[str, _Conn | None]) -> AsyncGenerator[None, None]:
    """An async generator started on the running loop, so that the loop
    knows it: ``asyncio.run`` (``loop.shutdown_asyncgens()``) closes it as
    the loop ends, which closes the loop's connections — no socket is left
    for the collector to close with a ``ResourceWarning``."""
    agen = _closing(by_url)
    try:
        agen.asend(None).send(None)
    except StopIteration:
        pass
    return agen


def _chain(fut: asyncio.Future[Any], made: Any) -> None:
    """Resolves ``fut`` as ``made`` (an awaitable) resolves."""
    task = asyncio.ensure_future(made)

    def done(t: asyncio.Future[Any]) -> None:
        if fut.done():
            return
        if t.cancelled():
            fut.cancel()
        elif (e := t.exception()) is not None:
            fut.set_exception(e)
        else:
            fut.set_result(t.result())

    task.add_done_callback(done)


class _Conn(asyncio.Protocol):
    def __init__(self, native: Any) -> None:
        self.native = native
        self._transport: weakref.ref[asyncio.Transport] | None = None
        # Bytes written before the socket is made.
        self.early: list[bytes] = []
        self.dialing = False
        self.due = False
        self.timer: asyncio.TimerHandle | None = None
        self.heard = 0.0
        host, port, self.timeout = native.address()
        self.address = (host, port)

    def close(self) -> None:
        if (transport := self.transport) is not None:
            transport.close()

    @property
    def transport(self) -> asyncio.Transport | None:
        return None if self._transport is None else self._transport()

    def flush(self) -> None:
        self.due = False
        out = self.native.flush()
        if out is None:
            return
        data, dial = out
        transport = self.transport
        if transport is None or dial:
            self.early.append(data)
            if not self.dialing:
                self.dialing = True
                asyncio.get_running_loop().create_task(self._dial())
        else:
            transport.write(data)
        self._watch()

    async def _dial(self) -> None:
        try:
            loop = asyncio.get_running_loop()
            await asyncio.wait_for(
                loop.create_connection(lambda: self, *self.address), self.timeout
            )
        except (OSError, asyncio.TimeoutError):
            self.dialing = False
            self._lost()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = weakref.ref(transport)
        self.dialing = False
        if self.early:
            transport.write(b"".join(self.early))
            self.early.clear()

    def data_received(self, data: bytes) -> None:
        self.heard = asyncio.get_running_loop().time()
        r = self.native.feed(data)
        if r == 1:
            self.flush()
        elif r == -1 and (transport := self.transport) is not None:
            transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._lost()

    def _lost(self) -> None:
        self.early.clear()
        for fut, made in self.native.lost(random.random()):
            _chain(fut, made)

    def _watch(self) -> None:
        """Gives the socket up when it stays silent while calls wait."""
        if self.timer is None:
            loop = asyncio.get_running_loop()
            self.heard = loop.time()
            self.timer = loop.call_later(self.timeout, self._check)

    def _check(self) -> None:
        self.timer = None
        if not self.native.busy():
            return
        loop = asyncio.get_running_loop()
        quiet = loop.time() - self.heard
        if quiet < self.timeout:
            self.timer = loop.call_later(self.timeout - quiet, self._check)
        elif (transport := self.transport) is not None:
            transport.abort()
        elif not self.dialing:
            self._lost()
