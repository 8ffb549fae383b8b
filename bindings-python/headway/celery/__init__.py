"""Celery's API on headway: a Celery project changes only its imports.

    from headway.celery import Celery, shared_task      # was: from celery import ...

    app = Celery("proj", broker="redis://localhost:6379/0")

    @app.task(bind=True, autoretry_for=(IOError,), retry_backoff=True)
    def fetch(self, url): ...

The app runs on headway alone (Celery need not be installed) and speaks
Celery's Redis layout and message format, so Celery workers and producers
on the same Redis share its queues while a project moves over. Tasks,
``self.request``, ``self.retry``, ``autoretry_for`` with ``retry_backoff``,
``Reject`` / ``Ignore``, ``AsyncResult``, signatures, chains, groups,
chords, ``map`` / ``starmap`` / ``chunks``, ``task_routes`` and the common
settings keep Celery's meaning; what differs or is missing is listed in
docs/celery.md. ``headway worker -A proj:app`` serves it.
"""

from __future__ import annotations

from .._tasks import chain, chord, group
from . import exceptions, states
from .app import Celery, Request, Task, chunks, current_app, shared_task, signature
from .result import AsyncResult

__all__ = [
    "AsyncResult",
    "Celery",
    "Request",
    "Task",
    "chain",
    "chord",
    "chunks",
    "current_app",
    "exceptions",
    "group",
    "shared_task",
    "signature",
    "states",
]
