"""@retry / retrying / Retry: attempts, excluded errors, the last error, and
the delays slept (sleep is recorded, not waited)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

import headway
from headway import Backoff, Jitter, Retry, retry, retrying

RIGID = Backoff(base=0.1, factor=2.0, cap=1.0, attempts=4, jitter=Jitter.RIGID)


@pytest.fixture
def slept(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[float]]:
    got: list[float] = []

    async def fake_async_sleep(d: float) -> None:
        got.append(d)

    monkeypatch.setattr(time, "sleep", got.append)
    monkeypatch.setattr(asyncio, "sleep", fake_async_sleep)
    yield got


class Flaky:
    """Fails `fails` times with `error`, then answers."""

    def __init__(self, fails: int, error: type[BaseException] = ConnectionError) -> None:
        self.fails = fails
        self.error = error
        self.calls = 0

    def __call__(self, x: int, *, y: int = 0) -> int:
        self.calls += 1
        if self.calls <= self.fails:
            raise self.error(f"attempt {self.calls}")
        return x + y


def test_bare_decorator_uses_the_default_policy(slept: list[float]) -> None:
    f = Flaky(2)
    wrapped = retry(f)
    assert wrapped(1, y=2) == 3
    assert f.calls == 3  # Backoff() allows three attempts
    assert len(slept) == 2 and all(0.0 <= d < 0.1 * 2**i for i, d in enumerate(slept))


def test_bare_decorator_syntax(slept: list[float]) -> None:
    calls = []

    @retry
    def once() -> str:
        calls.append(1)
        return "ok"

    assert once() == "ok" and calls == [1] and slept == []
    assert once.__name__ == "once"


def test_attempts_run_out_and_the_last_error_is_raised(slept: list[float]) -> None:
    f = Flaky(10)
    wrapped = retry(backoff=RIGID)(f)
    with pytest.raises(ConnectionError, match="attempt 4"):
        wrapped(1)
    assert f.calls == 4
    assert slept == pytest.approx([0.1, 0.2, 0.4])


def test_success_after_failures_sleeps_the_schedule(slept: list[float]) -> None:
    f = Flaky(2)
    assert retry(backoff=RIGID)(f)(5) == 5
    assert slept == pytest.approx([0.1, 0.2])


def test_excluded_errors_are_never_retried(slept: list[float]) -> None:
    f = Flaky(1, error=KeyError)
    wrapped = retry(backoff=RIGID, on=(ConnectionError, TimeoutError))(f)
    with pytest.raises(KeyError):
        wrapped(1)
    assert f.calls == 1 and slept == []
    g = Flaky(1, error=KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        retry(g)(1)  # `on` defaults to Exception: a BaseException is not retried
    assert g.calls == 1


def test_on_accepts_a_single_class(slept: list[float]) -> None:
    f = Flaky(1, error=ValueError)
    assert retry(backoff=RIGID, on=ValueError)(f)(2) == 2
    assert f.calls == 2


def test_one_attempt_means_no_retry(slept: list[float]) -> None:
    f = Flaky(1)
    with pytest.raises(ConnectionError):
        retry(backoff=Backoff(attempts=1))(f)(1)
    assert f.calls == 1 and slept == []
    g = Flaky(1)
    with pytest.raises(ConnectionError):
        Retry(backoff=Backoff(attempts=0)).call(g, 1)
    assert g.calls == 1


def test_decorrelated_grows_from_previous(slept: list[float]) -> None:
    b = Backoff(base=0.1, cap=10.0, attempts=4, jitter=Jitter.DECORRELATED)
    with pytest.raises(ConnectionError):
        retry(backoff=b)(Flaky(9))(1)
    assert len(slept) == 3
    lo = 0.1
    prev = 0.1
    for d in slept:
        assert lo <= d <= 3 * prev + 1e-9
        prev = d


def test_retrying_and_call(slept: list[float]) -> None:
    f = Flaky(1)
    assert retrying(f, 2, y=3) == 5 and f.calls == 2
    g = Flaky(3)
    assert retry(backoff=RIGID, on=ConnectionError).call(g, 1, y=1) == 2
    assert g.calls == 4


def test_retry_policy_object() -> None:
    r = Retry(backoff=RIGID, on=(OSError,))
    assert r.backoff == RIGID and r.on == (OSError,)
    assert "OSError" in repr(r)
    assert Retry().backoff == Backoff()


def test_bad_arguments() -> None:
    with pytest.raises(TypeError, match="`fn` must be callable"):
        retry(5)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="`fn` must be callable"):
        retrying("nope")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`backoff` must be a Backoff"):
        retry(backoff=3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`on` must be an exception class"):
        retry(on=[ValueError])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`on` must be an exception class"):
        retry(on=(ValueError, "x"))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="either a function or the keywords"):
        retry(len, backoff=RIGID)  # type: ignore[call-overload]


def test_real_sleep_happens() -> None:
    f = Flaky(2)
    start = time.monotonic()
    fast = Backoff(base=0.01, cap=0.01, attempts=3, jitter=Jitter.RIGID)
    assert retry(backoff=fast)(f)(1) == 1
    assert time.monotonic() - start >= 0.02


# ---------------------------------------------------------------- async


class AFlaky:
    def __init__(self, fails: int, error: type[BaseException] = ConnectionError) -> None:
        self.fails = fails
        self.error = error
        self.calls = 0

    async def __call__(self, x: int) -> int:
        self.calls += 1
        await asyncio.sleep(0)
        if self.calls <= self.fails:
            raise self.error(f"attempt {self.calls}")
        return x


@pytest.mark.asyncio
async def test_async_retry_counts_and_sleeps(slept: list[float]) -> None:
    f = AFlaky(2)

    @retry(backoff=RIGID)
    async def call(x: int) -> int:
        return await f(x)

    assert await call(7) == 7
    assert f.calls == 3
    assert [d for d in slept if d] == pytest.approx([0.1, 0.2])


@pytest.mark.asyncio
async def test_async_last_error_and_exclusions(slept: list[float]) -> None:
    f = AFlaky(10)

    @retry(backoff=RIGID, on=ConnectionError)
    async def call(x: int) -> int:
        return await f(x)

    with pytest.raises(ConnectionError, match="attempt 4"):
        await call(1)
    assert f.calls == 4
    g = AFlaky(1, error=KeyError)

    @retry(backoff=RIGID, on=ConnectionError)
    async def other(x: int) -> int:
        return await g(x)

    with pytest.raises(KeyError):
        await other(1)
    assert g.calls == 1


@pytest.mark.asyncio
async def test_async_bare_and_retrying(slept: list[float]) -> None:
    f = AFlaky(1)

    @retry
    async def call(x: int) -> int:
        return await f(x)

    assert await call(3) == 3 and f.calls == 2
    g = AFlaky(1)
    assert await retrying(g.__call__, 4) == 4
    assert g.calls == 2


@pytest.mark.asyncio
async def test_async_really_sleeps_with_asyncio() -> None:
    f = AFlaky(1)
    fast = Backoff(base=0.02, cap=0.02, attempts=2, jitter=Jitter.RIGID)

    @retry(backoff=fast)
    async def call() -> int:
        return await f(1)

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.001)
            ticks += 1

    t = asyncio.create_task(ticker())
    assert await call() == 1
    t.cancel()
    assert ticks > 2  # the loop kept running while the retry slept


def test_success_path_does_not_touch_the_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """The success path is pure Python: it never asks the native backoff."""

    class Tripwire:
        def more(self, made: int) -> bool:
            raise AssertionError("asked `more` on success")

        def delay(self, *a: object, **k: object) -> float:
            raise AssertionError("asked `delay` on success")

    r = Retry()
    monkeypatch.setattr(r, "backoff", Tripwire())
    wrapped = r(lambda: 42)
    assert wrapped() == 42
    assert headway.retry is retry
