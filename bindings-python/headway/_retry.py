"""``@retry`` and ``retrying``: the loop every client writes, on ``Backoff``.

The success path never crosses into Rust: a wrapped call that succeeds costs
one ``try`` block. After a failure the core's ``Attempts`` (the loop Node's
``retry`` drives too) is told whether the error is one ``on`` retries and
answers how long to sleep before the next call, or that the error is final;
the driver sleeps it — ``time.sleep`` for a plain function, ``asyncio.sleep``
for an ``async def`` — or re-raises.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar, cast, overload

from ._native import Attempts, Backoff

__all__ = ["Retry", "retry", "retrying"]

P = ParamSpec("P")
R = TypeVar("R")

ErrorTypes = type[BaseException] | tuple[type[BaseException], ...]


def _check_on(on: object) -> tuple[type[BaseException], ...]:
    def is_error(t: object) -> bool:
        return isinstance(t, type) and issubclass(t, BaseException)

    if is_error(on):
        return (cast("type[BaseException]", on),)
    if isinstance(on, tuple) and all(is_error(t) for t in on):
        return on
    raise TypeError(
        f"`on` must be an exception class or a tuple of them, not {on!r}"
    )


class Retry:
    """A retry policy: a ``Backoff`` and the errors worth retrying.

    ``backoff`` defaults to ``Backoff()`` — gRPC's policy: three attempts,
    0.1 s doubling to 1 s, full jitter. ``on`` is an exception class or a
    tuple of them (default ``(Exception,)``); anything else propagates at
    once, never retried. When the attempts run out the last error is
    re-raised as it was.

    Use it as a decorator (``@Retry(backoff=b)``, or ``@retry(...)`` which
    builds one) or call through it once: ``policy.call(fn, *args, **kwargs)``.
    """

    __slots__ = {
        "backoff": "The ``Backoff``: how many attempts and how long between them.",
        "on": "The exception classes worth retrying (a tuple); others propagate at once.",
    }

    backoff: Backoff
    on: tuple[type[BaseException], ...]

    def __init__(
        self,
        backoff: Backoff | None = None,
        on: ErrorTypes = (Exception,),
    ) -> None:
        if backoff is None:
            backoff = Backoff()
        elif not isinstance(backoff, Backoff):
            raise TypeError(
                f"`backoff` must be a Backoff, not {type(backoff).__name__}"
            )
        self.backoff = backoff
        self.on = _check_on(on)

    def __repr__(self) -> str:
        names = ", ".join(t.__name__ for t in self.on)
        return f"Retry(backoff={self.backoff!r}, on=({names},))"

    def __call__(self, fn: Callable[P, R]) -> Callable[P, R]:
        """Wrap ``fn`` (sync or ``async def``) in this policy."""
        if not callable(fn):
            raise TypeError(f"`fn` must be callable, not {type(fn).__name__}")
        # The core's Attempts is made at the first failure: a call that
        # succeeds costs one `try` block.
        backoff, on = self.backoff, self.on
        if inspect.iscoroutinefunction(fn):
            afn = cast("Callable[P, Awaitable[Any]]", fn)

            @functools.wraps(fn)
            async def awrapper(*args: P.args, **kwargs: P.kwargs) -> Any:
                run: Attempts | None = None
                while True:
                    try:
                        return await afn(*args, **kwargs)
                    except BaseException as e:
                        run = run or Attempts(backoff)
                        delay = run.failed(isinstance(e, on))
                        if delay is None:
                            raise
                    if delay:
                        await asyncio.sleep(delay)

            return cast("Callable[P, R]", awrapper)

        @functools.wraps(fn)
        def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
            run: Attempts | None = None
            while True:
                try:
                    return fn(*args, **kwargs)
                except BaseException as e:
                    run = run or Attempts(backoff)
                    delay = run.failed(isinstance(e, on))
                    if delay is None:
                        raise
                if delay:
                    time.sleep(delay)

        return wrapper

    def call(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
        """Call ``fn(*args, **kwargs)`` once under this policy. For an
        ``async def`` it returns the coroutine to await."""
        return self(fn)(*args, **kwargs)


_DEFAULT = Retry()


@overload
def retry(fn: Callable[P, R], /) -> Callable[P, R]: ...
@overload
def retry(
    fn: None = None, /, *, backoff: Backoff | None = None, on: ErrorTypes = (Exception,)
) -> Retry: ...
def retry(
    fn: Callable[P, R] | None = None,
    /,
    *,
    backoff: Backoff | None = None,
    on: ErrorTypes = (Exception,),
) -> Callable[P, R] | Retry:
    """Retry a function on failure, sleeping what ``backoff`` answers.

    Bare (``@retry``) it uses the default policy — ``Backoff()``, gRPC's
    three attempts, 0.1 s doubling to 1 s with full jitter — and retries any
    ``Exception``. With arguments (``@retry(backoff=Backoff(attempts=5),
    on=(ConnectionError,))``) it returns a ``Retry`` policy to decorate with.
    Works for plain functions (``time.sleep``) and ``async def`` ones
    (``asyncio.sleep``). Errors ``on`` excludes propagate at once; when the
    attempts run out the last error is re-raised.
    """
    if fn is None:
        return Retry(backoff=backoff, on=on)
    if backoff is not None or on != (Exception,):
        raise TypeError("pass either a function or the keywords, not both")
    return _DEFAULT(fn)


def retrying(fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs) -> R:
    """Call ``fn(*args, **kwargs)`` under the default policy (see ``retry``).

    Every keyword goes to ``fn``; for another policy call through one:
    ``headway.retry(backoff=..., on=...).call(fn, *args, **kwargs)``. For an
    ``async def`` it returns the coroutine to await.
    """
    return _DEFAULT.call(fn, *args, **kwargs)

