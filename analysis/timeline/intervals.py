"""Interval arithmetic on half-open [start, end) integer-ns intervals, vectorised with numpy.

The breakdown, overlap and idle metrics are all "how much of window W does a union of intervals
cover". Algorithm: merge the intervals once (sort by start, cut where start > running max end), build
the prefix sums of merged lengths, and answer covered(W) = C(W.end) − C(W.start) where C(t) is the
covered length up to t. That is O(n log n) to merge and O(log n) per window, whatever the overlap.
"""

from __future__ import annotations

import numpy as np


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of intervals -> disjoint sorted (starts, ends). Empty intervals are dropped."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_max = np.maximum.accumulate(e)
    # a new merged interval starts where this start is beyond every earlier end
    new = np.empty(s.size, dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_max[:-1]
    idx = np.flatnonzero(new)
    ms = s[idx]
    me = np.append(run_max[idx[1:] - 1], run_max[-1])
    return ms, me


class Coverage:
    """Covered length of a merged interval set inside arbitrary windows."""

    def __init__(self, starts: np.ndarray, ends: np.ndarray) -> None:
        self.s, self.e = merge(starts, ends)
        self.cum = np.concatenate(([0], np.cumsum(self.e - self.s)))

    def upto(self, t: np.ndarray) -> np.ndarray:
        """Covered length in (-inf, t] for each t."""
        t = np.asarray(t, dtype=np.int64)
        if self.s.size == 0:
            return np.zeros(t.shape, dtype=np.int64)
        i = np.searchsorted(self.s, t, side="right")
        prev_end = np.where(i > 0, self.e[np.maximum(i - 1, 0)], 0)
        overshoot = np.where(i > 0, np.maximum(prev_end - t, 0), 0)
        return self.cum[i] - overshoot

    def within(self, w0: np.ndarray, w1: np.ndarray) -> np.ndarray:
        """Covered length inside each window [w0, w1)."""
        return self.upto(w1) - self.upto(w0)

    @property
    def total(self) -> int:
        return int(self.cum[-1])


def union_of(*pairs: tuple[np.ndarray, np.ndarray]) -> Coverage:
    return Coverage(np.concatenate([p[0] for p in pairs]) if pairs else np.empty(0, np.int64),
                    np.concatenate([p[1] for p in pairs]) if pairs else np.empty(0, np.int64))
