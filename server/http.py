"""Streamable HTTP for the MCP server: a bearer-token check around the SDK's app; loopback detection."""

from __future__ import annotations

import hmac
import logging
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


def http_app(server: MCPServer, *, host: str, token: str | None) -> Any:
    """The streamable HTTP ASGI app at /mcp, behind the token check when a token is given."""
    app = server.streamable_http_app(host=host)
    return BearerAuth(app, token) if token else app


