"""Pool rules, driven with explicit times (float seconds) and draws."""

from __future__ import annotations

import gc
import math
import sys
from datetime import timedelta

import pytest

from headway import (
    Backoff,
    Breaker,
    Jitter,
    Later,
    Limits,
    Make,
    Pool,
    Ready,
    Shed,
    Stale,
    Taken,
    Wait,
    Ward,
    pick,
)


def fill(pool: Pool[object], items: list[object], now: float = 0.0) -> None:
    for it in items:
        assert pool.take(now) == Make()
        pool.made(it, now)


# ---------------------------------------------------------------- answers


def test_answers_match_and_compare() -> None:
    conn = {"dsn": "x"}
    r = Ready(conn)
    match r:
        case Ready(item):
            assert item is conn
        case _:
            pytest.fail("Ready did not match")
    match Later(0.25):
        case Later(delay):
            assert delay == 0.25
        case _:
            pytest.fail("Later did not match")
    assert Ready(1) == Ready(1) and Ready(1) != Ready(2) and Ready(1) != Stale(1)
    assert Stale("a") == Stale("a")
    assert Later(0.5) == Later(0.5) and Later(0.5) != Later(0.25)
    assert hash(Later(0.5)) == hash(Later(0.5))
    assert hash(Ready(1)) == hash(Ready(1))
    assert Make() == Make() and Make() != Wait() and Wait() != Shed()
    assert Make() is Make() and Wait() is Wait() and Shed() is Shed()
    assert {Make(), Make(), Wait()} == {Make(), Wait()}
    assert repr(Ready([1])) == "Ready([1])"
    assert repr(Stale("s")) == "Stale('s')"
    assert repr(Later(0.049)) == "Later(0.049)"
    assert (repr(Make()), repr(Wait()), repr(Shed())) == ("Make()", "Wait()", "Shed()")
    assert Ready.__match_args__ == ("item",)
    assert Later.__match_args__ == ("delay",)
    assert Make.__match_args__ == ()
    # Not equal to other things, and no crash comparing.
    assert Ready(1) != 1 and Make() != "Make"
    with pytest.raises(TypeError):
        hash(Ready([1]))  # an unhashable item makes an unhashable answer, like a tuple


def test_taken_from_pool_are_the_singletons() -> None:
    p: Pool[int] = Pool(limits=Limits(size=1))
    assert p.take(0.0) is Make()
    assert p.take(0.0) is Wait()


def test_generic_subscripts_at_runtime() -> None:
    assert Pool[int].__origin__ is Pool  # type: ignore[attr-defined]
    assert Ready[str].__args__ == (str,)  # type: ignore[attr-defined]
    assert Taken[int] is not None


# ---------------------------------------------------------------- order and age


def test_newest_first() -> None:
    p: Pool[object] = Pool()
    a, b, c = object(), object(), object()
    fill(p, [a, b, c])
    p.give(a, 1.0)
    p.give(c, 2.0)
    p.give(b, 3.0)
    got = [p.take(4.0) for _ in range(3)]
    assert got == [Ready(b), Ready(c), Ready(a)]


def test_stale_is_handed_back_never_skipped() -> None:
    # moonpool 0.1.0 dropped an expired item without the caller seeing it.
    p: Pool[int] = Pool(limits=Limits(size=4, keep=1.0))
    for i in range(3):
        p.take(0.0)
        p.made(i, 0.0)
    for i in range(3):
        p.give(i, 0.0)
    stale = []
    while True:
        t = p.take(5.0)
        if isinstance(t, Stale):
            stale.append(t.item)
        else:
            assert t == Make()
            break
    assert stale == [2, 1, 0]
    assert p.live == 1  # only the reservation just made


def test_birth_is_kept_through_loans() -> None:
    # moonpool 0.1.0 stamped every given item as new, so life never retired one.
    p: Pool[object] = Pool(limits=Limits(size=2, keep=0, life=10.0))
    conn = object()
    fill(p, [conn])
    for t in range(1, 10):
        assert p.give(conn, float(t))
        assert p.take(float(t)) == Ready(conn)
    # Lent since 9 s but born at 0: at 11 s it is past its life.
    assert p.give(conn, 11.0) is False
    assert p.live == 0


def test_life_retires_reused_item_on_take() -> None:
    p: Pool[str] = Pool(limits=Limits(size=2, keep=0, life=4.0))
    p.take(0.0)
    p.made("c", 0.0)
    assert p.give("c", 3.9)
    assert p.take(4.5) == Stale("c")


def test_give_false_above_idle() -> None:
    p: Pool[object] = Pool(limits=Limits(size=4, idle=1, keep=0))
    a, b = object(), object()
    fill(p, [a, b])
    assert p.give(a, 0.0) is True
    assert p.give(b, 0.0) is False
    assert p.live == 1


def test_unregistered_item_fills_the_reserved_room() -> None:
    p: Pool[object] = Pool(limits=Limits(size=1, idle=1, keep=0, life=3.0))
    assert p.take(0.0) == Make()
    assert p.live == 1
    stranger = object()
    # Opened without made(); it comes back at 2 s and is born then.
    assert p.give(stranger, 2.0)
    assert p.live == 1
    assert p.take(4.0) == Ready(stranger)  # 2 s old, not 4
    # A stranger with no room is refused.
    assert p.give(object(), 4.0) is False
    assert p.live == 1


def test_drop_frees_the_slot() -> None:
    p: Pool[object] = Pool(limits=Limits(size=1))
    conn = object()
    fill(p, [conn])
    assert p.take(0.0) == Wait()
    p.drop(conn)
    assert p.live == 0
    assert p.take(0.0) == Make()
    p.drop(object())  # never registered: frees its reservation
    assert p.live == 0


def test_unmade_frees_the_room() -> None:
    p: Pool[int] = Pool(limits=Limits(size=1))
    assert p.take(0.0) == Make()
    assert p.take(0.0) == Wait()
    p.unmade(0.0, roll=0.5)
    assert p.take(0.0) == Make()


def test_evict_and_close() -> None:
    p: Pool[object] = Pool(limits=Limits(size=0, idle=0, keep=1.0))
    items = [object() for _ in range(3)]
    fill(p, items)
    p.give(items[0], 0.0)
    p.give(items[1], 0.9)
    evicted = p.evict(1.5)
    assert len(evicted) == 1 and evicted[0] is items[0]
    closed = p.close()
    assert len(closed) == 1 and closed[0] is items[1]
    assert (p.live, p.idle, p.busy) == (1, 0, 1)
    assert p.give(items[2], 2.0)  # a lent one still comes back after close


def test_unlimited_size() -> None:
    p: Pool[int] = Pool(limits=Limits(size=0, idle=0, keep=0, life=0))
    for i in range(100):
        assert p.take(0.0) == Make()
        p.made(i, 0.0)
    for i in range(100):
        assert p.give(i, 0.0)
    assert p.idle == 100


# ---------------------------------------------------------------- identity


def test_identity_with_unhashable_and_equal_items() -> None:
    p: Pool[list[int]] = Pool(limits=Limits(size=2, keep=0, life=5.0))
    a: list[int] = [1]
    b: list[int] = [1]  # equal to a, not a
    p.take(0.0)
    p.made(a, 0.0)
    p.take(3.0)
    p.made(b, 3.0)
    # b comes back first; it must keep *its* birth (3 s), not a's.
    assert p.give(b, 3.0)
    t = p.take(5.5)  # a would be 5.5 s old (stale); b is 2.5 s
    assert isinstance(t, Ready) and t.item is b
    assert p.give(a, 5.5) is False  # a, born at 0, is past its life
    d1: dict[str, int] = {}
    q: Pool[dict[str, int]] = Pool()
    q.take(0.0)
    q.made(d1, 0.0)
    assert q.give(d1, 0.0)
    got = q.take(0.0)
    assert isinstance(got, Ready) and got.item is d1


def test_pool_keeps_items_alive_and_releases_them() -> None:
    class Conn:
        pass

    p: Pool[Conn] = Pool()
    c = Conn()
    before = sys.getrefcount(c)
    p.take(0.0)
    p.made(c, 0.0)
    assert sys.getrefcount(c) == before + 1
    assert p.give(c, 0.0)
    assert sys.getrefcount(c) == before + 1
    t = p.take(0.0)
    assert sys.getrefcount(c) == before + 2  # lent copy + the Ready answer
    del t
    p.drop(c)
    gc.collect()
    assert sys.getrefcount(c) == before


# ---------------------------------------------------------------- ward


def test_breaker_sheds_by_roll() -> None:
    p: Pool[int] = Pool(limits=Limits(size=4), ward=Ward(breaker=Breaker()))
    for i in range(8):
        assert p.take(i * 0.1, roll=0.99) == Make()
        p.unmade(i * 0.1, roll=0.5)
    r = p.refusal(0.8)
    assert abs(r - 8 / 9) < 1e-12
    assert p.take(0.9, roll=r - 0.01) == Shed()
    assert p.take(0.9, roll=0.99) == Make()
    # Shed counted as a request: refusal grew.
    assert p.refusal(0.9) > r
    # made is an accept; the window forgets after two minutes.
    p.made(1, 1.0)
    assert p.refusal(1.0) < p.refusal(0.9) or p.refusal(1.0) < r
    assert p.refusal(200.0) == 0.0


def test_refusal_reads_without_counting() -> None:
    p: Pool[int] = Pool(ward=Ward(breaker=Breaker(k=2.0, window=timedelta(seconds=10))))
    p.take(0.0, roll=0.99)
    p.unmade(0.0)
    first = p.refusal(0.0)
    for _ in range(5):
        assert p.refusal(0.0) == first
    assert Pool().refusal(0.0) == 0.0


def test_backoff_holds_with_remaining_and_made_resets() -> None:
    rigid = Backoff(base=0.1, factor=2.0, cap=1.0, attempts=3, jitter=Jitter.RIGID)
    p: Pool[int] = Pool(limits=Limits(size=4), ward=Ward(backoff=rigid))
    p.take(0.0)
    p.unmade(0.0, roll=0.5)
    assert p.take(0.0) == Later(0.1)
    assert p.take(0.04) == Later(0.06)
    assert p.take(0.1) == Make()
    p.unmade(0.1, roll=0.5)  # second failure in a row: 200 ms
    assert p.take(0.1) == Later(0.2)
    ward = p.ward
    assert ward is not None and ward.failures == 2
    assert p.take(0.3) == Make()
    p.made(7, 0.3)
    ward = p.ward
    assert ward is not None and ward.failures == 0
    assert p.take(0.3) == Make()  # no hold after a success


def test_ward_parts_and_repr() -> None:
    w = Ward(breaker=Breaker(k=3.0, window=60.0), backoff=Backoff(attempts=5))
    assert w.breaker is not None and w.breaker.k == 3.0 and w.breaker.window == 60.0
    assert w.backoff == Backoff(attempts=5)
    assert Ward().breaker is None and Ward().backoff is None
    assert w.refusal(0.0) == 0.0
    assert "Ward(" in repr(w)
    assert Pool().ward is None


# ---------------------------------------------------------------- pick


def test_pick_lower_refusal_then_busy_then_first() -> None:
    quiet: Pool[int] = Pool(limits=Limits(size=4))
    busy: Pool[int] = Pool(limits=Limits(size=4))
    busy.take(0.0)
    busy.made(1, 0.0)
    refusing: Pool[int] = Pool(ward=Ward(breaker=Breaker()))
    for _ in range(3):
        refusing.take(0.0, roll=0.99)
        refusing.unmade(0.0)
    pools = [refusing, busy, quiet]
    assert pick(pools, 0.0, first=0.0, second=0.4) == 1  # refusal loses
    assert pick(pools, 0.0, first=0.4, second=0.7) == 2  # busy loses
    assert pick(pools, 0.0, first=0.7, second=0.7) == 2  # a tie: the first
    assert pick([quiet, Pool()], 0.0, first=0.0, second=0.9) == 0  # tie: the first
    assert pick(pools, 0.0, first=1.0, second=-3.0) == 2  # clamped: last vs first
    assert pick((quiet,), 0.0) == 0
    assert pick([], 0.0, first=0.0, second=0.0) is None
    assert pick([]) is None
    assert pick(iter([quiet, busy]), 0.0, first=0.9, second=0.9) == 1


def test_pick_refuses_non_pools() -> None:
    with pytest.raises(TypeError, match="`pools`.*item 1 is int"):
        pick([Pool(), 3])
    with pytest.raises(TypeError, match="`pools`"):
        pick(5)  # type: ignore[arg-type]


# ---------------------------------------------------------------- limits and errors


def test_limits_defaults_and_spans() -> None:
    lim = Limits()
    assert (lim.size, lim.idle, lim.keep, lim.life) == (10, 10, 1800.0, 0.0)
    # The sweep period is the core's: the shorter age, floored at 1 s.
    assert lim.evict_every == 1800.0
    assert Limits(keep=600, life=120).evict_every == 120.0
    assert Limits(keep=0.1).evict_every == 1.0
    assert Limits(keep=0, life=0).evict_every == 0.0
    assert Limits(keep=timedelta(minutes=5), life=timedelta(hours=1)) == Limits(
        keep=300.0, life=3600.0
    )
    assert Limits(keep=timedelta(microseconds=1)).keep == 1e-6
    assert Limits(size=3) != Limits()
    assert hash(Limits()) == hash(Limits())
    assert repr(Limits()) == "Limits(size=10, idle=10, keep=1800.0, life=0.0)"
    assert Limits(keep=math.inf).keep > 1e9  # saturates: effectively never
    assert Pool(limits=Limits(size=3)).limits == Limits(size=3)


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"size": -1}, "size"),
        ({"idle": -1}, "idle"),
        ({"keep": -0.5}, "keep"),
        ({"life": timedelta(seconds=-1)}, "life"),
    ],
)
def test_limits_refuse_negatives(kwargs: dict[str, object], arg: str) -> None:
    with pytest.raises(ValueError, match=f"`{arg}`"):
        Limits(**kwargs)  # type: ignore[arg-type]


def test_bad_types_name_the_argument() -> None:
    with pytest.raises(TypeError, match="`size` must be an int, not float"):
        Limits(size=2.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`keep` must be seconds"):
        Limits(keep="1s")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`keep`.*NaN"):
        Limits(keep=math.nan)
    with pytest.raises(ValueError, match="`size` is out of range"):
        Limits(size=2**80)
    with pytest.raises(TypeError, match="`limits` must be a Limits, not dict"):
        Pool(limits={"size": 1})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`ward` must be a Ward"):
        Pool(ward=Breaker())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`breaker` must be a Breaker"):
        Ward(breaker=Backoff())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`backoff` must be a Backoff"):
        Ward(backoff=1.0)  # type: ignore[arg-type]
    p: Pool[int] = Pool()
    with pytest.raises(TypeError, match="`roll` must be a number, not str"):
        p.take(0.0, roll="high")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`now` must be a number, not str"):
        p.take("noon")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`now` must be a finite"):
        p.take(math.nan)
    with pytest.raises(TypeError, match="`roll`"):
        p.unmade(0.0, roll=[0.5])  # type: ignore[arg-type]


def test_breaker_refuses_bad_knobs() -> None:
    with pytest.raises(ValueError, match="`k`"):
        Breaker(k=0.5)
    with pytest.raises(ValueError, match="`k`"):
        Breaker(k=math.nan)
    with pytest.raises(ValueError, match="`window`"):
        Breaker(window=0)
    with pytest.raises(TypeError, match="`k` must be a number"):
        Breaker(k="2")  # type: ignore[arg-type]
    b = Breaker()
    assert (b.k, b.window) == (2.0, 120.0)


def test_now_omitted_reads_the_monotonic_clock() -> None:
    import time

    p: Pool[object] = Pool(limits=Limits(keep=1000.0))
    c = object()
    p.take()
    p.made(c)
    assert p.give(c)
    # A pool driven by the default clock and by time.monotonic() agree.
    assert p.take(time.monotonic()) == Ready(c)
    p.give(c, time.monotonic())
    assert p.take(time.monotonic() + 1001.0) == Stale(c)


def test_default_roll_is_drawn() -> None:
    # Each fresh pool refuses 8/9 of makes; with drawn rolls both answers show
    # up (the chance that 300 draws never land in the 1/9 is below 1e-15).
    seen = set()
    for _ in range(300):
        p: Pool[int] = Pool(ward=Ward(breaker=Breaker()))
        for _ in range(8):
            p.take(0.0, roll=0.99)
            p.unmade(0.0)
        seen.add(type(p.take(0.0)))
    assert seen == {Shed, Make}


def test_a_cycle_through_a_pooled_item_is_collected() -> None:
    import gc
    import weakref

    class Conn:
        pool: Pool[Conn]

    def make() -> weakref.ref[Conn]:
        pool: Pool[Conn] = Pool()
        idle, lent = Conn(), Conn()
        idle.pool = pool
        lent.pool = pool
        for c in (idle, lent):
            assert pool.take(0.0) == Make()
            pool.made(c, 0.0)
        pool.give(idle, 0.0)
        return weakref.ref(lent)

    ref = make()
    gc.collect()
    assert ref() is None
