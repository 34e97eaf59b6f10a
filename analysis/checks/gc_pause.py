"""gc-pause: Python garbage collection stalls the host, on every rank.

Rules:
1. Recorded GC (msprof-analyze 26.2.0 gc_analysis, gc.yaml; docs/rules.md §4): every GC event (trace `cat`
   GC, DB `GC_RECORD`; torch_npu records them when `gc_detect_threshold` is set) of at least T.gc_ms (1 ms)
   counts. Priority fixed MEDIUM, as the advisor does.
2. Conjectured GC, only on a rank without any recorded GC event (the advisor runs it only then) and whose
   profiler was not recording GC (torch_npu `gc_detect_threshold` unset: with it set, no event means no GC):
   * Ascend (conjectured_gc.yaml): a device-idle gap inside a step's device window longer than
     T.conjectured_gc_free_ms (200 ms) during which the host made almost no CANN API calls: AscendCL time
     overlapping the gap / gap < T.conjectured_gc_acl_time_ratio (0.01) and AscendCL calls / gap µs <
     T.conjectured_gc_acl_count_per_us (0.0001). Nothing else stops the host for that long without a trace.
   * CUDA / ROCm (stepdoctor; Kineto never records GC): a "host silence" of at least GPU_SILENCE_MS during
     which no host event of any thread starts or ends and only annotations span it (ProfilerStep#N,
     record_function ranges; a long aten op, runtime call or dataloader fetch spanning it is the host
     working), while the device is idle for at least half of it: the Python threads were stopped and the GPU
     drained its queue. Priority fixed MEDIUM, like the advisor's conjectured GC. A silence that recurs in every
     kept step (at least 3) with the same length (the longest per step within T.conjectured_gc_fixed_stall_spread
     of each other) is a fixed per-step stall: a timed wait (time.sleep), blocking I/O or untraced work of a
     fixed size. GC's length follows the objects it traverses and its trigger the allocations, so it is not
     GC-like; it is left out of the conjecture and named in a warning (`fixed_stall`).

impact_ms, per step (mean over the rank's kept steps), worst rank:
* recorded GC: device idle time overlapping the GC events (a pause costs the step only while the device has
  nothing queued); on a rank without device data, the GC time itself;
* conjectured: the device idle time of the gaps.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pandas as pd

from ..metrics.idle import COLLECTIVE_RE
from ..models import Finding
from ..thresholds import T
from ..timeline.intervals import merge
from ..units import NS_PER_MS, NS_PER_US
from ._common import (
    by_rank,
    by_value,
    columns,
    fmt_ms,
    in_steps_mask,
    rank_batches,
    rank_slices,
    worst_share,
)
from .base import Check, CheckContext, register
from .evidence import Entry, Evidence, Record
from .view import DeviceTimeline, host_silences

GPU_SILENCE_MS = T.conjectured_gc_gpu_silence_ms.value
GPU_SILENCE_DEVICE_IDLE = T.conjectured_gc_gpu_device_idle_ratio.value


class GcStep(Record):
    events: int
    ms: float


class GcGap(Record):
    step: int
    start_offset_ms: float
    gap_ms: float
    acl_time_ratio: float | None = None   # Ascend
    acl_calls: int | None = None          # Ascend
    device_idle_ms: float | None = None   # GPU


class GcRank(Entry):   # one rank of either finding: its recorded GC events, or its conjectured gaps
    weighs_by = "impact_ms_per_step"
    steps: list[int]
    impact_ms_per_step: float
    events_per_affected_step: float | None = None     # recorded GC
    gc_ms_per_affected_step: float | None = None
    gc_ms_per_step: float | None = None
    steps_analysed: int | None = None
    max_event_ms: float | None = None
    device_idle_during_gc_ms_per_step: float | None = None
    device_data: bool | None = None
    by_step: dict[str, GcStep] | None = None
    gaps: int | None = None                            # conjectured GC
    max_gap_ms: float | None = None
    what: str | None = None
    top_gaps: list[GcGap] | None = None                # the ten longest
    silences_in_collective_waits: int | None = None    # GPU


class GcPauseEvidence(Evidence):
    rule: str
    per_rank: dict[int, GcRank]
    threshold_event_ms: float | None = None            # recorded
    threshold_free_ms: float | None = None             # conjectured, Ascend
    threshold_acl_time_ratio: float | None = None
    threshold_acl_calls_per_us: float | None = None
    threshold_silence_ms: float | None = None          # conjectured, GPU
    threshold_device_idle_ratio: float | None = None


@register
class GcPauseCheck(Check):
    id = "gc-pause"
    dimension = "free"
    title = "Python GC pauses"
    fires_when = "Python garbage collection stalls the host"
    thresholds = (
        "conjectured_gc_acl_count_per_us", "conjectured_gc_acl_time_ratio", "conjectured_gc_free_ms",
        "conjectured_gc_fixed_stall_spread", "conjectured_gc_gpu_device_idle_ratio", "conjectured_gc_gpu_silence_ms",
        "gc_ms",
    )
    frameworks = ("pytorch", "mindspore")
    vendors = ("ascend", "cuda", "rocm")
    needs_by_vendor: ClassVar[dict[str, tuple[str, ...]]] = {
        "ascend": ("steps", "host_ops"),
        "cuda": ("steps", "kernels"),
        "rocm": ("steps", "kernels"),
    }
    description = (
        'GC events >= {gc_ms} ms (msprof-analyze gc_analysis, fixed medium); without GC events, conjectured GC: '
        'Ascend device-idle gaps > {conjectured_gc_free_ms} ms with almost no AscendCL calls, GPU host silences '
        '>= {conjectured_gc_gpu_silence_ms} ms with the device idle. Impact: device idle during the pauses, per '
        'step.'
    )
    evidence = GcPauseEvidence
    # `worst` is the worst rank's GcRank; `idle_ms` its device idle per step (fmt_ms); `confirm` how to tell GC
    # from other untraced work on the rank's vendor (CONFIRM_GC)
    templates: ClassVar[dict[str, tuple[str, str]]] = {
        "recorded": (
            "Python GC pauses the host ({worst.events_per_affected_step:g} collections >= {gc_ms} ms per step)",
            "On {ranks} ({steps}) Python GC ran {worst.events_per_affected_step:g} times per step for >= {gc_ms} ms "
            "(longest {worst.max_event_ms:.3g} ms, {worst.gc_ms_per_affected_step:.3g} ms per step on rank "
            "{worst_rank}); GC stops every Python thread, and the device idled meanwhile ({idle_ms} ms per step "
            "averaged over the {worst.steps_analysed} analysed steps). Use gc.freeze() after model setup, raise "
            "gc.set_threshold, or collect between steps.",
        ),
        "conjectured": (
            "Likely Python GC or untraced host work: {worst.gaps} host stall(s) of up to {worst.max_gap_ms:.3g} ms "
            "with no host activity",
            "On {ranks} ({steps}) the host went silent for up to {worst.max_gap_ms:.3g} ms ({worst.gaps} gap(s) on "
            "rank {worst_rank}, {worst.what}) and the device idled {idle_ms} ms per step: this is what a Python GC "
            "pause looks like when GC is not recorded (untraced host work such as I/O, time.sleep or compilation, "
            "or events filtered out of the trace, look the same). Confirm by {confirm} or by running with "
            "gc.freeze() / gc.disable() around steps.",
        ),
    }

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        windows = _Windows(ctx.view.step_windows(ranks))
        marks = ",".join("?" * len(ranks))
        gc_all = columns(ctx, f"SELECT rank, step, start_ns, dur_ns FROM host_ops WHERE category = 'gc' AND rank "
                              f"IN ({marks})", ranks)
        has_gc = {int(r) for r in np.unique(gc_all["rank"])}
        gc_by_rank = _gc_by_rank(gc_all, windows.frame)
        recorded: dict[int, GcRank] = {}
        acl_ranks: list[int] = []
        gpu_ranks: list[int] = []
        for rank in ranks:
            if windows.n(rank) == 0:
                continue
            timeline = ctx.view.device_timeline(rank)
            if rank in has_gc:
                if rank in gc_by_rank:
                    recorded[rank] = self._recorded(*gc_by_rank[rank], windows.n(rank), timeline)
                continue
            if "gc" in ctx.caps(rank):
                continue   # GC recording was on and caught nothing: there is no GC to conjecture
            if timeline.empty:
                continue   # both conjectures weigh a gap against the device's idle time
            if ctx.vendor(rank) != "ascend":
                gpu_ranks.append(rank)
            elif "cann_api" in ctx.caps(rank):
                # the advisor's rule weighs the gap against AscendCL calls: without the CANN API, no evidence
                acl_ranks.append(rank)
        # the conjectured rules read each rank's host ops: one query per batch of ranks (not one per rank, nor
        # one holding every rank's host ops at once); between batches only each rank's result is kept
        found: dict[int, GcRank | None] = {}
        fixed_of: dict[int, dict[str, Any]] = {}
        for batch in rank_batches(ctx, acl_ranks, "host_ops"):
            acl = _by_rank(ctx, batch, "SELECT rank, start_ns, dur_ns FROM host_api_calls WHERE category = 'cann' "
                                       "AND name LIKE 'AscendCL@%' AND rank IN ({marks}) ORDER BY rank")
            for rank in batch:
                found[rank] = self._conjectured_ascend(acl[rank]["start_ns"], acl[rank]["dur_ns"], windows.of(rank),
                                                       ctx.view.device_timeline(rank))
        for batch in rank_batches(ctx, gpu_ranks, "host_ops"):
            host = ctx.view.host_events(batch)
            for rank in batch:
                found[rank], fixed = self._conjectured_gpu(host[rank], windows.of(rank), ctx.view.device_timeline(rank))
                if fixed:
                    fixed_of[rank] = fixed
        conjectured: dict[int, GcRank] = {}
        for rank in ranks:
            if rank in fixed_of:
                ctx.notes.append(fixed_stall_text(rank, fixed_of[rank]))
            st = found.get(rank)
            if st:
                conjectured[rank] = st
        out: list[Finding] = []
        if recorded:
            out.append(self._finding_recorded(ctx, recorded))
        if conjectured:
            out.append(self._finding_conjectured(ctx, conjectured))
        return out

    # ---- recorded GC events -----------------------------------------------------------------------------
    @staticmethod
    def _recorded(step: np.ndarray, s: np.ndarray, dur: np.ndarray, n_steps: int, timeline: DeviceTimeline
                  ) -> GcRank:
        """One rank's GC events (>= the threshold, in kept steps; at least one). Every column is an integer,
        so the sums and means are exact and equal pandas' groupby/mean whatever the row order."""
        n = max(n_steps, 1)
        ms, me = merge(s, s + dur)
        idle = float(timeline.idle(ms, me).sum()) if not timeline.empty else float((me - ms).sum())
        steps, inv = np.unique(step, return_inverse=True)
        count = np.bincount(inv, minlength=steps.size)
        total = np.zeros(steps.size, dtype=np.int64)
        np.add.at(total, inv, dur)
        return GcRank(
            steps=[int(x) for x in steps.tolist()],
            events_per_affected_step=round(float(count.sum(dtype=np.float64)) / steps.size, 2),
            gc_ms_per_affected_step=round(float(total.sum(dtype=np.float64)) / steps.size / NS_PER_MS, 4),
            gc_ms_per_step=round(float(dur.sum()) / NS_PER_MS / n, 4),
            steps_analysed=n,
            max_event_ms=round(float(dur.max()) / NS_PER_MS, 4),
            device_idle_during_gc_ms_per_step=round(idle / NS_PER_MS / n, 4),
            impact_ms_per_step=round(idle / NS_PER_MS / n, 4),
            device_data=not timeline.empty,
            by_step={str(int(k)): GcStep(events=int(c), ms=round(float(t) / NS_PER_MS, 4))
                     for k, c, t in zip(steps.tolist(), count.tolist(), total.tolist(), strict=True)},
        )

    def _finding_recorded(self, ctx: CheckContext, per_rank: dict[int, GcRank]) -> Finding:
        rank_w, ms_w = worst_share(ctx, {r: v.impact_ms_per_step for r, v in per_rank.items()})
        return self.finding(
            ctx, shape="recorded", subject="GC", ranks=sorted(per_rank), steps=_steps_seen(per_rank), impact_ms=ms_w,
            impact_rank=rank_w, severity="medium",
            evidence=GcPauseEvidence(
                threshold_event_ms=T.gc_ms.value, per_rank=per_rank,
                rule="msprof-analyze gc_analysis (fixed medium priority)",
                impact_method="device idle time overlapping GC events >= the threshold, per step, mean over kept "
                              "steps, worst rank (the GC time itself without device data)"),
            words={"idle_ms": fmt_ms(ms_w or 0)})

    # ---- conjectured GC ---------------------------------------------------------------------------------
    @staticmethod
    def _conjectured_ascend(start: np.ndarray, dur: np.ndarray, w: dict[str, np.ndarray], timeline: DeviceTimeline
                            ) -> GcRank | None:
        """One rank's device-idle gaps with almost no AscendCL calls (start, dur: its AscendCL calls; the
        overlap sums are integer, so the calls' order does not matter)."""
        thr_ns = T.conjectured_gc_free_ms.value * NS_PER_MS
        a0 = np.asarray(start, dtype=np.int64)
        a1 = a0 + np.asarray(dur, dtype=np.int64)
        gaps: list[dict[str, Any]] = []
        for step, w0, w1 in zip(w["step"].tolist(), w["w0"].tolist(), w["w1"].tolist(), strict=True):
            for g0, g1 in _idle_gaps(timeline, int(w0), int(w1)):
                if g1 - g0 <= thr_ns:
                    continue
                m = (a0 < g1) & (a1 > g0)
                t_acl = float((np.minimum(a1[m], g1) - np.maximum(a0[m], g0)).sum())
                n_acl = int(m.sum())
                time_ratio = t_acl / (g1 - g0)
                count_ratio = n_acl / ((g1 - g0) / NS_PER_US)
                if time_ratio < T.conjectured_gc_acl_time_ratio.value and \
                        count_ratio < T.conjectured_gc_acl_count_per_us.value:
                    gaps.append({"step": int(step), "start_offset_ms": round((g0 - int(w0)) / NS_PER_MS, 3),
                                 "gap_ms": round((g1 - g0) / NS_PER_MS, 3), "acl_time_ratio": round(time_ratio, 6),
                                 "acl_calls": n_acl, "device_idle_ns": g1 - g0})
        return _conjectured_stats(gaps, len(w["step"]), "device free gap with almost no AscendCL calls")

    @staticmethod
    def _conjectured_gpu(host: pd.DataFrame, w: dict[str, np.ndarray], timeline: DeviceTimeline
                         ) -> tuple[GcRank | None, dict[str, Any] | None]:
        """One rank's host silences inside a step while the device idles (host: its host ops): (its evidence,
        None without a conjectured gap; its fixed per-step stall, see `fixed_stall_of`)."""
        q0, q1 = host_silences(host, int(GPU_SILENCE_MS * NS_PER_MS))
        gaps: list[dict[str, Any]] = []
        # an open collective (gloo:all_reduce, nccl:..., c10d::...) spanning the silence: the host threads wait
        # for peer ranks (a straggler), which is not a GC pause
        coll = by_value(host["name"], lambda n: bool(COLLECTIVE_RE.search(str(n))))
        cs = host["start_ns"].to_numpy(dtype=np.int64)[coll]
        ce = cs + host["dur_ns"].to_numpy(dtype=np.int64)[coll]
        waits = 0
        if q0.size:
            for g0, g1 in zip(q0.tolist(), q1.tolist(), strict=True):
                hit = np.flatnonzero((w["start_ns"] <= g0) & (w["end_ns"] >= g1))
                if hit.size == 0:
                    continue   # between steps: the profiler or the loop, not inside a training step
                if ((cs <= g0) & (ce >= g1)).any():
                    waits += 1
                    continue
                idle = int(timeline.idle(g0, g1)[0])
                if idle < GPU_SILENCE_DEVICE_IDLE * (g1 - g0):
                    continue   # the device still had work queued: a silent host costs nothing yet
                first = int(hit[0])
                gaps.append({"step": int(w["step"][first]),
                             "start_offset_ms": round((g0 - int(w["start_ns"][first])) / NS_PER_MS, 3),
                             "gap_ms": round((g1 - g0) / NS_PER_MS, 3),
                             "device_idle_ms": round(idle / NS_PER_MS, 3), "device_idle_ns": idle})
        fixed = fixed_stall_of(gaps, len(w["step"]))
        if fixed is not None:
            gaps = [g for g in gaps if not g.get("fixed")]
        for g in gaps:
            g.pop("fixed", None)
        st = _conjectured_stats(gaps, len(w["step"]), "no host event on any thread while the device idles")
        if st is not None:
            st.silences_in_collective_waits = waits
        return st, fixed

    def _finding_conjectured(self, ctx: CheckContext, per_rank: dict[int, GcRank]) -> Finding:
        rank_w, ms_w = worst_share(ctx, {r: v.impact_ms_per_step for r, v in per_rank.items()})
        ascend = ctx.vendor(rank_w) == "ascend"
        rule = ({"threshold_free_ms": T.conjectured_gc_free_ms.value,
                 "threshold_acl_time_ratio": T.conjectured_gc_acl_time_ratio.value,
                 "threshold_acl_calls_per_us": T.conjectured_gc_acl_count_per_us.value,
                 "rule": "msprof-analyze conjectured_analysis (fixed medium priority)"} if ascend else
                {"threshold_silence_ms": GPU_SILENCE_MS, "threshold_device_idle_ratio": GPU_SILENCE_DEVICE_IDLE,
                 "rule": "stepdoctor: host silence while the device idles (Kineto records no GC)"})
        return self.finding(
            ctx, shape="conjectured", subject="conjectured GC", ranks=sorted(per_rank), steps=_steps_seen(per_rank),
            impact_ms=ms_w, impact_rank=rank_w, severity="medium",
            evidence=GcPauseEvidence(**rule, per_rank=per_rank, impact_method="device idle time of the gaps per "
                                     "step, mean over kept steps, worst rank"),
            words={"idle_ms": fmt_ms(ms_w or 0), "confirm": CONFIRM_GC["ascend" if ascend else "gpu"]})


def _steps_seen(per_rank: dict[int, GcRank]) -> list[int]:
    return sorted({s for v in per_rank.values() for s in v.steps})


# how a user tells a conjectured pause from other untraced host work: record GC, on Ascend with the profiler
CONFIRM_GC = {"ascend": "recording GC (torch_npu experimental_config gc_detect_threshold)",
              "gpu": "timing collections with gc.callbacks"}


class _Windows:
    """The kept-step windows as numpy columns, cut per rank once (the frame is sorted by rank, then step):
    a boolean filter of the frame per rank cost more than everything else the check does on many ranks."""

    def __init__(self, frame: pd.DataFrame) -> None:
        self.frame = frame
        self._cols = {k: frame[k].to_numpy() for k in ("step", "start_ns", "end_ns", "w0", "w1")}
        self._slices = {r: (i, j) for r, i, j in rank_slices(frame["rank"].to_numpy(dtype=np.int64))}

    def n(self, rank: int) -> int:
        i, j = self._slices.get(int(rank), (0, 0))
        return j - i

    def of(self, rank: int) -> dict[str, np.ndarray]:
        i, j = self._slices.get(int(rank), (0, 0))
        return {k: v[i:j] for k, v in self._cols.items()}


def _gc_by_rank(gc: dict[str, np.ndarray], windows: pd.DataFrame
                ) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """rank -> (step, start_ns, dur_ns) of its GC events >= T.gc_ms inside its kept steps; ranks without any
    such event are absent. One filter over all ranks, then cuts of the rows sorted by rank."""
    rank = np.asarray(gc["rank"], dtype=np.int64)
    dur = np.asarray(gc["dur_ns"], dtype=np.int64)
    keep = dur >= T.gc_ms.value * NS_PER_MS
    keep[keep] = in_steps_mask(rank[keep], gc["step"][keep], windows)
    idx = np.flatnonzero(keep)
    order, slices = by_rank(rank[idx])
    idx = idx[order]
    step, start, dur = gc["step"][idx], np.asarray(gc["start_ns"], dtype=np.int64)[idx], dur[idx]
    return {r: (step[i:j], start[i:j], dur[i:j]) for r, i, j in slices}


def _by_rank(ctx: CheckContext, ranks: list[int], query: str) -> dict[int, pd.DataFrame]:
    """rank -> its rows of `query` (all `ranks` at once, ORDER BY rank; `{marks}` takes the placeholders),
    every rank of `ranks` present (an empty frame when it has no row)."""
    if not ranks:
        return {}
    df = ctx.sql(query.format(marks=",".join("?" * len(ranks))), [int(r) for r in ranks])
    cuts = {r: (i, j) for r, i, j in rank_slices(df["rank"].to_numpy(dtype=np.int64))}
    return {int(r): df.iloc[slice(*cuts.get(int(r), (0, 0)))] for r in ranks}


def _idle_gaps(timeline: DeviceTimeline, w0: int, w1: int) -> list[tuple[int, int]]:
    """Device idle intervals inside [w0, w1) (including before the first and after the last op)."""
    s, e = timeline.starts, timeline.ends
    m = (e > w0) & (s < w1)
    s, e = np.maximum(s[m], w0), np.minimum(e[m], w1)
    bounds = np.concatenate(([w0], e)), np.concatenate((s, [w1]))
    return [(int(a), int(b)) for a, b in zip(*bounds, strict=True) if b > a]


def fixed_stall_of(gaps: list[dict[str, Any]], n_steps: int) -> dict[str, Any] | None:
    """The longest silence of each kept step when every kept step (at least 3) has one and their lengths agree
    within T.conjectured_gc_fixed_stall_spread of their median (those gaps are marked `fixed`); else None."""
    longest: dict[int, dict[str, Any]] = {}
    for g in gaps:
        if g["step"] not in longest or g["gap_ms"] > longest[g["step"]]["gap_ms"]:
            longest[g["step"]] = g
    if n_steps < 3 or len(longest) < n_steps:
        return None
    ms = np.array([g["gap_ms"] for g in longest.values()], dtype=np.float64)
    median = float(np.median(ms))
    spread = float(ms.max() - ms.min()) / median if median > 0 else np.inf
    if spread > T.conjectured_gc_fixed_stall_spread.value:
        return None
    for g in longest.values():
        g["fixed"] = True
    return {"steps": sorted(longest), "median_ms": round(median, 3), "spread": round(spread, 5),
            "device_idle_ms_per_step": round(sum(g["device_idle_ns"] for g in longest.values())
                                             / NS_PER_MS / n_steps, 3),
            "threshold_spread": T.conjectured_gc_fixed_stall_spread.value}


def fixed_stall_text(rank: int, fixed: dict[str, Any]) -> str:
    return (f"rank {rank}: the host stops {fixed['median_ms']:.3g} ms in every step ({len(fixed['steps'])} steps, "
            f"lengths within {100 * fixed['spread']:.2g} %) with nothing traced while the device idles "
            f"{fixed['device_idle_ms_per_step']:.3g} ms per step: a fixed per-step stall (time.sleep, blocking I/O, "
            "untraced work of a fixed size), not a GC pause; profile with with_stack=True or sample with py-spy to "
            "see the code")


def fixed_stall(ctx: CheckContext, rank: int) -> dict[str, Any] | None:
    """The fixed per-step host stall of one CUDA / ROCm rank (see `fixed_stall_of`), or None: for a check that
    names what a rank did in an untraced gap (slow-rank) and must not call it GC."""
    return ctx.once(_fixed_stall, int(rank))


def _fixed_stall(ctx: CheckContext, rank: int) -> dict[str, Any] | None:
    if ctx.vendor(rank) == "ascend":
        return None
    w = _Windows(ctx.view.step_windows([rank]))
    timeline = ctx.view.device_timeline(rank)
    if w.n(rank) == 0 or timeline.empty:
        return None
    host = ctx.view.host_events([rank])[int(rank)]
    return GcPauseCheck._conjectured_gpu(host, w.of(rank), timeline)[1]


def _conjectured_stats(gaps: list[dict[str, Any]], n_steps: int, what: str) -> GcRank | None:
    """One rank's conjectured evidence from its gaps (dicts, as `fixed_stall_of` reads them), or None."""
    if not gaps:
        return None
    idle = sum(g.pop("device_idle_ns") for g in gaps)
    top = sorted(gaps, key=lambda g: -g["gap_ms"])[:10]
    return GcRank(steps=sorted({g["step"] for g in gaps}), gaps=len(gaps), max_gap_ms=max(g["gap_ms"] for g in gaps),
                  impact_ms_per_step=round(idle / NS_PER_MS / max(n_steps, 1), 4), what=what,
                  top_gaps=[GcGap(**g) for g in top])
