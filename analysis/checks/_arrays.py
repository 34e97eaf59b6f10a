"""Numpy column helpers the checks use instead of pandas groupby / row access: query results as plain
arrays, ranks read one query for all or one per rank, ranks cut into batches by their rows. The pure array
helpers (rows split by rank, grouped sums and shifts, predicates per distinct value) live in
`analysis/timeline/arrays.py` and are re-exported here."""

from __future__ import annotations

import numpy as np

from ..timeline.arrays import (  # noqa: F401  (the checks import these from here)
    by_rank,
    by_value,
    group_cumsum,
    group_shift,
    map_by_value,
    rank_slices,
    series_sum,
)
from .base import CheckContext


def columns(ctx: CheckContext, query: str, params: list | None = None) -> dict[str, np.ndarray]:
    """Query result as plain numpy columns, without pandas: NULL becomes None in text (object) columns and
    NaN in numeric ones (then float64). Row-wise pandas access dominated several checks' time."""
    out: dict[str, np.ndarray] = {}
    for name, col in ctx.profile.arrays(query, params).items():
        if isinstance(col, np.ma.MaskedArray):
            # (filled(None) would fill text with numpy's default fill value, '?', not None)
            col = np.where(np.ma.getmaskarray(col), None, np.ma.getdata(col)) if col.dtype == object \
                else col.astype("float64").filled(np.nan)
        out[name] = np.asarray(col)
    return out


def rank_ordered(ctx: CheckContext, ranks: list[int], one_query: str, all_query: str, keys: tuple[str, ...],
                 extra: list | None = None) -> dict[int, dict[str, np.ndarray]]:
    """Per rank, the columns of `one_query` (a per-rank query: `rank = ?` first, then `extra` parameters,
    ORDER BY `keys`), fetched for all ranks at once by `all_query` (the same rows for `rank IN (...)`, ranks
    first in its parameters, ORDER BY rank and then `keys`; it selects rank and the keys).

    Where a rank's keys are all distinct, the sort leaves one possible order, so its slice of the common
    result is exactly what its own query returns. DuckDB does not order rows with equal keys the same way in
    both queries, so a rank with equal keys is fetched by its own query (rare: equal start times)."""
    extra = list(extra or [])
    a = columns(ctx, all_query, [*(int(r) for r in ranks), *extra])
    rank = a["rank"].astype(np.int64)
    tie = np.zeros(rank.size, dtype=bool)
    if rank.size > 1:
        same = rank[1:] == rank[:-1]
        for k in keys:
            v = a[k]
            eq = v[1:] == v[:-1]
            if v.dtype.kind == "f":
                eq |= np.isnan(v[1:]) & np.isnan(v[:-1])   # NULLs sort together
            same &= eq
        tie[1:] = same
    slices = {r: (i, j) for r, i, j in rank_slices(rank)}
    out: dict[int, dict[str, np.ndarray]] = {}
    for r in ranks:
        i, j = slices.get(int(r), (0, 0))
        if tie[i:j].any():
            out[int(r)] = columns(ctx, one_query, [int(r), *extra])
        else:
            out[int(r)] = {k: v[i:j] for k, v in a.items()}
    return out


def rank_batches(ctx: CheckContext, ranks: list[int], table: str, max_rows: int | None = None) -> list[list[int]]:
    """`ranks` cut into consecutive batches of at most `max_rows` rows of `table` each (a rank with more rows
    is a batch of its own), in the order given. A check that reads event rows for many ranks reads them a
    batch at a time, so what it holds follows the batch, not the cluster's events. One count query per table
    and context. Default `max_rows`: BATCH_OPS, the breakdown's batch."""
    from ..metrics.breakdown import BATCH_OPS

    limit = BATCH_OPS if max_rows is None else max_rows
    counts = ctx.view.rows_per_rank(table)
    batches: list[list[int]] = []
    rows = 0
    for r in ranks:
        n = counts.get(int(r), 0)
        if not batches or rows + n > limit:
            batches.append([])
            rows = 0
        batches[-1].append(r)
        rows += n
    return batches
