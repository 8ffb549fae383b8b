"""The task queue's Python surface: ``App``, tasks, the canvas, workers and
the beat.

Everything that decides — policies, retries, canvas planning, settling,
rhythms — is the core's. This module registers Python callables, converts
call shapes (``delay(*args, **kwargs)``, ``a | b``), and runs the threads
that call bodies (``_serve``).
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import json
import os
import sys
import threading
import uuid
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import (
    Any,
    Concatenate,
    Generic,
    Literal,
    ParamSpec,
    Protocol,
    TypeAlias,
    TypedDict,
    TypeVar,
    Unpack,
    cast,
    overload,
)

from . import _native
from . import _tracing
from . import signals as _signals
from ._native import (
    At,
    Context,
    Cron,
    DeadLetter,
    Every,
    Exponential,
    Fixed,
    Handle,
    RedisBroker,
    VirtualClock,
)
from ._serve import Serving

__all__ = [
    "App",
    "AsyncTask",
    "Beat",
    "Signature",
    "Task",
    "Worker",
    "chain",
    "chord",
    "current",
    "group",
]

P = ParamSpec("P")
R = TypeVar("R")
R_co = TypeVar("R_co", covariant=True)

#: An instant: an aware ``datetime`` or epoch seconds; a ``timedelta`` means
#: that long from now.
When: TypeAlias = datetime | float | timedelta
#: A span: float seconds or a ``timedelta``.
Span: TypeAlias = float | timedelta
Rhythm: TypeAlias = Every | Cron | At
Backoff: TypeAlias = Fixed | Exponential
#: ``"10/m"`` (Celery's notation: s, m, h, d) or ``{"count": 10, "per": 60.0}``.
Rate: TypeAlias = str | Mapping[str, float]
# Exception types a policy's retry filter names: one, or a tuple of them.
ExcTypes: TypeAlias = type[BaseException] | tuple[type[BaseException], ...]

#: How long ``stop()`` (and Ctrl-C, and exit) lets runs in progress finish:
#: 10 s, moontask's preset and about what a supervisor waits between SIGTERM
#: and SIGKILL (Kubernetes' grace is 30 s; systemd's 90 s).
GRACE: float = _native.GRACE


class _Exits(Protocol):
    def _exit(self) -> None: ...


#: What is running and is stopped at exit: workers, beats, schedulers.
_live: weakref.WeakSet[_Exits] = weakref.WeakSet()


def current() -> Context:
    """The ``Context`` of the run this code is inside: a sync body, an async
    body, or anything either calls. ``LookupError`` outside a run."""
    return _native.current()


class SendOptions(TypedDict, total=False):
    """The per-send options every sending method takes (``apply_async``,
    ``send``, ``send_task``, ``signature``, ``Signature.set``), written
    once; ``None`` (or left out) is not given. What each may be, and its
    default, is the core's to say."""

    eta: When | None
    countdown: Span | None
    expires: When | None
    queue: str | None
    priority: int | None
    task_id: str | None
    concurrency_key: str | None
    dedupe_key: str | None
    dedupe_ttl: Span | None


class Policy(TypedDict, total=False):
    """A task's policy as ``@app.task`` takes it, written once for its
    overloads; what is left out (or None) is the core's default, which
    ``App.task`` describes."""

    queue: str | None
    retries: int
    backoff: Backoff | None
    timeout: Span | None
    acks_late: bool
    ignore_result: bool
    rate: Rate | None
    rate_scope: Literal["worker", "global"] | None
    concurrency_limit: int | None
    time_limit: Span | None
    soft_time_limit: Span | None
    reject_on_worker_lost: bool
    retry_for: ExcTypes | None
    dont_retry_for: ExcTypes | None


def _given(options: Mapping[str, Any], names: frozenset[str], method: str) -> dict[str, Any]:
    """The keyword ``options`` a method taking ``**options`` was given, None
    left out; one it does not take is a ``TypeError``, as for a plain
    keyword argument."""
    for k in options:
        if k not in names:
            raise TypeError(f"{method}() got an unexpected keyword argument {k!r}")
    return {k: v for k, v in options.items() if v is not None}


def _options(options: Mapping[str, Any], method: str) -> dict[str, Any]:
    """The send options given, as a dict the core reads."""
    return _given(options, SendOptions.__optional_keys__, method)


def _send(
    app: App,
    name: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any] | None,
    opts: dict[str, Any],
    known: bool = True,
) -> Handle[Any]:
    """Every single send: inside an OpenTelemetry PRODUCER span when the
    app traces and a tracer provider is set (one check otherwise)."""
    if app._tracing and _tracing.provided():
        return _tracing.send(app._native, name, args, kwargs, opts, known)  # type: ignore[no-any-return]
    return app._native.send(name, args, kwargs, opts or None, known=known)


# ---------------------------------------------------------------- canvas


class _Canvas(ABC):
    """What ``Signature``, ``chain``, ``group`` and ``chord`` share: sending
    and ``|``. Building one publishes nothing, so it can be sent twice.

    Each kind says how it is planned (``_tree``, the shape the core's canvas
    is built from), which app sends it, and how send-time arguments reach its
    first runs."""

    @abstractmethod
    def _tree(self) -> tuple[Any, ...]: ...

    @abstractmethod
    def _app(self) -> App | None: ...

    @abstractmethod
    def _partial(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> _Canvas: ...

    def _send(self) -> Handle[Any]:
        app = self._app()
        if app is None:
            raise ValueError("this canvas has no signature to take an app from")
        h = app._native.send_canvas(self._tree())
        # headway.celery answers its own result type (Celery's AsyncResult).
        return h if app._wrap_result is None else cast("Handle[Any]", app._wrap_result(h))

    def __or__(self, other: _Canvas) -> chain:
        if not isinstance(other, _Canvas):
            return NotImplemented
        return chain(self, other)


class Signature(_Canvas, Generic[R_co]):
    """A run that has not been published: ``task.s(...)``, ``task.si(...)``,
    ``app.signature(name, ...)``.

    A signature that is not ``immutable`` is called with the previous link's
    result prepended when it is a chain's link, and with the parts' results
    when it is a chord's callback. ``options`` are the per-send options of
    ``apply_async`` (eta, countdown, expires, queue, priority, task_id).
    """

    __slots__ = {
        "app": "The ``App`` it is sent through.",
        "args": "Its positional arguments (a tuple).",
        "immutable": "Whether a chain or chord leaves its arguments alone (``si``).",
        "kwargs": "Its keyword arguments (a dict).",
        "name": "The task's registered name.",
        "options": "Per-send options, as ``apply_async`` takes them (a dict).",
        "links": "Callbacks sent with its result when it succeeds (``link``).",
        "link_errors": "Callbacks sent with its id when it fails for good (``link_error``).",
        "headers": "Custom message headers (Celery's ``apply_async(headers=...)``), a dict.",
    }

    def __init__(
        self,
        app: App,
        name: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        immutable: bool = False,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.app = app
        self.name = name
        self.args: tuple[Any, ...] = tuple(args)
        self.kwargs: dict[str, Any] = dict(kwargs or {})
        self.immutable = immutable
        self.options: dict[str, Any] = dict(options or {})
        self.links: list[_Canvas] = []
        self.link_errors: list[_Canvas] = []
        self.headers: dict[str, Any] = {}

    def _tree(self) -> tuple[Any, ...]:
        return (
            "sig",
            self.name,
            self.args,
            self.kwargs or None,
            self.immutable,
            self.options or None,
            [c._tree() for c in self.links] or None,
            [c._tree() for c in self.link_errors] or None,
            self.headers or None,
        )

    def _copy(self, args: tuple[Any, ...], kwargs: Mapping[str, Any], options: Mapping[str, Any]) -> Signature[R_co]:
        s: Signature[R_co] = Signature(self.app, self.name, args, kwargs, self.immutable, options)
        s.links, s.link_errors = list(self.links), list(self.link_errors)
        s.headers = dict(self.headers)
        return s

    def link(self, callback: _Canvas) -> _Canvas:
        """Sends ``callback`` when this run succeeds, its result prepended
        (unless immutable); several links go out as a group. As Celery's
        ``sig.link``: changes this signature and answers ``callback``."""
        self.links.append(_checked(callback, "link"))
        return callback

    def link_error(self, errback: _Canvas) -> _Canvas:
        """Sends ``errback`` when this run fails for good, the failed run's
        id prepended (Celery's ``sig.link_error``; answers ``errback``)."""
        self.link_errors.append(_checked(errback, "link_error"))
        return errback

    def _app(self) -> App | None:
        return self.app

    def _partial(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Signature[R_co]:
        if self.immutable or (not args and not kwargs):
            return self
        return self._copy(args + self.args, {**self.kwargs, **kwargs}, self.options)

    def set(self, **options: Unpack[SendOptions]) -> Signature[R_co]:
        """A copy with these options set (the others kept)."""
        opts = {**self.options, **_options(options, "Signature.set")}
        return self._copy(self.args, self.kwargs, opts)

    def send(self) -> Handle[R_co]:
        """Publishes the run and answers its handle."""
        return self._send()

    def delay(self, *args: Any, **kwargs: Any) -> Handle[R_co]:
        """Publishes it with ``args`` prepended and ``kwargs`` merged
        (ignored when immutable), as Celery's ``sig.delay``."""
        return self._partial(args, kwargs)._send()

    def apply_async(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        **options: Unpack[SendOptions],
    ) -> Handle[R_co]:
        """Publishes it with ``args`` prepended, ``kwargs`` merged and these
        options over its own."""
        given = _options(options, "Signature.apply_async")
        return self._partial(tuple(args), kwargs or {}).set(**given)._send()

    def __repr__(self) -> str:
        parts = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        mark = "si" if self.immutable else "s"
        return f"{self.name}.{mark}({', '.join(parts)})"


def _checked(c: Any, what: str) -> _Canvas:
    if not isinstance(c, _Canvas):
        raise TypeError(f"{what}: expected a signature or a canvas (task.s(...)), not {type(c).__name__}")
    return c


def _items(tasks: tuple[Any, ...], what: str) -> list[_Canvas]:
    if len(tasks) == 1 and not isinstance(tasks[0], _Canvas):
        tasks = tuple(tasks[0])
    out = list(tasks)
    for i, t in enumerate(out):
        if not isinstance(t, _Canvas):
            raise TypeError(
                f"{what}: item {i} must be a signature or a canvas (task.s(...)), "
                f"not {type(t).__name__}"
            )
    return out


def _first_app(items: Iterable[_Canvas]) -> App | None:
    for it in items:
        a = it._app()
        if a is not None:
            return a
    return None


class _Composite(_Canvas):
    def send(self) -> Handle[Any]:
        """Publishes every message of the canvas and answers a handle on
        what it waits for."""
        return self._send()

    def delay(self, *args: Any, **kwargs: Any) -> Handle[Any]:
        """Publishes it with ``args``/``kwargs`` given to its first runs
        (a chain's first link, a group's or chord's parts)."""
        return self._partial(args, kwargs)._send()

    def apply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None
    ) -> Handle[Any]:
        """``delay`` with the arguments as a tuple and a dict."""
        return self._partial(tuple(args), kwargs or {})._send()


class chain(_Composite):
    """Runs in order, each started when the one before it succeeds; a link
    that is not immutable gets the previous result prepended. Answers the
    last link's value. ``a | b`` is ``chain(a, b)``; chains inside are
    flattened; a group first is a chord over the rest (as in Celery)."""

    def __init__(self, *tasks: _Canvas | Iterable[_Canvas]) -> None:
        self.tasks = _items(tasks, "chain")

    def _tree(self) -> tuple[Any, ...]:
        return ("chain", [t._tree() for t in self.tasks])

    def _app(self) -> App | None:
        return _first_app(self.tasks)

    def _partial(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> chain:
        if not self.tasks or (not args and not kwargs):
            return self
        return chain(self.tasks[0]._partial(args, kwargs), *self.tasks[1:])

    def __or__(self, other: _Canvas) -> chain:
        if not isinstance(other, _Canvas):
            return NotImplemented
        return chain(*self.tasks, other)

    def __repr__(self) -> str:
        return " | ".join(repr(t) for t in self.tasks)


class group(_Composite):
    """Runs all at once, waited on together: the handle answers the list of
    results in the order given. A chain inside stays a chain (the group waits
    on its last link). ``group(...) | callback`` is a chord."""

    def __init__(self, *tasks: _Canvas | Iterable[_Canvas]) -> None:
        self.tasks = _items(tasks, "group")

    def _tree(self) -> tuple[Any, ...]:
        return ("group", [t._tree() for t in self.tasks])

    def _app(self) -> App | None:
        return _first_app(self.tasks)

    def _partial(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> group:
        if not args and not kwargs:
            return self
        return group([t._partial(args, kwargs) for t in self.tasks])

    def __repr__(self) -> str:
        return f"group({', '.join(repr(t) for t in self.tasks)})"


class chord(_Composite):
    """``parts``, then ``callback`` once every part has succeeded, given the
    parts' results in order (unless immutable). A part that fails for good
    fails the callback (``TaskFailed`` with type ``ChordError``) rather than
    leaving it pending. Answers the callback's value."""

    def __init__(self, parts: group | Iterable[_Canvas], callback: _Canvas) -> None:
        self.parts = list(parts.tasks) if isinstance(parts, group) else _items((parts,), "chord")
        if not isinstance(callback, _Canvas):
            raise TypeError(
                f"chord: the callback must be a signature (task.s(...)), "
                f"not {type(callback).__name__}"
            )
        self.callback = callback

    def _tree(self) -> tuple[Any, ...]:
        return ("chord", [p._tree() for p in self.parts], self.callback._tree())

    def _app(self) -> App | None:
        return _first_app([*self.parts, self.callback])

    def _partial(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> chord:
        if not args and not kwargs:
            return self
        return chord([p._partial(args, kwargs) for p in self.parts], self.callback)

    def __repr__(self) -> str:
        return f"chord([{', '.join(repr(p) for p in self.parts)}], {self.callback!r})"


# ---------------------------------------------------------------- tasks


class _TaskBase(Generic[P, R]):
    """What sync and async tasks share: the name, and sending."""

    def __init__(self, app: App, fn: Callable[..., Any], name: str, bind: bool, queue: str) -> None:
        self.app = app
        self.name = name
        self.bind = bind
        self.queue = queue
        self._fn = fn
        functools.update_wrapper(self, fn)  # type: ignore[arg-type]

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> Handle[R]:
        """Publishes a run with these arguments and answers its handle."""
        return _send(self.app, self.name, args, kwargs or None, {})

    def apply_async(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        **options: Unpack[SendOptions],
    ) -> Handle[R]:
        """Publishes a run: ``eta`` (an aware ``datetime``, epoch seconds,
        or a ``timedelta`` from now) is when it may first run, ``countdown``
        how many seconds from now that is (``eta`` wins when both are given);
        ``expires`` (same forms as ``eta``) is when running it becomes
        pointless — a worker that finds it expired records it REVOKED without
        running it; ``queue`` overrides the task's; ``priority`` 0 (first) to
        9; ``task_id`` fixes the run's id. ``concurrency_key`` names the key
        the task's ``concurrency_limit`` counts across every worker;
        ``dedupe_key`` (with ``dedupe_ttl`` seconds, an hour by default)
        makes a second send within the ttl answer the first run's handle
        instead of sending."""
        opts = _options(options, f"{type(self).__name__}.apply_async")
        return _send(self.app, self.name, tuple(args), dict(kwargs) if kwargs else None, opts)

    def s(self, *args: Any, **kwargs: Any) -> Signature[R]:
        """A signature of a run with these arguments (a canvas node)."""
        return Signature(self.app, self.name, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> Signature[R]:
        """An immutable signature: a chain does not prepend the previous
        result to it, a chord does not hand it the parts' results."""
        return Signature(self.app, self.name, args, kwargs, immutable=True)

    def _direct(self) -> Context:
        """A Context for a direct call: a run of its own, here and now."""
        return _native._direct_context(str(uuid.uuid4()), self.name, self.queue, self.app.now())

    def __repr__(self) -> str:
        return f"<task {self.name}>"


class Task(_TaskBase[P, R]):
    """A registered sync body. ``task(...)`` runs it here and now (as
    Celery's ``__call__`` does) as a run of its own — ``headway.current()``
    inside answers a fresh first-attempt ``Context`` — while
    ``delay``/``apply_async`` publish a run."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        ctx = self._direct()
        token = _native._CURRENT.set(ctx)
        try:
            result: R = self._fn(ctx, *args, **kwargs) if self.bind else self._fn(*args, **kwargs)
        finally:
            _native._CURRENT.reset(token)
        return result


class AsyncTask(_TaskBase[P, R]):
    """A registered ``async def`` body. ``await task(...)`` runs it here and
    now; ``delay``/``apply_async`` publish a run."""

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> Coroutine[Any, Any, R]:
        return self._run(self._direct(), args, kwargs)

    async def _run(self, ctx: Context, args: tuple[Any, ...], kwargs: dict[str, Any]) -> R:
        token = _native._CURRENT.set(ctx)
        try:
            result: R = await (
                self._fn(ctx, *args, **kwargs) if self.bind else self._fn(*args, **kwargs)
            )
        finally:
            _native._CURRENT.reset(token)
        return result


class _Decorator(Protocol):
    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, fn: Callable[P, Coroutine[Any, Any, R]], /
    ) -> AsyncTask[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...


class _BoundDecorator(Protocol):
    @overload
    def __call__(  # type: ignore[overload-overlap]
        self, fn: Callable[Concatenate[Context, P], Coroutine[Any, Any, R]], /
    ) -> AsyncTask[P, R]: ...
    @overload
    def __call__(self, fn: Callable[Concatenate[Context, P], R], /) -> Task[P, R]: ...


def _is_async(fn: Callable[..., Any]) -> bool:
    if asyncio.iscoroutinefunction(fn):
        return True
    call = getattr(fn, "__call__", None)  # noqa: B004 - a callable object's method
    return call is not None and asyncio.iscoroutinefunction(call)


def _on_exit() -> None:
    for thing in list(_live):
        try:
            thing._exit()
        except Exception:  # pragma: no cover - best effort at exit  # noqa: BLE001
            pass


atexit.register(_on_exit)


class App:
    """The registry, the broker and the clock.

    ``broker`` is ``"memory://"`` (an in-process broker that is also its
    result store and chord counter; what ``None``, the default, means),
    ``"redis://host:port/db"`` /
    ``"rediss://..."`` (headway's Redis layout), or a ``RedisBroker``
    (``RedisBroker.celery(...)`` for Celery's layout). ``backend`` is where
    results are kept: ``None`` the broker's own, ``False`` none at all
    (``get()`` raises ``Missing``), or another URL/``RedisBroker``.
    ``clock`` is the only clock the task side reads: ``None`` the system
    clock, or a ``headway.testing.VirtualClock``. ``tracing`` (on by
    default) has sends and runs traced with OpenTelemetry when
    ``opentelemetry-api`` is installed and a tracer provider is set
    (``headway[otel]``); ``False`` turns that off for this app.

    Nothing is global: two apps in one process do not see each other's
    tasks. Registering twice under one name replaces the first.
    """

    def __init__(
        self,
        broker: str | RedisBroker | None = None,
        *,
        backend: str | RedisBroker | Literal[False] | None = None,
        clock: VirtualClock | None = None,
        tracing: bool = True,
    ) -> None:
        if not isinstance(tracing, bool):
            raise TypeError(f"tracing must be a bool, not {type(tracing).__name__}")
        self._native = _native._App(broker, backend, clock)
        self.clock = clock
        self._tracing = tracing
        self._tasks: dict[str, _TaskBase[Any, Any]] = {}
        self._beat: Beat | None = None
        #: Where a process-pool child imports this app from (``module:attr``),
        #: when the CLI loaded it; else found by ``_where``.
        self._origin: str | None = None
        #: The queues the CLI's worker consumes when not given ``-Q``: None
        #: (the worker's default), or a served Celery app's (``_from_celery``).
        self._queues: list[str] | None = None
        # What a served app's own settings say of its workers (a Celery
        # app's worker_prefetch_multiplier), under the command line's.
        self._worker_defaults: dict[str, Any] = {}
        self._wrap_result: Callable[[Handle[Any]], Any] | None = None

    # -- registering ---------------------------------------------------

    @overload
    def task(  # type: ignore[overload-overlap]
        self, fn: Callable[P, Coroutine[Any, Any, R]], /
    ) -> AsyncTask[P, R]: ...
    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...
    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        bind: Literal[False] = False,
        **policy: Unpack[Policy],
    ) -> _Decorator: ...
    @overload
    def task(
        self,
        fn: None = None,
        /,
        *,
        name: str | None = None,
        bind: Literal[True],
        **policy: Unpack[Policy],
    ) -> _BoundDecorator: ...

    def task(
        self,
        fn: Callable[..., Any] | None = None,
        /,
        *,
        name: str | None = None,
        bind: bool = False,
        **policy: Unpack[Policy],
    ) -> Any:
        """Registers a body: ``@app.task`` or ``@app.task(name=..., ...)``.

        The policy's defaults are each the safe side of its choice
        (moontask): ``queue="default"``; ``retries=0`` (a retry repeats the
        first attempt's side effects); ``backoff=Exponential()`` (1 s
        doubling to 10 min, jittered by the task id); ``timeout=None`` (a
        hung run is visible rather than silently cut); ``acks_late=False``
        (confirmed on receipt: a worker that dies mid-run does not run it
        twice); ``ignore_result=False``; ``rate=None`` (per worker, e.g.
        ``"10/m"``; ``rate_scope="global"`` makes it hold across every
        worker on the broker, one token bucket in Redis);
        ``concurrency_limit=None`` (runs sent with one ``concurrency_key``
        that may run at once across every worker: 1 when not set). The name defaults to ``module.function``, as Celery's.
        ``bind=True`` passes the run's ``Context`` first. A body may be
        ``async def``; it then runs on an asyncio loop.

        ``time_limit`` (seconds) is Celery's hard limit: past it the run's
        child process is killed and the run fails with
        ``TimeLimitExceeded`` — only a ``pool="process"`` worker can keep it,
        and a threads worker refuses such a task. ``soft_time_limit`` raises
        ``SoftTimeLimitExceeded`` inside the body, which may catch it and
        return. ``reject_on_worker_lost=True`` with ``acks_late`` puts a run
        whose child died back on its queue instead of failing it
        (``WorkerLostError``), as Celery's.

        ``retry_for`` (Celery's ``autoretry_for``): an exception class or a
        tuple of them; only failures of those types (or their subclasses)
        are retried, within ``retries``. ``dont_retry_for`` names types never
        retried. A body may also ask for a retry itself: ``ctx.retry(...)``.
        """

        given = _given(policy, Policy.__optional_keys__, "App.task")

        def register(f: Callable[..., Any]) -> _TaskBase[Any, Any]:
            if not callable(f):
                raise TypeError(f"@app.task needs a callable, not {type(f).__name__}")
            # A script's tasks are named `__main__.f`, also in a process-pool
            # child, which runs the script as `__mp_main__`.
            module = "__main__" if f.__module__ == "__mp_main__" else f.__module__
            tname = name or f"{module}.{getattr(f, '__name__', type(f).__name__)}"
            is_async = _is_async(f)
            tqueue = self._native.register(tname, f, bind=bind, is_async=is_async, **given)
            cls: type[_TaskBase[Any, Any]] = AsyncTask if is_async else Task
            t = cls(self, f, tname, bind, tqueue)
            self._tasks[tname] = t
            _signals._known(tname, t)
            return t

        if fn is not None:
            return register(fn)
        return register

    @property
    def tasks(self) -> Mapping[str, Task[..., Any] | AsyncTask[..., Any]]:
        """Registered tasks by name (a read-only view)."""
        from types import MappingProxyType

        return MappingProxyType(self._tasks)  # type: ignore[arg-type]

    def task_names(self) -> list[str]:
        """Every registered name, sorted (so a page listing them is stable)."""
        return self._native.task_names()

    # -- sending -------------------------------------------------------

    def send(
        self,
        name: str,
        args: Sequence[Any],
        kwargs: Mapping[str, Any] | None = None,
        **options: Unpack[SendOptions],
    ) -> Handle[Any]:
        """Publishes a run of the task called ``name`` — the dispatcher's
        entry, for a name learnt at run time. A name this app has not
        registered raises ``UnknownTask``: a queue that accepts work nobody
        can run only moves the failure to a worker."""
        opts = _options(options, "App.send")
        return _send(self, name, tuple(args), dict(kwargs) if kwargs else None, opts)

    def send_task(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        **options: Unpack[SendOptions],
    ) -> Handle[Any]:
        """Celery's ``send_task``: publishes a run of any name, for tasks
        another process (a Celery worker, say) runs."""
        opts = _options(options, "App.send_task")
        return _send(self, name, tuple(args), dict(kwargs) if kwargs else None, opts, known=False)

    def signature(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        immutable: bool = False,
        **options: Unpack[SendOptions],
    ) -> Signature[Any]:
        """A signature of any task name — one this app runs or one another
        process does — as a canvas node."""
        opts = _options(options, "App.signature")
        return Signature(self, name, args, kwargs, immutable, opts)

    def handle(self, id: str) -> Handle[Any]:
        """A handle on the run ``id``, which some other process may have sent."""
        return self._native.handle(id)

    def AsyncResult(self, id: str) -> Handle[Any]:  # noqa: N802 - Celery's name
        """Celery's name for ``handle(id)``."""
        return self._native.handle(id)

    def revoke(
        self, ids: str | Sequence[str], terminate: bool = False, signal: str | int = "SIGTERM"
    ) -> None:
        """Revokes the runs ``ids`` (one id or several): they will not start
        anywhere the broker reaches. With ``terminate``, a run in progress
        stops — in whichever process on the broker runs it — with
        ``signal`` (a name such as ``"SIGKILL"`` or a number 1 to 64; a bad
        one raises ``ValueError``) and is recorded REVOKED."""
        self._native.revoke([ids] if isinstance(ids, str) else list(ids), terminate, signal)

    def _trace_runs(self) -> None:
        """Has this app's runs traced in this process (a worker starting,
        a process-pool child), when it traces and a tracer provider is set."""
        if self._tracing and _tracing.provided():
            self._native.set_tracing(True)
            _tracing.enable()

    def now(self) -> float:
        """The app's time, in epoch seconds (the virtual clock's, in tests)."""
        return self._native.now()

    # -- running -------------------------------------------------------

    def worker(
        self,
        queues: Sequence[str] | str | None = None,
        concurrency: int | None = None,
        prefetch: int | None = None,
        *,
        pool: Literal["threads", "process", "prefork"] = "threads",
        max_tasks_per_child: int | None = None,
        max_memory_per_child: int | None = None,
        time_limit: Span | None = None,
        soft_time_limit: Span | None = None,
        prefetch_multiplier: int | None = None,
    ) -> Worker:
        """A worker over ``queues`` (``["default"]``; a ``"a,b"`` string is
        split) running up to ``concurrency`` bodies at once (4, moontask's
        preset) and holding at most ``prefetch`` messages not finished
        running (``concurrency × 4``, Celery's prefetch multiplier; ``× 8``
        on the process pool, four per slot: each child has its run and one
        on deck; left unset, the worker reaches past that while runs are
        short, about 2 ms of its recent work, at most 8 × it);
        ``prefetch_multiplier`` (Celery's ``worker_prefetch_multiplier``)
        makes it ``concurrency ×`` that, kept exactly.

        ``pool="process"`` (``"prefork"``, Celery's name, is the same) runs
        bodies in ``concurrency`` child processes instead of threads: each
        uses a core, and a run past its ``time_limit`` or terminated is
        stopped by killing its child, which is then replaced. Children are
        started fresh (``python -m headway._child``) and import the app
        themselves, so the app must live at the top level of a module (or
        the main script, imported as ``__mp_main__`` with its
        ``if __name__ == "__main__"`` block skipped). A child is replaced
        after ``max_tasks_per_child`` runs, or once it holds more than
        ``max_memory_per_child`` KiB after a run. ``time_limit`` and
        ``soft_time_limit`` (seconds) apply to tasks that set none."""
        if isinstance(queues, str):
            queues = [queues]
        child = None
        if _native._process_pool(pool):
            child = (
                sys.executable,
                ["-m", "headway._child"],
                [
                    ("HEADWAY_CHILD_APP", _where(self)),
                    ("HEADWAY_CHILD_PATH", json.dumps(sys.path)),
                ],
            )
        native = self._native.worker(
            list(queues) if queues is not None else None,
            concurrency,
            prefetch,
            pool=pool,
            child=child,
            max_tasks_per_child=max_tasks_per_child,
            max_memory_per_child=max_memory_per_child,
            time_limit=time_limit,
            soft_time_limit=soft_time_limit,
            prefetch_multiplier=prefetch_multiplier,
        )
        return Worker(self, native)

    def beat(self) -> Beat:
        """The app's beat — the same object every call, so a module can add
        entries at import and ``headway beat -A module:app`` runs them."""
        if self._beat is None:
            self._beat = Beat(self, self._native.beat())
        return self._beat

    # -- dead letters --------------------------------------------------

    def dead_letters(self, queue: str = "default", limit: int | None = None) -> list[DeadLetter]:
        """The dead letters of ``queue``, newest first, at most ``limit``
        (``None``: the core's 100):
        what a worker set aside rather than ran — bytes that are not a
        message headway runs, or a message that lost three workers — each
        with why, when and its bytes. An unknown queue has none; a limit
        that is not an int is a ``TypeError``, a negative one ``ValueError``."""
        return self._native.dead_letters(queue, limit)

    def dead_count(self, queue: str = "default") -> int:
        """How many dead letters ``queue`` keeps now (0 for an unknown queue)."""
        return self._native.dead_count(queue)

    def requeue_dead(
        self, queue: str = "default", limit: int | None = None, *, ids: Sequence[str] | None = None
    ) -> int:
        """Puts dead letters of ``queue`` back on it as they were, oldest
        first — at most ``limit`` (all when ``None``), only those whose id is
        in ``ids`` when given — and answers how many went back. Do it after
        fixing the task or the producer: a letter that is still bad is set
        aside again by the next worker that claims it."""
        if isinstance(ids, str):
            raise TypeError("`ids` must be a list of ids, not str")
        return self._native.requeue_dead(queue, limit, None if ids is None else list(ids))

    def purge_dead(self, queue: str = "default") -> int:
        """Drops every dead letter of ``queue`` for good; answers how many."""
        return self._native.purge_dead(queue)

    def __repr__(self) -> str:
        return f"<headway.App tasks={self.task_names()}>"


def _where(app: App) -> str:
    """Where a process-pool child finds ``app``: ``module:attr``, or
    ``/path/script.py:attr`` for the main script."""
    if app._origin:
        return app._origin
    main: tuple[Any, str] | None = None
    for mname, mod in list(sys.modules.items()):
        space = getattr(mod, "__dict__", None)
        if not isinstance(space, dict):
            continue
        for attr, value in list(space.items()):
            if value is app:
                if mname in ("__main__", "__mp_main__"):
                    main = (mod, attr)
                else:
                    return f"{mname}:{attr}"
    if main is not None and getattr(main[0], "__file__", None):
        return f"{os.path.abspath(main[0].__file__)}:{main[1]}"
    raise ValueError(
        "pool='process' needs the app at the top level of a module its children "
        "can import (they start fresh and import it); this app is not an "
        "attribute of any imported module"
    )


# ---------------------------------------------------------------- worker


class Worker:
    """Runs tasks: claims from its queues, runs up to ``concurrency`` bodies,
    settles each as its policy says (core's ``Worker``).

    ``run()`` blocks (Ctrl-C stops it gracefully and re-raises the
    ``KeyboardInterrupt``), ``start()`` runs it on a background thread,
    ``await run_async()`` runs it on the caller's event loop (async bodies
    run there too), ``stop(grace)`` stops it: no more claims, prefetched
    messages given back, ``grace`` seconds for runs in progress, then the
    rest cancelled and given back — nothing it held is lost. A worker runs
    once.

    Sync bodies run on ``concurrency`` daemon threads; async bodies on an
    asyncio loop (a dedicated loop thread under ``run``/``start``). A sync
    body past its ``timeout`` cannot be interrupted: its run fails and its
    thread is replaced, up to one stuck thread per runner; with every thread
    stuck the worker claims nothing and ``health`` says so until one returns.
    Register every task before starting a worker, as Celery does at import.
    """

    def __init__(self, app: App, native: _native._Worker) -> None:
        self.app = app
        self._native = native
        self._serving: Serving | None = None
        self._thread: threading.Thread | None = None
        self._done = threading.Event()
        self._error: BaseException | None = None
        self._started = False
        self._runner: threading.Thread | None = None

    @property
    def name(self) -> str:
        """Its name (logs, the admin page)."""
        return self._native.name

    @property
    def queues(self) -> list[str]:
        """The queues it claims from."""
        return self._native.queues

    @property
    def concurrency(self) -> int:
        """How many bodies run at once."""
        return self._native.concurrency

    @property
    def prefetch(self) -> int:
        """The most messages it holds unsettled."""
        return self._native.prefetch

    @property
    def settled(self) -> int:
        """How many messages it has settled so far."""
        return self._native.settled

    @property
    def pool(self) -> str:
        """``"process"`` when its bodies run in child processes, else
        ``"threads"``."""
        return self._native.pool

    @property
    def child_pids(self) -> list[int]:
        """The pids of its child processes now (empty on the threads pool)."""
        return self._native.child_pids

    @property
    def health(self) -> dict[str, Any]:
        """Its sync runner threads, as the core counts them: ``healthy``
        (false while every thread is stuck in a body past its timeout and
        no replacement may start — it claims nothing then), ``why``,
        ``runners`` (staffed), ``threads``, ``stuck`` and ``stuck_cap`` (one
        stuck thread per runner gets a replacement; no more)."""
        return self.app._native.host.runners()

    @property
    def healthy(self) -> bool:
        """Whether it can run a sync body now (see ``health``)."""
        return bool(self.health["healthy"])

    def _begin(self, loop: asyncio.AbstractEventLoop | None) -> None:
        if self._started:
            raise RuntimeError("this worker has already run; make another with app.worker()")
        self._started = True
        host = self.app._native.host
        self.app._trace_runs()
        if self._native.pool == "threads":
            # On the process pool bodies run in the children: nothing here.
            n = self.concurrency if host.has_sync() else 1
            self._serving = Serving(host, name=f"headway-{self.name}", sync_threads=n, loop=loop)
        _live.add(self)
        _signals.worker_ready.send(self)

    def _end(self) -> None:
        if self._serving is not None:
            self._serving.close()
        _live.discard(self)
        _signals.worker_shutdown.send(self)
        self._done.set()

    def run(self, grace: Span = GRACE) -> None:
        """Runs until stopped, blocking this thread (the GIL released).
        Ctrl-C stops it as ``stop(grace)`` does, then re-raises."""
        self._begin(None)
        self._runner = threading.current_thread()
        try:
            self._native.run(grace)
        finally:
            self._end()

    def start(self) -> None:
        """Runs it on a background (daemon) thread and returns at once."""
        self._begin(None)
        self._thread = _run_in_thread(self, f"headway-{self.name}", GRACE, self._end)

    async def run_async(self) -> None:
        """Runs until stopped on the running event loop; async bodies run on
        that loop. Cancelling it stops the worker gracefully first."""
        loop = asyncio.get_running_loop()
        self._begin(loop)
        self._runner = threading.current_thread()
        fut = self._native.run_future()
        try:
            await asyncio.shield(fut)
        except asyncio.CancelledError:
            self._native.stop(GRACE)
            await fut
            raise
        finally:
            # Joining the runner threads takes up to a slice: not on the loop.
            await loop.run_in_executor(None, self._end)

    def stop(self, grace: Span = GRACE, *, wait: bool = True) -> None:
        """Stops it (see the class) and, with ``wait`` and called from outside
        the worker, waits until it has: when this returns, what it held is
        settled or given back. Re-raises an error that ended a
        ``start()``-ed run. (From a signal handler, inside a body, or on the
        loop running ``run_async()``, it only asks: the thread that would
        wait is the one running the worker — await the ``run_async()`` task
        to wait there.)"""
        self._native.stop(grace)
        if not self._started or not wait:
            return
        me = threading.current_thread()
        inside = me is self._runner or me.name.startswith(f"headway-{self.name}")
        if inside:
            return
        if self._thread is not None:
            self._thread.join()
        else:
            self._done.wait()
        if self._error is not None and not isinstance(self._error, KeyboardInterrupt):
            err, self._error = self._error, None
            raise err

    def _exit(self) -> None:
        self._native.stop(GRACE)
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(GRACE + 2.0)

    def __repr__(self) -> str:
        return f"<headway.Worker {self.name} queues={self.queues} concurrency={self.concurrency}>"


# ---------------------------------------------------------------- beat


class Beat:
    """Sends tasks on rhythms (``Every``, ``Cron``, ``At``), keeping the
    phase: the next time is computed from the time that was due, not from
    when the tick ran, so an hourly entry stays on its minute after a late
    tick. ``pending()`` answers ``(name, when)`` with ``when`` an aware UTC
    ``datetime``. On a virtual clock its sleeps advance the clock, so drive
    it with ``run(until=...)`` or ``tick()`` there: a ``start()``-ed beat on
    a virtual clock races through time."""

    def __init__(self, app: App, native: _native._Beat) -> None:
        self.app = app
        self._native = native
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def add(
        self,
        name: str,
        task: _TaskBase[Any, Any] | str,
        args: Sequence[Any],
        schedule: Rhythm,
        *,
        kwargs: Mapping[str, Any] | None = None,
        queue: str | None = None,
        priority: int | None = None,
    ) -> None:
        """Schedules ``task`` (a task or a name) with ``args`` under ``name``
        (replacing an entry of that name). The name identifies the entry,
        not the task: one task may be scheduled twice under two names."""
        tname = task if isinstance(task, str) else task.name
        opts = {k: v for k, v in (("queue", queue), ("priority", priority)) if v is not None}
        self._native.add(name, tname, tuple(args), dict(kwargs) if kwargs else None, schedule, opts or None)

    def remove(self, name: str) -> bool:
        """Removes the entry ``name``; ``False`` when there was none."""
        return self._native.remove(name)

    def pending(self) -> list[tuple[str, datetime]]:
        """Entry names and when each fires next, soonest first."""
        return self._native.pending()

    def tick(self) -> list[tuple[str, datetime, Handle[Any]]]:
        """Sends what is due now; answers ``(name, due, handle)`` per send."""
        return self._native.tick()

    def run(self, until: datetime | float | None = None) -> None:
        """Sends due entries and sleeps until the next, until ``stop()`` (or
        until the app's clock reaches ``until``). Blocks; Ctrl-C stops it
        and re-raises."""
        _live.add(self)
        try:
            self._native.run(until)
        finally:
            _live.discard(self)

    def start(self) -> None:
        """Runs it on a background (daemon) thread and returns at once."""

        _live.add(self)
        self._thread = _run_in_thread(self, "headway-beat")

    def stop(self) -> None:
        """Stops it after the tick in progress (and waits for a started one)."""
        self._native.stop()
        _join(self)
        _live.discard(self)
        _reraise(self)

    def _exit(self) -> None:
        self._native.stop()


def _run_in_thread(
    owner: Any, name: str, arg: Any = None, then: Callable[[], None] | None = None
) -> threading.Thread:
    """Runs ``owner._native.run(arg)`` on a daemon thread (a ``Worker``'s, a
    ``Beat``'s or a ``Scheduler``'s ``start()``), then ``then()``; an error
    that ends it waits in ``owner._error`` for ``stop()`` to re-raise."""

    def main() -> None:
        try:
            owner._native.run(arg)
        except BaseException as e:  # noqa: BLE001 - re-raised by stop()
            owner._error = e
        finally:
            if then is not None:
                then()

    thread = threading.Thread(target=main, name=name, daemon=True)
    thread.start()
    return thread


def _join(owner: Any) -> None:
    """Waits for the thread ``start()`` began, unless called from it."""
    if owner._thread is not None and owner._thread is not threading.current_thread():
        owner._thread.join()
        owner._thread = None


def _reraise(owner: Any) -> None:
    """Re-raises (once) the error that ended a ``start()``-ed run."""
    if owner._error is not None:
        err, owner._error = owner._error, None
        raise err
