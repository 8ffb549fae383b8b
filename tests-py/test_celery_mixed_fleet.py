"""A mixed fleet: a Celery worker and headway workers on one queue, each
killed with ``kill -9`` in turn, lose nothing.

One Celery app (``acks_late`` task, a 2 s ``visibility_timeout``) served by
a real Celery worker and by ``headway worker -A``; 120 runs are sent; once
both have run some, the headway worker is killed, a second headway worker
is started, and later the Celery worker is killed. Every run must complete
(the killed holders' claims are restored by the survivor) and every result
read by Celery's client; duplicates are possible with ``acks_late`` (a run
cut off by a kill runs again) and are bounded by what the killed workers
held.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from conftest import RedisServer

N = 120

PROJECT = '''
import os, time
from celery import Celery

URL = os.environ["FLEET_URL"]
app = Celery("fleet", broker=URL, backend=URL)
app.conf.broker_transport_options = {"visibility_timeout": 2}
app.conf.result_backend_transport_options = {"visibility_timeout": 2}
LEDGER = os.environ["FLEET_LEDGER"]


@app.task(name="fleet.slow", acks_late=True)
def slow(i):
    time.sleep(0.05)
    with open(LEDGER, "a") as f:
        f.write(f"{i} {os.getpid()}\\n")
    return i
'''


def _ledger(path: Path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2:
            out.append((int(parts[0]), int(parts[1])))
    return out


def _until(check: Any, what: str, limit: float = 60.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_a_celery_worker_and_headway_workers_on_one_queue_killed_in_turn(
    redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = 36
    redis_server.command("FLUSHDB", db=db)
    url = f"redis://127.0.0.1:{redis_server.port}/{db}"
    ledger = tmp_path / "ledger.txt"
    name = f"fleet_{os.getpid()}"
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(PROJECT))
    env = {**os.environ, "FLEET_URL": url, "FLEET_LEDGER": str(ledger),
           "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}  # fmt: skip
    monkeypatch.setenv("FLEET_URL", url)
    monkeypatch.setenv("FLEET_LEDGER", str(ledger))
    monkeypatch.syspath_prepend(str(tmp_path))
    procs: list[subprocess.Popen[bytes]] = []

    def start(cmd: list[str], log: str) -> subprocess.Popen[bytes]:
        p = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=open(tmp_path / log, "w"), stderr=subprocess.STDOUT)
        procs.append(p)
        return p

    celery_cmd = [sys.executable, "-m", "celery", "-A", name, "worker", "-P", "threads", "-c", "2",
                  "--without-heartbeat", "--without-gossip", "--without-mingle", "-l", "warning"]  # fmt: skip
    headway_cmd = [sys.executable, "-m", "headway", "worker", "-A", f"{name}:app", "-c", "2"]
    try:
        import importlib

        mod = importlib.import_module(name)
        cel = start(celery_cmd, "celery.log")
        hw1 = start(headway_cmd, "headway1.log")
        results = [mod.slow.delay(i) for i in range(N)]
        # Positive control: both kinds of worker take runs from the queue.
        _until(lambda: len({pid for _, pid in _ledger(ledger)}) >= 2 and len(_ledger(ledger)) >= 20,
               "both workers to run some")  # fmt: skip
        pids = {pid for _, pid in _ledger(ledger)}
        assert cel.pid in pids and hw1.pid in pids, (pids, cel.pid, hw1.pid)
        hw1.send_signal(signal.SIGKILL)
        hw1.wait(10)
        hw2 = start(headway_cmd, "headway2.log")
        _until(lambda: len(_ledger(ledger)) >= 70, "more runs after the first kill", 90)
        cel.send_signal(signal.SIGKILL)
        cel.wait(10)
        # The survivor restores both dead holders' claims: everything runs.
        _until(lambda: {i for i, _ in _ledger(ledger)} >= set(range(N)), "every run to complete", 120)
        assert [r.get(timeout=30) for r in results] == list(range(N))
        assert all(r.state == "SUCCESS" for r in results)
        runs = _ledger(ledger)
        dupes = len(runs) - N
        # Bounded by what the two killed workers held (runs in progress plus
        # prefetch: 2 + 8 for the headway worker, Celery's 2 × 4 + 2).
        assert 0 <= dupes <= 20, f"{dupes} duplicates"
        assert hw2.pid in {pid for _, pid in runs}, "the second headway worker ran nothing"
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
