"""The task side's values and in-process parts: clocks, rhythms (cron across
daylight-saving changes), backoffs, JSON conversion, the exception classes,
and ``headway.schedule`` — none of which needs a broker."""

from __future__ import annotations

import asyncio
import enum
import pickle
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

import headway
from headway import At, Cron, Every, Exponential, Fixed
from headway.schedule import Scheduler
from headway.testing import VirtualClock

from conftest import START, T0

UTC = timezone.utc


def z(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# ---------------------------------------------------------------- clocks


def test_virtual_clock_moves_only_forward() -> None:
    c = VirtualClock(start=START)
    assert c.now() == T0 and c.datetime() == START
    c.advance(1.5)
    c.advance(timedelta(minutes=1))
    assert c.now() == T0 + 61.5
    c.advance(-100)
    c.advance_to(T0)
    assert c.now() == T0 + 61.5
    c.advance_to(START + timedelta(hours=1))
    assert c.datetime() == START + timedelta(hours=1)
    assert VirtualClock().now() == 0.0
    assert VirtualClock(start=1_000.25).now() == 1_000.25
    with pytest.raises(ValueError, match="timezone-aware"):
        VirtualClock(start=datetime(2026, 1, 1))
    with pytest.raises(TypeError, match="start"):
        VirtualClock(start="now")  # type: ignore[arg-type]


def test_app_reads_its_clock() -> None:
    c = VirtualClock(start=START)
    app = headway.App(clock=c)
    assert app.now() == T0
    c.advance(5)
    assert app.now() == T0 + 5
    assert abs(headway.App().now() - time.time()) < 5


# ---------------------------------------------------------------- rhythms


def test_every_keeps_phase_and_anchors() -> None:
    e = Every(60)
    assert e.interval == 60.0 and e.anchor is None
    assert e.first(T0) == START + timedelta(minutes=1)
    # The next time comes from the time that was due, not from when it ran.
    assert e.after(START + timedelta(minutes=1)) == START + timedelta(minutes=2)
    hourly = Every(timedelta(hours=1), anchor=0)
    assert hourly.first(T0 + 10) == START + timedelta(hours=1)
    assert hourly.first(T0) == START
    assert Every(60) == Every(60.0) and Every(60) != Every(61)
    assert hash(Every(60)) == hash(Every(60))
    with pytest.raises(ValueError, match="interval"):
        Every(0)
    with pytest.raises(TypeError):
        Every("1m")  # type: ignore[arg-type]


def test_at_fires_once_even_when_past() -> None:
    a = At(START)
    assert a.when == START
    assert a.first(T0 + 3600) == START
    assert a.after(START) is None
    assert At(T0) == At(START)


def test_cron_parses_and_refuses() -> None:
    c = Cron("*/5 * * * *", tz="UTC")
    assert (c.expr, c.tz) == ("*/5 * * * *", "UTC")
    assert c.first(T0 + 1) == START + timedelta(minutes=5)
    assert c.first(T0) == START
    assert Cron("@hourly").after(T0) == START + timedelta(hours=1)
    assert Cron("0 9 * * MON-FRI").first(T0) == z(2026, 1, 1, 9)  # a Thursday
    with pytest.raises(ValueError, match="5"):
        Cron("0 * * * * *")
    with pytest.raises(ValueError, match="never fires"):
        Cron("0 0 31 2 *")
    with pytest.raises(ValueError, match="tz"):
        Cron("* * * * *", tz="Mars/Olympus")


def test_cron_across_spring_forward() -> None:
    # New York springs forward on 2026-03-08: 02:00 EST becomes 03:00 EDT.
    daily = Cron("30 2 * * *", tz="America/New_York")
    before = z(2026, 3, 7, 7, 30)  # 02:30 EST on the 7th
    assert daily.first(before) == before
    # 02:30 does not exist on the 8th: it fires at the first instant after
    # the gap (03:00 EDT = 07:00Z), so a daily job is never lost...
    gap = daily.after(before)
    assert gap == z(2026, 3, 8, 7, 0)
    # ... and is back on 02:30 (now EDT, 06:30Z) the day after.
    assert daily.after(gap) == z(2026, 3, 9, 6, 30)
    # A step line just skips the minutes that did not happen.
    steps = Cron("*/30 * * * *", tz="America/New_York")
    t = z(2026, 3, 8, 6, 30)  # 01:30 EST
    assert steps.after(t) == z(2026, 3, 8, 7, 0)  # 03:00 EDT, thirty real minutes on


def test_cron_across_fall_back() -> None:
    # New York falls back on 2026-11-01: 01:00-02:00 happens twice.
    daily = Cron("30 1 * * *", tz="America/New_York")
    oct31 = z(2026, 10, 31, 5, 30)  # 01:30 EDT
    first_pass = daily.after(oct31)
    assert first_pass == z(2026, 11, 1, 5, 30)  # the first 01:30 (EDT)
    # A fixed time that happens twice fires once.
    assert daily.after(first_pass) == z(2026, 11, 2, 6, 30)  # 01:30 EST the next day
    # A step line fires on both passes: every 30 real minutes.
    steps = Cron("*/30 * * * *", tz="America/New_York")
    t = z(2026, 11, 1, 5, 0)  # 01:00 EDT
    seen = []
    for _ in range(4):
        nxt = steps.after(t)
        assert nxt is not None
        seen.append(nxt)
        t = nxt
    assert seen == [z(2026, 11, 1, 5, 30), z(2026, 11, 1, 6, 0), z(2026, 11, 1, 6, 30), z(2026, 11, 1, 7, 0)]


def test_beat_on_cron_across_a_dst_change() -> None:
    clock = VirtualClock(start=z(2026, 3, 7, 5, 0))  # 00:00 EST
    app = headway.App(clock=clock)

    @app.task(name="nightly")
    def nightly() -> str:
        return f"{headway.current().now:%Y-%m-%d %H:%M}Z"

    beat = app.beat()
    beat.add("nightly", nightly, (), Cron("30 2 * * *", tz="America/New_York"))
    w = app.worker()
    w.start()
    try:
        ran = []
        for _ in range(3):
            _, when = beat.pending()[0]
            clock.advance_to(when)
            for _, _, h in beat.tick():
                ran.append(h.get(timeout=10))
        assert ran == ["2026-03-07 07:30Z", "2026-03-08 07:00Z", "2026-03-09 06:30Z"]
    finally:
        w.stop(1.0)


# ---------------------------------------------------------------- backoff


def test_task_backoffs() -> None:
    f = Fixed(0.5)
    assert f.delay == 0.5
    assert [f.wait_before(a, "x") for a in (1, 2, 3)] == [0.0, 0.5, 0.5]
    e = Exponential(base=1.0, cap=5.0, jitter=False)
    assert (e.base, e.cap, e.jitter) == (1.0, 5.0, False)
    assert [e.wait_before(a, "x") for a in range(1, 7)] == [0, 1, 2, 4, 5, 5]
    j = Exponential()
    assert (j.base, j.cap, j.jitter) == (1.0, 600.0, True)
    # The jitter is derived from the id and the attempt: the same everywhere.
    assert j.wait_before(3, "abc") == j.wait_before(3, "abc")
    assert 0 <= j.wait_before(3, "abc") <= 2.0
    assert j.wait_before(3, "abc") != j.wait_before(3, "abd")
    assert Fixed(1) == Fixed(1.0) and Exponential() == Exponential(1.0, 600.0, True)
    with pytest.raises(ValueError, match="delay"):
        Fixed(-1)
    with pytest.raises(ValueError, match="base"):
        Exponential(base=-1)


# ---------------------------------------------------------------- JSON


class Color(str, enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


def test_json_conversion() -> None:
    rt = headway._native._json_roundtrip
    assert rt((1, (2, 3))) == [1, [2, 3]]
    assert rt({"a": [True, None, 1.25, "x"]}) == {"a": [True, None, 1.25, "x"]}
    assert rt(Color.RED) == "red" and type(rt(Color.RED)) is str
    assert rt(Level.HIGH) == 3 and type(rt(Level.HIGH)) is int
    assert rt(True) is True
    assert rt(2**64 - 1) == 2**64 - 1 and rt(-(2**63)) == -(2**63)
    # bytes travel as kombu's typed value and come back as bytes.
    assert rt({"k": [1, b"x"]}) == {"k": [1, b"x"]}
    with pytest.raises(TypeError, match=r"value\['k'\]\[1\] is a frozenset"):
        rt({"k": [1, frozenset()]})
    with pytest.raises(TypeError, match="keys must be str"):
        rt({(1,): 1})
    with pytest.raises(ValueError, match="finite"):
        rt(float("inf"))


# ---------------------------------------------------------------- errors


def test_exception_hierarchy_and_pickling() -> None:
    for cls in (
        headway.TaskFailed,
        headway.Timeout,
        headway.Revoked,
        headway.Missing,
        headway.UnknownTask,
        headway.BrokerError,
    ):
        assert issubclass(cls, headway.Refused)
    assert issubclass(headway.Timeout, TimeoutError)
    e = headway.TaskFailed("KeyError", "'x'", "Traceback ...", "builtins")
    back = pickle.loads(pickle.dumps(e))
    assert (back.type, back.message, back.traceback, back.module) == (
        "KeyError",
        "'x'",
        "Traceback ...",
        "builtins",
    )
    assert str(back) == "KeyError: 'x'"
    assert pickle.loads(pickle.dumps(headway.Revoked("id-1"))).id == "id-1"
    assert pickle.loads(pickle.dumps(headway.UnknownTask("n"))).name == "n"


def test_worker_properties() -> None:
    app = headway.App()
    w = app.worker(queues="a, b", concurrency=3)
    assert w.queues == ["a", "b"] and w.concurrency == 3 and w.prefetch == 12
    assert w.settled == 0 and w.name.startswith("worker-")
    assert app.worker(prefetch=1, concurrency=2).prefetch == 2
    # The core splits every name at commas (a list's too) and refuses a
    # list that names no queue (a worker that would never claim).
    assert app.worker(queues=["a,b", " c "]).queues == ["a", "b", "c"]
    for none in ([], " , ", [""]):
        with pytest.raises(ValueError, match="invalid `queues`: must name at least one queue"):
            app.worker(queues=none)
    w.stop()  # stopping one that never ran is harmless


def test_a_worker_runs_once() -> None:
    app = headway.App()
    w = app.worker()
    w.start()
    w.stop(1.0)
    with pytest.raises(RuntimeError, match="already run"):
        w.start()


# ---------------------------------------------------------------- schedule


def test_scheduler_on_the_virtual_clock() -> None:
    clock = VirtualClock(start=START)
    s = Scheduler(clock=clock)
    calls: list[tuple[str, timedelta]] = []

    def flush() -> None:
        c = headway.current()
        calls.append((c.name, c.now - START))

    async def report() -> None:
        await asyncio.sleep(0)
        calls.append(("report", headway.current().now - START))

    def broken() -> None:
        raise RuntimeError("job failed")

    s.add("flush", flush, Every(10))
    s.add("report", report, Cron("*/1 * * * *"))
    s.add("broken", broken, Every(30))
    assert [n for n, _ in s.pending()] == ["report", "flush", "broken"]
    s.run(until=START + timedelta(minutes=1))
    flushes = [t for n, t in calls if n == "flush"]
    assert flushes == [timedelta(seconds=10 * i) for i in range(1, 7)]
    assert [t for n, t in calls if n == "report"] == [timedelta(0), timedelta(minutes=1)]
    st = s.stats("broken")
    assert st is not None and st["fired"] == 2 and st["failed"] == 2
    assert "job failed" in (st["last_error"] or "")
    assert s.stats("nope") is None
    assert s.remove("broken") and not s.remove("broken")
    clock.advance(10)
    assert s.tick() == [("flush", START + timedelta(seconds=70))]
    s.stop()


def test_scheduler_start_and_stop_on_the_system_clock() -> None:
    s = Scheduler()
    hits: list[int] = []
    done = threading.Event()

    def job() -> None:
        hits.append(1)
        if len(hits) >= 3:
            done.set()

    s.add("job", job, Every(0.02))
    s.start()
    assert done.wait(10)
    s.stop()
    n = len(hits)
    time.sleep(0.1)
    assert len(hits) == n  # stopped means stopped


def test_scheduler_refuses_bad_arguments() -> None:
    s = Scheduler()
    with pytest.raises(TypeError, match="callable"):
        s.add("x", 1, Every(1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="rhythm"):
        s.add("x", lambda: None, 5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="name"):
        s.add("", lambda: None, Every(1))
    with pytest.raises(TypeError, match="clock"):
        Scheduler(clock=time.time)  # type: ignore[arg-type]


def test_context_repr_and_fields() -> None:
    clock = VirtualClock(start=START)
    app = headway.App(clock=clock)
    got: dict[str, Any] = {}

    @app.task(name="peek", bind=True)
    def peek(ctx: headway.Context, **kw: Any) -> None:
        got.update(
            repr=repr(ctx), kwargs=ctx.kwargs, root=ctx.root_id, parent=ctx.parent_id, now=ctx.now
        )

    w = app.worker()
    w.start()
    h = peek.delay(a=1)
    h.get(timeout=10)
    w.stop(1.0)
    assert got["repr"].startswith(f"Context(id={h.id!r}, name='peek', queue='default'")
    assert got["kwargs"] == {"a": 1}
    assert got["root"] in (None, h.id) and got["parent"] is None
    assert got["now"] == START
