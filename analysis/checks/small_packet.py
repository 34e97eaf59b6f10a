"""small-packet: collectives that move too little data per op to use the link bandwidth, on every rank.

Ascend rule (msprof-analyze 26.2.0 packet_analysis, packet.yaml): per rank, over the
communication ops of communication.json with a non-zero transit size on a transport, the share of ops
whose transit size is below T.small_packet_sdma_mb (16 MB, SDMA) or T.small_packet_rdma_mb (1 MB, RDMA)
must not exceed T.small_packet_ratio (20 %). Sizes are communication.json MB = 10^6 bytes. Each op pays a
fixed launch / handshake cost, so many small ops leave the link idle most of the time.

GPU rule (stepdoctor): the same share test on the NCCL kernels whose payload is known
(`device_ops.size_bytes`: the kernel's collective args, else its `record_param_comms` host op's message
size; capability `nccl_msg_sizes`), against T.nccl_small_msg_mb taken as MiB, inclusive (NCCL needs
messages of ~1-4 MB to reach bus bandwidth, and DDP-style buckets are powers of two, so a 1 MiB message
counts as small).

Differences from the advisor: every rank is checked and named (the advisor picks the lowest-bandwidth
rank), and the counts are kept per step.

impact_ms = Σ transit time (Ascend) or kernel time (GPU) of the small ops per step, worst rank: the time
spent in transfers too small to be efficient (an upper bound of what bucketing / fusion can save).
One finding per transport (subject SDMA / RDMA / NCCL). Severity: the advisor's fixed LOW.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pandas as pd

from ..models import Finding
from ..thresholds import T
from ..units import BYTES_PER_MB, NS_PER_MS
from ._common import (
    by_rank,
    float_steps,
    in_kept_steps,
    n_steps,
    placeholders,
    ranks_and_steps,
    series_sum,
    step_list,
    worst_rank,
)
from .base import Check, CheckContext, register
from .evidence import Entry, Evidence, Record

MIB = float(1 << 20)
GPU_VENDORS = ("cuda", "rocm")


class StepPackets(Record):
    ops: int
    small_ops: int


class SmallPacketRank(Entry):
    weighs_by = "small_ms_per_step"
    ops: int
    small_ops: int
    small_ratio: float
    # the median small size in the transport's unit: MB on Ascend, MiB on GPUs (one of the two is set)
    median_small_size_mb: float | None = None
    median_small_size_mib: float | None = None
    small_ms_per_step: float
    steps: list[int]
    by_step: dict[str, StepPackets]   # step -> counts


class SmallPacketEvidence(Evidence):
    threshold_bytes: float
    threshold: str
    threshold_ratio: float
    per_rank: dict[int, SmallPacketRank]
    impact_method: str = ("Σ time of the small transfers per step, worst rank; upper bound of the saving from "
                          "fewer, larger transfers")


def _limits() -> dict[str, tuple[float, str]]:
    """transport -> (small below this many bytes, threshold name)."""
    return {
        "SDMA": (T.small_packet_sdma_mb.value * BYTES_PER_MB, "small_packet_sdma_mb"),
        "RDMA": (T.small_packet_rdma_mb.value * BYTES_PER_MB, "small_packet_rdma_mb"),
    }


@register
class SmallPacketCheck(Check):
    id = "small-packet"
    dimension = "communication"
    title = "Small communication packets"
    fires_when = "collectives move packets too small to use the link bandwidth"
    thresholds = ("nccl_small_msg_mb", "small_packet_ratio", "small_packet_rdma_mb", "small_packet_sdma_mb")
    frameworks = ("pytorch", "mindspore")
    needs = ("comm_json",)
    vendors = ("ascend", *GPU_VENDORS)
    gpu_needs: ClassVar[tuple[str, ...]] = ("nccl_msg_sizes",)
    description = (
        'Ranks where more than {small_packet_ratio:.0%} of the SDMA ops move < {small_packet_sdma_mb} MB (RDMA < '
        '{small_packet_rdma_mb} MB), from communication.json, or of the NCCL collectives move <= '
        '{nccl_small_msg_mb} MiB (Kineto); impact = time of those small transfers.'
    )
    evidence = SmallPacketEvidence
    title_template = "{worst.small_ratio:.0%} of {transport} ops move {cmp} {lim:g} {unit} on {ranks}"
    message_template = (
        "{Ranks}: more than {small_packet_ratio:.0%} of the {transport} ops move {cmp} {lim:g} {unit} in {steps}; "
        "on rank {worst_rank} {worst.small_ops} of {worst.ops} ({worst.small_ratio:.0%}, median {size:g} {unit}) "
        "taking {ms:.2f} ms per step. Larger buckets / gradient accumulation / fused optimizers send fewer, larger "
        "messages."
    )

    def applicable_ranks(self, ctx: CheckContext) -> list[int]:
        """Ascend ranks with communication.json, GPU ranks whose collectives carry message sizes."""
        out = []
        for r in ctx.all_ranks:
            v = ctx.vendor(r) or ""
            need = self.needs if v == "ascend" else self.gpu_needs if v in GPU_VENDORS else None
            if need is not None and set(need) <= ctx.caps(r):
                out.append(r)
        return out

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        steps = ctx.view.kept_steps
        ascend = [r for r in ranks if ctx.vendor(r) == "ascend"]
        gpu = [r for r in ranks if r not in ascend]
        out: list[Finding] = []
        if ascend:
            marks = placeholders(ascend)
            ops = ctx.sql(
                "SELECT rank, step, op_name, upper(transport) AS transport, size_bytes, transit_ns "
                f"FROM comm_bandwidth WHERE rank IN ({marks}) AND size_bytes > 0 "
                "AND upper(transport) IN ('SDMA', 'RDMA')",
                ascend,
            )
            for transport, (limit, name) in _limits().items():
                sub = in_kept_steps(ops[ops["transport"] == transport], steps)
                f = self._judge(
                    ctx, sub, steps, transport, limit, name, strict=True, unit="MB", unit_bytes=BYTES_PER_MB
                )
                if f:
                    out.append(f)
        if gpu:
            sub = in_kept_steps(self._nccl_messages(ctx, gpu), steps)
            f = self._judge(
                ctx,
                sub,
                steps,
                "NCCL",
                T.nccl_small_msg_mb.value * MIB,
                "nccl_small_msg_mb",
                strict=False,
                unit="MiB",
                unit_bytes=MIB,
            )
            if f:
                out.append(f)
        return out

    @staticmethod
    def _nccl_messages(ctx: CheckContext, ranks: list[int]) -> pd.DataFrame:
        """One row per NCCL kernel with a known payload. The Kineto reader fills `size_bytes` from the
        kernel's own collective args or, failing that, from its `record_param_comms` host op (linked by
        External id), and sets `nccl_msg_sizes` only when some kernel has one."""
        marks = placeholders(ranks)
        return ctx.sql(
            "SELECT rank, step, name AS op_name, size_bytes, dur_ns AS transit_ns FROM comm_kernels "
            f"WHERE rank IN ({marks}) AND size_bytes > 0",
            ranks,
        )

    def _judge(
        self,
        ctx: CheckContext,
        ops: pd.DataFrame,
        steps: dict[int, list[int]],
        transport: str,
        limit: float,
        thr_name: str,
        *,
        strict: bool,
        unit: str,
        unit_bytes: float,
    ) -> Finding | None:
        if ops.empty:
            return None
        ratio_thr = T.small_packet_ratio.value
        per_rank, lost = _small_by_rank(ops, steps, limit, strict=strict, unit=unit, unit_bytes=unit_bytes)
        if not per_rank:
            return None
        rank_w, ms_w = worst_rank(lost)
        w = per_rank[rank_w]
        rk, st = ranks_and_steps(per_rank)
        size = w.median_small_size_mb if unit == "MB" else w.median_small_size_mib
        return self.finding(
            ctx, subject=transport, ranks=rk, steps=st, impact_ms=ms_w, impact_rank=rank_w, severity="low",
            evidence=SmallPacketEvidence(threshold_bytes=limit, threshold=thr_name, threshold_ratio=ratio_thr,
                                         per_rank=dict(sorted(per_rank.items()))),
            words={"transport": transport, "cmp": "<" if strict else "<=", "lim": limit / unit_bytes, "unit": unit,
                   "size": size, "ms": ms_w},
        )


def _small_by_rank(ops: pd.DataFrame, steps: dict[int, list[int]], limit: float, *, strict: bool, unit: str,
                   unit_bytes: float) -> tuple[dict[int, SmallPacketRank], dict[int, float]]:
    """(rank -> evidence, rank -> ms per step of its small transfers) for the ranks where more than
    T.small_packet_ratio of the ops move less than `limit` bytes (at most, unless `strict`)."""
    ratio_thr = T.small_packet_ratio.value
    size = ops["size_bytes"].to_numpy()
    small_all = size < limit if strict else size <= limit
    transit = ops["transit_ns"].to_numpy()
    step_all = float_steps(ops["step"])
    # ranks split by one stable sort, not a groupby and frame slices per rank (per-rank pandas overhead)
    order, slices = by_rank(ops["rank"].to_numpy())
    per_rank: dict[int, SmallPacketRank] = {}
    lost: dict[int, float] = {}
    for r, i, j in slices:
        rows = order[i:j]
        is_small = small_all[rows]
        n_small = int(is_small.sum())
        ratio = n_small / (j - i)
        if ratio <= ratio_thr:
            continue
        small = rows[is_small]
        k = n_steps(steps, r)
        lost[r] = float(series_sum(transit[small])) / NS_PER_MS / k
        st = step_all[rows]
        known = ~np.isnan(st)  # (groupby leaves out the rows of no step)
        by_step, idx = np.unique(st[known], return_inverse=True)
        counts = np.bincount(idx, minlength=len(by_step))
        smalls = np.bincount(idx, weights=is_small[known], minlength=len(by_step))
        median = round(float(np.median(size[small])) / unit_bytes, 4)
        per_rank[r] = SmallPacketRank(
            ops=int(j - i),
            small_ops=n_small,
            small_ratio=round(ratio, 4),
            **{"median_small_size_" + unit.lower(): median},
            small_ms_per_step=round(lost[r], 4),
            steps=step_list(step_all[small]),
            by_step={
                str(int(s)): StepPackets(ops=int(c), small_ops=int(m))
                for s, c, m in zip(by_step, counts, smalls, strict=True)
            },
        )
    return per_rank, lost
