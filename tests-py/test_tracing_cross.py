"""One OpenTelemetry trace across languages and processes, on Redis (headway's
own layout and Celery's): a send traced in this Python process is the parent
of the run a Node worker process traces, and a send traced in a Node process
is the parent of the run a worker here traces. The Node side is
tests-js/fixtures/trace-node.mjs (the OpenTelemetry SDK's in-memory exporter
there as here); each direction has its control beside it: a send from an app
made with tracing off leaves a run whose span is a root of another trace."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from opentelemetry.util._once import Once

import headway
from conftest import RedisServer

WAIT = 20.0
ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests-js" / "fixtures" / "trace-node.mjs"
#: Celery's key names are fixed: a database per layout use, flushed first.
CELERY_DB = {"py-to-node": 22, "node-to-py": 23}


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


def _node() -> str:
    # Never a skip: without Node or the installed packages this test fails,
    # saying what to install.
    node = shutil.which("node")
    assert node is not None, "node is not installed (the Node side of the trace)"
    for pkg in ("@opentelemetry/api", "@opentelemetry/sdk-trace-base", "@opentelemetry/core"):
        assert (ROOT / "node_modules" / pkg).is_dir(), (
            f"{pkg} is not in node_modules: run `npm install` at the repo root first"
        )
    assert list((ROOT / "bindings-node").glob("headway*.node")), (
        "the Node addon is not built: run `npm install` at the repo root first"
    )
    return node


def _urls(server: RedisServer, layout: str, direction: str) -> tuple[str, str]:
    """The broker URL and key prefix both processes use."""
    if layout == "celery":
        db = CELERY_DB[direction]
        assert server.command("FLUSHDB", db=db) == b"+OK"
        return f"redis://127.0.0.1:{server.port}/{db}", ""
    return server.url, f"x{uuid.uuid4().hex[:8]}:"


def _broker(layout: str, url: str, prefix: str) -> headway.RedisBroker:
    if layout == "celery":
        return headway.RedisBroker.celery(url)
    return headway.RedisBroker(url, prefix=prefix)


def _node_run(*args: str) -> list[dict[str, Any]]:
    """Runs the fixture to its end; its JSON lines."""
    out = subprocess.run(
        [_node(), str(FIXTURE), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, f"node exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


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


@pytest.mark.parametrize("layout", ["redis", "celery"])
def test_a_python_send_is_the_parent_of_the_node_run(
    layout: str, redis_server: RedisServer, spans: InMemorySpanExporter
) -> None:
    url, prefix = _urls(redis_server, layout, "py-to-node")
    traced = headway.App(_broker(layout, url, prefix))
    off = headway.App(_broker(layout, url, prefix), tracing=False)
    h = traced.send_task("cross.py_to_node", (2, 3))
    quiet = off.send_task("cross.py_to_node", (4, 5))
    (send,) = named(spans, "apply_async/cross.py_to_node")
    assert send.kind == SpanKind.PRODUCER and send.context is not None
    assert send.attributes is not None and send.attributes["messaging.message.id"] == h.id
    # The control's send left no span here.
    assert [s.name for s in spans.get_finished_spans()] == ["apply_async/cross.py_to_node"]

    runs = {r["id"]: r for r in _node_run("work", layout, url, prefix, "cross.py_to_node", "2")}
    assert set(runs) == {h.id, quiet.id}
    # The Node process ran both (the results are its).
    assert h.get(timeout=WAIT) == 5 and quiet.get(timeout=WAIT) == 9
    run = runs[h.id]
    assert run["traceId"] == format(send.context.trace_id, "032x")
    assert run["parentSpanId"] == format(send.context.span_id, "016x")
    assert run["spanId"] != run["parentSpanId"]
    # The control: traced by the same Node worker, but the message carried
    # no context, so its run is the root of a trace of its own.
    control = runs[quiet.id]
    assert control["parentSpanId"] is None
    assert control["traceId"] != run["traceId"]


@pytest.mark.parametrize("layout", ["redis", "celery"])
def test_a_node_send_is_the_parent_of_the_python_run(
    layout: str, redis_server: RedisServer, spans: InMemorySpanExporter
) -> None:
    url, prefix = _urls(redis_server, layout, "node-to-py")
    (sent,) = _node_run("send", layout, url, prefix, "cross.node_to_py")
    traced, quiet = sent["traced"], sent["off"]
    assert traced["messageId"] == traced["id"]
    # The control's send left no span there.
    assert sent["spans"] == 0

    app = headway.App(_broker(layout, url, prefix))

    @app.task(name="cross.node_to_py")
    def add(a: int, b: int) -> int:
        return a + b

    w = app.worker(concurrency=1)
    w.start()
    try:
        assert app.AsyncResult(traced["id"]).get(timeout=WAIT) == 5
        assert app.AsyncResult(quiet["id"]).get(timeout=WAIT) == 5
        got = named(spans, "run/cross.node_to_py", 2)
    finally:
        w.stop(5.0)
    by_id = {}
    for s in got:
        assert s.attributes is not None and s.kind == SpanKind.CONSUMER
        by_id[s.attributes["messaging.message.id"]] = s
    assert set(by_id) == {traced["id"], quiet["id"]}
    run = by_id[traced["id"]]
    assert run.context is not None
    assert format(run.context.trace_id, "032x") == traced["traceId"]
    assert run.parent is not None and format(run.parent.span_id, "016x") == traced["spanId"]
    assert run.parent.is_remote
    # The control: the untraced Node send's run here is a root.
    control = by_id[quiet["id"]]
    assert control.context is not None and control.parent is None
    assert format(control.context.trace_id, "032x") != traced["traceId"]
    # Nothing here sent: no send span in this process.
    assert not [s for s in spans.get_finished_spans() if s.kind == SpanKind.PRODUCER]
