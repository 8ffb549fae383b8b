"""``Bucket`` and ``Gate`` with their runtime helpers.

The native classes answer; these subclasses add only what needs a runtime:
sleeping until a bucket has tokens, and entering a gate as a context manager.
"""

from __future__ import annotations

import asyncio
import math
from types import TracebackType

from . import _native
from ._errors import Full

__all__ = ["Bucket", "Gate"]


class Bucket(_native.Bucket):
    """A token bucket (see ``headway._native.Bucket``), plus ``await wait(n)``."""

    __slots__ = ()

    async def wait(self, n: float = 1.0) -> None:
        """Sleep until ``n`` tokens are there, then take them.

        Sleeps ``next(n=n)`` — what the bucket answers, never a guess — and
        takes; if another task took first it sleeps again. ``ValueError`` when
        the tokens never come (``n`` above the burst, or a zero rate), since
        waiting would be for ever.
        """
        while True:
            if self.take(n=n):
                return
            delay = self.next(n=n)
            if math.isinf(delay):
                raise ValueError(
                    f"`n` is {n}: more than the burst ({self.burst}) or a zero "
                    "rate, so the tokens never come"
                )
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
