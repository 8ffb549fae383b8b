"""``Bucket`` and ``Gate`` with their runtime helpers.

The native classes answer; these subclasses add only what needs a runtime:
sleeping until a bucket has tokens, and entering a gate as a context manager.
"""

from __future__ import annotations

import asyncio
from types import TracebackType

from . import _native
from ._errors import Full

__all__ = ["Bucket", "Gate"]


class Bucket(_native.Bucket):
    """A token bucket (see ``headway._native.Bucket``), plus ``await wait(n)``."""

    __slots__ = ()

    async def wait(self, n: float = 1.0) -> None:
        """Sleep until ``n`` tokens are there, then take them.

        The core answers each round (``Bucket::wait``): take now, or sleep
        what ``next(n=n)`` answers — never a guess — and ask again (another
        task may have taken first). ``ValueError`` when the tokens never come
        (``n`` above the burst, or a zero rate), since waiting would be for
        ever.
        """
        while (delay := self._wait(n)) is not None:
            await asyncio.sleep(delay)


class Gate(_native.Gate):
    """A concurrency gate (see ``headway._native.Gate``), usable as
    ``with gate:`` and ``async with gate:``.

    Entering takes a room or raises ``headway.Full`` at once (a gate answers
    rather than queues); leaving the block gives the room back, whether or
    not the block raised.
    """

    __slots__ = ()

    def _full(self) -> Full:
        return Full(f"gate is full: {self.held} of {self.limit} inside")

    def __enter__(self) -> Gate:
        if not self.enter():
            raise self._full()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.leave()

    async def __aenter__(self) -> Gate:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.leave()
