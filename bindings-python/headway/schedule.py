"""A job on a rhythm inside one process, with no broker behind it.

For a service that needs a periodic job and no queue — what node-cron or
APScheduler are reached for::

    from headway.schedule import Scheduler, Every, Cron

    s = Scheduler()
    s.add("flush", flush_metrics, Every(10))
    s.add("report", send_report, Cron("0 9 * * MON-FRI", tz="Europe/London"))
    s.start()

The core keeps the timetable — the beat's own, so the two agree on when
something is due — and keeps the phase (the next time is computed from the
time that was due). Two rules from APScheduler's defaults: a job still
running when it is due again is skipped for that slot (``max_instances=1``),
and slots missed while the process was busy or asleep fire once, not once
each (``coalesce=True``). A job that raises is logged and counted
(``stats(name)``); the rhythm goes on.

A job is called with no arguments, sync or ``async def``;
``headway.current()`` inside it answers a ``Context`` whose ``name`` is the
job's and ``now`` the time it was due.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime
from typing import Any

from . import _native
from ._native import At, Cron, Every, VirtualClock
from ._serve import Serving
from ._tasks import GRACE, _is_async, _join, _live, _reraise, _run_in_thread

__all__ = ["At", "Cron", "Every", "Scheduler"]

#: Threads running sync jobs at once: 10, APScheduler's default thread pool.
THREADS = 10


class Scheduler:
    """Jobs on rhythms inside one process (see the module).

    ``clock`` is ``None`` (the system clock) or a
    ``headway.testing.VirtualClock``, on which ``run(until=...)`` runs an
    hour of jobs in milliseconds.
    """

    def __init__(self, clock: VirtualClock | None = None, *, threads: int = THREADS) -> None:
        if threads < 1:
            raise ValueError("invalid `threads`: must be at least 1")
        self._native = _native._Scheduler(clock)
        self.clock = clock
        self._threads = threads
        self._serving: Serving | None = None
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None
        self._lock = threading.Lock()

    def add(self, name: str, fn: Callable[[], Any], rhythm: Every | Cron | At) -> None:
        """Adds (or replaces) the job ``name``: ``fn()`` on ``rhythm``."""
        if not callable(fn):
            raise TypeError(f"`fn` must be callable, not {type(fn).__name__}")
        self._native.add(name, fn, _is_async(fn), rhythm)

    def remove(self, name: str) -> bool:
        """Removes the job ``name``; ``False`` when there was none."""
        return self._native.remove(name)

    def pending(self) -> list[tuple[str, datetime]]:
        """Job names and when each fires next (aware UTC ``datetime``),
        soonest first."""
        return self._native.pending()

    def stats(self, name: str) -> dict[str, Any] | None:
        """How the job has gone: ``fired``, ``failed``, ``skipped`` counts
        and the ``last_error`` text; ``None`` for an unknown name."""
        return self._native.stats(name)

    def _serve(self) -> None:
        with self._lock:
            if self._serving is None:
                host = self._native.host
                n = self._threads if host.has_sync() else 1
                self._serving = Serving(host, name="headway-schedule", sync_threads=n)
                _live.add(self)

    def tick(self) -> list[tuple[str, datetime]]:
        """Calls what is due now, waits for those calls, and answers
        ``(name, due)`` for each call made."""
        self._serve()
        return self._native.tick()

    def run(self, until: datetime | float | None = None) -> None:
        """Calls due jobs and sleeps until the next, until ``stop()`` (or
        until the clock reaches ``until``). Blocks; Ctrl-C stops it and
        re-raises."""
        self._serve()
        self._native.run(until)

    def start(self) -> None:
        """Runs it on a background (daemon) thread and returns at once."""
        self._serve()

        self._thread = _run_in_thread(self, "headway-schedule")

    def stop(self) -> None:
        """Stops it after the tick in progress, waits for a started one, and
        stops its threads."""
        self._native.stop()
        _join(self)
        self._unserve()
        _live.discard(self)
        _reraise(self)

    def _exit(self) -> None:
        # At exit: stop, give a job in progress the worker's grace, and stop
        # the threads; a job still stuck after that is abandoned.
        self._native.stop()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(GRACE)
        self._unserve()

    def _unserve(self) -> None:
        with self._lock:
            if self._serving is not None:
                self._serving.close()
                self._serving = None
