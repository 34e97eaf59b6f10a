"""The work a rank does that its peers do not: counted, not timed.

On a shared or oversubscribed host the time of every op moves with what the other ranks run beside it, so a
rank's extra compute can hide in the noise of its own time (`noise.excess_own_time`). The ops a step issues do
not move: a rank whose step runs an op (by name and input shapes) more often than its peers runs it, in every
step, does work they do not, whatever the clocks say. Read where the profile records the nesting of host ops:
the ops one level under the step annotation (depth 1), without the step marks and the communication calls
(those are the replay's collectives).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

_SKIP = ("ProfilerStep#%", "gloo:%", "c10d::%", "nccl:%", "record_param_comms%")


def step_work(sql) -> dict[int, pd.DataFrame]:
    """step -> rank, sig (name and input shapes), n (ops), ms (their summed time) of the ops one level under
    the step annotation; {} where the profile records no nesting."""
    skip = " AND ".join(f"name NOT LIKE '{p}'" for p in _SKIP)
    df = sql(f"""
        SELECT step, rank, name || '|' || coalesce(input_dims, '') AS sig, count(*) AS n, sum(dur_ns) / 1e6 AS ms
        FROM host_ops WHERE depth = 1 AND step IS NOT NULL AND {skip}
        GROUP BY ALL
    """)
    return {int(s): g.drop(columns="step").reset_index(drop=True) for s, g in df.groupby("step")}


def extra_calls(work: pd.DataFrame, ranks: np.ndarray, gid: np.ndarray,
                by: str = "sig") -> tuple[pd.Index, dict[int, tuple[np.ndarray, np.ndarray]]]:
    """(the ops, rank -> (calls of each op beyond the median of its group's other ranks, those calls' ms, each
    at the rank's own mean time of the op)) of one step's work table; ops keyed by `by`: "sig" (name and input
    shapes) or "op" (the name alone). Ranks alone in their group (`gid`, aligned with `ranks`) are absent."""
    keys = work["sig"] if by == "sig" else work["sig"].str.split("|").str[0]
    w = work.assign(key=keys.to_numpy())
    counts = w.pivot_table(index="key", columns="rank", values="n", aggfunc="sum", fill_value=0)
    ms = w.pivot_table(index="key", columns="rank", values="ms", aggfunc="sum", fill_value=0.0)
    out: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for g in np.unique(gid):
        sel = [int(r) for r in ranks[gid == g]]
        if len(sel) < 2:
            continue
        c = counts.reindex(columns=sel, fill_value=0).to_numpy(np.float64)
        t = ms.reindex(columns=sel, fill_value=0.0).to_numpy(np.float64)
        for j, r in enumerate(sel):
            med = np.median(np.delete(c, j, axis=1), axis=1)
            extra = np.maximum(c[:, j] - med, 0.0)
            each = np.divide(t[:, j], c[:, j], out=np.zeros(len(c)), where=c[:, j] > 0)
            out[r] = (extra, extra * each)
    return counts.index, out


def extra_work_ms(work: pd.DataFrame | None, ranks: np.ndarray, gid: np.ndarray) -> np.ndarray:
    """Per rank of a step (aligned with `ranks`; `gid` its group of peers): ms of the ops it runs more often
    than the median of its group's other ranks (`extra_calls` by name and shapes); 0 alone in its group or
    where the step has no work table."""
    out = np.zeros(len(ranks))
    if work is None or work.empty:
        return out
    _, extra = extra_calls(work, ranks, gid)
    for i, r in enumerate(ranks.tolist()):
        if int(r) in extra:
            out[i] = float(extra[int(r)][1].sum())
    return out
