"""Output models of the tool catalog (docs/contract.md). Field names are a contract: add, never rename."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from ..analysis.models import BreakdownRow, Finding, ProfileInfo


class _WithProfile(BaseModel):
    profile: ProfileInfo
    warnings: list[str] = Field(default_factory=list, description="what was skipped, lost or guessed")


class IssueReport(_WithProfile):
    findings: list[Finding]
    not_applicable: dict[str, str] = Field(default_factory=dict,
                                           description="check id -> why it could not run on this profile")
    total: int = 0
    truncated: bool = False
    numbers: list[int | None] = Field(
        default_factory=list,
        description="each finding's number in the profile's unfiltered report, the N that `explain ID --profile "
                    "PATH --finding N` and MCP `explain(finding=N)` take, whichever filter listed it; empty: "
                    "numbered 1, 2, ... as listed")

    def numbered(self) -> list[tuple[int | None, Finding]]:
        """The findings with the numbers every view shows for them (see `numbers`)."""
        if len(self.numbers) == len(self.findings):
            return list(zip(self.numbers, self.findings, strict=True))
        return list(enumerate(self.findings, 1))


class Breakdown(_WithProfile):
    rows: list[BreakdownRow] = Field(description="one per (rank, step); times in ms")
    totals: list[BreakdownRow] = Field(description="one per rank, summed over its steps; `steps` = count")
    total: int = Field(0, description="rows (rank, step) before a limit cut them (MCP `limit`)")
    truncated: bool = False


class SlowRank(BaseModel):
    rank: int
    steps: list[int]
    value_ms: float
    excess_ms: float
    excess_pct: float
    cause: str
    median_ms: float | None = None
    impact_ms: float | None = None


class SlowDimension(BaseModel):
    name: Literal["compute", "communication", "free"]
    measures: str | None = Field(None, description="the breakdown field this dimension compares (free: `idle_ms`, "
                                 "free plus the step's lead-in and tail, not the breakdown's `free_ms`)")
    median_ms: float | None
    spread_pct: float | None = Field(description="(max - min) / mean step, percent, worst step")
    slow: list[SlowRank]
    late_arrivals: list[SlowRank] = Field(default_factory=list,
                                          description="communication only: ranks waiting far less than the median "
                                                      "(they arrive last and make the others wait)")


class RankVerdict(BaseModel):
    """One rank's answer to "is it slow, and why"."""

    rank: int
    verdict: Literal["straggler", "slow", "heavy-stage", "waits", "ok"] = Field(
        description="straggler: arrives last at collectives; slow: slower than its peers in a dimension; "
                    "heavy-stage: in the pipeline stage that computes most; waits: only waits, for a straggler "
                    "or inside a collective for members with no profile here (waits_for) or for the collective "
                    "itself")
    cause: str
    finding: str | None = Field(None, description="title of the finding that names this rank")
    stage: int | None = Field(None, description="pipeline stage, 1-based, when stages are known")
    matched_collectives: int | None = None
    arrived_last: int | None = Field(None, description="collectives it arrived last at (significantly)")
    wait_caused_per_step_ms: float | None = Field(None, description="the other ranks' wait for it per step")
    waits_for: list[int] = Field(default_factory=list)


class SlowRanks(_WithProfile):
    dimensions: list[SlowDimension]
    findings: list[Finding]
    ranks: list[RankVerdict] = Field(default_factory=list, description="every rank, with its verdict and cause")
    stragglers: list[int] = Field(default_factory=list, description="ranks that arrive last at collectives")
    total: int = Field(0, description="slow ranks and late arrivals over all dimensions, before a limit cut them")
    truncated: bool = Field(False, description="True if a dimension listed more slow ranks than the limit")


class Link(BaseModel):
    src: int
    dst: int
    transport: str
    bandwidth_gbps: float
    median_gbps: float
    size_mb: float
    time_ms: float
    steps: list[int]


class SlowLinks(_WithProfile):
    links: list[Link]
    findings: list[Finding]
    total: int = 0
    truncated: bool = False


class Kernel(BaseModel):
    name: str
    op_type: str | None
    core_type: str | None
    count: int
    total_ms: float
    mean_ms: float
    max_ms: float
    share_pct: float = Field(description="share of the device op time of the selection, percent")
    ranks: list[int]
    input_shapes: list[str] = Field(default_factory=list, description="most frequent input shapes (top 3)")
    category: str | None = None
    step_share_pct: float | None = Field(default=None, description="total per step / mean step time, percent")


class TopKernels(_WithProfile):
    kernels: list[Kernel]
    total: int
    truncated: bool
    by: Literal["name", "type"] = "name"


class EnvVariable(BaseModel):
    name: str
    values_by_rank: dict[int, str | None]
    status: Literal["ok", "bad", "unknown"]
    recommended: str | None = None
    finding: Finding | None = None


class EnvAudit(_WithProfile):
    variables: list[EnvVariable]
    total: int = Field(0, description="variables before a filter's limit cut them (MCP `limit`)")
    truncated: bool = False


class Explanation(BaseModel):
    id: str
    kind: Literal["check", "fix"]
    title: str
    why: str
    steps: list[str]
    code_edit: list[dict[str, Any]] | None = Field(
        None, description="a fix's code edits (the fields of its kind, knowledge/edit/kinds/, and every other kind's at their empty values: framework, kind, before, after, ...)")
    verify: str | None = None
    references: list[dict[str, str | None]] = Field(default_factory=list, description="{title, url}")
    finding: Finding | None = None
    fixes: list[str] = Field(default_factory=list, description="fix ids that answer this check / finding")
    expected_gain: dict[str, str | None] | None = Field(None, description="{text, source}")
    env: list[dict[str, Any]] = Field(
        default_factory=list, description="variables the fix sets (knowledge/schema.py EnvVar fields)")


class FixSummary(BaseModel):
    id: str
    title: str
    vendors: list[str]
    frameworks: list[str]
    checks: list[str]


class FixList(BaseModel):
    fixes: list[FixSummary]
    total: int
    truncated: bool = False


class EditSuggestion(BaseModel):
    path: str
    fixes: list[str]
    changed: bool
    diff: str
    messages: list[str] = Field(default_factory=list)
    template: str | None = None
    applied: bool = False
    backup: str | None = None


class TriggerResult(BaseModel):
    """`stepdoctor trigger`: the trigger written for every rank's StepWatch."""

    id: str
    run_dir: str
    first_step: int           # the first step every rank captures
    steps: int
    capture_dir: str          # where the ranks write what they capture


class SnapshotResult(BaseModel):
    """`stepdoctor snapshot`: the py-spy stack snapshots written (one file per process) for `hang`."""

    output: str
    written: list[str]        # file names, pyspy_rank_<N>.json
    failed: list[str] = Field(default_factory=list)   # "pid P: why"


class RunSide(BaseModel):
    path: str
    step_ms: float | None
    compute_ms: float | None = None
    communication_ms: float | None = None
    free_ms: float | None = None
    memory_ms: float | None = Field(default=None, description="device busy with neither compute nor "
                                                              "communication (copies, memsets, syncs), per step")
    host_ms: float | None = Field(default=None, description="step time outside the device window, per step")
    ranks: list[int] = Field(default_factory=list)
    steps: list[int] = Field(default_factory=list)
    format: str | None = None


class BreakdownDelta(BaseModel):
    compute_ms: float | None
    communication_ms: float | None
    free_ms: float | None
    memory_ms: float | None = None
    host_ms: float | None = None


class Change(BaseModel):
    kind: Literal["kernel", "op", "api", "comm", "family"]
    name: str
    base_ms: float
    target_ms: float
    delta_ms: float
    count_base: float = Field(description="calls per step (per rank)")
    count_target: float
    change: Literal["added", "removed", "changed"] = "changed"
    bandwidth_base_gbps: float | None = Field(default=None, description="comm only: achieved SDMA/RDMA GB/s")
    bandwidth_target_gbps: float | None = None


class EnvChange(BaseModel):
    name: str
    base: str | None
    target: str | None


class RankDelta(BaseModel):
    base_rank: int
    target_rank: int
    step_ms: float | None
    compute_ms: float | None
    communication_ms: float | None
    free_ms: float | None


class Comparison(BaseModel):
    base: RunSide
    target: RunSide
    delta_ms: float | None
    delta_pct: float | None
    breakdown_delta: BreakdownDelta
    top_changes: list[Change]
    env_changes: list[EnvChange]
    config_changes: list[EnvChange] = Field(default_factory=list)
    findings: list[Finding] = Field(description="findings new in the target")
    gone_findings: list[Finding] = Field(default_factory=list, description="findings of the base gone in the target")
    per_rank: list[RankDelta] = Field(default_factory=list)
    verdict: str
    next_step: str | None = None
    cross_vendor: bool = False
    notes: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    total_changes: int = 0
    truncated: bool = False
