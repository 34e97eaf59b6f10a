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
                                                  "put back, over the ideal")
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
