"""Logging in through the ASGI adapter: what the adapter must carry to the
core for the session cookie and the login limit — the mount (``root_path``),
whether the request came over TLS (``scheme``) and the client's address
(``client``) — plus the short-token refusal and the failed-login log line.
The rules themselves are the core's (core/tests/admin_session.rs)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

import headway
from headway.admin import AdminApp, asgi

T = "s3cret-token-for-tests"
HOST = "127.0.0.1:5555"
ORIGIN = "http://127.0.0.1:5555"
FORM = ("content-type", "application/x-www-form-urlencoded")


async def call(
    admin: AdminApp,
    method: str,
    path: str,
    headers: list[tuple[str, str]],
    body: bytes = b"",
    *,
    root_path: str = "",
    scheme: str = "http",
    client: tuple[str, int] | None = ("127.0.0.1", 50000),
) -> tuple[int, dict[str, str], bytes]:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": scheme,
        "path": root_path + path,
        "raw_path": (root_path + path).encode(),
        "query_string": b"",
        "root_path": root_path,
        "headers": [(b"host", HOST.encode())] + [(k.encode(), v.encode()) for k, v in headers],
        "client": client,
        "server": ("127.0.0.1", 5555),
    }
    incoming = [{"type": "http.request", "body": body, "more_body": False}]
    out: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        if incoming:
            return incoming.pop(0)
        await asyncio.Event().wait()
        raise AssertionError("unreachable")

    async def send(m: Any) -> None:
        out.append(m)

    await asyncio.wait_for(admin(scope, receive, send), 10)
    head = {k.decode(): v.decode() for k, v in out[0]["headers"]}
    return out[0]["status"], head, b"".join(m.get("body", b"") for m in out[1:])


def login(token: str, **kw: Any) -> Any:
    return call(
        kw.pop("admin"), "POST", "/login", [FORM, ("origin", ORIGIN)], f"token={token}".encode(), **kw
    )


def test_the_cookie_carries_the_mount_and_secure_over_https() -> None:
    admin = asgi(headway.App("memory://"), token=T)

    async def main() -> None:
        status, head, _ = await login(T, admin=admin, root_path="/ops")
        assert status == 303 and head["location"] == "/ops/"
        attrs = [a.strip() for a in head["set-cookie"].split(";")]
        assert "Path=/ops" in attrs and "Max-Age=43200" in attrs
        assert "Secure" not in attrs  # plain http: control
        status, head, _ = await login(T, admin=admin, root_path="/ops", scheme="https")
        assert "Secure" in [a.strip() for a in head["set-cookie"].split(";")]
        cookie = ("cookie", head["set-cookie"].split(";")[0])
        status, _, _ = await call(admin, "GET", "/api/overview", [cookie], root_path="/ops")
        assert status == 200

    asyncio.run(main())


def test_logout_revokes_the_session() -> None:
    admin = asgi(headway.App("memory://"), token=T)

    async def main() -> None:
        _, head, _ = await login(T, admin=admin)
        cookie = ("cookie", head["set-cookie"].split(";")[0])
        status, _, page = await call(admin, "GET", "/", [cookie])
        assert status == 200
        html = page.decode()
        tag = '<meta name="headway-csrf" content="'
        csrf = html[html.index(tag) + len(tag) :].split('"', 1)[0]
        headers = [cookie, ("x-csrf-token", csrf), ("origin", ORIGIN), ("content-type", "application/json")]
        status, head, _ = await call(admin, "POST", "/logout", headers, b"{}")
        assert status == 200 and "Max-Age=0" in head["set-cookie"]
        assert (await call(admin, "GET", "/api/overview", [cookie]))[0] == 401

    asyncio.run(main())


def test_failed_logins_are_logged_and_limited_per_client(caplog: pytest.LogCaptureFixture) -> None:
    admin = asgi(headway.App("memory://"), token=T)

    async def main() -> None:
        for _ in range(5):
            status, _, _ = await login("not-the-token-at-all", admin=admin, client=("10.0.0.1", 1))
            assert status == 401
        status, head, _ = await login(T, admin=admin, client=("10.0.0.1", 2))
        assert status == 429 and int(head["retry-after"]) >= 1
        # Another client address is not held up.
        status, _, _ = await login(T, admin=admin, client=("10.0.0.2", 1))
        assert status == 303

    asyncio.run(main())
    assert headway._native.log_flush(5.0)
    lines = [r.getMessage() for r in caplog.records if r.name == "headway.admin"]
    assert lines.count("headway admin: failed login from 10.0.0.1") == 5, lines


def test_a_short_token_is_refused_at_start() -> None:
    app = headway.App("memory://")
    with pytest.raises(ValueError, match="`token`.*16"):
        asgi(app, token="short-token")
    assert not asgi(app, token="x" * 16).token_generated
