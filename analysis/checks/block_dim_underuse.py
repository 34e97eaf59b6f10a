"""block-dim-underuse: kernels whose block dim leaves AI cores idle, per op type, on every rank.

Rule (msprof-analyze 26.2.0 block_dim_analysis, rules doc §5.2): an AI Core task is an issue when its block
dim (kernel_details `Block Dim`, or `Block Num` in newer torch_npu: the reader maps both) is not a multiple of
the core count of the device (info.json `ai_core_num` / `aiv_num`). A block dim that is not a multiple
leaves cores idle in the last wave: 20 blocks on 24 cores use 20/24 of the device for the whole kernel.

Core count per task type: AI_CORE and MIX_AIC tasks count cube cores (`ai_core_num`), AI_VECTOR_CORE and
MIX_AIV tasks count vector cores (`aiv_num`). A mixed task is also fine when its mix block dim is a multiple
of the other core kind. (The advisor compares MIX_AIC with `aiv_num`, which flags a flash attention kernel
that uses all 24 cube cores; here a MIX_AIC block dim counts cube cores.)

Algorithm, per rank (every rank, unlike the advisor's one selected rank), kept steps only:
1. unused share of a task = 1 − b / (ceil(b / c) · c) for block dim b on c cores (idle share of the waves);
2. per op type: Σ task time × unused share per step = impact_ms, an upper bound (it assumes the kernel
   would scale perfectly to the idle cores);
3. one finding per op type (subject), worst rank's impact, the top 10 op types by impact (the advisor lists
   its top 10); the rest are counted in a context note.

Severity: the advisor's fixed LOW.
"""

from __future__ import annotations

import math

import pandas as pd

from ..models import Finding
from ._common import (
    NS_PER_MS,
    in_kept_steps,
    kept_steps,
    n_steps,
    ranks_text,
    step_list,
    steps_text,
    worst_op_types,
)
from .base import Check, CheckContext, register

MAX_OP_TYPES = 10  # the advisor reports the top 10 op types ("Top-10 operator of task duration")
_CUBE_TYPES = ("AI_CORE", "MIX_AIC")
_VECTOR_TYPES = ("AI_VECTOR_CORE", "MIX_AIV")


def unused_share(block_dim: int, cores: int) -> float:
    """Idle share of the cores over the waves a kernel of `block_dim` blocks needs on `cores` cores."""
    if block_dim <= 0 or cores <= 0:
        return 0.0
    waves = math.ceil(block_dim / cores)
    return 1.0 - block_dim / (waves * cores)


def _cores(task_type: str, ai_core: int | None, aiv: int | None) -> tuple[int | None, int | None]:
    """(cores the block dim counts, cores the mix block dim counts) for a task type."""
    if task_type in _CUBE_TYPES:
        return ai_core, aiv
    return (aiv or ai_core), ai_core


@register
class BlockDimCheck(Check):
    id = "block-dim-underuse"
    title = "Kernels use too few cores"
    needs = ("kernel_details", "block_dim", "core_counts")
    vendors = ("ascend",)
    description = (
        "AI Core kernels whose block dim is not a multiple of the device's AI core / vector core count "
        "(info.json), per op type on every rank; impact = kernel time × idle core share."
    )

    def run(self, ctx: CheckContext) -> list[Finding]:
        ranks = self.applicable_ranks(ctx)
        if not ranks:
            return []
        marks = ",".join("?" * len(ranks))
        info = ctx.sql(f"SELECT rank, ai_core_num, aiv_num FROM ranks WHERE rank IN ({marks})", ranks)
        cores = {int(r.rank): (_int(r.ai_core_num), _int(r.aiv_num)) for r in info.itertuples(index=False)}
        types = ",".join(f"'{t}'" for t in (*_CUBE_TYPES, *_VECTOR_TYPES))
        ops = ctx.sql(
            "SELECT rank, step, coalesce(op_type, name) AS op_type, task_type, block_dim, mix_block_dim, "
            "count(*) AS n, sum(dur_ns) AS dur_ns FROM device_ops "
            f"WHERE rank IN ({marks}) AND task_type IN ({types}) AND block_dim > 0 GROUP BY ALL",
            ranks,
        )
        steps = kept_steps(ctx)
        ops = in_kept_steps(ops, steps)
        if ops.empty:
            return []
        rows = []
        for r in ops.itertuples(index=False):
            ai_core, aiv = cores.get(int(r.rank), (None, None))
            c, c_mix = _cores(str(r.task_type), ai_core, aiv)
            if not c:
                continue  # core count unknown for this rank: no guess
            b = int(r.block_dim)
            if b % c == 0:
                continue
            mix = _int(r.mix_block_dim)
            if str(r.task_type).startswith("MIX") and mix and c_mix and mix % c_mix == 0:
                continue
            share = unused_share(b, c)
            rows.append(
                {
                    "rank": int(r.rank),
                    "step": r.step,
                    "op_type": str(r.op_type),
                    "task_type": str(r.task_type),
                    "block_dim": b,
                    "cores": c,
                    "n": int(r.n),
                    "dur_ns": float(r.dur_ns),
                    "lost_ns": float(r.dur_ns) * share,
                    "share": share,
                }
            )
        if not rows:
            return []
        bad = pd.DataFrame(rows)
        results = worst_op_types(
            ctx, bad, steps, MAX_OP_TYPES,
            "block-dim-underuse: {more} more op types with a block dim that is not a multiple of the core "
            "count are not listed (top {limit} shown)")
        out: list[Finding] = []
        for op_type, g, per_rank_ms, (rank_w, ms_w) in results:
            gw = g[g["rank"] == rank_w]
            k = n_steps(steps, int(rank_w)) if rank_w is not None else 1
            dims = (
                gw.groupby(["task_type", "block_dim", "cores"])["n"]
                .sum()
                .reset_index()
                .sort_values("n", ascending=False)
            )
            top = dims.iloc[0]
            used = f"{int(top.block_dim)}/{int(top.cores)}"
            kind = "AI cores" if top.task_type in _CUBE_TYPES else "vector cores"
            share = unused_share(int(top.block_dim), int(top.cores))
            rk = sorted(per_rank_ms)
            st = step_list(g["step"])
            time_ms = float(gw["dur_ns"].sum()) / NS_PER_MS / k
            out.append(
                self.finding(
                    ctx,
                    title=f"{op_type} uses {used} {kind} ({share:.0%} idle)",
                    subject=str(op_type),
                    ranks=rk,
                    steps=st,
                    impact_ms=ms_w,
                    impact_rank=rank_w,
                    severity="low",
                    evidence={
                        "rule": "block_dim % core_count != 0 (msprof-analyze block_dim_analysis)",
                        "task_type": str(top.task_type),
                        "core_count": int(top.cores),
                        "block_dims": [
                            {
                                "task_type": str(d.task_type),
                                "block_dim": int(d.block_dim),
                                "cores": int(d.cores),
                                "tasks": int(d.n),
                                "idle_share": round(unused_share(int(d.block_dim), int(d.cores)), 4),
                            }
                            for d in dims.itertuples(index=False)
                        ],
                        "tasks_per_step": round(float(gw["n"].sum()) / k, 2),
                        "kernel_ms_per_step": round(time_ms, 4),
                        "lost_ms_per_step_by_rank": {
                            str(r): round(v, 4) for r, v in sorted(per_rank_ms.items())
                        },
                        "impact_method": "Σ kernel time × (1 − block_dim / (waves × cores)) per step, "
                        "worst rank; upper bound (assumes the kernel scales to the idle cores)",
                    },
                    message=(
                        f"{op_type} runs with block dim {int(top.block_dim)} on {int(top.cores)} {kind} on "
                        f"{ranks_text(rk)} in {steps_text(st)}: {share:.0%} of the cores idle during "
                        f"{time_ms:.2f} ms of kernel time per step on rank {rank_w} (up to {ms_w:.2f} ms "
                        "per step). Tune the tiling (AOE op tuning) so the block dim is a multiple of the "
                        "core count."
                    ),
                )
            )
        return out


def _int(v: object) -> int | None:
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if f != f else int(f)
