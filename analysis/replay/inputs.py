"""The replay's inputs, read from the store for any format: per kept step, per rank, its collectives in the
order the rank issued them, with what the replay needs to move them.

For every collective row of `metrics.collectives.instances` (the one matching of collectives across ranks:
process group and sequence where the profile has them, else the order of the same kind on the same group):
  * `launch`: when the rank asked for it. Gloo runs collectives on worker threads and records each as a
    `gloo:*` span there; the k-th `c10d::<kind>` call on the issuing thread is the k-th `gloo:<kind>` span.
    Device collectives (NCCL / HCCL kernels, Ascend communication ops) are launched when they start.
  * `sync`: the issuing thread waited for it to end (its next op starts after the collective ended): its
    next work resumes at the end, not at the launch. A device stream is sync by construction.
  * `lane`: the thread or stream that runs it, so collectives on one lane wait for each other;
  * `waits`: it waits for the last member to start (every collective; a send / recv as measured, `p2p`).
Send / recv pairs (`p2p`) are instances of two members after the collectives.
Per rank and step the host step window (`steps`) gives where the step starts and ends.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..metrics.coll_groups import GROUPED_P2P
from ..metrics.collectives import instances
from ..metrics.metadata import decoded
from .p2p import SYNC_TOLERANCE_NS, p2p_rows
from .work import step_work


@dataclass
class StepInput:
    step: int
    ranks: np.ndarray            # ranks with a window in this step
    start: np.ndarray            # host step start per rank (ns)
    end: np.ndarray              # host step end per rank (ns)
    rows: pd.DataFrame           # rank, inst, launch, start, end, lane, sync, k (per rank in launch order)
    p2p_ms: dict[int, float] | None = None   # rank -> ms in unpaired send/recv this step (not replayed)
    offset: np.ndarray | None = None         # per rank: ns added to its own clock (`clock_offsets`); every
    #                                          time above is on the shared clock
    work: pd.DataFrame | None = None         # rank, sig, n, ms of the step's top-level host ops (`work.py`)


def _launches(sql) -> pd.DataFrame:
    """rank, coll, k, launch_ns, next_ns (start of the issuing thread's next op after the call) of every
    `c10d::<kind>` call (the issuing side of a gloo collective)."""
    return sql("""
        WITH l AS (
            SELECT rank, tid, start_ns, start_ns + dur_ns AS end_ns,
                   lower(regexp_replace(regexp_replace(substr(name, 7), '_+$', ''), '[^A-Za-z]', '', 'g')) AS coll
            FROM host_ops WHERE name LIKE 'c10d::%' AND coalesce(depth, 0) <= 2
        ), k AS (
            SELECT *, row_number() OVER (PARTITION BY rank, coll ORDER BY start_ns) AS k FROM l
        ), h AS (
            SELECT rank, tid, start_ns FROM host_ops WHERE name NOT LIKE 'c10d::%' AND name NOT LIKE 'gloo:%'
                   AND name NOT LIKE 'record_param_comms%' AND name NOT LIKE 'ProfilerStep#%'
        )
        SELECT k.rank, k.coll, k.k, k.start_ns AS launch_ns, h.start_ns AS next_ns
        FROM k ASOF LEFT JOIN h ON k.rank = h.rank AND k.tid = h.tid AND h.start_ns >= k.end_ns
    """)


def _rows(sql) -> tuple[pd.DataFrame, str | None]:
    df, source = instances(sql)
    if df.empty:
        return df, source
    df = df.assign(end_ns=df["start_ns"] + df["dur_ns"])
    # the Kineto reader copies each gloo span into comm_ops (so cross-rank checks see it): `instances` gives
    # such a row its span's host thread as its lane (gloo runs a rank's collectives on several threads at
    # once), and it is a host collective
    df.loc[(df["src"] == "comm_ops") & (df["lane"] >= 0), "src"] = "host_ops"
    host = df["src"] == "host_ops"
    df["launch_ns"] = df["start_ns"]
    df["sync"] = True
    if host.any():
        la = _launches(sql)
        if not la.empty:
            m = df[host].drop(columns=["launch_ns", "sync"]).reset_index() \
                .merge(la, on=["rank", "coll", "k"], how="left").set_index("index")
            got = m["launch_ns"].notna()
            launch = m["launch_ns"].where(got, m["start_ns"]).astype("int64")
            # a launch after the span began is another call matched by mistake: keep the start
            launch = launch.where(launch <= m["start_ns"], m["start_ns"])
            df.loc[m.index, "launch_ns"] = launch
            waited = m["next_ns"].isna() | (m["next_ns"] >= m["end_ns"] - SYNC_TOLERANCE_NS)
            df.loc[m.index, "sync"] = (~got) | waited
    return df, source


def _all_rows(sql, stages: dict[int, int] | None) -> tuple[pd.DataFrame, str | None, dict[int, dict[int, float]]]:
    """Collective rows, then send / recv pairs; and step -> rank -> ms in unpaired send / recv."""
    rows, source = _rows(sql)
    first = int(rows["inst"].max()) + 1 if not rows.empty else 1
    taken = not rows.empty and bool(rows["coll"].isin(GROUPED_P2P).any())
    pairs, left = p2p_rows(sql, first, stages, grouped_taken=taken)
    if not rows.empty:
        rows = rows.assign(waits=True)
    if not pairs.empty:
        rows = pd.concat([rows, pairs], ignore_index=True) if not rows.empty else pairs
        source = "+".join(sorted(set((source or "").split("+")) - {""} | {"p2p"}))
    unpaired: dict[int, dict[int, float]] = {}
    for (step, rank), ns in left.dropna(subset=["step"]).groupby(["step", "rank"])["dur_ns"].sum().items():
        unpaired.setdefault(int(step), {})[int(rank)] = float(ns) / 1e6
    return rows, source, unpaired


_COLS = ("rank", "inst", "launch_ns", "start_ns", "end_ns", "lane", "sync", "waits")


def step_inputs(sql, stages: dict[int, int] | None = None) -> tuple[list[StepInput], str | None]:
    """One StepInput per kept step that has collectives on 2+ ranks; the collectives' source. `stages`: rank ->
    pipeline stage, where known (peers of send / recv that the profile does not name)."""
    rows, source, p2p = _all_rows(sql, stages)
    steps = pd.concat([sql("SELECT rank, step, start_ns, end_ns FROM kept_step_windows"), coarse_windows(sql)],
                      ignore_index=True).sort_values(["step", "rank"], kind="stable").reset_index(drop=True)
    if steps.empty:
        return [], source
    off = clock_offsets(rows, hosts(sql))   # non-empty only where rows are
    if off:
        shift = rows["rank"].map(off).fillna(0).astype("int64")
        for c in ("launch_ns", "start_ns", "end_ns"):
            rows[c] = rows[c].astype("int64") + shift
        ws = steps["rank"].map(off).fillna(0).astype("int64")
        steps = steps.assign(start_ns=steps["start_ns"] + ws, end_ns=steps["end_ns"] + ws)
    out: list[StepInput] = []
    work = step_work(sql)
    by_step = {int(s): g for s, g in rows.dropna(subset=["step"]).groupby("step")} if not rows.empty else {}
    for s, w in steps.groupby("step"):
        r = by_step.get(int(s), pd.DataFrame(columns=list(_COLS)))
        r = r[r["rank"].isin(w["rank"])]
        # an instance replays only where every rank holding it in this step is in the step
        n = r.groupby("inst")["rank"].transform("size")
        r = r[n >= 2].sort_values(["rank", "launch_ns", "start_ns"], kind="stable").reset_index(drop=True)
        out.append(StepInput(int(s), w["rank"].to_numpy(np.int64), w["start_ns"].to_numpy(np.int64),
                             w["end_ns"].to_numpy(np.int64),
                             r[list(_COLS)],
                             p2p.get(int(s), {}),
                             np.array([off.get(int(x), 0) for x in w["rank"]], np.int64), work.get(int(s))))
    return out, source


def coarse_windows(sql) -> pd.DataFrame:
    """rank, step, start_ns, end_ns of the steps of a rank that has no step window of its own (an Ascend text
    export without trace_view.json: only its step table and communication files) but a step-table time (Stage)
    and timed collectives in the step: the step is taken to end at its last collective and to last its Stage
    time. Coarser than a traced rank (what it did after its last collective is unknown), but its collectives
    still link it to the other ranks."""
    return sql("""
        SELECT v.rank, v.step, max(c.start_ns + c.elapse_ns) - any_value(v.stage_ns) AS start_ns,
               max(c.start_ns + c.elapse_ns) AS end_ns
        FROM vendor_step_trace v JOIN comm_ops c ON c.rank = v.rank AND c.step = v.step
        WHERE v.stage_ns > 0 AND v.step IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM steps s WHERE s.rank = v.rank AND s.step = v.step)
        GROUP BY v.rank, v.step
    """)


def clock_offsets(rows: pd.DataFrame, host: dict[int, str]) -> dict[int, int]:
    """rank -> ns to add to its clock so that the collectives its host shares with the hosts aligned before it
    end together. Ranks on one host share its clock (their collectives' ends differ by the work itself: gloo's
    ring, a rank the OS descheduled), so only hosts are aligned: a collective ends at about the same moment on
    every member, so the median over the shared instances of (aligned host's end - this host's end), each
    host's end being its members' median, needs no clock synchronisation between hosts. From the host of the
    lowest rank outwards; send / recv do not end together and are not used; a host that shares no collective,
    and a rank whose host is not known, keep their own clock."""
    if rows.empty or len(set(host.values())) < 2:
        return {}
    coll = rows[rows["waits"].astype(bool) & ~rows["coll"].isin(["send", "recv"])] if "coll" in rows else rows
    coll = coll[coll["rank"].isin(list(host))]
    if coll.empty:
        return {}
    # relative to the earliest end: epoch ns do not fit a float's mantissa, the differences do
    coll = coll.assign(rel=coll["end_ns"].astype("int64") - int(coll["end_ns"].min()),
                       host=coll["rank"].map(host))
    ends = coll.groupby(["inst", "host"])["rel"].median().unstack("host")
    first = host[min(int(r) for r in coll["rank"])]
    names = [first, *sorted(h for h in ends.columns if h != first)]
    e = ends[names].to_numpy(np.float64)
    has = ~np.isnan(e)
    shift = np.zeros(len(names))
    aligned = np.zeros(len(names), bool)
    aligned[0] = True
    while not aligned.all():
        # the unaligned hosts that share an instance with an aligned one; each takes the first such host
        shared = has[:, ~aligned].T.astype(np.int32) @ has[:, aligned].astype(np.int32)
        got = np.flatnonzero(shared.any(axis=1))
        if not got.size:
            break
        todo, src = np.flatnonzero(~aligned), np.flatnonzero(aligned)
        for i in got:
            h, a = todo[i], src[int(np.argmax(shared[i] > 0))]
            both = has[:, h] & has[:, a]
            shift[h] = shift[a] + float(np.median(e[both, a] - e[both, h]))
        aligned[todo[got]] = True
    by_host = {names[i]: int(np.rint(v)) for i, v in enumerate(shift) if aligned[i]}
    return {r: by_host[h] for r, h in host.items() if by_host.get(h)}


def hosts(sql) -> dict[int, str]:
    """rank -> the host its trace says it ran on (Kineto's top-level `host_name`), where it says so."""
    return {r: name for r, name in decoded(sql, "host_name") if isinstance(name, str) and name}
