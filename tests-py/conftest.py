"""Fail with instructions, not a wall of ImportErrors, when headway is not built;
and the task suite's brokers.

Task tests take the ``apps`` fixture, parametrized over brokers: the
in-memory one always; headway's Redis layout and Celery's (``RedisBroker``,
``RedisBroker.celery``) on a redis-server this session starts on a free
loopback port — skipped, with the reason printed, when ``redis-server`` is
not installed, unless ``HEADWAY_REQUIRE_REDIS=1``, which makes that a
failure.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

# A suite started as a background job of a non-interactive shell (`cmd &`)
# inherits SIGINT ignored, and an ignored signal stays ignored across exec:
# every child the process tests start would then ignore the Ctrl-C they
# send it (and Python would install no KeyboardInterrupt at all). Give the
# children Python's own default instead.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

try:
    import headway._native  # noqa: F401
except ImportError as e:  # pragma: no cover - only on an unbuilt checkout
    raise pytest.UsageError(
        f"headway is not built ({e}). Build it first: "
        "`maturin develop -m bindings-python/Cargo.toml` or `pip install .`"
    ) from e

import headway
from headway.testing import VirtualClock

#: Where every task test's virtual clock starts: 2026-01-01T00:00:00Z.
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
T0 = START.timestamp()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RedisServer:
    """A redis-server of the test session's own, on a free loopback port
    (or ``port``), with ``extra`` flags (``--requirepass pw``: every
    ``command`` authenticates first)."""

    def __init__(self, tmp: Path, port: int | None = None, extra: tuple[str, ...] = ()) -> None:
        self.port = port or _free_port()
        self.auth = extra[extra.index("--requirepass") + 1] if "--requirepass" in extra else None
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                # 0-15 for the Apps fixture's Celery-layout cycle, the rest
                # for tests that keep a database of their own (16 and up), so
                # no leftover consumer of one test shares another's keys.
                "--databases", "64",
                "--dir", str(tmp),
                *extra,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while True:
            try:
                if self.command("PING") == b"+PONG":
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError("redis-server did not start")
            time.sleep(0.05)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def command(self, *args: str, db: int = 0) -> bytes:
        """One command over RESP on database ``db``; answers the reply's
        first line."""
        parts = []
        cmds = [("AUTH", self.auth)] if self.auth else []
        cmds += [("SELECT", str(db)), args]
        for cmd in cmds:
            parts.append(f"*{len(cmd)}\r\n".encode())
            for a in cmd:
                b = a.encode()
                parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.sendall(b"".join(parts))
            got = b""
            while got.count(b"\r\n") < len(cmds):
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
            return got.split(b"\r\n")[len(cmds) - 1]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    if shutil.which("redis-server") is None:
        why = "redis-server is not installed (apt-get install redis-server)"
        if os.environ.get("HEADWAY_REQUIRE_REDIS") == "1":
            pytest.fail(f"HEADWAY_REQUIRE_REDIS=1 but {why}")
        print(f"\nskipping the redis broker: {why}")
        pytest.skip(why)
    server = RedisServer(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


MakeApp = Callable[..., headway.App]


class Apps:
    """Makes apps on one broker kind, and stops their workers at the end."""

    db = 0

    def __init__(self, kind: str, server: RedisServer | None) -> None:
        self.kind = kind
        self.server = server
        self.workers: list[headway.Worker] = []

    def app(self, clock: VirtualClock | None | str = "virtual", **kw: Any) -> headway.App:
        if clock == "virtual":
            clock = VirtualClock(start=START)
        assert not isinstance(clock, str)
        if self.kind == "memory":
            return headway.App("memory://", clock=clock, **kw)
        assert self.server is not None
        if self.kind == "celery":
            # Celery's key names are fixed: a database of the test's own.
            Apps.db = Apps.db % 15 + 1
            assert self.server.command("FLUSHDB", db=Apps.db) == b"+OK"
            broker = headway.RedisBroker.celery(self.server.url.rsplit("/", 1)[0] + f"/{Apps.db}")
        else:
            broker = headway.RedisBroker(self.server.url, prefix=f"t{uuid.uuid4().hex[:8]}:")
        return headway.App(broker, clock=clock, **kw)

    def start(self, app: headway.App, **kw: Any) -> headway.Worker:
        w = app.worker(**kw)
        w.start()
        self.workers.append(w)
        return w

    def close(self) -> None:
        for w in self.workers:
            try:
                w.stop(1.0)
            except Exception:  # noqa: BLE001 - teardown
                pass


@pytest.fixture(params=["memory", "redis", "celery"])
def apps(request: pytest.FixtureRequest) -> Iterator[Apps]:
    server: RedisServer | None = None
    if request.param in ("redis", "celery"):
        server = request.getfixturevalue("redis_server")
    a = Apps(request.param, server)
    yield a
    a.close()
