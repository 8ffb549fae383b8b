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
(prefork, Celery's defaults otherwise), and times the drain from the moment
the worker takes its first message until all N results are stored; then,
with the worker idle, RTT sequential ``delay(i).get()`` round trips.
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


def until(cond, deadline, what):
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit(f"celery: timed out waiting for {what}")
        time.sleep(0.002)


def stored(r, ids, start):
    """How many of ids, from ``start`` on, have a stored result (in order)."""
    i = start
    while i < len(ids):
        chunk = ids[i : i + 256]
        p = r.pipeline(transaction=False)
        for t in chunk:
            p.exists("celery-task-meta-" + t)
        got = p.execute()
        for ok in got:
            if not ok:
                return i
            i += 1
    return i


def main():
    cmd, url, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
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
        # The clock starts when the worker takes its first message (not
        # while Celery boots).
        until(lambda: r.llen("celery") < n or worker.poll() is not None, deadline, "the worker to start")
        if worker.poll() is not None:
            raise SystemExit(f"celery: the worker exited with {worker.returncode}")
        redis_pid = os.environ.get("HEADWAY_BENCH_REDIS_PID", "0")
        c0 = (session_ticks(worker.pid), ticks(redis_pid))
        t0 = time.perf_counter()
        done = [0]

        def drained():
            done[0] = stored(r, ids, done[0])
            return done[0] >= n

        until(drained, deadline, f"the drain ({done[0]}/{n} stored)")
        drain = n / (time.perf_counter() - t0)
        c1 = (session_ticks(worker.pid), ticks(redis_pid))
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
            "enqueue_how": "noop.delay(i) loop", "drain_cpu_us": cpu,
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
