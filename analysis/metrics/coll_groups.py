"""The process group of a collective whose profile does not name it.

Gloo traces (CPU training) name no group for a collective, so `collectives.instances` matches the k-th
all_reduce of every rank, as if every collective ran on the world group. Where ranks run their collectives
in groups of their own (the data-parallel groups of the stages of a DP x PP grid; the tensor- and
data-parallel groups of a TP x DP grid, both in use on every rank), that merges collectives of different
groups into one. A real collective obeys one invariant on one clock: no member ends before every member has
started (each waits for the last to arrive). So, for the ungrouped rows only, each family of disjoint groups
that the ranks' `distributedInfo.pg_config` lists (groups of one size that split the ranks, taken in the
order the job made them) is tried as the matching: the k-th collective of a kind on the ranks of one group
of the family is one instance. The matching (the world, or a family) under which the fewest instances
break the invariant by more than CLOCK_TOLERANCE_NS is the profile's; the world on a tie. A collective that
breaks it under the profile's matching and keeps it under another (a grid's other dimension) takes that
one: each collective is matched by the grouping its own timing allows, the profile's where timing cannot
tell. The collectives one gloo process group runs (its worker threads take them in turn) are scored
together, so a collective whose own timing cannot tell follows the rest of its group.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd

from .metadata import decoded

# one rank's clock may seem ahead of another's by this on one shared clock (timer resolution, the profiler's
# own stamps): an end before a start by less is not evidence of a wrong match
CLOCK_TOLERANCE_NS = 100_000


def _made_order(name: object, ranks: tuple[int, ...]) -> tuple[int, str, tuple[int, ...]]:
    """Sort key of a group: the job's creation order (torch names groups 0, 1, 2, ... as it makes them), then
    its ranks."""
    text = str(name)
    return (int(text), "", ranks) if text.isdigit() else (1 << 62, text, ranks)


def families(sql) -> list[dict[int, int]]:
    """Each family of disjoint groups (one size, 2 <= size < world) that covers every rank listing a
    distributedInfo: rank -> index of its group in the family. Groups of one size that overlap belong to
    different families (a TP x DP grid has two of size 2 in 4 ranks): in the order the job made them, each
    group joins the first family it does not overlap."""
    named: dict[tuple[int, ...], object] = {}
    ranks: set[int] = set()
    world = 0
    for rank, v in decoded(sql, "distributedInfo"):
        if not isinstance(v, dict):
            continue
        ranks.add(int(rank))
        world = max(world, int(v.get("world_size") or 0))
        for g in v.get("pg_config") or []:
            rs = g.get("ranks") if isinstance(g, dict) else None
            if isinstance(rs, list) and rs and all(isinstance(r, int) for r in rs):
                named.setdefault(tuple(sorted(set(rs))), g.get("pg_name"))
    by_size: dict[int, list[list[tuple[int, ...]]]] = {}
    for group in sorted(named, key=lambda g: _made_order(named[g], g)):
        if not 2 <= len(group) < max(world, len(ranks)):
            continue
        fams = by_size.setdefault(len(group), [])
        home = next((f for f in fams if not set(group) & {r for g in f for r in g}), None)
        if home is None:
            fams.append([group])
        else:
            home.append(group)
    return [{r: i for i, g in enumerate(sorted(f)) for r in g}
            for _size, fs in sorted(by_size.items()) for f in fs if ranks <= {r for g in f for r in g}]


def _broken_by_instance(df: pd.DataFrame, key: np.ndarray) -> pd.Series:
    """Per instance (rows grouped by `key`): does a member end more than the tolerance before the last member
    starts?"""
    g = pd.DataFrame({"key": key, "start": df["start_ns"].to_numpy(np.int64),
                      "end": (df["start_ns"] + df["dur_ns"]).to_numpy(np.int64)}).groupby("key")
    return (g["start"].max() - g["end"].min()) > CLOCK_TOLERANCE_NS


def broken(df: pd.DataFrame, key: np.ndarray) -> int:
    """Instances (rows grouped by `key`) in which a member ends more than the tolerance before the last
    member starts."""
    return int(_broken_by_instance(df, key).sum())


def _broken_at(sub: pd.DataFrame, base: np.ndarray, part: np.ndarray) -> tuple[int, np.ndarray]:
    """(broken instances in all, for each row the broken instances at its position `base`) when the rows of
    one position are matched within the groups `part` names (-1: all together)."""
    key = np.char.add(np.char.add(base, "|"), part.astype(str))
    flags = _broken_by_instance(sub, key)
    inst = pd.DataFrame({"key": key, "base": base}).drop_duplicates("key")
    per_base = pd.Series(flags.reindex(inst["key"]).to_numpy(np.int64), index=inst["base"]).groupby(level=0).sum()
    return int(flags.sum()), per_base.reindex(base).to_numpy()


def _place_in_step(sub: pd.DataFrame, base: np.ndarray) -> np.ndarray:
    """Per row, its collective's place in the step: kind, count and its index among the rank's collectives
    of that kind in the step, the most common one over the instance's members (`base`). Steps repeat one
    schedule, so the collectives at one place are of one group; a row outside the steps is its own place."""
    j = sub.sort_values("start_ns").groupby(["rank", "step", "coll"], dropna=False).cumcount().reindex(sub.index)
    place = np.where(sub["step"].isna().to_numpy(), base,
                     (sub["coll"].astype(str) + "|" + sub["cnt"].astype(str) + "|@" + j.astype(str)).to_numpy())
    counts = pd.DataFrame({"b": base, "p": place}).value_counts().reset_index(name="n")
    mode = counts.sort_values(["b", "n", "p"], ascending=[True, False, True]).drop_duplicates("b")
    return pd.Series(mode["p"].to_numpy(), index=mode["b"].to_numpy()).reindex(base).to_numpy()


def _same_threads(sub: pd.DataFrame, place: np.ndarray) -> np.ndarray:
    """`place` with the places one process group runs joined into one (their union label): a gloo process
    group runs its collectives on worker threads of its own, which take its collectives in turn, so on a rank
    the collectives of one pool of threads (`_thread_pools`) are of one group, and the matching is chosen for
    them together (the two gradient buckets of a data-parallel group with each other, apart from the
    tensor-parallel group's). Rows without a thread (device collectives) keep their place."""
    lane = sub["lane"].to_numpy(np.int64) if "lane" in sub.columns else np.full(len(sub), -1)
    on = lane >= 0
    if not on.any():
        return place
    parent: dict[object, object] = {}
    pool = _thread_pools(sub[on])
    pairs = pd.DataFrame({"t": pool, "p": place[on]}).drop_duplicates()
    for _, group in pairs.groupby("t")["p"]:
        ps = [_root(parent, x) for x in group]
        for x in ps[1:]:
            if x != ps[0]:
                parent[x] = ps[0]
    return np.array([_root(parent, x) for x in place], dtype=object)


def _root(parent: dict, x: object) -> object:
    """Union-find: the representative of `x`."""
    while parent.get(x, x) != x:
        x = parent[x]
    return x


def _thread_pools(rows: pd.DataFrame) -> np.ndarray:
    """Per row (on a host thread): its rank's pool of threads, as "rank:thread". Two threads of a rank are one
    pool where they take the rank's collectives strictly in turn (A B A B ..., seen in the order the
    collectives start, among the collectives on those two threads): a process group's workers alternate; two
    groups' threads do not (a tensor-parallel group's dozen collectives per step against a data-parallel
    group's two buckets)."""
    out = np.empty(len(rows), dtype=object)
    order = rows.sort_values("start_ns", kind="stable")
    for rank, g in order.groupby("rank", sort=False):
        seq = g["lane"].to_numpy(np.int64)
        parent = {int(x): int(x) for x in np.unique(seq)}
        for a, b in {(int(x), int(y)) for x, y in itertools.pairwise(seq) if x != y}:
            both = seq[(seq == a) | (seq == b)]
            ra, rb = _root(parent, a), _root(parent, b)
            if (both[1:] != both[:-1]).all() and ra != rb:
                parent[rb] = ra
        labels = {x: f"{int(rank)}:{_root(parent, x)}" for x in parent}
        out[rows.index.get_indexer(g.index)] = [labels[int(x)] for x in seq]
    return out


def split_ungrouped(df: pd.DataFrame, sql) -> pd.DataFrame:
    """`df` (instances' rows with g, coll, cnt, k) with a column `part`: the index of the group of the chosen
    matching for ungrouped rows (g == ''), else -1 (the world, or a named group)."""
    df = df.assign(part=-1)
    loose = (df["g"] == "").to_numpy()
    if not loose.any():
        return df
    fams = families(sql)
    if not fams:
        return df
    sub = df[loose]
    base = sub[["coll", "cnt", "k"]].astype(str).agg("|".join, axis=1).to_numpy().astype(str)
    parts = [np.full(len(sub), -1)] + [sub["rank"].map(f).fillna(-1).astype(int).to_numpy() for f in fams]
    scored = [_broken_at(sub, base, part) for part in parts]
    pool = _same_threads(sub, _place_in_step(sub, base))
    # the profile's matching: fewest broken instances, the world (index 0) on a tie; then each place in the
    # step leaves it only for a matching under which fewer of its instances (over all steps) break
    order = sorted(range(len(parts)), key=lambda i: (scored[i][0], i))
    per_pos = np.stack([pd.Series(scored[i][1]).groupby(pool).transform("sum").to_numpy() for i in order])
    pick = np.asarray(order)[np.argmin(per_pos, axis=0)]
    chosen = np.stack(parts)[pick, np.arange(len(sub))]
    df.loc[loose, "part"] = chosen
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
