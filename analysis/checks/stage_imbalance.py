"""stage-imbalance: pipeline-parallel stages that do unequal compute; name the heavy stage and its ranks.

Stages, from what the profile holds (first source that assigns 2+ stages wins):
  * MindSpore's cluster files (`ascend_cluster_analyse_pipeline-parallel_{stages}_{ranks}_{rank}.csv`,
    metadata `cluster_analyse`): MindSpore places stage_device_num = ranks / stages consecutive ranks per
    stage, so stage = rank // (ranks / stages);
  * a pipeline process group in Kineto's `distributedInfo.pg_config` or torch_npu's `parallel_group_info`
    (a group whose name/description says pipeline / pp): a rank's stage is its position in that group.
Compute per rank and step: the per-step `computation_time` of MindSpore's pipeline CSV when present (its
device compute on the stage), else the breakdown's compute_ms. A rank's value is its median over steps
(the first step of a pipeline holds the warm-up), a stage's the median of its ranks (ms).

The heaviest stage is named when it computes >= T.stage_imbalance_pct % more than the lightest and the
gap is >= T.slow_rank_min_excess_pct % of the mean step. impact_ms = the gap: per step the lighter stages
wait about that long for it in send/receive.
"""

from __future__ import annotations

import json
from collections import defaultdict

import numpy as np

from ..models import Finding
from ..thresholds import T
from .base import Check, CheckContext, register


def stage_of_ranks(ctx: CheckContext) -> tuple[dict[int, int], int, str] | None:
    """rank -> stage (0-based), the number of stages, and where the assignment came from."""
    md = ctx.sql("SELECT rank, key, value_json FROM metadata WHERE key IN "
                 "('cluster_analyse', 'distributedInfo', 'parallel_group_info')")
    ranks = set(ctx.all_ranks)
    by_key: dict[str, list[tuple[int, object]]] = defaultdict(list)
    for rank, key, value in md.itertuples(index=False):
        try:
            by_key[key].append((int(rank), json.loads(value)))
        except (TypeError, ValueError):
            continue
    for _rank, v in by_key.get("cluster_analyse", []):
        if isinstance(v, dict) and v.get("stage_num") and v.get("rank_size"):
            per = int(v["rank_size"]) // int(v["stage_num"])
            if per > 0:
                stages = {r: r // per for r in ranks}
                return stages, int(v["stage_num"]), "MindSpore pipeline-parallel cluster files"
    stages: dict[int, int] = {}
    n_stages = 0
    for _rank, v in by_key.get("distributedInfo", []) + by_key.get("parallel_group_info", []):
        for g in _pipeline_groups(v):
            for i, r in enumerate(g):
                if r in ranks:
                    stages[r] = i
            n_stages = max(n_stages, len(g))
    if n_stages >= 2 and len(set(stages.values())) >= 2:
        return stages, n_stages, "pipeline process groups"
    return None


def _pipeline_groups(v: object) -> list[list[int]]:
    """Rank lists of pipeline groups in distributedInfo (pg_config) or torch_npu parallel_group_info."""
    groups: list[dict] = []
    if isinstance(v, dict) and isinstance(v.get("pg_config"), list):
        groups = [g for g in v["pg_config"] if isinstance(g, dict)]
    elif isinstance(v, dict):
        groups = [g for g in v.values() if isinstance(g, dict)]
    out = []
    for g in groups:
        label = f"{g.get('pg_desc', '')} {g.get('group_name', '')}".lower()
        rs = g.get("ranks", g.get("global_ranks"))
        words = label.split()
        if ("pipe" in label or (bool(words) and words[0] in ("pp", "pp_group"))) and isinstance(rs, list):
            out.append([int(r) for r in rs])
    return out


def stage_compute(ctx: CheckContext, stages: dict[int, int]) -> tuple[dict[int, float], str]:
    """rank -> median compute ms per step, and its source."""
    ph = ctx.sql("SELECT rank, median(dur_ns) / 1e6 AS ms FROM step_phases WHERE phase = 'computation_time' "
                 "GROUP BY rank")
    if not ph.empty:
        return {int(r): float(m) for r, m in ph.itertuples(index=False) if r in stages}, "computation_time"
    per: dict[int, list[float]] = defaultdict(list)
    for row in ctx.breakdown:
        if row.step is not None and row.compute_ms is not None and row.rank in stages:
            per[row.rank].append(row.compute_ms)
    return {r: float(np.median(v)) for r, v in per.items() if v}, "compute_ms"


@register
class StageImbalanceCheck(Check):
    id = "stage-imbalance"
    dimension = "compute"
    title = "Pipeline stage imbalance"
    fires_when = (
        "pipeline-parallel stages do unequal work: one stage's ranks compute clearly longer than the "
        "other stages' and the rest wait for them; `ranks` = that stage's ranks, `subject` = the stage "
        '(e.g. `"stage 1 of 2"`)'
    )
    thresholds = ("slow_rank_min_excess_pct", "stage_imbalance_pct")
    frameworks = ("pytorch", "mindspore")
    needs = ("steps",)
    vendors = ("ascend", "cuda", "rocm")
    description = ("Groups ranks into pipeline stages (MindSpore cluster files, pipeline process groups) and "
                   "names the stage whose compute per step clearly exceeds the lightest stage's.")

    def run(self, ctx: CheckContext) -> list[Finding]:
        st = stage_of_ranks(ctx)
        if st is None or len(ctx.all_ranks) < 2:
            return []
        stages, n, how = st
        per_rank, src = stage_compute(ctx, stages)
        members: dict[int, list[int]] = defaultdict(list)
        for r in sorted(per_rank):
            members[stages[r]].append(r)
        if len(members) < 2:
            return []
        comp = {s: float(np.median([per_rank[r] for r in rs])) for s, rs in members.items()}
        heavy = max(comp, key=lambda s: comp[s])
        light = min(comp, key=lambda s: comp[s])
        gap = comp[heavy] - comp[light]
        step = ctx.mean_step_ms() or 0.0
        if comp[light] <= 0 or 100.0 * gap / comp[light] < T.stage_imbalance_pct.value:
            return []
        if step and 100.0 * gap / step < T.slow_rank_min_excess_pct.value:
            return []
        last = heavy == n - 1
        where = ("it is the last stage, which also holds the output layer and the loss: give it fewer layers"
                 if last else ("it is the first stage, which also holds the embedding: give it fewer layers"
                               if heavy == 0 else "move layers from it to the lighter stages"))
        ranks = members[heavy]
        per_stage = [{"stage": s + 1, "ranks": members[s], "compute_ms": round(comp[s], 3)} for s in sorted(comp)]
        return [self.finding(
            ctx, title=(f"pipeline stage {heavy + 1} of {n} computes {comp[heavy]:.1f} ms per step against "
                        f"{comp[light]:.1f} ms on stage {light + 1} (+{gap:.1f} ms)"),
            subject=f"stage {heavy + 1} of {n}", ranks=ranks, impact_ms=gap,
            evidence={"stages": per_stage, "heavy_stage": heavy + 1, "lightest_stage": light + 1,
                      "gap_ms": round(gap, 3), "gap_pct": round(100.0 * gap / comp[light], 1),
                      "stage_source": how, "compute_source": src, "stage_count": n,
                      "threshold_pct": T.stage_imbalance_pct.value,
                      "impact_method": "heavy stage's compute per step minus the lightest stage's"},
            message=(f"Pipeline stage {heavy + 1} of {n} (ranks {', '.join(map(str, ranks))}) computes "
                     f"{comp[heavy]:.1f} ms per step, the lightest stage {light + 1} {comp[light]:.1f} ms: the "
                     f"other stages wait about {gap:.1f} ms per step for it in send/receive. Rebalance the "
                     f"layers per stage: {where}."))]
