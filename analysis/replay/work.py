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


def extra_work_ms(work: pd.DataFrame | None, ranks: np.ndarray, gid: np.ndarray) -> np.ndarray:
    """Per rank of a step (aligned with `ranks`; `gid` its group of peers): ms of the ops it runs more often
    than the median of its group's other ranks, each extra op at its own mean time; 0 alone in its group or
    where the step has no work table."""
    out = np.zeros(len(ranks))
    if work is None or work.empty:
        return out
    counts = work.pivot_table(index="sig", columns="rank", values="n", aggfunc="sum", fill_value=0)
    ms = work.pivot_table(index="sig", columns="rank", values="ms", aggfunc="sum", fill_value=0.0)
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
            out[int(np.flatnonzero(ranks == r)[0])] = float((extra * each).sum())
    return out
