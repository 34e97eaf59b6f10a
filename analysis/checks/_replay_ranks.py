"""The ranks whose move to the median recovers step time, by the cross-rank replay (analysis/replay), and what
each did in the window where it lost the time.

Per rank R and replayed step: recovered = measured step - the step replayed with R at the median of its peers
(its compute before each collective, its lane latency and its tail). A rank that only waits recovers nothing:
its waits are not parameters of the replay, they are what it recomputes. The window of R's largest excess over
its peers (before one collective, or the tail) is then split into compute kernels, data loading, other host ops
and untraced time on R and on its peers (metrics.collectives.window_parts); the part with the largest excess is
the cause.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..metrics.collectives import compare_parts, top_host_ops, window_parts
from ..metrics.stages import stage_of_ranks
from ..replay.engine import TAIL, windows
from ..replay.models import Replay
from ..replay.noise import MAX_REPLAYED, judged
from ..replay.whatif import at_median, chain
from ..thresholds import T
from .base import CheckContext


@dataclass
class Recovery:
    rank: int
    recovered_ms: float                # mean over the replayed steps
    measured_ms: float
    predicted_ms: float
    steps: list[int]                   # steps where it recovers at least the floor
    window: str = ""                   # "tail" | "before collective <inst>"
    before: dict = field(default_factory=dict)   # compare_parts of that window


@dataclass
class ReplayRanks:
    replay: Replay
    by_rank: dict[int, Recovery]       # the ranks replayed at the median (the candidates), and any asked since
    named: list[int]                   # ranks to name, most recovered first
    steps: list = field(default_factory=list, repr=False)
    groups: dict[int, int] | None = None   # rank -> pipeline stage, where stages are known
    structural: set[int] = field(default_factory=set)   # ranks whose excess is ops their peers do not run

    def recovery(self, rank: int) -> Recovery:
        """The step time recovered with `rank` at its peers' median (replayed on first ask)."""
        if rank not in self.by_rank:
            self.by_rank[rank] = _recover(self.steps, self.replay, rank, self.groups)
        return self.by_rank[rank]


def replay_ranks(ctx: CheckContext) -> ReplayRanks | None:
    """None where the replay cannot speak for the job: one rank, no matched collective, or a step whose null
    replay misses its measured time (slow-rank then judges by dimension and arrival)."""
    return ctx.once(_replay_ranks)


def _replay_ranks(ctx: CheckContext) -> ReplayRanks | None:
    got = ctx.view.replay
    if got is None:
        return None
    steps, rep = got
    if rep.abstained_steps:   # the model does not hold for every step: it speaks for none of the job's ranks
        return None
    measured = np.array([s.measured for s in steps])
    # pipeline stages do different work by design: a rank's peers are its own stage's ranks (stage-imbalance
    # judges the stages against each other)
    st = stage_of_ranks(ctx)
    groups = st[0] if st and len(set(st[0].values())) >= 2 else None
    # only a rank that does more of its own work than its peers, beyond the noise, can hold the job back:
    # the replay runs for those (the heaviest MAX_REPLAYED), not for every rank of a large job
    cands, structural = judged(steps, len(rep.ranks), T.straggler_min_wait_ms.value, groups)
    out = {r: _recover(steps, rep, r, groups) for r in cands[:MAX_REPLAYED]}
    floor = T.slow_rank_min_excess_pct.value / 100 * float(measured.mean())
    named = sorted((r for r, v in out.items() if v.recovered_ms >= max(floor, T.straggler_min_wait_ms.value)),
                   key=lambda r: -out[r].recovered_ms)
    for r in named:
        out[r].window, out[r].before = _cause(ctx, steps, r)
    return ReplayRanks(rep, out, named, steps, groups, structural & set(named))



def _recover(steps: list, rep: Replay, r: int, groups: dict[int, int] | None = None) -> Recovery:
    use = [i for i, s in enumerate(steps) if s.si.step not in rep.abstained_steps]
    measured = np.array([steps[i].measured for i in use])
    pred = np.array(chain(steps, at_median(steps, [r], groups)))[use]
    gain = measured - pred
    floor = T.slow_rank_min_excess_pct.value / 100
    good = [steps[i].si.step for i, g in zip(use, gain, strict=True) if g >= floor * steps[i].measured]
    return Recovery(r, round(float(gain.mean()), 3), round(float(measured.mean()), 3), round(float(pred.mean()), 3),
                    good)


def _cause(ctx: CheckContext, steps: list, rank: int) -> tuple[str, dict]:
    """The window (same collective, or the tail) where `rank` exceeds its peers' median most, and its parts."""
    wins = []
    for s in steps:
        w = windows(s.si, s.p).assign(step=s.si.step)
        w["ms"] = (w["w1"] - w["w0"]) / 1e6
        wins.append(w)
    w = pd.concat(wins, ignore_index=True)
    mine = w[w["rank"] == rank].groupby("inst")["ms"].mean()
    peers = w[w["rank"] != rank].groupby(["inst", "rank"])["ms"].mean().groupby("inst").median()
    excess = (mine - peers.reindex(mine.index).fillna(0)).sort_values(ascending=False)
    if excess.empty:
        return "", {}
    inst = int(excess.index[0])
    sel = w[w["inst"] == inst].copy()
    sel["inst"] = sel["step"]   # one window per rank and step
    cur = ctx.profile.cursor()
    try:
        parts = window_parts(cur, sel)
        top = top_host_ops(cur, rank)
        cur.execute("DROP TABLE IF EXISTS win; DROP TABLE IF EXISTS base")
    finally:
        cur.close()
    where = "tail" if inst == TAIL else f"before collective {inst}"
    return where, compare_parts(parts, rank, top) | {"window": where, "windows": len(sel)}
