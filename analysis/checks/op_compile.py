"""op-compile: operators are compiled on the host during training steps (Ascend), on every rank.

Rule (msprof-analyze 26.2.0 timeline_op_dispatch, MAX_OP_COMPILE_NUM): a step with at least
T.op_compile_count (20) `AscendCL@aclopCompileAndExecute` calls compiles operators online instead of
running pre-built binaries. The advisor counts over the whole profile; here the count is per step of every
rank, so a step that recompiles (a new shape) is named.

impact_ms = Σ aclopCompileAndExecute time per step (mean over the rank's kept steps), the worst rank: the
host spends that time compiling and dispatching instead of launching. Severity: the advisor's time-ratio rule
(Σ compile time / step time: >= 5 % high, >= 3 % medium), i.e. the impact rule of `Check.finding`.
The usual fix is `torch_npu.npu.set_compile_mode(jit_compile=False)` (binary kernels) with
`torch_npu.npu.config.allow_internal_format = False`.
"""

from __future__ import annotations

import numpy as np

from ..models import Finding
from ..thresholds import T
from ..units import NS_PER_MS, NS_PER_US
from ._common import (
    STEP_BITS,
    by_rank,
    columns,
    fmt_ms,
    in_steps_mask,
    placeholders,
    ranks_and_steps,
    window_counts,
    worst_share,
)
from .base import Check, CheckContext, register
from .evidence import Entry, Evidence, Record

API = "aclopCompileAndExecute"


class CompileStep(Record):
    calls: int
    ms: float


class CompileRank(Entry):
    weighs_by = "compile_ms_per_step"
    steps: list[int]
    calls_per_affected_step: float
    steps_analysed: int
    max_calls_in_a_step: int
    compile_ms_per_step: float
    mean_call_us: float
    by_step: dict[str, CompileStep]   # every step with a call, fired or not


class OpCompileEvidence(Evidence):
    threshold_calls_per_step: int | float
    per_rank: dict[int, CompileRank]
    rule: str = "msprof-analyze timeline_op_dispatch (MAX_OP_COMPILE_NUM), time-ratio priority"
    impact_method: str = f"Σ {API} time per step, mean over the rank's kept steps, worst rank"


@register
class OpCompileCheck(Check):
    id = "op-compile"
    dimension = "free"
    title = "Operator compilation inside steps"
    fires_when = "operators are compiled during training steps"
    thresholds = ("op_compile_count",)
    needs = ("cann_api",)
    vendors = ("ascend",)
    description = (
        'Counts AscendCL@aclopCompileAndExecute per step on every rank; >= {op_compile_count} in a step means '
        'online operator compilation (msprof-analyze MAX_OP_COMPILE_NUM). Impact is their host time per step.'
    )
    evidence = OpCompileEvidence
    title_template = "Operators compiled during steps ({worst.calls_per_affected_step:g} {api} per step)"
    message_template = (
        "On {ranks} ({steps}) the host calls {api} {worst.calls_per_affected_step:g} times per step (>= "
        "{op_compile_count:g}) on rank {worst_rank}, {ms} ms per step of online operator compilation; set "
        "jit_compile=False so binary kernels are used."
    )

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        windows = ctx.view.step_windows(ranks)
        marks = placeholders(ranks)
        ev = columns(ctx, f"SELECT rank, step, dur_ns FROM host_ops WHERE rank IN ({marks}) AND category = 'cann' "
                          "AND (name = ? OR name = ?)", [*ranks, f"AscendCL@{API}", API])
        if ev["rank"].size == 0:
            return []
        keep = in_steps_mask(ev["rank"], ev["step"], windows)
        if not keep.any():
            return []
        rank = ev["rank"][keep].astype(np.int64)
        step = ev["step"][keep].astype(np.int64)
        dur = ev["dur_ns"][keep].astype(np.int64)
        thr = T.op_compile_count.value
        # All ranks' (rank, step) groups at once, not a pandas groupby per rank. dur_ns is a
        # NOT NULL integer, so counts are row counts and integer sums do not depend on the row order.
        code = (rank << STEP_BITS) + step
        order = np.argsort(code, kind="stable")
        code_s = code[order]
        first = np.flatnonzero(np.r_[True, code_s[1:] != code_s[:-1]])
        g_rank = rank[order][first]
        g_step = step[order][first]
        g_count = np.diff(np.r_[first, code_s.size])
        g_sum = np.add.reduceat(dur[order], first)
        fired_ranks = np.unique(g_rank[g_count >= thr])
        if fired_ranks.size == 0:
            return []
        n_windows = window_counts(windows)
        # each rank's rows in their query order, for the float mean (pandas sums them in that order)
        rank_order, slices = by_rank(rank)
        rows_of = {r: (i, j) for r, i, j in slices}
        per_rank: dict[int, CompileRank] = {}
        for r in fired_ranks.tolist():
            gi, gj = np.searchsorted(g_rank, [r, r + 1])
            cnt, tot, stp = g_count[gi:gj], g_sum[gi:gj], g_step[gi:gj]
            hit = cnt >= thr
            i, j = rows_of[r]
            d = dur[rank_order[i:j]]
            n = max(n_windows.get(r, 0), 1)
            per_rank[r] = CompileRank(
                steps=stp[hit].tolist(),
                calls_per_affected_step=round(float(cnt[hit].sum(dtype=np.float64) / int(hit.sum())), 2),
                steps_analysed=n,
                max_calls_in_a_step=int(cnt.max()),
                compile_ms_per_step=round(float(int(d.sum())) / NS_PER_MS / n, 4),
                mean_call_us=round(float(d.sum(dtype=np.float64) / d.size) / NS_PER_US, 3),
                by_step={str(s): CompileStep(calls=c, ms=round(float(t) / NS_PER_MS, 4))
                         for s, c, t in zip(stp.tolist(), cnt.tolist(), tot.tolist(), strict=True)},
            )
        if not per_rank:
            return []
        rank_w, ms_w = worst_share(ctx, {r: v.compile_ms_per_step for r, v in per_rank.items()})
        rk, steps_seen = ranks_and_steps(per_rank)
        return [self.finding(
            ctx, subject=f"AscendCL@{API}", ranks=rk, steps=steps_seen, impact_ms=ms_w, impact_rank=rank_w,
            evidence=OpCompileEvidence(threshold_calls_per_step=thr, per_rank=per_rank),
            words={"api": API, "ms": fmt_ms(ms_w or 0)})]
