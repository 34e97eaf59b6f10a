"""h2d-pageable: host-to-device copies from pageable (not pinned) host memory, on every rank.

Rule (stepdoctor; PyTorch pin_memory guidance, nsys expert rule `cuda_memcpy_async` for pageable
copies): per (rank, step), the device time of `Memcpy HtoD (Pageable -> Device)` copies
>= T.h2d_pageable_ms is an issue. A copy from pageable memory is staged through a driver bounce buffer: it is
synchronous for the host even when issued with non_blocking=True, runs at a fraction of the PCIe bandwidth,
and cannot overlap compute.

Where it applies: CUDA traces name the source memory in the copy (`Pageable -> Device`, `Pinned -> Device`).
ROCm and Ascend profiles do not record the host memory kind of a copy, so the check needs the
`memcpy_kind` capability there and is reported "not applicable" instead of guessing.

impact_ms = pageable H2D copy time per step (mean over the rank's kept steps), the rank where it weighs most:
with pinned memory and non_blocking=True the copy overlaps compute, so that device time is what can be hidden
(an upper bound; the bandwidth of the pageable copies is in the evidence). Severity: the impact rule.
"""

from __future__ import annotations

from typing import ClassVar

from ..models import Finding
from ..thresholds import T
from ..units import BYTES_PER_MB, NS_PER_MS
from ._common import (
    fmt_ms,
    in_steps,
    placeholders,
    ranks_and_steps,
    worst_share,
)
from .base import Check, CheckContext, register
from .evidence import Entry, Evidence, Record


class CopyStep(Record):
    copies: int
    ms: float


class PageableRank(Entry):
    weighs_by = "ms_per_step"
    steps: list[int]
    copies_per_affected_step: float
    steps_analysed: int
    ms_per_step: float
    mb_per_step: float | None       # None where the copies record no size
    bandwidth_gbps: float | None
    by_step: dict[str, CopyStep]    # every step with a pageable copy, fired or not


class H2dPageableEvidence(Evidence):
    threshold_ms_per_step: float
    per_rank: dict[int, PageableRank]
    impact_method: str = ("pageable HtoD copy time per step, mean over kept steps, the rank where it is the largest "
                          "share of the step (pinned + non_blocking copies overlap compute)")


@register
class H2dPageableCheck(Check):
    id = "h2d-pageable"
    dimension = "memory"
    title = "Pageable host-to-device copies"
    fires_when = "host-to-device copies from pageable memory"
    thresholds = ("h2d_pageable_ms",)
    vendors = ("ascend", "cuda", "rocm")
    needs_by_vendor: ClassVar[dict[str, tuple[str, ...]]] = {
        "cuda": ("kernels",),
        # neither profiler records the host memory kind of a copy: a reader that learns it sets memcpy_kind
        "rocm": ("memcpy_kind",),
        "ascend": ("memcpy_kind",),
    }
    description = (
        "Device time of 'Memcpy HtoD (Pageable -> Device)' copies per step on every rank >= {h2d_pageable_ms} ms "
        '(CUDA names the memory kind; ROCm / Ascend need a memcpy_kind capability). Impact: that copy time per '
        'step, which pinned memory + non_blocking would overlap with compute.'
    )
    evidence = H2dPageableEvidence
    title_template = "Host-to-device copies from pageable memory ({ms} ms per step)"
    message_template = (
        "On {ranks} ({steps}) {worst.copies_per_affected_step:g} host-to-device copies per step come from pageable "
        "memory{bw}, {ms} ms per step on rank {worst_rank} (threshold {h2d_pageable_ms:g} ms): they block the host "
        "and cannot overlap compute; use DataLoader(pin_memory=True) and .to(device, non_blocking=True)."
    )

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        windows = ctx.view.step_windows(ranks)
        marks = placeholders(ranks)
        ev = ctx.sql(f"SELECT rank, step, name, dur_ns, size_bytes FROM device_ops WHERE rank IN ({marks}) AND "
                     "lower(name) LIKE '%htod%' AND lower(name) LIKE '%pageable%'", ranks)
        ev = in_steps(ev, windows)
        if ev.empty:
            return []
        thr = T.h2d_pageable_ms.value
        per_rank: dict[int, PageableRank] = {}
        for rank, g in ev.groupby("rank", sort=True):
            r = int(rank)
            by_step = g.groupby("step").agg(copies=("dur_ns", "size"), ns=("dur_ns", "sum"),
                                            bytes=("size_bytes", "sum"))
            fired = [int(s) for s, row in by_step.iterrows() if row["ns"] / NS_PER_MS >= thr]
            if not fired:
                continue
            n = max(int((windows["rank"] == r).sum()), 1)
            total_ns = float(g["dur_ns"].sum())
            nbytes = float(g["size_bytes"].fillna(0).sum())
            per_rank[r] = PageableRank(
                steps=fired,
                copies_per_affected_step=round(float(by_step.loc[fired, "copies"].mean()), 2),
                steps_analysed=n,
                ms_per_step=round(total_ns / NS_PER_MS / n, 4),
                mb_per_step=round(nbytes / BYTES_PER_MB / n, 4) if nbytes else None,
                bandwidth_gbps=round(nbytes / total_ns, 3) if nbytes and total_ns else None,
                by_step={str(int(s)): CopyStep(copies=int(row["copies"]), ms=round(float(row["ns"]) / NS_PER_MS, 4))
                         for s, row in by_step.iterrows()},
            )
        if not per_rank:
            return []
        rank_w, ms_w = worst_share(ctx, {r: v.ms_per_step for r, v in per_rank.items()})
        rk, steps_seen = ranks_and_steps(per_rank)
        bw = per_rank[rank_w].bandwidth_gbps if rank_w is not None else None
        return [self.finding(
            ctx, subject="Memcpy HtoD (Pageable -> Device)", ranks=rk, steps=steps_seen, impact_ms=ms_w,
            impact_rank=rank_w, evidence=H2dPageableEvidence(threshold_ms_per_step=thr, per_rank=per_rank),
            words={"ms": fmt_ms(ms_w or 0), "bw": f" at {bw:.3g} GB/s" if bw else ""})]
