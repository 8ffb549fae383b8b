"""Redis throughput probe with Python no-op bodies (the Rust one is redis.rs).

    python core/benches/redis.py [N [CONCURRENCY]]

Starts its own redis-server on a free loopback port, then for headway's
layout and Celery's: enqueue N runs with ``task.delay`` (one call each) and
with one ``group``, drain them with one worker (results stored), and time
1000 one-at-a-time ``delay(...).get()`` round trips.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time

import headway

N = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
CONCURRENCY = int(sys.argv[2]) if len(sys.argv) > 2 else 8


def free_port() -> int:
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p != 6379:
            return p


def start() -> tuple[subprocess.Popen, int]:
    port = free_port()
    d = tempfile.mkdtemp(prefix="headway-bench-")
    proc = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", d,
         "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return proc, port
        except OSError:
            time.sleep(0.01)
    raise RuntimeError("redis-server did not start")


def probe(label: str, url: str) -> None:
    if label.startswith("celery"):
        app = headway.App(headway.RedisBroker.celery(url))
    else:
        app = headway.App(url)

    @app.task(name="noop")
    def noop(i: int) -> None:
        return None

    t = time.perf_counter()
    for i in range(N):
        noop.delay(i)
    delay_rate = N / (time.perf_counter() - t)
    t = time.perf_counter()
    headway.group([noop.s(i) for i in range(N)]).send()
    group_rate = N / (time.perf_counter() - t)
    w = app.worker(concurrency=CONCURRENCY)
    t = time.perf_counter()
    w.start()
    while w.settled < 2 * N:
        time.sleep(0.0005)
    drain = 2 * N / (time.perf_counter() - t)
    rtts = []
    for i in range(1000):
        t = time.perf_counter()
        noop.delay(i).get(timeout=5)
        rtts.append(time.perf_counter() - t)
    w.stop(1.0)
    rtts.sort()
    print(
        f"python, {label}: enqueue {delay_rate:,.0f}/s (delay) {group_rate:,.0f}/s (group), "
        f"drain {drain:,.0f}/s (sync no-op, concurrency {CONCURRENCY}, results stored), "
        f"round trip p50 {rtts[500] * 1e6:.0f} µs p99 {rtts[990] * 1e6:.0f} µs"
    )


def main() -> None:
    only = os.environ.get("HEADWAY_BENCH_LAYOUT")
    for label in ("headway layout", "celery layout"):
        if only and only not in label:
            continue
        proc, port = start()
        try:
            probe(label, f"redis://127.0.0.1:{port}/0")
        finally:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
