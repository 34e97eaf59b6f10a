"""Interval arithmetic against a brute-force tick count (the definition), on random inputs."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stepdoctor.analysis.timeline.intervals import Coverage, merge

intervals = st.lists(st.tuples(st.integers(0, 200), st.integers(0, 60)), max_size=40)
windows = st.lists(st.tuples(st.integers(-10, 260), st.integers(0, 120)), min_size=1, max_size=10)


def brute(ivs: list[tuple[int, int]], w0: int, w1: int) -> int:
    covered = np.zeros(400, dtype=bool)
    for s, d in ivs:
        covered[s + 50: s + d + 50] = True
    lo, hi = max(w0 + 50, 0), max(w1 + 50, 0)
    return int(covered[lo:hi].sum())


@settings(max_examples=300, deadline=None)
@given(intervals, windows)
def test_within_matches_brute_force(ivs, wins):
    s = np.array([a for a, _ in ivs], dtype=np.int64)
    e = np.array([a + d for a, d in ivs], dtype=np.int64)
    cov = Coverage(s, e)
    w0 = np.array([a for a, _ in wins], dtype=np.int64)
    w1 = np.array([a + d for a, d in wins], dtype=np.int64)
    got = cov.within(w0, w1)
    for i in range(len(wins)):
        assert got[i] == brute(ivs, int(w0[i]), int(w1[i]))


def test_merge_joins_touching_and_nested():
    s, e = merge(np.array([0, 5, 10, 2, 30]), np.array([5, 8, 20, 3, 30]))
    assert s.tolist() == [0, 10] and e.tolist() == [8, 20]   # [0,5)+[5,8) touch; [2,3) nested; [30,30) empty
    assert Coverage(np.array([0, 10]), np.array([8, 20])).total == 18
