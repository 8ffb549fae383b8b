"""Where a Python worker's CPU goes in a Redis drain, thread by thread.

    python bench/tasks/drain_threads.py URL N

Sends N no-op runs, drains them with a worker at headway's defaults and
prints one JSON line: the drain's rate, and each thread's CPU per task (µs,
user + system, from /proc/self/task/*/stat, summed by thread name:
``python`` the interpreter's threads, the runner threads among them;
``headway`` the core's tokio runtime) with its voluntary context switches
per task. A profiling aid, not a benchmark row; drain_threads.mjs is the
same for a Node worker.
"""

from __future__ import annotations

import json
import os
import sys
import time

from headway import App, RedisBroker


def threads() -> dict[str, tuple[str, int, int]]:
    out = {}
    for t in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{t}/stat") as f:
                stat = f.read()
            with open(f"/proc/self/task/{t}/status") as f:
                status = f.read()
        except OSError:
            continue  # the thread ended meanwhile
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        switches = int(status.split("voluntary_ctxt_switches:")[1].split()[0])
        out[t] = (name, int(fields[11]) + int(fields[12]), switches)
    return out


def per_task(a: dict[str, tuple[str, int, int]], b: dict[str, tuple[str, int, int]], n: int) -> dict[str, dict[str, float]]:
    us: dict[str, float] = {}
    switches: dict[str, float] = {}
    for t, (name, ticks, sw) in b.items():
        _, ticks0, sw0 = a.get(t, (name, 0, 0))
        us[name] = us.get(name, 0) + ticks - ticks0
        switches[name] = switches.get(name, 0) + sw - sw0
    # 100 ticks a second.
    return {
        "us": {k: round(v * 1e4 / n, 2) for k, v in us.items()},
        "switches": {k: round(v / n, 3) for k, v in switches.items()},
    }


def main() -> None:
    url, n = sys.argv[1], int(sys.argv[2])
    app = App(RedisBroker(url))

    @app.task(name="bench.noop", queue="default")
    def noop(i: int) -> int:
        return 1

    for i in range(n):
        noop.delay(i)
    w = app.worker("default")
    before = threads()
    t0 = time.perf_counter()
    w.start()
    while w.settled < n:
        time.sleep(0.001)
    seconds = time.perf_counter() - t0
    after = threads()
    print(json.dumps({"drain": round(n / seconds), "threads": per_task(before, after, n)}))
    w.stop()


if __name__ == "__main__":
    main()
