"""The task queue through Python, on every broker (the ``apps`` fixture:
memory, and headway's Redis layout on a redis-server of the session's own).

Time is the app's virtual clock: retries, etas, expiry and beats move it, so
nothing here sleeps to hope something happened. ``get(timeout=...)`` is a
real wait, used only as a bound on a test that would otherwise hang.
"""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import headway
from headway import (
    BrokerError,
    Exponential,
    Fixed,
    Missing,
    Refused,
    Revoked,
    TaskFailed,
    Timeout,
    UnknownTask,
    chain,
    chord,
    group,
)

from conftest import START, T0, Apps

WAIT = 10.0


def test_send_get_state_and_handles_by_id(apps: Apps) -> None:
    app = apps.app()

    @app.task
    def add(x: int, y: int) -> int:
        return x + y

    assert add.name == "test_tasks.add"  # module.function, as Celery's
    assert app.task_names() == ["test_tasks.add"]
    apps.start(app, concurrency=2)
    h = add.delay(2, 3)
    assert h.get(timeout=WAIT) == 5
    assert h.state() == "SUCCESS"
    assert h.ready() and h.successful() and not h.failed()
    assert app.handle(h.id).get(timeout=WAIT) == 5
    assert app.AsyncResult(h.id) == h
    assert app.send("test_tasks.add", (4, 5)).get(timeout=WAIT) == 9
    h2 = add.apply_async((1,), {"y": 10}, task_id="fixed-id")
    assert h2.id == "fixed-id"
    assert h2.get(timeout=WAIT) == 11
    # The body runs here when called directly, as Celery's __call__ does.
    assert add(20, 22) == 42


def test_values_round_trip_as_json(apps: Apps) -> None:
    app = apps.app()

    @app.task(name="echo")
    def echo(*args: Any, **kwargs: Any) -> Any:
        return [list(args), kwargs]

    apps.start(app)
    value = {"s": "é", "i": -(2**63), "u": 2**64 - 1, "f": 1.5, "b": True, "n": None, "l": [1, [2]]}
    got = echo.delay(value, (1, 2), k=[None]).get(timeout=WAIT)
    assert got == [[value, [1, 2]], {"k": [None]}]


def test_a_raising_body_reaches_get_as_task_failed(apps: Apps) -> None:
    app = apps.app()

    @app.task(name="boom")
    def boom(x: int) -> int:
        raise ValueError(f"bad input {x}")

    apps.start(app)
    h = boom.delay(7)
    with pytest.raises(TaskFailed) as info:
        h.get(timeout=WAIT)
    e = info.value
    assert isinstance(e, Refused)
    assert e.type == "ValueError"
    assert e.message == "bad input 7"
    assert e.module == "builtins"
    assert e.traceback is not None
    assert "in boom" in e.traceback and 'raise ValueError(f"bad input {x}")' in e.traceback
    assert str(e) == "ValueError: bad input 7"
    assert h.state() == "FAILURE" and h.failed() and h.ready()


def test_retry_budget_runs_out_with_attempt_and_last(apps: Apps) -> None:
    app = apps.app()
    seen: list[tuple[int, int, bool, datetime]] = []

    @app.task(name="flaky", retries=2, backoff=Fixed(10.0))
    def flaky() -> None:
        c = headway.current()
        seen.append((c.attempt, c.retries, c.last, c.now))
        raise ConnectionError(f"attempt {c.attempt}")

    apps.start(app)
    h = flaky.delay()
    with pytest.raises(TaskFailed) as info:
        h.get(timeout=WAIT)
    assert info.value.type == "ConnectionError"
    assert info.value.message == "attempt 3"
    assert [(a, r, last) for a, r, last, _ in seen] == [(1, 0, False), (2, 1, False), (3, 2, True)]
    # Each retry waits the backoff on the virtual clock.
    assert [s[3] - START for s in seen] == [timedelta(0), timedelta(seconds=10), timedelta(seconds=20)]


def test_retry_then_succeed_waits_the_exponential_backoff(apps: Apps) -> None:
    app = apps.app()
    times: list[float] = []
    backoff = Exponential(base=2.0, cap=60.0, jitter=True)

    @app.task(name="flaky2", retries=3, backoff=backoff)
    def flaky2() -> str:
        c = headway.current()
        times.append(c.now.timestamp())
        if c.attempt < 3:
            raise OSError("not yet")
        return "ok"

    apps.start(app)
    h = flaky2.apply_async(task_id="run-42")
    assert h.get(timeout=WAIT) == "ok"
    # The jitter is derived from the task id and the attempt: assertable.
    w2, w3 = backoff.wait_before(2, "run-42"), backoff.wait_before(3, "run-42")
    assert 0 <= w2 <= 2.0 and 0 <= w3 <= 4.0
    assert times[1] - times[0] == pytest.approx(w2, abs=0.002)
    assert times[2] - times[1] == pytest.approx(w3, abs=0.002)


def test_unknown_names_and_send_task(apps: Apps) -> None:
    app = apps.app()

    @app.task(name="known")
    def known() -> int:
        return 1

    with pytest.raises(UnknownTask) as info:
        app.send("nope", ())
    assert info.value.name == "nope"
    assert isinstance(info.value, Refused)
    # send_task sends to any name, for another process to run.
    h = app.send_task("elsewhere.task", (1,))
    assert h.state() == "PENDING"
    with pytest.raises(Timeout):
        h.get(timeout=0.05)
    # A negative timeout waits nothing (the core's specs::wait), as 0 does.
    with pytest.raises(Timeout):
        h.get(timeout=-1)
    apps.start(app)
    if apps.kind == "celery":
        # On a queue shared with Celery workers, a name this worker does not
        # run is handed back for a consumer that does: the queue holds it
        # again, its hand-backs counted in a header.
        assert apps.server is not None
        held_back = (
            "for _, v in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do "
            "if string.find(v, ARGV[1], 1, true) and string.find(v, ARGV[2], 1, true) "
            "then return 1 end end return 0"
        )
        deadline = time.monotonic() + WAIT
        while apps.server.command("EVAL", held_back, "1", "celery", h.id, "x-headway-handbacks", db=Apps.db) != b":1":
            assert time.monotonic() < deadline, "the unknown task was not handed back to the queue"
            time.sleep(0.02)
        with pytest.raises(Timeout):
            h.get(timeout=0.05)
        assert h.state() == "PENDING"
        return
    # A worker that receives it records it failed rather than dropping it.
    with pytest.raises(TaskFailed) as failed:
        h.get(timeout=WAIT)
    assert failed.value.type == "NotRegistered"


def test_revoke_before_run_and_expires_in_the_past(apps: Apps) -> None:
    app = apps.app()
    ran: list[str] = []

    @app.task(name="job")
    def job(tag: str) -> str:
        ran.append(tag)
        return tag

    revoked = job.apply_async(("revoked",), countdown=30)
    revoked.revoke()
    expired = job.apply_async(("expired",), expires=T0 - 1)
    expired_td = job.apply_async(("expired-td",), expires=timedelta(seconds=-5))
    live = job.apply_async(("live",), expires=START + timedelta(hours=1))
    apps.start(app)
    assert live.get(timeout=WAIT) == "live"
    for h in (revoked, expired, expired_td):
        with pytest.raises(Revoked) as info:
            h.get(timeout=WAIT)
        assert info.value.id == h.id
        assert h.state() == "REVOKED"
    assert ran == ["live"]


def test_eta_order(apps: Apps) -> None:
    app = apps.app()
    order: list[tuple[str, float]] = []

    @app.task(name="at")
    def at(tag: str) -> None:
        order.append((tag, headway.current().now.timestamp() - T0))

    hs = [
        at.apply_async(("thirty",), eta=START + timedelta(seconds=30)),
        at.apply_async(("ten",), eta=T0 + 10),
        at.apply_async(("twenty",), countdown=20),
        at.apply_async(("now",)),
    ]
    apps.start(app, concurrency=1)
    for h in hs:
        h.get(timeout=WAIT)
    assert order == [("now", 0), ("ten", 10), ("twenty", 20), ("thirty", 30)]


def test_chain_group_chord_and_pipe(apps: Apps) -> None:
    app = apps.app()

    @app.task(name="add")
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(name="mul")
    def mul(x: int, y: int) -> int:
        return x * y

    @app.task(name="total")
    def total(xs: list[int], plus: int = 0) -> int:
        return sum(xs) + plus

    apps.start(app)
    assert chain(add.s(1, 2), add.s(3), mul.s(10)).send().get(timeout=WAIT) == 60
    assert (add.s(2, 2) | mul.s(5)).delay().get(timeout=WAIT) == 20
    assert (add.s(1, 1) | mul.si(3, 3)).apply_async().get(timeout=WAIT) == 9
    # A group answers in the order given, even when parts finish out of order.
    g = group(add.s(i, i).set(countdown=10 - i) for i in range(5)).send()
    assert g.get(timeout=WAIT) == [0, 2, 4, 6, 8]
    assert len(g.ids) == 5 and g.state() == "SUCCESS"
    # A chain inside a group stays a chain.
    assert group(add.s(1, 1) | mul.s(10), add.s(5, 5)).send().get(timeout=WAIT) == [20, 10]
    assert chord([add.s(i, i) for i in range(4)], total.s(plus=100)).send().get(timeout=WAIT) == 112
    # group | callback is a chord, as in Celery.
    assert (group(add.s(1, 1), add.s(2, 2)) | total.s()).send().get(timeout=WAIT) == 6
    # A group later in a chain is given the link's result (a chord when a task follows).
    assert (add.s(1, 2) | group(add.s(10), add.s(20)) | total.s()).send().get(timeout=WAIT) == 36
    assert (add.s(1, 2) | group(add.s(10), mul.s(2))).send().get(timeout=WAIT) == [13, 6]
    # link / link_error callbacks on a signature (Celery's sig.link).
    s = add.s(2, 3)
    s.link(mul.s(10).set(task_id="linked-cb"))
    assert s.send().get(timeout=WAIT) == 5
    assert app.handle("linked-cb").get(timeout=WAIT) == 50
    # delay(*args) gives partial arguments to the first runs.
    assert chain(add.s(1), mul.s(2)).delay(4).get(timeout=WAIT) == 10
    # A signature of a name sent by name.
    assert app.signature("add", (7, 8)).send().get(timeout=WAIT) == 15


def test_failed_parts_fail_what_waits(apps: Apps) -> None:
    app = apps.app()
    ran: list[str] = []

    @app.task(name="ok")
    def ok(x: int) -> int:
        ran.append(f"ok{x}")
        return x

    @app.task(name="bad")
    def bad(*_: Any) -> int:
        raise RuntimeError("part failed")

    @app.task(name="total")
    def total(xs: list[int]) -> int:
        ran.append("total")
        return sum(xs)

    apps.start(app)
    with pytest.raises(TaskFailed) as info:
        chord([ok.s(1), bad.s(), ok.s(2)], total.s()).send().get(timeout=WAIT)
    assert info.value.type == "ChordError"
    assert "part failed" in info.value.message
    with pytest.raises(TaskFailed) as info2:
        chain(ok.s(1), bad.s(), ok.s()).send().get(timeout=WAIT)
    assert info2.value.type == "RuntimeError"
    assert "total" not in ran
    g = group(ok.s(3), bad.s()).send()
    with pytest.raises(TaskFailed):
        g.get(timeout=WAIT)
    assert g.state() == "FAILURE"


def test_bind_and_current_in_sync_and_async_bodies(apps: Apps) -> None:
    app = apps.app()

    def helper() -> str:
        return headway.current().id

    @app.task(name="bound", bind=True)
    def bound(ctx: headway.Context, x: int) -> list[Any]:
        return [ctx.id, ctx.name, ctx.queue, ctx.attempt, helper() == ctx.id, x]

    @app.task(name="abound", bind=True)
    async def abound(ctx: headway.Context) -> list[Any]:
        await asyncio.sleep(0)
        return [ctx.id, helper(), ctx.kwargs]

    @app.task(name="acur")
    async def acur(**kw: Any) -> str:
        return helper()

    apps.start(app)
    h = bound.delay(5)
    assert h.get(timeout=WAIT) == [h.id, "bound", "default", 1, True, 5]
    h2 = abound.delay()
    assert h2.get(timeout=WAIT) == [h2.id, h2.id, {}]
    h3 = acur.delay(k=1)
    assert h3.get(timeout=WAIT) == h3.id
    with pytest.raises(LookupError):
        headway.current()
    # A direct call of a bound task passes a Context of its own.
    direct = bound(9)
    assert direct[1:4] == ["bound", "default", 1] and direct[5] == 9


def test_blocking_sync_bodies_run_concurrency_at_a_time(apps: Apps) -> None:
    app = apps.app()
    together = threading.Barrier(4, timeout=WAIT)

    @app.task(name="meet")
    def meet(i: int) -> int:
        together.wait()  # passes only when four bodies run at once
        return i

    apps.start(app, concurrency=4)
    hs = [meet.delay(i) for i in range(8)]
    assert [h.get(timeout=WAIT) for h in hs] == list(range(8))


def test_async_bodies_run_on_a_loop_thread(apps: Apps) -> None:
    app = apps.app()
    loops: list[int] = []

    @app.task(name="aecho")
    async def aecho(x: int) -> int:
        loops.append(id(asyncio.get_running_loop()))
        await asyncio.sleep(0.001)
        return x * 2

    apps.start(app, concurrency=8)
    hs = [aecho.delay(i) for i in range(20)]
    assert [h.get(timeout=WAIT) for h in hs] == [i * 2 for i in range(20)]
    assert len(set(loops)) == 1


def test_async_bodies_run_inside_a_task(apps: Apps) -> None:
    app = apps.app()

    @app.task(name="in_task")
    async def in_task() -> bool:
        # asyncio.timeout() (and anyio, httpx...) need a current task, from
        # the very first step of the body.
        async with asyncio.timeout(5):
            here = asyncio.current_task() is not None
            await asyncio.sleep(0)
        return here

    apps.start(app)
    assert in_task.delay().get(timeout=WAIT) is True


def test_run_async_on_the_callers_loop_and_await_handle(apps: Apps) -> None:
    app = apps.app()

    @app.task(name="where")
    async def where() -> int:
        return id(asyncio.get_running_loop())

    @app.task(name="sync_add")
    def sync_add(x: int, y: int) -> int:
        return x + y

    async def main() -> tuple[int, int, int]:
        w = app.worker()
        run = asyncio.ensure_future(w.run_async())
        h = where.delay()
        got = await h
        s = await sync_add.delay(1, 2)
        w.stop(1.0)  # on the worker's own loop: asks, does not block the loop
        await run
        return got, s, id(asyncio.get_running_loop())

    got, s, loop = asyncio.run(main())
    assert got == loop
    assert s == 3


def test_cancelling_run_async_stops_gracefully(apps: Apps) -> None:
    app = apps.app()
    started = threading.Event()

    @app.task(name="slowish")
    async def slowish() -> str:
        started.set()
        await asyncio.sleep(0.2)
        return "finished"

    async def main() -> tuple[str, bool]:
        w = app.worker()
        run = asyncio.ensure_future(w.run_async())
        h = slowish.delay()
        while not started.is_set():
            await asyncio.sleep(0.01)
        run.cancel()  # what Ctrl-C under asyncio.run does to the main task
        with pytest.raises(asyncio.CancelledError):
            await run
        # The run in progress was given its grace and finished.
        return await h, w._native.stopping

    value, stopping = asyncio.run(main())
    assert value == "finished" and stopping


def test_a_body_that_never_returns_times_out(apps: Apps) -> None:
    app = apps.app()
    release = threading.Event()
    late: list[str] = []
    cancelled: list[bool] = []

    @app.task(name="stuck", timeout=0.3)
    def stuck() -> str:
        release.wait(30)
        late.append("returned")
        return "too late"

    @app.task(name="astuck", timeout=0.3)
    async def astuck() -> str:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        return "never"

    apps.start(app, concurrency=2)
    h = stuck.delay()
    with pytest.raises(TaskFailed) as info:
        h.get(timeout=WAIT)
    assert info.value.type == "TimeoutError"
    # The sync body is still running; its late result is discarded.
    release.set()
    deadline = threading.Event()
    for _ in range(100):
        if late:
            break
        deadline.wait(0.05)
    assert late == ["returned"]
    assert h.state() == "FAILURE"
    with pytest.raises(TaskFailed):
        h.get(timeout=WAIT)
    # The async body is cancelled.
    h2 = astuck.delay()
    with pytest.raises(TaskFailed) as info2:
        h2.get(timeout=WAIT)
    assert info2.value.type == "TimeoutError"
    for _ in range(100):
        if cancelled:
            break
        deadline.wait(0.05)
    assert cancelled == [True]


def test_terminate_stops_a_running_async_body(apps: Apps) -> None:
    app = apps.app()
    started = threading.Event()
    cancelled = threading.Event()

    @app.task(name="long")
    async def long() -> None:
        started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    apps.start(app)
    h = long.delay()
    assert started.wait(WAIT)
    h.revoke(terminate=True)
    with pytest.raises(Revoked):
        h.get(timeout=WAIT)
    assert cancelled.wait(WAIT)
    assert h.state() == "REVOKED"


def test_stop_with_work_in_flight_loses_nothing(apps: Apps) -> None:
    app = apps.app()
    gate = threading.Event()
    runs: dict[int, int] = {}
    lock = threading.Lock()

    @app.task(name="held")
    def held(i: int) -> int:
        with lock:
            runs[i] = runs.get(i, 0) + 1
        gate.wait(30)
        return i

    handles = [held.delay(i) for i in range(6)]
    first = app.worker(concurrency=2)
    first.start()
    while len(runs) < 2:
        threading.Event().wait(0.01)
    first.stop(grace=0.2)  # two running, four prefetched: all given back
    gate.set()
    apps.start(app, concurrency=3)
    assert [h.get(timeout=WAIT) for h in handles] == list(range(6))
    assert sorted(runs) == list(range(6))
    assert all(n <= 2 for n in runs.values())


def test_rate_limits_per_worker_on_the_virtual_clock(apps: Apps) -> None:
    app = apps.app()
    at: list[float] = []

    @app.task(name="limited", rate="2/m")
    def limited() -> None:
        at.append(headway.current().now.timestamp() - T0)

    hs = [limited.delay() for _ in range(5)]
    apps.start(app, concurrency=1)
    for h in hs:
        h.get(timeout=WAIT)
    assert at[:2] == [0, 0]
    assert all(b - a >= 0 for a, b in zip(at, at[1:]))
    assert at[4] >= 120 - 0.01


def test_ignore_result_and_no_backend(apps: Apps) -> None:
    app = apps.app()

    @app.task(name="quiet", ignore_result=True)
    def quiet() -> int:
        return 1

    apps.start(app)
    with pytest.raises(Timeout) as info:
        quiet.delay().get(timeout=0.3)
    assert isinstance(info.value, TimeoutError)

    bare = headway.App(clock=app.clock, backend=False)

    @bare.task(name="noresult")
    def noresult() -> int:
        return 1

    with pytest.raises(Missing):
        noresult.delay().get(timeout=1)


def test_beat_sends_on_rhythms_and_keeps_phase(apps: Apps) -> None:
    app = apps.app()
    clock = app.clock
    assert clock is not None

    @app.task(name="tick")
    def tick(n: int) -> int:
        return n

    beat = app.beat()
    assert app.beat() is beat
    beat.add("every-minute", tick, (1,), headway.Every(60))
    beat.add("once", "tick", (2,), headway.At(START + timedelta(seconds=90)))
    assert [(n, w - START) for n, w in beat.pending()] == [
        ("every-minute", timedelta(seconds=60)),
        ("once", timedelta(seconds=90)),
    ]
    apps.start(app)
    # A late tick (at 00:01:40, due 00:01:00) fires the slot that was due,
    # and the next is computed from it: 00:02:00, not 00:02:40.
    clock.advance(100)
    fired = beat.tick()
    assert sorted((n, d - START) for n, d, _ in fired) == [
        ("every-minute", timedelta(seconds=60)),
        ("once", timedelta(seconds=90)),
    ]
    assert sorted(h.get(timeout=WAIT) for _, _, h in fired) == [1, 2]
    assert beat.pending() == [("every-minute", START + timedelta(seconds=120))]
    # Missed slots coalesce into one send.
    clock.advance(600)
    fired = beat.tick()
    assert [(n, d - START) for n, d, _ in fired] == [("every-minute", timedelta(seconds=660))]
    assert beat.pending() == [("every-minute", START + timedelta(seconds=720))]
    assert beat.remove("every-minute") and not beat.remove("every-minute")


def test_beat_run_until_on_the_virtual_clock(apps: Apps) -> None:
    app = apps.app()
    beat = app.beat()

    @app.task(name="count")
    def count() -> None:
        return None

    beat.add("c", count, (), headway.Every(60))
    beat.run(until=START + timedelta(minutes=10))
    assert app.now() == T0 + 600
    assert beat.pending() == [("c", START + timedelta(minutes=11))]


def test_bad_arguments_are_refused_at_send(apps: Apps) -> None:
    app = apps.app()

    @app.task(name="t")
    def t(*a: Any, **k: Any) -> None:
        return None

    with pytest.raises(TypeError, match=r"t: args\[1\] is a set"):
        t.delay(1, {1, 2})
    with pytest.raises(TypeError, match=r"t: kwargs\['x'\]\[0\] is an object"):
        t.delay(x=[object()])
    with pytest.raises(TypeError, match="keys must be str"):
        t.delay({1: 2})
    with pytest.raises(ValueError, match="finite"):
        t.delay(float("nan"))
    with pytest.raises(ValueError, match="64 bits"):
        t.delay(2**64)
    with pytest.raises(ValueError, match="priority"):
        t.apply_async(priority=10)
    with pytest.raises(ValueError, match="timezone-aware"):
        t.apply_async(eta=datetime(2026, 1, 1))
    with pytest.raises(TypeError, match="eta"):
        t.apply_async(eta="tomorrow")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="queue"):
        t.apply_async(queue="")
    with pytest.raises(TypeError, match="unexpected keyword argument"):
        app.signature("t", (), options_typo=1).send()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="t: unexpected option 'typo'"):
        headway.Signature(app, "t", options={"typo": 1}).send()
    with pytest.raises(TypeError):
        app.send("t", (), bogus=1)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="a chord cannot be a part of another chord"):
        chord([chord([t.s()], t.s())], t.s()).send()


def test_a_result_json_cannot_carry_fails_the_run(apps: Apps) -> None:
    app = apps.app()

    @app.task(name="bad_result")
    def bad_result() -> object:
        return {1, 2}

    apps.start(app)
    with pytest.raises(TaskFailed) as info:
        bad_result.delay().get(timeout=WAIT)
    assert info.value.type == "TypeError"
    assert "bad_result: result is a set" in info.value.message


def test_policy_arguments_are_checked_at_registration(apps: Apps) -> None:
    app = apps.app()

    def f() -> None:
        return None

    with pytest.raises(ValueError, match="retries"):
        app.task(name="a", retries=-1)(f)
    with pytest.raises(ValueError, match="timeout"):
        app.task(name="b", timeout=0)(f)
    with pytest.raises(ValueError, match="rate"):
        app.task(name="c", rate="x/m")(f)
    with pytest.raises(ValueError, match="rate"):
        app.task(name="c2", rate="3/y")(f)
    with pytest.raises(TypeError, match="backoff"):
        app.task(name="d", backoff=1.0)(f)  # type: ignore[call-overload]
    with pytest.raises(ValueError, match="queue"):
        app.task(name="e", queue="")(f)
    with pytest.raises(ValueError, match="concurrency"):
        app.worker(concurrency=0)
    app.task(name="g", rate={"count": 5, "per": 1.0})(f)
    assert "g" in app.task_names()


def test_broker_errors_are_broker_error() -> None:
    with pytest.raises(BrokerError) as info:
        headway.App("redis://:secret@127.0.0.1:1/0")
    assert "secret" not in str(info.value)
    with pytest.raises(ValueError, match="broker"):
        headway.App("kafka://localhost")
    # A RabbitMQ URL is no Redis broker: refused naming what it is, password hidden.
    with pytest.raises(ValueError, match="expected redis://.*got \"amqps\"") as later:
        headway.RedisBroker("amqps://u:secret@h:5671/")
    assert "secret" not in str(later.value)
    with pytest.raises(TypeError, match="clock"):
        headway.App(clock=object())  # type: ignore[arg-type]


def test_queues_and_priorities(apps: Apps) -> None:
    app = apps.app()
    order: list[str] = []

    @app.task(name="mail", queue="mail")
    def mail(tag: str) -> str:
        order.append(tag)
        return tag

    low = mail.apply_async(("low",), priority=9)
    high = mail.apply_async(("high",), priority=0)
    other = mail.apply_async(("elsewhere",), queue="other")
    # One claim at a time, so claim order is run order.
    apps.start(app, queues="mail", concurrency=1, prefetch=1)
    assert low.get(timeout=WAIT) == "low" and high.get(timeout=WAIT) == "high"
    assert order == ["high", "low"]
    assert other.state() == "PENDING"
    apps.start(app, queues=["other"])
    assert other.get(timeout=WAIT) == "elsewhere"
