"""``Celery``, ``Task`` and ``shared_task`` on headway.

A ``Celery`` here is a headway ``App`` dressed in Celery's API: made lazily
on first use (so ``config_from_object`` after the tasks are defined works,
as in Celery), on the broker its ``broker_url`` names — ``redis://``
(``rediss://``, ``sentinel://``) in Celery's own Redis layout and message
format, so Celery workers and producers still on the same Redis share its
queues and results; ``amqp://`` on Celery's RabbitMQ topology;
``memory://`` (the default when none is given) for tests. Which URLs will
do is the core's one rule, the same for a served Celery app
(``_from_celery.app_on``). Every task option
becomes the headway policy of the same meaning; what a policy does is the
core's. What Celery has and this does not is refused with an error naming
it, never ignored (docs/celery.md lists both).
"""

from __future__ import annotations

import contextvars
import datetime
import importlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .. import _tasks
from .._errors import TaskRetry
from .._from_celery import _retry, app_on, is_celery_app, maps, serve, worker_defaults
from .._native import _CELERY_DEFAULTS, _celery_autoretry, _celery_rate, _celery_request_direct, _celery_route, _celery_send_options, _celery_task_options
from .._tasks import App, chain, group
from .result import AsyncResult


#: Celery's defaults for the settings headway reads (the core's list).
DEFAULTS: dict[str, Any] = _CELERY_DEFAULTS


class Settings(dict[str, Any]):
    """``app.conf``: Celery's settings, read and set as keys or attributes."""

    def __getattr__(self, key: str) -> Any:
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key) from None

    def __setattr__(self, key: str, value: Any) -> None:
        self[key] = value


_CURRENT: list[Celery] = []


def current_app() -> Celery:
    """The ``Celery`` made last in this process (Celery's ``current_app``)."""
    if not _CURRENT:
        _CURRENT.append(Celery())
    return _CURRENT[-1]


class Request:
    """``self.request`` of a bound task: the run it is in, in Celery's words
    (the fields are the core's, as a served Celery app's request has them)."""

    id: str | None
    task: str | None
    retries: int
    eta: str | None
    expires: str | None
    group: str | None
    group_index: int | None
    chord: dict[str, Any] | None
    callbacks: list[dict[str, Any]] | None
    errbacks: list[dict[str, Any]] | None
    delivery_info: dict[str, Any]
    hostname: str | None
    root_id: str | None
    parent_id: str | None
    correlation_id: str | None
    reply_to: str | None
    timelimit: tuple[float | None, float | None]
    is_eager: bool
    called_directly: bool

    def __init__(
        self,
        ctx: Any | None = None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        default_queue: str = "celery",
    ) -> None:
        self.args = list(args)
        self.kwargs = dict(kwargs or {})
        # The fields, and what they are outside a run, are the core's.
        fields = _celery_request_direct() if ctx is None else ctx._celery_request(default_queue)
        for k, v in fields.items():
            setattr(self, k, v)
        hard, soft = self.timelimit
        self.timelimit = (hard, soft)

    def __repr__(self) -> str:
        return f"<Request {self.task} {self.id}>"


_REQUEST: contextvars.ContextVar[Request] = contextvars.ContextVar("headway_celery_request")


class Task:
    """A task in Celery's shape; ``@app.task`` makes one per function.
    Subclass it for ``base=``: its class attributes are defaults of the
    options."""

    name: str = ""
    max_retries: int | None = 3
    default_retry_delay: float = 180
    acks_late: bool | None = None
    ignore_result: bool | None = None
    typing = True

    def __init__(self, app: Celery, fn: Callable[..., Any], name: str, bind: bool, opts: dict[str, Any]) -> None:
        self._app = app
        self.run = fn
        self.name = name
        self.bind = bind
        self._opts = opts
        self.max_retries = opts.get("max_retries", type(self).max_retries)
        self.default_retry_delay = opts.get(
            "default_retry_delay", app.conf.task_default_retry_delay
        )
        self.__doc__ = fn.__doc__
        self.__name__ = getattr(fn, "__name__", name)
        self.__module__ = getattr(fn, "__module__", __name__)

    @property
    def app(self) -> Celery:
        return self._app

    @property
    def request(self) -> Request:
        """The run this code is in (``called_directly`` outside one)."""
        return _REQUEST.get(Request())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Runs the body here and now, as Celery's ``__call__``."""
        return self.run(self, *args, **kwargs) if self.bind else self.run(*args, **kwargs)

    # -- sending -------------------------------------------------------

    def delay(self, *args: Any, **kwargs: Any) -> AsyncResult:
        return self.apply_async(args, kwargs)

    def apply_async(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> AsyncResult:
        """Celery's ``apply_async``: ``countdown``, ``eta``, ``expires``,
        ``queue``, ``priority``, ``task_id``, ``routing_key`` (read as the
        queue), ``link`` and ``link_error``; an option headway does not have
        raises ``TypeError``."""
        return self._app.send_task(self.name, args, kwargs, **options)

    def s(self, *args: Any, **kwargs: Any) -> _tasks.Signature[Any]:
        return self._app.app.signature(self.name, args, kwargs)

    def si(self, *args: Any, **kwargs: Any) -> _tasks.Signature[Any]:
        return self._app.app.signature(self.name, args, kwargs, immutable=True)

    def signature(
        self, args: Sequence[Any] | None = None, kwargs: Mapping[str, Any] | None = None,
        immutable: bool = False, **options: Any,
    ) -> _tasks.Signature[Any]:  # fmt: skip
        sig = self._app.app.signature(self.name, tuple(args or ()), kwargs, immutable, **_celery_send_options(options))
        return _linked(sig, options)

    def map(self, it: Iterable[Any]) -> _tasks.Signature[Any]:
        """One run calling the task for each item (Celery's ``xmap``)."""
        return self._app.app.signature("celery.map", (), {"task": self.name, "it": list(it)}, immutable=True)

    def starmap(self, it: Iterable[Sequence[Any]]) -> _tasks.Signature[Any]:
        """One run calling the task with each item's arguments (``xstarmap``)."""
        items = [list(x) for x in it]
        return self._app.app.signature("celery.starmap", (), {"task": self.name, "it": items}, immutable=True)

    def chunks(self, it: Iterable[Sequence[Any]], n: int) -> group:
        """The items in runs of ``n`` (each a ``starmap``), as a group."""
        return chunks(self, it, n)

    def AsyncResult(self, task_id: str) -> AsyncResult:  # noqa: N802 - Celery's name
        return AsyncResult(task_id, self._app)

    # -- inside a run ----------------------------------------------------

    def retry(
        self,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        exc: BaseException | None = None,
        throw: bool = True,
        eta: Any = None,
        countdown: float | None = None,
        max_retries: int | None = None,
        **options: Any,
    ) -> TaskRetry:
        """Celery's ``self.retry``: raises ``Retry``; the run goes again
        after ``countdown`` (else ``eta``, else ``default_retry_delay``),
        within ``max_retries`` (else the task's; ``None`` for ever), past
        which it fails with ``exc`` or ``MaxRetriesExceededError``. Only
        ``throw=True`` is supported (headway retries what is raised)."""
        if not throw:
            raise TypeError("retry(throw=False) is not supported: raise what retry() answers")
        if options:
            raise TypeError(f"retry() options headway does not have: {sorted(options)}")
        return _retry(self, args, kwargs, exc, throw, eta, countdown, max_retries)  # type: ignore[no-any-return]

    def update_state(
        self, task_id: str | None = None, state: str | None = None, meta: Any = None, **kwargs: Any
    ) -> None:
        """Celery's ``update_state``: records a custom state (``"PROGRESS"``)
        and its ``meta`` for the run in progress, read back through
        ``AsyncResult(id).state`` / ``.info`` until the run ends. Outside a
        run it stores nothing (Celery's direct call has no id); another
        run's id is refused."""
        if kwargs:
            raise TypeError(f"update_state() options headway does not have: {sorted(kwargs)}")
        try:
            ctx = _tasks.current()
        except LookupError:
            return
        if task_id is not None and task_id != ctx.id:
            raise ValueError(f"update_state(task_id={task_id!r}): only the run in progress ({ctx.id}) can be updated")
        # Celery's `state=None` names nothing: the core refuses "" with its reason.
        ctx.update_state("" if state is None else state, meta)

    def __repr__(self) -> str:
        return f"<@task: {self.name}>"


def _linked(sig: _tasks.Signature[Any], options: dict[str, Any]) -> _tasks.Signature[Any]:
    """``sig`` with the ``link`` / ``link_error`` callbacks in ``options``
    (a signature or a list of them), as Celery's ``apply_async`` takes them."""
    for key, add in (("link", sig.link), ("link_error", sig.link_error)):
        v = options.get(key)
        for cb in v if isinstance(v, (list, tuple)) else () if v is None else (v,):
            add(cb)
    if options.get("headers"):
        sig.headers.update(options["headers"])
    return sig


class Celery:
    """Celery's app: ``Celery(main=None, broker=None, backend=None, **conf)``."""

    def __init__(
        self,
        main: str | None = None,
        broker: str | None = None,
        backend: str | None = None,
        include: Sequence[str] | None = None,
        **conf: Any,
    ) -> None:
        self.main = main
        self.conf = Settings(DEFAULTS)
        self.conf.update(conf)
        if broker is not None:
            self.conf.broker_url = broker
        if backend is not None:
            self.conf.result_backend = backend
        self._include = list(include or ())
        self._app: App | None = None
        self.tasks: dict[str, Task] = {}
        _CURRENT.append(self)

    # -- settings ----------------------------------------------------------

    def config_from_object(self, obj: Any, namespace: str | None = None, force: bool = False) -> None:
        """Reads settings from a module, a module's dotted name, a class or a
        mapping; with ``namespace="CELERY"``, ``CELERY_BROKER_URL`` is
        ``broker_url``."""
        if self._app is not None:
            raise RuntimeError("config_from_object after the app was used: its broker is already open")
        if isinstance(obj, str):
            obj = importlib.import_module(obj)
        items = obj.items() if isinstance(obj, Mapping) else ((k, getattr(obj, k)) for k in dir(obj))
        prefix = f"{namespace}_" if namespace else ""
        for k, v in items:
            if not isinstance(k, str) or k.startswith("_"):
                continue
            if prefix:
                if not k.startswith(prefix):
                    continue
                k = k[len(prefix) :].lower()
            elif not k.islower():
                continue
            self.conf[k] = v

    @property
    def app(self) -> App:
        """The headway ``App`` behind it, made on first use."""
        if self._app is None:
            for m in self._include:
                importlib.import_module(m)
            self._app = _make(self.conf)
            self._app._wrap_result = lambda h: AsyncResult._of(h, self)
            for t in self.tasks.values():
                _register(self, t)
            _builtins(self)
        return self._app

    # -- tasks ------------------------------------------------------------

    def task(self, *args: Any, **opts: Any) -> Any:
        """``@app.task`` or ``@app.task(bind=True, name=..., **options)``."""
        _celery_task_options(list(opts))

        def make(fn: Callable[..., Any]) -> Task:
            base = opts.get("base") or Task
            name = opts.get("name") or f"{fn.__module__}.{fn.__name__}"
            t = base(self, fn, name, bool(opts.get("bind", False)), opts)
            self.tasks[name] = t
            if self._app is not None:
                _register(self, t)
            return t

        if len(args) == 1 and callable(args[0]) and not opts:
            return make(args[0])
        if args:
            raise TypeError("app.task takes the function alone, or options as keywords")
        return make

    def send_task(
        self,
        name: str,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
        **options: Any,
    ) -> AsyncResult:
        opts = _celery_send_options(options)
        if "queue" not in opts:
            opts["queue"] = _route(self, name)
        if any(options.get(k) for k in ("link", "link_error", "headers")):
            sig = self.app.signature(name, tuple(args or ()), dict(kwargs) if kwargs else None, **opts)
            return AsyncResult(_linked(sig, options).send().id, self)
        h = self.app.send_task(name, tuple(args or ()), dict(kwargs) if kwargs else None, **opts)
        return AsyncResult(h.id, self)

    def AsyncResult(self, id: str) -> AsyncResult:  # noqa: N802 - Celery's name
        return AsyncResult(id, self)

    def signature(self, name: str, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any) -> _tasks.Signature[Any]:
        immutable = bool(options.pop("immutable", False))
        return _linked(self.app.signature(name, tuple(args), kwargs, immutable, **_celery_send_options(options)), options)

    def _served(self) -> App:
        """The headway app a worker serves (``headway worker -A``): on every
        queue this app's tasks go to, as Celery's worker consumes them."""
        app = self.app
        app._queues = _queues(self)
        app._worker_defaults = worker_defaults(self.conf)
        return app

    def worker(self, **kw: Any) -> _tasks.Worker:
        """A headway worker on this app's queues (``queues`` to choose)."""
        kw.setdefault("queues", _queues(self))
        if "prefetch" not in kw:
            for k, v in worker_defaults(self.conf).items():
                kw.setdefault(k, v)
        return self.app.worker(**kw)

    def __repr__(self) -> str:
        return f"<Celery {self.main or '__main__'} on headway>"


def _headway_app(obj: Any) -> Any:
    """What ``-A`` names (the CLI's, a process-pool child's) as the headway
    ``App`` a worker serves: a real ``celery.Celery``'s tasks on its broker
    (``_from_celery``), a ``Celery`` of this module's on its queues, else
    ``obj`` as it is."""
    if is_celery_app(obj):
        return serve(obj)
    if isinstance(obj, Celery):
        return obj._served()
    return obj


def shared_task(*args: Any, **opts: Any) -> Any:
    """``@shared_task``: a task of the current app."""
    return current_app().task(*args, **opts)


def _make(conf: Settings) -> App:
    """The headway app on ``broker_url`` (``memory://`` when none): the
    same rule and making as a served Celery app's (``_from_celery``)."""
    return app_on(conf, conf.broker_url or "memory://")


def _route(capp: Celery, name: str) -> str:
    """The queue of task ``name``: its own option, ``task_routes``, else the
    default queue (the core's rule)."""
    t = capp.tasks.get(name)
    own = t._opts.get("queue") if t is not None else None
    routes = capp.conf.task_routes
    routes = dict(routes) if isinstance(routes, Mapping) else routes
    return _celery_route(name, str(own) if own else None, routes, str(capp.conf.task_default_queue))


def _queues(capp: Celery) -> list[str]:
    """Every queue the app's tasks go to."""
    qs = {_route(capp, n) for n in capp.tasks} | {str(capp.conf.task_default_queue)}
    return sorted(qs)


def _register(capp: Celery, t: Task) -> None:
    """Registers ``t`` on the headway app with its Celery options as policy."""
    o, conf = t._opts, capp.conf
    kw: dict[str, Any] = {
        "name": t.name,
        "queue": _route(capp, t.name),
        "acks_late": bool(o.get("acks_late", conf.task_acks_late)),
        "ignore_result": bool(o.get("ignore_result", conf.task_ignore_result)),
        "time_limit": o.get("time_limit", conf.task_time_limit),
        "soft_time_limit": o.get("soft_time_limit", conf.task_soft_time_limit),
        "reject_on_worker_lost": bool(o.get("reject_on_worker_lost", conf.task_reject_on_worker_lost)),
        "rate": _celery_rate(o.get("rate_limit", conf.task_default_rate_limit)),
    }
    auto = o.get("autoretry_for") or ()
    if auto:
        # The budget and the backoff are the core's reading of the options.
        retry = {k: v for k, v in o.items() if k.startswith("retry_")}
        retry.update(max_retries=t.max_retries, default_retry_delay=t.default_retry_delay)
        kw["retries"], kw["backoff"] = _celery_autoretry(t.name, retry)
        kw["retry_for"] = tuple(auto)
        if o.get("dont_autoretry_for"):
            kw["dont_retry_for"] = tuple(o["dont_autoretry_for"])

    def body(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        token = _REQUEST.set(Request(ctx, args, kwargs, str(conf.task_default_queue)))
        try:
            return t.run(t, *args, **kwargs) if t.bind else t.run(*args, **kwargs)
        finally:
            _REQUEST.reset(token)

    capp.app.task(bind=True, **kw)(body)


def _builtins(capp: Celery) -> None:
    """Celery's ``celery.map`` and ``celery.starmap`` over this app's tasks."""
    assert capp._app is not None
    maps(capp._app, str(capp.conf.task_default_queue), lambda name: capp.tasks[name])


def signature(varies: Any, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None, **options: Any) -> _tasks.Signature[Any]:
    """Celery's ``signature(name_or_task, args, kwargs, **options)``."""
    if isinstance(varies, _tasks.Signature):
        return varies
    name = varies.name if isinstance(varies, Task) else str(varies)
    capp = varies.app if isinstance(varies, Task) else current_app()
    return capp.signature(name, args, kwargs, **options)


def chunks(task: Task, it: Iterable[Sequence[Any]], n: int) -> group:
    """``it`` in runs of ``n`` items (each a ``starmap``), as a group."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"chunks: n must be a positive int, not {n!r}")
    items = [list(x) for x in it]
    return group(*(task.starmap(items[i : i + n]) for i in range(0, len(items), n)))


__all__ = ["Celery", "Request", "Settings", "Task", "chain", "chunks", "current_app", "shared_task", "signature"]
