"""What tests need: a clock that sleeping advances, and a way to put bytes
on a queue as a foreign producer would.

``VirtualClock(start=...)`` (an aware ``datetime`` or epoch seconds) is the
clock workers, beats and schedulers *sleep on*: a sleep advances it instead
of waiting, so a retry schedule or an hour of beats runs in milliseconds and
prints the same every time. Give it to ``App(clock=...)`` or
``Scheduler(clock=...)``. ``now()`` reads epoch seconds, ``datetime()`` an
aware UTC ``datetime``; ``advance(seconds)`` and ``advance_to(when)`` move it
(never backwards).

What it moves is what the queue schedules — etas, retry backoffs, expiry,
beats. A body's ``timeout`` and ``get(timeout=...)`` stay real waits: no
clock makes a stuck body finish sooner.

``push_raw(app, queue, data)`` puts ``data`` on ``queue`` of the app's
broker (memory, headway's Redis layout or Celery's) unchecked, as another
producer would: the worker that claims it decodes it, and quarantines it as
a dead letter if it is not a message headway runs (``app.dead_letters``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._native import VirtualClock

if TYPE_CHECKING:
    from ._tasks import App

__all__ = ["VirtualClock", "push_raw"]


def push_raw(app: App, queue: str, data: bytes) -> None:
    """Puts ``data`` on ``queue`` as a foreign producer would, unchecked."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"`data` must be bytes, not {type(data).__name__}")
    app._native._push_raw(queue, bytes(data))
