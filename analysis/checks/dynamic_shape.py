"""dynamic-shape: every operator of a step was compiled for dynamic shapes, per rank and step.

Rule (msprof-analyze 26.2.0 dynamic_shape_analysis): kernel_details `OP State` (CANN >= 8.0)
says `static` or `dynamic` per task; the issue is that *every* op is non-static, which means the whole
graph runs in dynamic-shape mode (online compile, host-side tiling) instead of static kernels. A profile
with some static ops (e.g. the sample, where Cast is static) is not in that mode and does not fire.

Unlike the advisor, a missing `OP State` column is *not* "all dynamic": the reader
sets the `op_state` capability only when the column exists, and without it this check is not applicable.
Cells other than static / dynamic (N/A for HCCL or AI CPU rows) are unknown and ignored. Every rank and
every step is judged on its own and named.

impact_ms is not estimated: the cost of dynamic shapes is host-side (op compile / tiling, visible through
op-compile and host-bound), not device time that could be measured here. Severity is the advisor's fixed
LOW.

The per (rank, step) totals come from one query for all ranks, reduced with numpy over the rows sorted by
rank and step, not a pandas groupby per rank and step. pandas is used only for the op types of the ranks
that fire.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..models import Finding
from ._common import columns, kept_mask, placeholders
from .base import Check, CheckContext, register
from .evidence import Evidence, Record


class OpStateCounts(Record):
    dynamic: int
    static: int


class DynamicShapeEvidence(Evidence):
    primary = None
    rule: str = "every op with a known OP State is dynamic (msprof-analyze dynamic_shape_analysis)"
    ops_by_rank_step: dict[str, OpStateCounts]  # "rank:step" (step "None" when unknown) -> its task counts
    ranks_checked: list[int]
    top_dynamic_op_types: dict[str, int]  # op type -> dynamic tasks
    impact_method: str = "not estimated: the cost is host-side compile / tiling"


@register
class DynamicShapeCheck(Check):
    id = "dynamic-shape"
    dimension = "compute"
    title = "Dynamic-shape operators"
    fires_when = "operators are compiled for dynamic shapes"
    frameworks = ("pytorch", "mindspore")
    needs = ("kernel_details", "op_state")
    vendors = ("ascend",)
    description = (
        "Steps in which every operator with a known OP State is `dynamic` (the advisor's rule), per "
        "rank and step; not applicable when the OP State column is missing."
    )
    evidence = DynamicShapeEvidence
    title_template = "all operators are dynamic-shape on {ranks}"
    message_template = (
        "Every operator with a recorded OP State is dynamic on {ranks} in {steps} ({tasks} tasks, none static): "
        "the model runs in dynamic-shape mode. torch_npu.npu.set_compile_mode(jit_compile=False) with "
        "torch_npu.npu.config.allow_internal_format=False uses pre-built binary kernels instead."
    )

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        marks = placeholders(ranks)
        a = columns(
            ctx,
            "SELECT rank, step, lower(trim(op_state)) AS state, coalesce(op_type, name) AS op_type, "
            f"count(*) AS n FROM device_ops WHERE rank IN ({marks}) "
            "AND lower(trim(op_state)) IN ('static', 'dynamic') "
            "GROUP BY ALL",
            ranks,
        )
        rank = a["rank"].astype(np.int64)
        if rank.size == 0:
            return []
        keep = kept_mask(rank, a["step"], ctx.view.kept_steps)
        rank = rank[keep]
        if rank.size == 0:
            return []
        step = a["step"][keep].astype("float64")   # NaN: no step recorded
        state, op_type, n = a["state"][keep], a["op_type"][keep], a["n"][keep].astype(np.int64)
        is_dyn = state == "dynamic"
        is_static = state == "static"

        # (rank, step) groups in the order a sorted groupby gives them: ranks ascending, steps ascending,
        # the unknown step (NaN) last
        order = np.lexsort((step, rank))
        r, s = rank[order], step[order]
        first = np.ones(r.size, dtype=bool)
        nan = np.isnan(s)
        first[1:] = (r[1:] != r[:-1]) | ((s[1:] != s[:-1]) & ~(nan[1:] & nan[:-1]))
        starts = np.flatnonzero(first)
        dynamic = np.add.reduceat(np.where(is_dyn[order], n[order], 0), starts)
        static = np.add.reduceat(np.where(is_static[order], n[order], 0), starts)

        hit: dict[int, list[int | None]] = {}
        counts: dict[str, OpStateCounts] = {}
        for g in np.flatnonzero((dynamic > 0) & (static == 0)).tolist():
            i = starts[g]
            st = None if nan[i] else int(s[i])
            hit.setdefault(int(r[i]), []).append(st)
            counts[f"{int(r[i])}:{st}"] = OpStateCounts(dynamic=int(dynamic[g]), static=int(static[g]))
        if not hit:
            return []
        rk = sorted(hit)
        steps = sorted({s for ss in hit.values() for s in ss if s is not None})
        sel = np.isin(rank, rk) & is_dyn
        dyn = pd.DataFrame({"op_type": pd.array(op_type[sel], dtype="str"), "n": n[sel]})
        top_types = dyn.groupby("op_type")["n"].sum().sort_values(ascending=False).head(10)
        checked = [int(x) for x in np.unique(rank)]
        return [
            self.finding(
                ctx, subject="dynamic shape", ranks=rk, steps=steps, impact_ms=None, severity="low",
                evidence=DynamicShapeEvidence(
                    ops_by_rank_step=counts, ranks_checked=checked,
                    top_dynamic_op_types={str(k): int(v) for k, v in top_types.items()},
                ),
                words={"tasks": sum(c.dynamic for c in counts.values())},
            )
        ]
