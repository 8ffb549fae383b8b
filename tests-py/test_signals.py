"""headway.signals: Celery's hooks around a run and a worker, on the body's
thread, for sync and async bodies, on the threads and the process pool."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any

import pytest

import headway
from headway import signals

WAIT = 10.0


@pytest.fixture
def seen() -> Any:
    got: list[tuple[Any, ...]] = []
    lock = threading.Lock()

    def keep(name: str) -> Any:
        def receiver(signal: Any = None, sender: Any = None, **kw: Any) -> None:
            with lock:
                got.append((name, sender, kw, threading.current_thread().name))

        return receiver

    receivers = {
        s: keep(s.name)
        for s in (
            signals.task_prerun,
            signals.task_postrun,
            signals.task_success,
            signals.task_failure,
            signals.task_retry,
            signals.worker_ready,
            signals.worker_shutdown,
        )
    }
    for s, r in receivers.items():
        s.connect(r)
    try:
        yield got
    finally:
        for s, r in receivers.items():
            assert s.disconnect(r)
    # Disconnected: nothing is hooked any more.
    assert signals.active is None


def test_a_sync_run_is_wrapped_on_its_own_thread(seen: list[tuple[Any, ...]]) -> None:
    app = headway.App("memory://")
    body_thread: list[str] = []

    @app.task(name="s.add")
    def add(a: int, b: int) -> int:
        body_thread.append(threading.current_thread().name)
        return a + b

    w = app.worker(concurrency=1)
    w.start()
    try:
        h = add.delay(2, 3)
        assert h.get(timeout=WAIT) == 5
    finally:
        w.stop(5.0)
    kinds = [n for n, *_ in seen]
    assert kinds[0] == "worker_ready" and kinds[-1] == "worker_shutdown"
    run = [s for s in seen if s[0].startswith("task_")]
    assert [n for n, *_ in run] == ["task_prerun", "task_success", "task_postrun"]
    pre, success, post = run
    assert pre[1] is add and pre[2]["task_id"] == h.id and pre[2]["args"] == (2, 3)
    assert success[2]["result"] == 5
    assert post[2]["state"] == "SUCCESS" and post[2]["retval"] == 5
    # On the body's thread, before and after it.
    assert pre[3] == post[3] == body_thread[0]


def test_a_failure_with_an_attempt_left_is_a_retry_then_a_failure(seen: list[tuple[Any, ...]]) -> None:
    app = headway.App("memory://")

    @app.task(name="s.bad", retries=1, backoff=headway.Fixed(0.01), bind=True)
    def bad(ctx: Any, x: int) -> None:
        raise ValueError(f"no {x}")

    w = app.worker(concurrency=1)
    w.start()
    try:
        h = bad.delay(7)
        with pytest.raises(headway.TaskFailed):
            h.get(timeout=WAIT)
    finally:
        w.stop(5.0)
    run = [s for s in seen if s[0].startswith("task_")]
    assert [n for n, *_ in run] == [
        "task_prerun", "task_retry", "task_postrun",
        "task_prerun", "task_failure", "task_postrun",
    ]
    retry, failure = run[1], run[4]
    assert retry[2]["request"].id == h.id and isinstance(retry[2]["reason"], ValueError)
    assert isinstance(failure[2]["exception"], ValueError) and failure[2]["task_id"] == h.id
    # A bound body's context is not among the run's arguments.
    assert failure[2]["args"] == (7,) and run[0][2]["args"] == (7,)
    assert [r[2]["state"] for r in run if r[0] == "task_postrun"] == ["RETRY", "FAILURE"]


def test_an_async_run_is_wrapped_too_and_a_raising_receiver_fails_nothing(
    seen: list[tuple[Any, ...]],
) -> None:
    app = headway.App("memory://")

    @app.task(name="s.aadd")
    async def aadd(a: int, b: int) -> int:
        return a + b

    def boom(**kw: Any) -> None:
        raise RuntimeError("a receiver's bug")

    signals.task_prerun.connect(boom, sender=aadd)
    w = app.worker(concurrency=1)
    w.start()
    try:
        h = aadd.delay(1, 1)
        assert h.get(timeout=WAIT) == 2
    finally:
        w.stop(5.0)
        assert signals.task_prerun.disconnect(boom, sender=aadd)
    run = [n for n, _, kw, _ in seen if n.startswith("task_")]
    assert run == ["task_prerun", "task_success", "task_postrun"]


def test_no_receiver_no_hook() -> None:
    # The positive control is the fixture's: a hook while connected.
    assert signals.active is None
    r = signals.task_prerun.connect(lambda **kw: None)
    assert signals.active is not None
    assert signals.task_prerun.disconnect(r)
    assert signals.active is None
    assert not signals.task_prerun.disconnect(r)


def test_in_a_process_pool_child_the_signals_fire_in_the_child(tmp_path: Path) -> None:
    log = tmp_path / "signals.log"
    (tmp_path / "sigapp.py").write_text(
        "import json, os\n"
        "import headway\n"
        "from headway import signals\n"
        "app = headway.App('memory://')\n"
        f"LOG = {str(log)!r}\n"
        "@signals.task_prerun.connect\n"
        "def pre(sender=None, task_id=None, **kw):\n"
        "    with open(LOG, 'a') as f:\n"
        "        f.write(json.dumps(['pre', task_id, os.getpid()]) + '\\n')\n"
        "@signals.task_postrun.connect\n"
        "def post(sender=None, task_id=None, state=None, **kw):\n"
        "    with open(LOG, 'a') as f:\n"
        "        f.write(json.dumps(['post', task_id, os.getpid(), state]) + '\\n')\n"
        "@app.task(name='sig.pid')\n"
        "def pid():\n"
        "    return os.getpid()\n"
    )
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        import sigapp  # type: ignore[import-not-found]

        w = sigapp.app.worker(concurrency=1, pool="process")
        w.start()
        try:
            h = sigapp.pid.delay()
            child = h.get(timeout=30)
        finally:
            w.stop(10.0)
    finally:
        sys.path.remove(str(tmp_path))
        for s in (signals.task_prerun, signals.task_postrun):
            for r in list(s.receivers):
                s.disconnect(r)
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert ["pre", h.id, child] in lines, lines
    assert ["post", h.id, child, "SUCCESS"] in lines, lines
    assert child != os.getpid()


def test_the_hooks_tell_the_state_the_worker_records_for_filtered_failures_and_asks(
    seen: list[tuple[Any, ...]],
) -> None:
    """A failure the task's retry_for does not name fails for good (task_failure,
    though attempts are left); one it names is retried (task_retry, the positive
    control); a retry asked past its budget fails; a requeueing reject is
    REJECTED and an ignore IGNORED (neither success, retry nor failure)."""
    app = headway.App("memory://")
    mark: list[str] = []

    @app.task(name="s.filtered", retries=1, backoff=headway.Fixed(0.01), retry_for=(ConnectionError,))
    def filtered(kind: str) -> None:
        raise {"conn": ConnectionError, "value": ValueError}[kind](kind)

    @app.task(name="s.asks", bind=True)
    def asks(ctx: headway.Context, what: str) -> None:
        if what == "retry":
            ctx.retry(countdown=0.01, max_retries=0)
        if what == "requeue" and not mark:
            mark.append("x")
            raise headway.Reject("later", requeue=True)
        if what == "ignore":
            raise headway.Ignore()

    w = app.worker(concurrency=1)
    w.start()
    try:
        with pytest.raises(headway.TaskFailed):
            filtered.delay("value").get(timeout=10)
        with pytest.raises(headway.TaskFailed):
            filtered.delay("conn").get(timeout=10)
        with pytest.raises(headway.TaskFailed):
            asks.delay("retry").get(timeout=10)
        asks.delay("requeue").get(timeout=10)
        asks.delay("ignore")
        assert asks.delay("done").get(timeout=10) is None
    finally:
        w.stop(5.0)

    def states(task: str, arg: str) -> list[tuple[str, Any]]:
        """The outcome signals of `task`'s runs with `arg`, in order."""
        out = []
        for n, sender, kw, _ in seen:
            if n not in ("task_retry", "task_failure", "task_success", "task_postrun"):
                continue
            if getattr(sender, "name", None) != task:
                continue
            args = kw["request"].kwargs if n == "task_retry" else None
            run_args = list(kw.get("args") or ()) if n != "task_retry" else None
            if n == "task_retry":
                # The retry's request: its run's id ties it to the postrun after it.
                out.append((n, None, kw["request"].id))
            elif run_args == [arg]:
                out.append((n, kw.get("state"), kw.get("task_id")))
            del args
        ids = {i for n, _, i in out if n != "task_retry"}
        return [(n, st) for n, st, i in out if i in ids]

    assert states("s.filtered", "value") == [("task_failure", None), ("task_postrun", "FAILURE")]
    assert states("s.filtered", "conn") == [
        ("task_retry", None), ("task_postrun", "RETRY"),
        ("task_failure", None), ("task_postrun", "FAILURE"),
    ]
    assert states("s.asks", "retry") == [("task_failure", None), ("task_postrun", "FAILURE")]
    assert states("s.asks", "requeue")[:1] == [("task_postrun", "REJECTED")]
    assert states("s.asks", "ignore") == [("task_postrun", "IGNORED")]
