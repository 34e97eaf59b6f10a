"""Numpy column helpers over rows split by rank: rows split by rank with one sort, per-group running sums and
shifts, predicates evaluated once per distinct value. Each gives exactly what the pandas expression it
replaces gives (same values, same order)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pandas as pd


def series_sum(values: np.ndarray) -> Any:
    """What pandas' Series.sum() gives for these values, without building a Series: NaN counts as 0 and the
    rest is numpy's (pairwise) sum over the values in their order, so the float result is the same bits."""
    v = np.asarray(values)
    if v.dtype.kind == "f":
        nan = np.isnan(v)
        if nan.any():
            v = np.where(nan, 0.0, v)
    return v.sum()


def group_cumsum(keys: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Running sum of `values` within each group of equal `keys`, in row order (pandas groupby().cumsum())."""
    order = np.argsort(keys, kind="stable")
    k, v = keys[order], values[order]
    cs = np.cumsum(v)
    start = np.ones(k.size, dtype=bool)
    start[1:] = k[1:] != k[:-1]
    base = np.maximum.accumulate(np.where(start, np.arange(k.size), 0))
    out = np.empty_like(cs)
    out[order] = cs - (cs[base] - v[base])
    return out


def group_shift(keys: np.ndarray, values: np.ndarray, fill: Any) -> np.ndarray:
    """The previous row's value within each group of equal `keys` (row order), `fill` for a group's first row
    (pandas groupby().shift(1))."""
    order = np.argsort(keys, kind="stable")
    k, v = keys[order], values[order]
    prev = np.empty(v.size, dtype=np.result_type(v.dtype, np.asarray(fill).dtype))
    prev[:] = fill
    same = np.zeros(k.size, dtype=bool)
    same[1:] = k[1:] == k[:-1]
    prev[1:][same[1:]] = v[:-1][same[1:]]
    out = np.empty_like(prev)
    out[order] = prev
    return out


def by_value(values: Any, pred: Callable[[Any], Any]) -> np.ndarray:
    """bool(pred(v)) for each element of `values`, evaluated once per distinct value: names repeat (a few
    hundred distinct among tens of thousands of ops), so regex tests per row cost far more than per name."""
    vals = np.asarray(values, dtype=object)
    codes, uniques = pd.factorize(vals, use_na_sentinel=True)
    res = np.fromiter((bool(pred(u)) for u in uniques), dtype=bool, count=len(uniques))
    out = res[codes] if len(uniques) else np.zeros(len(vals), dtype=bool)
    na = codes < 0
    if na.any():   # None / NaN: judged one by one, exactly as given
        out[na] = [bool(pred(v)) for v in vals[na]]
    return out


def map_by_value(values: Any, fn: Callable[[Any], Any]) -> np.ndarray:
    """fn(v) for each element of `values` as an object array, computed once per distinct value (None / NaN
    one by one, exactly as given)."""
    vals = np.asarray(values, dtype=object)
    codes, uniques = pd.factorize(vals, use_na_sentinel=True)
    res = np.empty(len(uniques) + 1, dtype=object)
    res[:-1] = [fn(u) for u in uniques]
    out = res[codes]
    na = codes < 0
    if na.any():
        out[na] = [fn(v) for v in vals[na]]
    return out


def by_rank(rank: Any) -> tuple[np.ndarray, list[tuple[int, int, int]]]:
    """(a stable order sorting `rank`, the `rank_slices` of the sorted ranks): rows split by rank with one
    sort, each rank's rows in their original order, so sums over a slice add the same values in the same
    order as a pandas sum per rank (one sort instead of a mask or groupby per rank)."""
    rank = np.asarray(rank, dtype=np.int64)
    order = np.argsort(rank, kind="stable")
    return order, rank_slices(rank[order])


def rank_slices(rank: np.ndarray) -> list[tuple[int, int, int]]:
    """(rank, first row, end row) of each run of equal ranks in a rank column sorted by rank."""
    if rank.size == 0:
        return []
    cut = np.flatnonzero(np.diff(rank)) + 1
    starts = np.concatenate(([0], cut))
    ends = np.concatenate((cut, [rank.size]))
    return [(int(rank[i]), int(i), int(j)) for i, j in zip(starts, ends, strict=True)]
