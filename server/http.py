"""Streamable HTTP for the MCP server: a bearer-token check and a request-size cap around the SDK's app,
and the record of callers that hung up before their answer."""

from __future__ import annotations

import hmac
import json
import logging
import threading
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


class HangUps:
    """Which HTTP callers hung up before their answer, by (MCP session id, JSON-RPC request id).

    The SDK goes on serving a request whose client disconnected; a tool that can compute for long asks
    `gone(session, request)` for a test of its own request and stops when it turns true.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[tuple[str, str], threading.Event] = {}

    def open(self, keys: list[tuple[str, str]]) -> list[threading.Event]:
        with self._lock:
            return [self._open.setdefault(k, threading.Event()) for k in keys]

    def close(self, keys: list[tuple[str, str]]) -> None:
        with self._lock:
            for k in keys:
                self._open.pop(k, None)

    def gone(self, session: str | None, request: str) -> Any:
        with self._lock:
            ev = self._open.get((session or "", str(request)))
        return ev.is_set if ev is not None else (lambda: False)


def _request_ids(body: bytes) -> list[str]:
    try:
        msg = json.loads(body)
    except ValueError:
        return []
    msgs = msg if isinstance(msg, list) else [msg]
    return [str(m["id"]) for m in msgs if isinstance(m, dict) and "id" in m and "method" in m]


class RequestBounds:
    """ASGI middleware: a POST body over MAX_REQUEST_BYTES is refused (413, one line) before the SDK parses
    it; a client that disconnects before its answer is recorded in `hang_ups`."""

    def __init__(self, app: Callable[..., Any], hang_ups: HangUps, max_bytes: int = MAX_REQUEST_BYTES) -> None:
        self.app, self.hang_ups, self.max_bytes = app, hang_ups, max_bytes

    async def _refuse(self, send: Callable[..., Any], size: str) -> None:
        from starlette.responses import JSONResponse

        resp = JSONResponse({"error": "request_too_large", "error_description":
                             f"request body of {size} bytes is over the {self.max_bytes} this server takes"},
                            status_code=413)
        await resp(None, None, send)  # type: ignore[arg-type]

    async def __call__(self, scope: dict[str, Any], receive: Callable[..., Any], send: Callable[..., Any]) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        declared = headers.get(b"content-length", b"0")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send, declared.decode())
            return
        body, more = b"", True
        while more:
            msg = await receive()
            if msg["type"] == "http.disconnect":
                return
            body += msg.get("body", b"")
            more = bool(msg.get("more_body"))
            if len(body) > self.max_bytes:
                await self._refuse(send, f"over {len(body)}")
                return
        session = headers.get(b"mcp-session-id", b"").decode("latin-1")
        keys = [(session, rid) for rid in _request_ids(body)]
        events = self.hang_ups.open(keys)
        delivered = False

        async def replay() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            msg = await receive()
            if msg["type"] == "http.disconnect":
                for ev in events:
                    ev.set()
            return msg

        try:
            await self.app(scope, replay, send)
        finally:
            self.hang_ups.close(keys)


def http_app(server: MCPServer, *, host: str, token: str | None, hang_ups: HangUps) -> Any:
    """The streamable HTTP ASGI app at /mcp: bounded requests, behind the token check when a token is given."""
    app: Any = RequestBounds(server.streamable_http_app(host=host), hang_ups)
    return BearerAuth(app, token) if token else app


