"""Match collectives across ranks and find who arrives last (stragglers by arrival).

Sources, one row per collective instance per rank (times on the rank's own clock, ns):
  * comm_ops whose op_type is a collective (NCCL/RCCL kernels from Kineto, HCCL ops from Ascend); its
    elapse is the whole op on that rank, waiting for peers included;
  * for a rank without comm_ops, its CPU-side collectives in host_ops (`gloo:all_reduce` ...): gloo runs
    collectives on the CPU and Kineto records them as user annotations spanning the wait.
Point-to-point ops (send/receive) are left out: their wait belongs to pipeline schedules (stage-imbalance).
NCCL's grouped send/recv kernel of old traces (op type sendrecv: an all-to-all) is matched like a collective
where every instance keeps the timing invariant (`coll_groups`).

Matching: the n-th instance of collective C in group G on one rank is the n-th on every rank of G. A
group name may be missing (legacy Ascend files, gloo), so ranks are also split by how many instances of
(G, C) they hold: ranks with different counts are in different groups (e.g. data-parallel groups of
different pipeline stages) and are never matched together; and, where the ranks list their groups, by the
group family under which the collectives keep their timing invariant (`coll_groups`).

Arrival: a collective ends at about the same moment on every rank, so a rank that arrives later waits
less; the last arriver has the shortest duration and every other rank waits about (its duration − the
shortest). This needs no cross-rank clock alignment. Per instance, the shortest duration x1 is tested as an
outlier among the n durations: n = 2 no test (only the wait threshold), 3-10 Dixon's Q = (x2−x1)/(xn−x1)
against its 95 % critical value, beyond 10 the 3-sigma rule on the other ranks' durations (msprof-analyze).
The wait it causes = the median of the other ranks' durations − x1 (ms); it must reach
T.straggler_min_wait_ms. All per-instance statistics are numpy over one sorted frame: no loop over ranks.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..thresholds import T
from ..timeline.intervals import merge
from .coll_groups import GROUPED_P2P, drop_unmatched_p2p, split_ungrouped

COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast", "alltoall", "alltoallv", "reduce",
               "barrier", "allgatherv", "reducescattervv", "gather", "scatter")

# Dixon r10 critical values, two-sided 95 % (Rorabacher 1991), n = 3..10.
_DIXON_Q95 = {3: 0.970, 4: 0.829, 5: 0.710, 6: 0.625, 7: 0.568, 8: 0.526, 9: 0.493, 10: 0.466}

_NORM = "lower(regexp_replace({c}, '[^A-Za-z]', '', 'g'))"


@dataclass
class RankArrival:
    """One rank's arrival record over its matched collectives."""

    rank: int
    matched: int                 # collective instances matched with at least one other rank
    last: int                    # instances where it arrived last, significantly
    share_last: float            # last / matched
    caused_ms: float             # union of the windows [arrival − others' median wait, arrival] (ms):
                                 # concurrent collectives (gloo buckets on two threads) wait for the same delay
    caused_per_step_ms: float    # caused_ms / the rank's steps
    steps: list[int] = field(default_factory=list)
    before: dict = field(default_factory=dict)   # what it did before arriving (see `before_arrival`)


@dataclass
class Arrivals:
    source: str | None           # comm_ops | host_ops (gloo) | comm_ops+host_ops | None
    instances: int               # matched collective instances
    ranks: dict[int, RankArrival]
    stragglers: list[int]        # ranks named late, worst first
    late: pd.DataFrame           # per significant late instance: inst, rank, step, start_ns, wait_ms
    rows: pd.DataFrame = field(default_factory=pd.DataFrame)   # every matched row (see `instances`)


def instances(sql) -> tuple[pd.DataFrame, str | None]:
    """rank, step, start_ns, dur_ns, src, lane (the host thread running it, also for a gloo span the reader
    copied into comm_ops; -1 on the device), coll (its
    normalized kind), k (its index among the rank's (group, kind)) and inst (matched instance id) of every
    collective seen on 2+ ranks."""
    coll_list = ",".join(f"'{c}'" for c in (*COLLECTIVES, *GROUPED_P2P))
    q = f"""
    WITH c AS (
        SELECT rank, step, coalesce(group_name, '') AS g, {_NORM.format(c='op_type')} AS coll, start_ns,
               elapse_ns AS dur_ns, 'comm_ops' AS src, coalesce(h.tid, -1)::BIGINT AS lane
        FROM comm_ops LEFT JOIN (SELECT rank, start_ns, any_value(tid) AS tid FROM host_ops
                                 WHERE name LIKE 'gloo:%' GROUP BY ALL) h USING (rank, start_ns)
        WHERE {_NORM.format(c='op_type')} IN ({coll_list})
        UNION ALL
        SELECT rank, step, '' AS g, {_NORM.format(c="substr(name, 6)")} AS coll, start_ns, dur_ns, 'host_ops' AS src,
               coalesce(tid, -1) AS lane
        FROM host_ops WHERE name LIKE 'gloo:%' AND rank NOT IN (SELECT DISTINCT rank FROM comm_ops)
    ), o AS (
        SELECT *, row_number() OVER (PARTITION BY rank, g, coll ORDER BY start_ns) AS k,
               count(*) OVER (PARTITION BY rank, g, coll) AS cnt FROM c
    )
    SELECT rank, step, start_ns, dur_ns, src, lane, g, coll, cnt, k FROM o
    """
    df = sql(q)
    if df.empty:
        return df, None
    df = split_ungrouped(df, sql)
    key = ["g", "coll", "cnt", "part", "k"]
    df["inst"] = df.groupby(key, sort=True).ngroup() + 1
    df = drop_unmatched_p2p(df)
    df = df.drop(columns=["g", "cnt", "part"])
    n = df.groupby("inst")["rank"].transform("size")
    df = df[n >= 2].reset_index(drop=True)
    srcs = sorted(set(df["src"]))
    return df, "+".join(srcs) if srcs else None


def _in_kept_steps(df: pd.DataFrame, sql) -> pd.DataFrame:
    """The instances whose every row lies in a kept step of its rank (the steps the other views count: a
    profiler's partial last step is left out everywhere); all of them where no step is kept or known."""
    if df.empty:
        return df
    kept = sql("SELECT rank, step FROM kept_step_windows")
    if kept.empty:
        return df
    k = kept.assign(rank=kept["rank"].astype("int64"), step=kept["step"].astype("int64"), ok=True)
    rows = df[["rank", "step"]].astype({"rank": "int64", "step": "Int64"})
    ok = rows.merge(k, on=["rank", "step"], how="left")["ok"].fillna(False).to_numpy(bool)
    whole = pd.Series(ok).groupby(df["inst"].to_numpy()).transform("all").to_numpy()
    return df[whole].reset_index(drop=True)


def per_instance(df: pd.DataFrame) -> pd.DataFrame:
    """Per instance: the last arriver, n, its wait deficit and whether it is a significant straggler."""
    d = df.sort_values(["inst", "dur_ns"], kind="stable").reset_index(drop=True)
    inst = d["inst"].to_numpy()
    dur = d["dur_ns"].to_numpy(np.float64) / 1e6
    starts = np.flatnonzero(np.r_[True, inst[1:] != inst[:-1]])
    n = np.diff(np.r_[starts, len(d)])
    x1, x2 = dur[starts], dur[starts + 1]
    xn = dur[starts + n - 1]
    # statistics of the other ranks (all but the shortest) per instance
    seg = np.repeat(np.arange(len(starts)), n)
    first = np.zeros(len(d), bool)
    first[starts] = True
    others = ~first
    cnt_o = np.bincount(seg[others], minlength=len(starts))
    mean_o = np.bincount(seg[others], weights=dur[others], minlength=len(starts)) / cnt_o
    var_o = np.bincount(seg[others], weights=dur[others] ** 2, minlength=len(starts)) / cnt_o - mean_o ** 2
    std_o = np.sqrt(np.clip(var_o, 0, None))
    # median of the others: sorted within each segment, the middle of positions 1..n-1
    lo = starts + 1 + (n - 2) // 2
    hi = starts + 1 + (n - 1) // 2
    med_o = (dur[lo] + dur[hi]) / 2
    wait = med_o - x1
    rng = xn - x1
    q = np.divide(x2 - x1, rng, out=np.zeros_like(rng), where=rng > 0)
    qcrit = np.array([_DIXON_Q95.get(int(k), 1.0) for k in np.minimum(n, 10)])
    z_ok = np.where(std_o > 0, (mean_o - x1) >= T.straggler_sigma.value * std_o, wait > 0)
    test = np.where(n == 2, True, np.where(n <= 10, q >= qcrit, z_ok))
    sig = test & (wait >= T.straggler_min_wait_ms.value)
    return pd.DataFrame({"inst": inst[starts], "n": n, "rank": d["rank"].to_numpy()[starts],
                         "step": d["step"].to_numpy()[starts], "start_ns": d["start_ns"].to_numpy()[starts],
                         "wait_ms": wait, "significant": sig})


def arrivals(sql, step_counts: dict[int, int], mean_step_ms: float | None) -> Arrivals:
    """Who arrives last at matched collectives, and which ranks are stragglers.

    step_counts: rank -> steps, used when no matched collective carries a step number.
    A rank is named when it arrives last, significantly, at >= T.straggler_last_share of its matched
    collectives and at >= T.straggler_chance_factor / n of them (n the ranks taking part), and the waits it
    causes per step reach T.slow_rank_min_excess_pct % of the mean step."""
    df, source = instances(sql)
    df = _in_kept_steps(df, sql)
    if df.empty:
        return Arrivals(source, 0, {}, [], pd.DataFrame())
    pi = per_instance(df)
    matched = df.groupby("rank").size()
    # per step = over the steps its matched collectives fall in (the profiler's last step, dropped from the
    # breakdown, still holds collectives); the caller's step count when none has a step
    seen = df.dropna(subset=["step"]).groupby("rank")["step"].nunique()
    late = pi[pi["significant"]]
    last = late.groupby("rank").size()
    caused = {int(r): float(np.sum(np.subtract(*windows(g)[::-1]))) / 1e6 for r, g in late.groupby("rank")}
    out: dict[int, RankArrival] = {}
    for rank, m in matched.items():
        r = int(rank)
        nl = int(last.get(rank, 0))
        c = caused.get(r, 0.0)
        per_step = c / max(int(seen.get(rank, 0)) or step_counts.get(r, 1), 1)
        steps = sorted({int(s) for s in late.loc[late["rank"] == rank, "step"].dropna()}) if nl else []
        out[r] = RankArrival(r, int(m), nl, round(nl / int(m), 3), round(c, 3), round(per_step, 3), steps)
    floor = (T.slow_rank_min_excess_pct.value / 100.0) * (mean_step_ms or 0.0)
    # the ranks taking part in a rank's collectives (median over them): chance alone makes it last at 1/n
    n_of = df.merge(pi[["inst", "n"]], on="inst").groupby("rank")["n"].median()
    named = [r for r, a in out.items() if a.last >= 1
             and a.share_last >= max(T.straggler_last_share.value,
                                     T.straggler_chance_factor.value / max(float(n_of.get(r, 2)), 1.0))
             and a.caused_per_step_ms >= max(floor, T.straggler_min_wait_ms.value)]
    named.sort(key=lambda r: -out[r].caused_per_step_ms)
    return Arrivals(source, int(pi.shape[0]), out, named, late.reset_index(drop=True), df)


def windows(late: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Disjoint windows (ns, the late rank's clock) in which the others waited for it: union of
    [arrival − wait, arrival] over its late instances."""
    w1 = late["start_ns"].to_numpy(np.int64)
    return merge(w1 - (late["wait_ms"].to_numpy(np.float64) * 1e6).astype(np.int64), w1)


_SKIP_HOST = ("ProfilerStep#%", "gloo:%", "c10d::%", "nccl:%", "record_param_comms%")
PARTS = ("compute_kernels", "data_loading", "host_ops", "untraced")
# ms of an op `o` inside the window `win`, and the host ops a window's parts leave out (step marks, collectives)
_OVERLAP_MS = "greatest(0, least(o.start_ns + o.dur_ns, win.w1) - greatest(o.start_ns, win.w0)) / 1e6"
_NOT_SKIPPED = " AND ".join(f"o.name NOT LIKE '{p}'" for p in _SKIP_HOST)


def lead_up(rows: pd.DataFrame, insts: np.ndarray) -> pd.DataFrame:
    """Per (rank, inst) of the given instances, the lead-up window on that rank (ns, its own clock): from
    the latest end of its earlier collectives (else its step start) to its arrival. Across the step
    boundary on purpose: work at the end of a step (after the optimizer) delays the next step's first
    collective. Collectives overlapping on two threads (gloo) leave an empty window."""
    r = rows.sort_values(["rank", "start_ns"], kind="stable").reset_index(drop=True)
    ends = (r["start_ns"] + r["dur_ns"]).groupby(r["rank"]).cummax()
    r["prev_end"] = ends.groupby(r["rank"]).shift(1)
    return r[r["inst"].isin(insts)][["rank", "inst", "step", "start_ns", "prev_end"]].reset_index(drop=True)


def window_parts(cursor, win: pd.DataFrame) -> pd.DataFrame:
    """Per window (rank, inst, w0, w1: ns on that rank's clock), what the rank did in it: compute kernels
    (device), data loading and the other outermost host ops, and untraced (window − the larger of compute and
    host), ms. Columns: rank, inst, window_ms and PARTS."""
    cursor.register("pw", win[["rank", "inst", "w0", "w1"]])
    cursor.execute("CREATE OR REPLACE TEMP TABLE win AS SELECT rank, inst, w0::BIGINT AS w0, w1::BIGINT AS w1 FROM pw")
    cursor.unregister("pw")
    dl = "(o.category = 'dataloader' OR o.name ILIKE '%dataloader%')"
    # outermost host ops: the least depth of the rank's ops once the step annotations are left out (a Kineto
    # ProfilerStep#N is depth 0 and holds everything else at depth 1)
    cursor.execute(f"CREATE OR REPLACE TEMP TABLE base AS SELECT o.rank, min(coalesce(o.depth, 0)) AS d "
                   f"FROM host_ops o WHERE o.rank IN (SELECT DISTINCT rank FROM win) AND {_NOT_SKIPPED} GROUP BY o.rank")
    df = cursor.execute(f"""
        WITH c AS (SELECT win.rank, win.inst, sum({_OVERLAP_MS}) AS ms FROM win JOIN compute_kernels o
                   ON o.rank = win.rank AND o.start_ns < win.w1 AND o.start_ns + o.dur_ns > win.w0 GROUP BY ALL),
             h AS (SELECT win.rank, win.inst, sum(CASE WHEN {dl} THEN {_OVERLAP_MS} ELSE 0 END) AS dl_ms,
                          sum(CASE WHEN {dl} THEN 0 ELSE {_OVERLAP_MS} END) AS host_ms
                   FROM win JOIN host_ops o ON o.rank = win.rank AND o.start_ns < win.w1
                   AND o.start_ns + o.dur_ns > win.w0 JOIN base b ON b.rank = o.rank
                   WHERE coalesce(o.depth, 0) = b.d AND {_NOT_SKIPPED} GROUP BY ALL)
        SELECT win.rank, win.inst, win.w0, win.w1, greatest(win.w1 - win.w0, 0) / 1e6 AS window_ms,
               coalesce(c.ms, 0) AS compute_kernels, coalesce(h.dl_ms, 0) AS data_loading,
               coalesce(h.host_ms, 0) AS host_ops
        FROM win LEFT JOIN c USING (rank, inst) LEFT JOIN h USING (rank, inst)""").df()
    df["untraced"] = (df["window_ms"] - np.maximum(df["compute_kernels"], df["data_loading"] + df["host_ops"])).clip(0)
    return df


def top_host_ops(cursor, rank: int, limit: int = 3) -> list[tuple[str, str, float]]:
    """The outermost host ops of `rank` that fill most of the windows `window_parts` registered last."""
    return cursor.execute(f"SELECT o.name, o.category, sum({_OVERLAP_MS}) AS ms FROM win JOIN host_ops o ON o.rank = win.rank "
                          f"AND o.start_ns < win.w1 AND o.start_ns + o.dur_ns > win.w0 JOIN base b ON b.rank = o.rank "
                          f"WHERE win.rank = ? AND coalesce(o.depth, 0) = b.d AND {_NOT_SKIPPED} "
                          f"GROUP BY ALL ORDER BY ms DESC LIMIT {int(limit)}", [rank]).fetchall()


def before_arrival(cursor, rank: int, arr: Arrivals, limit: int = 64) -> dict:
    """What `rank` did before its late arrivals, against the other ranks of the same collectives.

    For each of its late instances (up to `limit`) and every rank in it, the lead-up window (`lead_up`) is
    split by `window_parts`; per part: the late rank's ms per instance minus the median of the other ranks';
    `cause` = the part with the largest excess (what made it late)."""
    insts = arr.late.loc[arr.late["rank"] == rank, "inst"].to_numpy()[:limit]
    if insts.size == 0 or arr.rows.empty:
        return {}
    w = lead_up(arr.rows, insts)
    cursor.register("lw", w)
    win = cursor.execute("SELECT lw.rank, lw.inst, coalesce(lw.prev_end, s.start_ns, lw.start_ns)::BIGINT AS w0, "
                         "lw.start_ns::BIGINT AS w1 FROM lw LEFT JOIN steps s ON s.rank = lw.rank "
                         "AND s.step = lw.step").df()
    cursor.unregister("lw")
    df = window_parts(cursor, win)
    top = top_host_ops(cursor, rank)
    cursor.execute("DROP TABLE IF EXISTS win; DROP TABLE IF EXISTS base")
    return compare_parts(df, rank, top) | {"instances": int(insts.size)}


def compare_parts(df: pd.DataFrame, rank: int, top: list[tuple[str, str, float]]) -> dict:
    """The rank's mean parts per window against the median of the other ranks': excess per part, the cause."""
    mine = df[df["rank"] == rank][["window_ms", *PARTS]].mean()
    peers = df[df["rank"] != rank].groupby("rank")[["window_ms", *PARTS]].mean().median()
    excess = {k: float(mine[k] - peers[k]) for k in PARTS}
    cause = max(excess, key=lambda k: excess[k])
    return {"cause": cause, "window_ms": round(float(mine["window_ms"]), 3),
            "peer_window_ms": round(float(peers["window_ms"]), 3),
            "rank_ms": {k: round(float(mine[k]), 3) for k in PARTS},
            "peer_median_ms": {k: round(float(peers[k]), 3) for k in PARTS},
            "excess_ms": {k: round(v, 3) for k, v in excess.items()},
            "top_host_ops": [{"name": n, "category": c, "ms": round(float(m), 3)} for n, c, m in top]}
