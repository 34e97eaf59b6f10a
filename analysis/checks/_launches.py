"""The host's launch and synchronize calls per rank, as host-bound reads them (HTA kernel launch statistics).

A launch links a device op to the host call that queued it by correlation id; a synchronize call's end tells
when the host had waited for the device by itself.
"""

from __future__ import annotations

import numpy as np

from ..units import NS_PER_US
from ._common import HOST_API_CATEGORIES, LAUNCH_RE, SYNC_RE, by_value, columns, rank_slices
from .base import CheckContext
from .evidence import Record


class LaunchStats(Record):
    """One rank's launch statistics over its kept steps (µs; None where nothing was measured)."""

    median_kernel_us: float | None
    launches_per_step: float
    median_launch_interval_us: float | None
    median_launch_call_us: float | None


def host_calls(ctx: CheckContext, ranks: list[int]) -> dict[int, dict[str, np.ndarray]]:
    """Per rank, from the ranks' runtime / CANN API calls (one query; their order does not matter):
    `launch_ids` / `launch_first`, each correlation id's earliest host launch as sorted keys / values for a
    vectorised lookup, and `sync_end`, the sorted ends of the synchronize calls. Built by sorts over all
    ranks (rank first), not per rank: the per-rank sorts, uniques and name tests were this check's cost on
    many ranks."""
    marks = ",".join("?" * len(ranks))
    a = columns(ctx, "SELECT rank, name, start_ns, dur_ns, correlation_id FROM host_ops WHERE rank IN "
                     f"({marks}) AND category IN {HOST_API_CATEGORIES}", [int(r) for r in ranks])
    rank = a["rank"].astype(np.int64)
    hc, hs = a["correlation_id"], a["start_ns"]
    ok = ~np.isnan(hc) if hc.dtype.kind == "f" else np.ones(hc.size, dtype=bool)
    lr, lc, ls = rank[ok], hc[ok].astype(np.int64), hs[ok].astype(np.int64)
    order = np.lexsort((ls, lc, lr))
    lr, lc, ls = lr[order], lc[order], ls[order]
    first = np.ones(lr.size, dtype=bool)     # the earliest launch of each (rank, id)
    first[1:] = (lr[1:] != lr[:-1]) | (lc[1:] != lc[:-1])
    lr, lc, ls = lr[first], lc[first], ls[first]
    is_sync = by_value(a["name"], lambda n: SYNC_RE.match(str(n)))
    sr = rank[is_sync]
    se = hs[is_sync].astype(np.int64) + a["dur_ns"][is_sync].astype(np.int64)
    order = np.lexsort((se, sr))
    sr, se = sr[order], se[order]
    out = {int(r): no_calls() for r in np.unique(rank)}
    for r, i, j in rank_slices(lr):
        out[r]["launch_ids"], out[r]["launch_first"] = lc[i:j], ls[i:j]
    for r, i, j in rank_slices(sr):
        out[r]["sync_end"] = se[i:j]
    return out


def no_calls() -> dict[str, np.ndarray]:
    """A rank without API calls: no op has a launch, so its gaps count as `unknown`."""
    return {"launch_ids": np.empty(0, np.int64), "launch_first": np.empty(0, np.int64),
            "sync_end": np.empty(0, np.int64)}


def launch_stats(ctx: CheckContext, rank: int, steps: list[int]) -> LaunchStats:
    """Median kernel duration, launch-to-launch interval and launch call duration in the rank's steps."""
    marks = ",".join("?" * len(steps))
    k = ctx.profile.rows(f"SELECT median(dur_ns) FROM device_ops WHERE rank = ? AND step IN ({marks}) "
                         "AND category = 'compute'", [int(rank), *steps]) if steps else [(None,)]
    host = ctx.sql(f"SELECT name, tid, start_ns, dur_ns FROM host_ops WHERE rank = ? AND step IN ({marks}) AND "
                   f"category IN {HOST_API_CATEGORIES} ORDER BY tid, start_ns", [int(rank), *steps])
    launches = host[by_value(host["name"], lambda n: LAUNCH_RE.match(str(n)))]
    gaps: list[np.ndarray] = []
    for _, g in launches.groupby("tid", dropna=False):
        if len(g) > 1:
            gaps.append(np.diff(g["start_ns"].to_numpy(dtype=np.int64)))
    gap = np.concatenate(gaps) if gaps else np.empty(0)
    med_k = k[0][0]
    return LaunchStats(
        median_kernel_us=None if med_k is None or med_k != med_k else round(float(med_k) / NS_PER_US, 3),
        launches_per_step=round(len(launches) / max(len(steps), 1), 1),
        median_launch_interval_us=round(float(np.median(gap)) / NS_PER_US, 3) if gap.size else None,
        median_launch_call_us=(round(float(launches["dur_ns"].median()) / NS_PER_US, 3)
                               if len(launches) else None),
    )
