"""MindSpore rules of slow-dataloader: a rank's iteration interval, which stage holds the data (MindInsight's
queue rule) and which `dataset_ops` op is the bottleneck (rules 2a-2d of slow_dataloader's docstring)."""

from __future__ import annotations

from typing import Any

import pandas as pd

from ..thresholds import T
from ..units import NS_PER_MS
from .base import CheckContext

# MindSpore BottleneckAnalyzer constant (mindspore profiler/parser/minddata_analyzer.py)
CPU_HIGH_PCT = T.minddata_worker_cpu_high_pct.value
# MindInsight minddata_pipeline_analyser
CHILD_FULLER = T.minddata_child_fuller.value
LEAF_LOW = T.minddata_leaf_queue_low.value
HOST_EMPTY = T.minddata_host_queue_empty.value
NOT_MULTITHREADED = {"BarrierOp", "ConcatOp", "EpochCtrlOp", "RenameOp", "RepeatOp", "ShuffleOp", "SkipOp",
                     "TakeOp", "ZipOp"}


def iteration_interval(ctx: CheckContext, rank: int, ph: pd.DataFrame, kept: set[int],
                       steps_ms: dict[tuple[int, int], float]) -> tuple[pd.Series | None, pd.Series, str]:
    """(interval ms per step, step ms per step, how it was measured) of one MindSpore rank: the step trace's
    iteration interval in `ph` (its step_phases rows), else the device's free time per step."""
    if not ph.empty and (ph["phase"] == "iteration_interval").any():
        piv = ph.pivot_table(index="step", columns="phase", values="dur_ns", aggfunc="sum") / NS_PER_MS
        if kept and piv.index.isin(kept).any():
            piv = piv[piv.index.isin(kept)]
        interval = piv["iteration_interval"].dropna()
        step_ms = pd.Series({s: steps_ms.get((rank, int(s))) for s in interval.index}, dtype="Float64")
        if step_ms.isna().all():
            parts = [c for c in ("iteration_interval", "fp_and_bp", "fp", "tail") if c in piv]
            step_ms = piv.loc[interval.index, parts].sum(axis=1).astype("Float64")
        return interval, step_ms, "iteration interval"
    # no interval recorded (non-sink >= 2.5 text export): the device's idle time per step
    rows = [b for b in ctx.breakdown if b.rank == rank and b.step is not None and b.free_ms is not None
            and (not kept or b.step in kept)]
    if not rows:
        return None, pd.Series(dtype="Float64"), ""
    interval = pd.Series({b.step: b.free_ms + (b.preparing_ms or 0.0) for b in rows}, dtype=float)
    step_ms = pd.Series({b.step: b.step_ms for b in rows}, dtype="Float64")
    return interval, step_ms, "device free"


def queue_stage(hq: dict[str, Any], dq: dict[str, Any]) -> str | None:
    """MindInsight minddata proposer: host queue empty > 30 % = processing; else chip-side empties =
    transmission; else (with a chip-side record) the data is ready: the interval is not a data wait.
    None without a host queue record."""
    if hq.get("empty_ratio") is None:
        return None
    if hq["empty_ratio"] > HOST_EMPTY:
        return "data processing"
    if (dq.get("empty_ratio") or 0) > 0:
        return "data transmission"
    if dq.get("empty_ratio") is not None or hq["empty_ratio"] == 0:
        return "not data"
    return "unknown"


def pipeline_culprit(ops: pd.DataFrame, summary: Any) -> tuple[pd.Series, str] | None:
    """(the bottleneck op's row, why) by the first rule that names one: saturated workers, the queue gap,
    MindSpore's own bottleneck_warning, a slow leaf."""
    return saturated_op(ops) or queue_gap_op(ops) or summary_op(summary, ops) or slow_leaf_op(ops)


def _children(ops: pd.DataFrame, op_id: int) -> pd.DataFrame:
    return ops[ops["parent_id"] == op_id]


def _input_usage(ops: pd.DataFrame, op_id: int) -> float | None:
    """Usage of the op's input queue = output queue of its first child that has one."""
    for _, c in _children(ops, op_id).sort_values("op_id").iterrows():
        if pd.notna(c["output_queue_usage_rate"]):
            return float(c["output_queue_usage_rate"])
    return None


def summary_op(summary: Any, ops: pd.DataFrame) -> tuple[pd.Series, str] | None:
    """MindSpore's own bottleneck_warning (e.g. ["Map(id=3)"])."""
    if not isinstance(summary, dict):
        return None
    warn = summary.get("bottleneck_warning") or []
    for label in warn if isinstance(warn, list) else [warn]:
        text = str(label)
        if "id=" in text:
            try:
                oid = int(text.split("id=")[1].rstrip(") "))
            except ValueError:
                continue
            hit = ops[ops["op_id"] == oid]
            if not hit.empty:
                sugg = summary.get("bottleneck_suggestion") or []
                return hit.iloc[0], "MindSpore minddata bottleneck_warning" + (f": {sugg[0]}" if sugg else "")
    return None


def saturated_op(ops: pd.DataFrame) -> tuple[pd.Series, str] | None:
    """The op whose workers are saturated (CPU per worker > 75 %), the most loaded first."""
    cand = ops[ops["avg_cpu_pct"].notna() & ~ops["op_type"].astype(str).isin(NOT_MULTITHREADED)
               & ~ops["op_type"].astype(str).str.startswith(("DeviceQueue", "DataQueue"))]
    cand = cand[cand["avg_cpu_pct"].astype(float) > CPU_HIGH_PCT]
    if cand.empty:
        return None
    row = cand.sort_values(["avg_cpu_pct", "op_id"], ascending=[False, True]).iloc[0]
    return row, (f"{float(row['avg_cpu_pct']):.0f} % CPU per worker (> {CPU_HIGH_PCT:g} %): its "
                 f"{int(row['num_workers']) if pd.notna(row['num_workers']) else 1} worker(s) are saturated")


def queue_gap_op(ops: pd.DataFrame) -> tuple[pd.Series, str] | None:
    """MindInsight: the op fed faster than it produces (input fuller than output by > 0.1), largest gap first."""
    best: tuple[float, pd.Series, str] | None = None
    for _, row in ops.iterrows():
        if pd.isna(row["parent_id"]) or pd.isna(row["output_queue_usage_rate"]):
            continue   # the root has no output queue to compare
        in_u = _input_usage(ops, int(row["op_id"]))
        out_u = float(row["output_queue_usage_rate"])
        if in_u is not None and in_u - out_u > CHILD_FULLER and (best is None or in_u - out_u > best[0]):
            best = (in_u - out_u, row, f"its input queue is {100 * in_u:.0f} % full but its output queue only "
                                       f"{100 * out_u:.0f} %: it consumes slower than it is fed")
    return (best[1], best[2]) if best is not None else None


def slow_leaf_op(ops: pd.DataFrame) -> tuple[pd.Series, str] | None:
    """MindInsight: a leaf (reader) whose output queue is < 60 % full."""
    leaves = ops[~ops["op_id"].isin(ops["parent_id"].dropna()) & ops["output_queue_usage_rate"].notna()]
    leaves = leaves[leaves["output_queue_usage_rate"] < LEAF_LOW]
    if leaves.empty:
        return None
    row = leaves.sort_values("output_queue_usage_rate").iloc[0]
    return row, f"the source op's output queue is only {100 * float(row['output_queue_usage_rate']):.0f} % full"
