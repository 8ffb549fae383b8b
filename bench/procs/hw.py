"""headway's side of ``run.sh`` (run with headway's Python; each call is one
contender in a process of its own and prints one JSON line).

    python hw.py calibrate [MS]               # the spin count for a MS-ms body (20)
    python hw.py cpu   URL N COUNT --pool P   # N spin(COUNT) queued, then a -c 2 worker
    python hw.py drain URL N --pool P [--layout celery --ids PATH]
    python hw.py hop   URL RTT --pool P       # RTT sequential send → get, -c 1
    python hw.py rss   URL                    # the process pool's children at rest

``cpu`` and ``drain``: the runs are queued first with no worker running
(on Celery's layout ``run.sh`` has Celery's producer fill the queue and
passes its ids), then ``app.worker(concurrency=2, pool=P)`` starts in this
process (headway's defaults otherwise: prefetch four per slot). This
process then only looks at the worker's ``settled`` counter every 100 ms
(no Redis traffic, nothing on the children's cores); when all N have
settled it reads every run's result back and exits 1 unless all N are
SUCCESS. The rate is taken from the results themselves (each body answers
when it started and ended): N ÷ (last end − first start).

``hop``: a worker with ``concurrency=1`` on pool P, 20 warm-up round trips,
then RTT ``noop.delay().get()`` one at a time; p50 and p99 in µs.

``rss``: a process-pool worker with ``concurrency=2`` started on an empty
queue, 4 no-op round trips (so the children are up and have served), then
each child's ``VmRSS`` and ``Pss`` (KiB) and the worker process's own.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import deadline, emit, memory, pct, spans  # noqa: E402


def load(url: str, layout: str = "headway"):
    os.environ["PROCS_URL"] = url
    os.environ["PROCS_LAYOUT"] = layout
    import procs_headway_app

    return procs_headway_app


def calibrate(ms: float) -> None:
    from procs_body import spin

    def took(n: int) -> float:
        best = []
        for _ in range(5):
            s, e = spin(n)
            best.append(e - s)
        return sorted(best)[2]

    n = 100_000
    t = took(n)
    count = max(1000, round(n * ms / 1000 / t))
    emit({"count": count, "body_ms": took(count) * 1000, "target_ms": ms})


def settle(w, n: int, until: float, what: str) -> None:
    while w.settled < n:
        if time.monotonic() > until:
            raise SystemExit(f"hw {what}: timed out ({w.settled}/{n} settled)")
        time.sleep(0.1)


def drain(app, ids: list[str], pool: str, what: str) -> tuple[dict, object]:
    """Starts a -c 2 worker on what is queued, waits for all of it, and
    checks every result; answers the spans and the (running) worker."""
    until = deadline()
    n = len(ids)
    launched = time.time()
    w = app.worker(concurrency=2, pool=pool)
    w.start()
    settle(w, n, until, what)
    pairs = []
    for t in ids:
        h = app.handle(t)
        if h.state() != "SUCCESS":
            raise SystemExit(f"hw {what}: run {t} is {h.state()}, not SUCCESS")
        pairs.append(h.get(timeout=30))
    out = spans(pairs, n, launched)
    out["verified_success"] = len(pairs)
    out["settings"] = f"app.worker(concurrency={w.concurrency}, pool={w.pool!r}), prefetch {w.prefetch}"
    return out, w


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("cmd", choices=["calibrate", "cpu", "drain", "hop", "rss"])
    ap.add_argument("args", nargs="*")
    ap.add_argument("--pool", choices=["threads", "process"], default="process")
    ap.add_argument("--layout", choices=["headway", "celery"], default="headway")
    ap.add_argument("--ids", default=None)
    a = ap.parse_args()
    if a.cmd == "calibrate":
        calibrate(float(a.args[0]) if a.args else 20.0)
        return
    url = a.args[0]
    mod = load(url, a.layout)
    app = mod.app
    what = f"{a.cmd} {a.pool} {a.layout}"

    if a.cmd == "cpu":
        n, count = int(a.args[1]), int(a.args[2])
        ids = [mod.spin.delay(count).id for _ in range(n)]
        out, w = drain(app, ids, a.pool, what)
        out["count"] = count
        w.stop(10.0)
        emit(out)
    elif a.cmd == "drain":
        n = int(a.args[1])
        if a.layout == "celery":
            if not a.ids:
                raise SystemExit("hw drain --layout celery needs --ids (Celery's producer's ids)")
            with open(a.ids) as f:
                ids = f.read().split()
            if len(ids) != n:
                raise SystemExit(f"hw {what}: {len(ids)} ids, not {n}")
        else:
            ids = [mod.noop.delay().id for _ in range(n)]
        out, w = drain(app, ids, a.pool, what)
        if a.pool == "process":
            out["children_after"] = [memory(p) for p in w.child_pids]
        w.stop(10.0)
        emit(out)
    elif a.cmd == "hop":
        rtt = int(a.args[1])
        until = deadline()
        w = app.worker(concurrency=1, pool=a.pool)
        w.start()
        for _ in range(20):
            mod.noop.delay().get(timeout=60)
        lat = []
        for _ in range(rtt):
            s = time.perf_counter()
            mod.noop.delay().get(timeout=30)
            lat.append((time.perf_counter() - s) * 1e6)
            if time.monotonic() > until:
                raise SystemExit(f"hw {what}: timed out")
        w.stop(10.0)
        emit({
            "p50_us": pct(lat, 0.5), "p99_us": pct(lat, 0.99), "mean_us": sum(lat) / len(lat),
            "round_trips": rtt, "settings": f"app.worker(concurrency=1, pool={a.pool!r})",
        })
    elif a.cmd == "rss":
        until = deadline()
        w = app.worker(concurrency=2, pool="process")
        w.start()
        for _ in range(4):
            mod.noop.delay().get(timeout=60)
        while len(w.child_pids) < 2:
            if time.monotonic() > until:
                raise SystemExit(f"hw rss: {len(w.child_pids)} children, not 2")
            time.sleep(0.05)
        kids = [memory(p) for p in w.child_pids]
        parent = memory(os.getpid())
        w.stop(10.0)
        emit({"children": kids, "parent": parent, "settings": "app.worker(concurrency=2, pool='process')"})


if __name__ == "__main__":
    main()
