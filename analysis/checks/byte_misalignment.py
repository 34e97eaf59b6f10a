"""byte-misalignment: SDMA communication tasks whose size is not a multiple of 512 bytes, on every rank.

Rule (msprof-analyze 26.2.0 byte_alignment_analysis, byte_alignment.yaml): the HCCL tasks of a
collective (trace_view Communication process: `Memcpy*` / `Reduce*` tasks with `size(Byte)`, `transport
type`, `link type`) are judged when the transport is SDMA, the link is not ON_CHIP and the size exceeds
T.byte_align (512 B); a task whose size is not a multiple of 512 B makes the DMA engine split the transfer
into an aligned part and a slow tail. A collective with such a task is an abnormal op.

Every rank is checked (the advisor runs it on the lowest-SDMA-bandwidth rank only) and steps stay apart.
impact_ms = Σ duration of the misaligned SDMA tasks per step, worst rank: the time of the transfers that
run unaligned (an upper bound: the aligned part of each transfer is not lost).
Severity: the advisor analyzer's fixed MEDIUM (its HTML rates abnormal / all SDMA task time: < 0.2 low,
>= 0.7 high, which is kept in the evidence as `abnormal_time_share`). Subject: SDMA.
"""

from __future__ import annotations

import pandas as pd

from ..models import Finding, severity_from_impact
from ..severity import SEVERITY_ORDER, Severity
from ..thresholds import T
from ..units import NS_PER_MS, NS_PER_US
from ._common import (
    in_kept_steps,
    n_steps,
    placeholders,
    ranks_and_steps,
    step_list,
    worst_rank,
)
from .base import Check, CheckContext, register
from .evidence import Entry, Evidence, Record


class MisalignedOp(Record):
    op: str
    step: int | None
    tasks: int
    bytes: int
    abnormal_us: float


class MisalignedRank(Entry):
    weighs_by = "abnormal_ms_per_step"
    abnormal_ops: int
    abnormal_ops_per_step: float
    abnormal_tasks: int
    sdma_tasks: int
    abnormal_ms_per_step: float
    abnormal_time_share: float | None
    sizes_bytes: dict[str, int]  # size (B) -> tasks, the five commonest
    steps: list[int]
    top_ops: list[MisalignedOp]


class MisalignmentEvidence(Evidence):
    alignment_bytes: int
    min_size_bytes: int
    per_rank: dict[int, MisalignedRank]
    impact_method: str = "Σ duration of the misaligned SDMA tasks per step, worst rank (upper bound)"


@register
class ByteMisalignmentCheck(Check):
    id = "byte-misalignment"
    dimension = "communication"
    title = "Communication byte misalignment"
    fires_when = "communication sizes are not multiples of the transfer alignment"
    thresholds = ("byte_align",)
    needs = ("comm_tasks",)
    vendors = ("ascend",)
    description = (
        'HCCL SDMA tasks (link not ON_CHIP) larger than {byte_align} B whose size is not a multiple of '
        '{byte_align} B, per rank and step; impact = time of those tasks.'
    )
    evidence = MisalignmentEvidence
    title_template = "SDMA transfers of {shown} are not {byte_align}-byte aligned on {ranks}"
    message_template = (
        "{Ranks}: {worst.abnormal_ops_per_step:g} collective(s) per step move SDMA data in sizes that are not a "
        "multiple of {byte_align} B ({shown}; {size:,} = {whole} × {byte_align} + {tail}) in {steps}; on rank "
        "{worst_rank} those tasks take {ms:.2f} ms per step. Pad the communicated tensors (bucket sizes) to a "
        "multiple of {byte_align} B."
    )

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        align = int(T.byte_align.value)
        marks = placeholders(ranks)
        judged = (f"FROM comm_tasks WHERE rank IN ({marks}) AND upper(transport) = 'SDMA' "
                  "AND upper(coalesce(link_type, '')) <> 'ON_CHIP' AND size_bytes > ?")
        steps = ctx.view.kept_steps
        # only the misaligned tasks are fetched (in table order); the rest of each rank's SDMA
        # tasks are only counted and timed, by an aggregate per (rank, step)
        bad_all = in_kept_steps(ctx.sql(
            "SELECT rank, step, coalesce(op_name, name) AS op_name, name, dur_ns, size_bytes "
            f"{judged} AND size_bytes % ? <> 0", [*ranks, align, align]), steps)
        if bad_all.empty:
            return []
        totals = in_kept_steps(ctx.sql(f"SELECT rank, step, count(*) AS n, sum(dur_ns) AS t {judged} "
                                       "GROUP BY ALL", [*ranks, align]), steps)
        n_by_rank = {int(r): int(v) for r, v in totals.groupby("rank")["n"].sum().items()}
        t_by_rank = {int(r): int(v) for r, v in totals.groupby("rank")["t"].sum().items()}
        per_rank: dict[int, MisalignedRank] = {}
        lost: dict[int, float] = {}
        for rank, bad in bad_all.groupby("rank", sort=True):
            r = int(rank)
            k = n_steps(steps, r)
            lost[r], per_rank[r] = _rank_evidence(bad, k, n_by_rank[r], t_by_rank[r])
        if not per_rank:
            return []
        rank_w, ms_w = worst_rank(lost)
        w = per_rank[rank_w]
        rk, st = ranks_and_steps(per_rank)
        sizes = [int(x) for x in w.sizes_bytes][:2]
        size = sizes[0]
        return [
            self.finding(
                ctx, subject="SDMA", ranks=rk, steps=st, impact_ms=ms_w, impact_rank=rank_w,
                severity=_severity(ctx, rank_w, ms_w, w.abnormal_time_share),
                evidence=MisalignmentEvidence(alignment_bytes=align, min_size_bytes=align, per_rank=per_rank),
                words={"shown": " and ".join(f"{x:,} B" for x in sizes), "size": size, "whole": size // align,
                       "tail": size % align, "ms": ms_w},
            )
        ]


def _severity(ctx: CheckContext, rank: int | None, ms: float | None, share: float | None) -> Severity:
    """The lowest of three: msprof-analyze's analyzer rates this medium at most; its report rates the misaligned
    share of SDMA time (< 0.2 low, >= 0.7 high, else medium); and the measured time (an upper bound of what
    aligning recovers) as a share of the step (severity_from_impact) rates 0.4 ms per 100 ms step low."""
    by_share: Severity = "low" if share is None or share < 0.2 else "high" if share >= 0.7 else "medium"
    step_ms = ctx.mean_step_ms(rank) if rank is not None else None
    by_time = severity_from_impact(100.0 * ms / step_ms if ms is not None and step_ms else None)
    return max("medium", by_share, by_time, key=lambda s: SEVERITY_ORDER[s])


def _rank_evidence(bad: pd.DataFrame, k: int, n_tasks: int, t_tasks: int) -> tuple[float, MisalignedRank]:
    """(lost ms per step, evidence) of one rank's misaligned SDMA tasks `bad` over k steps; `n_tasks` and
    `t_tasks` (ns) count and time all its judged SDMA tasks."""
    lost = float(bad["dur_ns"].sum()) / NS_PER_MS / k
    ops = bad.groupby(["step", "op_name"], dropna=False).agg(
        tasks=("dur_ns", "size"), bytes=("size_bytes", "sum"), abnormal_us=("dur_ns", "sum")
    )
    sizes = bad["size_bytes"].value_counts().head(5)
    return lost, MisalignedRank(
        abnormal_ops=len(ops),
        abnormal_ops_per_step=round(len(ops) / k, 2),
        abnormal_tasks=len(bad),
        sdma_tasks=n_tasks,
        abnormal_ms_per_step=round(lost, 4),
        # int64 / int64 as numpy divides it: both sums as float64
        abnormal_time_share=round(float(bad["dur_ns"].sum()) / float(t_tasks), 4) if t_tasks else None,
        sizes_bytes={str(int(s)): int(c) for s, c in sizes.items()},
        steps=step_list(bad["step"]),
        top_ops=[
            MisalignedOp(op=str(op), step=None if pd.isna(s) else int(s), tasks=int(v.tasks), bytes=int(v.bytes),
                         abnormal_us=round(float(v.abnormal_us) / NS_PER_US, 3))
            for (s, op), v in ops.sort_values("abnormal_us", ascending=False).head(5).iterrows()
        ],
    )
