"""What the MCP tools answer: the server's output models (the catalog's plus the fields that keep answers
small), evidence trimming, and the result that pairs the short text (`answer_text.py`) with the structure."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, TextContent
from pydantic import BaseModel

from ..analysis.errors import StepdoctorError
from ..analysis.models import Finding
from ..tools import models as m
from .answer_text import (
    findings_shown,
    text_breakdown,
    text_comparison,
    text_env,
    text_fixes,
    text_issues,
    text_kernels,
    text_loaded,
    text_slow_links,
    text_slow_ranks,
)
from .lean import TRIMMED_KEY, lean
from .results import BreakdownResult, EnvAuditResult, LoadedProfile, SlowRanksResult

# the text_* summaries live in answer_text.py; they are re-exported so that tools reach every part of an
# answer through this module
__all__ = [
    "EVIDENCE_RANKS", "EXPLAIN_RANKS", "TEXT_CAP", "BreakdownResult", "EnvAuditResult", "LoadedProfile",
    "SlowRanksResult", "cap_text", "catalog_errors", "findings_shown", "is_loopback", "result", "text_breakdown",
    "text_comparison", "text_env", "text_fixes", "text_issues", "text_kernels", "text_loaded", "text_slow_links",
    "text_slow_ranks", "trim_evidence", "trimmed_variable",
]

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


# A finding's evidence holds a map keyed by rank for every rank the check judged: the CLI's JSON keeps them
# all, an answer here the EVIDENCE_RANKS that weigh most (on 1,024 ranks list_issues returned 2.1 MB for 20
# findings; trimmed, ~0.1 MB), explain(finding=N) EXPLAIN_RANKS.
EVIDENCE_RANKS = 8
EXPLAIN_RANKS = 32


def _rank_weight(value: Any) -> float:
    """How much a rank's entry in an evidence map weighs: a number itself; in a dict its
    impact_ms_per_step, else its largest `*ms_per_step*` value, else its largest `*ms*` value."""
    if isinstance(value, bool):
        return 0.0
    if isinstance(value, int | float):
        return abs(float(value))
    if isinstance(value, dict):
        nums = {k: abs(float(v)) for k, v in value.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        if "impact_ms_per_step" in nums:
            return nums["impact_ms_per_step"]
        for part in ("ms_per_step", "ms"):
            hits = [v for k, v in nums.items() if part in k]
            if hits:
                return max(hits)
    return 0.0


def trim_evidence(f: Finding, keep: int) -> Finding:
    """`f` with each evidence map keyed by rank (more than `keep` entries) cut to `keep` ranks: those that
    weigh most (`_rank_weight`), or for text values the ranks of the rarest values first, so a rank that
    differs stays; ties in rank order. What was cut is said in evidence["trimmed"]."""
    evidence = dict(f.evidence)
    trimmed: dict[str, str] = {}
    for key, value in f.evidence.items():
        if not (isinstance(value, dict) and len(value) > keep and all(str(k).lstrip("-").isdigit() for k in value)):
            continue
        ranks = list(value)
        if all(isinstance(v, str | None) for v in value.values()):
            chosen = _rarest_first(value, keep)
            how = "the ranks of the rarest values"
        else:
            chosen = sorted(ranks, key=lambda r: (-_rank_weight(value[r]), int(r)))[:keep]
            how = "the largest"
        evidence[key] = {r: value[r] for r in sorted(chosen, key=int)}
        trimmed[key] = (f"{keep} of {len(ranks)} ranks shown ({how}); `stepdoctor issues --format json` "
                        "lists every rank")
    if not trimmed:
        return f
    evidence[TRIMMED_KEY] = trimmed
    return f.model_copy(update={"evidence": evidence})


def _rarest_first(values: dict[Any, Any], keep: int) -> list[Any]:
    """At most `keep` keys of a rank -> value map: the ranks of the rarest values first, then rank order."""
    freq: dict[Any, int] = {}
    for v in values.values():
        freq[v] = freq.get(v, 0) + 1
    return sorted(values, key=lambda r: (freq[values[r]], int(r)))[:keep]


def trimmed_variable(v: m.EnvVariable) -> m.EnvVariable:
    keep = sorted(_rarest_first(v.values_by_rank, EVIDENCE_RANKS), key=int)
    return v.model_copy(update={
        "values_by_rank": {r: v.values_by_rank[r] for r in keep},
        "finding": None if v.finding is None else trim_evidence(v.finding, EVIDENCE_RANKS),
    })


def result(model: BaseModel, text: str, narrow: str) -> CallToolResult:
    """Compact text for the model + the structure for the client, kept lean (server/lean.py). When the text is cut
    at TEXT_CAP, a findings list keeps the findings the text still shows (`truncated` says more exist), so
    both halves of the answer hold the same findings."""
    shown = cap_text(text, narrow)
    if isinstance(model, m.IssueReport) and shown != text:
        n = findings_shown(shown)
        if n < len(model.findings):
            model = model.model_copy(update={"findings": model.findings[:n], "truncated": True})
    return CallToolResult(content=[TextContent(type="text", text=shown)], structured_content=lean(model))


def is_loopback(host: str) -> bool:
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
