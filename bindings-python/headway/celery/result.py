"""Celery's ``AsyncResult`` over a headway handle.

Celery reads a result's state and value from its backend on each access;
so does this, through the handle (one round trip per call, as Celery's).
A failed run's ``result`` is the exception ``get()`` would raise
(``TaskFailed``, naming the remote type), as Celery's is the exception.
"""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from .._errors import Revoked, TaskFailed
from . import states

if TYPE_CHECKING:
    from .._native import Handle
    from .app import Celery


class AsyncResult:
    """The result of run ``id`` (Celery's ``celery.result.AsyncResult``)."""

    def __init__(self, id: str, app: Celery | None = None) -> None:
        from .app import current_app  # noqa: PLC0415 - the module imports this one

        self.id = id
        self.app = app if app is not None else current_app()
        self._handle: Handle[Any] = self.app.app.handle(id)

    @classmethod
    def _of(cls, handle: Handle[Any], app: Celery) -> AsyncResult:
        """The result a canvas send answered (a group's is the set; a
        chain's knows its parents)."""
        r = cls.__new__(cls)
        r.id, r.app, r._handle = handle.id, app, handle
        return r

    @property
    def task_id(self) -> str:
        """Celery's other name of ``id``."""
        return self.id

    @property
    def state(self) -> str:
        """PENDING, STARTED, RETRY, SUCCESS, FAILURE, REVOKED, ..."""
        return str(self._handle.state())

    status = state

    def ready(self) -> bool:
        return self.state in states.READY_STATES

    def successful(self) -> bool:
        return self.state == states.SUCCESS

    def failed(self) -> bool:
        return self.state == states.FAILURE

    def get(self, timeout: float | None = None, propagate: bool = True, **_: Any) -> Any:
        """The run's result, waiting up to ``timeout`` seconds (``None``:
        for ever). A failure raises unless ``propagate=False``, which
        answers the exception instead."""
        try:
            return self._handle.get(timeout=timeout)
        except (TaskFailed, Revoked) as e:
            if propagate:
                raise
            return e

    wait = get

    @property
    def result(self) -> Any:
        """The value of a successful run, the exception of a failed one,
        ``None`` while it is not ready."""
        if not self.ready():
            return None
        return self.get(timeout=0, propagate=False)

    @property
    def info(self) -> Any:
        """``result`` once ready; before, the meta of a custom state the
        run recorded (``update_state``), else ``None``."""
        if self.ready():
            return self.result
        return self._handle.info()

    @property
    def traceback(self) -> str | None:
        """The formatted traceback of a failed run, when its body's language had one."""
        r = self.result
        return r.traceback if isinstance(r, TaskFailed) else None

    @property
    def date_done(self) -> datetime.datetime | None:
        """When the run reached its final state (aware UTC), else None."""
        return self._handle.date_done()

    @property
    def children(self) -> list[AsyncResult]:
        """The runs its success sent on: its ``link`` callbacks and its
        chain's next link (empty before it succeeded)."""
        return [AsyncResult._of(h, self.app) for h in self._handle.children()]

    @property
    def parent(self) -> AsyncResult | None:
        """The previous link of the chain this result ends, when sent here."""
        p = self._handle.parent
        return None if p is None else AsyncResult._of(p, self.app)

    def forget(self) -> None:
        """Removes the stored result: the run then reads PENDING."""
        self._handle.forget()

    def revoke(self, terminate: bool = False, signal: str | int = "SIGTERM", **_: Any) -> None:
        self._handle.revoke(terminate=terminate, signal=signal)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, AsyncResult):
            return other.id == self.id
        if isinstance(other, str):
            return other == self.id
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.id)

    def __repr__(self) -> str:
        return f"<AsyncResult: {self.id}>"
