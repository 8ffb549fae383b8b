"""Celery's remote control and events, from a headway worker on RabbitMQ.

The asking side is Celery's own: its CLI (``celery -A proj inspect ...``,
``celery control ...``) in a subprocess, its ``app.control`` and its
``app.events.Receiver`` in this process. Each test gets a vhost of its own
(see test_amqp_celery.py, whose fixtures these share); without RabbitMQ
they are skipped, unless ``HEADWAY_REQUIRE_RABBITMQ=1`` (CI).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import threading
import time
from typing import Any

from test_amqp_celery import Mix, _ctl, _until, mix, vhost  # noqa: F401  (fixtures)


def _celery(m: Mix, *args: str, timeout: float = 5.0) -> subprocess.CompletedProcess[str]:
    """Celery's CLI on the project, as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "celery", "-A", m.name, *args, "--timeout", str(timeout), "--json"],
        cwd=m.tmp, env=m.env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _replies(out: subprocess.CompletedProcess[str]) -> Any:
    assert out.returncode == 0, out.stderr + out.stdout
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_celerys_inspect_and_control_reach_a_headway_worker_on_rabbitmq(mix: Mix) -> None:
    # No worker yet: the producer is no node, and Celery's CLI says so.
    none = _celery(mix, "inspect", "ping", timeout=1.0)
    assert none.returncode != 0 and "No nodes replied" in none.stderr + none.stdout
    go = threading.Event()

    @mix.app.task(name="mix.hw_hold", queue="hw")
    def hw_hold(i: int) -> int:
        go.wait(60)
        return i

    @mix.app.task(name="mix.hw_mul", queue="hw")
    def hw_mul(a: int, b: int = 1) -> int:
        return a * b

    w = mix.app.worker(["hw"], concurrency=2)
    w.start()
    try:
        pong = _replies(_celery(mix, "inspect", "ping"))
        assert list(pong.values()) == [{"ok": "pong"}], pong
        (node,) = pong
        assert node.startswith("headway@"), node
        held = mix.celery.app.send_task("mix.hw_hold", (7,))
        _until(
            lambda: [r["id"] for r in _replies(_celery(mix, "inspect", "active"))[node]] == [held.id],
            "the run to show in `celery inspect active`",
        )
        run = _replies(_celery(mix, "inspect", "active"))[node][0]
        assert run["name"] == "mix.hw_hold" and run["args"] == [7] and run["hostname"] == node
        assert run["delivery_info"]["routing_key"] == "hw" and run["time_start"] > 0
        stats = _replies(_celery(mix, "inspect", "stats"))[node]
        assert stats["pool"]["max-concurrency"] == 2
        assert stats["broker"]["transport"] == "amqp" and "guest:***@" in stats["broker"]["hostname"]
        registered = _replies(_celery(mix, "inspect", "registered"))[node]
        assert {"mix.hw_hold", "mix.hw_mul"} <= set(registered), registered
        queues = _replies(_celery(mix, "inspect", "active_queues"))[node]
        assert [q["name"] for q in queues] == ["hw"]
        # A control: the rate is set on the worker, and an unknown task is
        # refused by name (beside the accepted one).
        ok = _replies(_celery(mix, "control", "rate_limit", "mix.hw_mul", "100/s"))
        assert ok == [{node: {"ok": "new rate limit set successfully"}}], ok
        bad = _replies(_celery(mix, "control", "rate_limit", "mix.nope", "1/s"))
        assert "error" in bad[0][node] and "mix.nope" in bad[0][node]["error"], bad
        assert mix.celery.app.send_task("mix.hw_mul", (6, 7)).get(timeout=30) == 42
        # app.control from Celery's library reaches it too.
        assert mix.celery.app.control.ping(timeout=5) == [{node: {"ok": "pong"}}]
        go.set()
        assert held.get(timeout=30) == 7
        _until(lambda: _replies(_celery(mix, "inspect", "active"))[node] == [], "the run to end")
    finally:
        go.set()
        w.stop()


SERVED = """
from {name} import app
app.conf.worker_send_task_events = {events}
"""


def test_a_celery_event_receiver_hears_a_headway_worker_on_rabbitmq(mix: Mix) -> None:
    app = mix.celery.app
    seen: list[dict[str, Any]] = []
    lock = threading.Lock()

    def on_event(e: dict[str, Any]) -> None:
        with lock:
            seen.append(e)

    def kinds(pred: Any = lambda e: True) -> list[str]:
        with lock:
            return [e["type"] for e in seen if pred(e)]

    conn = app.connection()
    recv = app.events.Receiver(conn, handlers={"*": on_event})
    t = threading.Thread(target=lambda: recv.capture(limit=None, timeout=None, wakeup=False), daemon=True)
    t.start()
    try:
        _until(lambda: "celeryev." in _ctl("list_queues", "-p", mix.env["MIX_AMQP"].rsplit("/", 1)[1], "name"),
               "the receiver's queue")  # fmt: skip
        # A headway worker serving the Celery project, events off (as in
        # Celery without -E).
        (mix.tmp / "served_quiet.py").write_text(textwrap.dedent(SERVED.format(name=mix.name, events=False)))
        out = open(mix.tmp / "served.log", "w")
        served = subprocess.Popen(
            [sys.executable, "-m", "headway", "worker", "-A", "served_quiet:app", "-Q", "hw", "-c", "2"],
            cwd=mix.tmp, env=mix.env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        mix.procs.append(served)
        quiet = mix.celery.hw_slow.delay(1)
        assert quiet.get(timeout=60) == "celery ran 1"
        # A heartbeat asked for goes out with events off too: it comes
        # after anything the run made, on the same channel, so once it is
        # here the quiet run's events would have been too.
        node = next(iter(app.control.ping(timeout=5)[0]))
        assert node.startswith("headway@"), node
        app.control.heartbeat()
        _until(lambda: "worker-heartbeat" in kinds(lambda e: e["hostname"] == node), "the asked heartbeat")
        assert kinds(lambda e: e.get("uuid") == quiet.id) == []
        # Flower's way of turning events on: a broadcast without a reply.
        app.control.enable_events()
        _until(lambda: "worker-online" in kinds(lambda e: e["hostname"] == node), "worker-online")
        loud = mix.celery.hw_slow.delay(2)
        assert loud.get(timeout=60) == "celery ran 2"
        want = ["task-received", "task-started", "task-succeeded"]
        _until(lambda: kinds(lambda e: e.get("uuid") == loud.id) == want, f"{want} for the run")
        with lock:
            ev = {e["type"]: e for e in seen if e.get("uuid") == loud.id}
        assert ev["task-received"]["name"] == "mix.hw_slow" and ev["task-received"]["args"] == "[2]"
        assert "celery ran 2" in ev["task-succeeded"]["result"] and ev["task-succeeded"]["runtime"] >= 0
        assert all(e["hostname"] == node and e["clock"] > 0 for e in ev.values())
        # The worker's own events: online, then heartbeats with its load.
        with lock:
            beats = [e for e in seen if e["type"] == "worker-heartbeat" and e["hostname"] == node]
        assert beats and beats[-1]["freq"] == 2.0 and beats[-1]["sw_ident"] == "headway"
        # `-E` turns them on from the start.
        served.terminate()
        served.wait(30)
        with lock:
            seen.clear()
        (mix.tmp / "served_loud.py").write_text(textwrap.dedent(SERVED.format(name=mix.name, events=False)))
        loud_worker = subprocess.Popen(
            [sys.executable, "-m", "headway", "worker", "-A", "served_loud:app", "-Q", "hw", "-c", "2", "-E"],
            cwd=mix.tmp, env=mix.env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
        mix.procs.append(loud_worker)
        _until(lambda: "worker-online" in kinds(), "worker-online from a worker started with -E", 60)
        third = mix.celery.hw_slow.delay(3)
        assert third.get(timeout=60) == "celery ran 3"
        _until(lambda: kinds(lambda e: e.get("uuid") == third.id) == want, f"{want} with -E")
        loud_worker.terminate()
        loud_worker.wait(30)
        _until(lambda: "worker-offline" in kinds(), "worker-offline when the worker stops")
    finally:
        recv.should_stop = True
        t.join(10)
        conn.release()
