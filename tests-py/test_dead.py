"""Dead letters through Python, on every broker (the ``apps`` fixture:
memory, headway's Redis layout and Celery's): bytes pushed onto a queue as a
foreign producer would, quarantined by a real worker, then listed,
re-queued (a worker claims them again) and purged.

Waits are bounded polls on what the broker reports, never sleeps that hope.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from datetime import datetime

import pytest

import headway
from headway.testing import VirtualClock, push_raw

from conftest import START, Apps, RedisServer

WAIT = 10.0
Q = "dq"

PICKLE = b"\x80\x04\x95pickle"
NO_TASK = b'{"id":"d1","queue":"dq"}'
JUNK = b"<script>x</script>\n\xff"


def until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def add_app(apps: Apps) -> headway.App:
    app = apps.app()

    @app.task(name="add", queue=Q)
    def add(x: int, y: int) -> int:
        return x + y

    return app


def test_quarantined_letters_are_listed_requeued_and_purged(apps: Apps) -> None:
    app = add_app(apps)
    for raw in (PICKLE, NO_TASK, JUNK):
        push_raw(app, Q, raw)
    apps.start(app, queues=[Q])
    # Good work flows past the bad bytes.
    assert app.send("add", (2, 3)).get(timeout=WAIT) == 5
    until("three dead letters", lambda: app.dead_count(Q) == 3)

    dead = app.dead_letters(Q)
    assert [type(d) for d in dead] == [headway.DeadLetter] * 3
    # Newest first, each with its queue, reason, id (when readable) and bytes.
    assert [d.raw for d in dead] == [JUNK, NO_TASK, PICKLE]
    assert dead[0].reason.startswith("not JSON")
    if apps.kind == "celery":
        # On Celery's layout a message is a kombu envelope: bare JSON is not.
        assert dead[1].reason.startswith("content type not allowed")
    else:
        assert dead[1].reason == "no task name"
        assert dead[1].id == "d1"
    assert dead[2].reason.startswith("content type not allowed: a pickle")
    assert dead[0].id is None and dead[2].id is None
    assert {d.queue for d in dead} == {Q}
    assert dead[2].size == len(PICKLE)
    for d in dead:
        assert isinstance(d.at, datetime) and d.at.tzinfo is not None
        assert d.at >= START
    assert repr(dead[2]).startswith("DeadLetter(queue='dq', id=None, reason='content type")
    assert repr(dead[2]).endswith(f"size={len(PICKLE)})")
    # `limit` bounds the list, not the count; 0 lists none.
    assert [d.raw for d in app.dead_letters(Q, limit=1)] == [JUNK]
    assert app.dead_letters(Q, limit=0) == []
    assert app.dead_count(Q) == 3

    def newest_is(raw: bytes) -> Callable[[], bool]:
        def check() -> bool:
            d = app.dead_letters(Q, limit=1)
            return app.dead_count(Q) == 3 and bool(d) and d[0].raw == raw
        return check

    # Re-queued, a letter goes back on its queue as it was: the running
    # worker claims it again and, as it is still bad, sets it aside again —
    # now the newest.
    assert app.requeue_dead(Q, ids=["nope"]) == 0
    if apps.kind != "celery":
        assert app.requeue_dead(Q, ids=["d1"]) == 1
        until("d1 back among the dead, newest", newest_is(NO_TASK))
    # The oldest first: the pickle.
    assert app.requeue_dead(Q, limit=1) == 1
    until("the pickle back among the dead, newest", newest_is(PICKLE))
    assert sorted(d.raw for d in app.dead_letters(Q)) == sorted([PICKLE, NO_TASK, JUNK])

    # Purge drops them for good.
    assert app.purge_dead(Q) == 3
    assert app.dead_count(Q) == 0
    assert app.dead_letters(Q) == []
    assert app.purge_dead(Q) == 0
    assert app.requeue_dead(Q) == 0
    # And work still flows.
    assert app.send("add", (1, 1)).get(timeout=WAIT) == 2


def test_unknown_queues_have_none_and_bad_limits_raise(apps: Apps) -> None:
    app = apps.app()
    assert app.dead_letters("nowhere") == []
    assert app.dead_count("nowhere") == 0
    assert app.requeue_dead("nowhere") == 0
    assert app.purge_dead("nowhere") == 0
    # The default queue is the default.
    assert app.dead_letters() == [] and app.dead_count() == 0
    with pytest.raises(ValueError, match="limit"):
        app.dead_letters(Q, limit=-1)
    with pytest.raises(ValueError, match="limit"):
        app.requeue_dead(Q, limit=-5)
    for bad in ("3", 1.5, True, [1]):
        with pytest.raises(TypeError, match="limit"):
            app.dead_letters(Q, limit=bad)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="limit"):
            app.requeue_dead(Q, limit=bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit"):
        app.dead_letters(Q, limit=2**70)
    with pytest.raises(TypeError, match="ids"):
        app.requeue_dead(Q, ids="d1")
    with pytest.raises(TypeError):
        app.requeue_dead(Q, ids=[1])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        app.dead_count(5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="bytes"):
        push_raw(app, Q, "text")  # type: ignore[arg-type]


@pytest.mark.parametrize("layout", ["headway", "celery"])
def test_bytes_lpushed_onto_the_redis_list_are_quarantined(
    redis_server: RedisServer, layout: str
) -> None:
    """A foreign producer's LPUSH straight onto the queue's list (the key a
    producer of that layout writes), not through headway at all."""
    queue = f"dq{uuid.uuid4().hex[:6]}"
    if layout == "headway":
        prefix = f"d{uuid.uuid4().hex[:8]}:"
        broker = headway.RedisBroker(redis_server.url, prefix=prefix)
        key = f"{prefix}{{{queue}}}:ready:0"
    else:
        broker = headway.RedisBroker.celery(redis_server.url)
        key = queue
    app = headway.App(broker, clock=VirtualClock(start=START))
    assert redis_server.command("LPUSH", key, "this is not a message") == b":1"
    w = app.worker(queues=[queue])
    w.start()
    try:
        until("the pushed bytes quarantined", lambda: app.dead_count(queue) == 1)
    finally:
        w.stop(1.0)
    (d,) = app.dead_letters(queue)
    assert d.raw == b"this is not a message"
    assert d.reason.startswith("not JSON")

    def llen() -> int:
        return int(redis_server.command("LLEN", key)[1:])

    assert llen() == 0
    # Re-queued, it is on that list again, as it was. (A claim the stopped
    # worker left in flight may take it once more — Celery's layout only
    # — and set it aside again; then once more is enough.)
    assert app.requeue_dead(queue) == 1
    until("it is back on the list or set aside again", lambda: llen() == 1 or app.dead_count(queue) == 1)
    if llen() == 0:
        assert app.requeue_dead(queue) == 1
    until("it is back on the list", lambda: llen() == 1)
    assert app.dead_count(queue) == 0
    assert redis_server.command("DEL", key) == b":1"
    push_raw(app, queue, b"\x00")
    assert llen() == 1, "push_raw writes the same list"
    assert redis_server.command("DEL", key) == b":1"
