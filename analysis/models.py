"""Pydantic models the analysis core produces (the shapes of docs/contract.md).

Front ends (CLI, MCP, report) wrap these; they never redefine them. Times are milliseconds unless the
field name says otherwise.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .severity import SEVERITY_ORDER as SEVERITY_ORDER  # re-exported: the front ends import them from here
from .severity import Severity as Severity


class ProfileInfo(BaseModel):
    """`profile` header of every JSON output."""

    path: str
    format: str = Field(description="the ranks' format (a name of analysis/ingest/formats.py: kineto, the "
                                    "Ascend text and DB exports, msprof, MindSpore's legacy folder), or several "
                                    "joined by '+'")
    ranks: list[int]
    steps: list[int] = Field(description="step numbers analysed (ProfilerStep#N); Kineto drops a last step "
                                         "that may be partial like HTA does, see dropped_steps")
    world_size: int | None = None
    world_size_source: str | None = Field(None, description="where world_size comes from: 'metadata' (the "
                                          "ranks' own record of it) or 'communication groups' (no rank records "
                                          "it: the largest group its collectives ran in, a lower bound)")
    vendor: str | None = None
    framework: str | None = None
    dropped_steps: list[int] = Field(default_factory=list,
                                     description="steps present but left out (Kineto: the last one, where it may be partial)")
    missing_ranks: list[int] = Field(default_factory=list,
                                     description="ranks below world_size with no profile here (the cross-rank "
                                                 "answers cover the ranks present only)")


class BreakdownRow(BaseModel):
    """One (rank, step); all times in ms, None where the data cannot tell."""

    rank: int
    step: int | None = Field(description="step number; None in per-rank totals")
    step_ms: float | None
    device_ms: float | None = Field(default=None, description="length of the device window of the step")
    compute_ms: float | None
    communication_ms: float | None
    comm_not_overlapped_ms: float | None
    overlapped_ms: float | None
    free_ms: float | None
    bubble_ms: float | None = None
    preparing_ms: float | None = None
    stage_ms: float | None = Field(default=None, description="device window minus bubble (Ascend Stage)")
    idle_ms: float | None = Field(default=None, description="host step time the device spends neither computing "
                                  "nor communicating (free + lead-in + tail); Kineto: free")
    non_compute_ms: float | None = Field(default=None, description="busy but not computing (HTA non-compute)")
    steps: int | None = Field(default=None, description="number of steps summed (totals only)")
    host_step_ms: float | None = Field(default=None, description="host ProfilerStep duration (None: no trace)")
    step_source: str | None = Field(default=None, description="where step_ms comes from: 'step_table' (the "
                                    "profiler's Stage + Bubble, step_trace_time.csv / StepTraceTime) or 'host' "
                                    "(the host ProfilerStep span)")


class Finding(BaseModel):
    """One problem found by one check (docs/contract.md `Finding`)."""

    model_config = ConfigDict(extra="forbid")

    check: str
    severity: Severity
    title: str
    ranks: list[int] = Field(default_factory=list)
    steps: list[int] = Field(default_factory=list)
    subject: str = ""
    impact_ms: float | None = Field(default=None, description="estimated time lost per step, ms")
    impact_pct: float | None = Field(default=None, description="impact_ms as percent of the mean step time")
    evidence: dict[str, Any] = Field(default_factory=dict)
    fixes: list[str] = Field(default_factory=list)
    message: str = ""


def severity_from_impact(impact_pct: float | None) -> Severity:
    """Priority from the share of mean step time (msprof-analyze advisor rule: >= 5 % high, >= 3 % medium)."""
    from .thresholds import T

    if impact_pct is None:
        return "low"
    if impact_pct >= T.priority_high_pct.value:
        return "high"
    if impact_pct >= T.priority_medium_pct.value:
        return "medium"
    return "low"


def sort_findings(findings: list[Finding]) -> list[Finding]:
    """Severity first, then larger impact first, then check id for a stable order."""
    return sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], -(f.impact_ms or 0.0), f.check,
                                           f.subject, f.ranks))
