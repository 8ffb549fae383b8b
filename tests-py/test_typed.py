"""kombu's typed JSON values as Python values, on every broker.

A ``datetime``, ``date``, ``time``, ``uuid.UUID``, ``Decimal`` or ``bytes``
sent as an argument reaches the body as the same type, and a body returning
one hands it back through ``get()``: the wire carries kombu's
``{"__type__", "__value__"}`` objects, so a Celery worker on the same queue
reads them as the same types too (interop/run_links.sh checks that side).
"""

from __future__ import annotations

import uuid
from datetime import date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any

import headway
import pytest

from conftest import Apps

WAIT = 10.0

VALUES: dict[str, Any] = {
    "aware": datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=timezone.utc),
    "offset": datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone(timedelta(hours=2))),
    "naive": datetime(2026, 1, 2, 3, 4, 5),
    "date": date(2026, 2, 28),
    "time": time(23, 59, 58, 1),
    "uuid": uuid.UUID("0f8fad5b-d9cb-469f-a165-70867728950e"),
    "decimal": Decimal("12345678901234567890.000000001"),
    "utf8": b"caf\xc3\xa9",
    "binary": b"\x00\xff\x80",
}


def test_typed_values_reach_the_body_and_come_back_as_themselves(apps: Apps) -> None:
    app = apps.app()
    seen: list[Any] = []

    @app.task(name="echo")
    def echo(*args: Any, **kwargs: Any) -> Any:
        seen.append((args, kwargs))
        return {"args": list(args), "kwargs": kwargs}

    apps.start(app)
    got = echo.delay(VALUES, [VALUES["uuid"], (VALUES["date"],)], when=VALUES["aware"]).get(
        timeout=WAIT
    )
    args, kwargs = seen[0]
    # In the body: native types, exactly equal, nested too.
    assert args[0] == VALUES and {k: type(v) for k, v in args[0].items()} == {
        k: type(v) for k, v in VALUES.items()
    }
    assert args[1] == [VALUES["uuid"], [VALUES["date"]]]
    assert kwargs == {"when": VALUES["aware"]}
    # And back out of the result store.
    assert got == {"args": [VALUES, [VALUES["uuid"], [VALUES["date"]]]], "kwargs": kwargs}
    assert type(got["args"][0]["binary"]) is bytes
    assert got["args"][0]["naive"].tzinfo is None
    assert got["args"][0]["offset"].utcoffset() == timedelta(hours=2)


def test_a_bytearray_goes_as_bytes() -> None:
    app = headway.App("memory://")

    @app.task(name="echo")
    def echo(x: Any) -> Any:
        return x

    w = app.worker()
    w.start()
    try:
        assert echo.delay(bytearray(b"ab")).get(timeout=WAIT) == b"ab"
    finally:
        w.stop(1.0)


def test_a_plain_dict_shaped_like_a_bad_typed_value_stays_a_dict() -> None:
    app = headway.App("memory://")

    @app.task(name="echo")
    def echo(x: Any) -> Any:
        return x

    w = app.worker()
    w.start()
    try:
        # Not a type kombu knows: nothing to convert, it stays what it was.
        odd = {"__type__": "nothing", "__value__": 1}
        assert echo.delay(odd).get(timeout=WAIT) == odd
        # Three keys: not a typed value at all.
        three = {"__type__": "datetime", "__value__": "2026-01-01", "x": 1}
        assert echo.delay(three).get(timeout=WAIT) == three
    finally:
        w.stop(1.0)


def test_other_types_are_still_refused_by_name() -> None:
    app = headway.App("memory://")

    @app.task(name="echo")
    def echo(x: Any) -> Any:
        return x

    with pytest.raises(TypeError, match=r"echo: args\[0\] is a set.*datetime"):
        echo.delay({1, 2})
    with pytest.raises(TypeError, match=r"args\[0\]\['t'\] is a timedelta"):
        echo.delay({"t": timedelta(seconds=1)})
