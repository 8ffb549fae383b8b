"""The shared limits' awaitables on the running asyncio loop's own socket:
that they ride it (one connection, where the shared link would make a
second), that a script Redis forgot is loaded again, that a socket lost
under a waiting call still answers (over the shared link, once Redis is
back), that an awaiter that gave up does not break the calls after it, that
each loop has its own socket, and that a refused handshake is the shared
link's refusal."""

from __future__ import annotations

import asyncio
import gc
import warnings
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import headway
from conftest import RedisServer, _free_port


def _key() -> str:
    return f"w-{uuid.uuid4().hex}"


class _Redis(RedisServer):
    """A redis-server of this test's own."""

    def __init__(self, tmp: Path, port: int | None = None, *extra: str) -> None:
        super().__init__(tmp, port, extra)

    def clients(self) -> int:
        """Clients connected, less the one asking."""
        out = subprocess.run(
            ["redis-cli", "-p", str(self.port), "CLIENT", "LIST"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return sum(1 for line in out.splitlines() if "id=" in line) - 1


@pytest.fixture
def server(tmp_path: Path) -> Iterator[_Redis]:
    s = _Redis(tmp_path)
    yield s
    s.stop()


async def _until(cond: object, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


@pytest.mark.asyncio
async def test_awaitables_ride_one_socket_and_reload_a_forgotten_script(server: _Redis) -> None:
    url = f"redis://127.0.0.1:{server.port}"
    b = headway.SharedBucket(url, _key(), 1000, burst=5)
    w = headway.SharedWindow(url, _key(), 3, 60.0)
    g = headway.SharedGate(url, _key(), 1)
    got = await asyncio.gather(*(b.atake() for _ in range(8)))
    assert sum(got) == 5, "the burst, and no more"
    assert [await w.atake(), await w.atake()] == [True, True]
    p = await g.atake()
    assert isinstance(p, str)
    assert await g.atake() is None
    assert await g.arelease(p) is True
    assert await g.arelease(p) is False
    assert server.clients() == 1, "every awaitable on one connection"
    # Redis forgets its scripts: the next calls load them (EVAL) and answer.
    assert server.command("SCRIPT", "FLUSH") == b"+OK"
    assert await asyncio.gather(w.atake(), w.atake()) == [True, False]
    # A refusal of the core's (a bad argument) is raised before any I/O.
    with pytest.raises(ValueError, match="`n`"):
        await b.atake(-1)
    # The control: `wait()` takes the shared link, which is a second
    # connection — so the one connection above was the loop's socket.
    await b.wait(1)
    assert server.clients() == 2


@pytest.mark.asyncio
async def test_a_socket_lost_under_a_waiting_call_answers_once_redis_is_back(
    tmp_path: Path,
) -> None:
    (tmp_path / "a").mkdir()
    s = _Redis(tmp_path / "a")
    port = s.port
    url = f"redis://127.0.0.1:{port}"
    b = headway.SharedBucket(url, _key(), 1, burst=1)
    try:
        assert await b.atake() is True
        # Writes wait: the next take is in flight when Redis dies.
        assert s.command("CLIENT", "PAUSE", "10000", "WRITE") == b"+OK"
        pending = asyncio.ensure_future(b.atake())
        await asyncio.sleep(0.1)
        assert not pending.done()
        s.stop()
        (tmp_path / "b").mkdir()
        s = _Redis(tmp_path / "b", port)
        # A new Redis: a full bucket, so the call made again takes its token.
        assert await asyncio.wait_for(pending, 10) is True
        # And the calls after it are answered too (the socket made anew once
        # its backoff passed).
        assert await b.atake() is False
        await _until(lambda: s.clients() >= 1)
    finally:
        s.stop()


@pytest.mark.asyncio
async def test_an_awaiter_that_gave_up_leaves_the_socket_working(server: _Redis) -> None:
    url = f"redis://127.0.0.1:{server.port}"
    b = headway.SharedBucket(url, _key(), 0.001, burst=3)
    assert await b.atake() is True
    assert server.command("CLIENT", "PAUSE", "300", "WRITE") == b"+OK"
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(b.atake(), 0.05)
    # Its reply comes after it was given up (its token taken all the same);
    # the calls after it are answered, in order, on the same connection.
    assert await asyncio.gather(b.atake(), b.atake()) == [True, False]
    assert server.clients() == 1


def test_each_loop_has_a_socket_of_its_own(server: _Redis) -> None:
    url = f"redis://127.0.0.1:{server.port}"
    b = headway.SharedBucket(url, _key(), 1000, burst=100)
    held = threading.Barrier(3)
    got: list[bool] = []

    def run() -> None:
        async def main() -> None:
            got.append(await b.atake())
            held.wait(10)  # both loops' sockets open at once
            held.wait(10)

        asyncio.run(main())

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    held.wait(10)
    assert server.clients() == 2
    held.wait(10)
    for t in threads:
        t.join(10)
    assert got == [True, True]


@pytest.mark.asyncio
async def test_a_refused_handshake_is_the_shared_links_refusal(tmp_path: Path) -> None:
    s = _Redis(tmp_path, None, "--requirepass", "pw")
    try:
        wrong = headway.SharedBucket(f"redis://:nope@127.0.0.1:{s.port}", _key(), 1)
        with pytest.raises(headway.BrokerError, match="(?i)WRONGPASS|invalid|password") as e:
            await wrong.atake()
        assert "nope" not in str(e.value)
        # The same refusal from the blocking call, which never uses the
        # loop's socket.
        with pytest.raises(headway.BrokerError, match="(?i)WRONGPASS|invalid|password"):
            wrong.take()
        right = headway.SharedBucket(f"redis://:pw@127.0.0.1:{s.port}/3", _key(), 1)
        assert await right.atake() is True
        assert await right.atake() is False
    finally:
        s.stop()


@pytest.mark.asyncio
async def test_no_redis_refuses_as_the_shared_link_does(server: _Redis) -> None:
    port = _free_port()  # nothing listens there
    b = headway.SharedBucket(f"redis://127.0.0.1:{port}", _key(), 1)
    start = time.monotonic()
    with pytest.raises(headway.BrokerError, match=str(port)):
        await b.atake()
    # Refused after the shared link's patience (2 s), not hung.
    assert time.monotonic() - start < 10
    # The control: the same call where Redis listens is answered.
    ok = headway.SharedBucket(f"redis://127.0.0.1:{server.port}", _key(), 1)
    assert await ok.atake() is True


def test_a_finished_loop_does_not_keep_its_socket(server: _Redis) -> None:
    url = f"redis://127.0.0.1:{server.port}"
    b = headway.SharedBucket(url, _key(), 1000, burst=100)
    seen: list[int] = []

    async def one() -> asyncio.AbstractEventLoop:
        assert await b.atake() is True
        # The control: while the loop runs, its socket is there to count.
        seen.append(server.clients())
        return asyncio.get_running_loop()

    with warnings.catch_warnings():
        # A socket left for the collector would warn: make that fail.
        warnings.simplefilter("error", ResourceWarning)
        kept = [asyncio.run(one()) for _ in range(10)]
        assert seen == [1] * 10
        # Closed as each loop ended, even with the loops still referenced.
        assert server.clients() == 0
        del kept
        gc.collect()
