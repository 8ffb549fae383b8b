"""A body asks something of its run: ``ctx.retry(...)`` / ``TaskRetry``
(retried on its own terms, within its own budget), ``Reject`` (back to
the queue, or failed for good with why) and ``Ignore`` (nothing stored),
on every broker; a bad ask fails the run with a ``TypeError`` naming the
field."""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

import pytest

import headway

from conftest import Apps

WAIT = 20.0


def test_ctx_retry_runs_again_after_its_countdown_within_its_own_budget(apps: Apps) -> None:
    app = apps.app(clock=None)
    seen: list[int] = []

    @app.task(name="ask.flaky", bind=True)
    def flaky(ctx: headway.Context, n: int) -> str:
        seen.append(ctx.attempt)
        if ctx.attempt < n:
            # The task's own budget is 0 retries: the ask's max_retries rules.
            ctx.retry(countdown=0.05, max_retries=3)
        return f"ok on {ctx.attempt}"

    apps.start(app, concurrency=1)
    t = time.monotonic()
    assert flaky.delay(3).get(timeout=WAIT) == "ok on 3"
    assert seen == [1, 2, 3]
    assert time.monotonic() - t >= 0.1, "two countdowns of 50 ms"
    # Past the budget: MaxRetriesExceededError, after max_retries + 1 attempts.
    seen.clear()
    with pytest.raises(headway.TaskFailed) as e:
        flaky.delay(9).get(timeout=WAIT)
    assert e.value.type == "MaxRetriesExceededError"
    assert seen == [1, 2, 3, 4]


def test_a_retry_with_exc_records_it_and_fails_with_it_past_the_budget(apps: Apps) -> None:
    app = apps.app(clock=None)

    @app.task(name="ask.io", bind=True, retries=1)
    def io(ctx: headway.Context) -> None:
        try:
            raise ConnectionError("the disk is away")
        except ConnectionError as exc:
            raise headway.TaskRetry(countdown=0.01, exc=exc) from exc

    apps.start(app, concurrency=1)
    with pytest.raises(headway.TaskFailed) as e:
        io.delay().get(timeout=WAIT)
    # The task's retries (1) were the budget: two attempts, then exc.
    assert e.value.type == "ConnectionError"
    assert "the disk is away" in str(e.value)


def test_reject_with_requeue_goes_back_and_without_fails_naming_why(apps: Apps, tmp_path: Path) -> None:
    app = apps.app(clock=None)
    mark = tmp_path / "once"

    @app.task(name="ask.picky")
    def picky(requeue: bool) -> str:
        if not mark.exists():
            mark.write_text("x")
            raise headway.Reject("not yet", requeue=requeue)
        return "taken"

    apps.start(app, concurrency=1)
    # Requeued: the same message comes back and runs again.
    assert picky.delay(True).get(timeout=WAIT) == "taken"
    mark.unlink()
    with pytest.raises(headway.TaskFailed) as e:
        picky.delay(False).get(timeout=WAIT)
    assert e.value.type == "Reject"
    assert "not yet" in str(e.value)


def test_ignore_stores_nothing(apps: Apps) -> None:
    app = apps.app(clock=None)

    @app.task(name="ask.quiet")
    def quiet(skip: bool) -> str:
        if skip:
            raise headway.Ignore()
        return "stored"

    w = apps.start(app, concurrency=1)
    ignored = quiet.delay(True)
    # The positive control, sent after it on the same one-slot worker: once
    # it is stored, the ignored run was settled (and stored nothing).
    assert quiet.delay(False).get(timeout=WAIT) == "stored"
    end = time.monotonic() + WAIT
    while w.settled < 2 and time.monotonic() < end:
        time.sleep(0.01)
    assert w.settled == 2
    assert ignored.state() == "PENDING"
    with pytest.raises(headway.Timeout):
        ignored.get(timeout=0.2)


def test_a_bad_ask_fails_the_run_with_a_type_error_naming_the_field(apps: Apps) -> None:
    app = apps.app(clock=None)

    @app.task(name="ask.bad", bind=True)
    def bad(ctx: headway.Context) -> None:
        ctx.retry(countdown=-1)

    @app.task(name="ask.naive", bind=True)
    def naive(ctx: headway.Context) -> None:
        ctx.retry(eta=datetime(2030, 1, 1))

    apps.start(app, concurrency=1)
    with pytest.raises(headway.TaskFailed) as e:
        bad.delay().get(timeout=WAIT)
    assert e.value.type == "TypeError"
    assert "`countdown`" in str(e.value)
    # A naive eta is refused as every instant argument refuses it.
    with pytest.raises(headway.TaskFailed) as e:
        naive.delay().get(timeout=WAIT)
    assert e.value.type == "TypeError"
    assert "`eta` must be a timezone-aware datetime" in str(e.value)


class Flaky(ConnectionError):
    """A project's own error, derived from a builtin one."""


def test_retry_for_retries_only_the_named_types_and_their_subclasses(apps: Apps) -> None:
    app = apps.app(clock=None)
    seen: dict[str, list[int]] = {}

    @app.task(
        name="ask.filtered",
        bind=True,
        retries=2,
        backoff=headway.Fixed(0.01),
        retry_for=(ConnectionError,),
        dont_retry_for=PermissionError,
    )
    def filtered(ctx: headway.Context, kind: str) -> None:
        seen.setdefault(kind, []).append(ctx.attempt)
        raise {"flaky": Flaky, "value": ValueError, "perm": PermissionError}[kind](kind)

    apps.start(app, concurrency=1)
    # A subclass of a named type: retried (the positive control).
    with pytest.raises(headway.TaskFailed) as e:
        filtered.delay("flaky").get(timeout=WAIT)
    assert e.value.type == "Flaky"
    assert seen["flaky"] == [1, 2, 3]
    # Not named: fails at once, as in Celery without autoretry_for.
    with pytest.raises(headway.TaskFailed) as e:
        filtered.delay("value").get(timeout=WAIT)
    assert e.value.type == "ValueError"
    assert seen["value"] == [1]
    # Named by dont_retry_for (an OSError too, but excluded).
    with pytest.raises(headway.TaskFailed):
        filtered.delay("perm").get(timeout=WAIT)
    assert seen["perm"] == [1]


def test_retry_for_refuses_what_is_not_an_exception_class() -> None:
    app = headway.App("memory://")
    with pytest.raises(TypeError, match="retry_for"):

        @app.task(name="ask.bad_filter", retry_for=("ConnectionError",))  # type: ignore[arg-type]
        def f() -> None: ...
