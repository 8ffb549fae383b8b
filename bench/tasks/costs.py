"""Where each microsecond of a task goes: headway's Python worker draining
no-op runs, on the memory broker and on one private redis-server.

    python bench/tasks/costs.py [N] [--json PATH]

It starts its own ``redis-server`` (``--save "" --appendonly no``) on a free
loopback port, fills the queue with N runs of a no-op body (no worker
running), then drains them with ``app.worker(queue)`` at headway's
defaults, from ``start()`` until all N are settled. Around the drain it
reads, per task:

- **the worker process's CPU**, split by thread kind (the core's tokio
  threads, named ``headway*``; the Python threads that run the bodies) and
  into user and kernel time, from ``/proc/self/task/*/stat``;
- **its context switches** (voluntary: a thread went to sleep waiting for
  work or a reply; involuntary: it was preempted), from
  ``/proc/self/task/*/status`` — each hand-over of a message between threads
  that finds the other thread asleep costs a voluntary switch there and a
  wake-up on the other side;
- **redis-server's CPU** (``INFO cpu``), its **round trips** (``INFO
  stats``: ``total_reads_processed`` is one per socket read, so one per
  pipeline the clients sent; ``total_writes_processed`` the replies), the
  bytes each way, and **each command's calls and µs** (``INFO
  commandstats``; ``evalsha`` is the layout's Lua scripts);

and the same for N sends by one thread's ``delay()`` loop (each returns
once Redis has the message), then the memory broker's drain of N runs (no
Redis: what the core and the binding cost without a socket). Nothing else
should run beside it: CPU per task moves little with load, rates move a
lot.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

import headway

TCK = os.sysconf("SC_CLK_TCK")


def threads() -> dict[str, dict[str, float]]:
    """Per thread kind: user and system seconds, voluntary and involuntary
    context switches, summed over the live threads of this process."""
    out: dict[str, dict[str, float]] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                name = f.read().strip()
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/self/task/{tid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
        except OSError:
            continue
        kind = "core (tokio)" if name.startswith("headway") else "python"
        row = out.setdefault(kind, {"user": 0.0, "sys": 0.0, "vcsw": 0.0, "icsw": 0.0})
        row["user"] += int(fields[11]) / TCK
        row["sys"] += int(fields[12]) / TCK
        row["vcsw"] += int(status["voluntary_ctxt_switches"])
        row["icsw"] += int(status["nonvoluntary_ctxt_switches"])
    return out


def diff_threads(a: dict[str, dict[str, float]], b: dict[str, dict[str, float]]) -> dict[str, dict[str, float]]:
    # A thread that started during the stretch counts from zero; one that
    # ended is gone from both (the worker's threads live through it).
    return {k: {f: b[k][f] - a.get(k, {}).get(f, 0.0) for f in b[k]} for k in b}


class Redis:
    """A private redis-server and a tiny RESP client for INFO."""

    def __init__(self) -> None:
        if not shutil.which("redis-server"):
            raise SystemExit("costs: redis-server is not on PATH")
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.port = s.getsockname()[1]
        s.close()
        self.dir = tempfile.mkdtemp(prefix="headway-costs-")
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", self.dir],
            stdout=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                self.sock = socket.create_connection(("127.0.0.1", self.port))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("costs: redis-server did not start")
                time.sleep(0.02)
        self.f = self.sock.makefile("rb")
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.version = self.info("server").get("redis_version", "?")

    def call(self, *args: str) -> bytes:
        cmd = f"*{len(args)}\r\n" + "".join(f"${len(a)}\r\n{a}\r\n" for a in args)
        self.sock.sendall(cmd.encode())
        f = self.f
        head = f.readline()
        if head[:1] == b"$":
            n = int(head[1:])
            return f.read(n + 2)[:-2]
        return head[1:].strip()

    def info(self, section: str) -> dict[str, str]:
        out = {}
        for line in self.call("INFO", section).decode().splitlines():
            if ":" in line and not line.startswith("#"):
                k, v = line.split(":", 1)
                out[k] = v
        return out

    def snapshot(self) -> dict[str, Any]:
        cpu = self.info("cpu")
        stats = self.info("stats")
        cmds: dict[str, tuple[int, int]] = {}
        for k, v in self.info("commandstats").items():
            f = dict(p.split("=") for p in v.split(","))
            cmds[k.removeprefix("cmdstat_")] = (int(f["calls"]), int(f["usec"]))
        return {
            "cpu": float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
            "reads": int(stats["total_reads_processed"]),
            "writes": int(stats["total_writes_processed"]),
            "in": int(stats["total_net_input_bytes"]),
            "out": int(stats["total_net_output_bytes"]),
            "cmds": cmds,
        }

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def measure(n: int, redis: Redis | None, body: Callable[[], None]) -> dict[str, Any]:
    r0 = redis.snapshot() if redis else None
    t0 = threads()
    w0 = time.perf_counter()
    body()
    wall = time.perf_counter() - w0
    t1 = threads()
    out: dict[str, Any] = {"n": n, "wall_s": wall, "rate": n / wall, "threads": diff_threads(t0, t1)}
    if redis and r0:
        # INFO itself is two calls; they are not the task's.
        r1 = redis.snapshot()
        out["redis"] = {
            "cpu_s": r1["cpu"] - r0["cpu"],
            "reads": r1["reads"] - r0["reads"] - 4,
            "writes": r1["writes"] - r0["writes"] - 4,
            "in": r1["in"] - r0["in"],
            "out": r1["out"] - r0["out"],
            "cmds": {
                k: (c - r0["cmds"].get(k, (0, 0))[0], u - r0["cmds"].get(k, (0, 0))[1])
                for k, (c, u) in r1["cmds"].items()
                if k != "info" and c != r0["cmds"].get(k, (0, 0))[0]
            },
        }
    return out


def make(broker: Any) -> tuple[headway.App, Any]:
    app = headway.App(broker)

    @app.task(name="bench.noop", queue="default")
    def noop(i: int) -> None:
        return None

    return app, noop


def settle(w: Any, n: int, deadline: float) -> None:
    while w.settled < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"costs: the drain timed out ({w.settled}/{n})")
        time.sleep(0.0005)


def report(title: str, m: dict[str, Any]) -> None:
    n = m["n"]
    us = 1e6 / n
    print(f"\n## {title}: {n} tasks, {m['rate']:,.0f}/s ({m['wall_s'] * us:.1f} µs of wall time per task)\n")
    print("| where | CPU µs/task (user + kernel) | voluntary switches/task | preempted/task |")
    print("|---|---:|---:|---:|")
    total = 0.0
    for kind, t in sorted(m["threads"].items()):
        cpu = (t["user"] + t["sys"]) * us
        total += cpu
        print(f"| worker: {kind} | {cpu:.1f} ({t['user'] * us:.1f} + {t['sys'] * us:.1f}) | {t['vcsw'] / n:.2f} | {t['icsw'] / n:.2f} |")
    r = m.get("redis")
    if r:
        total += r["cpu_s"] * us
        print(f"| redis-server | {r['cpu_s'] * us:.1f} | | |")
    print(f"| **all** | **{total:.1f}** | | |")
    if r:
        print(
            f"\nRedis per task: {r['reads'] / n:.3f} socket reads (pipelines received), "
            f"{r['writes'] / n:.3f} replies written, {r['in'] / n:.0f} B in, {r['out'] / n:.0f} B out; "
            f"{r['cpu_s'] * us:.1f} µs of CPU, of which inside commands:\n"
        )
        print("| command | calls/task | µs/task | µs/call |")
        print("|---|---:|---:|---:|")
        inside = 0.0
        for k, (c, u) in sorted(r["cmds"].items(), key=lambda kv: -kv[1][1]):
            inside += u / n
            print(f"| {k} | {c / n:.3f} | {u / n:.2f} | {u / max(c, 1):.2f} |")
        print(f"| (outside commands: reading, parsing, replying, the event loop) | | {r['cpu_s'] * us - inside:.2f} | |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, nargs="?", default=20_000)
    ap.add_argument("--json", default=None, help="also write every figure to this file")
    a = ap.parse_args()
    n = a.n
    deadline = time.monotonic() + 600
    out: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "commit": subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip(),
        "headway": headway.__version__,
        "python": platform.python_version(),
        "machine": {"nproc": os.cpu_count(), "kernel": platform.release(), "load": open("/proc/loadavg").read().split()[:3]},
    }
    redis = Redis()
    try:
        out["redis_version"] = redis.version
        print(f"headway {headway.__version__}, redis-server {redis.version}, {os.cpu_count()} cores, load {' '.join(out['machine']['load'])}")
        app, noop = make(headway.RedisBroker(redis.url))

        def sends() -> None:
            delay = noop.delay
            for i in range(n):
                delay(i)

        noop.delay(-1)  # connect before the clock starts
        m = measure(n + 0, redis, sends)
        report("Redis, one thread's delay() loop", m)
        out["redis_delay"] = m
        w = app.worker("default")
        m = measure(n + 1, redis, lambda: (w.start(), settle(w, n + 1, deadline)))
        w.stop(5.0)
        report(f"Redis, drain (worker at its defaults: concurrency {w.concurrency}, prefetch {w.prefetch})", m)
        out["redis_drain"] = m
    finally:
        redis.close()
    app, noop = make("memory://")
    for i in range(n):
        noop.delay(i)
    w = app.worker("default")
    m = measure(n, None, lambda: (w.start(), settle(w, n, deadline)))
    w.stop(5.0)
    report("memory broker, drain (worker at its defaults)", m)
    out["memory_drain"] = m
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
        print(f"\nwritten to {a.json}", file=sys.stderr)


if __name__ == "__main__":
    main()
