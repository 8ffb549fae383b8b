"""One trace across Celery and headway on Celery's layout, with a real
Celery 5.5 instrumented by opentelemetry-instrumentation-celery.

Both sides run in this process, on one redis-server database, exporting to
one in-memory exporter: a Celery producer's ``apply_async/<task>`` span is
the parent of the headway worker's ``run/<task>``, and a headway send's span
the parent of an instrumented Celery worker's ``run/<task>`` — the context
crossing as the top-level ``traceparent`` message header each side reads
where the other writes it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery
from celery.contrib.testing.worker import start_worker
from opentelemetry import trace
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.util._once import Once

import headway
from conftest import RedisServer

WAIT = 20.0
DB = 21


def _reset_globals() -> None:
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _reset_globals()
    trace.set_tracer_provider(provider)
    instrumentor = CeleryInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    yield exporter
    instrumentor.uninstrument()
    provider.shutdown()
    _reset_globals()


@pytest.fixture
def url(redis_server: RedisServer) -> str:
    assert redis_server.command("FLUSHDB", db=DB) == b"+OK"
    return redis_server.url.rsplit("/", 1)[0] + f"/{DB}"


def celery_app(url: str) -> Celery:
    app = Celery("traced", broker=url, backend=url)
    app.conf.update(
        task_default_queue="celery",
        worker_prefetch_multiplier=1,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    return app


def named(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    deadline = time.monotonic() + WAIT
    while True:
        got = [s for s in exporter.get_finished_spans() if s.name == name]
        if got:
            assert len(got) == 1, [s.name for s in exporter.get_finished_spans()]
            return got[0]
        if time.monotonic() > deadline:
            seen = [s.name for s in exporter.get_finished_spans()]
            raise AssertionError(f"no span {name} (spans: {seen})")
        time.sleep(0.02)


def one_trace(send: ReadableSpan, run: ReadableSpan) -> None:
    assert send.kind == SpanKind.PRODUCER and run.kind == SpanKind.CONSUMER
    assert send.context is not None and run.context is not None
    assert run.context.trace_id == send.context.trace_id
    assert run.parent is not None and run.parent.span_id == send.context.span_id


def test_a_celery_producers_trace_reaches_a_headway_run(
    url: str, spans: InMemorySpanExporter
) -> None:
    celery = celery_app(url)
    hw = headway.App(headway.RedisBroker.celery(url))

    @hw.task(name="tasks.add", queue="celery")
    def add(x: int, y: int) -> int:
        return x + y

    w = hw.worker(queues=["celery"], concurrency=1)
    w.start()
    try:
        r = celery.send_task("tasks.add", (2, 3))
        assert r.get(timeout=WAIT) == 5
    finally:
        w.stop(5.0)
    send = named(spans, "apply_async/tasks.add")
    run = named(spans, "run/tasks.add")
    one_trace(send, run)
    # Written by the Celery instrumentation and by headway, alike.
    assert send.attributes is not None and run.attributes is not None
    assert send.attributes["celery.action"] == "apply_async"
    assert run.attributes["celery.action"] == "run"
    assert run.attributes["messaging.message.id"] == send.attributes["messaging.message.id"] == r.id
    assert run.attributes["celery.state"] == "SUCCESS"
    assert "headway" in str(run.instrumentation_scope)
    assert "celery" in str(send.instrumentation_scope)


def test_a_headway_send_is_the_parent_of_an_instrumented_celery_run(
    url: str, spans: InMemorySpanExporter
) -> None:
    celery = celery_app(url)
    ran: list[Any] = []

    @celery.task(name="tasks.mul")
    def mul(x: int, y: int) -> int:
        ran.append(trace.get_current_span().get_span_context())
        return x * y

    hw = headway.App(headway.RedisBroker.celery(url))
    with start_worker(celery, pool="solo", perform_ping_check=False, loglevel="WARNING"):
        h = hw.send_task("tasks.mul", (4, 5), queue="celery")
        assert h.get(timeout=WAIT) == 20
    send = named(spans, "apply_async/tasks.mul")
    run = named(spans, "run/tasks.mul")
    one_trace(send, run)
    assert run.context is not None and ran == [run.context]
    assert "headway" in str(send.instrumentation_scope)
    assert "celery" in str(run.instrumentation_scope)
    assert run.attributes is not None and run.attributes["celery.state"] == "SUCCESS"
