"""Helpers shared by the check modules: kept steps per rank, step windows, text for ranks/steps, the device
timeline, host stalls.

How a check queries the store (one way per purpose):
- a frame the check filters, groups or joins with pandas: `ctx.sql` (most checks);
- many rows worked on with numpy (device or host ops of every rank): `columns(ctx, ...)`, numpy columns
  with None / NaN for NULL, split per rank with `rank_slices` / `by_rank`;
- one value or a handful of rows: `ctx.profile.rows`.
Values always travel as parameters: an `IN (...)` list is `placeholders(values)` in the SQL text and the
values in the parameter list, never formatted into the SQL. One query for all ranks, split here, rather than
one per rank.
"""

from __future__ import annotations

from collections.abc import Sized
from typing import Any

import numpy as np
import pandas as pd

from ..text import ranks_text, steps_text  # noqa: F401 - the checks take them from here
from ..timeline.names import LAUNCH_RE, SYNC_RE  # noqa: F401 - the checks take them from here
from ..units import NS_PER_MS
from ._arrays import (  # noqa: F401  (the checks import these from here)
    by_rank,
    by_value,
    columns,
    group_cumsum,
    group_shift,
    map_by_value,
    rank_batches,
    rank_ordered,
    rank_slices,
    series_sum,
)
from .base import CheckContext


def placeholders(values: Sized) -> str:
    """'?,?,?': the placeholders of an SQL `IN (...)` list of len(values) parameters; the values themselves
    always go in the parameter list."""
    return ",".join("?" * len(values))


# (rank, step) pairs are matched as one int64 code: rank in the high 32 bits, step in the low ones
STEP_BITS = 32


def float_steps(step: Any) -> np.ndarray:
    """Steps as float64, NaN where unknown: a numeric (or masked numeric) column as it is, anything else as
    `pd.to_numeric(errors="coerce")` reads it. The checks call this per rank, so the common numeric case
    does not build a pandas frame."""
    if np.ma.isMaskedArray(step) and step.dtype.kind in "iuf":
        return np.ma.filled(step.astype("float64"), np.nan)
    a = step.to_numpy() if isinstance(step, pd.Series) else np.asarray(step)
    if a.dtype.kind in "iuf":
        return a.astype("float64")
    return pd.to_numeric(pd.Series(a), errors="coerce").to_numpy(dtype="float64", na_value=np.nan)


def _step_codes(rank: Any, step: Any) -> tuple[np.ndarray, np.ndarray]:
    """(int64 code of each row's (rank, step), whether its step is known) for rank and step columns."""
    s = float_steps(step)
    known = ~np.isnan(s)
    r = np.asarray(rank.to_numpy() if isinstance(rank, pd.Series) else np.ma.getdata(rank), dtype=np.int64)
    return (r << STEP_BITS) + np.where(known, s, 0).astype(np.int64), known


def _pair_codes(pairs: Any) -> np.ndarray:
    return np.fromiter(((int(r) << STEP_BITS) + int(s) for r, s in pairs), dtype=np.int64)


def kept_mask(rank: Any, step: Any, steps: dict[int, list[int]]) -> np.ndarray:
    """Per row (rank, step): inside a kept step of its rank, or its rank has no step at all (its profile is
    then one unnamed step). One membership test of (rank, step) codes instead of a pass per rank."""
    code, known = _step_codes(rank, step)
    kept = _pair_codes((r, s) for r, ss in steps.items() for s in ss)
    with_steps = np.fromiter((r for r, ss in steps.items() if ss), dtype=np.int64)
    return ~np.isin(np.asarray(rank, dtype=np.int64), with_steps) | (known & np.isin(code, kept))


def in_kept_steps(df: pd.DataFrame, steps: dict[int, list[int]]) -> pd.DataFrame:
    """Rows of `df` (columns rank, step) inside a kept step of their rank; a rank without any step keeps
    all its rows (its profile is then one unnamed step)."""
    if df.empty:
        return df
    return df[kept_mask(df["rank"].to_numpy(), df["step"].to_numpy(), steps)]


def n_steps(steps: dict[int, list[int]], rank: int) -> int:
    return max(len(steps.get(rank, [])), 1)


def step_list(values: Any) -> list[int]:
    """Distinct non-null step numbers of a column / iterable, sorted (judged once per distinct value)."""
    return sorted({int(s) for s in pd.unique(np.asarray(values, dtype=object)) if not pd.isna(s)})


def ranks_and_steps(per_rank: dict[int, Any]) -> tuple[list[int], list[int]]:
    """(the ranks ascending, the union of their evidence's `steps` ascending) of a check's per-rank
    evidence (entries or dicts): what its finding names."""
    return sorted(per_rank), sorted({s for v in per_rank.values()
                                     for s in (v["steps"] if isinstance(v, dict) else v.steps)})


def worst_rank(per_rank_ms: dict[int, float]) -> tuple[int | None, float | None]:
    """(rank, ms) with the largest per-step impact: in data-parallel training the slowest rank sets the
    pace."""
    if not per_rank_ms:
        return None, None
    rank = max(sorted(per_rank_ms), key=lambda r: per_rank_ms[r])
    return rank, per_rank_ms[rank]


def per_rank_ms(g: pd.DataFrame, col: str, steps: dict[int, list[int]]) -> dict[int, float]:
    """Σ g[col] (ns) per rank divided by that rank's kept steps, in ms per step (ranks ascending; each rank's
    values summed in row order, as a pandas sum per rank does). The rows are split by one stable sort on
    rank, not a mask per rank (the checks call this per op type, so it must not cost a pass per rank)."""
    order, slices = by_rank(g["rank"].to_numpy())
    vals = g[col].to_numpy()[order]
    return {rk: float(series_sum(vals[i:j])) / NS_PER_MS / n_steps(steps, rk) for rk, i, j in slices}


def worst_op_types(ctx: CheckContext, bad: pd.DataFrame, steps: dict[int, list[int]], limit: int,
                   note: str) -> list[tuple[Any, pd.DataFrame, dict[int, float], tuple[int | None, float | None]]]:
    """Op types of `bad` ranked by the per-step `lost_ns` of their worst rank, top `limit` of them.

    Each entry is (op type, its rows, ms per step by rank, (worst rank, its ms)). When more op types
    qualify, `note` (formatted with `more` and `limit`) goes to the context's notes.
    """
    results = []
    for op_type, g in bad.groupby("op_type", sort=True):
        by_rank = per_rank_ms(g, "lost_ns", steps)
        results.append((op_type, g, by_rank, worst_rank(by_rank)))
    results.sort(key=lambda x: (-(x[3][1] or 0.0), x[0]))
    if len(results) > limit:
        ctx.notes.append(note.format(more=len(results) - limit, limit=limit))
    return results[:limit]


def window_counts(windows: pd.DataFrame) -> dict[int, int]:
    """Rank -> its number of kept-step windows in a `step_windows` frame (ranks without one are absent)."""
    ranks, counts = np.unique(windows["rank"].to_numpy(dtype=np.int64), return_counts=True)
    return dict(zip(ranks.tolist(), counts.tolist(), strict=True))


def worst_share(ctx: CheckContext, per_rank_ms: dict[int, float]) -> tuple[int | None, float | None]:
    """(rank, ms) whose per-step impact is the largest share of that rank's own mean step.

    Ranks with the same ms differ in step time (a rank with an idle tail has longer steps); the share is
    what the priority rule judges, so the rank where the problem weighs most is the one reported."""
    if not per_rank_ms:
        return None, None

    def share(r: int) -> tuple[float, float]:
        step = ctx.mean_step_ms(r)
        return (per_rank_ms[r] / step if step else 0.0, per_rank_ms[r])

    rank = max(sorted(per_rank_ms), key=share)
    return rank, per_rank_ms[rank]


def in_steps_mask(rank: Any, step: Any, windows: pd.DataFrame) -> np.ndarray:
    """Per row (rank, step): is its step a kept step of its rank (one vectorised membership test)."""
    code, known = _step_codes(rank, step)
    keys = (windows["rank"].to_numpy(dtype=np.int64) << STEP_BITS) + windows["step"].to_numpy(dtype=np.int64)
    return known & np.isin(code, keys)


def in_steps(df: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """Rows of df (rank, step) whose step is a kept step of their rank."""
    if df.empty:
        return df
    return df[in_steps_mask(df["rank"].to_numpy(), df["step"].to_numpy(), windows)]


def fmt_ms(x: float) -> str:
    return f"{x:.3g}" if abs(x) < 10 else f"{x:.1f}"


# the variables that make every launch synchronous (the launch-blocking fixes unset them)
BLOCKING_ENV = ("ASCEND_LAUNCH_BLOCKING", "CUDA_LAUNCH_BLOCKING", "HIP_LAUNCH_BLOCKING")


def blocking_env(ctx: CheckContext, ranks: list[int]) -> dict[int, dict[str, str]]:
    """rank -> the launch-blocking variables its recorded environment sets to 1 (ranks without: absent)."""
    marks = placeholders(BLOCKING_ENV)
    rows = ctx.profile.rows(f"SELECT rank, name, value FROM env_vars WHERE name IN ({marks})", list(BLOCKING_ENV))
    out: dict[int, dict[str, str]] = {}
    for rank, name, value in rows:
        if rank in ranks and value is not None and str(value).strip() == "1":
            out.setdefault(int(rank), {})[str(name)] = "1"
    return out
