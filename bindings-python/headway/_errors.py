"""The exceptions headway raises.

Flow control: the core answers; it never raises for a full pool or an empty
bucket. ``Full``, ``ShedError`` and ``PoolTimeout`` are what the runtime
drivers (``Gate`` as a context manager, ``Pooled``) turn an answer into when
the caller asked to be served and could not be.

Tasks: ``Refused`` and its subclasses are the ways a run, a send or a wait can
be refused (the core's ``Refused``), one class per reason so ``except`` can
tell them apart. A bad argument is a ``ValueError`` or ``TypeError`` naming it,
as everywhere in headway; it is not a ``Refused``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BrokerClosedError",
    "BrokerConnectionError",
    "BrokerDataError",
    "BrokerError",
    "BrokerScriptError",
    "BrokerServerError",
    "Full",
    "Ignore",
    "Missing",
    "PoolTimeout",
    "Refused",
    "Reject",
    "Revoked",
    "ShedError",
    "SoftTimeLimitExceeded",
    "TaskFailed",
    "TaskRetry",
    "Timeout",
    "UnknownTask",
]


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


# ---------------------------------------------------------------- tasks


class SoftTimeLimitExceeded(Exception):
    """Raised inside a sync body once its run passed its ``soft_time_limit``
    (Celery's exception of the same name). The body may catch it, clean up
    and return: its return value is the run's result. Uncaught, the run fails
    with this type. In a process-pool child it also ends a blocking call
    (``time.sleep``, a socket read); on the threads pool it fires at the
    body's next Python instruction, so a body blocked in C sees it when that
    call returns. An ``async def`` body keeps time with ``asyncio.timeout``.
    """


#: The class raised in a body past its soft limit: ``SoftTimeLimitExceeded``,
#: or the subclass a served Celery app registers (Celery's as well, so a
#: Celery task's ``except SoftTimeLimitExceeded`` catches it).
_SOFT: list[type[BaseException]] = [SoftTimeLimitExceeded]


def _raised_soft() -> type[BaseException]:
    return _SOFT[0]


def _ms(v: Any) -> Any:
    """Seconds as ms for the core; anything else as given (the core names
    what is wrong with it)."""
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return v * 1000
    return v


def _eta_ms(v: Any) -> Any:
    """An eta (an aware ``datetime``, or seconds since the epoch) as ms; a
    ``datetime`` is read as every instant argument is (a naive one refused)."""
    from datetime import datetime

    if isinstance(v, datetime):
        from . import _native

        return _native._eta_ms(v)
    return _ms(v)


class TaskRetry(Exception):
    """Raised by a body (or by ``ctx.retry(...)``) to have its run retried on
    its own terms, as Celery's ``self.retry``: after ``countdown`` seconds or
    at ``eta`` (an aware ``datetime``; else the task's backoff), within
    ``max_retries`` attempts (else the task's ``retries``), recording ``exc``
    meanwhile. Past that budget the run fails with ``exc``, or without one
    with ``MaxRetriesExceededError``."""

    def __init__(
        self,
        message: str | None = None,
        *,
        countdown: float | None = None,
        eta: Any = None,
        max_retries: int | None = None,
        exc: BaseException | None = None,
    ) -> None:
        super().__init__(message or ("Retry" + (f" in {countdown}s" if countdown is not None else "")))
        # Recorded as Celery records it: the run's RETRY shows `Retry`.
        self.countdown = countdown
        self.eta = eta
        self.max_retries = max_retries
        self.exc = exc

    def _headway_ask(self) -> tuple[dict[str, Any], BaseException | None]:
        ask: dict[str, Any] = {"ask": "retry"}
        if self.countdown is not None:
            ask["countdown"] = _ms(self.countdown)
        if self.eta is not None:
            ask["eta"] = _eta_ms(self.eta)
        if self.max_retries is not None:
            ask["max_retries"] = self.max_retries
        return ask, (self.exc if self.exc is not self else None)


class Reject(Exception):
    """Raised by a body to reject its message, as Celery's ``Reject``: with
    ``requeue=True`` it goes back to its queue as it was; without, the run
    fails for good with this type and ``reason`` (where Celery's Redis
    transport drops the message, the caller here sees why)."""

    def __init__(self, reason: object = None, requeue: bool = False) -> None:
        super().__init__(reason if reason is not None else "rejected")
        self.reason = reason
        self.requeue = requeue

    def _headway_ask(self) -> tuple[dict[str, Any], None]:
        return {"ask": "reject", "requeue": self.requeue}, None


class Ignore(Exception):
    """Raised by a body to end its run with nothing stored and no state
    recorded, as Celery's ``Ignore`` (a body that settled its run some other
    way)."""

    def _headway_ask(self) -> tuple[dict[str, Any], None]:
        return {"ask": "ignore"}, None


class Refused(Exception):
    """A task-side call did not answer a value: the base of ``TaskFailed``,
    ``Timeout``, ``Revoked``, ``Missing``, ``UnknownTask`` and ``BrokerError``.

    ``except headway.Refused`` catches every reason a run's result will not
    come; the subclasses say which.
    """


class TaskFailed(Refused):
    """The body raised on its last attempt (or a chord part did, for a
    chord's callback).

    It carries what the worker saw, which may be another process or another
    language: ``type`` is the remote exception's type name (``"ValueError"``),
    ``message`` its ``str()``, ``traceback`` the formatted traceback text when
    the body's language had one, ``module`` the exception's module when known
    (Celery's ``exc_module``). The remote exception itself is not rebuilt:
    its class may not exist here.
    """

    type: str
    message: str
    traceback: str | None
    module: str | None

    def __init__(
        self,
        type: str,
        message: str,
        traceback: str | None = None,
        module: str | None = None,
    ) -> None:
        super().__init__(f"{type}: {message}")
        self.type = type
        self.message = message
        self.traceback = traceback
        self.module = module

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.type, self.message, self.traceback, self.module))


class Timeout(Refused, TimeoutError):
    """The wait ran out before the result came (``get(timeout=...)``). A
    builtin ``TimeoutError`` too, so code written for any timeout catches it.

    The run may still finish later; the handle can be waited on again.
    """


class Revoked(Refused):
    """The run was revoked, expired before it started, or was terminated: it
    will not produce a value. ``id`` is the run's id."""

    id: str

    def __init__(self, id: str) -> None:
        super().__init__(f"task {id} was revoked")
        self.id = id

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.id,))


class Missing(Refused):
    """There is no result to wait for: the app keeps no results
    (``App(backend=False)``)."""


class UnknownTask(Refused):
    """``app.send(name, ...)`` was given a name this app has not registered.

    A queue that accepts work nobody can run only moves the failure to a
    worker; ``app.send_task`` is the call for a task another process runs.
    ``name`` is the name that was refused.
    """

    name: str

    def __init__(self, name: str) -> None:
        super().__init__(f"no task is registered as {name!r}")
        self.name = name

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.name,))


class BrokerError(Refused):
    """The broker or the result store failed: unreachable, refused the
    command, or answered something unreadable. The message says what
    happened (a URL's password is never shown); ``kind`` says how, for code:
    ``"connection"``, ``"script"``, ``"server"``, ``"closed"``, ``"data"``
    or ``"other"``. Each kind but ``"other"`` raises its own subclass
    (``BrokerConnectionError``, ...), so ``except`` can tell them apart and
    ``except BrokerError`` still catches them all.
    """

    kind: str

    def __init__(self, message: str, kind: str = "other") -> None:
        super().__init__(message)
        self.kind = kind

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (str(self), self.kind))


class BrokerConnectionError(BrokerError):
    """Redis could not be reached, the connection was lost, or a reply did
    not come in time (``kind == "connection"``). Worth trying again later."""


class BrokerScriptError(BrokerError):
    """A Lua script failed, or Redis answered something of a shape headway
    did not expect (``kind == "script"``): a bug, or another program writing
    headway's keys."""


class BrokerServerError(BrokerError):
    """Redis refused the command (``kind == "server"``): out of memory,
    read-only (a replica), a wrong password or missing permission, unable to
    persist. Somebody must look at the server."""


class BrokerClosedError(BrokerError):
    """This broker or worker was closed (``kind == "closed"``)."""


class BrokerDataError(BrokerError):
    """A stored value could not be read, or a value could not be written as
    one (``kind == "data"``)."""
