"""The admin interface as an ASGI application.

``headway.admin.asgi(app, token=...)`` answers an ASGI 3 application — a
plain ``async (scope, receive, send)`` callable, no framework needed — that
uvicorn serves and FastAPI or Starlette mount::

    admin = headway.admin.asgi(app, token=os.environ["HEADWAY_ADMIN_TOKEN"])
    fastapi_app.mount("/admin", admin)          # or: uvicorn mod:admin

Everything it answers is the core's: the page, the JSON reports, sending and
revoking, the live stream, the token, CSRF and origin checks, and the
security headers. This module only converts an ASGI request to the core's
and pumps the answer back, so the Python admin and the Node admin cannot
differ. The command line serves it too: ``headway admin -A module:app``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import sys
from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

from . import _native
from ._tasks import App

__all__ = ["AdminApp", "asgi"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class AdminApp:
    """An ASGI 3 application serving one app's admin.

    Made by :func:`asgi`. ``token`` is what every route but ``/health``
    needs: type it into the page's login form (which posts it for a
    session cookie; a ``?token=`` in the URL is no login), or send
    ``Authorization: Bearer <token>``.
    """

    def __init__(self, native: _native._Admin) -> None:
        self._native = native
        self._streams: set[_native._AdminStream] = set()
        self._closing = False

    @property
    def token(self) -> str:
        """The token: the one given, or the one generated at start."""
        return self._native.token

    @property
    def token_generated(self) -> bool:
        """Whether the token was generated (no ``token`` was given)."""
        return self._native.token_generated

    @property
    def read_only(self) -> bool:
        """Whether every change (send, revoke, re-queueing or purging dead
        letters) is refused with 403."""
        return self._native.read_only

    @property
    def max_body(self) -> int:
        """The most body bytes read; a longer body is answered 413."""
        return self._native.max_body

    def __repr__(self) -> str:
        return f"AdminApp(read_only={self.read_only}, max_body={self.max_body})"

    def close_streams(self) -> None:
        """Ends every open live stream (at once: a close also ends a frame
        awaited for the next tick) and every one opened later: what a
        stopping server calls first, since a stream never ends by itself and
        would hold the shutdown."""
        self._closing = True
        for s in list(self._streams):
            s.close()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope.get("type")
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await _lifespan(receive, send)
        elif kind == "websocket":
            # No websocket route: refuse the handshake (HTTP 403).
            await receive()
            await send({"type": "websocket.close", "code": 1008})
        else:
            raise ValueError(f"headway admin: unsupported ASGI scope type {kind!r}")

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers_in = _headers(scope)
        if self._native.declares_over(headers_in):
            # Refused (413) whatever comes: read none of it.
            body = b""
        else:
            body, disconnected = await _read_body(receive, self._native.max_body)
            if disconnected:
                return
        client = scope.get("client")
        status, headers, payload, stream = await self._native.handle(
            scope.get("method", "GET"),
            _target(scope),
            headers_in,
            body,
            scope.get("root_path", "") or "",
            scope.get("scheme") == "https",
            str(client[0]) if client else None,
        )
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers],
            }
        )
        if stream is None:
            await send({"type": "http.response.body", "body": payload})
            return
        if self._closing:
            stream.close()
        self._streams.add(stream)
        try:
            await _pump(stream, receive, send)
        finally:
            self._streams.discard(stream)


async def _lifespan(receive: Receive, send: Send) -> None:
    # Nothing to set up or tear down: the app and its runtime already exist.
    while True:
        message = await receive()
        t = message.get("type")
        if t == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif t == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


async def _read_body(receive: Receive, max_body: int) -> tuple[bytes, bool]:
    """The body, cut at ``max_body + 1`` bytes (the core answers 413 past
    ``max_body``, so the rest need not be read), and whether the client left."""
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        t = message.get("type")
        if t == "http.disconnect":
            return b"", True
        if t != "http.request":
            continue
        chunk = message.get("body", b"")
        if chunk:
            parts.append(chunk)
            size += len(chunk)
        if size > max_body:
            return b"".join(parts)[: max_body + 1], False
        if not message.get("more_body", False):
            return b"".join(parts), False


def _target(scope: Scope) -> str:
    """The path below the mount point, still percent-encoded, with its query."""
    raw = scope.get("raw_path")
    path = raw.decode("latin-1") if raw else _quote(scope.get("path", "/"))
    root = scope.get("root_path", "")
    # Starlette's Mount and uvicorn's --root-path keep the prefix in the path
    # and name it in root_path; the core routes what is below it.
    if root and path.startswith(root):
        path = path[len(root) :]
    if not path.startswith("/"):
        path = "/" + path
    qs = scope.get("query_string", b"")
    if qs:
        path += "?" + qs.decode("latin-1")
    return path


def _quote(path: str) -> str:
    from urllib.parse import quote

    return quote(path, safe="/:@!$&'()*+,;=-._~")


def _headers(scope: Scope) -> list[tuple[str, str]]:
    out = [
        (k.decode("latin-1"), v.decode("latin-1"))
        for k, v in scope.get("headers", ())
    ]
    # HTTP/1.1 always sends Host, so it is in the headers; a server that
    # passes it only as `server` still gets an origin check against it.
    if not any(k.lower() == "host" for k, _ in out):
        server = scope.get("server")
        if server and server[0]:
            host, port = server[0], server[1]
            out.append(("host", host if port is None else f"{host}:{port}"))
    return out


async def _pump(stream: _native._AdminStream, receive: Receive, send: Send) -> None:
    """Sends the stream's frames until the client goes away, then drops it."""
    gone = asyncio.ensure_future(_disconnected(receive))
    frame_task: asyncio.Future[bytes | None] | None = None
    try:
        while not gone.done():
            frame_task = asyncio.ensure_future(stream.next())
            done, _ = await asyncio.wait({frame_task, gone}, return_when=asyncio.FIRST_COMPLETED)
            if frame_task not in done:
                break
            frame = frame_task.result()
            if frame is None:
                break
            try:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            except OSError:  # the server says the client left
                break
        if not gone.done():
            # The stream ended by itself (closed elsewhere): end the response.
            try:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except OSError:
                pass
    finally:
        # Also when this task is cancelled (a server's shutdown): a pending
        # next() is cancelled, which drops the Rust future, and the stream
        # is dropped now rather than at its next tick.
        if frame_task is not None and not frame_task.done():
            frame_task.cancel()
        stream.close()
        gone.cancel()


async def _disconnected(receive: Receive) -> None:
    while True:
        message = await receive()
        if message.get("type") == "http.disconnect":
            return


def asgi(
    app: App,
    token: str | None = None,
    read_only: bool = False,
    *,
    max_body: int | None = None,
    allowed_origins: Iterable[str] = (),
    announce: bool = True,
) -> AdminApp:
    """An ASGI 3 application serving ``app``'s admin.

    ``token``: what every route but ``/health`` needs. ``None`` (or empty):
    one is generated — 256 random bits, base64url — and, with ``announce``,
    printed to stderr at once, since nobody could get in without it. A
    token under 16 characters raises ``ValueError``.
    ``read_only``: refuse every change — send, revoke, dead letters (403).
    ``max_body``: the largest request body, 64 KiB when ``None`` (the core's default).
    ``allowed_origins``: origins besides the page's own host whose pages may
    make changes with the session cookie, compared exactly.
    """
    if not isinstance(app, App):
        raise TypeError(f"invalid `app`: expected a headway.App, got {type(app).__name__}")
    if token is not None and not isinstance(token, str):
        raise TypeError(f"invalid `token`: expected a str, got {type(token).__name__}")
    native = _native._Admin(
        app._native, token, bool(read_only), max_body, [str(o) for o in allowed_origins]
    )
    admin = AdminApp(native)
    if admin.token_generated and announce:
        line = _native.banner("admin_token", json.dumps({"token": admin.token}))
        print(line, file=sys.stderr, flush=True)
    return admin


#: How long a stopping server waits for open responses before cancelling
#: them: 2 s. A live stream never ends by itself, so without a bound uvicorn
#: would wait for every open page to be closed (uvicorn's own default waits
#: forever).
SHUTDOWN_GRACE = 2


def serve(
    app: App,
    *,
    host: str = "127.0.0.1",
    port: int = 5555,
    token: str | None = None,
    read_only: bool = False,
    log_level: str = "warning",
) -> None:
    """Serves ``app``'s admin with uvicorn until Ctrl-C or SIGTERM.

    Bound to 127.0.0.1 unless ``host`` says otherwise: an admin can send and
    revoke, so it is not put on a network by default. Prints the address
    (with the token when it was generated) before serving. Needs uvicorn
    (``pip install 'headway[admin]'``).
    """
    try:
        import uvicorn
    except ImportError as e:
        raise SystemExit(
            "headway admin needs uvicorn: pip install 'headway[admin]' (or uvicorn)"
        ) from e
    admin = asgi(app, token=token, read_only=read_only, announce=False)
    # Bound before the address is printed, as Node's admin does: the line
    # names the port the server holds (``port=0`` picks a free one), and a
    # client that reads it can connect at once.
    sock = _bind(host, port)
    # The lines are the core's (the Node CLI prints the same).
    fields = {
        "host": host,
        "port": sock.getsockname()[1],
        "read_only": admin.read_only,
        "generated": admin.token if admin.token_generated else None,
    }
    print(_native.banner("admin_ready", json.dumps(fields)), flush=True)
    config = uvicorn.Config(
        admin,
        host=host,
        port=port,
        log_level=log_level,
        lifespan="on",
        timeout_graceful_shutdown=SHUTDOWN_GRACE,
    )
    server = uvicorn.Server(config)
    stop = server.shutdown

    async def shutdown(sockets: Any = None) -> None:
        # Open pages' streams end first, so their responses finish cleanly
        # instead of being cancelled at the grace's end.
        admin.close_streams()
        await stop(sockets)

    server.shutdown = shutdown  # type: ignore[method-assign]
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()


def _bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host``:``port`` (a name, an IPv4 or an IPv6
    address), as uvicorn would have bound it."""
    family, kind, proto, _, addr = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock
