"""OpenTelemetry spans for sends and runs (``pip install headway[otel]``).

Why it looks like this: the core decides what a trace says — the span names
and kinds, their attributes, which headers carry the context and where a
message keeps them (the names follow opentelemetry-instrumentation-celery,
so one trace crosses Celery and headway processes). This module only calls
OpenTelemetry's API: it starts the span the core describes, injects the
current context into a dict the core puts on the message, extracts what a
run's message carried, and records an exception.

Nothing is traced unless ``opentelemetry-api`` is importable and a tracer
provider is set (``trace.set_tracer_provider``) — a send then costs one
check, and a worker started before a provider was set does not trace (set it
up first, as with any instrumentation). ``App(tracing=False)`` turns it off
for one app.
"""

from __future__ import annotations

import logging
import os
import threading
from typing import Any

try:
    from opentelemetry import context as _context
    from opentelemetry import propagate as _propagate
    from opentelemetry import trace as _trace
except ImportError:  # the `otel` extra is not installed: nothing to trace with
    _trace = None  # type: ignore[assignment]

from . import _native

_log = logging.getLogger("headway.tracing")

#: Whether a worker in this process traces: the task hook then opens a
#: span around each sync body, and the async host around each async one.
enabled = False

_lock = threading.Lock()
_cached: tuple[Any, Any] | None = None
_stack = threading.local()


#: A provider named in the environment is made by OpenTelemetry on the
#: first ``get_tracer_provider()``: then only that call can say.
_FROM_ENV = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ
_UNKNOWN = object()


def provided() -> bool:
    """Whether OpenTelemetry is installed and a tracer provider is set.

    Called on every send, so it reads the API's global first:
    ``get_tracer_provider()`` looks the environment up on each call (about
    a microsecond, as much again as a send costs), and a provider once set
    stays set. Where that global is not there, the public call decides."""
    if _trace is None:
        return False
    p = getattr(_trace, "_TRACER_PROVIDER", _UNKNOWN)
    if p is None and not _FROM_ENV:
        return False
    if p is _UNKNOWN or p is None:
        p = _trace.get_tracer_provider()
    return not isinstance(p, (_trace.ProxyTracerProvider, _trace.NoOpTracerProvider))


def _tracer() -> Any:
    global _cached
    provider = _trace.get_tracer_provider()
    c = _cached
    if c is None or c[0] is not provider:
        from . import __version__

        c = (provider, provider.get_tracer("headway", __version__))
        _cached = c
    return c[1]


def _kind(name: str) -> Any:
    return getattr(_trace.SpanKind, name)


def enable() -> None:
    """Has runs in this process traced (a worker or a process-pool child of
    an app that traces): installs the task hook."""
    global enabled
    if enabled:
        return
    enabled = True
    from . import signals

    signals._rehook()


def compose(signals_hook: Any) -> Any:
    """The native task hook: ``signals_hook`` (None when no signal has a
    receiver) with a span around the body when tracing is enabled."""
    if not enabled:
        return signals_hook

    def hook(phase: str, name: str, args: Any, kwargs: Any, out: Any, returned: bool) -> None:
        if phase == "pre":
            stack = getattr(_stack, "runs", None)
            if stack is None:
                stack = _stack.runs = []
            stack.append(begin(_native.current()))
            if signals_hook is not None:
                signals_hook(phase, name, args, kwargs, out, returned)
            return
        try:
            if signals_hook is not None:
                signals_hook(phase, name, args, kwargs, out, returned)
        finally:
            stack = getattr(_stack, "runs", None)
            run = stack.pop() if stack else None
            if run is not None:
                detach(run)
                end(run, out, returned)

    return hook


def send(
    native: Any,
    name: str,
    args: Any,
    kwargs: Any,
    opts: dict[str, Any],
    known: bool,
) -> Any:
    """A send inside its PRODUCER span, the message carrying its context."""
    tid = opts.get("task_id")
    queue = opts.get("queue")
    sname, kind, attrs, run_id = native.send_span(
        name,
        queue if isinstance(queue, str) else None,
        tid if isinstance(tid, str) else None,
    )
    if tid is None:
        opts = {**opts, "task_id": run_id}
    with _tracer().start_as_current_span(sname, kind=_kind(kind), attributes=attrs):
        carrier: dict[str, str] = {}
        _propagate.inject(carrier)
        return native.send(name, args, kwargs, opts or None, known=known, trace=carrier)


class _Run:
    __slots__ = ("ctx", "span", "token")

    def __init__(self, ctx: Any, span: Any, token: Any) -> None:
        self.ctx = ctx
        self.span = span
        self.token = token


def begin(ctx: Any) -> _Run | None:
    """Opens the CONSUMER span of the run ``ctx`` and makes it current;
    None when its app does not trace (or OpenTelemetry failed: logged)."""
    try:
        t = ctx._trace()
        if t is None:
            return None
        sname, kind, attrs, carrier = t
        parent = _propagate.extract(carrier)
        span = _tracer().start_span(sname, context=parent, kind=_kind(kind), attributes=attrs)
        token = _context.attach(_trace.set_span_in_context(span, parent))
        return _Run(ctx, span, token)
    except Exception:  # noqa: BLE001 - tracing never fails a run
        _log.exception("headway: could not open a run's span")
        return None


def detach(run: _Run) -> None:
    """Makes the span no longer current in this context."""
    if run.token is not None:
        try:
            _context.detach(run.token)
        except Exception:  # noqa: BLE001 - tracing never fails a run
            _log.exception("headway: could not detach a run's span")
        run.token = None


def end(run: _Run | None, out: Any, ok: bool) -> None:
    """Ends a run's span: the state the core says, and for a body that
    raised, the exception recorded and the status ERROR."""
    if run is None:
        return
    try:
        reason = "" if ok else str(out)
        raised = None if ok else out if isinstance(out, BaseException) else Exception(str(out))
        attrs, error = run.ctx._trace_end(raised, reason)
        span = run.span
        span.set_attributes(attrs)
        if error:
            if isinstance(out, BaseException):
                span.record_exception(out)
            span.set_status(_trace.Status(_trace.StatusCode.ERROR, reason))
        span.end()
    except Exception:  # noqa: BLE001 - tracing never fails a run
        _log.exception("headway: could not end a run's span")
