"""OpenTelemetry tracing: a send is a PRODUCER span ``apply_async/<task>``,
its run a CONSUMER span ``run/<task>`` whose parent it is, on every broker
layout (the context travels in the message's headers); a failing body's span
is an error with the exception recorded; ``App(tracing=False)`` traces
nothing."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from opentelemetry.util._once import Once

import headway
from conftest import Apps, RedisServer

WAIT = 10.0


def _reset_globals() -> None:
    # OpenTelemetry sets its provider once per process; its own test
    # helpers reset these two to set another (and to leave none behind).
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset_globals()
    trace.set_tracer_provider(provider)
    yield exporter
    provider.shutdown()
    _reset_globals()


def until(what: str, check: Any) -> Any:
    deadline = time.monotonic() + WAIT
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def named(exporter: InMemorySpanExporter, name: str, n: int = 1) -> list[ReadableSpan]:
    """The finished spans called ``name``, once there are ``n``."""
    return until(  # type: ignore[no-any-return]
        f"{n} span(s) {name}",
        lambda: (
            got
            if len(got := [s for s in exporter.get_finished_spans() if s.name == name]) >= n
            else None
        ),
    )


def test_send_and_run_are_one_trace_on_every_layout(
    apps: Apps, spans: InMemorySpanExporter
) -> None:
    app = apps.app(clock=None)

    @app.task(name="t.add")
    def add(a: int, b: int) -> int:
        return a + b

    apps.start(app)
    h = add.delay(2, 3)
    assert h.get(timeout=WAIT) == 5
    (send,) = named(spans, "apply_async/t.add")
    (run,) = named(spans, "run/t.add")
    assert send.kind == SpanKind.PRODUCER and run.kind == SpanKind.CONSUMER
    assert send.context is not None and run.context is not None
    assert run.context.trace_id == send.context.trace_id
    assert run.parent is not None and run.parent.span_id == send.context.span_id
    assert send.attributes is not None and run.attributes is not None
    assert send.attributes["celery.action"] == "apply_async"
    assert send.attributes["messaging.message.id"] == h.id
    assert send.attributes["celery.task_name"] == "t.add"
    assert send.attributes["messaging.destination"] == "default"
    assert run.attributes["celery.action"] == "run"
    assert run.attributes["messaging.message.id"] == h.id
    assert run.attributes["celery.state"] == "SUCCESS"
    assert "celery.retries" not in run.attributes
    assert run.status.status_code == StatusCode.UNSET


def test_the_context_travels_in_the_message_headers(
    redis_server: RedisServer, spans: InMemorySpanExporter
) -> None:
    # On Celery's layout the context is a top-level protocol-v2 header, where
    # the Celery instrumentation puts it and a Celery worker reads it back.
    app = headway.App(headway.RedisBroker.celery(redis_server.url.rsplit("/", 1)[0] + "/19"))
    assert redis_server.command("FLUSHDB", db=19) == b"+OK"
    h = app.send_task("elsewhere.task", (1,), queue="traced")
    (send,) = named(spans, "apply_async/elsewhere.task")
    envelope = _lindex(redis_server, "traced", 19)
    headers = json.loads(envelope)["headers"]
    assert send.context is not None
    # version-trace id-parent id-flags (the flags are the sampler's).
    assert headers["traceparent"].startswith(
        f"00-{send.context.trace_id:032x}-{send.context.span_id:016x}-"
    )
    assert headers["id"] == h.id


def _lindex(server: RedisServer, key: str, db: int) -> bytes:
    import socket

    parts = []
    for cmd in (("SELECT", str(db)), ("LINDEX", key, "0")):
        parts.append(f"*{len(cmd)}\r\n".encode())
        for a in cmd:
            b = a.encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(b), b))
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
        s.sendall(b"".join(parts))
        got = b""
        while True:
            chunk = s.recv(65536)
            got += chunk
            # +OK\r\n$<n>\r\n<body>\r\n
            lines = got.split(b"\r\n", 2)
            if len(lines) == 3 and lines[1].startswith(b"$"):
                n = int(lines[1][1:])
                if len(lines[2]) >= n:
                    return lines[2][:n]
            if not chunk:
                raise AssertionError(f"short reply: {got!r}")


def test_a_failing_body_is_an_error_with_its_exception_and_a_retry_its_own_run(
    apps: Apps, spans: InMemorySpanExporter
) -> None:
    app = apps.app(clock=None)

    @app.task(name="t.bad", retries=1, backoff=headway.Fixed(0.01))
    def bad(x: int) -> None:
        raise ValueError(f"no {x}")

    apps.start(app)
    h = bad.delay(7)
    with pytest.raises(headway.TaskFailed):
        h.get(timeout=WAIT)
    (send,) = named(spans, "apply_async/t.bad")
    first, second = sorted(named(spans, "run/t.bad", 2), key=lambda s: s.start_time or 0)
    assert send.context is not None
    for run in (first, second):
        assert run.context is not None and run.context.trace_id == send.context.trace_id
        # A retry keeps the message's context: each attempt is a child of
        # the send.
        assert run.parent is not None and run.parent.span_id == send.context.span_id
        assert run.status.status_code == StatusCode.ERROR
        assert run.status.description == "no 7"
        (event,) = [e for e in run.events if e.name == "exception"]
        assert event.attributes is not None
        assert event.attributes["exception.type"] == "ValueError"
        assert event.attributes["exception.message"] == "no 7"
    assert first.attributes is not None and second.attributes is not None
    assert first.attributes["celery.state"] == "RETRY"
    assert first.attributes["celery.retry.reason"] == "no 7"
    assert second.attributes["celery.state"] == "FAILURE"
    assert second.attributes["celery.retries"] == 1


def test_an_async_body_runs_inside_its_span(apps: Apps, spans: InMemorySpanExporter) -> None:
    app = apps.app(clock=None)
    inside: list[Any] = []

    @app.task(name="t.aio")
    async def aio() -> str:
        await asyncio.sleep(0)
        inside.append(trace.get_current_span().get_span_context())
        return "ok"

    apps.start(app)
    assert aio.delay().get(timeout=WAIT) == "ok"
    (send,) = named(spans, "apply_async/t.aio")
    (run,) = named(spans, "run/t.aio")
    assert run.context is not None and send.context is not None
    assert inside == [run.context]
    assert run.parent is not None and run.parent.span_id == send.context.span_id
    # The loop's own context was left as it was.
    assert not trace.get_current_span().get_span_context().is_valid


def test_a_sync_body_runs_inside_its_span_and_a_nested_send_is_its_child(
    apps: Apps, spans: InMemorySpanExporter
) -> None:
    app = apps.app(clock=None)

    @app.task(name="t.leaf")
    def leaf() -> int:
        return 1

    @app.task(name="t.outer")
    def outer() -> str:
        leaf.delay()
        return format(trace.get_current_span().get_span_context().span_id, "016x")

    apps.start(app)
    inner_id = outer.delay().get(timeout=WAIT)
    (run,) = named(spans, "run/t.outer")
    (nested,) = named(spans, "apply_async/t.leaf")
    (leaf_run,) = named(spans, "run/t.leaf")
    assert run.context is not None and nested.context is not None
    assert inner_id == format(run.context.span_id, "016x")
    assert nested.parent is not None and nested.parent.span_id == run.context.span_id
    assert leaf_run.context is not None and leaf_run.context.trace_id == run.context.trace_id


def test_tracing_false_emits_nothing(apps: Apps, spans: InMemorySpanExporter) -> None:
    off = apps.app(clock=None, tracing=False)
    on = apps.app(clock=None)
    for app in (off, on):

        @app.task(name="t.one")
        def one() -> int:
            return 1

        apps.start(app)
    assert off.send("t.one", ()).get(timeout=WAIT) == 1
    # The positive control: the same task on an app that traces.
    assert on.send("t.one", ()).get(timeout=WAIT) == 1
    named(spans, "run/t.one")
    got = spans.get_finished_spans()
    assert [s.name for s in got if s.kind == SpanKind.PRODUCER] == ["apply_async/t.one"]
    assert [s.name for s in got if s.kind == SpanKind.CONSUMER] == ["run/t.one"]
    assert not off._native.tracing and on._native.tracing


def test_without_a_tracer_provider_nothing_is_traced(redis_server: RedisServer) -> None:
    # The positive control: test_the_context_travels_in_the_message_headers.
    _reset_globals()
    celery = headway.App(headway.RedisBroker.celery(redis_server.url.rsplit("/", 1)[0] + "/19"))
    assert redis_server.command("FLUSHDB", db=19) == b"+OK"
    h = celery.send_task("elsewhere.task", (1,), queue="quiet")
    headers = json.loads(_lindex(redis_server, "quiet", 19))["headers"]
    assert headers["id"] == h.id and "traceparent" not in headers
    app = headway.App("memory://")

    @app.task(name="t.quiet")
    def quiet() -> int:
        return 1

    w = app.worker(concurrency=1)
    w.start()
    try:
        assert quiet.delay().get(timeout=WAIT) == 1
    finally:
        w.stop(5.0)
    assert not app._native.tracing


CHILD_APP = '''
import json, os
import headway
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult


class ToFile(SpanExporter):
    """Each finished span as a JSON line: the child's spans, for the test."""

    def export(self, spans):
        with open(os.environ["TR_SPANS"], "a") as f:
            for s in spans:
                parent = s.parent.span_id if s.parent is not None else None
                f.write(json.dumps({"name": s.name, "trace": s.context.trace_id,
                                    "parent": parent, "pid": os.getpid()}) + "\\n")
        return SpanExportResult.SUCCESS


# A child sets its own provider up at import, as a project's module would;
# the test process has the fixture's already.
if isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(ToFile()))
    trace.set_tracer_provider(provider)

app = headway.App("memory://")


@app.task(name="pp.pid")
def pid():
    return os.getpid()
'''


def test_a_process_pool_child_opens_the_run_span_under_the_send(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, spans: InMemorySpanExporter
) -> None:
    import importlib
    import os

    out = tmp_path / "spans.jsonl"
    monkeypatch.setenv("TR_SPANS", str(out))
    (tmp_path / "traced_pp_app.py").write_text(CHILD_APP)
    monkeypatch.syspath_prepend(str(tmp_path))
    mod = importlib.import_module("traced_pp_app")
    w = mod.app.worker(concurrency=1, pool="process")
    w.start()
    try:
        child = mod.pid.delay().get(timeout=30)
    finally:
        w.stop(5.0)
    (send,) = named(spans, "apply_async/pp.pid")
    assert send.context is not None
    # The run ran, and was traced, in the child (not here).
    assert child != os.getpid()
    assert not [s for s in spans.get_finished_spans() if s.name == "run/pp.pid"]
    runs = [json.loads(line) for line in out.read_text().splitlines()]
    (run,) = [r for r in runs if r["name"] == "run/pp.pid"]
    assert run["pid"] == child
    assert run["trace"] == send.context.trace_id and run["parent"] == send.context.span_id


def test_signal_receivers_run_inside_the_run_span(spans: InMemorySpanExporter) -> None:
    from headway import signals

    app = headway.App("memory://")
    seen: list[tuple[str, Any]] = []

    def pre(**kw: Any) -> None:
        seen.append(("pre", trace.get_current_span().get_span_context()))

    def post(**kw: Any) -> None:
        seen.append(("post", trace.get_current_span().get_span_context()))

    @app.task(name="t.hooked")
    def hooked() -> int:
        return 1

    signals.task_prerun.connect(pre)
    signals.task_postrun.connect(post)
    w = app.worker(concurrency=1)
    w.start()
    try:
        assert hooked.delay().get(timeout=WAIT) == 1
    finally:
        w.stop(5.0)
        assert signals.task_prerun.disconnect(pre) and signals.task_postrun.disconnect(post)
    (run,) = named(spans, "run/t.hooked")
    assert run.context is not None
    assert seen == [("pre", run.context), ("post", run.context)]


def test_a_tracing_that_is_not_a_bool_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match="tracing must be a bool, not str"):
        headway.App("memory://", tracing="no")  # type: ignore[arg-type]
    assert headway.App("memory://", tracing=False)._tracing is False
