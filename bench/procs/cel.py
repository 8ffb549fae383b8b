"""Celery's side of ``run.sh`` (run with Celery's venv; each call is one
contender in a process of its own and prints one JSON line).

    python cel.py fill  URL N IDS [--spin COUNT]  # Celery's producer queues N runs
    python cel.py cpu   URL N COUNT               # fill N spin(COUNT), then the worker
    python cel.py drain URL N                     # fill N noop(), then the worker
    python cel.py rss   URL                       # the prefork children at rest
    python cel.py count URL IDS                   # SUCCESS results among IDS

The worker is ``celery -A procs_celery_app worker -P prefork -c 2``,
Celery's defaults otherwise (mingle, gossip, prefetch multiplier 4, early
ack; results on the same Redis). ``fill`` runs in a process of its own that
exits before the worker starts (a Celery client subscribes to each
result's channel as it sends). While the worker drains, this process asks
``LLEN celery`` once every 500 ms and, once the queue is empty, reads every
result (again 500 ms later while some are in flight); it exits 1 unless all
N are SUCCESS. The rate comes from the results themselves (each body
answers when it started and ended): N ÷ (last end − first start).

``rss``: the worker started on an empty queue, 4 no-op round trips, then
each child's ``VmRSS`` and ``Pss`` (KiB), the children found as the worker
process's children in ``/proc``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from common import children, deadline, emit, memory, spans  # noqa: E402

SETTINGS = "celery -A procs_celery_app worker -P prefork -c 2 (Celery's defaults otherwise)"


def results(r, ids: list[str]) -> list[dict | None]:
    out = []
    for i in range(0, len(ids), 1000):
        out.extend(r.mget(["celery-task-meta-" + t for t in ids[i : i + 1000]]))
    return [json.loads(v) if v else None for v in out]


def successes(metas: list[dict | None]) -> int:
    return sum(1 for m in metas if m is not None and m.get("status") == "SUCCESS")


def launch(url: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "procs_celery_app", "worker", "-P", "prefork", "-c", "2"],
        cwd=HERE, env={**os.environ, "PROCS_URL": url}, stdout=subprocess.DEVNULL, stderr=sys.stderr,
        start_new_session=True,
    )


def stop(worker: subprocess.Popen) -> None:
    try:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(15)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(worker.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    worker.wait()


def fill_in_child(url: str, n: int, spin: int | None) -> list[str]:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ids")
        cmd = [sys.executable, os.path.abspath(__file__), "fill", url, str(n), path]
        if spin is not None:
            cmd += ["--spin", str(spin)]
        subprocess.run(cmd, stdout=subprocess.DEVNULL, check=True, timeout=300)
        with open(path) as f:
            return f.read().split()


def drain(url: str, ids: list[str], what: str) -> dict:
    import redis

    until = deadline()
    n = len(ids)
    r = redis.Redis.from_url(url)
    launched = time.time()
    worker = launch(url)
    try:
        while True:
            if worker.poll() is not None:
                raise SystemExit(f"cel {what}: the worker exited with {worker.returncode}")
            if time.monotonic() > until:
                raise SystemExit(f"cel {what}: timed out ({r.llen('celery')} still queued)")
            if r.llen("celery") == 0:
                metas = results(r, ids)
                if all(m is not None and m.get("status") != "PENDING" for m in metas):
                    break
            time.sleep(0.5)
        ok = successes(metas)
        if ok != n:
            raise SystemExit(f"cel {what}: {ok} of {n} results are SUCCESS")
        out = spans([m["result"] for m in metas], n, launched)
        out["verified_success"] = ok
        out["children_after"] = [memory(p) for p in children(worker.pid)]
        out["settings"] = SETTINGS
        return out
    finally:
        stop(worker)


def main() -> None:
    cmd, url = sys.argv[1], sys.argv[2]
    os.environ["PROCS_URL"] = url
    if cmd == "count":
        import redis

        with open(sys.argv[3]) as f:
            ids = f.read().split()
        emit({"ids": len(ids), "success": successes(results(redis.Redis.from_url(url), ids))})
        return
    import procs_celery_app as mod

    if cmd == "fill":
        n, path = int(sys.argv[3]), sys.argv[4]
        spin = int(sys.argv[6]) if len(sys.argv) > 6 and sys.argv[5] == "--spin" else None
        t0 = time.perf_counter()
        if spin is None:
            ids = [mod.noop.delay().id for _ in range(n)]
        else:
            ids = [mod.spin.delay(spin).id for _ in range(n)]
        with open(path, "w") as f:
            f.write("\n".join(ids))
        emit({"sent": n, "per_second": n / (time.perf_counter() - t0)})
    elif cmd == "cpu":
        n, count = int(sys.argv[3]), int(sys.argv[4])
        out = drain(url, fill_in_child(url, n, count), "cpu")
        out["count"] = count
        emit(out)
    elif cmd == "drain":
        emit(drain(url, fill_in_child(url, int(sys.argv[3]), None), "drain"))
    elif cmd == "rss":
        until = deadline()
        worker = launch(url)
        try:
            for _ in range(4):
                mod.noop.delay().get(timeout=max(1.0, until - time.monotonic()))
            kids = children(worker.pid)
            if len(kids) != 2:
                raise SystemExit(f"cel rss: the worker has {len(kids)} children, not 2")
            emit({"children": [memory(p) for p in kids], "parent": memory(worker.pid), "settings": SETTINGS})
        finally:
            stop(worker)
    else:
        raise SystemExit(f"cel: unknown command {cmd}")


if __name__ == "__main__":
    main()
