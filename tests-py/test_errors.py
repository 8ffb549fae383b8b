"""Errors across the boundary: panics, and the binding's own conversions."""

from __future__ import annotations

import math
import os
import subprocess
import sys

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
