"""``revoke(terminate=True)`` stops a run in whichever process runs it: the
worker is a child process (a real separate one) on Redis — headway's own
layout and Celery's — and this process, which only sends and revokes,
terminates one of its runs. A run nobody terminated is the positive
control: it finishes with its value. And the ``signal`` argument: a name or
a number, read by the core; a bad one raises ``ValueError`` naming it.

Each child has a time limit; a child that hangs fails the test instead of
hanging the suite."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import headway

from conftest import RedisServer

LIMIT = 20.0
#: How long a terminate may take to stop a run in another process.
STOPS_WITHIN = 2.0

WORKER = """
import asyncio, os, sys, time, headway

layout, url, prefix, queue, go, kind = sys.argv[1:7]
if layout == "redis":
    broker = headway.RedisBroker(url, prefix=prefix)
else:
    broker = headway.RedisBroker.celery(url)
app = headway.App(broker)

if kind == "async":
    @app.task(name="slow", queue=queue)
    async def slow(i):
        print("started", i, flush=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(go) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return f"done {i}"
else:
    @app.task(name="slow", queue=queue)
    def slow(i):
        print("started", i, flush=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.01)
        return f"done {i}"

w = app.worker(queues=[queue], concurrency=2)
print("ready", flush=True)
try:
    w.run()
except KeyboardInterrupt:
    pass
"""


def _broker(layout: str, url: str, prefix: str) -> headway.RedisBroker:
    if layout == "redis":
        return headway.RedisBroker(url, prefix=prefix)
    return headway.RedisBroker.celery(url)


def _until(what: str, cond, limit: float) -> float:
    """Polls ``cond`` until true, answering how long it took; fails naming
    ``what`` after ``limit`` seconds."""
    start = time.monotonic()
    while not cond():
        assert time.monotonic() - start < limit, f"never within {limit} s: {what}"
        time.sleep(0.01)
    return time.monotonic() - start


class Child:
    """The worker process; its stdout read line by line."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        self.lines: list[str] = []

    def until(self, text: str, limit: float = LIMIT) -> None:
        if any(text in line for line in self.lines):
            return
        deadline = time.monotonic() + limit
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise AssertionError(f"child ended before {text!r}: {self.lines} {err}")
            self.lines.append(line.rstrip("\n"))
            if text in line:
                return
        raise AssertionError(f"no {text!r} within {limit} s: {self.lines}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


@pytest.mark.parametrize("kind", ["async", "sync"])
@pytest.mark.parametrize("layout", ["redis", "celery"])
def test_a_terminate_stops_the_run_in_the_worker_process(
    tmp_path: Path, redis_server: RedisServer, layout: str, kind: str
) -> None:
    prefix = f"term-{uuid.uuid4().hex[:8]}:"
    queue = f"q-{uuid.uuid4().hex[:8]}"
    go = tmp_path / "go"
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    child = Child([str(script), layout, redis_server.url, prefix, queue, str(go), kind])
    try:
        child.until("ready")
        app = headway.App(_broker(layout, redis_server.url, prefix))
        doomed = app.send_task("slow", (1,), queue=queue)
        spared = app.send_task("slow", (2,), queue=queue)
        child.until("started 1")
        child.until("started 2")
        doomed.revoke(terminate=True)
        took = _until("the terminated run is REVOKED", lambda: doomed.state() == "REVOKED", STOPS_WITHIN)
        assert took < STOPS_WITHIN
        with pytest.raises(headway.Revoked):
            doomed.get(timeout=1)
        # Positive control: the run nobody terminated is still going, and
        # finishes with its value once let go.
        assert spared.state() not in ("SUCCESS", "FAILURE", "REVOKED")
        go.touch()
        assert spared.get(timeout=10) == "done 2"
        assert spared.state() == "SUCCESS"
    finally:
        go.touch()
        child.stop()


def test_app_revoke_terminates_by_id_from_another_process(
    tmp_path: Path, redis_server: RedisServer
) -> None:
    """``app.revoke(id, terminate=True, signal=...)``: by id alone, as a
    process that did not send the run would."""
    prefix = f"term-{uuid.uuid4().hex[:8]}:"
    queue = f"q-{uuid.uuid4().hex[:8]}"
    go = tmp_path / "go"
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    child = Child([str(script), "redis", redis_server.url, prefix, queue, str(go), "async"])
    try:
        child.until("ready")
        sender = headway.App(_broker("redis", redis_server.url, prefix))
        run_id = sender.send_task("slow", (1,), queue=queue).id
        child.until("started 1")
        other = headway.App(_broker("redis", redis_server.url, prefix))
        other.revoke(run_id, terminate=True, signal=signal.SIGKILL)
        _until("REVOKED", lambda: other.handle(run_id).state() == "REVOKED", STOPS_WITHIN)
    finally:
        go.touch()
        child.stop()


def test_a_bad_signal_raises_naming_it() -> None:
    app = headway.App()
    h = app.handle("some-id")
    for bad in ("NOPE", "SIG", "", "0", 0, 65, -9):
        with pytest.raises(ValueError, match="`signal`"):
            h.revoke(terminate=True, signal=bad)
        with pytest.raises(ValueError, match="`signal`"):
            app.revoke(["some-id"], terminate=True, signal=bad)
    with pytest.raises(ValueError, match="`signal`"):
        h.revoke(terminate=True, signal=2**80)
    for wrong in (True, 1.5, b"TERM", ["TERM"]):
        with pytest.raises(TypeError, match="`signal`"):
            h.revoke(terminate=True, signal=wrong)
    # Positive control: names in any case, with or without SIG, numbers and
    # the signal module's values are taken.
    for good in ("SIGTERM", "term", "KILL", "sigusr1", "HUP", 9, signal.SIGINT, "15"):
        h.revoke(terminate=True, signal=good)
    h.revoke()
