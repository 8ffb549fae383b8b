"""Serving a real Celery app: what ``headway worker -A proj.celery:app`` does
when ``app`` is a ``celery.Celery``.

The first step off Celery changes no code: the project keeps its Celery app
and its tasks, and headway's worker takes the place of Celery's on the same
queues. This module makes a headway ``App`` on the Celery app's broker and
result backend (Celery's Redis layout, where Celery workers and producers
share the queues) and registers each of the app's tasks with its Celery
settings: the task's queue, ``acks_late``, ``ignore_result``,
``time_limit`` / ``soft_time_limit`` (or the app's ``task_time_limit`` /
``task_soft_time_limit``), ``reject_on_worker_lost`` and ``rate_limit``.

A run calls the task's own ``run`` inside Celery's request context, so
``bind=True`` tasks read ``self.request`` (id, args, kwargs, retries, eta,
expires, group, chord, callbacks, errbacks, delivery_info, hostname,
root_id, parent_id, correlation_id, timelimit: the core's
``task::request``) and
everything Celery wraps around ``run`` works as in Celery — ``autoretry_for``
with ``retry_backoff`` (Celery's wrapper calls ``self.retry``), and
``self.update_state(state="PROGRESS", meta={...})`` records the run's
custom state through headway's result store (on Celery's layout that is
Celery's own ``celery-task-meta-<id>`` format, so Celery's
``AsyncResult(id).state`` / ``.info`` read it; an id other than the run's
goes to Celery's backend as before). What the
body raises means what it means to Celery: a plain exception fails the run
(no retry unless the task asks), ``Reject`` and ``Ignore`` are headway's
asks of the same names, and ``self.retry(...)`` is headway's retry ask —
the same message goes again (its chain, chord and links kept), within the
task's ``max_retries`` (``None``: for ever), after ``countdown`` or
``default_retry_delay``, failing past the budget with ``exc`` or
``MaxRetriesExceededError`` as Celery does. Only the conversion from
Celery's objects is here; what each ask comes to is the core's.
"""

from __future__ import annotations

import types
from typing import Any

from ._errors import _SOFT, Ignore, Reject, SoftTimeLimitExceeded, TaskRetry
from ._native import _CELERY_FOREVER, _celery_broker, _celery_rate, current
from ._tasks import App


def is_celery_app(obj: object) -> bool:
    """Whether ``obj`` is a ``celery.Celery`` (without importing Celery
    when it is not installed)."""
    mod = type(obj).__module__ or ""
    return (mod == "celery" or mod.startswith("celery.")) and hasattr(obj, "tasks") and hasattr(obj, "conf")


def serve(capp: Any) -> App:
    """A headway ``App`` serving ``capp``'s tasks on its broker and result
    backend (made once per Celery app)."""
    made = getattr(capp, "_headway_app", None)
    if isinstance(made, App):
        return made
    from celery import exceptions as cx  # type: ignore[import-untyped]  # noqa: PLC0415 - only with a Celery app

    conf = capp.conf
    app = app_on(conf, conf.broker_url or "")
    app._worker_defaults = worker_defaults(conf)
    # A Celery task catches Celery's SoftTimeLimitExceeded: what headway
    # raises in a body past its soft limit is both (in this process).
    if not issubclass(_SOFT[0], cx.SoftTimeLimitExceeded):
        _SOFT[0] = type("SoftTimeLimitExceeded", (SoftTimeLimitExceeded, cx.SoftTimeLimitExceeded), {})
    if conf.worker_send_task_events:
        # Celery's `worker_send_task_events` (its `-E`).
        app._native.enable_task_events()
    # The modules the app names (`imports`, `include`, autodiscovery) are
    # imported, so every task is registered before the worker starts.
    capp.loader.import_default_modules()
    for name, task in sorted(capp.tasks.items()):
        if name.startswith("celery."):
            continue
        _register(app, capp, task, cx)
    maps(app, str(conf.task_default_queue), lambda name: capp.tasks[name])
    # Celery's worker consumes the app's queues (`task_queues`, else the
    # default queue) unless told `-Q`: so does this one (`_cli`).
    named = [q.name for q in (conf.task_queues or ())] or [conf.task_default_queue]
    app._queues = named
    capp._headway_app = app
    return app


def result_expires(v: Any) -> Any:
    """Celery's ``result_expires`` as ``RedisBroker.celery`` takes it
    (Celery's ``None``, for ever, is 0 there)."""
    return 0 if v is None else v


def worker_defaults(conf: Any) -> dict[str, Any]:
    """The worker options a Celery app's settings ask for: its
    ``worker_prefetch_multiplier`` when not Celery's default of 4 (which
    leaves headway's own default prefetch, ``× 8`` on the process pool)."""
    m = conf.get("worker_prefetch_multiplier", 4)
    return {} if m in (None, 4) else {"prefetch_multiplier": int(m)}


def app_on(conf: Any, url: str) -> App:
    """A headway ``App`` on the broker ``url`` of a Celery app whose
    settings are ``conf`` (a real Celery app's or ``headway.celery``'s):
    which URLs will do, and which result backends beside each, is the core's
    one rule for both."""
    kind = _celery_broker(url, conf.result_backend or None)
    if kind == "memory":
        return App("memory://")
    if kind == "amqp":
        return _on_rabbitmq(conf, url)
    return _on_redis(conf, url)


def _on_rabbitmq(conf: Any, url: str) -> App:
    """A headway ``App`` on the Celery app's RabbitMQ: its queues declared
    with the app's ``task_queue_max_priority``, results where its
    ``result_backend`` keeps them (Celery's Redis backend or ``rpc://``)."""
    if conf.task_queue_max_priority:
        url += ("&" if "?" in url else "?") + f"max_priority={int(conf.task_queue_max_priority)}"
    return App(url, backend=conf.result_backend or None)


def _on_redis(conf: Any, url: str) -> App:
    """A headway ``App`` on the Celery app's Redis (or its Sentinel-watched
    primary), in Celery's layout."""
    from ._native import RedisBroker  # noqa: PLC0415

    # Celery's transport options and event settings that headway has
    # (`master_name`: the master a sentinel:// URL's sentinels watch).
    topts = conf.broker_transport_options or {}
    broker = RedisBroker.celery(
        url,
        visibility_timeout=topts.get("visibility_timeout", 3600.0),
        task_send_sent_event=bool(conf.task_send_sent_event),
        master_name=topts.get("master_name"),
        result_expires=result_expires(conf.result_expires),
    )
    backend_url = conf.result_backend or ""
    backend: Any = None
    if backend_url and backend_url != url:
        ropts = conf.result_backend_transport_options or {}
        backend = RedisBroker.celery(
            backend_url,
            master_name=ropts.get("master_name"),
            result_expires=result_expires(conf.result_expires),
        )
    return App(broker, backend=backend)


def maps(app: App, queue: str, lookup: Any) -> None:
    """Celery's builtin ``celery.map`` and ``celery.starmap`` (what
    ``task.map``, ``task.starmap`` and ``task.chunks`` send): one run calling
    the task ``lookup(name)`` answers for each item, here, as Celery's
    worker does. ``task`` is Celery's signature dict, or a name."""

    def task_of(task: Any) -> Any:
        name = task.get("task") if isinstance(task, dict) else task
        try:
            return lookup(str(name))
        except KeyError:
            raise LookupError(f"no task named {name!r} in this app") from None

    @app.task(name="celery.map", queue=queue)
    def xmap(task: Any, it: list[Any]) -> list[Any]:
        t = task_of(task)
        return [t(x) for x in it]

    @app.task(name="celery.starmap", queue=queue)
    def xstarmap(task: Any, it: list[list[Any]]) -> list[Any]:
        t = task_of(task)
        return [t(*x) for x in it]


def _register(app: App, capp: Any, task: Any, cx: Any) -> None:
    conf = capp.conf
    time_limit = task.time_limit if task.time_limit is not None else conf.task_time_limit
    soft = task.soft_time_limit if task.soft_time_limit is not None else conf.task_soft_time_limit
    queue = getattr(task, "queue", None) or conf.task_default_queue

    def body(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        request = ctx._celery_request(str(conf.task_default_queue))
        request["args"], request["kwargs"] = list(args), kwargs
        request["timelimit"] = tuple(request["timelimit"])
        task.push_request(**request)
        try:
            return task.run(*args, **kwargs)
        except cx.Reject as e:
            raise Reject(e.reason, requeue=bool(e.requeue)) from e
        except cx.Ignore as e:
            raise Ignore() from e
        finally:
            task.pop_request()

    app.task(
        name=task.name,
        bind=True,
        queue=queue,
        acks_late=bool(task.acks_late),
        ignore_result=bool(task.ignore_result),
        time_limit=time_limit,
        soft_time_limit=soft,
        reject_on_worker_lost=bool(task.reject_on_worker_lost),
        rate=_celery_rate(task.rate_limit),
    )(body)
    # `self.retry(...)` (and `autoretry_for`, which calls it) becomes
    # headway's retry ask on this task object, in this process.
    task.retry = types.MethodType(_retry, task)
    # `self.update_state(...)` for the run in progress records through the
    # run's context (the core's rule for the name); another id is Celery's.
    task.update_state = types.MethodType(_update_state_of(task.update_state), task)


def _update_state_of(celery_update_state: Any) -> Any:
    def update_state(
        self: Any, task_id: str | None = None, state: str | None = None, meta: Any = None, **kwargs: Any
    ) -> None:
        """Celery's ``Task.update_state``: for the run in progress (``task_id``
        None or its own), headway's ``ctx.update_state(state, meta)``."""
        try:
            ctx = current()
        except LookupError:
            ctx = None
        if ctx is None or (task_id is not None and task_id != ctx.id):
            celery_update_state(task_id, state, meta, **kwargs)
            return
        # Celery's `state=None` is no name: the core refuses it as "".
        ctx.update_state("" if state is None else state, meta)

    return update_state


def _retry(
    self: Any,
    args: Any = None,
    kwargs: Any = None,
    exc: BaseException | None = None,
    throw: bool = True,
    eta: Any = None,
    countdown: float | None = None,
    max_retries: int | None = None,
    **options: Any,
) -> Any:
    """Celery's ``Task.retry`` as headway's retry ask: the same message again
    (with ``args`` / ``kwargs`` when given), after ``countdown`` (else
    ``eta``, else the task's ``default_retry_delay``), within
    ``max_retries`` (else the task's; ``None`` is for ever)."""
    budget = self.max_retries if max_retries is None else max_retries
    if countdown is None and eta is None:
        countdown = self.default_retry_delay
    e = TaskRetry(
        countdown=countdown,
        eta=eta,
        max_retries=_CELERY_FOREVER if budget is None else budget,
        exc=exc,
    )
    ask = e._headway_ask

    def with_args() -> tuple[dict[str, Any], BaseException | None]:
        d, cause = ask()
        if args is not None:
            d["args"] = list(args)
        if kwargs is not None:
            d["kwargs"] = dict(kwargs)
        return d, cause

    e._headway_ask = with_args  # type: ignore[method-assign]
    raise e
