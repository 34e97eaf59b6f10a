"""no-bound-op: AI Core kernels that are bound by no pipe (every pipe ratio low), per op type, on every rank.

Rule (msprof-analyze 26.2.0 operator_no_bound_analysis): the PipeUtilization metrics of
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
from ..units import NS_PER_MS, NS_PER_US
from ._common import (
    columns,
    kept_mask,
    n_steps,
    placeholders,
    rank_slices,
    step_list,
    worst_rank,
)
from .base import Check, CheckContext, register
from .evidence import Evidence

MAX_OP_TYPES = 10  # as many op types as the advisor lists for tuning
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


def max_ratio(ratios: np.ndarray) -> np.ndarray:
    """Largest ratio per row of a (rows, pipes) float array, ignoring NaN; NaN where all are missing or
    0."""
    if ratios.shape[1] == 0:
        return np.full(ratios.shape[0], np.nan)
    mx = np.fmax.reduce(ratios, axis=1)
    return np.where(mx > 0, mx, np.nan)  # all-zero rows: the PMU did not sample this task


def bound_headroom(max_ratio: np.ndarray | float, threshold: float) -> np.ndarray | float:
    """Share of a kernel's time saved if its busiest pipe rose to `threshold` (0 when already there)."""
    return np.clip(1.0 - np.asarray(max_ratio, dtype="float64") / threshold, 0.0, 1.0)


class NoBoundEvidence(Evidence):
    primary = "lost_ms_per_step_by_rank"
    threshold_ratio: float
    min_task_us: float
    task_type: str | None
    tasks_per_step: float
    kernel_ms_per_step: float
    pipe_ratios_time_weighted: dict[str, float]  # pipe ratio column -> its time-weighted mean
    busiest_pipe: str | None
    unbound_tasks_by_rank: dict[int, int]
    lost_ms_per_step_by_rank: dict[int, float]
    impact_method: str = ("Σ task time × (1 − busiest pipe ratio / 0.8) per step, worst rank; upper bound (time "
                          "saved if the busiest pipe reached the bound threshold)")


@register
class NoBoundOpCheck(Check):
    id = "no-bound-op"
    dimension = "compute"
    title = "Kernels bound by nothing"
    fires_when = "kernels are bound by nothing (all pipe ratios low)"
    thresholds = ("no_bound_min_us", "no_bound_ratio")
    needs = ("kernel_details", "pipe_ratios")
    vendors = ("ascend",)
    description = (
        'AI Core kernels of at least {no_bound_min_us} µs whose pipe ratios (mac, vec, scalar, the mte pipes, '
        'fixpipe) all stay at or below {no_bound_ratio}, per op type on every rank; impact = time × headroom to '
        'the {no_bound_ratio} bound.'
    )
    evidence = NoBoundEvidence
    title_template = "{op_type} is bound by no pipe (busiest {pipe} at {mx:.0%})"
    message_template = (
        "{op_type} on {ranks} in {steps}: no pipe ratio exceeds {threshold_ratio:.0%} (busiest {pipe} {mx:.0%}) "
        "over {time_ms:.2f} ms of kernel time per step on rank {rank_w}; up to {ms_w:.2f} ms per step if it became "
        "bound. Check its tiling (AOE op tuning) and input shapes / formats."
    )

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        marks = placeholders(ranks)
        thr = T.no_bound_ratio.value
        min_ns = T.no_bound_min_us.value * NS_PER_US
        # numpy columns, not a frame: on 64 ranks the pandas filters and groupbys per op type and rank cost
        # several times the query
        c = columns(
            ctx,
            "SELECT rank, step, coalesce(op_type, name) AS op_type, task_type, dur_ns, "
            f"{', '.join(PIPE_COLUMNS)} FROM ai_core_tasks WHERE rank IN ({marks}) AND dur_ns >= ?",
            [*ranks, min_ns],
        )
        steps = ctx.view.kept_steps
        rank = c["rank"].astype(np.int64)
        if rank.size == 0:
            return []
        keep = kept_mask(rank, c["step"], steps)
        mx = max_ratio(np.column_stack([c[col].astype("float64") for col in PIPE_COLUMNS]))
        # a hash factorize, then codes renumbered in sorted name order (the order of groupby(sort=True));
        # rows without an op type get -1 and belong to no group, as groupby drops a null key
        code, names = pd.factorize(c["op_type"])
        by_name = np.argsort(names.astype(object), kind="stable")
        names = names[by_name]
        code = np.append(np.argsort(by_name), -1)[code]  # -1 indexes the appended -1
        bad = np.flatnonzero(keep & (mx <= thr) & (code >= 0))
        if bad.size == 0:
            return []
        rank, mx, code = rank[bad], mx[bad], code[bad]
        dur = c["dur_ns"][bad]
        lost = dur.astype("float64") * bound_headroom(mx, thr)
        lost = np.where(np.isnan(lost), 0.0, lost)  # a pandas sum skips NaN
        # one stable sort by (op type, rank) keeps each group's rows in query order, so every sum below
        # runs over the same values in the same order as a per-group pandas sum
        order = np.lexsort((rank, code))
        bad, rank, code, dur, lost = bad[order], rank[order], code[order], dur[order], lost[order]
        cuts = np.concatenate(([0], np.flatnonzero(np.diff(code)) + 1, [code.size]))
        groups = []
        for gi in range(len(cuts) - 1):
            i, j = int(cuts[gi]), int(cuts[gi + 1])
            slices = [(rk, i + a, i + b) for rk, a, b in rank_slices(rank[i:j])]
            by_rank = {rk: float(lost[a:b].sum()) / NS_PER_MS / n_steps(steps, rk) for rk, a, b in slices}
            groups.append((names[code[i]], i, j, slices, by_rank, worst_rank(by_rank)))
        groups.sort(key=lambda x: (-(x[5][1] or 0.0), x[0]))
        if len(groups) > MAX_OP_TYPES:
            ctx.notes.append(f"no-bound-op: {len(groups) - MAX_OP_TYPES} more unbound op types are not listed "
                             f"(top {MAX_OP_TYPES} shown)")
        return [self._op_type_finding(ctx, c, bad, dur, steps, g) for g in groups[:MAX_OP_TYPES]]

    def _op_type_finding(self, ctx: CheckContext, c: dict[str, np.ndarray], bad: np.ndarray, dur: np.ndarray,
                         steps: dict[int, list[int]], group: tuple) -> Finding:
        """The finding of one op type: `group` is (op type, its rows i:j of `bad`/`dur`, its rank slices,
        lost ms per step by rank, (worst rank, its ms))."""
        thr = T.no_bound_ratio.value
        op_type_, i, j, slices, per_rank_ms, (rank_w, ms_w) = group
        wi, wj = next(((a, b) for rk, a, b in slices if rk == rank_w), (i, i))
        rows = bad[wi:wj]
        k = n_steps(steps, int(rank_w)) if rank_w is not None else 1
        time_ms = float(dur[wi:wj].sum()) / NS_PER_MS / k
        # ratio means weighted by task time: what the unit did over the kernel's time
        w = dur[wi:wj].astype("float64")
        w_sum = w.sum()
        means = {}
        for col in PIPE_COLUMNS:
            x = c[col][rows].astype("float64")
            if not np.isnan(x).all():
                xw = x * w
                means[col] = round(float(np.where(np.isnan(xw), 0.0, xw).sum() / w_sum), 4)
        top_pipe = max(means, key=lambda col: means[col]) if means else None
        mx_w = means.get(top_pipe, 0.0) if top_pipe else 0.0
        st = step_list(np.unique(c["step"][bad[i:j]]))  # distinct first: fewer values to box
        evidence = NoBoundEvidence(
            threshold_ratio=thr,
            min_task_us=T.no_bound_min_us.value,
            task_type=str(c["task_type"][rows[0]]) if rows.size else None,
            tasks_per_step=round(rows.size / k, 2),
            kernel_ms_per_step=round(time_ms, 4),
            pipe_ratios_time_weighted=means,
            busiest_pipe=top_pipe,
            unbound_tasks_by_rank={r: b - a for r, a, b in slices},
            lost_ms_per_step_by_rank={r: round(v, 4) for r, v in sorted(per_rank_ms.items())},
        )
        return self.finding(
            ctx, subject=str(op_type_), ranks=sorted(per_rank_ms), steps=st, impact_ms=ms_w, impact_rank=rank_w,
            severity="low", evidence=evidence,
            words={"op_type": str(op_type_), "pipe": _pipe(top_pipe), "mx": mx_w, "time_ms": time_ms,
                   "rank_w": rank_w, "ms_w": ms_w},
        )


def _pipe(col: str | None) -> str:
    if not col:
        return "unknown"
    return col.removesuffix("_ratio").replace("aic_", "cube ").replace("aiv_", "vector ")
