"""headway's log records in Python's ``logging``.

The core's records (a worker's warnings, a Redis link's, the beat's, the
admin's) reach loggers under ``headway``: ``headway.worker``,
``headway.redis``, ``headway.celery``, ``headway.beat``, ``headway.admin``,
``headway.memory``. A record about a run carries ``worker``, ``task_name``
and ``task_id`` as attributes (``extra``), so a handler or a formatter can
use them (``%(task_id)s``); they are ``None`` where not known.

The core delivers records in order on a thread of its own, so a worker
never waits for the GIL to log. With no handler configured, Python's last
resort prints warnings and errors to stderr, as before. The core makes no
record below the level of the ``headway`` logger when headway was imported
(WARNING unless configured earlier); :func:`set_level` (the CLI's
``--loglevel``) changes both.
"""

from __future__ import annotations

import atexit
import logging

from . import _native

__all__ = ["JsonFormatter", "TextFormatter", "set_level"]


def _emit(
    level: str,
    name: str,
    message: str,
    worker: str | None,
    task: str | None,
    id: str | None,
    ts: float,
) -> None:
    logger = logging.getLogger(name)
    levelno = logging.getLevelName(level)
    if not isinstance(levelno, int) or not logger.isEnabledFor(levelno):
        return
    record = logger.makeRecord(
        name,
        levelno,
        "(headway core)",
        0,
        message,
        (),
        None,
        extra={"worker": worker, "task_name": task, "task_id": id},
    )
    # When the core made it, not when it was delivered.
    record.created = ts
    record.msecs = (ts - int(ts)) * 1000
    logger.handle(record)


def set_level(level: str) -> None:
    """Sets the level of headway's records (``debug``, ``info``,
    ``warning``, ``error``, ``critical``): the core's and the ``headway``
    logger's. Raises ``ValueError`` naming a level it does not know."""
    logging.getLogger("headway").setLevel(_native.log_level(level))


class _Formatter(logging.Formatter):
    _format = "text"

    def format(self, record: logging.LogRecord) -> str:
        line = _native.log_line(
            self._format,
            record.created,
            record.levelname,
            record.name,
            record.getMessage(),
            getattr(record, "worker", None),
            getattr(record, "task_name", None),
            getattr(record, "task_id", None),
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class TextFormatter(_Formatter):
    """``[<UTC time> <LEVEL> <logger>] <message>``, as the Node CLI writes."""

    _format = "text"


class JsonFormatter(_Formatter):
    """One JSON object a line: ``ts``, ``level``, ``logger``, ``message``, and
    ``worker``, ``task_name``, ``task_id`` when known — as the Node CLI's
    ``--log-format json``."""

    _format = "json"


def _flush() -> None:
    _native.log_flush(2.0)


def _start() -> None:
    level = logging.getLevelName(logging.getLogger("headway").getEffectiveLevel())
    if isinstance(level, str):
        try:
            _native.log_level(level)
        except ValueError:
            pass
    _native.log_to(_emit)
    atexit.register(_flush)
