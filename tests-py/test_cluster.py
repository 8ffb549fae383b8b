"""headway's own layout on a Redis Cluster from Python: three primaries and
three replicas of the test's own (``redis-server --cluster-enabled yes``
×6 on free loopback ports, joined by ``redis-cli --cluster create``),
named ``redis+cluster://`` by their seeds. A task, and a chord whose parts
and callback are on queues in different slots, run. Celery's layout
refuses the URL.

Skipped without redis-server unless ``HEADWAY_REQUIRE_REDIS=1``."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import headway
from conftest import _free_port

WAIT = 30.0


def _until(what: str, ok: Callable[[], bool], limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting: {what}")
        time.sleep(0.05)


def _cli(port: int, *args: str) -> str:
    out = subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=30, check=False
    )
    return out.stdout.strip()


def _free_pair() -> int:
    """A port whose cluster bus port (+10000) is free too."""
    while True:
        port = _free_port()
        if port >= 55000:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[list[int]]:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        why = "redis-server or redis-cli is not installed"
        if os.environ.get("HEADWAY_REQUIRE_REDIS") == "1":
            pytest.fail(f"HEADWAY_REQUIRE_REDIS=1 but {why}")
        pytest.skip(why)
    ports = [_free_pair() for _ in range(6)]
    procs = [
        subprocess.Popen(
            ["redis-server", "--port", str(p), "--bind", "127.0.0.1", "--cluster-enabled", "yes",
             "--cluster-node-timeout", "1000", "--cluster-config-file", str(tmp_path / f"nodes-{p}.conf"),
             "--dir", str(tmp_path), "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for p in ports
    ]
    try:
        for p in ports:
            _until("a node answering", lambda p=p: _cli(p, "PING") == "PONG", 10)
        made = subprocess.run(
            ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in ports),
             "--cluster-replicas", "1", "--cluster-yes"],
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert made.returncode == 0, made.stdout
        for p in ports:
            _until("cluster_state:ok", lambda p=p: "cluster_state:ok" in _cli(p, "CLUSTER", "INFO"))
        yield ports
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)


def test_own_layout_runs_a_chord_across_slots_on_a_cluster(cluster: list[int]) -> None:
    url = "redis+cluster://" + ",".join(f"127.0.0.1:{p}" for p in cluster) + "/"
    broker = headway.RedisBroker(url)
    assert broker.url == url
    app = headway.App(broker)

    @app.task(name="add", queue="qa")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="total", queue="qb")
    def total(parts: list[int]) -> int:
        return sum(parts)

    # The queues are in different slots (on different primaries).
    owners = {_cli(cluster[0], "CLUSTER", "KEYSLOT", f"headway:{{{q}}}:ready:0") for q in ("qa", "qb")}
    assert len(owners) == 2
    w = app.worker(queues=["qa", "qb"])
    w.start()
    try:
        assert add.delay(2, 3).get(timeout=WAIT) == 5
        joined = headway.chord([add.s(1, 1), add.s(2, 2), add.s(3, 3)], total.s()).send()
        assert joined.get(timeout=WAIT) == 12
    finally:
        w.stop(2.0)
    with pytest.raises(ValueError, match="Celery's layout does not run on Redis Cluster"):
        headway.App(headway.RedisBroker.celery(url))
