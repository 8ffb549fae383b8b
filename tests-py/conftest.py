"""Fail with instructions, not a wall of ImportErrors, when headway is not built."""

from __future__ import annotations

import pytest

try:
    import headway._native  # noqa: F401
except ImportError as e:  # pragma: no cover - only on an unbuilt checkout
    raise pytest.UsageError(
        f"headway is not built ({e}). Build it first: "
        "`maturin develop -m bindings-python/Cargo.toml` or `pip install .`"
    ) from e
