"""What an MCP tool returns: the short text (`answer_text.py`) capped at TEXT_CAP with the lean structure
(`lean.py`), and catalog errors as the message the model reads."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from contextlib import contextmanager

from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from ..analysis.errors import StepdoctorError
from ..tools import models as m
from .answer_text import findings_shown
from .lean import lean

# Budget per answer: a few KB of text for the model; the structured content is bounded by `limit` arguments.
TEXT_CAP = 6000
_LOOPBACK_NAMES = {"localhost", "ip6-localhost"}


# --------------------------------------------------------------------------------------------------------
# Small helpers: errors, text budget, formatting
# --------------------------------------------------------------------------------------------------------


@contextmanager
def catalog_errors() -> Iterator[None]:
    """A stepdoctor error from the catalog -> ToolError, so the model reads the message and the next step."""
    try:
        yield
    except StepdoctorError as e:
        raise ToolError(str(e)) from None


def cap_text(text: str, narrow: str, cap: int = TEXT_CAP) -> str:
    """Cut `text` at a line boundary below `cap` and say how to ask for less."""
    if len(text) <= cap:
        return text
    note = f"\n… cut at {cap} characters; {narrow}."
    cut = text.rfind("\n", 0, cap - len(note))
    cut = cut if cut > 0 else cap - len(note)
    return text[:cut] + note


def result(model: BaseModel, text: str, narrow: str) -> CallToolResult:
    """Compact text for the model + the structure for the client, kept lean (server/lean.py). When the text is cut
    at TEXT_CAP, a findings list keeps the findings the text still shows (`truncated` says more exist), so
    both halves of the answer hold the same findings."""
    shown = cap_text(text, narrow)
    if isinstance(model, m.IssueReport) and shown != text:
        n = findings_shown(shown)
        if n < len(model.findings):
            model = model.model_copy(update={"findings": model.findings[:n], "numbers": model.numbers[:n],
                                              "truncated": True})
    return CallToolResult(content=[TextContent(type="text", text=shown)], structured_content=lean(model))


def is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
