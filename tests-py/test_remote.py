"""`headway inspect` / `headway control` (Celery's inspect and control on
headway's own layouts): a worker process answers from what it holds, and
changes as told; the CLI asks from another process, as an operator does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from conftest import RedisServer

WAIT = 20.0

APP = """
import os, time
import headway
app = headway.App({url!r})

@app.task(name="r.hold")
def hold(path):
    # Runs until the test creates `path`.
    while not os.path.exists(path):
        time.sleep(0.02)
    return path

@app.task(name="r.add")
def add(a, b):
    return a + b
"""


def env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp), *sys.path])}


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "headway", *args, "-A", "remoteapp:app"],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
        env=env(tmp),
    )


def answer(tmp: Path, *args: str) -> Any:
    """The one node's answer to `headway <args> --json`."""
    out = cli(tmp, *args, "--json", "--timeout", "10")
    assert out.stdout, out.stderr
    got = json.loads(out.stdout)
    assert len(got) == 1, got
    return next(iter(got.values()))


@pytest.fixture
def worker(tmp_path: Path, redis_server: RedisServer) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    # A database of its own: no other test's process answers.
    url = redis_server.url.rsplit("/", 1)[0] + "/9"
    (tmp_path / "remoteapp.py").write_text(APP.format(url=url))
    proc = subprocess.Popen(
        [sys.executable, "-m", "headway", "worker", "-A", "remoteapp:app", "-c", "1", "--prefetch", "2"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env(tmp_path),
    )
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        assert line, "the worker ended"
        if line.strip() == "ready":
            break
    try:
        yield tmp_path, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
        proc.wait(timeout=30)


def send(tmp: Path, code: str) -> str:
    """Runs `code` with `app` imported in a fresh process; its stdout."""
    out = subprocess.run(
        [sys.executable, "-c", f"from remoteapp import *\n{code}"],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=60,
        env=env(tmp),
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def until(what: str, cond: Any) -> Any:
    end = time.monotonic() + WAIT
    while True:
        got = cond()
        if got:
            return got
        assert time.monotonic() < end, f"never: {what}"
        time.sleep(0.1)


def test_inspect_shows_what_a_worker_process_holds(worker: tuple[Path, subprocess.Popen[str]]) -> None:
    tmp, _ = worker
    assert answer(tmp, "inspect", "ping") == {"ok": "pong"}
    gate = tmp / "go"
    ids = send(tmp, f"print(hold.delay({str(gate)!r}).id, hold.delay({str(gate)!r}).id)").split()
    active, reserved = until(
        "one active, one reserved",
        lambda: (lambda a, r: (a, r) if len(a) == 1 and len(r) == 1 else None)(
            answer(tmp, "inspect", "active"), answer(tmp, "inspect", "reserved")
        ),
    )
    assert {active[0]["id"], reserved[0]["id"]} == set(ids)
    assert active[0]["name"] == "r.hold" and active[0]["args"] == [str(gate)]
    assert isinstance(active[0]["worker_pid"], int) and active[0]["time_start"] > 1e9
    assert reserved[0]["time_start"] is None
    assert answer(tmp, "inspect", "registered") == ["r.add", "r.hold"]
    stats = answer(tmp, "inspect", "stats")
    assert stats["pool"]["max-concurrency"] == 1
    assert answer(tmp, "inspect", "active-queues") == [{"name": "default"}]
    # Released: nothing held (the lists above were live).
    gate.touch()
    until(
        "nothing held",
        lambda: answer(tmp, "inspect", "active") == [] and answer(tmp, "inspect", "reserved") == [],
    )
    # The text form: a line per node.
    out = cli(tmp, "inspect", "ping", "--timeout", "10")
    assert out.returncode == 0 and "OK pong" in out.stdout and "1 node online." in out.stdout


def test_control_changes_a_worker_process_and_shuts_it_down(
    worker: tuple[Path, subprocess.Popen[str]],
) -> None:
    tmp, proc = worker
    assert answer(tmp, "control", "pool-grow", "2") == {"ok": "pool will grow"}
    assert answer(tmp, "inspect", "stats")["pool"]["max-concurrency"] == 3
    assert answer(tmp, "control", "pool-shrink") == {"ok": "pool will shrink"}
    assert answer(tmp, "inspect", "stats")["pool"]["max-concurrency"] == 2
    assert answer(tmp, "control", "rate-limit", "r.add", "10/m") == {
        "ok": "new rate limit set successfully"
    }
    # Refused by the node: exit 1, its words.
    out = cli(tmp, "control", "rate-limit", "r.nope", "1/s", "--timeout", "10")
    assert out.returncode == 1 and 'ERROR unknown task "r.nope"' in out.stdout
    # Refused before sending: a bad command names what was wrong.
    out = cli(tmp, "control", "rate-limit", "r.add", "fast")
    assert out.returncode != 0 and "Invalid rate limit string" in out.stderr
    out = cli(tmp, "inspect", "nope")
    assert out.returncode != 0 and "inspect nope: unknown; expected one of: ping" in out.stderr
    # Still running (the positive control), then shut down.
    assert proc.poll() is None
    assert answer(tmp, "control", "shutdown") == {"ok": "shutting down 1 worker(s)"}
    assert proc.wait(timeout=WAIT) == 0
    out = cli(tmp, "inspect", "ping", "--timeout", "0.5")
    assert out.returncode == 1 and "No nodes replied within time constraint" in out.stderr


def test_a_memory_app_has_no_other_process_to_ask(tmp_path: Path) -> None:
    (tmp_path / "remoteapp.py").write_text("import headway\napp = headway.App('memory://')\n")
    out = cli(tmp_path, "inspect", "ping", "--timeout", "0.2")
    assert out.returncode == 1 and "No nodes replied" in out.stderr
    # An in-process worker is asked directly (the positive control).
    import headway

    app = headway.App("memory://")
    w = app.worker(concurrency=1)
    w.start()
    try:
        # The command as the CLI's parser writes it.
        ping = json.dumps({"command": "inspect", "what": "ping", "words": [], "timeout": 1.0, "json": True})
        until("a node", lambda: app._native.remote(ping)[0] == 0)
        code, text, _ = app._native.remote(ping)
        assert code == 0
        assert list(json.loads(text).values()) == [{"ok": "pong"}]
    finally:
        w.stop(5.0)


def test_task_sent_events_go_out_when_asked_on_celerys_layout(redis_server: RedisServer) -> None:
    import base64
    import socket

    import headway

    url = redis_server.url.rsplit("/", 1)[0] + "/10"
    # A subscriber to Celery's task-sent channel, over raw RESP.
    sub = socket.create_connection(("127.0.0.1", redis_server.port), timeout=10)
    pattern = b"*celeryev/task.sent"
    sub.sendall(b"*2\r\n$10\r\nPSUBSCRIBE\r\n$%d\r\n%s\r\n" % (len(pattern), pattern))
    got = b""
    while b"psubscribe" not in got:
        got += sub.recv(65536)
    quiet = headway.App(headway.RedisBroker.celery(url))
    loud = headway.App(headway.RedisBroker.celery(url, task_send_sent_event=True))
    q = quiet.send_task("r.add", (1, 1), queue="nobody").id
    h = loud.send_task("r.add", (2, 2), queue="nobody").id
    def mark(run_id: str) -> bytes:
        # The event's body is base64 in kombu's envelope; it starts with
        # the run's uuid, so its first 45 bytes encode the same every time.
        return base64.b64encode(f'{{"uuid": "{run_id}"'.encode())[:60]

    seen = b""
    end = time.monotonic() + WAIT
    while mark(h) not in seen:
        assert time.monotonic() < end, seen
        seen += sub.recv(65536)
    sub.close()
    # The option off sends none (its send came first, on the same Redis).
    assert mark(q) not in seen
    with pytest.raises(TypeError):
        headway.RedisBroker.celery(url, task_send_sent_event="yes")  # type: ignore[arg-type]
