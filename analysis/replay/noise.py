"""Whether a rank does more of its own work than its peers beyond the noise of the job.

A rank's own time in a step is what a what-if moves: its compute before each collective, its lanes' start
latency and its tail, never its waits. Its excess is that minus the other ranks' median. With more than 4 ranks
the other ranks' spread in the same step is the noise (a robust MAD z); with 3 or more steps the steps are the
samples (a one-sided t test with Bonferroni over the ranks tested); with neither the noise cannot be told.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..thresholds import T
from .work import extra_work_ms

# a what-if per rank replays the whole job: of a large job, only the ranks with the most excess are replayed
MAX_REPLAYED = 8


def heaviest(steps: list, limit: int = MAX_REPLAYED, groups: dict[int, int] | None = None) -> list[int]:
    """The ranks with the largest mean excess of own time, at most `limit` (every rank of a small job)."""
    every = sorted({int(r) for s in steps for r in s.si.ranks})
    if len(every) <= limit:
        return every
    d, _ = excess_own_time(steps, groups)
    return sorted(d, key=lambda r: -float(np.mean(d[r])))[:limit]


def standing_out(steps: list, n_ranks: int, floor_ms: float, groups: dict[int, int] | None = None) -> list[int]:
    """The ranks whose own time exceeds their peers' median by more than `floor_ms` per step on average and
    beyond the noise (`significant`), or by work their peers do not do (`structural`), the largest excess
    first (`judged`)."""
    return judged(steps, n_ranks, floor_ms, groups)[0]


def judged(steps: list, n_ranks: int, floor_ms: float,
           groups: dict[int, int] | None = None) -> tuple[list[int], set[int]]:
    """(`standing_out`'s ranks, those of them that stand out by work their peers do not do). `groups`: rank ->
    the group of ranks that do the same work (a pipeline stage): a rank's peers are its group's other ranks;
    a rank alone in its group has none and never stands out (its stage is judged as a stage)."""
    d, z_ok = excess_own_time(steps, groups)
    extra = extra_work(steps, groups)
    over = [r for r in d if float(np.mean(d[r])) > floor_ms]
    struct = {r for r in over if structural(d[r], extra.get(r, []))}
    out = [r for r in over if r in struct or significant(np.array(d[r]), z_ok[r], n_ranks)]
    return sorted(out, key=lambda r: -float(np.mean(d[r]))), struct


def extra_work(steps: list, groups: dict[int, int] | None = None) -> dict[int, list[float]]:
    """Per rank with peers: per step, ms of the ops it runs more often than its group's other ranks
    (`work.extra_work_ms`)."""
    out: dict[int, list[float]] = {}
    for s in steps:
        ranks = s.si.ranks
        gid = np.array([(groups or {}).get(int(r), 0) for r in ranks])
        for r, x in zip(ranks.tolist(), extra_work_ms(s.si.work, ranks, gid), strict=True):
            out.setdefault(int(r), []).append(float(x))
    return out


def structural(excess: list[float], extra: list[float]) -> bool:
    """The rank's excess is work its peers do not do: in every step it runs ops they do not (counted, so the
    host's load cannot fake or hide it), and those take at least T.replay_extra_work_share of its mean excess."""
    return bool(extra) and min(extra) > 0 and \
        float(np.mean(extra)) >= T.replay_extra_work_share.value * float(np.mean(excess)) > 0


def noise_known(n_steps: int, n_ranks: int) -> bool:
    """Whether `significant` could test the noise (else only the floor applied)."""
    return n_ranks > 4 or n_steps >= 3


def own_time(s) -> np.ndarray:
    """Per rank of a step (aligned with its ranks): compute before its collectives, lane latency and tail (ms):
    what a what-if moves, not its waits."""
    ranks = s.si.ranks
    idx = pd.Index(ranks).get_indexer(s.si.rows["rank"].to_numpy())
    return (np.bincount(idx, weights=(s.p.c + s.p.q).astype(np.float64), minlength=len(ranks))
            + s.p.t.astype(np.float64)) / 1e6


def excess_own_time(steps: list, groups: dict[int, int] | None = None) -> tuple[dict[int, list[float]], dict[int, bool]]:
    """Per rank with peers (`standing_out`): its own time (`own_time`) minus the median of its peers', per
    step (ms); and whether it is a robust outlier (MAD z) among its group in some step."""
    d: dict[int, list[float]] = {}
    z_ok: dict[int, bool] = {}
    for s in steps:
        ranks = s.si.ranks
        own = own_time(s)
        gid = np.array([(groups or {}).get(int(r), 0) for r in ranks])
        for g in np.unique(gid):
            sel = np.flatnonzero(gid == g)
            if len(sel) < 2:
                continue
            mine = own[sel]
            med_all = float(np.median(mine))
            mad = float(np.median(np.abs(mine - med_all)))
            for i, r in zip(range(len(sel)), ranks[sel].tolist(), strict=True):
                # the median of the others: exact for a few ranks, the median of all beyond (the same to noise)
                med = float(np.median(np.delete(mine, i))) if len(sel) <= 16 else med_all
                d.setdefault(r, []).append(float(mine[i]) - med)
                out = mad > 0 and 0.6745 * (mine[i] - med_all) / mad >= T.slow_rank_robust_z.value
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
