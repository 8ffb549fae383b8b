"""Celery's exception names (``celery.exceptions``) for code that swaps its
imports to ``headway.celery``.

``Retry``, ``Reject``, ``Ignore`` and ``SoftTimeLimitExceeded`` are
headway's own classes: raised in a body they mean what they mean to Celery
(``Retry`` is what ``self.retry()`` raises). ``MaxRetriesExceededError``,
``TimeLimitExceeded`` and ``WorkerLostError`` are the names a run's failure
carries (``TaskFailed.remote_type``); the classes exist so the imports and
``except`` clauses of a Celery project keep working. ``TimeoutError`` is
headway's ``Timeout`` (what ``get(timeout=...)`` raises), a builtin
``TimeoutError`` as well.
"""

from __future__ import annotations

from .._errors import Ignore, Reject, SoftTimeLimitExceeded, TaskFailed
from .._errors import Timeout as TimeoutError  # noqa: A004 - Celery's name; a builtin TimeoutError too
from .._errors import TaskRetry as Retry


class CeleryError(Exception):
    """Celery's base class of its own errors."""


class TaskError(CeleryError):
    """Celery's base class of task errors."""


class MaxRetriesExceededError(TaskError):
    """A run asked for a retry past its ``max_retries``."""


class TimeLimitExceeded(Exception):
    """A run passed its hard time limit (its process was killed)."""


class WorkerLostError(Exception):
    """The process running a run died."""


__all__ = [
    "CeleryError",
    "Ignore",
    "MaxRetriesExceededError",
    "Reject",
    "Retry",
    "SoftTimeLimitExceeded",
    "TaskError",
    "TaskFailed",
    "TimeLimitExceeded",
    "TimeoutError",
    "WorkerLostError",
]
