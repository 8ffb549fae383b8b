"""Errors across the boundary: panics, the binding's own conversions, and
the kinds of broker failure (one subclass of ``BrokerError`` each)."""

from __future__ import annotations

import math
import os
import pickle
import socket
import subprocess
import sys
from typing import Any

import pytest

import headway
from headway import Backoff, Bucket, PanicError, Pool, _native


def test_a_rust_panic_is_a_runtime_error() -> None:
    with pytest.raises(PanicError, match="deliberate panic") as e:
        _native._panic()
    assert isinstance(e.value, RuntimeError)
    # `except Exception` catches it (pyo3's own PanicException would not).
    try:
        _native._panic()
    except Exception as caught:
        assert type(caught) is PanicError
    assert headway.PanicError is _native.PanicError


def test_module_still_works_after_a_panic() -> None:
    with pytest.raises(PanicError):
        _native._panic()
    assert Bucket(1.0).take(0.0)


def test_noop_floor_accepts_the_benchmark_arguments() -> None:
    assert _native._noop() is None
    assert _native._noop(1.0, 2.0) is None
    assert _native._Noop().call(1.0) is None


def test_clock_is_time_monotonic() -> None:
    import time

    a = time.monotonic()
    b = _native._now()
    c = time.monotonic()
    assert a - 0.001 <= b <= c + 0.001


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_forked_children_draw_different_jitter() -> None:
    code = (
        "import os, headway\n"
        "b = headway.Backoff(base=1.0, cap=1.0)\n"
        "r, w = os.pipe()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.write(w, repr(b.delay(1)).encode()); os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
        "child = float(os.read(r, 64))\n"
        "print(child != b.delay(1))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


def test_value_errors_name_the_argument() -> None:
    with pytest.raises(ValueError, match="invalid `rate`: must be a finite number"):
        Bucket(math.nan)
    with pytest.raises(ValueError, match="invalid `size`: must not be negative"):
        headway.Limits(size=-1)


def test_type_errors_name_the_argument() -> None:
    with pytest.raises(TypeError, match="`random` must be a number, not str"):
        Backoff().delay(1, random="x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`now` must be a number, not list"):
        Pool().refusal([])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`fn` must be callable"):
        headway.retry(42)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="`open` must be callable"):
        headway.Pooled(None)  # type: ignore[call-overload]


# ---------------------------------------------------------------- broker kinds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _broker(layout: str, url: str) -> headway.RedisBroker:
    if layout == "celery":
        return headway.RedisBroker.celery(url)
    return headway.RedisBroker(url, prefix="kinds:")


@pytest.mark.parametrize("layout", ["redis", "celery"])
def test_an_unreachable_redis_is_a_broker_connection_error(layout: str) -> None:
    with pytest.raises(headway.BrokerConnectionError) as info:
        headway.App(_broker(layout, f"redis://:secret@127.0.0.1:{_free_port()}/0"))
    e = info.value
    assert isinstance(e, headway.BrokerError) and isinstance(e, headway.Refused)
    assert e.kind == "connection"
    assert str(e).startswith("broker error: ") and "secret" not in str(e)
    again = pickle.loads(pickle.dumps(e))
    assert type(again) is headway.BrokerConnectionError
    assert (again.kind, str(again)) == (e.kind, str(e))


@pytest.mark.parametrize("layout", ["redis", "celery"])
def test_a_redis_out_of_memory_is_a_broker_server_error(layout: str, redis_server: Any) -> None:
    db = 18 if layout == "celery" else 0
    app = headway.App(_broker(layout, redis_server.url.rsplit("/", 1)[0] + f"/{db}"))

    @app.task(name="echo")
    def echo(x: int) -> int:
        return x

    # Every write refused: noeviction, and more in use than allowed.
    assert redis_server.command("CONFIG", "SET", "maxmemory-policy", "noeviction") == b"+OK"
    assert redis_server.command("CONFIG", "SET", "maxmemory", "1") == b"+OK"
    try:
        with pytest.raises(headway.BrokerServerError) as info:
            echo.delay(1)
    finally:
        assert redis_server.command("CONFIG", "SET", "maxmemory", "0") == b"+OK"
    e = info.value
    assert isinstance(e, headway.BrokerError)
    assert e.kind == "server"
    assert "OOM" in str(e)


def test_broker_error_kinds_are_subclasses() -> None:
    for cls, kind in [
        (headway.BrokerConnectionError, "connection"),
        (headway.BrokerScriptError, "script"),
        (headway.BrokerServerError, "server"),
        (headway.BrokerClosedError, "closed"),
        (headway.BrokerDataError, "data"),
    ]:
        assert issubclass(cls, headway.BrokerError), cls
        e = cls("broker error: x", kind)
        assert (str(e), e.kind) == ("broker error: x", kind)
    assert headway.BrokerError("broker error: y").kind == "other"
