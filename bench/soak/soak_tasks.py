"""The soak's app: what `headway worker -A soak_tasks:app` runs (bench/soak).

One task, ``soak.job(kind)``, ``acks_late`` (a worker killed mid-run means
the run goes again elsewhere), two retries 0.5 s apart; it returns its kind
(what the soak reads back from the result store at the end). Kinds: ``fast``
sleeps 5 ms, ``slow`` 200 ms, ``flaky`` fails its first attempt and succeeds
on the second. There is no poison: every run the producer sends must end in
SUCCESS, so a run that fails for good or is dead-lettered is the soak's
failure, never part of the workload.

Every execution appends one line to this process's ledger file
(``$SOAK_LEDGER/<pid>.log``, one ``write`` on an ``O_APPEND`` descriptor, so
lines from the runner threads never interleave and survive a kill -9):

    <id> <attempt> <pid> <start> <end> <outcome>

``outcome`` is ``ok``, ``retry`` (raised, another attempt follows) or
``fail`` (raised on the last attempt). Times are epoch seconds.
"""

from __future__ import annotations

import os
import threading
import time

import headway

URL = os.environ["SOAK_URL"]
PREFIX = os.environ.get("SOAK_PREFIX", "soak:")
LEASE = float(os.environ.get("SOAK_LEASE", "4"))
LEDGER = os.environ["SOAK_LEDGER"]
# `soak.py --early-ack` (a check of the soak itself): acked on receipt, a
# kill -9 loses what the worker held, and the soak must say so.
ACKS_LATE = os.environ.get("SOAK_ACKS_LATE", "1") != "0"

app = headway.App(headway.RedisBroker(URL, prefix=PREFIX, lease=LEASE))

_fd: int | None = None
_fd_lock = threading.Lock()
SLEEP = {"fast": 0.005, "slow": 0.2, "flaky": 0.005}


def _ledger() -> int:
    global _fd
    with _fd_lock:
        if _fd is None:
            path = os.path.join(LEDGER, f"{os.getpid()}.log")
            _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return _fd


def _record(ctx: headway.Context, start: float, outcome: str) -> None:
    line = f"{ctx.id} {ctx.attempt} {os.getpid()} {start:.6f} {time.time():.6f} {outcome}\n"
    os.write(_ledger(), line.encode())


class SoakFailure(Exception):
    """What a flaky or doomed attempt raises."""


@app.task(name="soak.job", acks_late=ACKS_LATE, retries=2, backoff=headway.Fixed(0.5))
def job(kind: str) -> str:
    ctx = headway.current()
    start = time.time()
    time.sleep(SLEEP.get(kind, 0.005))
    if kind not in SLEEP or (kind == "flaky" and ctx.attempt == 1):
        _record(ctx, start, "fail" if ctx.last else "retry")
        raise SoakFailure(f"{kind} attempt {ctx.attempt}")
    _record(ctx, start, "ok")
    return kind
