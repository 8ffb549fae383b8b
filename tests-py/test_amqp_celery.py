"""headway and real Celery 5.x workers and producers on one RabbitMQ.

Each test gets a vhost of its own on the local RabbitMQ (127.0.0.1:5672,
guest/guest; ``rabbitmqctl add_vhost``, deleted after) and a Redis
database of the session's redis-server for results in Celery's format.
A Celery worker runs as a subprocess (``celery -A ... worker``), the
Celery producer in this process. Without RabbitMQ the tests are skipped
with the reason printed, unless ``HEADWAY_REQUIRE_RABBITMQ=1`` (CI), which
makes that a failure.

Tasks named ``mix.cel_*`` run on Celery's worker (queue ``celery``),
``mix.hw_*`` on headway's (queue ``hw``), so a chain or a chord crosses
from one kind of worker to the other and back.
"""

from __future__ import annotations

import gc
import importlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import headway
from conftest import RedisServer

PROJECT = '''
import os, time
from celery import Celery

app = Celery("mix", broker=os.environ["MIX_AMQP"], backend=os.environ["MIX_REDIS"])
app.conf.task_routes = {"mix.hw_*": {"queue": "hw"}}
app.conf.task_queue_max_priority = int(os.environ.get("MIX_MAXPRI") or 0) or None
app.conf.broker_connection_retry_on_startup = True
LEDGER = os.environ["MIX_LEDGER"]


def note(what):
    with open(LEDGER, "a") as f:
        f.write(f"{what} {os.getpid()}\\n")


@app.task(name="mix.cel_add")
def cel_add(a, b=0):
    note(f"cel_add:{a}+{b}")
    return a + b


@app.task(name="mix.cel_total")
def cel_total(values):
    return sum(values)


@app.task(name="mix.hw_slow", acks_late=True)
def hw_slow(i):
    note(f"hw_slow:{i}")
    return f"celery ran {i}"
'''

_N = itertools.count()


def _ctl(*args: str) -> str:
    return subprocess.run(
        ["rabbitmqctl", "-q", *args], check=True, capture_output=True, text=True, timeout=60
    ).stdout


def _rabbit_up() -> str | None:
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=1).close()
    except OSError:
        return "no RabbitMQ answers on 127.0.0.1:5672 (apt-get install rabbitmq-server)"
    if shutil.which("rabbitmqctl") is None:
        return "rabbitmqctl is not installed"
    return None


@pytest.fixture
def vhost() -> Iterator[str]:
    why = _rabbit_up()
    if why:
        if os.environ.get("HEADWAY_REQUIRE_RABBITMQ") == "1":
            pytest.fail(f"HEADWAY_REQUIRE_RABBITMQ=1 but {why}")
        print(f"\nskipping the RabbitMQ tests: {why}")
        pytest.skip(why)
    name = f"headway-py-{os.getpid()}-{next(_N)}"
    _ctl("add_vhost", name)
    _ctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
    yield name
    _ctl("delete_vhost", name)


class Mix:
    """The Celery project, its worker subprocesses and a headway app."""

    def __init__(self, tmp: Path, vhost: str, redis: RedisServer, db: int, maxpri: int | None):
        self.tmp = tmp
        self.amqp = f"amqp://guest:guest@127.0.0.1:5672/{vhost}"
        redis.command("FLUSHDB", db=db)
        self.redis = f"redis://127.0.0.1:{redis.port}/{db}"
        self.ledger = tmp / "ledger.txt"
        self.name = f"mix_{os.getpid()}_{next(_N)}"
        (tmp / f"{self.name}.py").write_text(textwrap.dedent(PROJECT))
        self.env = {
            **os.environ,
            "MIX_AMQP": self.amqp,
            "MIX_REDIS": self.redis,
            "MIX_LEDGER": str(self.ledger),
            "MIX_MAXPRI": str(maxpri or ""),
            "PYTHONPATH": os.pathsep.join([str(tmp), *sys.path]),
        }
        for k in ("MIX_AMQP", "MIX_REDIS", "MIX_LEDGER", "MIX_MAXPRI"):
            os.environ[k] = self.env[k]
        sys.path.insert(0, str(tmp))
        self.celery: Any = importlib.import_module(self.name)
        self.procs: list[subprocess.Popen[bytes]] = []
        url = self.amqp + (f"?max_priority={maxpri}" if maxpri else "")
        self.app = headway.App(url, backend=self.redis)

    def celery_worker(self, queues: str = "celery", concurrency: int = 2) -> subprocess.Popen[bytes]:
        log = open(self.tmp / f"celery-{len(self.procs)}.log", "w")
        p = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", self.name, "worker", "-P", "threads",
             "-c", str(concurrency), "-Q", queues, "-n", f"cel{len(self.procs)}@%h",
             "--without-heartbeat", "--without-gossip", "--without-mingle", "-l", "info"],
            cwd=self.tmp, env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        self.procs.append(p)
        return p

    def notes(self) -> list[str]:
        if not self.ledger.exists():
            return []
        return [ln.split()[0] for ln in self.ledger.read_text().splitlines() if ln.strip()]

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        self.celery.app.close()
        # The app's broker (and its pidbox listener) goes with the last
        # reference, before the vhost is deleted under it.
        del self.app
        gc.collect()


@pytest.fixture
def mix(vhost: str, redis_server: RedisServer, tmp_path: Path) -> Iterator[Mix]:
    m = Mix(tmp_path, vhost, redis_server, 40 + next(_N) % 20, None)
    yield m
    m.close()


def _until(check: Any, what: str, limit: float = 30.0) -> None:
    deadline = time.monotonic() + limit
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _hw_tasks(app: headway.App, ledger: Path) -> None:
    def note(what: str) -> None:
        with open(ledger, "a") as f:
            f.write(f"{what} {os.getpid()}\n")

    @app.task(name="mix.hw_mul", queue="hw")
    def hw_mul(a: int, b: int = 1) -> int:
        note(f"hw_mul:{a}*{b}")
        return a * b

    @app.task(name="mix.hw_total", queue="hw")
    def hw_total(values: list[int]) -> int:
        return sum(values)


def test_each_side_runs_what_the_other_sends(mix: Mix) -> None:
    _hw_tasks(mix.app, mix.ledger)
    mix.celery_worker()
    w = mix.app.worker(["hw"], concurrency=2)
    w.start()
    try:
        # headway sends, Celery's worker runs, the result is read by both.
        h = mix.app.send_task("mix.cel_add", (2, 3))
        assert h.get(timeout=60) == 5
        assert mix.celery.app.AsyncResult(h.id).get(timeout=10) == 5
        # Celery sends (.delay and send_task), headway's worker runs.
        r = mix.celery.app.send_task("mix.hw_mul", (6, 7))
        assert r.get(timeout=30) == 42
        assert mix.app.handle(r.id).get(timeout=10) == 42
        assert "hw_mul:6*7" in mix.notes() and "cel_add:2+3" in mix.notes()
    finally:
        w.stop()


def test_chains_and_chords_cross_both_workers(mix: Mix) -> None:
    from celery import chain as cchain
    from celery import chord as cchord

    _hw_tasks(mix.app, mix.ledger)
    mix.celery_worker()
    w = mix.app.worker(["hw"], concurrency=2)
    w.start()
    try:
        c = mix.celery
        # Celery's canvas: Celery → headway → Celery.
        r = cchain(c.cel_add.s(1, 2), c.app.signature("mix.hw_mul", (10,)), c.cel_add.s(5)).apply_async()
        assert r.get(timeout=60) == 35
        # A Celery chord: parts on both workers, the body on headway's.
        parts = [c.cel_add.s(i, i) for i in range(3)] + [c.app.signature("mix.hw_mul", (i, 2)) for i in range(3)]
        r = cchord(parts)(c.app.signature("mix.hw_total"))
        assert r.get(timeout=60) == 12
        # headway's canvas: headway → Celery → headway, and a chord whose
        # body Celery runs.
        a = mix.app
        hc = headway.chain(a.signature("mix.hw_mul", (3, 3)), a.signature("mix.cel_add", (1,)),
                           a.signature("mix.hw_mul", (2,)))  # fmt: skip
        assert hc.apply_async().get(timeout=60) == 20
        hd = headway.chord([a.signature("mix.hw_mul", (i, 3)) for i in range(4)],
                           a.signature("mix.cel_total"))  # fmt: skip
        assert hd.apply_async().get(timeout=60) == 18
    finally:
        w.stop()


def test_countdowns_are_held_by_whichever_consumer(mix: Mix) -> None:
    _hw_tasks(mix.app, mix.ledger)
    mix.celery_worker()
    w = mix.app.worker(["hw"], concurrency=2)
    w.start()
    try:
        t0 = time.time()
        h = mix.app.send_task("mix.cel_add", (1, 1), countdown=2)
        r = mix.celery.app.send_task("mix.hw_mul", (2, 2), countdown=2)
        # Positive control beside the negative: a plain send is run at once.
        assert mix.app.send_task("mix.cel_add", (0, 0)).get(timeout=30) == 0
        assert h.state() == "PENDING" and r.state == "PENDING"
        assert h.get(timeout=30) == 2 and r.get(timeout=30) == 4
        assert time.time() - t0 >= 1.9
    finally:
        w.stop()


def test_priorities_on_a_max_priority_queue(vhost: str, redis_server: RedisServer, tmp_path: Path) -> None:
    mix = Mix(tmp_path, vhost, redis_server, 61, 10)
    try:
        order: list[int] = []

        @mix.app.task(name="mix.hw_order", queue="hw")
        def hw_order(i: int) -> int:
            order.append(i)
            return i

        # Celery declares `hw` with x-max-priority 10, headway agrees (a
        # disagreement would be refused by RabbitMQ).
        low = [mix.celery.app.send_task("mix.hw_order", (i,), priority=1) for i in range(3)]
        high = mix.app.send_task("mix.hw_order", (99,), queue="hw", priority=9)
        args = _ctl("list_queues", "-p", vhost, "name", "arguments")
        assert "x-max-priority" in args, args
        w = mix.app.worker(["hw"], concurrency=1, prefetch=1)
        w.start()
        try:
            assert high.get(timeout=30) == 99
            assert [r.get(timeout=30) for r in low] == [0, 1, 2]
            assert order[0] == 99 and sorted(order[1:]) == [0, 1, 2], order
        finally:
            w.stop()
    finally:
        mix.close()


def test_revokes_cross_both_ways(mix: Mix) -> None:
    _hw_tasks(mix.app, mix.ledger)
    mix.celery_worker()
    w = mix.app.worker(["hw"], concurrency=2)
    w.start()
    try:
        # Positive control first: both workers are live.
        assert mix.app.send_task("mix.cel_add", (1, 1)).get(timeout=60) == 2
        assert mix.celery.app.send_task("mix.hw_mul", (1, 1)).get(timeout=30) == 1
        # Celery's client revokes, headway's worker skips.
        r = mix.celery.app.send_task("mix.hw_mul", (5, 5), countdown=3)
        mix.celery.app.control.revoke(r.id)
        _until(lambda: mix.app.handle(r.id).state() == "REVOKED", "headway to record the revoke", 30)
        # headway revokes, Celery's worker skips.
        h = mix.app.send_task("mix.cel_add", (7, 7), countdown=3)
        mix.app.revoke(h.id)
        _until(lambda: mix.celery.app.AsyncResult(h.id).state == "REVOKED", "Celery to record the revoke", 30)
        assert "hw_mul:5*5" not in mix.notes() and "cel_add:7+7" not in mix.notes()
    finally:
        w.stop()


HW_WORKER = '''
import os, sys, time
import headway

app = headway.App(os.environ["MIX_AMQP"], backend=os.environ["MIX_REDIS"])


@app.task(name="mix.hw_slow", queue="hw", acks_late=True)
def hw_slow(i):
    with open(os.environ["MIX_LEDGER"], "a") as f:
        f.write(f"hw_started:{i} {os.getpid()}\\n")
    time.sleep(60)
    return f"headway ran {i}"


app.worker(["hw"], concurrency=1).run()
'''


def test_an_acks_late_run_killed_mid_run_is_redelivered_to_a_celery_worker(mix: Mix) -> None:
    (mix.tmp / "hw_worker.py").write_text(textwrap.dedent(HW_WORKER))
    hw = subprocess.Popen(
        [sys.executable, str(mix.tmp / "hw_worker.py")], cwd=mix.tmp, env=mix.env,
        stdout=open(mix.tmp / "hw.log", "w"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    mix.procs.append(hw)
    r = mix.celery.hw_slow.delay(1)
    _until(lambda: "hw_started:1" in mix.notes(), "the headway worker to start the run", 60)
    hw.send_signal(signal.SIGKILL)
    hw.wait(10)
    # Unacked on a dead connection: RabbitMQ requeues it, and a Celery
    # worker on the same queue runs it.
    mix.celery_worker("hw")
    assert r.get(timeout=60) == "celery ran 1"
    assert "hw_slow:1" in mix.notes()


def test_rpc_results_travel_back_over_rabbitmq_both_ways(
    vhost: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    mix = Mix(tmp_path, vhost, redis_server, 62, None)
    # Both sides keep results as Celery's rpc:// does: no Redis involved.
    mix.env["MIX_REDIS"] = "rpc://"
    rpc_app = headway.App(mix.amqp, backend="rpc://")
    try:
        mix.celery_worker()

        @rpc_app.task(name="mix.hw_mul", queue="hw")
        def hw_mul(a: int, b: int = 1) -> int:
            return a * b

        w = rpc_app.worker(["hw"], concurrency=2)
        w.start()
        try:
            # A Celery worker's result comes back to the headway caller.
            assert rpc_app.send_task("mix.cel_add", (20, 22)).get(timeout=60) == 42
            # A headway worker's result goes back to a Celery caller.
            from celery import Celery

            caller = Celery("rpc_caller", broker=mix.amqp, backend="rpc://")
            caller.conf.task_routes = {"mix.hw_*": {"queue": "hw"}}
            try:
                assert caller.send_task("mix.hw_mul", (6, 7)).get(timeout=30) == 42
            finally:
                caller.close()
            # And headway to headway.
            assert rpc_app.send_task("mix.hw_mul", (3, 3), queue="hw").get(timeout=30) == 9
        finally:
            w.stop()
    finally:
        del rpc_app
        mix.close()


def test_headway_worker_serves_a_celery_app_on_rabbitmq_unchanged(mix: Mix) -> None:
    # `headway worker -A proj:app` with a Celery app whose broker is
    # RabbitMQ: Celery's own task bodies, run by headway's worker.
    out = open(mix.tmp / "served.log", "w")
    served = subprocess.Popen(
        [sys.executable, "-m", "headway", "worker", "-A", f"{mix.name}:app", "-Q", "hw", "-c", "2"],
        cwd=mix.tmp, env=mix.env, stdout=out, stderr=subprocess.STDOUT,
    )  # fmt: skip
    mix.procs.append(served)
    r = mix.celery.hw_slow.delay(5)
    assert r.get(timeout=60) == "celery ran 5"
    ran = [ln.split() for ln in mix.ledger.read_text().splitlines()]
    assert ["hw_slow:5", str(served.pid)] in ran, ran


def test_an_unreachable_rabbitmq_is_a_broker_error_with_the_password_hidden() -> None:
    with pytest.raises(headway.BrokerError) as info:
        headway.App("amqp://u:s3cret@127.0.0.1:1/v")
    assert "unreachable" in str(info.value) and "s3cret" not in str(info.value)
    # A bad URL is a ValueError naming what is wrong, the password hidden.
    with pytest.raises(ValueError, match="port") as bad:
        headway.App("amqp://u:s3cret@h:99999/v")
    assert "s3cret" not in str(bad.value)
    # rpc:// needs RabbitMQ to travel on.
    with pytest.raises(ValueError, match="`backend`.*amqp"):
        headway.App("memory://", backend="rpc://")
