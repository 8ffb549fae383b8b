"""Custom task states (Celery's ``update_state``) through Python, on every
broker: a body records ``PROGRESS`` with a meta while it runs, a caller
reads it with ``handle.state()`` / ``handle.info()``, and the final state
overwrites it. On Celery's layout the stored value is Celery's own, so
Celery's ``AsyncResult`` reads a headway body's progress.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

import headway
from conftest import Apps, RedisServer

WAIT = 10.0


def _until(what: str, cond: Callable[[], bool]) -> None:
    end = time.monotonic() + WAIT
    while not cond():
        assert time.monotonic() < end, f"never: {what}"
        time.sleep(0.005)


def test_a_sync_body_reports_progress_then_succeeds(apps: Apps) -> None:
    app = apps.app()
    release = threading.Event()
    refused: list[str] = []

    @app.task(name="long", bind=True)
    def long(ctx: headway.Context, n: int) -> str:
        for bad in ("SUCCESS", "FAILURE", "REVOKED", ""):
            try:
                ctx.update_state(state=bad, meta={"x": 1})
            except ValueError as e:
                refused.append(str(e))
        ctx.update_state(state="PROGRESS", meta={"done": 1, "of": n})
        assert release.wait(WAIT)
        return f"done {n}"

    apps.start(app)
    h = long.delay(4)
    _until("PROGRESS", lambda: h.state() == "PROGRESS")
    assert h.info() == {"done": 1, "of": 4}
    assert not h.ready()
    assert len(refused) == 4, refused
    assert all("ready state" in r for r in refused[:3]), refused
    assert "SUCCESS" in refused[0] and "non-empty" in refused[3], refused
    release.set()
    assert h.get(timeout=WAIT) == "done 4"
    assert h.state() == "SUCCESS"
    assert h.info() == "done 4"
    assert h.ready() and h.successful()


def test_an_async_body_and_current_report_progress(apps: Apps) -> None:
    app = apps.app()
    gate: dict[str, Any] = {}

    @app.task(name="along")
    async def along() -> int:
        gate["loop"] = asyncio.get_running_loop()
        gate["go"] = asyncio.Event()
        # headway.current() is the run's context anywhere inside it.
        headway.current().update_state("STEP", [1, 2])
        await gate["go"].wait()
        return 7

    apps.start(app)
    h = along.delay()
    _until("STEP", lambda: h.state() == "STEP")
    assert h.info() == [1, 2]
    gate["loop"].call_soon_threadsafe(gate["go"].set)
    assert h.get(timeout=WAIT) == 7
    assert (h.state(), h.info()) == ("SUCCESS", 7)


def test_info_of_a_failure_pending_and_a_bad_meta(apps: Apps) -> None:
    app = apps.app()

    @app.task(name="boom")
    def boom() -> None:
        raise ValueError("bad input")

    @app.task(name="unjson", bind=True)
    def unjson(ctx: headway.Context) -> str:
        try:
            ctx.update_state("PROGRESS", {"s": {1, 2}})
        except TypeError as e:
            return str(e)
        return "stored"

    apps.start(app)
    assert app.handle("nothing-yet").state() == "PENDING"
    assert app.handle("nothing-yet").info() is None
    h = boom.delay()
    with pytest.raises(headway.TaskFailed):
        h.get(timeout=WAIT)
    info = h.info()
    assert (info["kind"], info["message"]) == ("ValueError", "bad input")
    text = unjson.delay().get(timeout=WAIT)
    assert "meta" in text and "set" in text, text


def test_a_direct_call_checks_the_name_and_stores_nothing(apps: Apps) -> None:
    app = apps.app()

    @app.task(name="direct", bind=True)
    def direct(ctx: headway.Context, state: str) -> str:
        ctx.update_state(state, {"n": 1})
        return "ran"

    assert direct("PROGRESS") == "ran"
    with pytest.raises(ValueError, match="ready state"):
        direct("SUCCESS")


def test_an_app_without_results_checks_the_name_and_stores_nothing(apps: Apps) -> None:
    app = apps.app(backend=False)
    said: list[str] = []

    @app.task(name="quiet", bind=True)
    def quiet(ctx: headway.Context) -> None:
        ctx.update_state("PROGRESS", {"a": 1})
        said.append("recorded")
        try:
            ctx.update_state("SUCCESS")
        except ValueError as e:
            said.append(str(e))

    apps.start(app)
    h = quiet.delay()
    _until("the run", lambda: len(said) == 2)
    assert said[0] == "recorded" and "ready state" in said[1], said
    with pytest.raises(headway.Missing):
        h.info()


def test_celerys_async_result_reads_a_headway_progress(redis_server: RedisServer) -> None:
    celery = pytest.importorskip("celery")
    db = 31
    assert redis_server.command("FLUSHDB", db=db) == b"+OK"
    url = redis_server.url.rsplit("/", 1)[0] + f"/{db}"
    app = headway.App(headway.RedisBroker.celery(url))
    release = threading.Event()

    @app.task(name="proj.progress", bind=True)
    def progress(ctx: headway.Context) -> str:
        ctx.update_state(state="PROGRESS", meta={"done": 2, "of": 5})
        assert release.wait(WAIT)
        return "finished"

    w = app.worker()
    w.start()
    capp = celery.Celery("client", broker=url, backend=url)
    try:
        h = progress.delay()
        _until("PROGRESS", lambda: h.state() == "PROGRESS")
        r = capp.AsyncResult(h.id)
        assert r.state == "PROGRESS"
        assert r.info == {"done": 2, "of": 5}
        assert not r.ready()
        # The key holds exactly what Celery's store_result writes.
        raw = capp.backend.client.get(f"celery-task-meta-{h.id}")
        assert b'"status": "PROGRESS", "result": {"done": 2, "of": 5}, "traceback": null' in raw, raw
        assert b'"date_done": null' in raw, raw
        release.set()
        assert h.get(timeout=WAIT) == "finished"
        assert r.get(timeout=WAIT) == "finished"
        assert (r.state, r.info) == ("SUCCESS", "finished")
        # And the other way: a state Celery's update_state stored reads in
        # headway.
        capp.backend.store_result("from-celery", {"step": 3}, "CRUNCHING")
        other = app.handle("from-celery")
        assert (other.state(), other.info()) == ("CRUNCHING", {"step": 3})
    finally:
        w.stop(5.0)
        capp.close()


def test_a_served_celery_tasks_update_state_is_headways(redis_server: RedisServer) -> None:
    """A Celery task served by headway (``headway worker -A``): its
    ``self.update_state`` is the run context's, with the core's name rule."""
    celery = pytest.importorskip("celery")
    from headway._from_celery import serve

    db = 32
    assert redis_server.command("FLUSHDB", db=db) == b"+OK"
    url = redis_server.url.rsplit("/", 1)[0] + f"/{db}"
    capp = celery.Celery("served", broker=url, backend=url)
    capp.conf.task_default_queue = "served"
    release = threading.Event()
    refused: list[str] = []

    @capp.task(bind=True, name="served.progress")  # type: ignore[untyped-decorator]
    def progress(self: Any, n: int) -> str:
        # Celery's own backend would store either of these.
        for state in ("SUCCESS", None):
            try:
                self.update_state(state=state, meta={"n": n})
            except ValueError as e:
                refused.append(str(e))
        self.update_state(state="PROGRESS", meta={"done": 1, "of": n})
        assert release.wait(WAIT)
        return "finished"

    app = serve(capp)
    w = app.worker(queues=["served"])  # what `headway worker -A` consumes
    w.start()
    try:
        h = app.send("served.progress", [3])
        _until("PROGRESS", lambda: h.state() == "PROGRESS")
        assert h.info() == {"done": 1, "of": 3}
        r = capp.AsyncResult(h.id)
        assert (r.state, r.info) == ("PROGRESS", {"done": 1, "of": 3})
        assert len(refused) == 2, refused
        assert "ready state" in refused[0] and "non-empty" in refused[1], refused
        release.set()
        assert h.get(timeout=WAIT) == "finished"
        assert r.get(timeout=WAIT) == "finished"
    finally:
        release.set()
        w.stop(5.0)
        capp.close()

