"""Backoff and Jitter: ceilings, every jitter, clamping, schedule, errors."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest

from headway import Backoff, Jitter

MS = 1e-3


def close_to(a: float, b: float) -> bool:
    return abs(a - b) < 1e-12


def mk(j: Jitter) -> Backoff:
    return Backoff(base=0.1, factor=2.0, cap=1.0, attempts=5, jitter=j)


def test_defaults_are_grpc() -> None:
    b = Backoff()
    assert (b.base, b.factor, b.cap, b.attempts, b.jitter) == (0.1, 2.0, 1.0, 3, Jitter.FULL)
    assert repr(b) == "Backoff(base=0.1, factor=2.0, cap=1.0, attempts=3, jitter=Jitter.FULL)"
    assert b == Backoff() and b != Backoff(attempts=4)
    assert hash(b) == hash(Backoff())


def test_ceiling_doubles_to_cap() -> None:
    b = Backoff()
    assert [b.ceiling(r) for r in (-3, 0, 1, 2, 3, 4, 5, 1000)] == [
        0.0, 0.0, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0,
    ]
    assert b.ceiling(2**70) == 1.0  # a huge retry clamps, it does not overflow


def test_each_jitter() -> None:
    assert close_to(mk(Jitter.RIGID).delay(2, random=0.9), 0.2)
    assert close_to(mk(Jitter.FULL).delay(2, random=0.5), 0.1)
    assert mk(Jitter.FULL).delay(2, random=0.0) == 0.0
    assert close_to(mk(Jitter.EQUAL).delay(2, random=0.0), 0.1)
    assert close_to(mk(Jitter.EQUAL).delay(2, random=0.5), 0.15)
    dec = mk(Jitter.DECORRELATED)
    assert close_to(dec.delay(1, random=0.0), 0.1)
    assert close_to(dec.delay(1, random=0.5), 0.2)
    assert close_to(dec.delay(3, random=0.5, previous=0.2), 0.35)
    assert close_to(dec.delay(3, random=0.5, previous=timedelta(milliseconds=900)), 0.55)
    for j in (Jitter.RIGID, Jitter.FULL, Jitter.EQUAL, Jitter.DECORRELATED):
        assert mk(j).delay(0, random=0.5) == 0.0


def test_draws_are_clamped() -> None:
    b = Backoff()
    assert b.delay(1, random=1.0) < 0.1
    assert b.delay(1, random=7.0) < 0.1
    assert b.delay(1, random=-1.0) == 0.0
    assert b.delay(1, random=math.nan) == 0.0


def test_default_draw_is_random_and_in_range() -> None:
    b = Backoff()
    draws = {b.delay(1) for _ in range(100)}
    assert len(draws) > 90
    assert all(0.0 <= d < 0.1 for d in draws)


def test_more_counts_attempts() -> None:
    b = Backoff()
    assert [b.more(m) for m in (-1, 0, 1, 2, 3)] == [False, True, True, True, False]


def test_schedule() -> None:
    b = Backoff(base=0.1, factor=2.0, cap=1.0, attempts=4, jitter=Jitter.FULL)
    got = b.schedule([0.5, 0.5])
    assert len(got) == 3 and close_to(got[0], 0.05) and close_to(got[1], 0.1) and got[2] == 0.0
    rigid = Backoff(attempts=3, jitter=Jitter.RIGID)
    assert rigid.schedule([]) == [0.1, 0.2]
    assert Backoff(attempts=0).schedule() == []
    dec = Backoff(attempts=4, jitter=Jitter.DECORRELATED).schedule((0.5, 0.5, 0.5))
    assert all(close_to(a, e) for a, e in zip(dec, [0.2, 0.35, 0.55], strict=True))
    # Omitted: every draw is 0, as in Node (the same plan on every call).
    assert b.schedule() == [0.0, 0.0, 0.0]
    assert b.schedule(None) == [0.0, 0.0, 0.0]
    with pytest.raises(TypeError, match="`randoms` must be a number, not str"):
        b.schedule(["x"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="`randoms` must be a sequence"):
        b.schedule(3)  # type: ignore[arg-type]


def test_spans_accept_timedelta() -> None:
    assert Backoff(base=timedelta(milliseconds=250), cap=timedelta(seconds=2)) == Backoff(
        base=0.25, cap=2.0
    )


def test_jitter_enum() -> None:
    members = [Jitter.RIGID, Jitter.FULL, Jitter.EQUAL, Jitter.DECORRELATED]
    assert [m.name for m in members] == ["RIGID", "FULL", "EQUAL", "DECORRELATED"]
    assert [m.value for m in members] == ["rigid", "full", "equal", "decorrelated"]
    assert repr(Jitter.EQUAL) == "Jitter.EQUAL"
    assert Jitter.FULL == Jitter.FULL and Jitter.FULL != Jitter.RIGID
    assert len(set(members)) == 4
    assert Backoff().jitter is Jitter.FULL
    match Backoff(jitter="equal").jitter:
        case Jitter.EQUAL:
            pass
        case _:
            pytest.fail("jitter name did not parse")
    assert Backoff(jitter="DECORRELATED").jitter == Jitter.DECORRELATED


@pytest.mark.parametrize(
    ("kwargs", "arg", "err"),
    [
        ({"base": -1.0}, "base", ValueError),
        ({"cap": -0.001}, "cap", ValueError),
        ({"factor": 0.5}, "factor", ValueError),
        ({"factor": math.nan}, "factor", ValueError),
        ({"factor": math.inf}, "factor", ValueError),
        ({"attempts": -3}, "attempts", ValueError),
        ({"attempts": 1.5}, "attempts", TypeError),
        ({"base": "fast"}, "base", TypeError),
        ({"base": math.nan}, "base", ValueError),
        ({"jitter": "wobbly"}, "jitter", ValueError),
        ({"jitter": 2}, "jitter", TypeError),
    ],
)
def test_refuses_bad_knobs(kwargs: dict[str, object], arg: str, err: type[Exception]) -> None:
    with pytest.raises(err, match=f"`{arg}`"):
        Backoff(**kwargs)  # type: ignore[arg-type]


def test_bad_call_arguments() -> None:
    b = Backoff()
    with pytest.raises(TypeError, match="`random` must be a number, not str"):
        b.delay(1, random="0.5")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`retry` must be an int"):
        b.delay(1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`previous` must be seconds"):
        b.delay(1, previous="1s")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`made` must be an int"):
        b.more(None)  # type: ignore[arg-type]
