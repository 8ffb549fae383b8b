"""Redis Sentinel from Python: a primary, a replica and three sentinels of
the test's own (``redis-server --sentinel`` with a generated config,
``down-after-milliseconds`` 1000), on free loopback ports.

- headway's own layout on ``redis+sentinel://…/mymaster/0``: tasks run
  before and after a ``kill -9`` of the primary (the sentinels promote the
  replica, the worker and the producer follow it); ``?wait=1`` confirms a
  send while a replica is there and refuses one, naming ``wait``, when
  none is left.
- Celery's layout on Celery's ``sentinel://h1;sentinel://h2`` URL with
  ``master_name``: a task sent by a real Celery client through kombu's
  Sentinel transport is run by a headway worker serving the Celery app
  (``broker_transport_options={"master_name": ...}``), and the Celery
  client reads its result.

Skipped without redis-server unless ``HEADWAY_REQUIRE_REDIS=1``."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import headway
from conftest import _free_port

MASTER = "mymaster"
WAIT = 30.0


def _until(what: str, ok: Callable[[], bool], limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting: {what}")
        time.sleep(0.05)


def _cli(port: int, *args: str) -> str:
    out = subprocess.run(
        ["redis-cli", "-p", str(port), *args], capture_output=True, text=True, timeout=10, check=False
    )
    return out.stdout.strip()


class Sentinels:
    """A primary, its replica and three sentinels watching them."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.primary = self._server()
        self.replica = self._server()
        assert _cli(self.replica, "REPLICAOF", "127.0.0.1", str(self.primary)) == "OK"
        _until("the replica in sync", lambda: "master_link_status:up" in _cli(self.replica, "INFO", "replication"))
        self.sentinels = []
        for i in range(3):
            port = _free_port()
            conf = tmp / f"sentinel-{i}.conf"
            conf.write_text(
                f"port {port}\nbind 127.0.0.1\ndaemonize no\ndir {tmp}\n"
                f"sentinel monitor {MASTER} 127.0.0.1 {self.primary} 2\n"
                f"sentinel down-after-milliseconds {MASTER} 1000\n"
                f"sentinel failover-timeout {MASTER} 3000\n"
            )
            self.procs[port] = subprocess.Popen(
                ["redis-server", str(conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
            self.sentinels.append(port)
        for port in self.sentinels:
            _until("a sentinel knowing all", lambda port=port: self._knows_all(port))

    def _server(self, port: int | None = None) -> int:
        port = port or _free_port()
        self.procs[port] = subprocess.Popen(
            ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
             "--dir", str(self.tmp)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _until("redis-server answering", lambda: _cli(port, "PING") == "PONG", 10)
        return port

    def _knows_all(self, port: int) -> bool:
        lines = _cli(port, "SENTINEL", "MASTER", MASTER).splitlines()
        info = dict(zip(lines[::2], lines[1::2], strict=False))
        return info.get("num-slaves") == "1" and info.get("num-other-sentinels") == "2"

    def primary_port(self) -> int | None:
        lines = _cli(self.sentinels[0], "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER).splitlines()
        return int(lines[1]) if len(lines) == 2 else None

    def hosts(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p in self.sentinels)

    def kill(self, port: int) -> None:
        p = self.procs.pop(port)
        p.kill()
        p.wait(10)

    def restart(self, port: int) -> None:
        self._server(port)

    def stop(self) -> None:
        for p in self.procs.values():
            p.kill()
            p.wait(10)


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[Sentinels]:
    if shutil.which("redis-server") is None or shutil.which("redis-cli") is None:
        why = "redis-server (with Sentinel) or redis-cli is not installed"
        if os.environ.get("HEADWAY_REQUIRE_REDIS") == "1":
            pytest.fail(f"HEADWAY_REQUIRE_REDIS=1 but {why}")
        pytest.skip(why)
    s = Sentinels(tmp_path)
    yield s
    s.stop()


def test_own_layout_follows_a_failover_and_wait_confirms_or_refuses(sentinels: Sentinels) -> None:
    url = f"redis+sentinel://{sentinels.hosts()}/{MASTER}/0"
    app = headway.App(headway.RedisBroker(url, prefix="s:"))
    wb = headway.RedisBroker(url + "?wait=1&wait_timeout=300", prefix="s:")
    assert wb.url.endswith("?wait=1&wait_timeout=300")
    waited = headway.App(wb)

    @app.task(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    w = app.worker()
    w.start()
    try:
        assert add.delay(1, 2).get(timeout=WAIT) == 3
        # Confirmed by the replica, and run.
        assert waited.send_task("add", (2, 3)).get(timeout=WAIT) == 5
        first = sentinels.primary_port()
        sentinels.kill(first)  # type: ignore[arg-type]
        _until("a new primary", lambda: sentinels.primary_port() not in (None, first))
        # The worker and the producer follow the new primary.
        assert add.delay(3, 4).get(timeout=WAIT) == 7
        # No replica left: ?wait=1 cannot be met, and the send says so.
        with pytest.raises(headway.BrokerError, match="`wait`: 0 of the 1 replicas"):
            waited.send_task("add", (4, 5))
    finally:
        w.stop(2.0)


PROJECT = """
import os
from celery import Celery

app = Celery("sproj", broker=os.environ["SPROJ_URL"], backend=os.environ["SPROJ_URL"])
app.conf.broker_transport_options = {"master_name": "mymaster"}
app.conf.result_backend_transport_options = {"master_name": "mymaster"}
app.conf.task_default_queue = "sentinel-q"


@app.task(name="sproj.mul")
def mul(a, b):
    return a * b
"""


def test_celery_layout_through_sentinel(sentinels: Sentinels, tmp_path: Path, monkeypatch: Any) -> None:
    celery = pytest.importorskip("celery")
    url = ";".join(f"sentinel://127.0.0.1:{p}/0" for p in sentinels.sentinels)
    # The binding: Celery's Sentinel URL with the master named apart.
    b = headway.RedisBroker.celery(url, master_name=MASTER)
    assert b.url == f"redis+sentinel://{sentinels.hosts()}/{MASTER}/0"
    with pytest.raises(ValueError, match="master_name"):
        headway.RedisBroker.celery(url)
    # A Celery project served by headway, sent to by a Celery client over
    # kombu's Sentinel transport.
    (tmp_path / "sproj.py").write_text(PROJECT)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("SPROJ_URL", url)
    import sproj  # type: ignore[import-not-found]  # noqa: PLC0415

    from headway._from_celery import serve  # noqa: PLC0415

    app = serve(sproj.app)
    w = app.worker(queues=["sentinel-q"])
    w.start()
    try:
        client = celery.Celery("client", broker=url, backend=url)
        client.conf.broker_transport_options = {"master_name": MASTER}
        client.conf.result_backend_transport_options = {"master_name": MASTER}
        r = client.send_task("sproj.mul", (6, 7), queue="sentinel-q")
        assert r.get(timeout=WAIT) == 42
    finally:
        w.stop(2.0)
