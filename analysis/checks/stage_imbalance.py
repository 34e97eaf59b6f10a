"""stage-imbalance: pipeline-parallel stages that do unequal compute; name the heavy stage and its ranks.

Stages: `metrics.stages.stage_of_ranks`. Compute per rank and step: the per-step `computation_time` of MindSpore's
pipeline CSV when present (its device compute on the stage), else the breakdown's compute_ms, else (a profile
with no device: CPU training) the replay's work per rank (compute before each collective and the tail). A
rank's value is its median over steps (the first step of a pipeline holds the warm-up), a stage's the median
of its ranks (ms).

The heaviest stage is named when it computes >= T.stage_imbalance_pct % more than the lightest, its excess
per step stands out of the step-to-step noise where the replay gives per-step work (`noise.significant`), and
the impact is >= T.slow_rank_min_excess_pct % of the mean step. impact_ms: where every step replays, the step
time saved with the stage doing the median work of the others (`replay.whatif.balanced`); else the gap (per
step the lighter stages wait about that long for it in send/receive).
Without known stages, ranks of equal step time whose compute splits into two groups are named as a group
(`split_by_compute`): half the ranks slow is what a median-based slow-rank test cannot see.
"""

from __future__ import annotations

from collections import defaultdict
from typing import ClassVar

import numpy as np

from ..metrics.stages import stage_of_ranks
from ..models import Finding
from ..replay.noise import significant
from ..replay.whatif import stage_apart
from ..text import span_text
from ..thresholds import T
from ._replay_stages import stage_replay
from .base import Check, CheckContext, register
from .evidence import Evidence, Record


class StageCompute(Record):
    stage: int            # 1-based
    ranks: list[int]
    compute_ms: float     # the median of its ranks' compute per step


class StageImbalanceEvidence(Evidence):
    """A heavy pipeline stage (`stages` ... `stage_count`), or without known stages the heavy and light rank
    groups (`heavy_ranks` ... `step_ms`)."""

    primary = "compute_ms"
    stages: list[StageCompute] | None = None
    heavy_stage: int | None = None
    lightest_stage: int | None = None
    heavy_ranks: list[int] | None = None
    light_ranks: list[int] | None = None
    compute_ms: dict[int, float] | None = None   # rank -> median compute ms per step (rank groups)
    gap_ms: float
    gap_pct: float | None = None
    step_ms: float | None = None
    stage_source: str | None   # None: no stage is known (rank groups)
    compute_source: str | None = None
    stage_count: int | None = None
    threshold_pct: float
    replay_error_pct: float | None = None


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
        '(e.g. `"stage 1 of 2"`); without known stages, ranks that split into a heavy and a light group at '
        'equal step time (`subject` = `"rank group"`)'
    )
    thresholds = ("slow_rank_min_excess_pct", "stage_imbalance_pct", "stage_equal_step_pct")
    frameworks = ("pytorch", "mindspore")
    needs = ("steps",)
    vendors = ("ascend", "cuda", "rocm", "cpu")
    description = ("Groups ranks into pipeline stages (MindSpore cluster files, pipeline process groups, send/recv "
                   "partners) and names the stage whose compute per step exceeds the lightest stage's by "
                   "{stage_imbalance_pct}% or more with its ranks apart from the light stage's (its lower quartile "
                   "above their upper quartile by as much: extra work on some of a stage's ranks is theirs, not the "
                   "stage's layers, and slow-rank judges them); where the replay holds, the "
                   "impact is the step time saved with that stage balanced.")
    evidence = StageImbalanceEvidence
    # a heavy stage, and two groups of ranks where no stage is known (`_unstaged`: `heavy` / `light` their ranks,
    # `step` their common step time)
    templates: ClassVar[dict[str, tuple[str, str]]] = {
        "stage": (
            "pipeline stage {heavy_stage} of {stage_count} computes {heavy_ms:.1f} ms per step against "
            "{light_ms:.1f} ms on stage {lightest_stage} (+{gap:.1f} ms)",
            "Pipeline stage {heavy_stage} of {stage_count} (ranks {stage_ranks}) computes {heavy_ms:.1f} ms per step, "
            "the lightest stage {lightest_stage} {light_ms:.1f} ms: the other stages wait about {gap:.1f} ms per step "
            "for it in send/receive.{saved} Rebalance the layers per stage: {where}.",
        ),
        "rank_groups": (
            "ranks {heavy} compute {heavy_ms:.1f} ms per step against {light_ms:.1f} ms on ranks {light} at the same "
            "step time",
            "Ranks {heavy} compute {heavy_ms:.1f} ms per step and ranks {light} {light_ms:.1f} ms, yet every rank's "
            "step takes {step:.1f} ms: the light ranks wait about {gap:.1f} ms per step for the heavy ones in "
            "communication. The profile names no pipeline stages; if these are stages, move layers from the heavy "
            "stage to the light one; else give the heavy ranks less work.",
        ),
    }

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        if len(ctx.all_ranks) < 2:
            return []
        st = stage_of_ranks(ctx)
        if st is None:
            return self._unstaged(ctx)
        stages, n, how = st
        rp = stage_replay(ctx, stages)
        per_rank, src = stage_compute(ctx, stages)
        if not per_rank and rp is not None:
            per_rank, src = {r: v for r, v in rp.work_ms.items() if r in stages}, "replay_work"
        members: dict[int, list[int]] = defaultdict(list)
        for r in sorted(per_rank):
            members[stages[r]].append(r)
        if len(members) < 2:
            return []
        comp = {s: float(np.median([per_rank[r] for r in rs])) for s, rs in members.items()}
        heavy = max(comp, key=lambda s: comp[s])
        light = min(comp, key=lambda s: comp[s])
        gap = comp[heavy] - comp[light]
        step = ctx.mean_step_ms() or (rp.measured_ms if rp else 0.0)
        if comp[light] <= 0 or 100.0 * gap / comp[light] < T.stage_imbalance_pct.value:
            return []
        if not stage_apart(per_rank, stages, heavy, light):
            return []   # only some of the heavy stage's ranks are heavy: their extra work, not the stage's
        impact, method = gap, "heavy stage's compute per step minus the lightest stage's"
        if rp is not None and heavy in rp.stage_work_ms and light in rp.stage_work_ms:
            d = np.array(rp.stage_work_ms[heavy]) - np.array(rp.stage_work_ms[light])
            if not significant(d[~np.isnan(d)], False, len(members)):
                return []   # the stages differ by no more than their steps do
        if rp is not None:
            impact = rp.recovered_ms.get(heavy, 0.0)
            method = ("replay: measured step - the step replayed with this stage doing the median work of the "
                      "other stages (its compute scaled), median over the replayed steps")
        if step and 100.0 * impact / step < T.slow_rank_min_excess_pct.value:
            return []
        return [self._finding(ctx, heavy, light, n, comp, members, impact, method, how, src, rp)]

    def _finding(self, ctx, heavy, light, n, comp, members, impact, method, how, src, rp) -> Finding:
        gap = comp[heavy] - comp[light]
        last = heavy == n - 1
        where = ("it is the last stage, which also holds the output layer and the loss: give it fewer layers"
                 if last else ("it is the first stage, which also holds the embedding: give it fewer layers"
                               if heavy == 0 else "move layers from it to the lighter stages"))
        ranks = members[heavy]
        saved = (f" Replayed with stage {heavy + 1} doing the median work of the others, the step would take "
                 f"{impact:.1f} ms less." if rp is not None else "")
        return self.finding(
            ctx, shape="stage", subject=f"stage {heavy + 1} of {n}", ranks=ranks, impact_ms=impact,
            evidence=StageImbalanceEvidence(
                stages=[StageCompute(stage=int(s) + 1, ranks=members[s], compute_ms=round(comp[s], 3))
                        for s in sorted(comp)],
                heavy_stage=int(heavy) + 1, lightest_stage=int(light) + 1, gap_ms=round(gap, 3),
                gap_pct=round(100.0 * gap / comp[light], 1), stage_source=how, compute_source=src,
                stage_count=int(n), threshold_pct=T.stage_imbalance_pct.value,
                **({"replay_error_pct": round(rp.error_pct, 3)} if rp is not None else {}), impact_method=method),
            words={"heavy_ms": comp[heavy], "light_ms": comp[light], "gap": gap, "saved": saved, "where": where,
                   "stage_ranks": ", ".join(map(str, ranks))})

    def _unstaged(self, ctx: CheckContext) -> list[Finding]:
        """No stage is known: ranks whose steps take the same time but whose compute splits into two groups
        (`split_by_compute`) still say that some ranks wait for the others every step."""
        got = split_by_compute(ctx)
        if got is None:
            return []
        heavy, light, comp, step = got
        hv, lv = float(np.median([comp[r] for r in heavy])), float(np.median([comp[r] for r in light]))
        gap = hv - lv
        return [self.finding(
            ctx, shape="rank_groups", subject="rank group", ranks=heavy, impact_ms=gap,
            evidence=StageImbalanceEvidence(
                heavy_ranks=heavy, light_ranks=light, compute_ms={r: round(v, 3) for r, v in comp.items()},
                gap_ms=round(gap, 3), step_ms=round(step, 3), stage_source=None,
                threshold_pct=T.stage_imbalance_pct.value,
                impact_method="median compute per step of the heavy ranks minus the light ranks'"),
            words={"heavy": span_text(heavy), "light": span_text(light), "heavy_ms": hv, "light_ms": lv, "gap": gap,
                   "step": step})]


def split_by_compute(ctx: CheckContext) -> tuple[list[int], list[int], dict[int, float], float] | None:
    """(heavy ranks, light ranks, rank -> median compute ms per step, median step ms) where the ranks' median
    step times agree within T.stage_equal_step_pct % and their compute splits at its largest gap into two
    groups of 2+ ranks each that differ by T.stage_imbalance_pct % and
    T.slow_rank_min_excess_pct % of the step; else None."""
    comp: dict[int, list[float]] = defaultdict(list)
    steps: dict[int, list[float]] = defaultdict(list)
    for row in ctx.breakdown:
        if row.step is not None and row.compute_ms is not None and row.step_ms:
            comp[row.rank].append(row.compute_ms)
            steps[row.rank].append(row.step_ms)
    if len(comp) < 2:
        return None
    med = {r: float(np.median(v)) for r, v in comp.items()}
    st = np.array([float(np.median(steps[r])) for r in med])
    step = float(np.median(st))
    if step <= 0 or 100.0 * float(st.max() - st.min()) / step > T.stage_equal_step_pct.value:
        return None
    order = sorted(med, key=lambda r: med[r])
    vals = np.array([med[r] for r in order])
    cut = int(np.argmax(np.diff(vals))) + 1
    light, heavy = sorted(order[:cut]), sorted(order[cut:])
    lo, hi = float(np.median(vals[:cut])), float(np.median(vals[cut:]))
    if len(light) < 2 or len(heavy) < 2:
        return None   # one rank apart is slow-rank's to judge
    if lo <= 0 or 100.0 * (hi - lo) / lo < T.stage_imbalance_pct.value \
            or 100.0 * (hi - lo) / step < T.slow_rank_min_excess_pct.value:
        return None
    # the groups must be apart: the largest gap is wider than the spread inside each group
    if float(vals[cut] - vals[cut - 1]) < max(float(np.ptp(vals[:cut])), float(np.ptp(vals[cut:]))):
        return None
    return heavy, light, med, step
