"""How headway's Redis drain and sends scale with processes, on one
private redis-server.

    python bench/tasks/scale.py [N] [--json PATH]

- **Drain**: N no-op runs are queued (no worker running); then 1, 2 and 4
  worker processes, each ``app.worker(queue)`` at headway's defaults, start
  together and drain them. The clock runs from the start signal until the
  workers' settled counts add up to N; every run's SUCCESS is then read
  back (fewer than N fails the script).
- **Sends**: 1, 4 and 16 producer processes, each one thread sending its
  share of N with ``noop.delay(i)`` (each call returns once Redis has the
  message), start together; the clock runs until every process has sent
  its share, and the queue must then hold N messages.

Each step reports the aggregate rate, the CPU per task of the client
processes and of redis-server (from ``/proc``), and Redis's socket reads
per task (``INFO stats``): the number of pipelines it received, which
says how much each round trip carried. The Redis database is flushed
between steps. Nothing else should run beside it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from costs import Redis  # noqa: E402

TCK = os.sysconf("SC_CLK_TCK")


def ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])


def make(url: str) -> tuple[Any, Any]:
    import headway

    app = headway.App(headway.RedisBroker(url))

    @app.task(name="bench.noop", queue="default")
    def noop(i: int) -> None:
        return None

    return app, noop


def worker(url: str, slot: int, counts: Any, ready: Any, go: Any, stop: Any, cpu: Any) -> None:
    app, _ = make(url)
    w = app.worker("default")
    ready.release()
    go.wait()
    c0 = ticks(os.getpid())
    w.start()
    while not stop.is_set():
        counts[slot] = w.settled
        time.sleep(0.001)
    counts[slot] = w.settled
    cpu[slot] = ticks(os.getpid()) - c0
    w.stop(5.0)


def producer(url: str, slot: int, base: int, share: int, done: Any, ready: Any, go: Any, cpu: Any) -> None:
    _, noop = make(url)
    noop.delay(-1)  # connected before the clock starts (its message is counted out below)
    ready.release()
    go.wait()
    c0 = ticks(os.getpid())
    delay = noop.delay
    for i in range(base, base + share):
        delay(i)
    cpu[slot] = ticks(os.getpid()) - c0
    done[slot] = 1


def step(redis: Redis, k: int, n: int, kind: str, deadline: float) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    ready = ctx.Semaphore(0)
    go = ctx.Event()
    stop = ctx.Event()
    cpu = ctx.Array("q", k, lock=False)
    redis.call("FLUSHALL")
    if kind == "drain":
        _, noop = make(redis.url)
        ids = [noop.delay(i).id for i in range(n)]
        counts = ctx.Array("q", k, lock=False)
        procs = [ctx.Process(target=worker, args=(redis.url, s, counts, ready, go, stop, cpu)) for s in range(k)]
    else:
        share = n // k
        counts = ctx.Array("q", k, lock=False)
        procs = [
            ctx.Process(target=producer, args=(redis.url, s, s * share, share, counts, ready, go, cpu)) for s in range(k)
        ]
    for p in procs:
        p.start()
    for _ in procs:
        if not ready.acquire(timeout=120):
            raise SystemExit(f"scale: a {kind} process did not get ready")
    r0 = redis.snapshot()
    rc0 = ticks(redis.proc.pid)
    t0 = time.perf_counter()
    go.set()
    target = n if kind == "drain" else k
    while sum(counts[:]) < target:
        if time.monotonic() > deadline:
            stop.set()
            raise SystemExit(f"scale: {kind} with {k} processes timed out ({sum(counts[:])}/{target})")
        time.sleep(0.001)
    wall = time.perf_counter() - t0
    rc1 = ticks(redis.proc.pid)
    r1 = redis.snapshot()
    stop.set()
    for p in procs:
        p.join(60)
        if p.exitcode != 0:
            raise SystemExit(f"scale: a {kind} process exited with {p.exitcode}")
    done = n if kind == "drain" else (n // k) * k
    if kind == "drain":
        import headway

        app, _ = make(redis.url)
        ok = sum(1 for t in ids if app.handle(t).state() == "SUCCESS")
        if ok != n:
            raise SystemExit(f"scale: {ok} of {n} drained runs are SUCCESS")
        del headway
    else:
        queued = sum(int(redis.call("LLEN", f"headway:{{default}}:ready:{i}")) for i in range(10))
        if queued != done + k:
            raise SystemExit(f"scale: the queue holds {queued} messages, not {done + k}")
    per = 1e6 / TCK / done
    return {
        "processes": k,
        "n": done,
        "wall_s": wall,
        "rate": done / wall,
        "client_cpu_us": sum(cpu[:]) * per,
        "redis_cpu_us": (rc1 - rc0) * per,
        "redis_reads": (r1["reads"] - r0["reads"] - 4) / done,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, nargs="?", default=20_000)
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    import headway

    deadline = time.monotonic() + 900
    redis = Redis()
    out: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
        "headway": headway.__version__,
        "python": platform.python_version(),
        "redis": redis.version,
        "machine": {"nproc": os.cpu_count(), "kernel": platform.release(), "load": open("/proc/loadavg").read().split()[:3]},
        "n": a.n,
    }
    try:
        print(f"headway {headway.__version__}, redis-server {redis.version}, {os.cpu_count()} cores, N = {a.n}")
        print("\n| step | processes | tasks/s | client CPU µs/task | redis CPU µs/task | Redis reads/task |")
        print("|---|---:|---:|---:|---:|---:|")
        for kind, ks in (("drain", (1, 2, 4)), ("send", (1, 4, 16))):
            rows = []
            for k in ks:
                row = step(redis, k, a.n, kind, deadline)
                rows.append(row)
                print(
                    f"| {kind} | {k} | {row['rate']:,.0f} | {row['client_cpu_us']:.1f} | "
                    f"{row['redis_cpu_us']:.1f} | {row['redis_reads']:.3f} |",
                    flush=True,
                )
            out[kind] = rows
    finally:
        redis.close()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
