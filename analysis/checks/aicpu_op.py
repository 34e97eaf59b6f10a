"""aicpu-op: operators that run on the AI CPU instead of the AI Core, per op type, on every rank.

Rule (msprof-analyze 26.2.0 aicpu_analysis): a device task whose task type
(kernel_details `Accelerator Core`) is AI_CPU is an issue when its op type has a task of at least
T.aicpu_task_us (20 µs). The advisor tests the longest task of *all* ops against 20 µs and looks at one
rank; here the test is on the AI_CPU tasks of that op type and every rank is checked and named.

Algorithm:
1. take the AI_CPU tasks of the kept steps of each rank (a rank without steps counts as one step), except
   the data-queue tasks of dataset sink mode (GetNext / dequeue / InitDataSetQueue): they wait for input
   data on the AI CPU by design, and that wait belongs to slow-dataloader;
2. group by op type (the `Type` column, else the task name); keep op types with a task >= 20 µs;
3. impact_ms = Σ AI_CPU task time of the op type per step (mean over the rank's steps), the worst rank;
   AI_CPU tasks serialize the stream, so their whole time is what moving the op to the AI Core can save
   (an upper bound: the AI Core version is not free);
4. suggestions from aicpu_rules.yaml: DOUBLE (float64) inputs -> convert to float32 / bf16 (AI Core
   kernels do not take float64, so the op falls back to the AI CPU); index / indexput / nonzero ->
   replace with an equivalent operator; argmin -> CANN >= 7.0.RC1 has an AI Core kernel.

Severity: the advisor rates AICPU by a time ratio, so the impact rule of `Check.finding` applies (share of
the mean step). The advisor's own ratio (AI_CPU time / all device task time) is kept in the evidence.

The few helpers the compute / communication checks share (rank and step text, kept steps per rank) are in
_common.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from ..models import Finding
from ..thresholds import T
from ..units import NS_PER_MS, NS_PER_US
from ._common import (
    by_rank,
    in_kept_steps,
    n_steps,
    placeholders,
    series_sum,
    step_list,
    worst_rank,
)
from .base import Check, CheckContext, register
from .evidence import Entry, Evidence, Record

# aicpu_rules.yaml ExampleGuideChecker: op types with a documented AI Core replacement (lower-case).
_REPLACE_GUIDE = {"index", "indexput", "indexputv2", "nonzero"}
_UPGRADE_GUIDE = {"argmin": "upgrade CANN to >= 7.0.RC1, which has an AI Core ArgMin"}
# Data-queue tasks of dataset sink mode (MindSpore GetNext / dequeue, InitDataSetQueue) run on the AI CPU
# by design: their time is the device waiting for input data (the data loader's problem), not an op to port.
DATA_QUEUE_RE = "getnext|dequeue|initdatasetqueue"
_DOUBLE_RE = re.compile(r"(^|[^A-Z0-9])(DT_)?(DOUBLE|FLOAT64)($|[^A-Z0-9])", re.I)


def has_double(*dtypes: Any) -> bool:
    return any(isinstance(d, str) and bool(_DOUBLE_RE.search(d)) for d in dtypes)


class AicpuStep(Record):
    tasks: int
    ms: float


class AicpuRank(Entry):
    weighs_by = "aicpu_ms_per_step"
    tasks_per_step: float
    aicpu_ms_per_step: float
    max_task_us: float
    share_of_device_time_pct: float
    by_step: dict[str, AicpuStep]  # step -> its tasks and time (known steps only)


class AicpuEvidence(Evidence):
    threshold_task_us: float
    per_rank: dict[int, AicpuRank]
    dtypes: list[str]
    double_inputs: bool
    input_shapes: list[str]
    task_names: list[str]
    suggestions: list[str]
    call_stacks: list[str]
    impact_method: str = "Σ AI_CPU task time of this op type per step, worst rank"


@register
class AicpuOpCheck(Check):
    id = "aicpu-op"
    dimension = "compute"
    title = "Operators on AI CPU"
    fires_when = "operators run on AI CPU; `subject` = op type"
    thresholds = ("aicpu_task_us",)
    frameworks = ("pytorch", "mindspore")
    needs = ("kernel_details",)
    vendors = ("ascend",)
    description = (
        'Op types whose device tasks run on the AI CPU (task type AI_CPU) with a task of at least {aicpu_task_us}'
        ' µs, on every rank; impact is their AI_CPU time per step. Flags float64 inputs, the usual reason an op '
        'falls back to the AI CPU.'
    )
    evidence = AicpuEvidence
    title_template = "{op_type} runs on AI CPU ({worst.aicpu_ms_per_step:.2f} ms per step{with_double})"
    message_template = (
        "{op_type} runs on the AI CPU on {ranks} in {steps}: {worst.tasks_per_step:g} tasks and "
        "{worst.aicpu_ms_per_step:.2f} ms per step on rank {worst_rank} (longest task {worst.max_task_us:.1f} µs "
        ">= {aicpu_task_us:g} µs){double_note}."
    )

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        marks = placeholders(ranks)
        ops = ctx.sql(
            "SELECT rank, step, coalesce(op_type, name) AS op_type, name, dur_ns, input_dtypes, "
            "output_dtypes, input_shapes, correlation_id FROM device_ops "
            f"WHERE task_type = 'AI_CPU' AND rank IN ({marks}) "
            "AND NOT regexp_matches(lower(coalesce(op_type, '') || ' ' || name), ?)",
            [*ranks, DATA_QUEUE_RE],
        )
        steps = ctx.view.kept_steps
        ops = in_kept_steps(ops, steps)
        if ops.empty:
            return []
        # the advisor's priority basis: AI_CPU time over all device task time, per rank
        totals = ctx.sql(
            f"SELECT rank, step, sum(dur_ns) AS t FROM compute_kernels WHERE rank IN ({marks}) GROUP BY rank, step",
            ranks,
        )
        totals = in_kept_steps(totals, steps)
        total_by_rank = totals.groupby("rank")["t"].sum().to_dict()
        thr_ns = T.aicpu_task_us.value * NS_PER_US
        # short AI CPU tasks are not judged: the advisor's 20 µs floor
        return [self._op_finding(ctx, str(op_type), grp, steps, total_by_rank)
                for op_type, grp in ops.groupby("op_type", sort=True) if not grp["dur_ns"].max() < thr_ns]

    def _op_finding(self, ctx: CheckContext, op_type: str, grp: pd.DataFrame, steps: dict[int, list[int]],
                    total_by_rank: dict[Any, Any]) -> Finding:
        thr_us = T.aicpu_task_us.value
        per_rank, per_rank_ms = self._per_rank(grp, steps, total_by_rank)
        rank_w, ms_w = worst_rank(per_rank_ms)
        dtypes = sorted({d for d in pd.concat([grp["input_dtypes"], grp["output_dtypes"]]).dropna().astype(str)})
        double = has_double(*dtypes)
        shapes = sorted({str(s) for s in grp["input_shapes"].dropna()})[:5]
        stacks = self._stacks(ctx, grp)
        steps_seen = step_list(grp["step"])
        return self.finding(
            ctx, subject=op_type, ranks=sorted(per_rank), steps=steps_seen, impact_ms=ms_w, impact_rank=rank_w,
            evidence=AicpuEvidence(
                threshold_task_us=thr_us, per_rank=per_rank, dtypes=dtypes, double_inputs=double,
                input_shapes=shapes, task_names=sorted(set(grp["name"].astype(str)))[:5],
                suggestions=_suggestions(op_type, double), call_stacks=stacks,
            ),
            words={"op_type": op_type, "with_double": " with DOUBLE inputs" if double else "",
                   "double_note": "; its tensors are DOUBLE, which has no AI Core kernel" if double else ""},
        )

    @staticmethod
    def _per_rank(grp: pd.DataFrame, steps: dict[int, list[int]], total_by_rank: dict[Any, Any]
                  ) -> tuple[dict[int, AicpuRank], dict[int, float]]:
        """Evidence and ms per step of each rank (ascending) for one op type's tasks.

        The rows are split by rank with one stable sort (each rank's rows stay in their order) and summed
        with numpy, not a pandas groupby per rank and step (whose overhead, not the data, grows with the
        ranks). dur_ns is an integer column, so the sums are exact whatever the grouping."""
        order, slices = by_rank(grp["rank"].to_numpy())
        dur = grp["dur_ns"].to_numpy()[order]
        step = grp["step"].to_numpy(dtype="float64", na_value=np.nan)[order]
        per_rank: dict[int, AicpuRank] = {}
        per_rank_ms: dict[int, float] = {}
        for r, i, j in slices:
            d, st = dur[i:j], step[i:j]
            k = n_steps(steps, r)
            total = float(series_sum(d))
            ms = total / NS_PER_MS / k
            per_rank_ms[r] = ms
            # tasks and time per known step, steps ascending (what groupby("step") gives: NULL steps dropped)
            known = ~np.isnan(st)
            by = np.argsort(st[known], kind="stable")
            ks, kd = st[known][by], d[known][by]
            cut = np.flatnonzero(np.r_[True, ks[1:] != ks[:-1]]) if ks.size else np.empty(0, np.int64)
            sums = np.add.reduceat(kd, cut) if ks.size else kd
            counts = np.diff(np.r_[cut, ks.size])
            per_rank[r] = AicpuRank(
                tasks_per_step=round((j - i) / k, 2),
                aicpu_ms_per_step=round(ms, 4),
                max_task_us=round(float(d.max()) / NS_PER_US, 3),
                share_of_device_time_pct=round(100.0 * total / float(total_by_rank.get(r) or 1), 2),
                by_step={
                    str(int(ks[c])): AicpuStep(tasks=int(n), ms=round(float(t) / NS_PER_MS, 4))
                    for c, n, t in zip(cut.tolist(), counts.tolist(), sums.tolist(), strict=True)
                },
            )
        return per_rank, per_rank_ms

    @staticmethod
    def _stacks(ctx: CheckContext, grp: pd.DataFrame) -> list[str]:
        """Call stacks of the host ops that launched these tasks, when with_stack recorded them."""
        out: list[str] = []
        # without a single launch with a call stack (with_stack off: the usual case) every query below is
        # empty
        any_stack = ctx.once(_any_launch_stack)
        if not any_stack:
            return out
        for rank, g in grp.groupby("rank", sort=True):
            ids = [int(c) for c in g["correlation_id"].dropna().unique()[:200]]
            if not ids:
                continue
            marks = placeholders(ids)
            rows = ctx.profile.rows(
                "SELECT DISTINCT call_stack FROM host_ops WHERE rank = ? AND call_stack IS NOT NULL "
                f"AND correlation_id IN ({marks}) LIMIT 3",
                [int(rank), *ids],
            )
            out.extend(str(r[0]) for r in rows if str(r[0]) not in out)
            if len(out) >= 3:
                break
        return out[:3]


def _suggestions(op_type: str, double: bool) -> list[str]:
    """What to do about one op type on the AI CPU: move it to the AI Core, and the CANN guides that apply."""
    out = ["modify the code so that the operator runs on the AI Core"]
    if double:
        out.append("convert float64 (DOUBLE) tensors to float32 / bf16: AI Core kernels do not take float64")
    key = op_type.lower()
    if key in _REPLACE_GUIDE:
        out.append("replace it with an equivalent operator (CANN 'AICPU operator replacement examples')")
    if key in _UPGRADE_GUIDE:
        out.append(_UPGRADE_GUIDE[key])
    return out


def _any_launch_stack(ctx: CheckContext) -> bool:
    """Whether any launch recorded its call stack (with_stack on)."""
    return bool(ctx.profile.rows(
        "SELECT 1 FROM host_ops WHERE call_stack IS NOT NULL AND correlation_id IS NOT NULL LIMIT 1"))
