"""Sync bodies that never return. A sync body cannot be interrupted: past its
``timeout`` the run fails and the body keeps its runner thread. The core has
that thread replaced — up to one stuck thread per runner — so the worker
keeps its concurrency; with the cap reached and every thread stuck it stops
claiming and reports itself unhealthy (``Worker.health``, the admin's
``/health`` and overview), until a stuck body returns.

Every wait is a poll with a deadline; the bodies wait on an event the test
sets at its end."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import headway
from headway import TaskFailed
from headway.admin import asgi

from conftest import Apps, RedisServer
from test_admin import T, bearer, call

WAIT = 10.0


def until(what: Callable[[], Any], wait: float = WAIT, why: str = "") -> Any:
    """Polls ``what`` until it answers something true; fails past ``wait``."""
    deadline = time.monotonic() + wait
    while True:
        got = what()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting: {why or what}"
        time.sleep(0.01)


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """What the stuck bodies wait on: set at the end of the test, whatever
    happened, so no thread stays stuck past it."""
    ev = threading.Event()
    yield ev
    ev.set()


def test_a_third_task_runs_while_two_bodies_hang_past_their_timeout(
    apps: Apps, release: threading.Event
) -> None:
    app = apps.app(clock=None)
    entered = threading.Semaphore(0)

    @app.task(name="hang", timeout=1)
    def hang() -> None:
        entered.release()
        release.wait()

    @app.task(name="fine")
    def fine(x: int) -> int:
        return x * 2

    w = apps.start(app, concurrency=2)
    h1, h2 = hang.delay(), hang.delay()
    for _ in range(2):
        assert entered.acquire(timeout=WAIT), "the hanging bodies never started"
    t0 = time.monotonic()
    h3 = fine.delay(21)
    # Both runners are stuck; at their timeout (1 s) they are replaced and
    # the third task runs on a new thread.
    assert h3.get(timeout=3.0) == 42
    assert time.monotonic() - t0 < 3.0
    for h in (h1, h2):
        with pytest.raises(TaskFailed) as e:
            h.get(timeout=WAIT)
        assert e.value.type == "TimeoutError"
    # Each stuck runner's replacement thread starts on its own; wait for
    # the second rather than read the count the moment the runs failed.
    hl = until(lambda: (h := w.health)["threads"] == 4 and h, why=str(w.health))
    assert hl["healthy"] is True
    assert (hl["runners"], hl["stuck"], hl["threads"], hl["stuck_cap"]) == (2, 2, 4, 2)
    # Released, the stuck bodies return: their threads are one too many and
    # end; the worker is back to its two runners, and still runs tasks.
    release.set()
    until(lambda: w.health["stuck"] == 0 and w.health["threads"] == 2, why=str(w.health))
    assert fine.delay(1).get(timeout=WAIT) == 2


@pytest.fixture(params=["memory", "redis"])
def two(request: pytest.FixtureRequest) -> Iterator[Apps]:
    server: RedisServer | None = None
    if request.param == "redis":
        server = request.getfixturevalue("redis_server")
    a = Apps(request.param, server)
    yield a
    a.close()


def test_with_every_thread_stuck_the_worker_is_unhealthy_and_claims_nothing(
    two: Apps, release: threading.Event
) -> None:
    app = two.app(clock=None)
    entered = threading.Semaphore(0)
    ran: list[int] = []

    @app.task(name="hang", timeout=1)
    def hang() -> None:
        entered.release()
        release.wait()

    @app.task(name="fine")
    def fine(x: int) -> int:
        ran.append(x)
        return x

    admin = asgi(app, token=T)

    def get(path: str) -> Any:
        return asyncio.run(call(admin, "GET", path, bearer()))

    # Positive control: healthy, and /health says so.
    w = two.start(app, concurrency=2)
    assert fine.delay(0).get(timeout=WAIT) == 0
    assert w.healthy
    r = get("/health")
    assert (r.status, r.json()) == (200, {"ok": True})

    # Two stuck, replaced by two (the cap: one per runner), those two stuck:
    # every thread is stuck and none may start.
    hangs = [hang.delay() for _ in range(4)]
    for _ in range(4):
        assert entered.acquire(timeout=WAIT), "the hanging bodies never started"
    until(lambda: not w.healthy, why=str(w.health))
    hl = w.health
    assert (hl["runners"], hl["threads"], hl["stuck"], hl["stuck_cap"]) == (2, 4, 4, 2)
    assert "every runner thread is stuck" in hl["why"]
    for h in hangs:
        with pytest.raises(TaskFailed, match="TimeoutError"):
            h.get(timeout=WAIT)

    r = get("/health")
    assert r.status == 503
    body = r.json()
    assert body["ok"] is False
    assert [x["name"] for x in body["workers"]] == [w.name]
    assert body["workers"][0]["stuck"] == 4
    mine = [x for x in get("/api/overview").json()["workers"] if x["name"] == w.name]
    assert len(mine) == 1 and mine[0]["healthy"] is False

    # Not claimed: it stays ready on its queue and does not run.
    h = fine.delay(1)

    def ready() -> int:
        qs = get("/api/overview").json()["queues"]
        return sum(q["ready"] for q in qs if q["name"] == "default")

    # (On Redis a blocking claim cut short when the worker turned unhealthy
    # may still move it for an instant; what it moved is handed back.)
    until(lambda: ready() == 1, why="the message never showed ready")
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        assert ready() == 1 and h.state() == "PENDING" and ran == [0], (
            str(get("/api/overview").json()["queues"]),
            w.health,
        )
        time.sleep(0.05)

    # Positive control: a stuck body returns, the worker is healthy again,
    # claims and runs it.
    release.set()
    assert h.get(timeout=WAIT) == 1
    until(lambda: w.healthy, why=str(w.health))
    assert get("/health").status == 200
    until(lambda: w.health["threads"] == 2, why=str(w.health))
