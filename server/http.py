"""Streamable HTTP for the MCP server: a bearer-token check and a request-size cap around the SDK's app,
and the record of callers that hung up before their answer."""

from __future__ import annotations

import hmac
import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

from mcp.server import MCPServer

# --------------------------------------------------------------------------------------------------------
# HTTP: bearer token check around the SDK's streamable HTTP app
# --------------------------------------------------------------------------------------------------------

logger = logging.getLogger("stepdoctor.mcp")


class BearerAuth:
    """ASGI middleware: HTTP requests need `Authorization: Bearer <token>`; lifespan events pass through.

    A static shared secret compared in constant time. The SDK's OAuth resource-server support
    (`token_verifier` + `AuthSettings`) is for tokens issued by an authorization server, which a local
    diagnosis server does not have.
    """

    def __init__(self, app: Callable[..., Any], token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(
        self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]
    ) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        auth = next((v for k, v in scope.get("headers", []) if k == b"authorization"), b"")
        scheme, _, cred = auth.partition(b" ")
        if scheme.lower() == b"bearer" and hmac.compare_digest(cred.strip(), self._token):
            await self.app(scope, receive, send)
            return
        from starlette.responses import JSONResponse

        client = scope.get("client")
        logger.warning(
            "rejected HTTP request without a valid bearer token from %s", client[0] if client else "?"
        )
        resp = JSONResponse(
            {"error": "unauthorized", "error_description": "send Authorization: Bearer <token>"},
            status_code=401,
            headers={"WWW-Authenticate": 'Bearer realm="stepdoctor"'},
        )
        await resp(scope, receive, send)


# A JSON-RPC request's body: every argument of every tool fits in a few KB (the SQL text is capped at 8 KB).
MAX_REQUEST_BYTES = 256 * 1024


# The header the bounds middleware adds to each POST it passes on: the key of that HTTP request in HangUps.
CALL_HEADER = "x-stepdoctor-call"


class HangUps:
    """Which HTTP requests lost their client before their answer, by the key in CALL_HEADER.

    The SDK goes on serving a request whose client disconnected; a tool that can compute for long asks
    `gone(headers)` for a test of its own request and stops when it turns true.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, threading.Event] = {}

    def open(self) -> tuple[str, threading.Event]:
        key, ev = uuid.uuid4().hex, threading.Event()
        with self._lock:
            self._open[key] = ev
        return key, ev

    def close(self, key: str) -> None:
        with self._lock:
            self._open.pop(key, None)

    def gone(self, headers: Any) -> Any:
        key = (headers or {}).get(CALL_HEADER)
        with self._lock:
            ev = self._open.get(key) if key else None
        return ev.is_set if ev is not None else (lambda: False)


class RequestBounds:
    """ASGI middleware: a POST body over MAX_REQUEST_BYTES is refused (413, one line) before the SDK parses
    it; a client that disconnects before its answer is recorded in `hang_ups`."""

    def __init__(self, app: Callable[..., Any], hang_ups: HangUps, max_bytes: int = MAX_REQUEST_BYTES) -> None:
        self.app, self.hang_ups, self.max_bytes = app, hang_ups, max_bytes

    async def _refuse(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any],
                      size: str) -> None:
        """413, after reading the rest of the body without keeping it (a client still sending would
        otherwise see a reset connection, not the answer); a body that never ends is dropped at 64 caps."""
        from starlette.responses import JSONResponse

        seen = 0
        while seen < 64 * self.max_bytes:
            msg = await receive()
            seen += len(msg.get("body", b""))
            if msg["type"] == "http.disconnect" or not msg.get("more_body"):
                break

        resp = JSONResponse({"error": "request_too_large", "error_description":
                             f"request body of {size} bytes is over the {self.max_bytes} this server takes"},
                            status_code=413)
        await resp(scope, receive, send)

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        declared = headers.get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send, declared.decode())
            return
        body, more = b"", True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            more = bool(msg.get("more_body"))
            if len(body) > self.max_bytes:
                await self._refuse(scope, receive, send, f"over {len(body)}")
                return
        key, hung_up = self.hang_ups.open()
        scope = {**scope, "headers": [*(h for h in scope.get("headers", []) if h[0] != CALL_HEADER.encode()),
                                      (CALL_HEADER.encode(), key.encode())]}
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            msg = await receive()
            if msg["type"] == "http.disconnect":
                hung_up.set()
            return msg

        try:
            await self.app(scope, replay, send)
        finally:
            self.hang_ups.close(key)


def http_app(server: MCPServer, *, host: str, token: str | None, hang_ups: HangUps) -> Any:
    """The streamable HTTP ASGI app at /mcp: bounded requests, behind the token check when a token is given."""
    app: Any = RequestBounds(server.streamable_http_app(host=host), hang_ups)
    return BearerAuth(app, token) if token else app


