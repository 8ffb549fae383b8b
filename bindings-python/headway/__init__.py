"""headway: flow control — pools, backoff, limiters — on one Rust core.

Everything here answers; nothing opens, sleeps or reads a clock it was given.
``Pool.take`` says what to do with a resource (``Ready``, ``Stale``, ``Make``,
``Wait``, ``Later``, ``Shed``), ``Backoff`` how long to wait and whether to go
on, ``Bucket`` / ``Window`` / ``Gate`` whether a request is within a rate, a
quota, or a concurrency limit. The drivers — ``retry``, ``Pooled``,
``Bucket.wait``, ``with gate:`` — act on those answers with a runtime.

Units: ``now`` is float seconds from any origin (omitted: ``time.monotonic()``),
a span is float seconds or a ``datetime.timedelta``, a draw is a float in
[0, 1) (omitted: the binding's RNG). Pass every ``now`` and draw and every
sequence is reproducible.

Errors: a bad argument raises ``ValueError`` (a value the core refuses) or
``TypeError`` (a value of the wrong type), the message naming the argument. A
Rust panic raises ``headway.PanicError``, a ``RuntimeError``.
"""

from __future__ import annotations

import os
from typing import TypeAlias, TypeVar, Union

from . import _native
from ._errors import Full, PoolTimeout, ShedError
from ._limits import Bucket, Gate
from ._native import (
    Backoff,
    Breaker,
    Jitter,
    Later,
    Limits,
    Make,
    PanicError,
    Pool,
    Ready,
    Shed,
    Stale,
    Wait,
    Ward,
    Window,
    pick,
)
from ._pooled import Lease, Pooled
from ._retry import Retry, retry, retrying

_T = TypeVar("_T")

#: What ``Pool[T].take`` answers: one of the six classes. ``match`` on it.
Taken: TypeAlias = Union[Ready[_T], Stale[_T], Make, Wait, Later, Shed]

__all__ = [
    "Backoff",
    "Breaker",
    "Bucket",
    "Full",
    "Gate",
    "Jitter",
    "Later",
    "Lease",
    "Limits",
    "Make",
    "PanicError",
    "Pool",
    "PoolTimeout",
    "Pooled",
    "Ready",
    "Retry",
    "Shed",
    "ShedError",
    "Stale",
    "Taken",
    "Wait",
    "Ward",
    "Window",
    "pick",
    "retry",
    "retrying",
]

__version__ = "0.1.0"

# Workers forked from one parent must not all draw the same jitter.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_native._reseed)
