"""What both drivers of ``run.sh`` share (``hw.py`` under headway's venv,
``cel.py`` under Celery's): reading a process's memory from ``/proc``, and
turning the bodies' ``[start, end]`` answers into a rate."""

from __future__ import annotations

import json
import os
import time


def memory(pid: int) -> dict[str, int | None]:
    """A process's resident memory in KiB: ``rss`` is ``VmRSS`` from
    ``/proc/PID/status`` (every resident page it maps, shared or not);
    ``pss`` is ``Pss`` from ``/proc/PID/smaps_rollup`` (each shared page
    divided among the processes mapping it — what a forked child holds that
    its parent does not is counted whole, what it still shares is split)."""
    out: dict[str, int | None] = {"pid": pid, "rss": None, "pss": None}
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    out["rss"] = int(line.split()[1])
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    out["pss"] = int(line.split()[1])
    except OSError:
        pass
    return out


def children(pid: int) -> list[int]:
    """The live children of ``pid`` (from ``/proc/PID/task/*/children``)."""
    kids: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/children") as f:
                kids.extend(int(k) for k in f.read().split())
        except OSError:
            pass
    return sorted(set(kids))


def spans(pairs: list[list[float]], n: int, launched: float) -> dict[str, float]:
    """From every run's ``[start, end]``: ``rate`` is N ÷ (last end − first
    start), the runs per second while the drain ran; ``wall`` is the seconds
    from the worker's launch to the last end (its start-up included);
    ``body_ms`` the mean time inside a body."""
    if len(pairs) != n:
        raise SystemExit(f"{len(pairs)} results, not {n}")
    first = min(p[0] for p in pairs)
    last = max(p[1] for p in pairs)
    return {
        "rate": n / (last - first),
        "seconds": last - first,
        "wall": last - launched,
        "body_ms": sum(p[1] - p[0] for p in pairs) / n * 1000,
    }


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def deadline() -> float:
    return time.monotonic() + float(os.environ.get("PROCS_TIMEOUT", "300"))


def emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)
