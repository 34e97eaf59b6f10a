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

import re
from collections.abc import Sized
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..text import ranks_text, steps_text  # noqa: F401 - the checks take them from here
from ..thresholds import T
from ..timeline.intervals import Coverage
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

# Host calls that launch device work (HTA get_cuda_kernel_launch_stats / queue length list, Ascend Node@launch).
LAUNCH_RE = re.compile(
    r"^(cudaLaunchKernel(ExC)?(_v\d+)?|cuLaunchKernel(Ex)?|cudaLaunchCooperativeKernel|cudaGraphLaunch|"
    r"cudaMemcpyAsync|cudaMemsetAsync|cudaMemcpy2DAsync|hipLaunchKernel|hipExtLaunchKernel|"
    r"hipExtModuleLaunchKernel|hipModuleLaunchKernel|hipGraphLaunch|hipMemcpyAsync|hipMemsetAsync|"
    r"hipMemcpyWithStream|Node@launch|AscendCL@aclopExecute\w*|AscendCL@aclnn\w+)$")

# Host calls that block until device work finishes.
SYNC_RE = re.compile(
    r"^(cudaStreamSynchronize|cudaDeviceSynchronize|cudaEventSynchronize|cudaThreadSynchronize|"
    r"cuStreamSynchronize|cuCtxSynchronize|cuEventSynchronize|hipStreamSynchronize|hipDeviceSynchronize|"
    r"hipEventSynchronize|AscendCL@aclrtSynchronizeStream(WithTimeout)?|AscendCL@aclrtSynchronizeDevice"
    r"(WithTimeout)?|AscendCL@aclrtSynchronizeEvent)$")

HOST_API_CATEGORIES = ("runtime", "driver", "cann")

# Host calls that stall dispatch and have their own check (memory-ops, op-compile): late launches behind them
# are theirs, not host-bound's.
STALL_API_RE = re.compile(r"^(AscendCL@(aclMallocMemInner|aclrtFreePhysical|aclrtFree|aclopCompileAndExecute)|"
                          r"cudaMalloc|cudaFree|hipMalloc|hipFree|cuMemAlloc(_v2)?|cuMemFree(_v2)?)$")

# Host op categories that are the host doing work (not an enclosing annotation).
WORK_CATEGORIES = ("cpu_op", "runtime", "driver", "cann", "dataloader", "gc")


def placeholders(values: Sized) -> str:
    """'?,?,?': the placeholders of an SQL `IN (...)` list of len(values) parameters; the values themselves
    always go in the parameter list."""
    return ",".join("?" * len(values))


def kept_steps(ctx: CheckContext) -> dict[int, list[int]]:
    """Rank -> its kept steps (ProfilerStep numbers), for the ranks of the context.

    Computed once per context and shared by the checks: callers must not modify it."""
    def compute() -> dict[int, list[int]]:
        out: dict[int, list[int]] = {r: [] for r in ctx.all_ranks}
        for rank, step in ctx.profile.rows("SELECT rank, step FROM steps WHERE kept ORDER BY rank, step"):
            if rank in out:
                out[rank].append(int(step))
        return out

    return ctx.memo("common.kept_steps", compute)


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


@dataclass
class DeviceTimeline:
    """Merged busy intervals of one rank's device ops (sorted, disjoint, integer ns)."""

    cov: Coverage

    @classmethod
    def of(cls, ctx: CheckContext, rank: int, *, exclude_sync: bool = True) -> DeviceTimeline:
        """The rank's timeline, built once per context for all ranks (several checks need it; one query
        grouped by rank is cheaper than one per rank)."""
        by_rank = ctx.memo(f"common.timelines.{exclude_sync}", lambda: cls._all(ctx, exclude_sync))
        tl = by_rank.get(int(rank))
        return tl if tl is not None else cls(Coverage(np.empty(0, np.int64), np.empty(0, np.int64)))

    @classmethod
    def _all(cls, ctx: CheckContext, exclude_sync: bool) -> dict[int, DeviceTimeline]:
        # cuda_sync markers (Stream Sync...) are the device waiting, not working
        cond = "WHERE category <> 'sync'" if exclude_sync else ""
        a = ctx.profile.arrays(f"SELECT rank, start_ns, dur_ns FROM device_ops {cond} ORDER BY rank")
        rank = np.asarray(a["rank"], dtype=np.int64)
        s = np.asarray(a["start_ns"], dtype=np.int64)
        e = s + np.asarray(a["dur_ns"], dtype=np.int64)
        out: dict[int, DeviceTimeline] = {}
        for r, i, j in rank_slices(rank):
            out[r] = cls(Coverage(s[i:j], e[i:j]))
        return out

    @property
    def starts(self) -> np.ndarray:
        return self.cov.s

    @property
    def ends(self) -> np.ndarray:
        return self.cov.e

    @property
    def empty(self) -> bool:
        return self.starts.size == 0

    def busy(self, w0: np.ndarray | int, w1: np.ndarray | int) -> np.ndarray:
        """Busy ns inside each window [w0, w1)."""
        a = np.atleast_1d(np.asarray(w0, dtype=np.int64))
        b = np.atleast_1d(np.asarray(w1, dtype=np.int64))
        return np.maximum(self.cov.within(a, b), 0)

    def idle(self, w0: np.ndarray | int, w1: np.ndarray | int) -> np.ndarray:
        """Idle ns inside each window [w0, w1)."""
        a = np.atleast_1d(np.asarray(w0, dtype=np.int64))
        b = np.atleast_1d(np.asarray(w1, dtype=np.int64))
        return np.maximum(b - a, 0) - self.busy(a, b)

    def idle_run_after(self, t: int, limit: int) -> tuple[int, int]:
        """(idle ns from t until the device next starts work, capped at `limit`; that start or limit).

        0 when the device is busy at t."""
        if self.empty:
            return max(limit - t, 0), limit
        i = int(np.searchsorted(self.starts, t, side="right"))
        if i > 0 and self.ends[i - 1] > t:
            return 0, t
        nxt = int(self.starts[i]) if i < self.starts.size else limit
        end = min(nxt, limit)
        return max(end - t, 0), end


def host_stalls(ctx: CheckContext, rank: int) -> Coverage:
    """Host intervals where a known stall held the host: GC, allocator and compile APIs, data loading, and
    silences of >= T.conjectured_gc_gpu_silence_ms with no host event on any thread (what an unrecorded GC
    looks like). Once per rank and context."""
    return ctx.memo(f"common.host_stalls.{int(rank)}", lambda: _host_stalls(ctx, rank))


def _host_stalls(ctx: CheckContext, rank: int) -> Coverage:
    ev = ctx.sql("SELECT name, category, start_ns, dur_ns FROM host_ops WHERE rank = ?", [int(rank)])
    if ev.empty:
        return Coverage(np.empty(0, np.int64), np.empty(0, np.int64))
    s = ev["start_ns"].to_numpy(dtype=np.int64)
    e = s + ev["dur_ns"].to_numpy(dtype=np.int64)
    cat = ev["category"].to_numpy(dtype=object)
    stall = ((cat == "gc") | (cat == "dataloader")
             | by_value(ev["name"], lambda n: STALL_API_RE.match(str(n)) or "dataloader" in str(n).lower()))
    q0, q1 = host_silences(ev, int(T.conjectured_gc_gpu_silence_ms.value * NS_PER_MS))
    return Coverage(np.concatenate((s[stall], q0)), np.concatenate((e[stall], q1)))


def host_silences(ev: pd.DataFrame, min_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """Intervals >= min_ns in which no host event of any thread starts or ends and no op that does work spans
    them: only annotations (ProfilerStep#N, record_function ranges, Python functions) are open. A long aten
    op, runtime call or dataloader fetch spanning a gap is the host working, not a silence."""
    empty = np.empty(0, np.int64)
    if ev.empty:
        return empty, empty
    s = ev["start_ns"].to_numpy(dtype=np.int64)
    e = s + ev["dur_ns"].to_numpy(dtype=np.int64)
    b = np.sort(np.concatenate((s, e)))
    b = b[np.r_[True, b[1:] != b[:-1]]] if b.size else b   # distinct boundaries (a sort beats np.unique's hash)
    if b.size < 2:
        return empty, empty
    cand = np.flatnonzero(np.diff(b) >= min_ns)
    if cand.size == 0:
        return empty, empty
    work = (ev["category"].isin(WORK_CATEGORIES).to_numpy()
            | by_value(ev["name"], lambda n: "dataloader" in str(n).lower()))
    # a gap [b_i, b_i+1] is work when an op that started at or before b_i is still open at b_i+1: the latest
    # end among the ops started by b_i (a running maximum over the ops sorted by start) reaches b_i+1
    order = np.argsort(s[work], kind="stable")
    ws, reach = s[work][order], np.maximum.accumulate(e[work][order]) if work.any() else e[work]
    j = np.searchsorted(ws, b[cand], side="right") - 1
    covered = (j >= 0) & (reach[np.clip(j, 0, None)] >= b[cand + 1]) if ws.size else np.zeros(cand.size, bool)
    idx = cand[~covered]
    return b[idx], b[idx + 1]


def step_windows(ctx: CheckContext, ranks: list[int]) -> pd.DataFrame:
    """Kept steps of `ranks`: rank, step, host window (start_ns, end_ns) and device window (w0, w1).

    The device window is the one the breakdown uses; a step without one falls back to its host window.
    Once per context and rank list: callers must not modify the frame."""
    return ctx.memo(f"common.step_windows.{tuple(int(r) for r in ranks)}", lambda: _step_windows(ctx, ranks))


def _step_windows(ctx: CheckContext, ranks: list[int]) -> pd.DataFrame:
    if not ranks:
        return pd.DataFrame(columns=["rank", "step", "start_ns", "end_ns", "w0", "w1"])
    marks = placeholders(ranks)
    st = ctx.sql("SELECT rank, step, start_ns, end_ns, device_start_ns, device_end_ns FROM steps "
                 f"WHERE kept AND rank IN ({marks}) ORDER BY rank, step", list(ranks))
    st["w0"] = st["device_start_ns"].fillna(st["start_ns"]).astype("int64")
    st["w1"] = st["device_end_ns"].fillna(st["end_ns"]).astype("int64")
    st["start_ns"] = st["start_ns"].astype("int64")
    st["end_ns"] = st["end_ns"].astype("int64")
    return st[["rank", "step", "start_ns", "end_ns", "w0", "w1"]]


def window_counts(windows: pd.DataFrame) -> dict[int, int]:
    """Rank -> its number of kept-step windows in a `step_windows` frame (ranks without one are absent)."""
    ranks, counts = np.unique(windows["rank"].to_numpy(dtype=np.int64), return_counts=True)
    return dict(zip(ranks.tolist(), counts.tolist(), strict=True))


def step_ms_of(ctx: CheckContext) -> dict[tuple[int, int], float]:
    """(rank, step) -> host step time in ms, from the breakdown (once per context; do not modify). On torch_npu
    ranks step_ms is the profiler's Stage + Bubble; host-side waits are weighed against the host step."""
    def host(r) -> float | None:
        return r.host_step_ms if getattr(r, "host_step_ms", None) is not None else r.step_ms

    return ctx.memo("common.step_ms", lambda: {(r.rank, int(r.step)): float(host(r)) for r in ctx.breakdown
                                               if r.step is not None and host(r) is not None})


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
