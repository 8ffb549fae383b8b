"""The exceptions the flow-control drivers raise.

The core answers; it never raises for a full pool or an empty bucket. These
are what the runtime drivers (``Gate`` as a context manager, ``Pooled``) turn
an answer into when the caller asked to be served and could not be.
"""

from __future__ import annotations

__all__ = ["Full", "PoolTimeout", "ShedError"]


class Full(Exception):
    """``with gate:`` / ``async with gate:`` found no room.

    A gate answers rather than queues — that is what keeps a queue from
    becoming the outage — so entering a full gate raises at once.
    """


class ShedError(Exception):
    """``Pooled`` was answered ``Shed``: the ward's breaker refused this make.

    The backend has been refusing most of what it is asked; failing fast here
    is what keeps one overloaded backend from being asked ever harder. (The
    answer class is ``headway.Shed``; this is the error a driver raises.)
    """


class PoolTimeout(TimeoutError):
    """``Pooled.acquire`` waited ``timeout`` seconds on ``Wait`` or ``Later``
    answers without being served. A builtin ``TimeoutError`` too."""
