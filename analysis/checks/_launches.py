"""A rank's launch statistics, as host-bound reports them (HTA kernel launch statistics). Which call launched
which op, and when the host waited, is the view's `launch_lookup`."""

from __future__ import annotations

import numpy as np

from ..units import NS_PER_US
from ._common import LAUNCH_RE, by_value
from .base import CheckContext
from .evidence import Record


class LaunchStats(Record):
    """One rank's launch statistics over its kept steps (µs; None where nothing was measured)."""

    median_kernel_us: float | None
    launches_per_step: float
    median_launch_interval_us: float | None
    median_launch_call_us: float | None


def launch_stats(ctx: CheckContext, rank: int, steps: list[int]) -> LaunchStats:
    """Median kernel duration, launch-to-launch interval and launch call duration in the rank's steps."""
    marks = ",".join("?" * len(steps))
    k = ctx.profile.rows(f"SELECT median(dur_ns) FROM compute_kernels WHERE rank = ? AND step IN ({marks})",
                         [int(rank), *steps]) if steps else [(None,)]
    host = ctx.sql(f"SELECT name, tid, start_ns, dur_ns FROM host_api_calls WHERE rank = ? AND step IN ({marks}) "
                   "ORDER BY tid, start_ns", [int(rank), *steps])
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
