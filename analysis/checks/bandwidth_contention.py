"""bandwidth-contention: SDMA communication slowed down while it overlapped matmul kernels, on every rank.

Rule (msprof-analyze 26.2.0 bandwidth_contention_analysis, bandwidth_contention.yaml, rules doc §5.2): a
communication op that moves SDMA data (communication.json: SDMA Transit Size > 0) and whose time span
[start, start + elapse) overlaps a matmul kernel (kernel name or op type contains "matmul") is contended
when its SDMA bandwidth is below T.contention_sdma_gbps (14.4 GB/s = 0.8 × the 18 GB/s SDMA baseline):
the collective's memory traffic competes with the cube unit's HBM reads.

The advisor compares kernel_details start times that may have been scaled to ns with communication
timestamps in µs (rules doc §9 bug 11); here both are ns on the rank's clock. Every rank is checked (the
advisor runs it on the lowest-SDMA-bandwidth rank only). A slow link is not contention, so a rank is only
named when the overlap is what makes it slow:
- its SDMA ops that overlap no compute kernel at all run at >= 14.4 GB/s (slow without overlap too = slow
  link), or, when all its SDMA ops overlap compute, no peer rank moves its matmul-overlapping SDMA ops at
  >= 14.4 GB/s (peers overlapping the same way at full speed = this rank's link is slow).

impact_ms = Σ over contended ops of (SDMA transit time − SDMA bytes / 14.4 GB/s) per step, worst rank:
the time lost against the threshold bandwidth, a lower bound (the baseline is 18 GB/s).
Subject: SDMA. Severity: the advisor's fixed LOW.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..models import Finding
from ..thresholds import T
from ._common import (
    NS_PER_MS,
    in_kept_steps,
    kept_steps,
    n_steps,
    ranks_text,
    step_list,
    steps_text,
    worst_rank,
)
from .base import Check, CheckContext, register


def overlaps(starts: np.ndarray, ends: np.ndarray, k_starts: np.ndarray, k_ends: np.ndarray) -> np.ndarray:
    """Per interval [starts, ends): does it intersect any kernel interval? (kernels sorted by start)."""
    order = np.argsort(k_starts, kind="stable")
    ks, ke = k_starts[order], k_ends[order]
    run_max_end = np.maximum.accumulate(ke) if len(ke) else ke
    # the kernels starting before `end`; the latest-ending of them must end after `start`
    idx = np.searchsorted(ks, ends, side="left") - 1
    ok = idx >= 0
    out = np.zeros(len(starts), dtype=bool)
    out[ok] = run_max_end[idx[ok]] > starts[ok]
    return out


@register
class BandwidthContentionCheck(Check):
    id = "bandwidth-contention"
    title = "Communication / compute bandwidth contention"
    needs = ("comm_json", "kernel_details")
    vendors = ("ascend",)
    description = (
        "SDMA collectives whose bandwidth falls below 14.4 GB/s while they overlap matmul kernels, on "
        "every rank; impact = transit time beyond what 14.4 GB/s would take."
    )

    def run(self, ctx: CheckContext) -> list[Finding]:
        ranks = self.applicable_ranks(ctx)
        if not ranks:
            return []
        thr = T.contention_sdma_gbps.value
        steps = kept_steps(ctx)
        by_rank = {r: ops for r in ranks if (ops := self._sdma_ops(ctx, r, steps)) is not None}
        overlapped_gbps = {r: _gbps(ops[ops["overlap"]]) for r, ops in by_rank.items()}
        per_rank: dict[int, dict] = {}
        lost: dict[int, float] = {}
        for rank, ops in by_rank.items():
            bad = ops[ops["overlap"] & (ops["gbps"] < thr)]
            if bad.empty:
                continue
            alone = _gbps(ops[ops["alone"]])
            peers_fast = sorted(
                r for r, g in overlapped_gbps.items() if r != rank and g is not None and g >= thr
            )
            if alone is not None and alone < thr:
                continue  # slow without overlap too: the link is slow (slow-link), not contended
            if alone is None and peers_fast:
                continue  # peers overlap the same way at full speed: this rank's link is slow
            k = n_steps(steps, rank)
            extra = (bad["transit_ns"].astype("float64") - bad["size_bytes"].astype("float64") / thr).clip(
                lower=0
            )
            lost[rank] = float(extra.sum()) / NS_PER_MS / k
            worst = bad.sort_values("gbps").head(10)
            per_rank[rank] = {
                "contended_ops": len(bad),
                "contended_ops_per_step": round(len(bad) / k, 2),
                "sdma_ops": len(ops),
                "overlapping_ops": int(ops["overlap"].sum()),
                "min_gbps": round(float(bad["gbps"].min()), 4),
                "mean_gbps_contended": _gbps(bad),
                "mean_gbps_without_compute": alone,
                "lost_ms_per_step": round(lost[rank], 4),
                "steps": step_list(bad["step"]),
                "top_ops": [
                    {
                        "op": str(r.name),
                        "step": None if pd.isna(r.step) else int(r.step),
                        "elapse_ms": round(float(r.elapse_ns) / NS_PER_MS, 4),
                        "gbps": round(float(r.gbps), 4),
                    }
                    for r in worst.itertuples(index=False)
                ],
            }
        if not per_rank:
            return []
        rank_w, ms_w = worst_rank(lost)
        w = per_rank[rank_w]
        rk = sorted(per_rank)
        st = sorted({s for v in per_rank.values() for s in v["steps"]})
        alone_txt = (
            f" ({w['mean_gbps_without_compute']:.1f} GB/s with no compute beside it)"
            if w["mean_gbps_without_compute"] is not None
            else ""
        )
        return [
            self.finding(
                ctx,
                title=f"SDMA at {w['mean_gbps_contended']:.1f} GB/s while overlapping matmul on "
                f"{ranks_text(rk)}",
                subject="SDMA",
                ranks=rk,
                steps=st,
                impact_ms=ms_w,
                impact_rank=rank_w,
                severity="low",
                evidence={
                    "threshold_gbps": thr,
                    "per_rank": {str(r): v for r, v in sorted(per_rank.items())},
                    "impact_method": "Σ (SDMA transit − bytes / 14.4 GB/s) of contended ops per step, "
                    "worst rank; lower bound (the SDMA baseline is 18 GB/s)",
                },
                message=(
                    f"{ranks_text(rk).capitalize()}: SDMA collectives that overlap matmul kernels move data "
                    f"below {thr:g} GB/s in {steps_text(st)}; on rank {rank_w} "
                    f"{w['contended_ops_per_step']:g} per step at {w['mean_gbps_contended']:.1f} GB/s"
                    f"{alone_txt}, losing at least {ms_w:.2f} ms per step. Compare a run with the "
                    "compute-communication overlap turned off, or schedule the collectives away from the "
                    "large matmuls."
                ),
            )
        ]

    @staticmethod
    def _sdma_ops(ctx: CheckContext, rank: int, steps: dict[int, list[int]]) -> pd.DataFrame | None:
        """The rank's SDMA op instances (span from comm_ops, traffic from comm_bandwidth) in kept steps, with
        their bandwidth and whether they overlap a matmul kernel; None without SDMA ops or matmuls."""
        ops = ctx.sql(
            "SELECT o.rank, o.step, o.name, o.start_ns, o.elapse_ns, b.size_bytes, b.transit_ns, "
            "b.bandwidth_gbps FROM comm_ops o JOIN comm_bandwidth b "
            "ON b.rank = o.rank AND b.op_name = o.name "
            "AND b.step IS NOT DISTINCT FROM o.step AND upper(b.transport) = 'SDMA' "
            "WHERE o.rank = ? AND b.size_bytes > 0 AND b.transit_ns > 0",
            [rank],
        )
        ops = in_kept_steps(ops, steps)
        if ops.empty:
            return None
        comp = ctx.sql(
            "SELECT start_ns, dur_ns, (lower(name) LIKE '%matmul%' OR lower(coalesce(op_type, '')) "
            "LIKE '%matmul%') AS mm FROM device_ops WHERE rank = ? AND category = 'compute'",
            [rank],
        )
        mm = comp[comp["mm"].astype(bool)]
        if mm.empty:
            return None
        ops = ops.copy()
        # bandwidth as reported, else bytes / transit time (GB/s = bytes/ns)
        bw = ops["bandwidth_gbps"].astype("float64")
        ops["gbps"] = bw.where(
            bw > 0, ops["size_bytes"].astype("float64") / ops["transit_ns"].astype("float64")
        )
        s = ops["start_ns"].to_numpy(dtype="int64")
        e = s + ops["elapse_ns"].to_numpy(dtype="int64")
        ops["overlap"] = overlaps(
            s,
            e,
            mm["start_ns"].to_numpy(dtype="int64"),
            (mm["start_ns"] + mm["dur_ns"]).to_numpy(dtype="int64"),
        )
        # the control group: SDMA ops that overlap no compute kernel at all (any kernel competes for HBM)
        ops["alone"] = ~overlaps(
            s,
            e,
            comp["start_ns"].to_numpy(dtype="int64"),
            (comp["start_ns"] + comp["dur_ns"]).to_numpy(dtype="int64"),
        )
        return ops


def _gbps(ops: pd.DataFrame) -> float | None:
    """Σ bytes / Σ transit time of a set of ops (GB/s), None when empty."""
    t = float(ops["transit_ns"].sum()) if not ops.empty else 0.0
    return round(float(ops["size_bytes"].sum()) / t, 4) if t > 0 else None
