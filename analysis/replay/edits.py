"""What-ifs that take work out of a rank's compute windows: its host stalls gone, an op made faster.

Every compute window of the replay (`engine.windows`: before each collective, and the tail) is split by
`metrics.collectives.window_parts` into compute kernels, data loading, other host ops and untraced time.
  * no stalls on rank R: R's windows lose their data loading and their untraced time (the host thread ran no
    traced op: a sleep, a GC pause, Python between ops, a wait for a lock). Device compute and the host ops
    that issue it stay.
  * op NAME x F: the time of the ops named NAME inside every window (device kernels on a rank with a device,
    host ops on a host-only rank: CPU training) is scaled by F; the window shrinks or grows by the difference.
A window is never made shorter than 0. The change is taken from the measured window of each step, so each
step keeps its own variation.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd

from ..metrics.collectives import window_parts
from .engine import Params, windows
from .whatif import Step

_OVERLAP = "greatest(0, least(o.start_ns + o.dur_ns, w.w1) - greatest(o.start_ns, w.w0))"


def all_windows(steps: list[Step], ranks: list[int] | None) -> pd.DataFrame:
    """Every step's windows (of `ranks`, or all) with a unique id per window (`wid`) and its row index."""
    out = []
    for n, s in enumerate(steps):
        w = windows(s.si, s.p)
        w["row"] = np.r_[np.arange(len(s.si.rows)), np.full(len(s.si.ranks), -1)]
        w["n"] = n
        out.append(w if ranks is None else w[w["rank"].isin(ranks)])
    w = pd.concat(out, ignore_index=True)
    w["wid"] = np.arange(len(w))
    return w


def _cut(steps: list[Step], w: pd.DataFrame, cut_ns: np.ndarray):
    """Params per step with each window's time lowered by `cut_ns` (aligned with w; negative adds time)."""
    by_step: dict[int, list[tuple[int, int, int]]] = {}
    for n, row, rank, cut in zip(w["n"], w["row"], w["rank"], cut_ns, strict=True):
        by_step.setdefault(int(n), []).append((int(row), int(rank), int(cut)))
    index = {id(s): n for n, s in enumerate(steps)}

    def params(s: Step) -> Params:
        c, t = s.p.c.copy(), s.p.t.copy()
        for row, rank, cut in by_step.get(index[id(s)], []):
            if row >= 0:
                c[row] = max(int(c[row]) - cut, 0)
            else:
                i = int(np.flatnonzero(s.si.ranks == rank)[0])
                t[i] = max(int(t[i]) - cut, 0)
        return replace(s.p, c=c, t=t)
    return params


STALLS = ("data_loading", "untraced")


def window_split(cursor, w: pd.DataFrame) -> pd.DataFrame:
    """`window_parts` of the windows of `all_windows`, one row per window in w's order (0 where a window
    holds nothing)."""
    split = window_parts(cursor, w.assign(inst=w["wid"]))
    cursor.execute("DROP TABLE IF EXISTS win; DROP TABLE IF EXISTS base")
    return split.set_index("inst").reindex(w["wid"]).fillna(0)


def no_stalls(cursor, steps: list[Step], ranks: list[int], parts: tuple[str, ...] = STALLS):
    """Params with the ranks' `parts` of every compute window gone (window_parts: by default their data
    loading and untraced time, the host stalls)."""
    w = all_windows(steps, ranks)
    stall = window_split(cursor, w)[list(parts)].sum(axis=1)
    return _cut(steps, w, (stall.to_numpy() * 1e6).astype(np.int64))


def op_scaled(cursor, steps: list[Step], name: str, factor: float):
    """Params with the ops named `name` taking `factor` times their measured time in every window. Returns
    (params, ms of such ops per step on average)."""
    w = all_windows(steps, None)
    cursor.register("ow", w[["rank", "wid", "w0", "w1"]])
    try:
        got = cursor.execute(f"""
            WITH w AS (SELECT rank, wid, w0::BIGINT AS w0, w1::BIGINT AS w1 FROM ow),
                 dev AS (SELECT DISTINCT rank FROM compute_kernels),
                 d AS (SELECT w.wid, sum({_OVERLAP}) AS ns FROM w JOIN device_ops o ON o.rank = w.rank
                       AND o.start_ns < w.w1 AND o.start_ns + o.dur_ns > w.w0 WHERE o.name = ? GROUP BY ALL),
                 h AS (SELECT w.wid, sum({_OVERLAP}) AS ns FROM w JOIN host_ops o ON o.rank = w.rank
                       AND o.start_ns < w.w1 AND o.start_ns + o.dur_ns > w.w0
                       WHERE o.name = ? AND w.rank NOT IN (SELECT rank FROM dev) GROUP BY ALL)
            SELECT w.wid, coalesce(d.ns, 0) + coalesce(h.ns, 0) AS ns FROM w LEFT JOIN d USING (wid)
            LEFT JOIN h USING (wid) ORDER BY w.wid""", [name, name]).df()
    finally:
        cursor.unregister("ow")
    ns = got.set_index("wid").reindex(w["wid"])["ns"].fillna(0).to_numpy(np.float64)
    per_step = float(ns.sum()) / 1e6 / max(len(steps), 1)
    return _cut(steps, w, ((1.0 - factor) * ns).astype(np.int64)), per_step

