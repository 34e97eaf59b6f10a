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
from ..replay import prepare
from ..replay.engine import TAIL, windows
from ..replay.models import Replay
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


def noise_known(n_steps: int, n_ranks: int) -> bool:
    """Whether `significant` could test the noise (else only the floor applied)."""
    return n_ranks > 4 or n_steps >= 3


@dataclass
class ReplayRanks:
    replay: Replay
    by_rank: dict[int, Recovery]       # the ranks replayed at the median (the candidates), and any asked since
    named: list[int]                   # ranks to name, most recovered first
    steps: list = field(default_factory=list, repr=False)

    def recovery(self, rank: int) -> Recovery:
        """The step time recovered with `rank` at its peers' median (replayed on first ask)."""
        if rank not in self.by_rank:
            self.by_rank[rank] = _recover(self.steps, self.replay, rank)
        return self.by_rank[rank]


def replay_ranks(ctx: CheckContext) -> ReplayRanks | None:
    """None where the replay cannot speak for the job: one rank, no matched collective, or a step whose null
    replay misses its measured time (slow-rank then judges by dimension and arrival)."""
    return ctx.memo("replay.ranks", lambda: _replay_ranks(ctx))


def _replay_ranks(ctx: CheckContext) -> ReplayRanks | None:
    got = prepare(ctx.profile)
    if got is None:
        return None
    steps, rep = got
    if rep.abstained_steps:   # the model does not hold for every step: it speaks for none of the job's ranks
        return None
    use = list(range(len(steps)))
    measured = np.array([steps[i].measured for i in use])
    floor_pct = T.slow_rank_min_excess_pct.value
    used = [steps[i] for i in use]
    d, z_ok = excess_own_time(used)
    # only a rank that does more of its own work than its peers, beyond the noise, can hold the job back:
    # the replay runs for those (the heaviest MAX_REPLAYED), not for every rank of a large job
    cands = sorted((r for r in d if float(np.mean(d[r])) >= T.straggler_min_wait_ms.value
                    and significant(np.array(d[r]), z_ok[r], len(rep.ranks))), key=lambda r: -float(np.mean(d[r])))
    out = {r: _recover(steps, rep, r) for r in cands[:MAX_REPLAYED]}
    floor = floor_pct / 100 * float(measured.mean())
    named = sorted((r for r, v in out.items() if v.recovered_ms >= max(floor, T.straggler_min_wait_ms.value)),
                   key=lambda r: -out[r].recovered_ms)
    for r in named:
        out[r].window, out[r].before = _cause(ctx, used, r)
    return ReplayRanks(rep, out, named, steps)


MAX_REPLAYED = 16


def _recover(steps: list, rep: Replay, r: int) -> Recovery:
    use = [i for i, s in enumerate(steps) if s.si.step not in rep.abstained_steps]
    measured = np.array([steps[i].measured for i in use])
    pred = np.array(chain(steps, at_median(steps, [r])))[use]
    gain = measured - pred
    floor = T.slow_rank_min_excess_pct.value / 100
    good = [steps[i].si.step for i, g in zip(use, gain, strict=True) if g >= floor * steps[i].measured]
    return Recovery(r, round(float(gain.mean()), 3), round(float(measured.mean()), 3), round(float(pred.mean()), 3),
                    good)


def excess_own_time(steps: list) -> tuple[dict[int, list[float]], dict[int, bool]]:
    """Per rank: its own time (compute before its collectives, lane latency, tail: what a what-if moves, not
    its waits) minus the median of the other ranks', per step (ms); and whether it is a robust outlier (MAD z)
    among the ranks in some step."""
    d: dict[int, list[float]] = {}
    z_ok: dict[int, bool] = {}
    for s in steps:
        ranks = s.si.ranks
        idx = pd.Index(ranks).get_indexer(s.si.rows["rank"].to_numpy())
        own = (np.bincount(idx, weights=(s.p.c + s.p.q).astype(np.float64), minlength=len(ranks))
               + s.p.t.astype(np.float64)) / 1e6
        med_all = float(np.median(own))
        mad = float(np.median(np.abs(own - med_all)))
        for i, r in enumerate(ranks.tolist()):
            # the median of the others: exact for a few ranks, the median of all beyond (the same to noise)
            med = float(np.median(np.delete(own, i))) if len(ranks) <= 16 else med_all
            d.setdefault(r, []).append(float(own[i]) - med)
            out = mad > 0 and 0.6745 * (own[i] - med_all) / mad >= T.slow_rank_robust_z.value
            z_ok[r] = z_ok.get(r, False) or bool(out)
    return d, z_ok


# one-sided Student t critical values by degrees of freedom, for p = 0.05, 0.025, 0.01, 0.005, 0.001
_ALPHAS = (0.05, 0.025, 0.01, 0.005, 0.001)
_T = {1: (6.314, 12.706, 31.821, 63.657, 318.31), 2: (2.920, 4.303, 6.965, 9.925, 22.327),
      3: (2.353, 3.182, 4.541, 5.841, 10.215), 4: (2.132, 2.776, 3.747, 4.604, 7.173),
      5: (2.015, 2.571, 3.365, 4.032, 5.893), 6: (1.943, 2.447, 3.143, 3.707, 5.208),
      7: (1.895, 2.365, 2.998, 3.499, 4.785), 8: (1.860, 2.306, 2.896, 3.355, 4.501),
      9: (1.833, 2.262, 2.821, 3.250, 4.297), 10: (1.812, 2.228, 2.764, 3.169, 4.144),
      15: (1.753, 2.131, 2.602, 2.947, 3.733), 20: (1.725, 2.086, 2.528, 2.845, 3.552),
      30: (1.697, 2.042, 2.457, 2.750, 3.385), 10**9: (1.645, 1.960, 2.326, 2.576, 3.090)}


def _t_crit(df: int, alpha: float) -> float:
    """The critical value at the table's df at or below `df` and its alpha at or below `alpha` (conservative)."""
    row = _T[max(k for k in _T if k <= df)] if df >= 1 else _T[1]
    col = next((i for i, a in enumerate(_ALPHAS) if a <= alpha), len(_ALPHAS) - 1)
    return row[col]


def significant(d: np.ndarray, z_ok: bool, n_ranks: int) -> bool:
    """The rank does more of its own work than its peers beyond the noise: a robust outlier (MAD z) among more
    than 4 ranks in some step (the other ranks' spread in the step is the noise), or, over 3 or more steps, a
    one-sided t test of its excess per step at T.replay_t_alpha / the ranks tested (Bonferroni: the steps are
    the samples). With neither, only the floor applies where the noise cannot be told (fewer than 3 steps and
    at most 4 ranks)."""
    if n_ranks > 4 and z_ok:
        return True
    n = len(d)
    if n < 3:
        return n_ranks <= 4
    sd = float(np.std(d, ddof=1))
    if sd == 0:
        return float(d.mean()) > 0
    return float(d.mean()) / (sd / np.sqrt(n)) >= _t_crit(n - 1, T.replay_t_alpha.value / max(n_ranks, 1))


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
