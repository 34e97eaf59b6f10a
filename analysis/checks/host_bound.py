"""host-bound: the device waits for the host to launch work (launch overhead, slow dispatch, tiny kernels).

Rule (HTA idle_time_breakdown `host_wait`, docs/rules.md §8; XProf / tb-profiler device-idle
rule, docs/rules.md §9): a (rank, step) is host-bound when
  * the device is free for at least T.host_bound_free_pct of the step (breakdown free / step), and
  * at least T.host_bound_late_launch_pct of the device's inter-op idle time is "late launch": gaps whose
    next op was launched by the host only after the previous op had ended (the queue ran dry).

Algorithm, per rank and kept step, inside the step's device window:
1. merge the device ops (kernels, copies, collectives; synchronisation markers are not work) and take the
   gaps between consecutive merged intervals (HTA counts only inter-op gaps, not time before the first or
   after the last op);
2. the op that ends a gap is linked to its host launch by correlation id (Kineto cudaLaunchKernel /
   hipLaunchKernel, Ascend `Node@launch` via the `async_npu` flow). The gap is
   - `late launch` when that launch started after the gap began (the host was late), unless
   - `synchronize`: a stream/device synchronize call returned between the previous op's launch and this
     launch (host clock only): the host waited for the device by itself, which sync-stream reports, or
   - `host stall`: GC, allocator or compile calls, data loading or a silence with no host event at all
     (T.conjectured_gc_gpu_silence_ms) cover at least half of the gap: gc-pause, memory-ops, op-compile and slow-dataloader
     report those (neither is counted here: no double count);
   - `other` otherwise (the op was queued in time and waited on something else: an event, another stream),
   - `unknown` when the op has no launch in the trace (HCCL / NCCL ops launched by the runtime);
3. late share = late-launch gap time / all inter-op gap time.

impact_ms = the late-launch idle per step (mean over the rank's kept steps) less the profiler's own host
overhead per step where meta/step_times_rank<N>.json gives unprofiled step times (metrics.idle): the device
time the host failed to fill that a run without the profiler would still lose. Severity: the impact rule on
the unprofiled step, and high only when launch-rate bound (median kernel shorter than the median launch
call: no host keeps such a device busy); otherwise at most medium. The evidence attributes all device idle
inside the steps to what the host did (metrics.idle.attribute_idle); only the launching part is this check's.

Evidence adds what makes a step host-bound in practice: kernels per step, their median duration, the
median interval between consecutive launches and the launch call's median duration; "many tiny kernels"
when the median kernel is shorter than the median launch interval (the host cannot keep the queue full).

The device-timeline helpers the host-side checks share (sync-stream, gc-pause, slow-dataloader,
exposed-comm-tail) are in _common.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ..metrics.idle import ATTRIBUTION_KINDS, attribute_idle, idle_gaps, profiler_overhead, unprofiled_share
from ..models import Finding, severity_from_impact
from ..severity import Severity
from ..thresholds import T
from ..units import NS_PER_MS
from ._common import (
    blocking_env,
    by_rank,
    fmt_ms,
    rank_batches,
    rank_ordered,
    worst_share,
)
from ._launches import launch_stats
from .base import Check, CheckContext, register
from .evidence import Entry, Evidence
from .view import LaunchLookup, host_silences

# A late-launch gap is charged to a stall when stalls cover at least this share of it.
STALL_SHARE = T.host_bound_stall_share.value
_DEVICE_QUERY = "SELECT start_ns, dur_ns, correlation_id FROM device_work WHERE rank = ? ORDER BY start_ns"


class HostBoundRank(Entry):
    weighs_by = "late_launch_idle_ms_per_step"
    steps: list[int]
    free_pct: float                 # shares: mean over the fired steps
    late_launch_share_pct: float
    late_launch_idle_ms_per_step: float    # idle kinds: ms per step over the kept steps
    sync_blocked_idle_ms_per_step: float
    host_stall_idle_ms_per_step: float
    unknown_idle_ms_per_step: float
    inter_op_idle_ms_per_step: float
    device_ops_per_step: float
    median_kernel_us: float | None
    launches_per_step: float
    median_launch_interval_us: float | None
    median_launch_call_us: float | None
    many_tiny_kernels: bool
    profiler_overhead_ms_per_step: float | None     # None without meta/step_times
    unprofiled_step_ms: float | None
    late_launch_idle_without_profiler_ms_per_step: float | None
    idle_attribution_ms_per_step: dict[str, float]  # metrics.idle.ATTRIBUTION_KINDS -> ms per step
    launch_rate_bound: bool | None = None           # the worst rank's only (its severity rule)


class HostBoundEvidence(Evidence):
    threshold_free_pct: float
    threshold_late_launch_pct: float
    launch_blocking: bool
    per_rank: dict[int, HostBoundRank]
    severity_rule: str
    impact_method: str = ("late-launch device idle per step (gaps whose next op was launched after the previous op "
                          "ended; gaps after a synchronize excluded), mean over the rank's kept steps, less the "
                          "profiler's own host overhead per step where meta/step_times gives the unprofiled step; "
                          "worst rank")
    source: str = "HTA idle_time_breakdown host_wait; XProf/tb-profiler device idle >= 10 %"


@register
class HostBoundCheck(Check):
    id = "host-bound"
    dimension = "free"
    title = "Host-bound launch"
    fires_when = "the device waits for the host to launch work (launch overhead, dispatch)"
    thresholds = (
        "conjectured_gc_gpu_silence_ms", "host_bound_free_pct", "host_bound_late_launch_pct",
        "host_bound_stall_share",
    )
    frameworks = ("pytorch", "mindspore")
    vendors = ("ascend", "cuda", "rocm")
    needs_by_vendor: ClassVar[dict[str, tuple[str, ...]]] = {
        "ascend": ("steps", "correlation"),
        "cuda": ("steps", "kernels", "correlation"),
        "rocm": ("steps", "kernels", "correlation"),
    }
    description = (
        'Per rank and step: device idle >= {host_bound_free_pct} % of the step, and >= '
        "{host_bound_late_launch_pct} % of the idle between device ops is HTA 'host_wait' (the next op's launch "
        "started after the previous op ended). Impact is that late-launch idle per step less the profiler's own "
        'host overhead (unprofiled step times); high only when kernels are shorter than a launch call; evidence '
        'names the launch gap, kernel sizes and what the host did in all device idle.'
    )
    evidence = HostBoundEvidence
    title_template = "Device waits for host launches ({ms} ms per step on rank {worst_rank})"
    message_template = (
        "On {ranks} ({steps}) the device is idle {worst.free_pct:.1f} % of the step on rank {worst_rank} and "
        "{worst.late_launch_share_pct:.1f} % of the idle between ops waits for a late host launch ({ms} ms per "
        "step, thresholds {host_bound_free_pct:g} % / {host_bound_late_launch_pct:g} %){gap}{tiny}. "
        "{severity_rule}"
    )

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        windows = ctx.view.step_windows(ranks)
        # One stable split of the windows by rank (each rank's steps in their order): a mask per rank was most
        # of this check's time on many ranks.
        order, slices = by_rank(windows["rank"].to_numpy(dtype=np.int64))
        w_cols = [windows[c].to_numpy()[order] for c in ("step", "w0", "w1")]
        w_by_rank = {r: [c[i:j].tolist() for c in w_cols] for r, i, j in slices}
        per_rank, per_rank_ms, fired_steps = self._fired_ranks(ctx, ranks, w_by_rank)
        if not per_rank:
            return []
        return [self._launch_finding(ctx, per_rank, per_rank_ms, fired_steps)]

    def _fired_ranks(
        self, ctx: CheckContext, ranks: list[int], w_by_rank: dict[int, list[list[Any]]]
    ) -> tuple[dict[int, HostBoundRank], dict[int, float], dict[int, list[int]]]:
        """Rank -> evidence entry, rank -> impact ms per step (`_profiler_corrected`) and rank -> fired steps,
        for the ranks with a step past both thresholds (device free >= T.host_bound_free_pct of the step, late
        launch >= T.host_bound_late_launch_pct of the inter-op idle). `w_by_rank`: rank -> [steps, window
        starts, window ends] (ns)."""
        steps_ms = ctx.view.step_ms
        free_ms = {(r.rank, int(r.step)): r.free_ms for r in ctx.breakdown if r.step is not None}
        all_steps = ctx.view.kept_steps
        per_rank: dict[int, HostBoundRank] = {}
        per_rank_ms: dict[int, float] = {}
        fired_steps: dict[int, list[int]] = {}
        # host calls and device ops are read a batch of ranks at a time (one query each per batch; batches
        # cut by host_ops rows, the larger table: a launch call per kernel plus the framework's ops); only
        # the fired ranks' entries are kept between batches
        for batch in rank_batches(ctx, ranks, "host_ops"):
            host = ctx.view.launch_lookup(batch)
            marks = ",".join("?" * len(batch))
            dev = rank_ordered(ctx, batch, _DEVICE_QUERY,
                               "SELECT rank, start_ns, dur_ns, correlation_id FROM device_work WHERE rank IN "
                               f"({marks}) ORDER BY rank, start_ns", ("start_ns",))
            for rank in batch:
                w = w_by_rank.get(int(rank))
                if w is None:
                    continue
                stats = self._rank_stats(ctx, rank, w, host[rank], dev[rank])
                fired = self._fired(rank, stats, steps_ms, free_ms)
                if not fired:
                    continue
                n = max(len(all_steps.get(rank, [])), 1)
                per_rank[rank], per_rank_ms[rank] = self._rank_entry(ctx, rank, w, stats, fired, n)
                fired_steps[rank] = fired
            del host, dev
        return per_rank, per_rank_ms, fired_steps

    @staticmethod
    def _fired(rank: int, stats: list[dict[str, Any]], steps_ms: dict, free_ms: dict) -> list[int]:
        """The steps of `stats` past both thresholds; adds free_pct and late_share_pct to each step judged."""
        thr_free = T.host_bound_free_pct.value
        thr_late = T.host_bound_late_launch_pct.value
        fired: list[int] = []
        for st in stats:
            key = (rank, st["step"])
            step_ms = steps_ms.get(key)
            fm = free_ms.get(key)
            if not step_ms or fm is None or st["gap_ns"] <= 0:
                continue
            st["free_pct"] = 100.0 * fm / step_ms
            st["late_share_pct"] = 100.0 * st["late_ns"] / st["gap_ns"]
            if st["free_pct"] >= thr_free and st["late_share_pct"] >= thr_late:
                fired.append(st["step"])
        return fired

    def _rank_entry(self, ctx: CheckContext, rank: int, w: list[list[Any]], stats: list[dict[str, Any]],
                    fired: list[int], n: int) -> tuple[HostBoundRank, float]:
        """The evidence of one fired rank and its impact ms per step: shares over its fired steps, idle kinds in
        ms per step over its `n` kept steps, its launch statistics, the profiler's overhead and what the host
        did in all its device idle."""
        hit = [s for s in stats if s["step"] in fired]
        late_ms = round(sum(s["late_ns"] for s in stats) / NS_PER_MS / n, 4)
        launch = launch_stats(ctx, rank, [int(s) for s in w[0]])
        kern_us, gap_us = launch.median_kernel_us, launch.median_launch_interval_us
        ms, ov = self._profiler_corrected(ctx, rank, late_ms)
        return HostBoundRank(
            steps=fired,
            free_pct=round(float(np.mean([s["free_pct"] for s in hit])), 2),
            late_launch_share_pct=round(float(np.mean([s["late_share_pct"] for s in hit])), 2),
            late_launch_idle_ms_per_step=late_ms,
            sync_blocked_idle_ms_per_step=round(sum(s["sync_ns"] for s in stats) / NS_PER_MS / n, 4),
            host_stall_idle_ms_per_step=round(sum(s["stall_ns"] for s in stats) / NS_PER_MS / n, 4),
            unknown_idle_ms_per_step=round(sum(s["unknown_ns"] for s in stats) / NS_PER_MS / n, 4),
            inter_op_idle_ms_per_step=round(sum(s["gap_ns"] for s in stats) / NS_PER_MS / n, 4),
            device_ops_per_step=round(sum(s["ops"] for s in stats) / n, 1),
            median_kernel_us=kern_us, launches_per_step=launch.launches_per_step,
            median_launch_interval_us=gap_us, median_launch_call_us=launch.median_launch_call_us,
            many_tiny_kernels=bool(kern_us is not None and gap_us is not None and kern_us < gap_us),
            profiler_overhead_ms_per_step=ov["overhead_ms"] if ov else None,
            unprofiled_step_ms=ov["unprofiled_step_ms"] if ov else None,
            late_launch_idle_without_profiler_ms_per_step=round(max(late_ms - ov["overhead_ms"], 0.0), 4)
            if ov else None,
            idle_attribution_ms_per_step=self._attribution(ctx, rank, w),
        ), ms

    def _launch_finding(self, ctx: CheckContext, per_rank: dict[int, HostBoundRank],
                        per_rank_ms: dict[int, float], fired_steps: dict[int, list[int]]) -> Finding:
        """The one finding over all fired ranks, its impact and wording from the worst rank's entry."""
        rank_w, ms_w = worst_share(ctx, per_rank_ms)
        rk = sorted(per_rank)
        steps_seen = sorted({s for ss in fired_steps.values() for s in ss})
        e = per_rank[rank_w] if rank_w is not None else next(iter(per_rank.values()))
        sev, why = self._severity(ctx, rank_w, ms_w, e)
        attr = sorted(((v, k) for k, v in e.idle_attribution_ms_per_step.items() if v > 0), reverse=True)
        why += (" Device idle inside the step by what the host did: "
                + ", ".join(f"{k.replace('_', ' ')} {v:.3g} ms" for v, k in attr) + " per step.") if attr else ""
        tiny = (f"; median kernel {e.median_kernel_us:.1f} µs vs median launch interval "
                f"{e.median_launch_interval_us:.1f} µs: many tiny kernels" if e.many_tiny_kernels else "")
        gap = (f", typical launch gap {e.median_launch_interval_us:.1f} µs"
               if e.median_launch_interval_us is not None else "")
        return self.finding(
            ctx, subject="launch", ranks=rk, steps=steps_seen, impact_ms=ms_w, impact_rank=rank_w, severity=sev,
            evidence=HostBoundEvidence(
                threshold_free_pct=T.host_bound_free_pct.value,
                threshold_late_launch_pct=T.host_bound_late_launch_pct.value,
                # late launches are not synchronous ones (gaps after a sync are excluded above): launch blocking
                # only where the recorded environment sets it (the launch-blocking fixes' `when`)
                launch_blocking=bool(blocking_env(ctx, rk)), per_rank=per_rank, severity_rule=why),
            words={"ms": fmt_ms(ms_w or 0), "gap": gap, "tiny": tiny})

    @staticmethod
    def _attribution(ctx: CheckContext, rank: int, w: list[list[Any]]) -> dict[str, float]:
        """Device idle inside the rank's kept steps by what the host did meanwhile (metrics.idle), ms per step:
        only the `launch` part is this check's; the others are named for the checks that own them."""
        ev = ctx.view.host_events([rank])[int(rank)]
        tl = ctx.view.device_timeline(rank)
        silences = host_silences(ev, int(T.conjectured_gc_gpu_silence_ms.value * NS_PER_MS))
        tot = dict.fromkeys(ATTRIBUTION_KINDS, 0)
        for _step, w0, w1 in zip(*w, strict=True):
            g0, g1 = idle_gaps(tl.starts, tl.ends, int(w0), int(w1))
            for kind, d in zip(attribute_idle(g0, g1, ev, silences).tolist(), (g1 - g0).tolist(), strict=True):
                tot[kind] += int(d)
        n = max(len(w[0]), 1)
        return {k: round(v / NS_PER_MS / n, 4) for k, v in tot.items()}

    @staticmethod
    def _profiler_corrected(ctx: CheckContext, rank: int, late: float) -> tuple[float, dict[str, float] | None]:
        """(late-launch idle per step that remains without the profiler, the profiler's overhead or None): the
        measured idle `late` less the profiler's host overhead per step (profiled minus unprofiled step,
        meta/step_times), never below 0. The profiler slows every host op it records; the device work does not
        change, so that host time is idle the device would not see. Without the unprofiled steps the measured
        idle stands (an upper bound)."""
        ov = profiler_overhead(ctx.profile, rank)
        return (max(late - ov["overhead_ms"], 0.0) if ov else late), ov

    @staticmethod
    def _severity(ctx: CheckContext, rank: int | None, ms: float | None, e: HostBoundRank) -> tuple[Severity, str]:
        """The impact rule on the share of the unprofiled step (else the profiled one), capped at medium
        unless the run is launch-rate bound: the median kernel is shorter than the median launch call itself,
        so no host (with or without the profiler) can issue kernels as fast as the device runs them. Otherwise
        the idle is host work between launches that the profiler inflates (each recorded op costs host time).
        Sets the entry's `launch_rate_bound`."""
        pct, basis = unprofiled_share(ctx.profile, rank, ms, ctx.mean_step_ms(rank))
        sev = severity_from_impact(pct)
        kern, call = e.median_kernel_us, e.median_launch_call_us
        rate_bound = kern is not None and call is not None and kern < call
        e.launch_rate_bound = rate_bound
        ov = e.profiler_overhead_ms_per_step
        shrink = (f"The profiler adds about {ov:.3g} ms of host time per step (profiled vs unprofiled step); the "
                  "idle above is net of it." if ov else
                  f"Launch calls take {call:.3g} µs under the profiler; without it the host-side share shrinks."
                  if call is not None else "")
        if sev == "high" and not rate_bound:
            return "medium", (f"{pct:g} % of the {basis}, but kernels (median {kern} µs) outlast a launch call "
                              f"(median {call} µs): the host is slow between launches, not at launching; at most "
                              f"medium. {shrink}")
        return sev, f"{pct if pct is not None else 'unknown'} % of the {basis}. {shrink}"

    @staticmethod
    def _rank_stats(ctx: CheckContext, rank: int, w: list[list[Any]], host: LaunchLookup,
                    ops: dict[str, np.ndarray]) -> list[dict[str, Any]]:
        """Per kept step: device ops, inter-op gap ns and its split into late / sync / stall / unknown ns.
        Vectorised over the gaps of a step (a Python pass per device op dominated this check's time). `w`: the
        rank's kept steps, device window starts and ends (in step order); `ops`: the rank's device ops by start
        (`_DEVICE_QUERY`; which op comes first when two start together decides which launch a gap is charged
        to); `host`: the rank's launch lookup and sync ends (`ProfileView.launch_lookup`)."""
        launch_of = host.launched
        sync_end = host.sync_end
        s_all = ops["start_ns"].astype(np.int64)
        e_all = s_all + ops["dur_ns"].astype(np.int64)
        cid = ops["correlation_id"]
        corr = (np.where(np.isnan(cid), -1, cid) if cid.dtype.kind == "f" else cid).astype(np.int64)
        out: list[dict[str, Any]] = []
        for step, w0, w1 in zip(*w, strict=True):
            m = (s_all >= w0) & (s_all < w1)
            idx = np.flatnonzero(m)
            st = {"step": int(step), "ops": int(idx.size), "gap_ns": 0, "late_ns": 0, "sync_ns": 0,
                  "stall_ns": 0, "unknown_ns": 0}
            if idx.size < 2:
                out.append(st)
                continue
            s, e, c = s_all[idx], np.minimum(e_all[idx], w1), corr[idx]
            run_end = np.maximum.accumulate(e)
            # index of the op that set the running end (the op the gap follows)
            last = np.maximum.accumulate(np.where(e == run_end, np.arange(idx.size), 0))
            gap_all = s[1:] - run_end[:-1]
            k = np.flatnonzero(gap_all > 0) + 1          # the ops that end a gap
            gap = gap_all[k - 1]
            g0 = run_end[k - 1]
            has, launch = launch_of(c[k])
            late = has & (launch > g0)
            # A synchronize that returned between the previous op's launch and this launch means the host
            # waited for the previous op by itself (sync-stream's finding). Host clock only, so a skew between
            # the host and device clocks does not matter.
            p = c[last[k - 1]]
            p_has, p_launch = launch_of(p)
            since = np.where(p_has, p_launch, g0)
            if sync_end.size:
                j = np.searchsorted(sync_end, since, side="right")
                synced = late & (j < sync_end.size) & (sync_end[np.minimum(j, sync_end.size - 1)] <= launch)
            else:
                synced = np.zeros(k.size, dtype=bool)
            rest = late & ~synced
            stalled = np.zeros(k.size, dtype=bool)
            if rest.any():   # GC / allocator / compile / data loading held the host
                stalls = ctx.view.host_stalls(rank)
                stalled[rest] = stalls.within(g0[rest], launch[rest]) >= STALL_SHARE * gap[rest]
            st["gap_ns"] = int(gap.sum())
            st["unknown_ns"] = int(gap[~has].sum())
            st["sync_ns"] = int(gap[synced].sum())
            st["stall_ns"] = int(gap[stalled].sum())
            st["late_ns"] = int(gap[rest & ~stalled].sum())
            out.append(st)
        return out
