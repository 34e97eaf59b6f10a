"""A rank's own work and its waits per step, by the replay's windows: what rank-vs comparisons lead with.

Own work = the rank's compute windows (before each collective, and the tail: `engine.windows`), split by
`metrics.collectives.window_parts` into device compute, data loading, other host ops and untraced time. Its
waits = its step window minus its own work: the time it spent inside collectives and lane latency (waiting
for the others, and the transfers). Both are means over the replayed steps; where the null replay misses any
step the model speaks for none (as for slow-rank: `checks._replay_ranks`).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, Field

from ..metrics.collectives import PARTS
from ..store import Profile
from .edits import all_windows, window_split
from .job import replayed_for


class OwnWork(BaseModel):
    rank: int
    own_ms: float = Field(description="its compute windows per step (ms): what it did before asking the others")
    wait_ms: float = Field(description="its step window minus its own work (ms): inside collectives, waiting "
                                       "for the others and transferring")
    parts_ms: dict[str, float] = Field(description="own_ms split: compute_kernels, data_loading, host_ops, untraced")
    steps: int


def own_work(prof: Profile, ranks: list[int]) -> dict[int, OwnWork] | None:
    """Per rank of `ranks`, or None where the replay does not hold for this profile (nothing matched, a rank
    not replayed, or a step abstained)."""
    use = replayed_for(prof, ranks)
    if use is None:
        return None
    w = all_windows(use, ranks)
    cur = prof.cursor()
    try:
        parts = window_split(cur, w)
    finally:
        cur.close()
    out: dict[int, OwnWork] = {}
    for r in ranks:
        mine = (w["rank"] == r).to_numpy()
        n = len({int(x) for x in w.loc[mine, "n"]})
        if n == 0:
            return None
        span = [float(s.si.end[i] - s.si.start[i]) / 1e6 for s in use for i in np.flatnonzero(s.si.ranks == r)]
        own = float(parts["window_ms"].to_numpy()[mine].sum()) / n
        out[r] = OwnWork(rank=r, own_ms=round(own, 3), wait_ms=round(float(np.mean(span)) - own, 3),
                         parts_ms={k: round(float(parts[k].to_numpy()[mine].sum()) / n, 3) for k in PARTS}, steps=n)
    return out
