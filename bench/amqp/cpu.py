"""CPU per message of one RabbitMQ drain: the worker's, RabbitMQ's, Redis's.

    python bench/amqp/cpu.py [N] [who ...]

Each `who` is `headway` (the installed package), `celery`, or a directory
that holds a `headway` package to put first on the worker's path (two
builds side by side: `/tmp/old /tmp/new` alternates them). For each, a
fresh vhost and a flushed Redis: Celery's producer queues N runs of
`bench.noop`, the worker drains them, and the script reads the CPU
(user + sys, from /proc) the worker process, RabbitMQ's `beam.smp` and the
Redis server spent from the worker's start to the N-th stored result.
The worker's own is also given from its first stored result on (its start,
Python's imports and the connection, left out). Prints one JSON line per
drain. Needs what `run.sh` needs. With BENCH_PERF=<file>, `perf record -g`
follows the worker into that file.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = os.environ.get("HEADWAY_BENCH_PYTHON", os.path.join(ROOT, ".venv", "bin", "python"))
TICK = os.sysconf("SC_CLK_TCK")


def cpu(pid: int) -> float:
    """User + sys seconds of process `pid` (all its threads)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def threads(pid: int) -> dict:
    """Per thread of `pid`: name → [CPU seconds, context switches] (threads of
    one name summed)."""
    out: dict = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                raw = f.read()
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
        except FileNotFoundError:
            continue
        name = raw[raw.index("(") + 1:raw.rindex(")")]
        fields = raw.rsplit(")", 1)[1].split()
        t = (int(fields[11]) + int(fields[12])) / TICK
        sw = int(status["voluntary_ctxt_switches"]) + int(status["nonvoluntary_ctxt_switches"])
        row = out.setdefault(name, [0.0, 0])
        row[0] += t
        row[1] += sw
    return out


def pid_of(name: str) -> int:
    return int(subprocess.run(["pgrep", "-x", "-o", name], capture_output=True, text=True).stdout.split()[0])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drain(who: str, n: int, redis_port: int, redis_pid: int) -> dict:
    import redis

    vhost = f"headway-cpu-{os.getpid()}-{int(time.time() * 1000)}"
    subprocess.run(["rabbitmqctl", "-q", "add_vhost", vhost], check=True, capture_output=True)
    subprocess.run(["rabbitmqctl", "-q", "set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"],
                   check=True, capture_output=True)
    env = dict(os.environ)
    env["BENCH_AMQP"] = f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
    env["BENCH_REDIS"] = f"redis://127.0.0.1:{redis_port}/0"
    path = [HERE]
    if who not in ("headway", "celery"):
        path.insert(0, who)
    env["PYTHONPATH"] = ":".join(path + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    r = redis.Redis(port=redis_port)
    r.flushall()
    worker = None
    try:
        subprocess.run([PY, "drain.py", "fill", str(n)], cwd=HERE, env=env, check=True)
        beam = pid_of("beam.smp")
        b0, r0 = cpu(beam), cpu(redis_pid)
        if who == "celery":
            cmd = [PY, "-m", "celery", "-A", "cel_app", "worker", "-P", "prefork", "-c", "2",
                   "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "warning"]
        else:
            cmd = [PY, "drain.py", "headway"]
        log = open(os.path.join(tempfile.gettempdir(), "amqp-cpu-worker.log"), "w")
        t0 = time.monotonic()
        worker = subprocess.Popen(cmd, cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)
        pids = [worker.pid]
        perf = None
        if os.environ.get("BENCH_PERF"):
            perf = subprocess.Popen(["perf", "record", "-F", "4000", "-g", "-p", str(worker.pid),
                                     "-o", os.environ["BENCH_PERF"]],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        w_first = None
        deadline = t0 + 300
        while True:
            size = r.dbsize()
            if w_first is None and size > 0:
                w_first = sum(cpu(p) for p in pids)
            if size >= n:
                break
            if time.monotonic() > deadline or worker.poll() is not None:
                raise RuntimeError(f"{who}: only {size} of {n} results")
            if who == "celery":
                kids = subprocess.run(["pgrep", "-P", str(worker.pid)], capture_output=True, text=True).stdout.split()
                pids = [worker.pid] + [int(k) for k in kids]
            time.sleep(0.005)
        w_end = sum(cpu(p) for p in pids)
        per_thread = threads(worker.pid) if who != "celery" else {}
        b1, r1 = cpu(beam), cpu(redis_pid)
        wall = time.monotonic() - t0
        if perf is not None:
            perf.send_signal(2)
            perf.wait()
    finally:
        if worker is not None:
            if who == "celery":
                for k in subprocess.run(["pgrep", "-P", str(worker.pid)], capture_output=True, text=True).stdout.split():
                    try:
                        os.kill(int(k), 9)
                    except ProcessLookupError:
                        pass
            worker.kill()
            worker.wait()
        subprocess.run(["rabbitmqctl", "-q", "delete_vhost", vhost], capture_output=True)
    spans = []
    for key in r.scan_iter("celery-task-meta-*", count=1000):
        meta = json.loads(r.get(key))
        if meta["status"] == "SUCCESS":
            spans.append(meta["result"])
    first = min(s for s, _ in spans)
    last = max(e for _, e in spans)
    us = 1e6 / n
    return {
        "who": who, "n": n, "ok": len(spans) == n,
        "runs_per_s": round(len(spans) / (last - first)),
        "worker_us": round((w_end - (w_first or 0)) * us, 1) if w_first is not None else None,
        "worker_total_us": round(w_end * us, 1),
        "rabbit_us": round((b1 - b0) * us, 1),
        "redis_us": round((r1 - r0) * us, 1),
        "wall_s": round(wall, 2),
        "load": os.getloadavg()[0],
        # Per thread name: µs of CPU and context switches per message,
        # worker's start included.
        "threads": {k: [round(v[0] * us, 1), round(v[1] / n, 2)] for k, v in sorted(per_thread.items())},
    }


def main() -> None:
    args = sys.argv[1:]
    n = int(args.pop(0)) if args and args[0].isdigit() else 20000
    whos = args or ["headway"]
    port = free_port()
    tmp = tempfile.mkdtemp()
    srv = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                            "--appendonly", "no", "--dir", tmp], stdout=subprocess.DEVNULL)
    try:
        import redis

        for _ in range(200):
            try:
                redis.Redis(port=port).ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        for who in whos:
            print(json.dumps(drain(who, n, port, srv.pid)), flush=True)
    finally:
        srv.kill()
        srv.wait()


if __name__ == "__main__":
    main()
