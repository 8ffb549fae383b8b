"""Values that cannot be walked to JSON safely: a value that contains itself,
and one nested past the core's limit (100 levels, the outermost counting as
one). Both are a ``ValueError`` naming where — at send, to the caller; at a
body's return, as the run's failure, with the worker going on. Before the
limit, converting such a value overflowed the thread's stack and killed the
process."""

from __future__ import annotations

import re
from typing import Any

import pytest

import headway
from headway import TaskFailed

from conftest import Apps

WAIT = 10.0


def nested(levels: int) -> list[Any]:
    """A list nested ``levels`` deep (``[[...]]``), built without recursion."""
    v: list[Any] = []
    for _ in range(levels - 1):
        v = [v]
    return v


def test_a_circular_list_is_refused_at_send_naming_where() -> None:
    app = headway.App("memory://")

    @app.task(name="t")
    def t(*a: Any) -> None:
        pass

    a: list[Any] = []
    a.append(a)
    with pytest.raises(ValueError) as e:
        t.delay(a)
    assert str(e.value) == (
        "t: args[0][0] is args[0] again (a value that contains itself), which JSON cannot carry"
    )
    # Nothing went out.
    assert app.send("t", (1,)).id  # the app still sends


def test_circular_dicts_and_tuples_are_refused() -> None:
    app = headway.App("memory://")

    @app.task(name="t")
    def t(*a: Any, **k: Any) -> None:
        pass

    d: dict[str, Any] = {}
    d["me"] = d
    with pytest.raises(ValueError, match=re.escape("t: args[0]['me'] is args[0] again")):
        t.delay(d)
    inner: list[Any] = []
    tup = (1, inner)
    inner.append(tup)
    with pytest.raises(ValueError, match=re.escape("t: args[1][1][0] is args[1] again")):
        t.delay(0, tup)
    with pytest.raises(ValueError, match=re.escape("t: kwargs['k']['me'] is kwargs['k'] again")):
        t.apply_async((), {"k": d})
    # The args tuple itself is level 1: a list holding it is not a cycle of
    # the args, but the same list twice side by side is no cycle at all.
    shared = [1, 2]
    t.delay(shared, shared, [shared])


def test_nesting_is_refused_past_the_core_limit_and_not_at_it() -> None:
    app = headway.App("memory://")

    @app.task(name="t")
    def t(*a: Any) -> None:
        pass

    # args is level 1, so the argument may nest 99 more.
    t.delay(nested(99))  # positive control: at the limit
    with pytest.raises(ValueError) as e:
        t.delay(nested(100))
    assert str(e.value) == (
        "t: args[0]" + "[0]" * 99 + " nests deeper than 100 levels, which JSON here cannot carry"
    )
    # Far deeper: no crash, no RecursionError — the same refusal.
    with pytest.raises(ValueError, match="nests deeper than 100 levels"):
        t.delay(nested(10_000))
    deep: dict[str, Any] = {}
    for _ in range(10_000):
        deep = {"k": deep}
    with pytest.raises(ValueError, match=re.escape("t: args[0]['k']['k']")):
        t.delay(deep)
    deep_t: tuple[Any, ...] = ()
    for _ in range(10_000):
        deep_t = (deep_t,)
    with pytest.raises(ValueError, match="nests deeper than 100 levels"):
        t.delay(deep_t)


def test_a_body_returning_a_circular_value_fails_its_run_and_the_worker_goes_on(
    apps: Apps,
) -> None:
    app = apps.app()

    @app.task(name="loop")
    def loop() -> Any:
        a: list[Any] = []
        a.append(a)
        return a

    @app.task(name="deep")
    def deep() -> Any:
        return nested(10_000)

    @app.task(name="fine")
    def fine(x: int) -> int:
        return x + 1

    apps.start(app, concurrency=1)
    h = loop.delay()
    with pytest.raises(TaskFailed) as e:
        h.get(timeout=WAIT)
    assert e.value.type == "ValueError"
    assert e.value.message == (
        "loop: result[0] is result again (a value that contains itself), which JSON cannot carry"
    )
    assert h.state() == "FAILURE"
    h2 = deep.delay()
    with pytest.raises(TaskFailed, match="deep: result" + re.escape("[0]" * 100) + " nests deeper"):
        h2.get(timeout=WAIT)
    # The same worker (concurrency 1: the same runner) runs the next task.
    assert fine.delay(1).get(timeout=WAIT) == 2


def test_an_async_body_returning_a_circular_value_fails_its_run(apps: Apps) -> None:
    app = apps.app()

    @app.task(name="aloop")
    async def aloop() -> Any:
        d: dict[str, Any] = {}
        d["d"] = d
        return d

    @app.task(name="afine")
    async def afine() -> str:
        return "ok"

    apps.start(app, concurrency=1)
    with pytest.raises(TaskFailed, match=re.escape("aloop: result['d'] is result again")):
        aloop.delay().get(timeout=WAIT)
    assert afine.delay().get(timeout=WAIT) == "ok"
