"""slow-dataloader: the data loader holds the step, on every rank.

Rules:
1. PyTorch (torch_npu and Kineto; msprof-analyze 26.2.0 dataloader, dataloader.yaml): a host
   op whose name contains `dataloader` (case-insensitive, e.g.
   `enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__`) lasting >= T.dataloader_ms (10 ms) is an
   issue. Priority fixed HIGH, as the advisor does. Nested matches (the Python function inside the
   annotation) count once: only the outermost dataloader op of a thread is measured. The iterator is named:
   `_SingleProcessDataLoaderIter` means num_workers=0 (the main process loads every batch), a
   `_MultiProcessingDataLoaderIter` that still waits means the workers cannot keep up.
2. MindSpore (MindInsight step_trace / minddata proposers): the iteration
   interval (the time between the end of one step's device work and the start of the next, which the device
   spends waiting for data in dataset-sink mode) averaged over the rank's steps >= T.dataloader_ms is an
   issue, HIGH as above. The data pipeline op that holds it is named from `dataset_ops`:
   a. saturated workers (MindSpore BottleneckAnalyzer's first rule): an op (not one of the ops without workers,
      _minddata.NOT_MULTITHREADED, nor DeviceQueue) whose CPU per worker is > 75 %; the highest wins;
   b. else MindInsight's queue rule: the op whose input queue (its child's output) is fuller than its own
      output queue by more than 0.1 (it consumes slower than it is fed), the largest gap winning;
   c. else the profiler's own `bottleneck_warning` (minddata_pipeline_summary) when recorded;
   d. else a leaf (reader) whose output queue is < 60 % full.
   MindSpore's analyzer also flags ops with < 20 % CPU per worker and a starved input queue, and lets the op
   nearest the device win; that names the op *downstream* of the slow one (its input is starved because of
   it), so stepdoctor ranks the saturated op and the queue gap first.
   The proposed worker count keeps the pipeline ahead of the device:
   N = ceil(num_workers x step_ms / (step_ms - interval_ms) x 1.25) (per-batch work divided over N workers,
   25 % headroom for jitter), capped at the host's CPU count when the profile recorded it. The host / device
   queue empty ratios (MindInsight: host empty > 30 % = slow processing, else chip-side empties = slow
   transmission) are in the evidence.

impact_ms per step (mean over the rank's kept steps), the rank where it weighs most:
* PyTorch: device idle time during the slow dataloader ops (the step only loses the time the device had
  nothing queued); on a rank without device data (CPU training) the dataloader time itself, or, in a
  multi-rank job whose steps replay, what the step gains without that rank's data loading
  (`replay.gain_without`): the others wait for it, or it waits for them and loses nothing (then, below
  T.straggler_min_wait_ms, it is not named; with the replay the severity follows the impact, not the
  advisor's fixed high);
* MindSpore: the iteration interval.
"""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from ..models import Finding
from ..replay import gain_without
from ..thresholds import T
from ..units import NS_PER_MS
from ._common import (
    fmt_ms,
    in_steps,
    placeholders,
    rank_slices,
    ranks_and_steps,
    window_counts,
    worst_share,
)
from ._minddata import iteration_interval, pipeline_culprit, queue_stage
from .base import Check, CheckContext, register
from .evidence import Entry, Evidence, Record

WORKER_HEADROOM = T.dataloader_workers_headroom.value


class LoaderRank(Entry):
    """One rank's slow PyTorch DataLoader ops."""

    weighs_by = "impact_ms_per_step"
    steps: list[int]
    iterator: str
    iterator_kind: str
    slow_calls_per_step: float
    max_call_ms: float
    dataloader_ms_per_step: float
    device_idle_during_slow_calls_ms_per_step: float
    impact_ms_per_step: float
    device_data: bool
    replay_gain_ms_per_step: float | None = None   # where the replay measured it (`_replayed`)


class DatasetOp(Record):
    """The MindSpore dataset pipeline op that holds the data (`_minddata.pipeline_culprit`)."""

    label: str
    op_type: str
    op_id: int
    num_workers: int
    output_queue_usage: float | None
    cpu_pct_per_worker: float | None
    why: str
    proposed_workers: int | None
    host_cpus: int | None


class PipelineRank(Entry):
    """One MindSpore rank's iteration interval and its data queues / bottleneck op."""

    weighs_by = "iteration_interval_ms"
    steps: list[int]
    iteration_interval_ms: float
    measured_as: str
    step_ms: float | None
    interval_share_pct: float | None
    host_queue_empty_ratio: float | None = None
    device_queue_empty_ratio: float | None = None
    stage: str | None = None
    bottleneck_op: DatasetOp | None = None


class SlowDataloaderEvidence(Evidence):
    """PyTorch: the slow DataLoader ops per rank (`iterator_kind`, `advice`); MindSpore: the iteration interval
    per rank, with flat keys of the bottleneck dataset op for the fix templates."""

    threshold_ms: float
    # one kind per finding; the answers weigh a map by its first entry model's `weighs_by` (PyTorch's)
    per_rank: dict[int, LoaderRank] | dict[int, PipelineRank]
    iterator_kind: str | None = None
    advice: str | None = None
    rule: str
    workers_formula: str | None = None
    dataset_op: str | None = None
    dataset_op_type: str | None = None
    num_parallel_workers: int | None = None
    proposed_num_parallel_workers: int | None = None


def iterator_kind(name: str) -> str:
    low = name.lower()
    if "singleprocess" in low:
        return "single-process"
    if "multiprocess" in low:
        return "multi-process"
    return "unknown"


@register
class SlowDataloaderCheck(Check):
    id = "slow-dataloader"
    dimension = "free"
    title = "Slow data loader"
    fires_when = "the data loader holds the step"
    thresholds = (
        "dataloader_ms", "dataloader_workers_headroom", "minddata_child_fuller",
        "minddata_host_queue_empty", "minddata_leaf_queue_low", "minddata_worker_cpu_high_pct", "straggler_min_wait_ms",
    )
    frameworks = ("pytorch", "mindspore")
    vendors = ("ascend", "cuda", "rocm", "cpu")
    description = (
        'PyTorch: a dataloader host op >= {dataloader_ms} ms (msprof-analyze, fixed high), naming the single- or '
        'multi-process iterator; MindSpore: a mean iteration interval >= {dataloader_ms} ms, naming the dataset '
        'pipeline op that holds it and proposing num_parallel_workers. Impact: device idle per step; in a '
        'multi-rank CPU job that replays, what the step gains without that rank\'s data loading.'
    )
    evidence = SlowDataloaderEvidence
    # PyTorch's DataLoader ops, and MindSpore's iteration interval (`_mindspore`: `interval_ms` on the worst rank,
    # `workers` the dataset op holding it, `share` of the step, the host queue's `stage`, `what` holds it)
    templates: ClassVar[dict[str, tuple[str, str]]] = {
        "dataloader": (
            "Data loading holds the step ({max_call:.3g} ms, {iterator_kind} iterator)",
            "On {ranks} ({steps}) fetching a batch takes {max_call:.3g} ms (>= {dataloader_ms} ms) in {iterator} "
            "({iterator_kind} iterator) and {cost}: {advice}.",
        ),
        "pipeline": (
            "Data pipeline holds the step: iteration interval {interval_ms:.3g} ms{workers}",
            "On {ranks} ({steps}) the device waits {interval_ms:.3g} ms per step for data on rank {worst_rank}{share}, "
            ">= {dataloader_ms} ms{stage}: {what}.",
        ),
    }

    def applicable_ranks(self, ctx: CheckContext) -> list[int]:
        # host framework ops (torch_npu trace / DB, any Kineto trace) or MindSpore's step phases
        ok = []
        for r in ctx.all_ranks:
            v = ctx.vendor(r) or ""
            if v not in self.vendors:
                continue
            caps = ctx.caps(r)
            if v != "ascend" or {"framework_ops", "step_phases", "host_queue", "device_queue"} & caps:
                ok.append(r)
        self.needs = () if ok else ("framework_ops",)  # type: ignore[misc]  # message when nothing applies
        return ok

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        windows = ctx.view.step_windows(ranks)
        out: list[Finding] = []
        torch_found = self._pytorch(ctx, ranks, windows)
        if torch_found:
            out.append(torch_found)
        out.extend(self._mindspore(ctx, [r for r in ranks if {"step_phases", "host_queue", "device_queue"}
                                         & ctx.caps(r)], windows))
        return out

    # ---- PyTorch DataLoader ops -------------------------------------------------------------------------
    def _pytorch(self, ctx: CheckContext, ranks: list[int], windows: pd.DataFrame) -> Finding | None:
        marks = placeholders(ranks)
        ev = ctx.sql(f"SELECT rank, step, name, tid, start_ns, dur_ns FROM host_ops WHERE rank IN ({marks}) AND "
                     "lower(name) LIKE '%dataloader%' AND category IN ('dataloader', 'cpu_op', 'user_annotation', "
                     "'python_function', 'other') ORDER BY rank, tid, start_ns, dur_ns DESC", ranks)
        ev = in_steps(_outermost(ev), windows)
        if ev.empty:
            return None
        thr_ns = T.dataloader_ms.value * NS_PER_MS
        # numpy slices of the rank-sorted rows: a pandas filter / groupby per rank cost most of the check
        rank_col = ev["rank"].to_numpy(dtype=np.int64)
        step_col = ev["step"].to_numpy()
        dur_col = ev["dur_ns"]
        dur = dur_col.to_numpy()
        dur_int = dur.dtype.kind in "iu"   # integer sums are exact in any order; else pandas sums the slice
        start = ev["start_ns"].to_numpy()
        names = ev["name"].to_numpy(dtype=object)
        slow_all = (dur_col >= thr_ns).to_numpy(dtype=bool)
        steps_of = window_counts(windows)
        per_rank: dict[int, LoaderRank] = {}
        for r, i, j in rank_slices(rank_col):
            slow = np.flatnonzero(slow_all[i:j]) + i
            if slow.size == 0:
                continue
            n = max(steps_of.get(r, 0), 1)
            timeline = ctx.view.device_timeline(r)
            s = start[slow].astype(np.int64)
            e = s + dur[slow].astype(np.int64)
            idle = float(timeline.idle(s, e).sum()) if not timeline.empty else float((e - s).sum())
            name = _most_common(names[slow]) or str(ev["name"].iloc[slow].value_counts().idxmax())
            total = float(dur[i:j].sum()) if dur_int else float(dur_col.iloc[i:j].sum())
            per_rank[r] = LoaderRank(
                steps=np.unique(step_col[slow].astype(np.int64)).tolist(),
                iterator=name,
                iterator_kind=iterator_kind(name),
                slow_calls_per_step=round(slow.size / n, 2),
                max_call_ms=round(float(dur[slow].max()) / NS_PER_MS, 4),
                dataloader_ms_per_step=round(total / NS_PER_MS / n, 4),
                device_idle_during_slow_calls_ms_per_step=round(idle / NS_PER_MS / n, 4),
                impact_ms_per_step=round(idle / NS_PER_MS / n, 4),
                device_data=not timeline.empty,
            )
        if not per_rank:
            return None
        replayed = self._replayed(ctx, per_rank)
        if replayed:   # a slow loader the others never wait for (its rank has slack) does not hold the step
            per_rank = {r: v for r, v in per_rank.items() if v.impact_ms_per_step >= T.straggler_min_wait_ms.value}
            if not per_rank:
                return None
        rank_w, ms_w = worst_share(ctx, {r: v.impact_ms_per_step for r, v in per_rank.items()})
        rk, steps_seen = ranks_and_steps(per_rank)
        e = per_rank.get(rank_w) if rank_w is not None else None
        kind = e.iterator_kind if e else "unknown"
        advice = ("the DataLoader runs in the main process (num_workers=0): set num_workers > 0, pin_memory=True"
                  if kind == "single-process" else
                  "the DataLoader workers cannot keep up: raise num_workers / prefetch_factor, use "
                  "persistent_workers and pin_memory=True, check disk I/O and avoid tar/zip datasets")
        return self.finding(
            ctx, shape="dataloader", subject=e.iterator if e else "dataloader", ranks=rk, steps=steps_seen, impact_ms=ms_w,
            # msprof-analyze's fixed high, but where the replay measured what it costs the job, that decides
            impact_rank=rank_w, severity=None if replayed else "high",
            evidence=SlowDataloaderEvidence(
                threshold_ms=T.dataloader_ms.value, per_rank=per_rank, iterator_kind=kind, advice=advice,
                rule="msprof-analyze dataloader (fixed high priority)",
                impact_method=("replay: the step with this rank's data loading gone, against the measured step, "
                               "mean over the replayed steps") if replayed else
                              ("device idle time during dataloader ops >= the threshold, per step, mean over kept "
                               "steps (the dataloader time without device data)")),
            words={"max_call": e.max_call_ms if e else 0, "iterator": e.iterator if e else "the dataloader",
                   "cost": (f"the job's step would take {fmt_ms(ms_w or 0)} ms less without rank {rank_w}'s data "
                            "loading (replay)") if replayed else
                           f"the device idles {fmt_ms(ms_w or 0)} ms per step on rank {rank_w}"})

    @staticmethod
    def _replayed(ctx: CheckContext, per_rank: dict[int, LoaderRank]) -> bool:
        """In a multi-rank job the step waits for the slowest rank, so a rank's loader costs the job what the
        replay gains without it, not its own idle: that becomes the impact where the replay holds (True). Only
        for ranks without device data (CPU training): their compute windows are host time, where the loader
        runs; a device rank's windows are device time, which a host stall reaches only as the idle it leaves."""
        if len(ctx.all_ranks) < 2 or any(v.device_data for v in per_rank.values()):
            return False
        gains = {r: gain_without(ctx.profile, [r], ("data_loading",)) for r in per_rank}
        if any(g is None for g in gains.values()):
            return False
        for r, g in gains.items():
            per_rank[r].replay_gain_ms_per_step = g
            per_rank[r].impact_ms_per_step = g
        return True

    # ---- MindSpore iteration interval + data pipeline ---------------------------------------------------
    def _mindspore(self, ctx: CheckContext, ranks: list[int], windows: pd.DataFrame) -> list[Finding]:
        if not ranks:
            return []
        marks = placeholders(ranks)
        ph = ctx.sql(f"SELECT rank, step, phase, dur_ns FROM step_phases WHERE rank IN ({marks}) AND phase IN "
                     "('iteration_interval', 'fp_and_bp', 'fp', 'tail')", ranks)
        steps_ms = ctx.view.step_ms
        thr = T.dataloader_ms.value
        per_rank: dict[int, PipelineRank] = {}
        for r in ranks:
            kept = set(windows.loc[windows["rank"] == r, "step"].astype(int))
            interval, step_ms, how = iteration_interval(ctx, r, ph[ph["rank"] == r], kept, steps_ms)
            if interval is None or interval.empty or float(interval.mean()) < thr:
                continue
            mean_int = float(interval.mean())
            mean_step = float(step_ms.dropna().mean()) if step_ms.notna().any() else None
            pipe = self._pipeline(ctx, r, mean_int, mean_step)
            if pipe.get("stage") == "not data":
                continue   # both queues full: the device does not wait for data, the interval is host-side
            if how == "device free" and pipe.get("stage") != "data processing":
                continue   # free time alone is not a data wait: only with the host queue running empty
            per_rank[r] = PipelineRank(
                steps=sorted(int(s) for s, v in interval.items() if v >= thr),
                iteration_interval_ms=round(mean_int, 4),
                measured_as=how,
                step_ms=None if mean_step is None else round(mean_step, 4),
                interval_share_pct=None if not mean_step else round(100.0 * mean_int / mean_step, 2),
                **pipe,
            )
        if not per_rank:
            return []
        rank_w, ms_w = worst_share(ctx, {r: v.iteration_interval_ms for r, v in per_rank.items()})
        rk, steps_seen = ranks_and_steps(per_rank)
        e = per_rank.get(rank_w) if rank_w is not None else None
        op = e.bottleneck_op if e else None
        share = f" ({e.interval_share_pct:.1f} % of the {e.step_ms:.3g} ms step)" if e and e.interval_share_pct \
            else ""
        stage = f" (host queue empty in {100 * e.host_queue_empty_ratio:.0f} % of batches)" \
            if e and e.host_queue_empty_ratio is not None else ""
        if op and op.proposed_workers:
            call = "dataset.batch" if op.op_type == "BatchOp" else "dataset.map"
            what = (f"the dataset op {op.label} is the bottleneck ({op.why}); raise its workers from "
                    f"{op.num_workers}: {call}(..., num_parallel_workers={op.proposed_workers})")
        elif op:
            what = f"the dataset op {op.label} is the bottleneck ({op.why})"
        elif e and e.stage == "data transmission":
            what = "batches are ready on the host but reach the device late (data transmission)"
        else:
            what = "the data pipeline cannot keep the device fed (no dataset pipeline profile to name the op)"
        # flat keys of the op for the fix templates (dataset.map(..., num_parallel_workers=N))
        flat = {"dataset_op": op.label, "dataset_op_type": op.op_type, "num_parallel_workers": op.num_workers,
                "proposed_num_parallel_workers": op.proposed_workers} if op else {}
        evidence = SlowDataloaderEvidence(
            threshold_ms=thr, per_rank=per_rank,
            rule="MindInsight step_trace iteration interval + minddata queue / bottleneck analysis (fixed high, as "
                 "msprof-analyze's slow dataloader); not reported when both data queues stay full",
            impact_method="mean iteration interval per step (the device waits for the next batch), the rank "
                          "where it is the largest share of the step",
            workers_formula=f"ceil(num_workers x step_ms / (step_ms - interval_ms) x {WORKER_HEADROOM}), capped "
                            "at the host's CPU count", **flat)
        return [self.finding(
            ctx, shape="pipeline", subject=op.label if op else "iteration_interval", ranks=rk, steps=steps_seen,
            impact_ms=ms_w, impact_rank=rank_w, severity="high", evidence=evidence,
            words={"interval_ms": e.iteration_interval_ms if e else 0, "share": share, "stage": stage, "what": what,
                   "workers": f" ({op.label} with {op.num_workers} worker(s))" if op else ""})]

    def _pipeline(self, ctx: CheckContext, rank: int, interval_ms: float, step_ms: float | None) -> dict[str, Any]:
        """Queue evidence and the bottleneck dataset op of one rank: the fields of its `PipelineRank` that
        hold them, by name."""
        out: dict[str, Any] = {}
        meta = {k: v for k, v in ctx.profile.rows("SELECT key, value_json FROM metadata WHERE rank = ? AND key IN "
                                                  "('host_queue', 'device_queue', 'minddata_summary', "
                                                  "'minddata_cpu')", [int(rank)])}
        parsed: dict[str, Any] = {}
        for k, v in meta.items():
            try:
                parsed[k] = json.loads(v) if v else None
            except json.JSONDecodeError:
                parsed[k] = None
        hq, dq = parsed.get("host_queue") or {}, parsed.get("device_queue") or {}
        if hq.get("empty_ratio") is not None:
            out["host_queue_empty_ratio"] = hq["empty_ratio"]
        if dq.get("empty_ratio") is not None:
            out["device_queue_empty_ratio"] = dq["empty_ratio"]
        if (stage := queue_stage(hq, dq)) is not None:
            out["stage"] = stage
        if out.get("stage") in ("not data", "data transmission"):
            return out   # no pipeline op to blame
        ops = ctx.sql("SELECT op_id, op_type, num_workers, output_queue_size, output_queue_usage_rate, avg_cpu_pct, "
                      "parent_id FROM dataset_ops WHERE rank = ? ORDER BY op_id", [int(rank)])
        if ops.empty:
            return out
        cpus = (parsed.get("minddata_cpu") or {}).get("cpu_processor_num")
        pick = pipeline_culprit(ops, parsed.get("minddata_summary"))
        if pick is None:
            return out
        row, why = pick
        workers = int(row["num_workers"]) if pd.notna(row["num_workers"]) and row["num_workers"] else 1
        proposed = None
        if step_ms and step_ms > interval_ms:
            proposed = math.ceil(workers * step_ms / (step_ms - interval_ms) * WORKER_HEADROOM)
            if cpus:
                proposed = min(proposed, int(cpus))
            proposed = max(proposed, workers + 1)
        label = f"{str(row['op_type']).removesuffix('Op')}(id={int(row['op_id'])})"
        out["bottleneck_op"] = DatasetOp(
            label=label, op_type=str(row["op_type"]), op_id=int(row["op_id"]), num_workers=workers,
            output_queue_usage=_f(row["output_queue_usage_rate"]), cpu_pct_per_worker=_f(row["avg_cpu_pct"]),
            why=why, proposed_workers=proposed, host_cpus=cpus,
        )
        return out


def _f(x: Any) -> float | None:
    return None if x is None or pd.isna(x) else round(float(x), 4)


def _most_common(names: np.ndarray) -> str | None:
    """The one most frequent name, or None when the top count is shared or a name is missing: then pandas'
    value_counts().idxmax() decides, so ties break by its rule."""
    counts: dict[Any, int] = {}
    for x in names.tolist():
        if not isinstance(x, str):
            return None
        counts[x] = counts.get(x, 0) + 1
    top = max(counts.values())
    best = [x for x, c in counts.items() if c == top]
    return best[0] if len(best) == 1 else None


def _outermost(ev: pd.DataFrame) -> pd.DataFrame:
    """Drop dataloader ops nested in another dataloader op of the same rank and thread (sorted input)."""
    if ev.empty:
        return ev
    keep = np.ones(len(ev), dtype=bool)
    end_prev: dict[tuple[int, int], int] = {}
    s = ev["start_ns"].to_numpy(dtype=np.int64)
    e = s + ev["dur_ns"].to_numpy(dtype=np.int64)
    for i, key in enumerate(zip(ev["rank"].astype(int), ev["tid"].fillna(-1).astype("int64"), strict=True)):
        if key in end_prev and s[i] < end_prev[key]:
            keep[i] = False
            continue
        end_prev[key] = int(e[i])
    return ev[keep]
