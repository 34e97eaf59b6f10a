"""The answer of `stepdoctor whatif` (`WhatIf` in docs/contract.md). Times are milliseconds."""

from __future__ import annotations

from pydantic import BaseModel, Field


class ReplayStep(BaseModel):
    step: int
    measured_ms: float = Field(description="the slowest rank's step (host step window), as measured")
    replayed_ms: float = Field(description="the same, replayed from the measured parameters (null replay)")
    error_pct: float = Field(description="|replayed - measured| / measured, percent")


class Replay(BaseModel):
    steps: list[ReplayStep]
    abstained_steps: list[int] = Field(description="steps whose replay error is above the limit: no answer "
                                                   "is drawn from them")
    reason: str | None = Field(None, description="why steps were abstained, or why nothing could be replayed")
    max_error_pct: float = Field(description="the limit on a step's null-replay error")
    source: str | None = Field(None, description="where the collectives came from (comm_ops, host_ops)")
    ranks: list[int] = Field(default_factory=list, description="the ranks replayed")
    coarse_ranks: list[int] = Field(default_factory=list, description="ranks with no trace events: their step "
                                    "windows are inferred from their step table (end at their last collective)")
    missing_ranks: list[int] = Field(default_factory=list, description="ranks of the job's world size with no "
                                     "profile: their collectives are replayed without them")


class ScenarioStep(BaseModel):
    step: int
    predicted_ms: float
    delta_ms: float = Field(description="predicted - measured")


class Scenario(BaseModel):
    change: str = Field(description="e.g. 'rank 1 at the median of its peers', 'communication at the median'")
    steps: list[ScenarioStep]
    predicted_step_ms: float = Field(description="mean over the replayed steps")
    delta_ms: float = Field(description="predicted_step_ms - the measured mean")


class Slowdown(BaseModel):
    S: float = Field(description="measured / ideal step time (the ideal: every rank's compute at the median "
                                 "of its peers at each collective, communication at the median)")
    ideal_ms: float
    measured_ms: float
    by_rank: dict[int, float] = Field(description="S_rank: the ideal with only that rank's measured times "
                                                  "put back, over the ideal; for the ranks with the most own "
                                                  "time over their peers (all of a job of 8 ranks or fewer)")
    by_stage: dict[int, float] = Field(default_factory=dict, description="S_stage, where stages are known")
    by_op_type: dict[str, float] = Field(description="compute / communication / tail put back alone")
    by_step: dict[int, float] = Field(description="measured / ideal per step")


class WhatIf(BaseModel):
    path: str
    replay: Replay
    scenarios: list[Scenario]
    slowdown: Slowdown | None
    verdict: str
    warnings: list[str] = Field(default_factory=list)


class PathLink(BaseModel):
    kind: str = Field(description="compute (before a collective) | latency (the lane's start latency) | transfer "
                                  "(after the last member arrived) | tail (after the last collective, to the step "
                                  "end) | late_start (the rank began the step after the end rank did: the end of "
                                  "its previous step)")
    rank: int
    collective: int | None = Field(None, description="the matched collective instance (metrics.collectives)")
    start_ms: float = Field(description="from the step's earliest start on any rank")
    ms: float
    share_pct: float = Field(description="ms / the step time")


class CriticalPath(BaseModel):
    path: str
    step: int
    step_ms: float = Field(description="the step time (the slowest rank's step), replayed = measured where the "
                                       "null replay holds")
    replay_error_pct: float
    end_rank: int = Field(description="the rank whose step ends last")
    links: list[PathLink] = Field(description="earliest first: the chain of work that sets the step's end")
    by_rank: dict[int, float] = Field(description="ms of the path on each rank")
    by_kind: dict[str, float] = Field(description="ms of the path by link kind")
    summary: str
    warnings: list[str] = Field(default_factory=list)
