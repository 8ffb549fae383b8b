"""Hooks, under Celery's names: ``from headway.signals import task_prerun``.

Task signals fire in the process and on the thread that runs the body, as
Celery's do — the worker's process on the threads pool, the child on the
process pool — so a receiver can set up and tear down per-run state (a
database session, a Sentry scope, a log context) around the body:

- ``task_prerun(sender=task, task_id, task, args, kwargs)`` before the body;
- ``task_success(sender=task, result)`` when it returned;
- ``task_retry(sender=task, request, reason, einfo)`` when it raised and an
  attempt is left (``request`` is the run's ``Context``);
- ``task_failure(sender=task, task_id, exception, args, kwargs, traceback,
  einfo)`` when it raised for good;
- ``task_postrun(sender=task, task_id, task, args, kwargs, retval, state)``
  after each of those (``state``: ``SUCCESS``, ``RETRY`` or ``FAILURE``).

``worker_ready(sender=worker)`` fires once a worker runs, and
``worker_shutdown(sender=worker)`` once it has stopped.

``sender`` is the ``Task`` (or the ``Worker``). ``connect`` works as a
decorator, with or without ``sender=`` to listen to one task only; a
receiver is called with ``signal``, ``sender`` and the named arguments (take
``**kwargs``: more may come). An exception in a receiver is logged
(``headway.signals``) and never fails the run. While no task signal has a
receiver, running a body costs nothing extra.
"""

from __future__ import annotations

import logging
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

from . import _native, _tracing

__all__ = [
    "Signal",
    "task_failure",
    "task_postrun",
    "task_prerun",
    "task_retry",
    "task_success",
    "worker_ready",
    "worker_shutdown",
]

_log = logging.getLogger("headway.signals")
_lock = threading.Lock()
# Registered tasks by name, for `sender` (the app's Task objects).
_tasks: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()

Receiver = Callable[..., Any]


class Signal:
    """A hook receivers connect to; ``send`` calls each of them."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._receivers: list[tuple[Receiver, Any]] = []

    def __repr__(self) -> str:
        return f"<Signal: {self.name}>"

    def connect(self, receiver: Receiver | None = None, *, sender: Any = None) -> Any:
        """Adds ``receiver`` (called for every sender, or only ``sender``);
        answers it, so it works as a decorator, also as
        ``@signal.connect(sender=task)``."""

        def add(fn: Receiver) -> Receiver:
            if not callable(fn):
                raise TypeError(f"{self.name}.connect needs a callable, not {type(fn).__name__}")
            with _lock:
                if (fn, sender) not in self._receivers:
                    self._receivers.append((fn, sender))
                _rehook()
            return fn

        return add if receiver is None else add(receiver)

    def disconnect(self, receiver: Receiver, sender: Any = None) -> bool:
        """Removes ``receiver`` (as connected for ``sender``); answers
        whether it was connected."""
        with _lock:
            try:
                self._receivers.remove((receiver, sender))
            except ValueError:
                return False
            _rehook()
            return True

    @property
    def receivers(self) -> list[Receiver]:
        """The receivers connected, in order."""
        return [r for r, _ in self._receivers]

    def send(self, sender: Any, **named: Any) -> list[tuple[Receiver, Any]]:
        """Calls each receiver for ``sender``; answers ``(receiver,
        response)`` pairs, the response being the exception a receiver
        raised (logged too)."""
        out: list[tuple[Receiver, Any]] = []
        for fn, only in list(self._receivers):
            if only is not None and only is not sender and only != getattr(sender, "name", sender):
                continue
            try:
                out.append((fn, fn(signal=self, sender=sender, **named)))
            except Exception as e:  # noqa: BLE001 - a receiver's error is reported, not raised
                _log.exception("headway: a %s receiver raised", self.name)
                out.append((fn, e))
        return out


task_prerun = Signal("task_prerun")
task_postrun = Signal("task_postrun")
task_success = Signal("task_success")
task_failure = Signal("task_failure")
task_retry = Signal("task_retry")
worker_ready = Signal("worker_ready")
worker_shutdown = Signal("worker_shutdown")

_TASK_SIGNALS = (task_prerun, task_postrun, task_success, task_failure, task_retry)


#: The hook while a task signal has a receiver (async bodies read it here;
#: sync ones are hooked by the native host).
active: Callable[..., None] | None = None


def _rehook() -> None:
    global active
    on = any(s._receivers for s in _TASK_SIGNALS)
    active = _hook if on else None
    _native._set_task_hook(_tracing.compose(active))


def _known(name: str, task: Any) -> None:
    _tasks[name] = task


def _hook(
    phase: str,
    name: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    out: Any,
    returned: bool,
) -> None:
    """Called on the body's thread, its run current, before the body
    (``"pre"``) and after it (``"post"``, with what it returned or raised),
    by the native host for sync bodies and by ``_serve`` for async ones."""
    task = _tasks.get(name, name)
    kw = kwargs or {}
    ctx = _native.current()
    task_id = ctx.id
    if phase == "pre":
        task_prerun.send(task, task_id=task_id, task=task, args=args, kwargs=kw)
        return
    # What the run comes to is the core's rule.
    state = ctx._state_after() if returned else ctx._state_after(out)
    if state == "SUCCESS":
        task_success.send(task, result=out)
    else:
        exc = out if isinstance(out, BaseException) else None
        tb = exc.__traceback__ if exc is not None else None
        einfo = (type(exc), exc, tb) if exc is not None else sys.exc_info()
        if state == "RETRY":
            task_retry.send(task, request=ctx, reason=exc, einfo=einfo)
        elif state == "FAILURE":
            # A requeueing reject (REJECTED) or an ignore (IGNORED) is
            # neither a retry nor a failure: task_postrun alone, as Celery.
            task_failure.send(
                task, task_id=task_id, exception=exc, args=args, kwargs=kw, traceback=tb, einfo=einfo
            )
    task_postrun.send(
        task, task_id=task_id, task=task, args=args, kwargs=kw, retval=out, state=state
    )
