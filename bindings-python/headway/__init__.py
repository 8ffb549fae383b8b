"""headway: flow control — pools, backoff, limiters — and a task queue, on
one Rust core.

Tasks: ``App`` registers bodies (``@app.task``), sends runs (``delay``,
``apply_async``, ``app.send``), plans canvases (``chain``, ``group``,
``chord``, ``a | b``), and hands out ``Handle``s to wait on; ``app.worker()``
runs them, ``app.beat()`` sends them on rhythms (``Every``, ``Cron``,
``At``); ``headway.schedule`` runs jobs on rhythms with no broker;
``headway.testing.VirtualClock`` makes all of it run on virtual time. Task
times are aware ``datetime``s or epoch seconds; spans are float seconds.
A run that will not answer raises a ``Refused`` (``TaskFailed``, ``Timeout``,
``Revoked``, ``Missing``, ``UnknownTask``, ``BrokerError``).

Flow control:

Everything here answers; nothing opens, sleeps or reads a clock it was given.
``Pool.take`` says what to do with a resource (``Ready``, ``Stale``, ``Make``,
``Wait``, ``Later``, ``Shed``), ``Backoff`` how long to wait and whether to go
on, ``Bucket`` / ``Window`` / ``Gate`` whether a request is within a rate, a
quota, or a concurrency limit; ``SharedBucket`` / ``SharedWindow`` /
``SharedGate`` the same across processes and languages, in Redis. The drivers — ``retry``, ``Pooled``,
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

# The pure-Python modules' public names are each one's ``__all__``, all of
# them listed again in the package's below.
from . import _native
from ._errors import *
from ._limits import *
from ._native import (
    At,
    Context,
    Cron,
    DeadLetter,
    Every,
    Exponential,
    Fixed,
    Handle,
    RedisBroker,
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
    SharedBucket,
    SharedGate,
    SharedWindow,
    Stale,
    Wait,
    Ward,
    Window,
    pick,
)
from ._pooled import *
from ._retry import *
from ._tasks import *

# `headway.admin.asgi(app)`: the admin interface (imports the task side).
from . import _log, admin, signals

# The core's log records go to `logging`, under `headway.*`.
_log._start()

_T = TypeVar("_T")

#: What ``Pool[T].take`` answers: one of the six classes. ``match`` on it.
Taken: TypeAlias = Union[Ready[_T], Stale[_T], Make, Wait, Later, Shed]

__all__ = [
    "App",
    "AsyncTask",
    "At",
    "Backoff",
    "Beat",
    "Breaker",
    "BrokerClosedError",
    "BrokerConnectionError",
    "BrokerDataError",
    "BrokerError",
    "BrokerScriptError",
    "BrokerServerError",
    "Bucket",
    "Context",
    "Cron",
    "DeadLetter",
    "Every",
    "Exponential",
    "Fixed",
    "Full",
    "Gate",
    "Handle",
    "Ignore",
    "Jitter",
    "Later",
    "Lease",
    "Limits",
    "Make",
    "Missing",
    "PanicError",
    "Pool",
    "PoolTimeout",
    "Pooled",
    "Ready",
    "RedisBroker",
    "Refused",
    "Reject",
    "Retry",
    "Revoked",
    "Shed",
    "ShedError",
    "SharedBucket",
    "SharedGate",
    "SharedWindow",
    "Signature",
    "SoftTimeLimitExceeded",
    "Stale",
    "Taken",
    "Task",
    "TaskFailed",
    "TaskRetry",
    "Timeout",
    "UnknownTask",
    "Wait",
    "Ward",
    "Window",
    "Worker",
    "chain",
    "chord",
    "current",
    "group",
    "pick",
    "retry",
    "retrying",
]

__version__ = "0.1.0"

# Workers forked from one parent must not all draw the same jitter.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_native._reseed)
