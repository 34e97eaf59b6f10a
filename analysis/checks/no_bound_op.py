"""no-bound-op: AI Core kernels that are bound by no pipe (every pipe ratio low), per op type, on every rank.

Rule (msprof-analyze 26.2.0 operator_no_bound_analysis, rules doc §5.2): the PipeUtilization metrics of
kernel_details give, per task, the share of its time each pipe was busy (cube `mac`, `scalar`, `mte1`,
`mte2`, `fixpipe` on the AI Cube core; `vec`, `scalar`, `mte2`, `mte3` on the AI Vector core). A kernel
where no ratio exceeds T.no_bound_ratio (0.8) is bound by nothing: it stalls on dependencies, sync or
poor tiling instead of saturating a unit. Only tasks of at least T.no_bound_min_us (20 µs) count.

Differences from the advisor, on purpose:
- every rank is checked (the advisor picks one) and the advisor's quirk of running only when the *first*
  kernel row is itself unbound is dropped;
- only AI Core task types are judged (AI_CORE, AI_VECTOR_CORE, MIX_AIC, MIX_AIV): AI CPU and communication
  tasks have no AI Core pipes, so their ratio cells carry no information;
- a task whose ratios are all missing or all zero has no PMU data and is unknown, not unbound;
- the fixpipe ratio counts as a pipe (a fixpipe-bound kernel is bound).

impact_ms = Σ task time × (1 − max_ratio / 0.8) per step, worst rank: the time saved if the busiest pipe
of each kernel reached the bound threshold, i.e. the kernel's headroom to become bound; an upper bound.
One finding per op type (subject), top 10 by impact. Severity: the advisor's fixed LOW.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..models import Finding
from ..thresholds import T
from ._common import (
    NS_PER_MS,
    NS_PER_US,
    in_kept_steps,
    kept_steps,
    n_steps,
    ranks_text,
    series_sum,
    step_list,
    steps_text,
    worst_op_types,
)
from .base import Check, CheckContext, register

MAX_OP_TYPES = 10  # as many op types as the advisor lists for tuning
AICORE_TASK_TYPES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV")
PIPE_COLUMNS = (
    "aic_mac_ratio",
    "aic_scalar_ratio",
    "aic_mte1_ratio",
    "aic_mte2_ratio",
    "aic_fixpipe_ratio",
    "aiv_vec_ratio",
    "aiv_scalar_ratio",
    "aiv_mte2_ratio",
    "aiv_mte3_ratio",
)


def busiest_pipe(df: pd.DataFrame, columns: tuple[str, ...] = PIPE_COLUMNS) -> tuple[pd.Series, pd.Series]:
    """(max ratio, name of its pipe) per row over the present ratio columns; NaN where all are missing
    or 0."""
    ratios = df[list(columns)].astype("float64")
    mx = ratios.max(axis=1, skipna=True)
    mx = mx.where(mx > 0)  # all-zero rows: the PMU did not sample this task
    pipe = ratios.fillna(-1.0).idxmax(axis=1).where(mx.notna())
    return mx, pipe


def bound_headroom(
    max_ratio: pd.Series | np.ndarray | float, threshold: float
) -> pd.Series | np.ndarray | float:
    """Share of a kernel's time saved if its busiest pipe rose to `threshold` (0 when already there)."""
    return np.clip(1.0 - np.asarray(max_ratio, dtype="float64") / threshold, 0.0, 1.0)


@register
class NoBoundOpCheck(Check):
    id = "no-bound-op"
    title = "Kernels bound by nothing"
    needs = ("kernel_details", "pipe_ratios")
    vendors = ("ascend",)
    description = (
        "AI Core kernels of at least 20 µs whose pipe ratios (mac, vec, scalar, mte1/2/3, fixpipe) all "
        "stay at or below 0.8, per op type on every rank; impact = time × headroom to the 0.8 bound."
    )

    def run(self, ctx: CheckContext) -> list[Finding]:
        ranks = self.applicable_ranks(ctx)
        if not ranks:
            return []
        marks = ",".join("?" * len(ranks))
        types = ",".join(f"'{t}'" for t in AICORE_TASK_TYPES)
        thr = T.no_bound_ratio.value
        min_ns = T.no_bound_min_us.value * NS_PER_US
        ops = ctx.sql(
            "SELECT rank, step, coalesce(op_type, name) AS op_type, task_type, dur_ns, "
            f"{', '.join(PIPE_COLUMNS)} FROM device_ops "
            f"WHERE rank IN ({marks}) AND task_type IN ({types}) AND dur_ns >= ?",
            [*ranks, min_ns],
        )
        steps = kept_steps(ctx)
        ops = in_kept_steps(ops, steps)
        if ops.empty:
            return []
        ops = ops.copy()
        ops["max_ratio"], ops["pipe"] = busiest_pipe(ops)
        measured = ops[ops["max_ratio"].notna()]
        bad = measured[measured["max_ratio"] <= thr].copy()
        if bad.empty:
            return []
        bad["lost_ns"] = bad["dur_ns"].astype("float64") * bound_headroom(bad["max_ratio"], thr)
        results = worst_op_types(ctx, bad, steps, MAX_OP_TYPES,
                                 "no-bound-op: {more} more unbound op types are not listed (top {limit} shown)")
        out: list[Finding] = []
        for op_type, g, per_rank_ms, (rank_w, ms_w) in results:
            gw = g[g["rank"] == rank_w]
            k = n_steps(steps, int(rank_w)) if rank_w is not None else 1
            time_ms = float(gw["dur_ns"].sum()) / NS_PER_MS / k
            # ratio means weighted by task time: what the unit did over the kernel's time
            w = gw["dur_ns"].to_numpy(dtype="float64")
            w_sum = series_sum(w)
            means = {}
            for c in PIPE_COLUMNS:
                x = gw[c].to_numpy(dtype="float64")
                if not np.isnan(x).all():
                    means[c] = round(float(series_sum(x * w) / w_sum), 4)
            top_pipe = max(means, key=lambda c: means[c]) if means else None
            mx = means.get(top_pipe, 0.0) if top_pipe else 0.0
            rk = sorted(per_rank_ms)
            st = step_list(g["step"])
            out.append(
                self.finding(
                    ctx,
                    title=f"{op_type} is bound by no pipe (busiest {_pipe(top_pipe)} at {mx:.0%})",
                    subject=str(op_type),
                    ranks=rk,
                    steps=st,
                    impact_ms=ms_w,
                    impact_rank=rank_w,
                    severity="low",
                    evidence={
                        "threshold_ratio": thr,
                        "min_task_us": T.no_bound_min_us.value,
                        "task_type": str(gw["task_type"].iloc[0]) if len(gw) else None,
                        "tasks_per_step": round(len(gw) / k, 2),
                        "kernel_ms_per_step": round(time_ms, 4),
                        "pipe_ratios_time_weighted": means,
                        "busiest_pipe": top_pipe,
                        "unbound_tasks_by_rank": {
                            str(int(r)): int(n) for r, n in g.groupby("rank").size().items()
                        },
                        "lost_ms_per_step_by_rank": {
                            str(r): round(v, 4) for r, v in sorted(per_rank_ms.items())
                        },
                        "impact_method": "Σ task time × (1 − busiest pipe ratio / 0.8) per step, worst "
                        "rank; upper bound (time saved if the busiest pipe reached the bound threshold)",
                    },
                    message=(
                        f"{op_type} on {ranks_text(rk)} in {steps_text(st)}: no pipe ratio exceeds {thr:.0%} "
                        f"(busiest {_pipe(top_pipe)} {mx:.0%}) over {time_ms:.2f} ms of kernel time per "
                        f"step on rank {rank_w}; up to {ms_w:.2f} ms per step if it became bound. Check its "
                        "tiling (AOE op tuning) and input shapes / formats."
                    ),
                )
            )
        return out


def _pipe(col: str | None) -> str:
    if not col:
        return "unknown"
    return col.removesuffix("_ratio").replace("aic_", "cube ").replace("aiv_", "vector ")
