"""The bodies every contender of ``run.sh`` runs — one copy of the code,
imported by headway's app and by Celery's, so both run the same bytecode.

Each body answers ``[start, end]``, ``time.time()`` when it began and when
it ended: the driver reads the span of a drain from the stored results
themselves (first start to last end), so nothing has to poll Redis or the
worker while the contenders run.
"""

import time


def spin(n):
    """Pure-Python work, GIL held throughout: ``n`` rounds of an add and a
    multiply (``run.sh`` calibrates ``n`` to about 20 ms once per run)."""
    start = time.time()
    x = 0
    for i in range(n):
        x += i * i
    return [start, time.time()]


def noop():
    """Nothing but the two clock reads."""
    t = time.time()
    return [t, t]
