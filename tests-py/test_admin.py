"""The admin through its ASGI adapter, called in-process on every broker (the
``apps`` fixture: memory, headway's Redis layout and Celery's, on a
redis-server of the session's own).

The rules are the core's (core/tests/admin.rs tests them at length); this
file checks that the adapter carries them through unchanged: the scope's
method, path, query, headers and body reach the core, its status, headers
and body come back, a body is cut at ``max_body``, and a live stream sends
frames until the client disconnects and is then dropped.

Waits on a real worker are bounded polls (``WAIT``), never a sleep that
hopes.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterable
from typing import Any

import pytest

import headway
from headway.admin import AdminApp, asgi

from conftest import Apps

T = "s3cret-token-for-tests"
HOST = "127.0.0.1:5555"
ORIGIN = "http://127.0.0.1:5555"
WAIT = 10.0
CSP = "default-src 'self'; frame-ancestors 'none'"


class Resp:
    def __init__(self, messages: list[dict[str, Any]]) -> None:
        start = messages[0]
        assert start["type"] == "http.response.start", messages
        self.status: int = start["status"]
        self.raw_headers: list[tuple[bytes, bytes]] = list(start["headers"])
        self.body = b"".join(m.get("body", b"") for m in messages[1:])
        self.messages = messages

    def header(self, name: str) -> str | None:
        for k, v in self.raw_headers:
            if k.decode("latin-1") == name.lower():
                return v.decode("latin-1")
        return None

    def json(self) -> Any:
        return json.loads(self.body)

    def __repr__(self) -> str:
        return f"Resp({self.status}, {self.body[:300]!r})"


def scope(
    method: str,
    target: str,
    headers: Iterable[tuple[str, str]] = (),
    root_path: str = "",
) -> dict[str, Any]:
    path, _, query = target.partition("?")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": root_path,
        "headers": [(b"host", HOST.encode())]
        + [(k.lower().encode(), v.encode()) for k, v in headers],
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 5555),
    }


async def call(
    admin: AdminApp,
    method: str,
    target: str,
    headers: Iterable[tuple[str, str]] = (),
    body: bytes | list[bytes] = b"",
    root_path: str = "",
) -> Resp:
    """One request, the body sent in one message or in the chunks given."""
    chunks = body if isinstance(body, list) else [body]
    incoming = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    out: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        await asyncio.Event().wait()  # a client that stays
        raise AssertionError("unreachable")

    async def send(m: Any) -> None:
        out.append(m)

    await asyncio.wait_for(admin(scope(method, target, headers, root_path), receive, send), WAIT)
    r = Resp(out)
    r.unread = len(incoming)  # type: ignore[attr-defined]
    return r


def bearer(*more: tuple[str, str]) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer {T}"), *more]


JSON = ("content-type", "application/json")


def post_json(body: Any) -> bytes:
    return json.dumps(body).encode()


def make(apps: Apps, **kw: Any) -> tuple[headway.App, AdminApp]:
    app = apps.app(clock=None)

    @app.task(name="add")
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(name="echo")
    def echo(*a: Any) -> Any:
        return list(a)

    kw.setdefault("token", T)
    return app, asgi(app, **kw)


async def run_row(
    admin: AdminApp, id: str, state: str, *, recorded: bool = False, wait: float = WAIT
) -> dict[str, Any]:
    """The `/api/runs` row of `id` once it shows `state` — with `recorded`,
    once a worker's event says so (bounded poll: a worker records the event
    just after storing the outcome a test waited on, and on Redis the row
    shows the stored state until the event is read)."""
    deadline = time.monotonic() + wait
    while True:
        r = await call(admin, "GET", "/api/runs?limit=100", bearer())
        assert r.status == 200, r
        for row in r.json()["runs"]:
            if row["id"] == id and row["state"] == state:
                if not recorded or row["worker"] is not None:
                    return dict(row)
        assert time.monotonic() < deadline, f"run {id} never showed {state}: {r.json()}"
        await asyncio.sleep(0.02)


def meta(html: str, name: str) -> str:
    m = re.search(rf'<meta name="{name}" content="([^"]*)"', html)
    assert m, html[:400]
    return m.group(1)


# ---------------------------------------------------------------- auth


def test_health_is_open_and_everything_else_needs_the_token(apps: Apps) -> None:
    _, admin = make(apps)

    async def main() -> None:
        r = await call(admin, "GET", "/health")
        assert (r.status, r.json()) == (200, {"ok": True})
        assert r.header("content-security-policy") == CSP
        # The page without a session is the login form (401, HTML).
        r = await call(admin, "GET", "/")
        assert r.status == 401 and b'name="token"' in r.body, r
        assert r.header("content-security-policy") == CSP
        for method, path in [
            ("GET", "/app.js"),
            ("GET", "/api/overview"),
            ("GET", "/api/runs"),
            ("GET", "/api/stream"),
            ("POST", "/api/send"),
            ("POST", "/api/revoke"),
            ("GET", "/no/such/route"),
        ]:
            r = await call(admin, method, path)
            assert r.status == 401, (method, path, r)
            assert r.json()["error"] == "unauthorized"
            assert r.header("www-authenticate") == 'Bearer realm="headway admin"'
            assert r.header("content-security-policy") == CSP
            r = await call(admin, method, path, [("authorization", "Bearer not-it")])
            assert r.status == 401, (method, path, r)
        r = await call(admin, "GET", "/api/runs", bearer())
        assert r.status == 200, r
        assert r.header("x-content-type-options") == "nosniff"
        assert r.header("cache-control") == "no-store"
        assert r.json() == {"runs": []}
        r = await call(admin, "GET", "/nope", bearer())
        assert r.status == 404

    asyncio.run(main())


def test_posted_token_becomes_a_cookie_that_reads_and_with_csrf_and_origin_changes(
    apps: Apps,
) -> None:
    _, admin = make(apps)

    async def main() -> None:
        # A token in the URL is no login: a redirect, no cookie.
        r = await call(admin, "GET", f"/?token={T}")
        assert (r.status, r.header("set-cookie")) == (303, None), r
        form = [("content-type", "application/x-www-form-urlencoded"), ("origin", ORIGIN)]
        assert (await call(admin, "POST", "/login", form, b"token=wrong")).status == 401
        r = await call(admin, "POST", "/login", form, f"token={T}".encode())
        assert r.status == 303, r
        assert r.header("location") == "/"
        set_cookie = r.header("set-cookie")
        assert set_cookie is not None and "HttpOnly" in set_cookie
        assert "SameSite=Strict" in set_cookie and T not in set_cookie
        cookie = ("cookie", set_cookie.split(";")[0])
        page = await call(admin, "GET", "/", [cookie])
        assert page.status == 200
        assert page.header("content-type") == "text/html; charset=utf-8"
        html = page.body.decode()
        csrf = meta(html, "headway-csrf")
        assert meta(html, "headway-read-only") == "false"
        assert (await call(admin, "GET", "/api/runs", [cookie])).status == 200
        assert (await call(admin, "GET", "/app.js", [cookie])).status == 200

        body = post_json({"task": "add", "args": [1, 2]})
        good = [cookie, JSON, ("x-csrf-token", csrf), ("origin", ORIGIN)]
        r = await call(admin, "POST", "/api/send", good, body)
        assert r.status == 200, r
        assert r.json()["state"] == "PENDING"
        # No CSRF value, a wrong one, a foreign origin, no origin at all.
        for headers, code in [
            ([cookie, JSON, ("origin", ORIGIN)], "csrf"),
            ([cookie, JSON, ("x-csrf-token", "x" + csrf), ("origin", ORIGIN)], "csrf"),
            ([cookie, JSON, ("x-csrf-token", csrf), ("origin", "http://evil.example")], "origin"),
            ([cookie, JSON, ("x-csrf-token", csrf)], "origin"),
            (
                [cookie, JSON, ("x-csrf-token", csrf), ("origin", "http://127.0.0.1:5555.evil")],
                "origin",
            ),
        ]:
            r = await call(admin, "POST", "/api/send", headers, body)
            assert (r.status, r.json()["error"]) == (403, code), (headers, r)
        # A Referer of this host stands in for a missing Origin.
        referer = [cookie, JSON, ("x-csrf-token", csrf), ("referer", ORIGIN + "/")]
        assert (await call(admin, "POST", "/api/send", referer, body)).status == 200
        # GET never changes anything.
        r = await call(admin, "GET", "/api/send", bearer())
        assert (r.status, r.header("allow")) == (405, "POST")

    asyncio.run(main())


def test_bearer_send_is_run_by_a_worker_and_reported(apps: Apps) -> None:
    app, admin = make(apps)
    apps.start(app, concurrency=2)

    async def main() -> None:
        r = await call(
            admin,
            "POST",
            "/api/send",
            bearer(JSON),
            post_json({"task": "add", "args": [2, 3], "kwargs": {}}),
        )
        assert r.status == 200, r
        sent = r.json()
        assert (sent["task"], sent["queue"], sent["state"]) == ("add", "default", "PENDING")
        assert await app.handle(sent["id"]) == 5
        row = await run_row(admin, sent["id"], "SUCCESS")
        assert (row["task"], row["final"]) == ("add", True)
        one = (await call(admin, "GET", f"/api/runs/{sent['id']}", bearer())).json()
        assert (one["state"], one["result"]) == ("SUCCESS", 5)
        o = (await call(admin, "GET", "/api/overview", bearer())).json()
        assert o["counts"]["SUCCESS"] >= 1

    asyncio.run(main())


def test_revoke_a_queued_run(apps: Apps) -> None:
    app, admin = make(apps)
    apps.start(app)

    async def main() -> None:
        r = await call(
            admin,
            "POST",
            "/api/send",
            bearer(JSON),
            post_json({"task": "echo", "args": ["later"], "countdown": 3600}),
        )
        assert r.status == 200, r
        id = r.json()["id"]
        await run_row(admin, id, "PENDING")
        r = await call(admin, "POST", "/api/revoke", bearer(JSON), post_json({"id": id}))
        assert (r.status, r.json()) == (200, {"id": id, "revoked": True, "terminate": False})
        # Shown revoked at once; the store says so when a worker skips it
        # (in an hour: the eta).
        row = await run_row(admin, id, "REVOKED")
        assert (row["final"], row["revoked"]) == (True, True)
        one = (await call(admin, "GET", f"/api/runs/{id}", bearer())).json()
        assert (one["state"], one["stored_state"]) == ("REVOKED", "PENDING")
        # Revoke and terminate of a queued run: a worker would skip it too.
        r = await call(
            admin, "POST", "/api/revoke", bearer(JSON), post_json({"id": id, "terminate": True})
        )
        assert (r.status, r.json()["terminate"]) == (200, True)

    asyncio.run(main())


def test_read_only_refuses_every_change_and_still_reads(apps: Apps) -> None:
    _, admin = make(apps, read_only=True)
    assert admin.read_only

    async def main() -> None:
        for path, body in [
            ("/api/send", {"task": "add", "args": [1, 2]}),
            ("/api/revoke", {"id": "x"}),
        ]:
            r = await call(admin, "POST", path, bearer(JSON), post_json(body))
            assert (r.status, r.json()["error"]) == (403, "read_only"), r
        assert (await call(admin, "GET", "/api/runs", bearer())).status == 200
        page = await call(admin, "GET", "/", bearer())
        assert meta(page.body.decode(), "headway-read-only") == "true"

    asyncio.run(main())


def test_bad_sends_get_a_4xx_with_a_reason(apps: Apps) -> None:
    _, admin = make(apps, max_body=1024)
    assert admin.max_body == 1024

    async def main() -> None:
        r = await call(admin, "POST", "/api/send", bearer(JSON), post_json({"task": "nope"}))
        assert (r.status, r.json()["error"]) == (404, "unknown_task"), r
        assert "nope" in r.json()["reason"]
        r = await call(admin, "POST", "/api/send", bearer(JSON), b'{"task": "add", args: [1]}')
        assert (r.status, r.json()["error"]) == (400, "not_json"), r
        r = await call(
            admin, "POST", "/api/send", bearer(JSON), post_json({"task": "add", "args": "1,2"})
        )
        assert (r.status, r.json()["error"]) == (400, "invalid"), r
        assert "`args`" in r.json()["reason"]
        r = await call(
            admin, "POST", "/api/send", bearer(("content-type", "text/plain")), b"{}"
        )
        assert r.status == 415, r
        # Oversized, in chunks with no length: refused, and the adapter stops
        # reading once past max_body (3 of 10 chunks of 512 bytes).
        big = post_json({"task": "add", "args": ["x" * 5000]})
        chunks = [big[i : i + 512] for i in range(0, len(big), 512)]
        assert len(chunks) == 10
        r = await call(admin, "POST", "/api/send", bearer(JSON), chunks)
        assert (r.status, r.json()["error"]) == (413, "too_large"), r
        assert r.unread == 7  # type: ignore[attr-defined]
        # A declared length past max_body is refused before any of it is read.
        r = await call(
            admin, "POST", "/api/send", bearer(JSON, ("content-length", "999999")), b"{}"
        )
        assert r.status == 413, r
        assert r.unread == 1  # type: ignore[attr-defined]
        # The core's rule: the first Content-Length, any case, trimmed; one
        # of exactly max_body is read, and one that is no whole number
        # declares nothing (the body as read decides).
        r = await call(
            admin, "POST", "/api/send", bearer(JSON, ("Content-Length", " 1025 ")), b"{}"
        )
        assert (r.status, r.unread) == (413, 1), r  # type: ignore[attr-defined]
        for declared in ("1024", "1_000_000", "-1"):
            r = await call(
                admin, "POST", "/api/send", bearer(JSON, ("content-length", declared)),
                post_json({"task": "nope"}),
            )
            assert (r.status, r.unread) == (404, 0), (declared, r)  # type: ignore[attr-defined]

    asyncio.run(main())


def test_xss_payloads_come_back_as_escaped_json(apps: Apps) -> None:
    app, admin = make(apps)
    payloads = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "javascript:alert(1)"]

    async def main() -> None:
        r = await call(
            admin, "POST", "/api/send", bearer(JSON), post_json({"task": "echo", "args": payloads})
        )
        id = r.json()["id"]
        r = await call(admin, "GET", "/api/runs", bearer())
        assert b"<" not in r.body and b">" not in r.body, r.body
        row = next(x for x in r.json()["runs"] if x["id"] == id)
        assert json.loads(row["args"]) == payloads

    asyncio.run(main())


# ---------------------------------------------------------------- stream


async def stream_until(
    admin: AdminApp, frames_wanted: int, *, disconnect: bool = True
) -> tuple[Resp, float]:
    """Opens `/api/stream`, reads `frames_wanted` frames, then disconnects
    (or, without `disconnect`, closes the admin's streams) and answers the
    response and how long the app took to return after that."""
    out: list[dict[str, Any]] = []
    got = asyncio.Event()
    leave = asyncio.Event()
    incoming: list[dict[str, Any]] = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        await leave.wait()
        return {"type": "http.disconnect"}

    async def send(m: Any) -> None:
        out.append(m)
        if sum(1 for x in out if x.get("more_body")) >= frames_wanted:
            got.set()

    task = asyncio.ensure_future(admin(scope("GET", "/api/stream", bearer()), receive, send))
    await asyncio.wait_for(got.wait(), WAIT)
    assert len(admin._streams) == 1
    (native,) = admin._streams
    assert not native.closed
    t0 = time.monotonic()
    if disconnect:
        leave.set()
    else:
        admin.close_streams()
    await asyncio.wait_for(task, WAIT)
    took = time.monotonic() - t0
    assert native.closed, "the native stream was not dropped"
    assert admin._streams == set()
    return Resp(out), took


def frames(body: bytes) -> list[dict[str, Any]]:
    out = []
    for block in body.decode().split("\n\n"):
        lines = dict(
            line.split(": ", 1) for line in block.splitlines() if ": " in line
        )
        if lines.get("event") == "counts":
            out.append(json.loads(lines["data"]))
    return out


def test_stream_sends_counts_and_ends_on_disconnect(apps: Apps) -> None:
    app, admin = make(apps)
    apps.start(app)

    async def main() -> None:
        assert await app.send("add", (1, 1)) == 2
        r, took = await stream_until(admin, 2)
        assert r.status == 200
        assert r.header("content-type") == "text/event-stream; charset=utf-8"
        assert r.header("content-security-policy") == CSP
        assert r.body.startswith(b"retry: 2000\n")
        got = frames(r.body)
        assert len(got) >= 2, r.body
        assert got[-1]["counts"]["SUCCESS"] >= 1
        assert got[1]["at"] - got[0]["at"] >= 500  # one per tick, not a burst
        # Dropped at once: the pending frame is cancelled, not awaited.
        assert took < 0.5, took

    asyncio.run(main())


def test_close_streams_ends_open_streams_cleanly(apps: Apps) -> None:
    _, admin = make(apps)

    async def main() -> None:
        r, took = await stream_until(admin, 1, disconnect=False)
        assert r.messages[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
        # At once: the close also ends the next() waiting for its tick.
        assert took < 0.5, took
        # A stream opened after close_streams ends at once.
        r = await call(admin, "GET", "/api/stream", bearer())
        assert r.status == 200 and r.messages[-1]["more_body"] is False

    asyncio.run(main())


def test_a_cancelled_stream_is_dropped() -> None:
    # What a server does at shutdown past its grace: cancel the app's task.
    app = headway.App("memory://")
    admin = asgi(app, token=T)

    async def main() -> None:
        first = asyncio.Event()

        async def receive() -> dict[str, Any]:
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        async def send(m: Any) -> None:
            if m.get("more_body"):
                first.set()

        incoming = [{"type": "http.request", "body": b"", "more_body": False}]

        async def receive_once() -> dict[str, Any]:
            return incoming.pop(0) if incoming else await receive()

        task = asyncio.ensure_future(admin(scope("GET", "/api/stream", bearer()), receive_once, send))
        await asyncio.wait_for(first.wait(), WAIT)
        (native,) = admin._streams
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert native.closed
        assert admin._streams == set()

    asyncio.run(main())


# ---------------------------------------------------------------- ASGI


def test_mounted_under_a_root_path_and_lifespan() -> None:
    app = headway.App("memory://")
    admin = asgi(app, token=T)

    async def main() -> None:
        r = await call(admin, "GET", "/admin/api/overview", bearer(), root_path="/admin")
        assert r.status == 200, r
        r = await call(admin, "GET", "/admin/health", root_path="/admin")
        assert r.status == 200, r
        # An id with an encoded slash stays one path segment.
        r = await call(admin, "GET", "/api/runs/a%2Fb", bearer())
        assert r.status == 200, r
        assert r.json()["id"] == "a/b"

        sent: list[dict[str, Any]] = []
        msgs = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]

        async def receive() -> dict[str, Any]:
            return msgs.pop(0)

        async def send(m: Any) -> None:
            sent.append(m)

        await asyncio.wait_for(admin({"type": "lifespan"}, receive, send), WAIT)
        assert [m["type"] for m in sent] == [
            "lifespan.startup.complete",
            "lifespan.shutdown.complete",
        ]

    asyncio.run(main())


def test_a_generated_token_is_printed_and_works(capsys: pytest.CaptureFixture[str]) -> None:
    app = headway.App("memory://")
    admin = asgi(app)
    assert admin.token_generated and len(admin.token) == 43
    err = capsys.readouterr().err
    assert f"generated token {admin.token}" in err
    assert "?token=" not in err
    quiet = asgi(app, announce=False)
    assert quiet.token != admin.token
    assert capsys.readouterr().err == ""
    assert not asgi(app, token="given-token-0123456789").token_generated

    async def main() -> None:
        r = await call(admin, "GET", "/api/overview", [("authorization", f"Bearer {admin.token}")])
        assert r.status == 200

    asyncio.run(main())


def test_bad_arguments_are_refused() -> None:
    app = headway.App("memory://")
    with pytest.raises(TypeError, match="`app`"):
        asgi(object(), token=T)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="`token`"):
        asgi(app, token=5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="`max_body`: must be a positive whole number of bytes"):
        asgi(app, token=T, max_body=0)
    # The same range as Node's `maxBody`: at most 4 GiB - 1.
    with pytest.raises(ValueError, match="`max_body`"):
        asgi(app, token=T, max_body=2**32)
    assert asgi(app, token=T, max_body=2**32 - 1).max_body == 2**32 - 1


def test_a_workers_run_events_are_listed(apps: Apps) -> None:
    app, admin = make(apps)
    apps.start(app)

    async def main() -> None:
        h = app.send("add", (2, 3))
        assert await h == 5
        row = await run_row(admin, h.id, "SUCCESS", recorded=True, wait=3.0)
        assert (row["task"], row["detail"], row["final"]) == ("add", "5", True)
        assert row["worker"] == apps.workers[0].name
        o = (await call(admin, "GET", "/api/overview", bearer())).json()
        assert [t["name"] for t in o["tasks"] if t["counts"]["SUCCESS"]] == ["add"]

    asyncio.run(main())


def test_overview_lists_tasks_before_any_send(apps: Apps) -> None:
    _, admin = make(apps)

    async def main() -> None:
        r = await call(admin, "GET", "/api/overview", bearer())
        assert r.status == 200, r
        o = r.json()
        assert o["task_names"] == ["add", "echo"]
        assert o["read_only"] is False
        assert sum(o["counts"].values()) == 0

    asyncio.run(main())


# ---------------------------------------------------------------- CLI


APP_MODULE = """
import headway
app = headway.App("memory://")

@app.task(name="add")
def add(x, y):
    return x + y
"""


def _http(port: int, method: str, path: str, token: str | None, body: Any = None) -> tuple[int, Any]:
    import http.client

    c = http.client.HTTPConnection("127.0.0.1", port, timeout=WAIT)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    c.request(method, path, body=data, headers=headers)
    r = c.getresponse()
    payload = json.loads(r.read() or b"null")
    c.close()
    return r.status, payload


def test_cli_serves_with_uvicorn_and_stops_with_a_stream_open(tmp_path: Any) -> None:
    pytest.importorskip("uvicorn")
    import os
    import signal
    import socket
    import subprocess
    import sys

    from conftest import _free_port

    (tmp_path / "adminapp.py").write_text(APP_MODULE)
    port = _free_port()
    env = {**os.environ, "HEADWAY_ADMIN_TOKEN": ""}
    proc = subprocess.Popen(
        [sys.executable, "-m", "headway", "admin", "-A", "adminapp:app",
         "--port", str(port), "--token", T, "--worker", "1"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.strip() == f"headway admin: http://127.0.0.1:{port}/ (log in with the token)"
        deadline = time.monotonic() + WAIT
        while True:
            try:
                status, body = _http(port, "GET", "/health", None)
                break
            except OSError:
                assert time.monotonic() < deadline, "the admin never listened"
                time.sleep(0.05)
        assert (status, body) == (200, {"ok": True})
        assert _http(port, "GET", "/api/runs", None)[0] == 401
        status, sent = _http(port, "POST", "/api/send", T, {"task": "add", "args": [20, 22]})
        assert status == 200, sent
        deadline = time.monotonic() + WAIT
        while True:
            status, one = _http(port, "GET", f"/api/runs/{sent['id']}", T)
            if one["state"] == "SUCCESS":
                break
            assert time.monotonic() < deadline, one
            time.sleep(0.05)
        assert one["result"] == 42
        # A page's stream is open when the server is told to stop.
        s = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
        s.sendall(
            f"GET /api/stream HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Authorization: Bearer {T}\r\n\r\n".encode()
        )
        got = b""
        while b"event: counts" not in got:
            chunk = s.recv(65536)
            assert chunk, got
            got += chunk
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=WAIT)
        took = time.monotonic() - t0
        s.close()
        assert proc.returncode == 0, out
        assert "headway admin: stopped" in out
        assert "Traceback" not in out and "ERROR" not in out, out
        assert took < 5.0, took
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_cli_prints_a_generated_token(tmp_path: Any) -> None:
    pytest.importorskip("uvicorn")
    import os
    import subprocess
    import sys

    (tmp_path / "adminapp.py").write_text(APP_MODULE)
    env = {k: v for k, v in os.environ.items() if k != "HEADWAY_ADMIN_TOKEN"}
    # Port 0: the line names the port the server was given, bound before
    # the line is printed (a client may connect at once).
    proc = subprocess.Popen(
        [sys.executable, "-m", "headway", "admin", "-A", "adminapp:app", "--port", "0",
         "--read-only"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().strip()
        m = re.fullmatch(
            r"headway admin \(read-only\): http://127\.0\.0\.1:(\d+)/ \(log in with the token\)", first
        )
        assert m, first
        port = int(m.group(1))
        assert port != 0, first
        second = proc.stdout.readline().strip()
        m = re.fullmatch(r"headway admin: generated token ([A-Za-z0-9_-]{43})", second)
        assert m, second
        token = m.group(1)
        status, _ = _http(port, "GET", "/api/runs", token)
        assert status == 200
        status, body = _http(port, "POST", "/api/send", token, {"task": "add", "args": [1, 2]})
        assert (status, body["error"]) == (403, "read_only")
    finally:
        proc.terminate()
        proc.wait(WAIT)
