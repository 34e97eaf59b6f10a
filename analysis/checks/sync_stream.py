"""sync-stream: the host synchronizes the stream right after launching work, on every rank.

Rules:
* Ascend (msprof-analyze 26.2.0 synchronize_stream, docs/rules.md §4): walk each host thread's CANN API calls in
  start order; a `AscendCL@aclrtSynchronizeStream` whose previous CANN call is `Node@launch` is a
  co-occurrence. co-occurrence ratio = co-occurrences / `Node@launch` calls; it is an issue when the ratio
  > T.sync_co_occurrence (0.5). Priority fixed HIGH, as the advisor does. The usual cause is
  ASCEND_LAUNCH_BLOCKING=1 (its recorded value is put in the evidence).
* CUDA / ROCm (stepdoctor, HTA idle_time_breakdown): a `cudaStreamSynchronize`, `cudaDeviceSynchronize`,
  `cudaEventSynchronize`, `hipStreamSynchronize`... runtime call that follows at least one launch on its
  thread (since the previous sync) returns once the device has drained; the device then idles until the host
  launches again. That idle (metrics.idle.idle_after: from the sync's return to the next device op, inside
  the step's host window, less any time a collective is open on the host or a host stall holds it: data
  loading, allocator calls, GC, a silence with no host event, which their own checks report) is the sync's cost; a sync that
  waits for a busy device leaves none, however long the host waited. A step with >= T.sync_idle_ms of it
  fires. Each sync is traced to the operator that issued it (aten::item, aten::_local_scalar_dense,
  aten::is_nonzero, aten::nonzero...) and, with stacks, the user's frame.
  Severity: the impact rule against the unprofiled step (meta/step_times, else the profiled mean step), at
  least medium when >= T.sync_idle_count such syncs run per ProfilerStep (a sync per layer; a trace without
  step annotations is one step of many iterations, where a count per step says nothing).

Ascend impact, per step: min(host time blocked in synchronize calls that follow launches, device idle time
inside the step's host window), an upper bound; GPU impact: the idle above. Mean over the rank's kept steps,
for the worst rank.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np
import pandas as pd

from ..metrics.idle import COLLECTIVE_RE, idle_after, sync_triggers, unprofiled_share
from ..models import Finding, severity_from_impact
from ..severity import Severity
from ..thresholds import T
from ..timeline.intervals import Coverage, union_of
from ..units import NS_PER_MS
from ._common import (
    LAUNCH_RE,
    SYNC_RE,
    blocking_env,
    by_value,
    fmt_ms,
    group_cumsum,
    group_shift,
    in_steps_mask,
    rank_batches,
    rank_ordered,
    rank_slices,
    worst_share,
)
from .base import Check, CheckContext, register
from .evidence import Entry, Evidence, Record

ASCEND_LAUNCH = "Node@launch"
ASCEND_SYNC = "AscendCL@aclrtSynchronizeStream"


class AscendSyncStep(Record):
    blocked_ms: float
    device_idle_ms: float


class GpuSyncStep(Record):
    syncs: int
    blocked_ms: float
    device_idle_after_ms: float


class SyncTrigger(Record):
    trigger: str | None
    outer_trigger: str | None
    source: str | None
    calls: int


class SyncRank(Entry):
    weighs_by = "impact_ms_per_step"
    steps: list[int]
    launches: int
    syncs: int
    syncs_right_after_launch: int
    co_occurrence_ratio: float
    syncs_after_launch_per_step: float
    blocked_ms_per_step: float
    impact_ms_per_step: float
    by_step: dict[str, AscendSyncStep | GpuSyncStep]   # step -> its syncs (Ascend: only steps with blocked time)
    syncs_leaving_device_idle_per_step: float | None = None   # GPU
    triggers: list[SyncTrigger] | None = None                 # GPU: the commonest five
    launch_blocking_env: dict[str, str] | None = None         # where the recorded environment sets one


class SyncStreamEvidence(Evidence):
    rule: str
    launch_blocking: bool
    per_rank: dict[int, SyncRank]
    threshold_co_occurrence: float | None = None                      # Ascend
    threshold_device_idle_after_ms_per_step: float | None = None      # GPU, with the severity rule's parts
    severity_share_pct: float | None = None
    severity_basis: str | None = None
    threshold_syncs_per_step_for_medium: int | float | None = None


@register
class SyncStreamCheck(Check):
    id = "sync-stream"
    dimension = "free"
    title = "Stream synchronization after launches"
    fires_when = "the host synchronizes the stream after launches (e.g. launch blocking)"
    thresholds = ("sync_co_occurrence", "sync_idle_count", "sync_idle_ms")
    vendors = ("ascend", "cuda", "rocm")
    needs_by_vendor: ClassVar[dict[str, tuple[str, ...]]] = {
        "ascend": ("cann_api",),
        "cuda": ("kernels",),
        "rocm": ("kernels",),
    }
    description = (
        'Ascend: aclrtSynchronizeStream immediately after Node@launch for more than {sync_co_occurrence:.0%} of '
        'the launches (msprof-analyze, fixed high; impact: blocked time capped by the device idle time). GPU: the'
        ' device idle each synchronize after launches leaves behind (from its return to the next device op, in '
        'the step; a sync that waits for a busy device costs nothing) >= {sync_idle_ms} ms per step, with its '
        'trigger operator and source frame; severity against the unprofiled step, at least medium from '
        '{sync_idle_count} such syncs per step.'
    )
    evidence = SyncStreamEvidence
    title_template = "Host synchronizes the stream after launches on {ranks}"
    message_template = (
        "On {ranks} ({steps}) {what}{cause}: the host waits for every kernel and the device idles while the host "
        "prepares the next one; up to {ms} ms per step (host blocked in syncs {worst.blocked_ms_per_step:.3g} ms "
        "per step)."
    )

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        windows = ctx.view.step_windows(ranks)
        env = blocking_env(ctx, ranks)
        # subject (sync API) -> rank -> stats
        found: dict[str, dict[int, SyncRank]] = {}
        # windows are ordered by rank, step: cut them once instead of a boolean filter per rank
        wr = windows["rank"].to_numpy(dtype=np.int64)
        w_cols = {k: windows[k].to_numpy() for k in ("step", "start_ns", "end_ns")}
        w_at = {r: (i, j) for r, i, j in rank_slices(wr)}
        # API calls are read a batch of ranks at a time (one query per batch and kind of rank); only the
        # per-rank stats are kept between batches
        for batch in rank_batches(ctx, ranks, "host_ops"):
            calls = self._api_calls(ctx, batch)
            marks = self._marks(ctx, batch, calls, windows)
            for rank in batch:
                i, j = w_at.get(int(rank), (0, 0))
                if i == j:
                    continue
                w = {k: v[i:j] for k, v in w_cols.items()}
                ascend = ctx.vendor(rank) == "ascend"
                stats = self._rank(ctx, rank, w, ascend, calls[rank], marks.get(rank))
                if stats is None:
                    continue
                subject, st = stats
                if env.get(rank):
                    st.launch_blocking_env = env[rank]
                found.setdefault(subject, {})[rank] = st
            del calls, marks
        out: list[Finding] = []
        for subject, per_rank in sorted(found.items()):
            out.append(self._finding(ctx, subject, per_rank))
        return out

    @staticmethod
    def _marks(ctx: CheckContext, ranks: list[int], calls: dict[int, dict[str, np.ndarray]], windows: pd.DataFrame
               ) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Per rank with calls: (in a kept step, is a launch, is a synchronize) for each of its calls.

        Computed on all ranks' calls at once and cut back per rank: the step test and the name tests cost
        a fixed overhead per call, which dominated on many ranks with few calls each. The step codes carry
        the rank, so testing against every rank's windows is the same as against the rank's own."""
        rs = [int(r) for r in ranks if calls[r]["rank"].size]
        if not rs:
            return {}
        rank = np.concatenate([calls[r]["rank"] for r in rs])
        step = np.concatenate([calls[r]["step"] for r in rs])
        name = np.concatenate([np.asarray(calls[r]["name"], dtype=object) for r in rs])
        keep = in_steps_mask(rank, step, windows)
        asc = np.concatenate([np.full(calls[r]["rank"].size, ctx.vendor(r) == "ascend") for r in rs])
        # each row is judged by its own rank's rule, exactly as a per-rank pass would
        is_launch = np.where(asc, by_value(name, lambda n: str(n) == ASCEND_LAUNCH),
                             by_value(name, lambda n: LAUNCH_RE.match(str(n))))
        is_sync = np.where(asc, by_value(name, lambda n: str(n) == ASCEND_SYNC),
                           by_value(name, lambda n: SYNC_RE.match(str(n))))
        out: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        at = 0
        for r in rs:
            n = calls[r]["rank"].size
            k = keep[at:at + n]
            out[r] = (k, is_launch[at:at + n][k], is_sync[at:at + n][k])
            at += n
        return out

    @staticmethod
    def _api_calls(ctx: CheckContext, ranks: list[int]) -> dict[int, dict[str, np.ndarray]]:
        """Per rank: its runtime API calls (CANN on Ascend, CUDA / HIP runtime and driver otherwise) by thread
        and start, longest first, as numpy columns. One query per kind of rank (`rank_ordered`: the ORDER BY
        decides which call precedes which, so a rank with calls that tie gets the query of its own)."""
        out: dict[int, dict[str, np.ndarray]] = {}
        for ascend in (True, False):
            rs = [r for r in ranks if (ctx.vendor(r) == "ascend") == ascend]
            if not rs:
                continue
            kind = "category = 'cann'" if ascend else "category <> 'cann'"
            sel = "SELECT rank, step, name, tid, start_ns, dur_ns FROM host_api_calls WHERE"
            out.update(rank_ordered(
                ctx, rs, f"{sel} rank = ? AND {kind} ORDER BY tid, start_ns, dur_ns DESC",
                f"{sel} rank IN ({','.join('?' * len(rs))}) AND {kind} "
                "ORDER BY rank, tid, start_ns, dur_ns DESC", ("tid", "start_ns", "dur_ns")))
        return out

    def _rank(self, ctx: CheckContext, rank: int, w: dict[str, np.ndarray], ascend: bool,
              ev: dict[str, np.ndarray], marks: tuple[np.ndarray, np.ndarray, np.ndarray] | None
              ) -> tuple[str, SyncRank] | None:
        # numpy columns instead of a frame; the step and name tests come from `_marks`
        if marks is None:
            return None
        keep, is_launch, is_sync = marks
        if not keep.any():
            return None
        # usually every call is in a kept step: then no copy at all; else only the columns used below
        ev = ev if keep.all() else {k: ev[k][keep] for k in ("step", "tid", "start_ns", "dur_ns", "name")}
        t = ev["tid"]
        tid = (np.where(np.isnan(t), -1, t) if t.dtype.kind == "f" else t).astype(np.int64)
        same_tid = np.zeros(tid.size, dtype=bool)
        same_tid[1:] = tid[1:] == tid[:-1]
        prev_launch = np.zeros(tid.size, dtype=bool)
        prev_launch[1:] = is_launch[:-1]
        pair = is_sync & prev_launch & same_tid
        if ascend:
            after_launch = pair
        else:
            # GPU: at least one launch on this thread since its previous synchronize (else nothing to wait for)
            n_launch_cum = group_cumsum(tid, is_launch.astype(np.int64))
            at_sync = n_launch_cum[is_sync]
            since = at_sync - group_shift(tid[is_sync], at_sync, 0)
            after_launch = np.zeros(tid.size, dtype=bool)
            after_launch[is_sync] = since > 0
        n_launch, n_sync, n_pair = int(is_launch.sum()), int(is_sync.sum()), int(pair.sum())
        ratio = n_pair / n_launch if n_launch else 0.0
        # host ns blocked per step: integer sums, exact in any order
        step_col, dur = ev["step"][after_launch], ev["dur_ns"][after_launch].astype(np.int64)
        blocked: dict[int, int] = {}
        for st, d in zip(step_col.tolist(), dur.tolist(), strict=True):
            blocked[int(st)] = blocked.get(int(st), 0) + d
        steps = [int(x) for x in w["step"].tolist()]
        if ascend:
            if not (n_launch and ratio > T.sync_co_occurrence.value):
                return None
            fired = sorted({int(s) for s in ev["step"][pair]})
            subject = ASCEND_SYNC
            impact = self._ascend_impact(ctx, rank, w, steps, blocked)
        else:
            res = self._gpu_idle(ctx, rank, w, steps, ev, after_launch)
            if res is None:
                return None
            fired, subject, impact = res
        n = max(len(steps), 1)
        return subject, SyncRank(
            steps=fired, launches=n_launch, syncs=n_sync, syncs_right_after_launch=n_pair,
            co_occurrence_ratio=round(ratio, 4),
            syncs_after_launch_per_step=round(float(after_launch.sum()) / n, 2),
            blocked_ms_per_step=round(float(sum(blocked.values())) / NS_PER_MS / n, 4),
            **impact,
        )

    @staticmethod
    def _ascend_impact(ctx: CheckContext, rank: int, w: dict[str, np.ndarray], steps: list[int],
                       blocked: dict[int, int]) -> dict[str, Any]:
        """Ascend: per step min(host time blocked after launches, device idle in the step): the SyncRank fields
        of the impact."""
        idle_ns = ctx.view.device_timeline(rank).idle(w["start_ns"].astype(np.int64), w["end_ns"].astype(np.int64))
        per_step: dict[str, AscendSyncStep] = {}
        impact_ns: list[float] = []
        for step, idle_i in zip(steps, idle_ns.tolist(), strict=True):
            b = float(blocked.get(step, 0))
            impact_ns.append(min(b, float(idle_i)))
            if b > 0:
                per_step[str(step)] = AscendSyncStep(blocked_ms=round(b / NS_PER_MS, 4),
                                                     device_idle_ms=round(float(idle_i) / NS_PER_MS, 4))
        n = max(len(steps), 1)
        return {"impact_ms_per_step": round(float(np.sum(impact_ns)) / NS_PER_MS / n, 4), "by_step": per_step}

    @staticmethod
    def _gpu_idle(ctx: CheckContext, rank: int, w: dict[str, np.ndarray], steps: list[int], ev: dict[str, np.ndarray],
                  after_launch: np.ndarray) -> tuple[list[int], str, dict[str, Any]] | None:
        """GPU: the device idle each synchronize leaves behind (from its return to the next device op, inside
        its step's host window; 0 when the device is still busy), per step; the steps where that idle is
        >= T.sync_idle_ms fire. The subject is the sync API with the most such idle; triggers are counted.
        Returns (fired steps, subject, the SyncRank fields of the impact)."""
        idx = np.flatnonzero(after_launch)
        if idx.size == 0:
            return None
        step_of = ev["step"][idx].astype(np.int64)
        end = ev["start_ns"][idx].astype(np.int64) + ev["dur_ns"][idx].astype(np.int64)
        w_end = dict(zip(steps, w["end_ns"].astype(np.int64).tolist(), strict=True))
        limit = np.array([w_end.get(int(s), 0) for s in step_of.tolist()], dtype=np.int64)
        tl = ctx.view.device_timeline(rank)
        idle = idle_after(tl.starts, tl.ends, end, limit) if not tl.empty else np.zeros(idx.size, np.int64)
        # idle while a collective is open on the host is a wait for peer ranks (slow-rank's), and idle while the
        # host fetches a batch, allocates, collects garbage or is silent is that stall's (slow-dataloader,
        # memory-ops, gc-pause report it): only the rest is the sync's
        coll = SyncStreamCheck._collectives(ctx, rank)
        stalls = ctx.view.host_stalls(rank)
        other = union_of((coll.s, coll.e), (stalls.s, stalls.e))
        taken = other.within(end, end + idle) if other.s.size else np.zeros(idx.size, np.int64)
        idle = np.maximum(idle - taken, 0)
        per_step: dict[str, GpuSyncStep] = {}
        by_api: dict[str, int] = {}
        names = ev["name"][idx]
        for st, nm, b, i in zip(step_of.tolist(), names.tolist(), ev["dur_ns"][idx].tolist(), idle.tolist(),
                                strict=True):
            d = per_step.setdefault(str(st), GpuSyncStep(syncs=0, blocked_ms=0.0, device_idle_after_ms=0.0))
            d.syncs += 1
            d.blocked_ms = round(d.blocked_ms + b / NS_PER_MS, 4)
            d.device_idle_after_ms = round(d.device_idle_after_ms + i / NS_PER_MS, 4)
            by_api[str(nm)] = by_api.get(str(nm), 0) + int(i)
        thr = T.sync_idle_ms.value
        fired = [s for s in steps if (per_step[str(s)].device_idle_after_ms if str(s) in per_step else 0.0) >= thr]
        if not fired:
            return None
        n = max(len(steps), 1)
        leaving = int((idle > 0).sum())
        return fired, max(by_api, key=by_api.__getitem__), {
            "impact_ms_per_step": round(float(idle.sum()) / NS_PER_MS / n, 4),
            "syncs_leaving_device_idle_per_step": round(leaving / n, 2),
            "triggers": SyncStreamCheck._triggers(ctx, rank, ev, idx[idle > 0]),
            "by_step": per_step}

    @staticmethod
    def _collectives(ctx: CheckContext, rank: int) -> Coverage:
        """The rank's host collective annotations (gloo:all_reduce, nccl:..., c10d::...) as a coverage."""
        h = ctx.sql("SELECT name, start_ns, dur_ns FROM host_ops WHERE rank = ? AND category NOT IN ('runtime', "
                    "'driver', 'kernel')", [int(rank)])
        m = by_value(h["name"], lambda n: bool(COLLECTIVE_RE.search(str(n)))) if len(h) else np.zeros(0, bool)
        s = h["start_ns"].to_numpy(dtype=np.int64)[m] if len(h) else np.empty(0, np.int64)
        d = h["dur_ns"].to_numpy(dtype=np.int64)[m] if len(h) else np.empty(0, np.int64)
        return Coverage(s, s + d)

    @staticmethod
    def _triggers(ctx: CheckContext, rank: int, ev: dict[str, np.ndarray], idx: np.ndarray) -> list[SyncTrigger]:
        """Counts of (trigger operator, source line) over the given synchronize calls, most frequent first."""
        if idx.size == 0:
            return []
        s = ev["start_ns"][idx].astype(np.int64)
        e = s + ev["dur_ns"][idx].astype(np.int64)
        host = ctx.sql("SELECT name, tid, start_ns, dur_ns FROM host_ops WHERE rank = ? AND start_ns <= ? AND "
                       "start_ns + dur_ns >= ? ORDER BY start_ns", [int(rank), int(e.max()), int(s.min())])
        key = list(zip(host["start_ns"].to_numpy(dtype=np.int64).tolist(), host["dur_ns"].to_numpy().tolist(),
                       strict=True))
        pos = {k: i for i, k in enumerate(key)}
        rows = np.array([pos.get((int(a), int(b - a)), -1) for a, b in zip(s.tolist(), e.tolist(), strict=True)])
        found = sync_triggers(host, rows[rows >= 0])
        counts: dict[tuple[str | None, str | None, str | None], int] = {}
        for f in found:
            k = (f["trigger"], f["outer_trigger"], f["source"])
            counts[k] = counts.get(k, 0) + 1
        return [SyncTrigger(trigger=t, outer_trigger=o, source=src, calls=c)
                for (t, o, src), c in sorted(counts.items(), key=lambda kv: -kv[1])][:5]

    def _finding(self, ctx: CheckContext, subject: str, per_rank: dict[int, SyncRank]) -> Finding:
        ascend = subject == ASCEND_SYNC
        rank_w, ms_w = worst_share(ctx, {r: v.impact_ms_per_step for r, v in per_rank.items()})
        rk = sorted(per_rank)
        steps_seen = sorted({s for v in per_rank.values() for s in v.steps})
        e = per_rank[rank_w] if rank_w is not None else next(iter(per_rank.values()))
        env = sorted({f"{k}={v}" for st in per_rank.values() for k, v in (st.launch_blocking_env or {}).items()})
        cause = f" ({', '.join(env)} is set)" if env else ""
        if ascend:
            what = (f"{e.syncs_right_after_launch} of {e.launches} Node@launch calls are immediately followed "
                    f"by aclrtSynchronizeStream on rank {rank_w} (co-occurrence {e.co_occurrence_ratio:.2f} > "
                    f"{T.sync_co_occurrence.value:g})")
            rule: dict[str, Any] = {"threshold_co_occurrence": T.sync_co_occurrence.value,
                                    "rule": "msprof-analyze synchronize_stream (fixed high priority)"}
        else:
            trig = (e.triggers or [None])[0]
            op = " > ".join(dict.fromkeys(x for x in (trig and trig.outer_trigger, trig and trig.trigger) if x))
            by = "".join([f" from {op}" if op else "", f" at {trig.source}" if trig and trig.source else ""])
            what = (f"{e.syncs_leaving_device_idle_per_step or 0:g} {subject} calls per step{by} leave the "
                    f"device idle {fmt_ms(e.impact_ms_per_step)} ms per step on rank {rank_w} until the "
                    f"host launches again (threshold {T.sync_idle_ms.value:g} ms; a sync that waits for a busy "
                    f"device costs nothing here)")
            rule = {"threshold_device_idle_after_ms_per_step": T.sync_idle_ms.value,
                    "rule": "stepdoctor: device idle from a synchronize's return to the next device op, in the step"}
        sev: Severity | None = "high" if ascend else None
        if not ascend:
            # judged against the step the user runs: the profiler's host cost inflates the profiled step
            pct, basis = unprofiled_share(ctx.profile, rank_w, ms_w, ctx.mean_step_ms(rank_w))
            sev = severity_from_impact(pct)
            # many syncs per step (one per layer) drain the queue each time; under the profiler the host is
            # already behind the device, so the measured idle understates what they cost unprofiled
            # (per training step: a trace without ProfilerStep annotations is one step holding every iteration)
            if sev == "low" and (e.syncs_leaving_device_idle_per_step or 0) >= T.sync_idle_count.value \
                    and _annotated_steps(ctx, rank_w):
                sev = "medium"
            rule.update(severity_share_pct=pct, severity_basis=basis,
                        threshold_syncs_per_step_for_medium=T.sync_idle_count.value)
        # launch blocking is set where the recorded environment says so, or where (unrecorded, as in Kineto)
        # nearly every launch is followed by a sync, its signature (the "unset *_LAUNCH_BLOCKING" fixes' `when`)
        blocking = bool(env) or e.co_occurrence_ratio > T.sync_co_occurrence.value
        return self.finding(
            ctx, subject=subject, ranks=rk, steps=steps_seen, impact_ms=ms_w, impact_rank=rank_w, severity=sev,
            evidence=SyncStreamEvidence(
                **rule, launch_blocking=blocking, per_rank=per_rank,
                impact_method=("per step min(host time blocked in synchronize calls that follow launches, device "
                               "idle time in the step): an upper bound of what asynchronous launch saves; mean "
                               "over kept steps, worst rank") if ascend else
                              ("per step Σ device idle from each synchronize's return to the next device op, "
                               "inside the step's host window; mean over kept steps, worst rank")),
            words={"what": what, "cause": cause, "ms": fmt_ms(ms_w or 0)})


def _annotated_steps(ctx: CheckContext, rank: int | None) -> bool:
    """Whether the rank's steps are ProfilerStep#N annotations (not the whole trace taken as one step)."""
    if rank is None:
        return False
    df = ctx.sql("SELECT 1 FROM host_ops WHERE rank = ? AND name LIKE 'ProfilerStep#%' LIMIT 1", [int(rank)])
    return not df.empty
