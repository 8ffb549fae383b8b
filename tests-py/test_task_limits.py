"""Task limits shared by every worker on a broker: ``rate_scope="global"``,
``concurrency_key`` with ``concurrency_limit``, ``dedupe_key`` with
``dedupe_ttl`` — on the memory broker and both Redis layouts (on a
redis-server of the session's own), with two apps standing for two worker
processes, and a worker killed -9 holding a key's permit."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

import headway

from conftest import RedisServer

LIMIT = 30.0


def _pair(kind: str, server: RedisServer | None, db: int, **kw: Any) -> list[headway.App]:
    """Two apps on one broker, each with its own connection (two processes'
    worth), on the real clock."""
    if kind == "memory":
        app = headway.App("memory://")
        return [app, app]
    assert server is not None
    if kind == "celery":
        url = server.url.rsplit("/", 1)[0] + f"/{db}"
        assert server.command("FLUSHDB", db=db) == b"+OK"
        return [headway.App(headway.RedisBroker.celery(url, consumer=f"c{i}")) for i in (1, 2)]
    prefix = f"tl{uuid.uuid4().hex[:8]}:"
    return [
        headway.App(headway.RedisBroker(server.url, consumer=f"c{i}", prefix=prefix, **kw))
        for i in (1, 2)
    ]


@pytest.fixture(params=["memory", "redis", "celery"])
def kind(request: pytest.FixtureRequest) -> tuple[str, RedisServer | None]:
    server = request.getfixturevalue("redis_server") if request.param != "memory" else None
    return request.param, server


def _until(cond: Any, limit: float = LIMIT, what: str = "") -> None:
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, f"not within {limit} s: {what}"
        time.sleep(0.01)


# ---------------------------------------------------------------- the global rate


def _started(kind: str, server: RedisServer | None, scope: str, db: int, window: float) -> int:
    """Runs started within ``window`` s of the first, by two workers of two
    apps, at 20/s with ``scope``."""
    starts: list[float] = []
    lock = threading.Lock()
    apps = _pair(kind, server, db)
    for app in apps:

        @app.task(name="ping", rate="20/s", rate_scope=scope)  # type: ignore[arg-type]
        def ping() -> None:
            with lock:
                starts.append(time.monotonic())

    for _ in range(300):
        apps[0].send("ping", ())
    ws = [app.worker(concurrency=4, prefetch=8) for app in apps]
    for w in ws:
        w.start()
    try:
        _until(lambda: bool(starts), what="a first run")
        first = starts[0]
        time.sleep(max(0.0, first + window - time.monotonic()))
    finally:
        for w in ws:
            w.stop(2.0)
    with lock:
        return sum(1 for t in starts if t < first + window)


def test_a_global_rate_holds_across_two_workers(kind: tuple[str, RedisServer | None]) -> None:
    name, server = kind
    window = 3.0
    got = _started(name, server, "global", 20, window)
    # 20/s over 3 s, a burst of 20 (one second's worth): 80, within 10%.
    assert 50 <= got <= (20 * window + 20) * 1.1, got
    # The positive control: per worker, each lets its own 20/s through.
    each = _started(name, server, "worker", 21, window)
    assert each >= 1.5 * 20 * window, each


# ---------------------------------------------------------------- concurrency keys


def _most_at_once(ledger: list[tuple[str, float, float]], key: str | None) -> int:
    edges = sorted(
        [(a, 1) for k, a, _ in ledger if key in (None, k)]
        + [(b, -1) for k, _, b in ledger if key in (None, k)]
    )
    now = most = 0
    for _, d in edges:
        now += d
        most = max(most, now)
    return most


def test_a_concurrency_key_is_never_exceeded_while_other_keys_run(
    kind: tuple[str, RedisServer | None],
) -> None:
    name, server = kind
    ledger: list[tuple[str, float, float]] = []
    lock = threading.Lock()
    apps = _pair(name, server, 22)
    for app in apps:

        @app.task(name="slow", concurrency_limit=1)
        def slow(key: str) -> None:
            t0 = time.monotonic()
            time.sleep(0.08)
            with lock:
                ledger.append((key, t0, time.monotonic()))

    hs = [
        apps[i % 2].send("slow", (key,), concurrency_key=key)
        for i in range(6)
        for key in ("cust-7", "cust-8")
    ]
    ws = [app.worker(concurrency=4) for app in apps]
    for w in ws:
        w.start()
    try:
        for h in hs:
            h.get(timeout=LIMIT)
    finally:
        for w in ws:
            w.stop(2.0)
    assert len(ledger) == 12
    assert _most_at_once(ledger, "cust-7") == 1
    assert _most_at_once(ledger, "cust-8") == 1
    # The positive control: different keys did run at once.
    assert _most_at_once(ledger, None) >= 2


HOLDER = """
import sys, time, headway

url, prefix, log = sys.argv[1:4]
app = headway.App(headway.RedisBroker(url, consumer="doomed", prefix=prefix, lease=1.0))

@app.task(name="slow", concurrency_limit=1)
def slow(who):
    with open(log, "a") as f:
        f.write(f"{who} {time.time()}\\n")
    if who == "first":
        time.sleep(600)

print("ready", flush=True)
app.worker(concurrency=2).run()
"""


def test_a_killed_workers_permit_lapses_with_its_lease(tmp_path: Path, redis_server: RedisServer) -> None:
    script = tmp_path / "holder.py"
    script.write_text(textwrap.dedent(HOLDER))
    log = tmp_path / "log"
    prefix = f"tk{uuid.uuid4().hex[:8]}:"
    app = headway.App(headway.RedisBroker(redis_server.url, consumer="rescuer", prefix=prefix, lease=1.0))

    @app.task(name="slow", concurrency_limit=1)
    def slow(who: str) -> None:
        with open(log, "a") as f:
            f.write(f"{who} {time.time()}\n")

    def runs() -> list[str]:
        return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []

    app.send("slow", ("first",), concurrency_key="k")
    child = subprocess.Popen(
        [sys.executable, str(script), redis_server.url, prefix, str(log)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    w = app.worker()
    try:
        _until(lambda: runs() == ["first"], what="the holder's run")
        second = app.send("slow", ("second",), concurrency_key="k")
        w.start()
        # The key's only permit is the holder's: the second run waits.
        time.sleep(1.5)
        assert runs() == ["first"]
        killed = time.monotonic()
        child.kill()
        child.wait(10)
        second.get(timeout=LIMIT)
        # It ran once the dead holder's lease (1 s) lapsed, not before.
        assert runs() == ["first", "second"]
        assert time.monotonic() - killed < 10
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(10)
        w.stop(2.0)


# ---------------------------------------------------------------- dedupe


def test_a_deduplicated_send_answers_the_first_run_until_its_ttl(
    kind: tuple[str, RedisServer | None],
) -> None:
    name, server = kind
    runs: list[str] = []
    lock = threading.Lock()
    apps = _pair(name, server, 23)
    for app in apps:

        @app.task(name="once", bind=True)
        def once(ctx: headway.Context) -> str:
            with lock:
                runs.append(ctx.id)
            return "done"

    first = apps[0].send("once", (), dedupe_key="k", dedupe_ttl=0.7)
    again = apps[1].send("once", (), dedupe_key="k", dedupe_ttl=0.7)
    assert again.id == first.id
    # The positive control: another key sends its own run.
    other = apps[1].send("once", (), dedupe_key="j", dedupe_ttl=0.7)
    assert other.id != first.id
    w = apps[0].worker()
    w.start()
    try:
        assert first.get(timeout=LIMIT) == "done"
        assert again.get(timeout=LIMIT) == "done"
        other.get(timeout=LIMIT)
        time.sleep(0.8)
        later = apps[1].send("once", (), dedupe_key="k", dedupe_ttl=0.7)
        assert later.id != first.id
        later.get(timeout=LIMIT)
    finally:
        w.stop(2.0)
    assert sorted(runs) == sorted([first.id, other.id, later.id])


def test_task_limits_options_are_checked_in_the_core() -> None:
    app = headway.App("memory://")
    with pytest.raises(ValueError, match="`rate_scope`"):
        app.task(name="a", rate="1/s", rate_scope="cluster")(lambda: None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`rate_scope`"):
        app.task(name="b", rate_scope="global")(lambda: None)
    with pytest.raises(ValueError, match="`concurrency_limit`"):
        app.task(name="c", concurrency_limit=0)(lambda: None)

    @app.task(name="ok", rate="1/s", rate_scope="global", concurrency_limit=2)
    def ok() -> None:
        pass

    with pytest.raises(ValueError, match="`dedupe_ttl`: must be positive"):
        ok.apply_async(dedupe_key="k", dedupe_ttl=0)
    with pytest.raises(ValueError, match="`dedupe_ttl`: needs a `dedupe_key`"):
        ok.apply_async(dedupe_ttl=1.0)
    with pytest.raises(ValueError, match="`concurrency_key`"):
        ok.apply_async(concurrency_key="")
    with pytest.raises(TypeError, match="`dedupe_key`"):
        ok.apply_async(dedupe_key=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`dedupe_key`"):
        headway.chain(ok.s().set(dedupe_key="k"), ok.s()).apply_async()
    # The positive control: the same options, valid, are accepted.
    assert ok.apply_async(dedupe_key="k", dedupe_ttl=1.0, concurrency_key="c").id


# ---------------------------------------------------------------- a broker that keeps none


@pytest.fixture
def rabbit_vhost() -> Any:
    import shutil
    import socket

    why = None
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=1).close()
    except OSError:
        why = "no RabbitMQ answers on 127.0.0.1:5672 (apt-get install rabbitmq-server)"
    if why is None and shutil.which("rabbitmqctl") is None:
        why = "rabbitmqctl is not installed"
    if why:
        if os.environ.get("HEADWAY_REQUIRE_RABBITMQ") == "1":
            pytest.fail(f"HEADWAY_REQUIRE_RABBITMQ=1 but {why}")
        pytest.skip(why)

    def ctl(*args: str) -> None:
        subprocess.run(["rabbitmqctl", "-q", *args], check=True, capture_output=True, timeout=60)

    name = f"headway-tl-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    ctl("add_vhost", name)
    ctl("set_permissions", "-p", name, "guest", ".*", ".*", ".*")
    yield name
    ctl("delete_vhost", name)


def test_rabbitmq_refuses_task_limits_by_name(rabbit_vhost: str, redis_server: RedisServer) -> None:
    app = headway.App(f"amqp://guest:guest@127.0.0.1:5672/{rabbit_vhost}", backend=redis_server.url)

    @app.task(name="plain")
    def plain() -> int:
        return 1

    with pytest.raises(ValueError, match="`concurrency_key`: this broker cannot share it"):
        plain.apply_async(concurrency_key="c")
    with pytest.raises(ValueError, match="`dedupe_key`: this broker cannot share it"):
        plain.apply_async(dedupe_key="k")
    # The positive control: a plain send and a worker are fine.
    w = app.worker()
    w.start()
    try:
        assert plain.delay().get(timeout=LIMIT) == 1
    finally:
        w.stop(2.0)

    @app.task(name="global", rate="5/s", rate_scope="global")
    def glob() -> None:
        pass

    with pytest.raises(ValueError, match="`rate_scope`: this broker cannot share it"):
        app.worker()
