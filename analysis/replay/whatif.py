"""What-if answers from the replay: scenarios, the ideal job, the slowdown S and its split, a verdict.

A scenario changes the replay's parameters (`engine.Params`) and replays the chain of steps; its answer is
taken over the steps that passed the null replay. "Rank R at the median" (`at_median`): R's compute before
each collective, lane latency and tail lose R's systematic excess over the other ranks at that place.
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
from .noise import heaviest


@dataclass
class Step:
    si: StepInput
    p: Params
    measured: float
    replayed: float
    gap: np.ndarray          # per rank: this step's start minus the previous kept step's end (ns), or 0

    @property
    def error_pct(self) -> float:
        return abs(self.replayed - self.measured) / self.measured * 100 if self.measured > 0 else 0.0


def chain(steps: list[Step], params) -> list[float]:
    """Replay the steps in order, each rank starting a step where it ended the one before (plus the measured
    gap between them): a rank that ends a step late starts the next late, and its peers wait for it there.
    `params(step) -> Params`. Returns the step time of each step (ms)."""
    out = []
    ends: dict[int, int] = {}
    prev_step: int | None = None
    for s in steps:
        contiguous = prev_step is not None and s.si.step == prev_step + 1
        p = params(s)
        lead = p.lead if p.lead is not None else np.zeros(len(s.si.ranks), np.int64)
        start = np.array([ends[int(r)] + int(g) if contiguous and int(r) in ends else int(m) + int(d)
                          for r, g, m, d in zip(s.si.ranks, s.gap, s.si.start, lead, strict=True)], np.int64)
        e = replay(s.si, p, start)
        out.append(step_ms(start, e))
        ends = {int(r): int(x) for r, x in zip(s.si.ranks, e, strict=True)}
        prev_step = s.si.step
    return out


def replay_steps(inputs: list[StepInput]) -> tuple[list[Step], Replay]:
    steps = []
    prev: StepInput | None = None
    for si in inputs:
        p = measure(si)
        measured = step_ms(si.start, si.end)
        gap = np.zeros(len(si.ranks), np.int64)
        if prev is not None and si.step == prev.step + 1:
            pe = dict(zip(prev.ranks.tolist(), prev.end.tolist(), strict=True))
            gap = np.array([max(int(st) - pe.get(int(r), int(st)), 0) for r, st in zip(si.ranks, si.start, strict=True)],
                           np.int64)
        steps.append(Step(si, p, measured, 0.0, gap))
        prev = si
    for s, ms in zip(steps, chain(steps, lambda s: s.p), strict=True):
        s.replayed = ms
    limit = T.replay_max_error_pct.value
    bad = [s.si.step for s in steps if s.error_pct > limit]
    reasons = []
    if bad:
        reasons.append(f"{len(bad)} step(s) replay more than {limit:g}% away from their measured time: the model "
                       "(collectives in launch order, compute between them) does not hold there")
    # a step whose ranks wait in send/recv that did not pair: the replay would count that wait as own work
    piped = [s.si.step for s in steps if s.si.step not in bad and s.si.p2p_ms
             and max(s.si.p2p_ms.values()) > limit / 100 * s.measured]
    if piped:
        worst = max(((r, ms) for s in steps if s.si.step in piped for r, ms in s.si.p2p_ms.items()),
                    key=lambda x: x[1])
        reasons.append(f"{len(piped)} step(s) wait in pipeline send/recv whose peers are not known or do not pair "
                       f"(rank {worst[0]}: {worst[1]:.1f} ms in one step): the replay would count that wait as the "
                       "rank's own work")
        bad = sorted(bad + piped)
    reason = "; ".join(reasons) or None
    rep = Replay(steps=[ReplayStep(step=s.si.step, measured_ms=round(s.measured, 3), replayed_ms=round(s.replayed, 3),
                                   error_pct=round(s.error_pct, 3)) for s in steps],
                 abstained_steps=bad, reason=reason, max_error_pct=limit)
    return steps, rep


def _gid(ranks: np.ndarray, groups: dict[int, int] | None) -> np.ndarray:
    """Per rank: its group (one group 0 without `groups`)."""
    if not groups:
        return np.zeros(len(ranks), np.int64)
    return pd.Series(ranks).map(groups).fillna(0).to_numpy(np.int64)


def _median_of_others(rows: pd.DataFrame, col: np.ndarray, who: np.ndarray,
                      groups: dict[int, int] | None = None) -> np.ndarray:
    """Per row of the ranks in `who`: the median of `col` over the other ranks' rows of the same instance and
    group (a send / recv pair joins two stages: the other stage does other work, it is no peer)."""
    out = col.astype(np.float64).copy()
    df = pd.DataFrame({"inst": rows["inst"].to_numpy(), "g": _gid(rows["rank"].to_numpy(), groups), "v": col})
    mine = np.isin(rows["rank"].to_numpy(), who)
    med = df[~mine].groupby(["inst", "g"])["v"].median()
    key = pd.MultiIndex.from_frame(df.loc[mine, ["inst", "g"]])
    got = med.reindex(key).to_numpy(np.float64)
    out[mine] = np.where(np.isnan(got), out[mine], got)
    return out


def _median_all(rows: pd.DataFrame, col: np.ndarray, groups: dict[int, int] | None = None) -> np.ndarray:
    g = _gid(rows["rank"].to_numpy(), groups)
    return rows.assign(v=col, g=g).groupby(["inst", "g"])["v"].transform("median").to_numpy(np.float64)


def _excess(steps: list[Step], who: np.ndarray, col: str,
            groups: dict[int, int] | None = None) -> dict[tuple[int, int], float]:
    """(rank, k) -> the mean over steps of the rank's k-th collective's parameter minus the median of its
    peers' at the same collective: its systematic excess at that place in its step."""
    acc: dict[tuple[int, int], list[float]] = {}
    for s in steps:
        r = s.si.rows
        v = getattr(s.p, col)
        rank = r["rank"].to_numpy()
        k = r.groupby("rank").cumcount().to_numpy()
        med = _median_of_others(r, v, who, groups)
        for j in np.flatnonzero(np.isin(rank, who)):
            acc.setdefault((int(rank[j]), int(k[j])), []).append(float(v[j]) - float(med[j]))
    return {key: float(np.mean(x)) for key, x in acc.items()}


def at_median(steps: list[Step], ranks: list[int], groups: dict[int, int] | None = None):
    """Params for each step with `ranks` at the median of their peers (the other ranks of their group, where
    `groups` says which ranks do the same work): each of their compute windows, lane latencies and their tail
    lose their systematic excess over the peers (the mean over the steps of the difference at the same place),
    so they keep their own step-to-step variation, as the job without the problem would. A rank late into
    the first step starts it at the others' median."""
    who = np.array(ranks)
    ex_c, ex_q = _excess(steps, who, "c", groups), _excess(steps, who, "q", groups)
    ex_t: dict[int, float] = {}
    for r in ranks:
        d = []
        for s in steps:
            gid = _gid(s.si.ranks, groups)
            me = s.si.ranks == r
            peers = ~np.isin(s.si.ranks, who) & (gid == (groups or {}).get(r, 0))
            if me.any() and peers.any():
                d.append(float(s.p.t[me][0]) - float(np.median(s.p.t[peers])))
        ex_t[r] = float(np.mean(d)) if d else 0.0

    def params(s: Step) -> Params:
        r = s.si.rows
        rank = r["rank"].to_numpy()
        k = r.groupby("rank").cumcount().to_numpy()
        c, q, t = s.p.c.copy(), s.p.q.copy(), s.p.t.copy()
        for j in np.flatnonzero(np.isin(rank, who)):
            key = (int(rank[j]), int(k[j]))
            c[j] = max(int(c[j] - ex_c.get(key, 0.0)), 0)
            q[j] = max(int(q[j] - ex_q.get(key, 0.0)), 0)
        mine = np.isin(s.si.ranks, who)
        lead = np.zeros(len(s.si.ranks), np.int64)
        for i in np.flatnonzero(mine):
            t[i] = max(int(t[i] - ex_t.get(int(s.si.ranks[i]), 0.0)), 0)
        if (~mine).any():
            lead[mine] = int(np.median(s.si.start[~mine])) - s.si.start[mine]
        return replace(s.p, c=c, q=q, t=t, lead=lead)
    return params


def rank_work(s: Step) -> np.ndarray:
    """Per rank of the step (aligned with its ranks): its compute before each collective plus its tail (ns),
    the work `balanced` scales."""
    idx = pd.Index(s.si.ranks).get_indexer(s.si.rows["rank"].to_numpy())
    return np.bincount(idx, weights=s.p.c.astype(np.float64), minlength=len(s.si.ranks)) + s.p.t


def rank_work_ms(steps: list[Step]) -> dict[int, float]:
    """Rank -> the median over the steps of its work (`rank_work`), ms."""
    per: dict[int, list[float]] = {}
    for s in steps:
        for r, v in zip(s.si.ranks.tolist(), (rank_work(s) / 1e6).tolist(), strict=True):
            per.setdefault(int(r), []).append(v)
    return {r: float(np.median(v)) for r, v in per.items()}


def stage_apart(work_ms: dict[int, float], stages: dict[int, int], heavy: int, light: int | None = None) -> bool:
    """Whether the heavy stage's ranks stand apart from the light stage's (default: the stage of the least
    median work): its lower quartile of work above their upper quartile by T.stage_imbalance_pct (two ranks a
    stage: its lightest above their heaviest). A stage's layers weigh on every rank of it; where only some of
    its ranks are heavy, the excess is their extra work (a slow rank, a stall), not the stage's."""
    by_stage: dict[int, list[float]] = {}
    for r, w in work_ms.items():
        if r in stages:
            by_stage.setdefault(stages[r], []).append(w)
    if light is None and by_stage:
        light = min(by_stage, key=lambda k: float(np.median(by_stage[k])))
    hv, lv = by_stage.get(heavy), by_stage.get(light) if light is not None else None
    if not hv or not lv:
        return False
    lo = float(np.percentile(hv, 25, method="lower"))
    hi = float(np.percentile(lv, 75, method="higher"))
    return hi > 0 and 100.0 * (lo - hi) / hi >= T.stage_imbalance_pct.value


def _stage_work(s: Step, stages: dict[int, int]) -> dict[int, float]:
    """stage -> the mean over its ranks of their `rank_work` in this step (ns): the work a stage does."""
    w = rank_work(s)
    per: dict[int, list[float]] = {}
    for r, v in zip(s.si.ranks.tolist(), w.tolist(), strict=True):
        if r in stages:
            per.setdefault(stages[r], []).append(v)
    return {st: float(np.mean(v)) for st, v in per.items()}


def stage_factors(steps: list[Step], stages: dict[int, int], moved: list[int]) -> dict[int, float]:
    """stage -> the factor that brings its work to the median of the other stages' (mean over the steps of the
    ratio), for each stage in `moved`."""
    out: dict[int, float] = {}
    for st in moved:
        ratios = []
        for s in steps:
            w = _stage_work(s, stages)
            others = [v for k, v in w.items() if k != st]
            if st in w and w[st] > 0 and others:
                ratios.append(float(np.median(others)) / w[st])
        out[st] = float(np.mean(ratios)) if ratios else 1.0
    return out


def balanced(steps: list[Step], stages: dict[int, int], moved: list[int], base=None):
    """Params with each stage in `moved` doing the median work of the other stages: its ranks' compute windows
    and tails scaled by `stage_factors` (a balanced pipeline gives every stage the same layers: each of its
    microbatches' compute shrinks or grows by the same factor). `base(step) -> Params` to start from."""
    f = stage_factors(steps, stages, moved)

    def params(s: Step) -> Params:
        p = base(s) if base is not None else s.p
        rank = s.si.rows["rank"].to_numpy()
        fr = np.array([f.get(stages.get(int(r), -1), 1.0) for r in rank])
        ft = np.array([f.get(stages.get(int(r), -1), 1.0) for r in s.si.ranks])
        return replace(p, c=(p.c * fr).astype(np.int64), t=(p.t * ft).astype(np.int64))
    return params


def comm_median(s: Step, p: Params | None = None) -> Params:
    p = p or s.p
    return replace(p, x=_median_all(s.si.rows, s.p.x).astype(np.int64))


def ideal_of(stages: dict[int, int] | None = None):
    """The ideal job: every rank at the median of its peers (its stage's ranks, where stages are known) per
    collective, communication at the median, and, in a pipeline, every stage doing the median stage's work."""
    def at(s: Step) -> Params:
        r = s.si.rows
        g = _gid(s.si.ranks, stages)
        med = {int(x): float(np.median(s.p.t[g == x])) for x in np.unique(g)}
        t = np.array([med[int(x)] for x in g], np.int64)
        return Params(_median_all(r, s.p.c, stages).astype(np.int64), _median_all(r, s.p.q, stages).astype(np.int64),
                      _median_all(r, s.p.x).astype(np.int64), t, lead=int(np.median(s.si.start)) - s.si.start)
    if not stages or len(set(stages.values())) < 2:
        return at
    cache: dict[int, Params] = {}

    def staged(s: Step) -> Params:
        if s.si.step not in cache:
            cache[s.si.step] = _scaled_to_median(s, at(s), stages)
        return cache[s.si.step]
    return staged


def _scaled_to_median(s: Step, p: Params, stages: dict[int, int]) -> Params:
    """`p` with each stage's compute and tails scaled to the median stage work of the step."""
    w = _stage_work(Step(s.si, p, s.measured, s.replayed, s.gap), stages)
    med = float(np.median(list(w.values()))) if w else 0.0
    f = {st: med / v if v > 0 else 1.0 for st, v in w.items()}
    fr = np.array([f.get(stages.get(int(r), -1), 1.0) for r in s.si.rows["rank"].to_numpy()])
    ft = np.array([f.get(stages.get(int(r), -1), 1.0) for r in s.si.ranks])
    return replace(p, c=(p.c * fr).astype(np.int64), t=(p.t * ft).astype(np.int64))


ideal = ideal_of()


def with_rank(s: Step, base: Params, rank: int) -> Params:
    """`base` with rank's measured parameters put back."""
    mine = (s.si.rows["rank"] == rank).to_numpy()
    c, q, x, t = base.c.copy(), base.q.copy(), base.x.copy(), base.t.copy()
    lead = base.lead.copy() if base.lead is not None else np.zeros(len(s.si.ranks), np.int64)
    c[mine], q[mine], x[mine] = s.p.c[mine], s.p.q[mine], s.p.x[mine]
    t[s.si.ranks == rank] = s.p.t[s.si.ranks == rank]
    lead[s.si.ranks == rank] = 0
    return Params(c, q, x, t, lead=lead)


def _used(steps: list[Step], bad: list[int]) -> list[int]:
    return [i for i, s in enumerate(steps) if s.si.step not in bad]


def scenario(steps: list[Step], bad: list[int], change: str, params) -> Scenario:
    pred = chain(steps, params)
    use = _used(steps, bad)
    rows = [ScenarioStep(step=steps[i].si.step, predicted_ms=round(pred[i], 3),
                         delta_ms=round(pred[i] - steps[i].measured, 3)) for i in use]
    mean_pred = float(np.mean([pred[i] for i in use])) if use else 0.0
    mean_meas = float(np.mean([steps[i].measured for i in use])) if use else 0.0
    return Scenario(change=change, steps=rows, predicted_step_ms=round(mean_pred, 3),
                    delta_ms=round(mean_pred - mean_meas, 3))


def slowdown(steps: list[Step], bad: list[int], stages: dict[int, int] | None = None) -> Slowdown:
    use = _used(steps, bad)
    best = ideal_of(stages)
    ideal_all = chain(steps, best)
    ideal_ms = float(np.mean([ideal_all[i] for i in use]))
    measured = float(np.mean([steps[i].measured for i in use]))
    ranks = sorted(heaviest([steps[i] for i in use], groups=stages))

    def s_of(put_back) -> float:
        vals = chain(steps, lambda s: put_back(s, best(s)))
        return round(float(np.mean([vals[i] for i in use])) / ideal_ms, 4) if ideal_ms > 0 else 1.0

    by_rank = {r: s_of(lambda s, b, r=r: with_rank(s, b, r)) for r in ranks}
    by_stage: dict[int, float] = {}
    for st in sorted(set((stages or {}).values())):
        members = [r for r, v in (stages or {}).items() if v == st]

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
                    by_step={steps[i].si.step: round(steps[i].measured / ideal_all[i], 4) if ideal_all[i] > 0 else 1.0
                             for i in use})


def verdict(sd: Slowdown, recovered: dict[int, float], standing_out: set[int],
            stage_gain: dict[int, float], stages: dict[int, int], work_ms: dict[int, float]) -> str:
    """One slow worker when one rank does more of its own work than its peers beyond the noise
    (`standing_out`, noise.significant) and moving it to their median makes the step at least
    T.whatif_min_slowdown faster; several such ranks are named together. Else one slow stage when balancing
    one pipeline stage (`stage_gain`: stage -> ms recovered, `whatif.balanced`) makes the step that much
    faster and its ranks stand apart from the lightest stage's (`stage_apart` on `work_ms`). Else everyone
    (the job itself). `recovered`: rank -> measured - the step with that rank at the
    median (ms)."""
    gain = T.whatif_min_slowdown.value
    if gain > sd.S:
        return (f"the job runs within {(sd.S - 1) * 100:.1f}% of its ideal ({sd.measured_ms:.2f} ms against "
                f"{sd.ideal_ms:.2f} ms): no slow worker or stage")
    big = sorted((r for r, v in recovered.items() if r in standing_out
                  and sd.measured_ms >= gain * (sd.measured_ms - v)), key=lambda r: -recovered[r])
    if big:
        who = "one slow worker: rank" if len(big) == 1 else "slow workers: ranks"
        return (f"{who} {', '.join(map(str, big))}: at its peers' median the step takes "
                f"{sd.measured_ms - recovered[big[0]]:.2f} ms instead of {sd.measured_ms:.2f} ms "
                f"(S = {sd.S:.3f} against the ideal {sd.ideal_ms:.2f} ms)")
    if stage_gain:
        st = max(stage_gain, key=lambda k: stage_gain[k])
        if stage_apart(work_ms, stages, st) and sd.measured_ms >= gain * (sd.measured_ms - stage_gain[st]):
            members = sorted(r for r, v in stages.items() if v == st)
            return (f"one slow stage: stage {st} (ranks {', '.join(map(str, members))}): doing the median work of "
                    f"the other stages, the step takes {sd.measured_ms - stage_gain[st]:.2f} ms instead of "
                    f"{sd.measured_ms:.2f} ms (S = {sd.S:.3f} against the ideal {sd.ideal_ms:.2f} ms)")
    return (f"everyone: no rank stands out beyond the noise (S = {sd.S:.3f}; {sd.measured_ms:.2f} ms against "
            f"{sd.ideal_ms:.2f} ms): the job itself")
