"""freq-throttle: the AI Core ran its kernels below the rated frequency, on any rank.

Rule (msprof-analyze 26.2.0 freq_analysis): the trace's `AI Core Freq` counter (MHz, a step
function: each sample holds until the next) against the rated frequency (info.json `aic_frequency`); an
op name whose mean relative drop (rated − f) / rated over its executions reaches T.freq_drop (5 %) is an
issue. The advisor runs this on one selected rank per cluster and so misses a throttled rank that is not
the slowest (rank 1 of the sample); here every rank is checked and named.

Algorithm, per rank, kept steps only:
1. the frequency a kernel ran at = the time-weighted mean of the counter over [start, end) of the kernel
   (the advisor samples it at the start); kernels before the first sample are unknown and skipped;
   idle down-clocking between kernels therefore never counts;
2. all AI Core task types count (AI_CORE, AI_VECTOR_CORE, MIX_AIC, MIX_AIV): vector cores share the clock;
3. a kernel is throttled when its drop (rated − f) / rated >= 5 % (the advisor averages per op name over
   the whole profile, which smears a one-step throttle over all steps);
4. impact_ms = Σ over the throttled kernels of time × drop, per step: the time the same work takes at the
   rated clock is time × f / rated. Worst rank.

Severity: the advisor's fixed HIGH. Subject: `AI Core frequency`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..models import Finding
from ..thresholds import T
from ..units import NS_PER_MS
from ._common import (
    in_kept_steps,
    n_steps,
    placeholders,
    ranks_and_steps,
    step_list,
    steps_text,
    worst_rank,
)
from .base import Check, CheckContext, register
from .evidence import Entry, Evidence, Record

SUBJECT = "AI Core frequency"


def mean_freq(
    samples_ts: np.ndarray, samples_mhz: np.ndarray, start: np.ndarray, end: np.ndarray
) -> np.ndarray:
    """Time-weighted mean of a step-function counter over each [start, end); NaN before the first sample.

    With knots t_i and values f_i (f_i holds on [t_i, t_{i+1})), F(t) = ∫_{t_0}^{t} f is piecewise linear;
    the mean over [a, b) is (F(b) − F(a)) / (b − a), or f(a) when the interval is empty.
    """
    order = np.argsort(samples_ts, kind="stable")
    t = samples_ts[order].astype("float64")
    f = samples_mhz[order].astype("float64")
    cum = np.concatenate([[0.0], np.cumsum(f[:-1] * np.diff(t))])

    def integral(x: np.ndarray) -> np.ndarray:
        k = np.clip(np.searchsorted(t, x, side="right") - 1, 0, len(t) - 1)
        return cum[k] + f[k] * (x - t[k])

    a = start.astype("float64")
    b = end.astype("float64")
    span = b - a
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(
            span > 0,
            (integral(b) - integral(a)) / np.where(span > 0, span, 1.0),
            f[np.clip(np.searchsorted(t, a, side="right") - 1, 0, len(t) - 1)],
        )
    return np.where(a < t[0], np.nan, mean)


class ThrottledOp(Record):
    name: str
    drop: float
    ms: float


class ThrottledRank(Entry):
    weighs_by = "lost_ms_per_step"
    rated_mhz: float
    mean_mhz_during_kernels: float
    min_mhz: float
    mean_drop: float
    throttled_op_names: int
    throttled_tasks: int
    kernel_ms_per_step: float
    lost_ms_per_step: float
    steps: list[int]
    by_step: dict[str, float]  # step -> lost ms in it
    top_ops: list[ThrottledOp]


class FreqThrottleEvidence(Evidence):
    threshold_drop: float
    per_rank: dict[int, ThrottledRank]
    ranks_checked: list[int]
    impact_method: str = "Σ throttled kernel time × (rated − f) / rated per step, worst rank"


@register
class FreqThrottleCheck(Check):
    id = "freq-throttle"
    dimension = "compute"
    title = "AI core frequency throttling"
    fires_when = "the AI core frequency dropped below its rated value"
    thresholds = ("freq_drop",)
    needs = ("freq", "rated_freq")
    vendors = ("ascend",)
    description = (
        'AI Core kernels that ran, on a time-weighted average, at least {freq_drop:.0%} below the rated AI Core '
        'frequency (info.json aic_frequency), on every rank; impact = kernel time × drop.'
    )
    evidence = FreqThrottleEvidence
    title_template = "AI Core throttled to {worst.mean_mhz_during_kernels:g} MHz of {worst.rated_mhz:g} MHz on {ranks}"
    message_template = (
        "The AI Core ran below its rated {worst.rated_mhz:g} MHz: {parts} (threshold {threshold_drop:.0%} drop). "
        "Rank {worst_rank} loses about {ms:.2f} ms per step; check its temperature, power cap and npu-smi "
        "frequency settings."
    )

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        rated_by_rank = {
            int(r): float(v)
            for r, v in ctx.profile.rows("SELECT rank, rated_freq_mhz FROM ranks WHERE rated_freq_mhz > 0")
        }
        checked_ranks = [r for r in ranks if rated_by_rank.get(r)]
        if not checked_ranks:
            return []
        per_rank, lost_ms = _throttled_ranks(ctx, checked_ranks, rated_by_rank)
        if not per_rank:
            return []
        return [self._finding(ctx, per_rank, lost_ms, sorted(set(ranks) & set(rated_by_rank)))]

    def _finding(self, ctx: CheckContext, per_rank: dict[int, ThrottledRank], lost_ms: dict[int, float],
                 checked: list[int]) -> Finding:
        rank_w, ms_w = worst_rank(lost_ms)
        parts = "; ".join(
            f"rank {r} at {v.mean_mhz_during_kernels:g} MHz (−{v.mean_drop:.1%}) in {steps_text(v.steps)}"
            for r, v in sorted(per_rank.items())
        )
        return self.finding(
            ctx, subject=SUBJECT, ranks=sorted(per_rank), steps=ranks_and_steps(per_rank)[1], impact_ms=ms_w,
            impact_rank=rank_w, severity="high",
            evidence=FreqThrottleEvidence(threshold_drop=T.freq_drop.value, per_rank=dict(sorted(per_rank.items())),
                                          ranks_checked=checked),
            words={"parts": parts, "ms": ms_w},
        )


def _throttled_ranks(ctx: CheckContext, ranks: list[int], rated_by_rank: dict[int, float]
                     ) -> tuple[dict[int, ThrottledRank], dict[int, float]]:
    """(rank -> evidence, rank -> lost ms per step) for the ranks whose AI Core tasks ran >= T.freq_drop
    below the rated frequency. One query per table for all ranks, split here by a stable sort on rank:
    most ranks turn out not throttled, and a query per rank costs milliseconds each on many ranks."""
    thr = T.freq_drop.value
    steps = ctx.view.kept_steps
    marks = placeholders(ranks)
    fs = ctx.profile.arrays(
        f"SELECT rank, ts_ns, freq_mhz FROM freq_samples WHERE rank IN ({marks}) ORDER BY rank, ts_ns", ranks)
    fs_rank = np.asarray(fs["rank"], dtype="int64")
    fs_ts = np.asarray(fs["ts_ns"], dtype="int64")
    fs_mhz = np.ma.filled(np.ma.asarray(fs["freq_mhz"], dtype="float64"), np.nan)
    # no ORDER BY: each rank's rows keep their table order, which the stable sort below preserves
    all_ops = in_kept_steps(
        ctx.sql(f"SELECT rank, step, name, start_ns, dur_ns FROM ai_core_tasks WHERE rank IN ({marks})", ranks),
        steps,
    )
    op_order = np.argsort(all_ops["rank"].to_numpy(dtype="int64"), kind="stable")
    op_rank = all_ops["rank"].to_numpy(dtype="int64")[op_order]
    op_start = all_ops["start_ns"].to_numpy(dtype="int64")[op_order]
    op_end = op_start + all_ops["dur_ns"].to_numpy(dtype="int64")[op_order]
    per_rank: dict[int, ThrottledRank] = {}
    lost_ms: dict[int, float] = {}
    for rank in ranks:
        rated = rated_by_rank[rank]
        f_lo, f_hi = np.searchsorted(fs_rank, [rank, rank + 1])
        o_lo, o_hi = np.searchsorted(op_rank, [rank, rank + 1])
        if f_hi == f_lo or o_hi == o_lo:
            continue
        mhz = mean_freq(fs_ts[f_lo:f_hi], fs_mhz[f_lo:f_hi], op_start[o_lo:o_hi], op_end[o_lo:o_hi])
        with np.errstate(invalid="ignore"):
            # per task, so a rank throttled in one step only is named with that step only
            drop = np.maximum((rated - mhz) / rated, 0.0)
            hit_mask = drop >= thr
        if not hit_mask.any():
            continue
        # pandas only for the few throttled ranks, on the rank's rows in their table order
        ops = all_ops.iloc[op_order[o_lo:o_hi]].reset_index(drop=True)
        ops["mhz"] = mhz
        ops["drop"] = drop
        lost_ms[rank], per_rank[rank] = _rank_evidence(ops[hit_mask], rated, n_steps(steps, rank))
    return per_rank, lost_ms


def _rank_evidence(hit: pd.DataFrame, rated: float, k: int) -> tuple[float, ThrottledRank]:
    """(lost ms per step, evidence) of one rank's throttled tasks `hit` (columns mhz, drop) over k steps."""
    hw = hit["dur_ns"].astype("float64")
    by_name = hit.assign(wd=hit["drop"] * hw).groupby("name").agg(wd=("wd", "sum"), w=("dur_ns", "sum"))
    by_name["drop"] = by_name["wd"] / by_name["w"]
    lost = float((hw * hit["drop"]).sum()) / NS_PER_MS / k
    return lost, ThrottledRank(
        rated_mhz=rated,
        mean_mhz_during_kernels=round(float((hit["mhz"] * hw).sum() / hw.sum()), 1),
        min_mhz=round(float(hit["mhz"].min()), 1),
        mean_drop=round(float((hit["drop"] * hw).sum() / hw.sum()), 4),
        throttled_op_names=len(by_name),
        throttled_tasks=len(hit),
        kernel_ms_per_step=round(float(hw.sum()) / NS_PER_MS / k, 4),
        lost_ms_per_step=round(lost, 4),
        steps=step_list(hit["step"]),
        by_step={
            str(int(s)): round(float((g["dur_ns"] * g["drop"]).sum()) / NS_PER_MS, 4)
            for s, g in hit.groupby("step")
        },
        top_ops=[
            ThrottledOp(name=str(n), drop=round(float(r["drop"]), 4), ms=round(float(r["w"]) / NS_PER_MS, 4))
            for n, r in by_name.sort_values("w", ascending=False).head(5).iterrows()
        ],
    )
