"""The process group of a collective whose profile does not name it.

Gloo traces (CPU training) name no group for a collective, so `collectives.instances` matches the k-th
all_reduce of every rank, as if every collective ran on the world group. Where ranks run their collectives
in groups of their own (the data-parallel groups of the stages of a DP x PP grid), that merges collectives
of different groups into one. A real collective obeys one invariant on one clock: no member ends before
every member has started (each waits for the last to arrive). So, for the ungrouped rows only, each family
of disjoint groups the ranks' `distributedInfo.pg_config` lists (the groups of one description and size that
split the ranks) is tried as the matching: the k-th collective of a kind on the ranks of one group of the
family is one instance. The matching (the world, or a family) under which the fewest instances break the
invariant by more than CLOCK_TOLERANCE_NS is kept; the world on a tie.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .metadata import decoded

# one rank's clock may seem ahead of another's by this on one shared clock (timer resolution, the profiler's
# own stamps): an end before a start by less is not evidence of a wrong match
CLOCK_TOLERANCE_NS = 100_000


def families(sql) -> list[dict[int, int]]:
    """Each family of disjoint groups (same description and size, 2 <= size < world) that covers every rank
    listing a distributedInfo: rank -> index of its group in the family."""
    groups: dict[tuple[str, int], set[tuple[int, ...]]] = {}
    ranks: set[int] = set()
    world = 0
    for rank, v in decoded(sql, "distributedInfo"):
        if not isinstance(v, dict):
            continue
        ranks.add(int(rank))
        world = max(world, int(v.get("world_size") or 0))
        for g in v.get("pg_config") or []:
            rs = g.get("ranks") if isinstance(g, dict) else None
            if isinstance(rs, list) and all(isinstance(r, int) for r in rs):
                groups.setdefault((str(g.get("pg_desc")), len(rs)), set()).add(tuple(sorted(rs)))
    out = []
    for (_desc, size), gs in sorted(groups.items()):
        if not 2 <= size < max(world, len(ranks)):
            continue
        flat = [r for g in gs for r in g]
        if len(flat) != len(set(flat)) or not ranks <= set(flat):
            continue
        out.append({r: i for i, g in enumerate(sorted(gs)) for r in g})
    return out


def broken(df: pd.DataFrame, key: np.ndarray) -> int:
    """Instances (rows grouped by `key`) in which a member ends more than the tolerance before the last
    member starts."""
    g = pd.DataFrame({"key": key, "start": df["start_ns"].to_numpy(np.int64),
                      "end": (df["start_ns"] + df["dur_ns"]).to_numpy(np.int64)}).groupby("key")
    gap = g["start"].max() - g["end"].min()
    return int((gap > CLOCK_TOLERANCE_NS).sum())


def split_ungrouped(df: pd.DataFrame, sql) -> pd.DataFrame:
    """`df` (instances' rows with g, coll, cnt, k) with a column `part`: the index of the group of the best
    family for ungrouped rows (g == ''), else -1."""
    df = df.assign(part=-1)
    loose = (df["g"] == "").to_numpy()
    if not loose.any():
        return df
    fams = families(sql)
    if not fams:
        return df
    sub = df[loose]
    base = sub[["coll", "cnt", "k"]].astype(str).agg("|".join, axis=1).to_numpy()
    best, best_n = None, broken(sub, base)
    for fam in fams:
        part = sub["rank"].map(fam).fillna(-1).astype(int).to_numpy()
        n = broken(sub, np.char.add(np.char.add(base.astype(str), "|"), part.astype(str)))
        if n < best_n:
            best, best_n = part, n
    if best is not None:
        df.loc[loose, "part"] = best
    return df


P2P_BROKEN_SHARE = 0.05   # instances of a grouped send/recv kind allowed to break the invariant (clocks)
# NCCL's grouped point-to-point kernel (ncclKernel_SendRecv): what an all-to-all is in 2021-2023 traces, which
# name no collective. Matched in order like a collective only where the timing invariant holds
# (`drop_unmatched_p2p`); else it is point-to-point of unknown peers.
GROUPED_P2P = ("sendrecv",)


def drop_unmatched_p2p(df: pd.DataFrame) -> pd.DataFrame:
    """`df` without the rows of a grouped send/recv kind (`collectives.GROUPED_P2P`) whose matching in order
    breaks the invariant in more than P2P_BROKEN_SHARE of its instances: those kernels pair ranks two by two
    (a pipeline), not all with all (an all-to-all), and the order does not match them."""
    for kind in GROUPED_P2P:
        sel = (df["coll"] == kind).to_numpy()
        if not sel.any():
            continue
        sub = df[sel]
        n = sub["inst"].nunique()
        if broken(sub, sub["inst"].to_numpy()) > P2P_BROKEN_SHARE * n:
            df = df[~sel]
    return df
