"""The breakdown of one rank's steps in integer ns, from its device ops: the one implementation.

The store's per-rank summaries call it where a rank is parsed (`store/summaries.py`), and
`metrics.breakdown` where it computes a rank's breakdown from its stored events (hta_compat); the
definitions of each quantity are in `metrics.breakdown`.
"""

from __future__ import annotations

import numpy as np

from .intervals import Coverage

Columns = dict[str, np.ndarray]


def step_breakdown_ns(starts: np.ndarray, ends: np.ndarray, is_comp: np.ndarray, is_comm: np.ndarray,
                      st: Columns, r_start: np.ndarray, r_elapse: np.ndarray, *, ascend: bool) -> Columns:
    """The breakdown of one rank's steps in integer ns (see `metrics.breakdown` for the definitions).

    `starts`, `ends`: the rank's device ops (ns; every op, windows decide what counts), with their
    compute / communication flags; `st`: its steps (step, start_ns, end_ns, d0_known, d1_known, d0, d1:
    the host window and the device window where known); `r_start`, `r_elapse`: its receive ops (the
    pipeline bubble). Returns, per step in the order of `st`: step, start_ns, end_ns, window_start_ns,
    window_end_ns (W), window_start_known, has_device, busy_ns, compute_ns, communication_ns,
    compute_or_comm_ns (|union(compute, comm) ∩ W|), bubble_ns and bubble_known."""
    both = is_comp | is_comm
    all_cov = Coverage(starts, ends)
    comp_cov = Coverage(starts[is_comp], ends[is_comp])
    comm_cov = Coverage(starts[is_comm], ends[is_comm])
    cc_cov = Coverage(starts[both], ends[both])
    has_device = starts.size > 0

    # integer ns throughout: epoch ns do not survive a float64 round trip (~256 ns steps at 1.7e18)
    h0 = np.asarray(st["start_ns"], dtype=np.int64)
    h1 = np.asarray(st["end_ns"], dtype=np.int64)
    d0_known = np.asarray(st["d0_known"], dtype=bool)
    d1_known = np.asarray(st["d1_known"], dtype=bool)
    # a step whose device window is unknown but whose rank has device data: the host window
    w0 = np.where(d0_known, np.asarray(st["d0"], dtype=np.int64), h0)
    w1 = np.where(d1_known, np.asarray(st["d1"], dtype=np.int64), h1)
    if ascend:
        w0, w1, d0_known = compute_comm_window(starts[both], ends[both], w0, w1, d0_known)
    n = h0.size
    # Ascend: torch_npu's Bubble is 0 without receives; elsewhere unknown unless there are some
    bubble = np.zeros(n, dtype=np.int64)
    bubble_known = np.full(n, (ascend and has_device) or r_start.size > 0, dtype=bool)
    if r_start.size:
        for i in range(n):
            m = (r_start >= h0[i]) & (r_start < h1[i])
            bubble[i] = int(r_elapse[m].sum())
    return {"step": np.asarray(st["step"], dtype=np.int64), "start_ns": h0, "end_ns": h1,
            "window_start_ns": w0, "window_end_ns": w1, "window_start_known": d0_known,
            "has_device": np.full(n, has_device, dtype=bool), "busy_ns": all_cov.within(w0, w1),
            "compute_ns": comp_cov.within(w0, w1), "communication_ns": comm_cov.within(w0, w1),
            "compute_or_comm_ns": cc_cov.within(w0, w1), "bubble_ns": bubble, "bubble_known": bubble_known}


def compute_comm_window(starts: np.ndarray, ends: np.ndarray, w0: np.ndarray, w1: np.ndarray,
                        known: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per step, [first start, last end) of the compute / communication ops that start in [w0, w1): the
    window of torch_npu's Overlap Analysis. Steps with no such op keep their window (and are not known)."""
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    lo = np.searchsorted(s, w0, side="left")
    hi = np.searchsorted(s, w1, side="left")
    n0, n1, k = w0.copy(), w1.copy(), known.copy()
    for i in np.flatnonzero(hi > lo).tolist():
        n0[i], n1[i] = s[lo[i]], e[lo[i]:hi[i]].max()
    k[hi <= lo] = False
    return n0, n1, k
