"""Celery's side of the side-by-side benchmark (run by ``compare.sh`` with the
Celery venv's python; prints one JSON line).

    python vs_celery.py fill URL N [IDS]    # a Celery producer fills "celery"
    python vs_celery.py run  URL N RTT      # fill, then a prefork -c 2 worker
    python vs_celery.py ping URL N          # the floor: N PINGs with redis-py

``fill``: one process sends N ``bench.noop`` runs with ``noop.delay(i)`` (a
result is expected, so Celery subscribes to each result channel, as it does
for any user), reports sends per second, writes the ids to IDS if given, and
exits (so Redis publishes no result to its subscriptions afterwards). The
queue is then the Celery-layout queue a headway worker drains in
``vs_headway.py --layout celery``.

``run``: fills (in a ``fill`` process of its own), starts ``celery worker -c 2 --without-mingle --without-gossip``
(prefork, Celery's defaults otherwise), and times the drain from the stored
results themselves: Celery writes each result's ``date_done`` when the run
ends, so the drain is (N − 1) ÷ (last ``date_done`` − first ``date_done``).
Nothing polls Redis while the worker drains (a poller would take CPU from a
worker that has two cores): this process checks ``LLEN celery`` once a
second until the queue is empty, then reads all N results once (again a
second later if some are still in flight) and fails unless all N are
SUCCESS. Then, with the worker idle, RTT sequential ``delay(i).get()`` round
trips.

``count URL IDS``: how many of the ids in the file IDS have a SUCCESS result
in Celery's result format (one JSON line; what the Celery-layout rows of
``compare.sh`` check after a headway worker drained Celery's queue).
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def fill(noop, n):
    t0 = time.perf_counter()
    ids = [noop.delay(i).id for i in range(n)]
    return ids, n / (time.perf_counter() - t0)


def ticks(pid):
    """CPU clock ticks (user + system) a process has used so far; 0 if gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError):
        return 0
    return int(fields[11]) + int(fields[12])


def session_ticks(sid):
    """CPU ticks of every live process in session ``sid`` (the worker and
    its prefork children)."""
    total = 0
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:
            total += int(fields[11]) + int(fields[12])
    return total


def results(r, ids):
    """Each id's stored result (Celery's ``celery-task-meta-ID`` JSON), or
    None; read in rounds of 1000 ``MGET`` keys."""
    out = []
    for i in range(0, len(ids), 1000):
        out.extend(r.mget(["celery-task-meta-" + t for t in ids[i : i + 1000]]))
    return [json.loads(v) if v else None for v in out]


def date_done(meta):
    """A result's ``date_done`` as epoch seconds (Celery writes ISO 8601,
    microseconds, UTC)."""
    import datetime

    d = datetime.datetime.fromisoformat(meta["date_done"])
    if d.tzinfo is None:
        d = d.replace(tzinfo=datetime.timezone.utc)
    return d.timestamp()


def successes(metas):
    return sum(1 for m in metas if m is not None and m.get("status") == "SUCCESS")


def main():
    cmd, url = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if cmd != "count" else 0
    os.environ["HEADWAY_BENCH_URL"] = url
    sys.path.insert(0, HERE)
    import redis
    from celery_bench_app import app, noop

    if cmd == "ping":
        r = redis.Redis.from_url(url)
        lat = []
        for _ in range(n):
            s = time.perf_counter()
            r.ping()
            lat.append((time.perf_counter() - s) * 1000)
        print(json.dumps({"p50": pct(lat, 0.5), "p99": pct(lat, 0.99)}))
        return
    if cmd == "count":
        r = redis.Redis.from_url(url)
        with open(sys.argv[3]) as f:
            ids = f.read().split()
        print(json.dumps({"ids": len(ids), "success": successes(results(r, ids))}))
        return
    if cmd == "fill":
        ids, rate = fill(noop, n)
        if len(sys.argv) > 4:
            with open(sys.argv[4], "w") as f:
                f.write("\n".join(ids))
        print(json.dumps({"enqueue": rate}))
        return
    rtt_n = int(sys.argv[4])
    timeout = float(os.environ.get("HEADWAY_BENCH_TIMEOUT", "600"))
    deadline = time.monotonic() + timeout
    r = redis.Redis.from_url(url)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ids")
        got = subprocess.run(
            [sys.executable, os.path.abspath(__file__), "fill", url, str(n), path],
            stdout=subprocess.PIPE, check=True, timeout=timeout,
        )
        enq = json.loads(got.stdout.decode().strip().splitlines()[-1])["enqueue"]
        with open(path) as f:
            ids = f.read().split()
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "celery_bench_app", "worker", "-c", "2",
         "--without-mingle", "--without-gossip", "--loglevel=WARNING"],
        cwd=HERE, env=dict(os.environ), stdout=subprocess.DEVNULL, stderr=sys.stderr,
        start_new_session=True,
    )
    try:
        redis_pid = os.environ.get("HEADWAY_BENCH_REDIS_PID", "0")
        # The CPU count starts when the worker takes its first message, not
        # while Celery boots: one LLEN every 20 ms until then, and no more
        # (the rate itself comes from the results' date_done).
        while r.llen("celery") >= n:
            if worker.poll() is not None:
                raise SystemExit(f"celery: the worker exited with {worker.returncode}")
            if time.monotonic() > deadline:
                raise SystemExit("celery: timed out waiting for the worker to start")
            time.sleep(0.02)
        c0 = (session_ticks(worker.pid), ticks(redis_pid))
        # Wait without competing: one LLEN a second until the queue is
        # empty, then one read of every result, again a second later while
        # the last prefetched runs end.
        metas = []
        while True:
            if worker.poll() is not None:
                raise SystemExit(f"celery: the worker exited with {worker.returncode}")
            if time.monotonic() > deadline:
                raise SystemExit(f"celery: timed out in the drain ({r.llen('celery')} still queued)")
            if r.llen("celery") == 0:
                metas = results(r, ids)
                if successes(metas) >= n or all(m is not None and m.get("status") != "PENDING" for m in metas):
                    break
            time.sleep(1.0)
        ok = successes(metas)
        if ok != n:
            raise SystemExit(f"celery: {ok} of {n} results are SUCCESS after the drain")
        c1 = (session_ticks(worker.pid), ticks(redis_pid))
        done_at = sorted(date_done(m) for m in metas)
        drain = (n - 1) / (done_at[-1] - done_at[0])
        per = 1e6 / os.sysconf("SC_CLK_TCK") / n
        cpu = {"worker": (c1[0] - c0[0]) * per, "redis": (c1[1] - c0[1]) * per}
        lat = []
        for i in range(rtt_n):
            s = time.perf_counter()
            noop.delay(i).get(timeout=30)
            lat.append((time.perf_counter() - s) * 1000)
            if time.monotonic() > deadline:
                raise SystemExit("celery: timed out in the round trips")
        print(json.dumps({
            "enqueue": enq, "drain": drain, "p50": pct(lat, 0.5), "p99": pct(lat, 0.99),
            "enqueue_how": "noop.delay(i) loop", "drain_cpu_us": cpu, "verified_success": ok,
            "drain_how": "(N-1) / (last date_done - first date_done), from the stored results, read once at the end",
            "settings": "celery worker -c 2 (prefork), --without-mingle --without-gossip, defaults otherwise",
        }))
    finally:
        try:
            os.killpg(worker.pid, signal.SIGTERM)
            worker.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(worker.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        worker.wait()


if __name__ == "__main__":
    main()
