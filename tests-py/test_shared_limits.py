"""SharedBucket, SharedWindow and SharedGate on a redis-server of the test
session's own: their answers, that two handles on one key share one limit
(and two keys do not), leases that end, and the errors on bad arguments —
each refusal beside the same call made valid. The exactness against the
in-process limits is core/tests/limit_props.rs's; the limit shared with a
Node process is test_shared_limits_cross.py's."""

from __future__ import annotations

import asyncio
import math
import socket
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

import headway
from conftest import RedisServer


def _key() -> str:
    return f"t-{uuid.uuid4().hex}"


def _until(cond: Callable[[], object], timeout: float = 5.0) -> None:
    """Waits for ``cond()`` to hold, looking every 10 ms."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


def test_bucket_takes_refills_and_shares(redis_server: RedisServer) -> None:
    key = _key()
    b = headway.SharedBucket(redis_server.url, key, 10, burst=2)
    assert (b.rate, b.burst, b.key) == (10.0, 2.0, f"headway:limit:bucket:{key}")
    assert b.take() is True
    # A second handle on the same key (another process, in effect) sees the
    # same bucket: one token left, then none.
    other = headway.SharedBucket(redis_server.url, key, 10, burst=2)
    assert other.take() is True
    assert b.take() is False
    wait = b.next()
    assert 0 < wait <= 0.1
    assert b.tokens() < 1
    # A bucket under another key is full: the limit is per key.
    assert headway.SharedBucket(redis_server.url, _key(), 10, burst=2).take(2) is True
    assert b.next(3) == math.inf
    _until(lambda: b.take())
    assert "SharedBucket(" in repr(b)


def test_bucket_defaults_as_in_process(redis_server: RedisServer) -> None:
    for rate, burst in [(100, None), (0.5, None), (5, 0.2)]:
        shared = headway.SharedBucket(redis_server.url, _key(), rate, burst=burst)
        assert shared.burst == headway.Bucket(rate, burst).burst


@pytest.mark.asyncio
async def test_bucket_async(redis_server: RedisServer) -> None:
    b = headway.SharedBucket(redis_server.url, _key(), 20, burst=1)
    assert await b.atake() is True
    assert await b.atake() is False
    start = time.monotonic()
    await b.wait()
    assert time.monotonic() - start < 1.0
    with pytest.raises(ValueError, match="`n`"):
        await b.wait(5)
    # Many at once on one loop: exactly the burst passes.
    c = headway.SharedBucket(redis_server.url, _key(), 0.001, burst=3)
    got = await asyncio.gather(*(c.atake() for _ in range(10)))
    assert sum(got) == 3


def test_take_releases_the_gil(redis_server: RedisServer) -> None:
    # Threads taking at once all finish, and exactly the burst passes.
    b = headway.SharedBucket(redis_server.url, _key(), 0.001, burst=5)
    got: list[bool] = []
    lock = threading.Lock()

    def run() -> None:
        for _ in range(10):
            r = b.take()
            with lock:
                got.append(r)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(got) == 40
    assert sum(got) == 5


def test_a_take_survives_its_threads_connection_being_killed(tmp_path: Path) -> None:
    # A blocking take() makes its round trip over a connection its thread
    # keeps; killed under it, the next take falls back to the shared
    # connection (which reconnects) and answers, and the one after dials the
    # thread's own again.
    server = RedisServer(tmp_path)
    try:
        b = headway.SharedBucket(server.url, _key(), 1000, burst=1000)
        assert b.take() is True
        killed = server.command("CLIENT", "KILL", "TYPE", "normal")
        assert killed.startswith(b":") and int(killed[1:]) >= 1, killed
        assert b.take() is True
        assert b.take() is True
        assert 996 <= b.tokens() <= 1000
    finally:
        server.stop()


def test_window_counts_exactly(redis_server: RedisServer) -> None:
    w = headway.SharedWindow(redis_server.url, _key(), 2, timedelta(milliseconds=300))
    assert (w.limit, w.per) == (2, 0.3)
    assert w.take() and w.take()
    assert not w.take()
    assert w.left() == 0
    assert 0 < w.next() <= 0.3
    _until(lambda: w.left() == 2)
    assert w.take()
    zero = headway.SharedWindow(redis_server.url, _key(), 0, 1.0)
    assert zero.take() is False
    assert zero.next() == math.inf


@pytest.mark.asyncio
async def test_window_async(redis_server: RedisServer) -> None:
    w = headway.SharedWindow(redis_server.url, _key(), 1, 0.05)
    assert await w.atake() is True
    assert await w.atake() is False
    await w.wait()
    with pytest.raises(ValueError, match="`limit`"):
        await headway.SharedWindow(redis_server.url, _key(), 0, 1.0).wait()


def test_gate_permits_and_leases(redis_server: RedisServer) -> None:
    key = _key()
    g = headway.SharedGate(redis_server.url, key, 1, lease=0.2)
    assert (g.limit, g.lease) == (1, 0.2)
    p = g.take()
    assert isinstance(p, str)
    other = headway.SharedGate(redis_server.url, key, 1, lease=0.2)
    assert other.take() is None
    assert g.held() == 1
    assert g.release(p) is True
    # Released twice gives back nothing the second time.
    assert g.release(p) is False
    q = other.take()
    assert q is not None
    assert g.renew(q) is True
    # Never released: the lease ends and the room comes back by itself.
    _until(lambda: g.held() == 0)
    assert g.renew(q) is False
    assert g.release(q) is False
    assert g.take() is not None
    assert headway.SharedGate(redis_server.url, _key(), 3).lease == 30.0


@pytest.mark.asyncio
async def test_gate_async(redis_server: RedisServer) -> None:
    g = headway.SharedGate(redis_server.url, _key(), 2)
    got = await asyncio.gather(*(g.atake() for _ in range(5)))
    permits = [p for p in got if p is not None]
    assert len(permits) == 2
    assert await g.arelease(permits[0]) is True
    assert await g.arelease(permits[0]) is False
    assert g.held() == 1


def test_bad_arguments(redis_server: RedisServer) -> None:
    url = redis_server.url
    cases: list[tuple[Callable[[], object], type[Exception], str]] = [
        (lambda: headway.SharedBucket(url, "k", -1), ValueError, "`rate`"),
        (lambda: headway.SharedBucket(url, "k", math.nan), ValueError, "`rate`"),
        (lambda: headway.SharedBucket(url, "k", 1, burst=-2), ValueError, "`burst`"),
        (lambda: headway.SharedBucket(url, "k", "x"), TypeError, "`rate`"),  # type: ignore[arg-type]
        (lambda: headway.SharedBucket(url, "", 1), ValueError, "`key`"),
        (lambda: headway.SharedBucket("http://h", "k", 1), ValueError, "`url`"),
        (lambda: headway.SharedWindow(url, "k", -1, 1.0), ValueError, "`limit`"),
        (lambda: headway.SharedWindow(url, "k", 1, 0), ValueError, "`per`"),
        (lambda: headway.SharedWindow(url, "k", 1.5, 1.0), TypeError, "`limit`"),  # type: ignore[arg-type]
        (lambda: headway.SharedGate(url, "k", -1), ValueError, "`n`"),
        (lambda: headway.SharedGate(url, "k", 1, lease=0), ValueError, "`lease`"),
        (lambda: headway.SharedBucket(url, "k", 1).take(-1), ValueError, "`n`"),
        (lambda: headway.SharedBucket(url, "k", 1).take(math.inf), ValueError, "`n`"),
    ]
    for make, err, arg in cases:
        with pytest.raises(err, match=arg):
            make()
    # The same texts as the in-process limits.
    with pytest.raises(ValueError) as shared:
        headway.SharedBucket(url, "k", -1)
    with pytest.raises(ValueError) as local:
        headway.Bucket(-1)
    assert str(shared.value) == str(local.value)
    # The positive control: the same calls, valid, are accepted.
    assert headway.SharedBucket(url, "k", 1, burst=2).take(0) is True
    assert headway.SharedWindow(url, "k", 0, 1.0).limit == 0
    assert headway.SharedGate(url, "k", 0, lease=1).take() is None


def test_unreachable_redis_raises_connection_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    b = headway.SharedBucket(f"redis://127.0.0.1:{port}", "k", 1)
    with pytest.raises(headway.BrokerConnectionError):
        b.take()
