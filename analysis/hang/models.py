"""The answer of `stepdoctor hang`: where the ranks of a hung job diverge, from Flight Recorder dumps and stack
snapshots. Times are milliseconds unless the field name says otherwise."""

from __future__ import annotations

from pydantic import BaseModel, Field


class RankPosition(BaseModel):
    """Where one rank is in one process group."""

    rank: int
    last_issued_seq: int | None = Field(description="highest collective sequence id the rank issued")
    last_issued_op: str | None = None
    last_completed_seq: int | None = Field(None, description="null where the backend does not record "
                                                             "completion (Gloo)")
    state: str | None = Field(None, description="state of the divergent collective on this rank")
    stack: list[str] = Field(default_factory=list, description="Python frames of the divergent or last "
                                                               "issued collective, innermost first")


class Divergence(BaseModel):
    """The first collective of one process group where the ranks disagree."""

    group: str
    group_name: str
    seq: int
    op: str = Field(description="the collective the majority issued at this sequence id")
    kind: str = Field(description="missing: some ranks never issued it | mismatch: some issued another op or "
                                  "other shapes | stuck: all issued it, some never completed it")
    ranks: list[int] = Field(description="the ranks that are missing, different or stuck")
    waiting_ranks: list[int] = Field(description="the ranks that issued it and wait")
    waited_ms: float | None = Field(None, description="how long the waiting ranks had waited when the last "
                                                      "dump was written (lower bound)")
    positions: list[RankPosition] = Field(default_factory=list, description="the culprit ranks' positions")
    message: str
    unknown_ranks: list[int] = Field(default_factory=list, description="members with no dump where the cause "
                                                                       "may be (kind unknown)")
    group_desc: str = Field("", description="the group's description (a label several groups may share)")
    group_ranks: list[int] = Field(default_factory=list, description="the group's members (global ranks)")


class Consequence(BaseModel):
    """A collective where ranks wait because of a first cause elsewhere: its ranks are victims, not culprits."""

    group: str
    group_name: str
    seq: int
    op: str
    waiting_ranks: list[int] = Field(description="ranks blocked in this collective")
    waits_for: list[int] = Field(description="members that never issued it (themselves blocked elsewhere)")
    caused_by: list[int] = Field(description="indexes into divergences[] of the causes this follows from")
    message: str


class StackGroup(BaseModel):
    ranks: list[int]
    frames: list[str] = Field(description="main thread, innermost first: 'function (file:line)'")


class StackReport(BaseModel):
    groups: list[StackGroup] = Field(description="ranks grouped by identical main-thread stack, largest first")
    outliers: list[StackGroup] = Field(description="the groups that differ from the majority (none on a tie)")
    tie: bool = Field(False, description="the largest groups are equal in size: no majority")
    unreadable: list[str] = Field(default_factory=list)


class HangReport(BaseModel):
    path: str
    dump_ranks: list[int] = Field(description="ranks whose Flight Recorder dump was read")
    missing_dumps: list[int] = Field(description="ranks a process group names that have no dump: unknown, "
                                                 "never guessed")
    unreadable: list[str] = Field(default_factory=list, description="'file: problem' of dumps not read")
    divergences: list[Divergence] = Field(description="the first causes, earliest first: missing, mismatch, "
                                                      "stuck, unknown (a rank with no dump) or deadlock")
    stacks: StackReport | None = None
    verdict: str
    warnings: list[str] = Field(default_factory=list)
    consequences: list[Consequence] = Field(default_factory=list, description="collectives where ranks wait "
                                                                              "because of a cause")
    culprits: list[int] = Field(default_factory=list, description="the ranks the causes name (for kind unknown, "
                                "the ranks without a dump where the cause must be); empty where the dumps and "
                                "stacks cannot tell")
    unknowns: list[str] = Field(default_factory=list, description="what cannot be told, and what would tell it")
