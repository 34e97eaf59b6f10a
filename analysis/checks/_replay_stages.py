"""Pipeline stages on the cross-rank replay (analysis/replay): each stage's work per step and the step time
recovered when it does the median work of the other stages (`replay.whatif.balanced`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..replay.whatif import balanced, chain, rank_work, rank_work_ms
from .base import CheckContext


@dataclass
class StageReplay:
    work_ms: dict[int, float]        # rank -> median over the replayed steps of its work (compute, tail), ms
    recovered_ms: dict[int, float]   # stage -> median over the steps of measured - replayed with it balanced
    stage_work_ms: dict[int, list[float]]   # stage -> its work per replayed step (mean over its ranks)
    measured_ms: float               # mean measured step
    error_pct: float                 # the largest null-replay error


def stage_replay(ctx: CheckContext, stages: dict[int, int]) -> StageReplay | None:
    """None where the replay cannot speak for the stages: nothing replays, a step misses its measured time, or
    no edge of its graph joins two stages."""
    return ctx.once(_stage_replay_of, tuple(sorted(stages.items())))


def _stage_replay_of(ctx: CheckContext, stages: tuple[tuple[int, int], ...]) -> StageReplay | None:
    return _stage_replay(ctx, dict(stages))


def _linked(steps: list, stages: dict[int, int]) -> bool:
    """Whether the replay's graph joins two stages (a send / recv pair, a collective across stages): without
    such an edge the stages never wait for each other in it, and balancing one could not show as a gain."""
    for s in steps:
        r = s.si.rows
        st = r["rank"].map(stages).fillna(-1)
        if (st.groupby(r["inst"]).nunique() > 1).any():
            return True
    return False


def _stage_replay(ctx: CheckContext, stages: dict[int, int]) -> StageReplay | None:
    got = ctx.view.replay
    if got is None:
        return None
    steps, rep = got
    if rep.abstained_steps or not steps or not _linked(steps, stages):
        return None
    by_stage: dict[int, list[float]] = {}
    for s in steps:
        w = rank_work(s) / 1e6
        for st in sorted(set(stages.values())):
            mine = [v for r, v in zip(s.si.ranks.tolist(), w.tolist(), strict=True) if stages.get(int(r)) == st]
            by_stage.setdefault(st, []).append(float(np.mean(mine)) if mine else float("nan"))
    measured = np.array([s.measured for s in steps])
    rec = {}
    for st in sorted(set(stages.values())):
        pred = np.array(chain(steps, balanced(steps, stages, [st])))
        rec[st] = float(np.median(measured - pred))   # the median: a pipeline's first step holds its warm-up
    return StageReplay(rank_work_ms(steps), rec, by_stage, float(measured.mean()),
                       max((x.error_pct for x in rep.steps), default=0.0))
