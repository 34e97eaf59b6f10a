"""What-if answers from the replay: scenarios, the ideal job, the slowdown S and its split, a verdict.

A scenario changes the replay's parameters (`engine.Params`) and replays every step that passed the null
replay. "Rank R at the median": each of R's collectives gets the median, over the other ranks of the same
collective, of compute before it and lane latency, and R's tail the median of the other ranks' tails.
"Communication at the median": every member's transfer time is the median of the collective's members'.
The ideal: both, for every rank. S = measured / ideal; S_rank = the ideal with rank r's measured parameters put
back, over the ideal (the OSDI'25 straggler analysis's attribution); S for compute, communication and the
tail puts back that parameter alone.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from ..thresholds import T
from .engine import Params, measure, replay, step_ms
from .inputs import StepInput
from .models import Replay, ReplayStep, Scenario, ScenarioStep, Slowdown


@dataclass
class Step:
    si: StepInput
    p: Params
    measured: float
    replayed: float

    @property
    def error_pct(self) -> float:
        return abs(self.replayed - self.measured) / self.measured * 100 if self.measured > 0 else 0.0


def replay_steps(inputs: list[StepInput]) -> tuple[list[Step], Replay]:
    steps = []
    for si in inputs:
        p = measure(si)
        measured = float(np.max(si.end - si.start)) / 1e6
        steps.append(Step(si, p, measured, step_ms(si, replay(si, p))))
    limit = T.replay_max_error_pct.value
    bad = [s.si.step for s in steps if s.error_pct > limit]
    reason = None
    if bad:
        reason = (f"{len(bad)} step(s) replay more than {limit:g}% away from their measured time: the model "
                  "(collectives in launch order, compute between them) does not hold there")
    rep = Replay(steps=[ReplayStep(step=s.si.step, measured_ms=round(s.measured, 3), replayed_ms=round(s.replayed, 3),
                                   error_pct=round(s.error_pct, 3)) for s in steps],
                 abstained_steps=bad, reason=reason, max_error_pct=limit)
    return [s for s in steps if s.si.step not in bad], rep


def _median_of_others(rows: pd.DataFrame, col: np.ndarray, who: np.ndarray) -> np.ndarray:
    """Per row of the ranks in `who`: the median of `col` over the other ranks' rows of the same instance."""
    out = col.astype(np.float64).copy()
    df = pd.DataFrame({"inst": rows["inst"].to_numpy(), "rank": rows["rank"].to_numpy(), "v": col})
    mine = df["rank"].isin(who).to_numpy()
    med = df[~mine].groupby("inst")["v"].median()
    got = df.loc[mine, "inst"].map(med)
    out[mine] = np.where(got.isna(), out[mine], got.to_numpy(np.float64))
    return out


def _median_all(rows: pd.DataFrame, col: np.ndarray) -> np.ndarray:
    return rows.assign(v=col).groupby("inst")["v"].transform("median").to_numpy(np.float64)


def at_median(s: Step, ranks: list[int]) -> Params:
    who = np.array(ranks)
    r = s.si.rows
    c = _median_of_others(r, s.p.c, who).astype(np.int64)
    q = _median_of_others(r, s.p.q, who).astype(np.int64)
    t = s.p.t.copy()
    mine = np.isin(s.si.ranks, who)
    if (~mine).any():
        t[mine] = int(np.median(s.p.t[~mine]))
    return replace(s.p, c=c, q=q, t=t)


def comm_median(s: Step, p: Params | None = None) -> Params:
    p = p or s.p
    return replace(p, x=_median_all(s.si.rows, s.p.x).astype(np.int64))


def ideal(s: Step) -> Params:
    r = s.si.rows
    return Params(_median_all(r, s.p.c).astype(np.int64), _median_all(r, s.p.q).astype(np.int64),
                  _median_all(r, s.p.x).astype(np.int64), np.full_like(s.p.t, int(np.median(s.p.t))))


def with_rank(s: Step, base: Params, rank: int) -> Params:
    """`base` with rank's measured parameters put back."""
    mine = (s.si.rows["rank"] == rank).to_numpy()
    c, q, x, t = base.c.copy(), base.q.copy(), base.x.copy(), base.t.copy()
    c[mine], q[mine], x[mine] = s.p.c[mine], s.p.q[mine], s.p.x[mine]
    t[s.si.ranks == rank] = s.p.t[s.si.ranks == rank]
    return Params(c, q, x, t)


def scenario(steps: list[Step], change: str, params) -> Scenario:
    rows = []
    for s in steps:
        pred = step_ms(s.si, replay(s.si, params(s)))
        rows.append(ScenarioStep(step=s.si.step, predicted_ms=round(pred, 3), delta_ms=round(pred - s.measured, 3)))
    mean_pred = float(np.mean([x.predicted_ms for x in rows])) if rows else 0.0
    mean_meas = float(np.mean([s.measured for s in steps])) if steps else 0.0
    return Scenario(change=change, steps=rows, predicted_step_ms=round(mean_pred, 3),
                    delta_ms=round(mean_pred - mean_meas, 3))


def slowdown(steps: list[Step], stages: dict[int, int] | None = None) -> Slowdown:
    ideal_by = {s.si.step: step_ms(s.si, replay(s.si, ideal(s))) for s in steps}
    ideal_ms = float(np.mean(list(ideal_by.values())))
    measured = float(np.mean([s.measured for s in steps]))
    ranks = sorted({int(r) for s in steps for r in s.si.ranks})

    def s_of(put_back) -> float:
        vals = [step_ms(s.si, replay(s.si, put_back(s, ideal(s)))) for s in steps]
        return round(float(np.mean(vals)) / ideal_ms, 4) if ideal_ms > 0 else 1.0

    by_rank = {r: s_of(lambda s, b, r=r: with_rank(s, b, r)) for r in ranks}
    by_stage: dict[int, float] = {}
    if stages:
        for st in sorted(set(stages.values())):
            members = [r for r, v in stages.items() if v == st]

            def put(s, b, members=members):
                for r in members:
                    b = with_rank(s, b, r)
                return b
            by_stage[st] = s_of(put)
    by_op = {"compute": s_of(lambda s, b: replace(b, c=s.p.c, q=s.p.q)),
             "communication": s_of(lambda s, b: replace(b, x=s.p.x)),
             "tail": s_of(lambda s, b: replace(b, t=s.p.t))}
    return Slowdown(S=round(measured / ideal_ms, 4) if ideal_ms > 0 else 1.0, ideal_ms=round(ideal_ms, 3),
                    measured_ms=round(measured, 3), by_rank=by_rank, by_stage=by_stage, by_op_type=by_op,
                    by_step={k: round(next(s.measured for s in steps if s.si.step == k) / v, 4) if v > 0 else 1.0
                             for k, v in ideal_by.items()})


def verdict(sd: Slowdown) -> str:
    slow = sd.S
    gap = slow - 1
    if slow < T.whatif_min_slowdown.value:
        return (f"the job runs within {gap * 100:.1f}% of its ideal ({sd.measured_ms:.2f} ms against "
                f"{sd.ideal_ms:.2f} ms): no slow worker or stage")
    share = T.whatif_one_worker_share.value
    worst = max(sd.by_rank, key=lambda r: sd.by_rank[r])
    if sd.by_rank[worst] - 1 >= share * gap and sum(v - 1 >= share * gap for v in sd.by_rank.values()) == 1:
        return (f"one slow worker: rank {worst} alone makes the step {(sd.by_rank[worst] - 1) * 100:.1f}% slower "
                f"than the ideal (S = {sd.S:.3f}; {sd.measured_ms:.2f} ms against {sd.ideal_ms:.2f} ms)")
    if sd.by_stage:
        st = max(sd.by_stage, key=lambda k: sd.by_stage[k])
        if sd.by_stage[st] - 1 >= share * gap:
            return (f"one slow stage: stage {st} makes the step {(sd.by_stage[st] - 1) * 100:.1f}% slower than the "
                    f"ideal (S = {sd.S:.3f})")
    return (f"everyone: no single rank or stage explains the slowdown (S = {sd.S:.3f}; {sd.measured_ms:.2f} ms "
            f"against {sd.ideal_ms:.2f} ms): the job itself")
