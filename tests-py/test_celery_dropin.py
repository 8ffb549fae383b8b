"""``headway.celery``: code written against Celery's API, with its imports
swapped, runs on headway — on the memory broker and on Celery's Redis
layout (where a real Celery client reads what it stores)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from typing import Any
from pathlib import Path

import pytest

from conftest import RedisServer

# A Celery project's tasks module, written only against Celery's API; the
# test swaps `celery` for `headway.celery` and nothing else.
TASKS = '''
import os
from celery import Celery, shared_task, chain, group, chord, signature
from celery.exceptions import Reject, Ignore, MaxRetriesExceededError

app = Celery("proj", broker=os.environ["DROPIN_BROKER"], backend=os.environ.get("DROPIN_BACKEND"))
app.conf.task_routes = {"proj.routed.*": {"queue": "routed"}}

FLAKY = {}

@app.task(name="proj.add")
def add(x, y):
    return x + y

@app.task(name="proj.tsum")
def tsum(xs):
    return sum(xs)

@app.task(name="proj.who", bind=True)
def who(self, tag):
    r = self.request
    return {"id": r.id, "task": r.task, "retries": r.retries, "args": r.args,
            "routing_key": r.delivery_info["routing_key"], "tag": tag, "root": r.root_id}

@app.task(name="proj.bound_retry", bind=True, max_retries=3, default_retry_delay=0)
def bound_retry(self, key):
    FLAKY[key] = FLAKY.get(key, 0) + 1
    if FLAKY[key] < 3:
        raise self.retry(exc=IOError("not yet"), countdown=0)
    return ["done", self.request.retries]

@app.task(name="proj.give_up", bind=True, max_retries=1)
def give_up(self):
    raise self.retry(exc=KeyError("gone"), countdown=0)

@app.task(name="proj.auto", autoretry_for=(IOError,), max_retries=4, retry_backoff=0.01, retry_backoff_max=0.05, retry_jitter=False)
def auto(key):
    FLAKY[key] = FLAKY.get(key, 0) + 1
    if FLAKY[key] < 3:
        raise IOError("flaky")
    return FLAKY[key]

@app.task(name="proj.plain_error", max_retries=5)
def plain_error():
    raise ValueError("a bug is not retried")

@app.task(name="proj.rejected")
def rejected():
    raise Reject("no thanks", requeue=False)

@app.task(name="proj.ignored")
def ignored():
    raise Ignore()

@shared_task(name="proj.shared_double")
def shared_double(x):
    return 2 * x

@app.task(name="proj.routed.ping")
def routed_ping():
    return "pong"
'''


def _module(tmp: Path, name: str) -> str:
    src = TASKS.replace("from celery import", "from headway.celery import").replace(
        "from celery.exceptions import", "from headway.celery.exceptions import"
    )
    assert "celery import" not in src.replace("headway.celery import", "")
    (tmp / f"{name}.py").write_text(textwrap.dedent(src))
    return name


@pytest.fixture(params=["memory", "redis"])
def proj(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    if request.param == "memory":
        monkeypatch.setenv("DROPIN_BROKER", "memory://")
    else:
        server: RedisServer = request.getfixturevalue("redis_server")
        db = 30
        server.command("FLUSHDB", db=db)
        monkeypatch.setenv("DROPIN_BROKER", f"redis://127.0.0.1:{server.port}/{db}")
    name = _module(tmp_path, f"proj_{request.param}_{os.getpid()}_{time.monotonic_ns()}")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    mod = importlib.import_module(name)
    w = mod.app.worker(concurrency=2)
    w.start()
    try:
        yield mod
    finally:
        w.stop(5.0)


def test_delay_apply_async_and_results(proj: object) -> None:
    m: object = proj
    r = m.add.delay(2, 3)  # type: ignore[attr-defined]
    assert r.get(timeout=20) == 5
    assert r.state == "SUCCESS" and r.status == "SUCCESS"
    assert r.ready() and r.successful() and not r.failed()
    assert r.result == 5 and r.info == 5
    r2 = m.add.apply_async((1, 1), countdown=0.1, task_id="fixed-id-1")  # type: ignore[attr-defined]
    assert r2.id == "fixed-id-1" and r2.get(timeout=20) == 2
    assert m.app.AsyncResult("fixed-id-1").get(timeout=5) == 2  # type: ignore[attr-defined]
    # Called directly: runs here, as Celery's __call__.
    assert m.add(4, 4) == 8  # type: ignore[attr-defined]
    assert m.shared_double.delay(21).get(timeout=20) == 42  # type: ignore[attr-defined]


def test_bound_request(proj: object) -> None:
    m: object = proj
    out = m.who.delay("t").get(timeout=20)  # type: ignore[attr-defined]
    assert out["task"] == "proj.who" and out["tag"] == "t" and out["args"] == ["t"]
    assert out["retries"] == 0 and out["routing_key"] == "celery" and out["root"] == out["id"]
    # Called directly there is no run: Celery's called_directly request.
    assert m.who.request.called_directly  # type: ignore[attr-defined]


def test_retries_as_celery(proj: object) -> None:
    m: object = proj
    assert m.bound_retry.delay("a").get(timeout=20) == ["done", 2]  # type: ignore[attr-defined]
    assert m.auto.delay("b").get(timeout=20) == 3  # type: ignore[attr-defined]
    import headway

    # Past max_retries: fails with the exc given to retry(), as Celery.
    with pytest.raises(headway.TaskFailed) as e:
        m.give_up.delay().get(timeout=20)  # type: ignore[attr-defined]
    assert e.value.type == "KeyError"
    # A plain exception without autoretry_for fails at once (no retry).
    r = m.plain_error.delay()  # type: ignore[attr-defined]
    with pytest.raises(headway.TaskFailed) as e:
        r.get(timeout=20)
    assert e.value.type == "ValueError"
    assert r.failed() and isinstance(r.result, headway.TaskFailed)
    assert r.get(timeout=5, propagate=False).type == "ValueError"


def test_reject_and_ignore(proj: object) -> None:
    m: object = proj
    import headway

    rej = m.rejected.delay()  # type: ignore[attr-defined]
    ign = m.ignored.delay()  # type: ignore[attr-defined]
    # Positive control beside the two runs that store no success.
    assert m.add.delay(1, 2).get(timeout=20) == 3
    deadline = time.monotonic() + 20
    while rej.state not in ("REJECTED", "FAILURE") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert rej.state in ("REJECTED", "FAILURE"), rej.state
    assert ign.state != "SUCCESS"
    with pytest.raises(headway.Timeout):
        ign.get(timeout=0.3)


def test_canvas(proj: object) -> None:
    m: object = proj
    c = m.chain(m.add.s(1, 2), m.add.s(10))  # type: ignore[attr-defined]
    assert c.delay().get(timeout=20) == 13
    g = m.group(m.add.s(i, i) for i in range(4))  # type: ignore[attr-defined]
    assert g.delay().get(timeout=20) == [0, 2, 4, 6]
    ch = m.chord((m.add.s(i, 1) for i in range(3)), m.tsum.s())  # type: ignore[attr-defined]
    assert ch.delay().get(timeout=20) == 6
    assert m.add.map([(1, 2)]).delay  # type: ignore[attr-defined]
    assert m.shared_double.map([1, 2, 3]).delay().get(timeout=20) == [2, 4, 6]  # type: ignore[attr-defined]
    assert m.add.starmap([(1, 2), (3, 4)]).delay().get(timeout=20) == [3, 7]  # type: ignore[attr-defined]
    chunks = m.add.chunks([(i, i) for i in range(5)], 2)  # type: ignore[attr-defined]
    assert chunks.delay().get(timeout=20) == [[0, 2], [4, 6], [8]]
    assert m.signature("proj.add", (5, 6)).delay().get(timeout=20) == 11  # type: ignore[attr-defined]
    assert (m.add.s(1, 1) | m.add.s(1)).delay().get(timeout=20) == 3  # type: ignore[attr-defined]


def test_routes_and_refusals(proj: object) -> None:
    m: object = proj
    from headway.celery.app import _route

    assert _route(m.app, "proj.routed.ping") == "routed"  # type: ignore[attr-defined]
    assert _route(m.app, "proj.add") == "celery"  # type: ignore[attr-defined]
    # The worker consumes every queue the app's tasks go to.
    assert m.routed_ping.delay().get(timeout=20) == "pong"  # type: ignore[attr-defined]
    # link runs on every broker (memory included); a link that is not a
    # signature is refused naming it.
    r = m.add.apply_async((1, 2), link=m.add.s(1).set(task_id=f"cb-{id(m)}"))  # type: ignore[attr-defined]
    assert r.get(timeout=20) == 3
    assert m.app.AsyncResult(f"cb-{id(m)}").get(timeout=20) == 4  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="link: expected a signature"):
        m.add.apply_async((1, 2), link="proj.add")  # type: ignore[attr-defined]
    # Celery's numeric expires is seconds from now (not an epoch instant).
    assert m.add.apply_async((2, 2), expires=60).get(timeout=20) == 4  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="does not have"):
        m.app.task(name="x", not_an_option=1)  # type: ignore[attr-defined]
    # autoretry_for's retry_kwargs are read by the core: one it does not have is named.
    with pytest.raises(TypeError, match=r"task y: retry_kwargs headway.celery does not have: \['zz'\]"):
        m.app.task(name="y", autoretry_for=(IOError,), retry_kwargs={"zz": 1, "countdown": 1})(lambda: None)  # type: ignore[attr-defined]
    m.app.tasks.pop("y", None)  # type: ignore[attr-defined]


def test_a_real_celery_client_reads_its_results(redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On Redis the drop-in speaks Celery's layout: Celery's own client sends
    to it and reads the result it stores."""
    pytest.importorskip("celery")
    db = 31
    redis_server.command("FLUSHDB", db=db)
    url = f"redis://127.0.0.1:{redis_server.port}/{db}"
    monkeypatch.setenv("DROPIN_BROKER", url)
    name = _module(tmp_path, f"proj_real_{os.getpid()}")
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib

    mod = importlib.import_module(name)
    w = mod.app.worker(concurrency=2)
    w.start()
    try:
        code = textwrap.dedent(f"""
            from celery import Celery
            c = Celery("client", broker={url!r}, backend={url!r})
            r = c.send_task("proj.add", (20, 22))
            print(r.get(timeout=20))
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "42"
    finally:
        w.stop(5.0)


def test_the_cli_serves_a_drop_in_app(redis_server: RedisServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = 32
    redis_server.command("FLUSHDB", db=db)
    url = f"redis://127.0.0.1:{redis_server.port}/{db}"
    monkeypatch.setenv("DROPIN_BROKER", url)
    name = _module(tmp_path, f"proj_cli_{os.getpid()}")
    monkeypatch.syspath_prepend(str(tmp_path))
    proc = subprocess.Popen(
        [sys.executable, "-m", "headway", "worker", "-A", f"{name}:app", "-c", "1"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"},
    )  # fmt: skip
    try:
        import importlib

        mod = importlib.import_module(name)
        assert mod.routed_ping.delay().get(timeout=30) == "pong"
        assert mod.add.delay(1, 2).get(timeout=30) == 3
    finally:
        proc.terminate()
        proc.wait(20)


def test_a_message_sent_as_a_worker_stops_is_not_stranded(redis_server: RedisServer) -> None:
    """On Celery's layout a stopped worker's last claim (a BRPOP still
    waiting, in a task of its own) is served before the next worker's:
    what it takes goes back to the queue when the worker stops, so a worker
    started right after (another app in the same process) runs it."""
    import headway

    db = 37
    redis_server.command("FLUSHDB", db=db)
    url = f"redis://127.0.0.1:{redis_server.port}/{db}"

    def made() -> tuple[headway.App, Any]:
        app = headway.App(headway.RedisBroker.celery(url))

        @app.task(name="add", queue="celery")
        def add(a: int, b: int) -> int:
            return a + b

        return app, add

    a1, add1 = made()
    w1 = a1.worker(queues=["celery"], concurrency=2)
    w1.start()
    # Positive control: the first worker runs what it is sent.
    assert add1.delay(1, 2).get(timeout=20) == 3
    w1.stop(5.0)
    a2, add2 = made()
    w2 = a2.worker(queues=["celery"], concurrency=2)
    w2.start()
    try:
        assert add2.delay(2, 2).get(timeout=20) == 4
    finally:
        w2.stop(5.0)


@pytest.mark.parametrize("expires", [60, None])
def test_result_expires_and_the_prefetch_multiplier_are_applied(redis_server: RedisServer, expires: int | None) -> None:
    """``result_expires`` sets the stored result's TTL (``None``: kept for
    ever, as Celery); ``worker_prefetch_multiplier`` the worker's prefetch
    (concurrency × it), with Celery's default of 4 leaving headway's."""
    from headway.celery import Celery

    db = 38
    redis_server.command("FLUSHDB", db=db)
    url = f"redis://127.0.0.1:{redis_server.port}/{db}"
    capp = Celery("exp", broker=url, backend=url, result_expires=expires, worker_prefetch_multiplier=1)

    @capp.task(name="exp.add")
    def add(a: int, b: int) -> int:
        return a + b

    w = capp.worker(concurrency=3)
    assert w.prefetch == 3
    w.start()
    try:
        r = add.delay(1, 2)
        assert r.get(timeout=20) == 3
    finally:
        w.stop(5.0)
    ttl = int(redis_server.command("TTL", f"celery-task-meta-{r.id}", db=db).lstrip(b":"))
    if expires is None:
        assert ttl == -1
    else:
        assert 0 < ttl <= 60
    capp.conf.worker_prefetch_multiplier = 4
    assert capp.worker(concurrency=3).prefetch == 12
    with pytest.raises(ValueError, match="prefetch_multiplier"):
        capp.worker(concurrency=3, prefetch_multiplier=0)
