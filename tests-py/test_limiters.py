"""Bucket, Window and Gate, with explicit times; the runtime helpers too."""

from __future__ import annotations

import asyncio
import math
import time
from datetime import timedelta

import pytest

import headway
from headway import Bucket, Full, Gate, Window


# ---------------------------------------------------------------- Bucket


def test_bucket_starts_full_and_refills() -> None:
    b = Bucket(10.0, burst=2.0)
    assert b.take(0.0) and b.take(0.0)
    assert not b.take(0.0)
    assert b.next(0.0) == pytest.approx(0.1)
    assert not b.take(0.099)
    assert b.take(0.1)
    assert b.tokens(10.0) == pytest.approx(2.0)
    assert (b.rate, b.burst) == (10.0, 2.0)
    assert repr(b) == "Bucket(rate=10.0, burst=2.0)"


def test_bucket_takes_n() -> None:
    b = Bucket(1.0, burst=5.0)
    assert b.take(0.0, n=3.0)
    assert not b.take(0.0, n=3.0)
    assert b.tokens(0.0) == pytest.approx(2.0)
    assert b.next(0.0, n=3.0) == pytest.approx(1.0)
    assert b.take(1.0, n=3)


def test_bucket_burst_defaults() -> None:
    assert Bucket(100.0).burst == 100.0
    assert Bucket(0.5).burst == 1.0
    assert Bucket(5.0, burst=0.2).burst == 1.0


def test_bucket_never_and_backwards() -> None:
    b = Bucket(1.0, burst=1.0)
    assert b.next(0.0, n=2.0) == math.inf
    assert b.take(1.0)
    assert not b.take(0.0)  # time running backwards adds nothing
    assert b.tokens(0.0) == 0.0
    z = Bucket(0.0, burst=1.0)
    assert z.next(0.0) == 0.0
    assert z.take(0.0)
    assert z.next(1.0) == math.inf


def test_bucket_next_is_enough() -> None:
    b = Bucket(3.0, burst=1.0)
    assert b.take(0.0)
    wait = b.next(0.0)
    assert b.take(wait)


def test_bucket_at_is_where_it_starts_full() -> None:
    b = Bucket(1.0, burst=1.0, at=timedelta(seconds=100))
    assert b.take(100.0)
    assert not b.take(100.5)
    assert b.take(101.0)


def test_bucket_default_clock() -> None:
    b = Bucket(1000.0, burst=1.0)
    assert b.take()
    # The default clock is time.monotonic(): an explicit read agrees with it.
    assert b.take(time.monotonic() + 0.01)


@pytest.mark.parametrize(
    ("args", "kwargs", "arg", "err"),
    [
        ((math.nan,), {}, "rate", ValueError),
        ((-1.0,), {}, "rate", ValueError),
        ((math.inf,), {}, "rate", ValueError),
        ((1.0,), {"burst": math.nan}, "burst", ValueError),
        ((1.0,), {"burst": -2.0}, "burst", ValueError),
        (("ten",), {}, "rate", TypeError),
        ((1.0,), {"at": "now"}, "at", TypeError),
    ],
)
def test_bucket_refuses_bad_arguments(
    args: tuple[object, ...], kwargs: dict[str, object], arg: str, err: type[Exception]
) -> None:
    with pytest.raises(err, match=f"`{arg}`"):
        Bucket(*args, **kwargs)  # type: ignore[arg-type]
    b = Bucket(1.0)
    with pytest.raises(TypeError, match="`n` must be a number"):
        b.take(0.0, n="one")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`now` must be a number"):
        b.next(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`n`"):
        Bucket(1.0, burst=1.0).take(0.0, n=-5.0)
    with pytest.raises(ValueError, match="`n`"):
        b.next(0.0, n=math.nan)
    with pytest.raises(ValueError, match="`now`"):
        b.take(math.nan)


@pytest.mark.asyncio
async def test_bucket_wait_sleeps_next_then_takes() -> None:
    b = Bucket(50.0, burst=1.0)  # one token every 20 ms
    await b.wait()
    start = time.monotonic()
    await b.wait()
    took = time.monotonic() - start
    assert 0.01 <= took < 0.5
    assert b.tokens() < 1.0


@pytest.mark.asyncio
async def test_bucket_wait_never_raises() -> None:
    b = Bucket(1.0, burst=1.0)
    with pytest.raises(ValueError, match="never"):
        await b.wait(n=5.0)



# ---------------------------------------------------------------- Window


def test_window_exact_count() -> None:
    w = Window(3, 10.0)
    assert w.take(0.0) and w.take(1.0) and w.take(2.0)
    assert not w.take(3.0)
    assert w.left(3.0) == 0
    assert w.next(3.0) == pytest.approx(7.0)
    # At exactly 10 s the first event has left.
    assert w.left(10.0) == 1
    assert w.next(10.0) == 0.0
    assert w.take(10.0)
    assert not w.take(10.0)
    assert w.next(10.0) == pytest.approx(1.0)
    assert (w.allow, w.window) == (3, 10.0)
    assert repr(w) == "Window(allow=3, window=10.0)"


def test_window_a_day_is_a_window() -> None:
    day = Window(1000, timedelta(days=1))
    assert all(day.take(i * 0.001) for i in range(1000))
    assert not day.take(60.0)  # the whole day spent in the first second
    assert day.next(60.0) == pytest.approx(86400.0 - 60.0)


def test_window_zero_allow_and_backwards() -> None:
    w = Window(0, 1.0)
    assert not w.take(0.0)
    assert w.left(0.0) == 0
    assert w.next(0.0) == math.inf
    b = Window(2, 10.0)
    assert b.take(5.0) and b.take(1.0)
    assert not b.take(1.0)
    assert b.left(16.0) == 2


def test_window_refuses_bad_arguments() -> None:
    with pytest.raises(ValueError, match="`allow`"):
        Window(-1, 1.0)
    with pytest.raises(ValueError, match="`window`"):
        Window(1, 0.0)
    with pytest.raises(ValueError, match="`window`"):
        Window(1, timedelta(seconds=-1))
    with pytest.raises(TypeError, match="`allow` must be an int"):
        Window(1.5, 1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`window` must be seconds"):
        Window(1, None)  # type: ignore[arg-type]


# ---------------------------------------------------------------- Gate


def test_gate_ceiling() -> None:
    g = Gate(2)
    assert g.enter() and g.enter()
    assert not g.enter()
    assert g.held == 2 and g.limit == 2
    g.leave()
    assert g.enter()
    for _ in range(5):
        g.leave()
    assert g.held == 0
    assert not Gate(0).enter()
    assert repr(Gate(3)) == "Gate(limit=3, held=0)"


def test_gate_refuses_bad_limit() -> None:
    with pytest.raises(ValueError, match="`limit`"):
        Gate(-1)
    with pytest.raises(TypeError, match="`limit` must be an int"):
        Gate("4")  # type: ignore[arg-type]


def test_gate_with_raises_full_and_leaves_on_error() -> None:
    g = Gate(1)
    with g:
        assert g.held == 1
        with pytest.raises(Full, match="1 of 1"):
            with g:
                pass  # pragma: no cover
        assert g.held == 1
    assert g.held == 0
    with pytest.raises(KeyError):
        with g:
            raise KeyError("body")
    assert g.held == 0


@pytest.mark.asyncio
async def test_gate_async_with() -> None:
    g = Gate(1)
    inside = asyncio.Event()
    release = asyncio.Event()

    async def holder() -> None:
        async with g:
            inside.set()
            await release.wait()

    task = asyncio.create_task(holder())
    await inside.wait()
    with pytest.raises(Full):
        async with g:
            pass  # pragma: no cover
    release.set()
    await task
    assert g.held == 0
    async with g as same:
        assert same is g and g.held == 1


def test_subclasses_are_the_native_classes() -> None:
    assert issubclass(headway.Bucket, headway._native.Bucket)
    assert issubclass(headway.Gate, headway._native.Gate)
    assert not hasattr(Gate(1), "__dict__")
