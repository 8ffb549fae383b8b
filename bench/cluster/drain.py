"""One headway drain on one broker URL (run by ``run.sh``; prints one JSON
line).

    python drain.py URL N QUEUES

Fills QUEUES queues (``q0`` .. ``q{QUEUES-1}``) with N no-op runs in all,
round robin, as ``group`` sends of 1000 with no worker running; then one
worker at headway's defaults (concurrency 4, prefetch 16) consumes every
queue, and the clock runs from ``start()`` until it has settled all N. Each
run's SUCCESS is read back afterwards; fewer than N exits 1.

On a Cluster every queue's keys share one hash tag, so a queue lives on one
primary; several queues spread over the primaries (which ``run.sh``
reports: the slot owner of each queue).
"""

from __future__ import annotations

import json
import sys
import time

import headway

BATCH = 1000


def main() -> None:
    url, n, queues = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    app = headway.App(headway.RedisBroker(url))
    names = [f"q{k}" for k in range(queues)]

    @app.task(name="bench.noop")
    def noop(i: int) -> None:
        return None

    ids: list[str] = []
    t0 = time.perf_counter()
    for s in range(0, n, BATCH):
        sigs = [noop.s(i).set(queue=names[i % queues]) for i in range(s, min(n, s + BATCH))]
        ids.extend(headway.group(sigs).send().ids)
    fill = n / (time.perf_counter() - t0)
    w = app.worker(names)
    t0 = time.perf_counter()
    w.start()
    deadline = time.monotonic() + 600
    while w.settled < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"drain timed out at {w.settled}/{n}")
        time.sleep(0.0005)
    drain = n / (time.perf_counter() - t0)
    w.stop(5.0)
    ok = sum(1 for t in ids if app.handle(t).state() == "SUCCESS")
    if ok != n or len(ids) != n:
        raise SystemExit(f"{ok} of {n} runs are SUCCESS ({len(ids)} ids)")
    print(json.dumps({"fill": fill, "drain": drain, "verified_success": ok,
                      "settings": f"concurrency {w.concurrency}, prefetch {w.prefetch} (headway's defaults)"}))


if __name__ == "__main__":
    main()
