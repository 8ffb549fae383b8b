"""What tests need: a clock that sleeping advances.

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
"""

from __future__ import annotations

from ._native import VirtualClock

__all__ = ["VirtualClock"]
