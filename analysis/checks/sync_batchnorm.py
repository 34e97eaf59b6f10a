"""sync-batchnorm: SyncBatchNorm runs during training, on every rank.

Rule (msprof-analyze 26.2.0 syncbn / sync_batchnorm.yaml): a step with at least
T.syncbn_count (20) SyncBatchNorm calls is an issue; priority fixed HIGH, as the advisor does. Each call
gathers the batch statistics of all ranks (an all_gather) in the forward and reduces the gradients in the
backward, which serialises dispatch and adds small collectives.

Counting SyncBatchNorm forward calls per step, per rank:
* host ops named `SyncBatchNorm` (case-insensitive; torch_npu's Python event, the advisor's rule) or
  `nn.Module: SyncBatchNorm...` (Kineto with_modules);
* on CUDA / ROCm also `aten::batch_norm_gather_stats_with_counts`, the aten op only SyncBatchNorm's forward
  calls (once per call), which Kineto records without with_modules.
The markers nest (the module op contains the aten op), so the count of a step is the largest count of any
one marker, never their sum.

impact_ms = host time inside SyncBatchNorm calls per step + device time of the communication ops launched
from inside them (their all_gathers, linked by correlation id), mean over the rank's kept steps, worst rank.
That is what replacing SyncBatchNorm with BatchNorm (or a fused version) removes at most.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..models import Finding
from ..thresholds import T
from ..timeline.intervals import merge
from ..units import NS_PER_MS
from ._common import (
    by_rank,
    columns,
    fmt_ms,
    in_steps_mask,
    map_by_value,
    placeholders,
    rank_slices,
    ranks_and_steps,
    window_counts,
    worst_share,
)
from .base import Check, CheckContext, register
from .evidence import Entry, Evidence

GATHER_STATS = "aten::batch_norm_gather_stats_with_counts"
# marker kinds in name order: the order pandas gave the per-kind columns, so ties pick the same marker
KINDS = tuple(sorted(("SyncBatchNorm", "nn.Module: SyncBatchNorm", GATHER_STATS)))
KIND_CODE = {k: i for i, k in enumerate(KINDS)}


def marker_kind(name: str) -> str | None:
    """Which SyncBatchNorm forward marker a host op name is, or None."""
    low = name.strip().lower()
    if low == "syncbatchnorm":
        return "SyncBatchNorm"
    if low.startswith("nn.module: syncbatchnorm"):
        return "nn.Module: SyncBatchNorm"
    if low == GATHER_STATS:
        return GATHER_STATS
    return None


class SyncBatchNormRank(Entry):
    weighs_by = "impact_ms_per_step"
    steps: list[int]
    calls_per_affected_step: float
    steps_analysed: int
    max_calls_in_a_step: int
    marker: str
    host_ms_per_step: float
    collective_ms_per_step: float
    impact_ms_per_step: float
    by_step: dict[str, int]   # step -> SyncBatchNorm calls


class SyncBatchNormEvidence(Evidence):
    threshold_calls_per_step: int | float
    per_rank: dict[int, SyncBatchNormRank]
    rule: str = "msprof-analyze syncbn (fixed high priority)"
    impact_method: str = ("host time inside SyncBatchNorm calls + device time of the collectives launched from "
                          "them, per step, mean over kept steps, worst rank")


@register
class SyncBatchNormCheck(Check):
    id = "sync-batchnorm"
    dimension = "free"
    title = "SyncBatchNorm in training"
    fires_when = "SyncBatchNorm runs during training"
    thresholds = ("syncbn_count",)
    vendors = ("ascend", "cuda", "rocm")
    # Ascend needs the framework (Python) ops the marker is one of; Kineto traces always carry their cpu ops
    needs_by_vendor: ClassVar[dict[str, tuple[str, ...]]] = {
        "ascend": ("steps", "framework_ops"),
        "cuda": ("steps",),
        "rocm": ("steps",),
    }
    description = (
        'Counts SyncBatchNorm calls per step on every rank (host ops named SyncBatchNorm, nn.Module: '
        'SyncBatchNorm*, or aten::batch_norm_gather_stats_with_counts); >= {syncbn_count} per step is an issue '
        '(msprof-analyze syncbn, fixed high). Impact: their host time plus their collectives.'
    )
    evidence = SyncBatchNormEvidence
    title_template = "SyncBatchNorm runs {worst.calls_per_affected_step:g} times per step"
    message_template = (
        "SyncBatchNorm runs {worst.calls_per_affected_step:g} times per step (>= {syncbn_count:g}) on {ranks} "
        "({steps}); each call gathers statistics across ranks, which slows dispatch and adds small collectives "
        "({ms} ms per step on rank {worst_rank}). Use BatchNorm unless cross-rank statistics are required."
    )

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        windows = ctx.view.step_windows(ranks)
        marks = placeholders(ranks)
        a = columns(ctx, f"SELECT rank, step, name, start_ns, dur_ns FROM host_ops WHERE rank IN ({marks}) AND "
                         f"(lower(name) = 'syncbatchnorm' OR lower(name) LIKE 'nn.module: syncbatchnorm%' OR "
                         "name = ?)", [*ranks, GATHER_STATS])
        keep = in_steps_mask(a["rank"], a["step"], windows)
        if not keep.any():
            return []
        # one pass over all ranks instead of a pandas groupby per rank (per-rank overhead dominated on many
        # ranks); the rows' order does not matter: counts and merged-interval sums are order-free
        rank = a["rank"][keep].astype(np.int64)
        step = a["step"][keep].astype(np.int64)   # known after in_steps_mask; INTEGER in the schema
        kind = map_by_value(a["name"][keep], lambda n: KIND_CODE.get(marker_kind(str(n)), -1)).astype(np.int64)
        start = a["start_ns"][keep].astype(np.int64)
        end = start + a["dur_ns"][keep].astype(np.int64)
        order, slices = by_rank(rank)
        rank, step, kind, start, end = rank[order], step[order], kind[order], start[order], end[order]
        rows = {r: (i, j) for r, i, j in slices}
        counts = _step_counts(rank, step, kind)
        thr = T.syncbn_count.value
        n_windows = window_counts(windows)
        per_rank: dict[int, SyncBatchNormRank] = {}
        launches: dict[int, tuple[np.ndarray, np.ndarray]] | None = None
        for r, (st, per_step, totals) in counts.items():
            hit = per_step >= thr
            if not hit.any():
                continue
            n = max(n_windows.get(r, 0), 1)
            if launches is None:
                launches = self._comm_launches(ctx, sorted(rows))
            i, j = rows[r]
            host_ns, comm_ns = self._cost(start[i:j], end[i:j], launches.get(r))
            fired = per_step[hit]
            per_rank[r] = SyncBatchNormRank(
                steps=[int(s) for s in st[hit]],
                # pandas' mean of the int counts: a float64 sum divided by the count
                calls_per_affected_step=round(float(fired.sum(dtype=np.float64) / np.float64(fired.size)), 2),
                steps_analysed=n,
                max_calls_in_a_step=int(per_step.max()),
                # the first marker (in name order) with the most calls, as idxmax over the sorted kinds gives
                marker=KINDS[int(np.argmax(totals))],
                host_ms_per_step=round(host_ns / NS_PER_MS / n, 4),
                collective_ms_per_step=round(comm_ns / NS_PER_MS / n, 4),
                impact_ms_per_step=round((host_ns + comm_ns) / NS_PER_MS / n, 4),
                by_step={str(int(s)): int(c) for s, c in zip(st, per_step, strict=True)},
            )
        if not per_rank:
            return []
        rank_w, ms_w = worst_share(ctx, {r: v.impact_ms_per_step for r, v in per_rank.items()})
        rk, steps_seen = ranks_and_steps(per_rank)
        return [self.finding(
            ctx, subject="SyncBatchNorm", ranks=rk, steps=steps_seen, impact_ms=ms_w, impact_rank=rank_w,
            severity="high", evidence=SyncBatchNormEvidence(threshold_calls_per_step=thr, per_rank=per_rank),
            words={"ms": fmt_ms(ms_w or 0)})]

    @staticmethod
    def _comm_launches(ctx: CheckContext, ranks: list[int]) -> dict[int, tuple[np.ndarray, np.ndarray]]:
        """Per rank: (host launch start ns, device ns) of its communication ops, from one query. Only their
        integer sum inside the markers is used, so the rows' order does not matter."""
        marks = placeholders(ranks)
        a = columns(ctx, "SELECT rank, launch_ns, dur_ns FROM kernel_launches "
                         f"WHERE rank IN ({marks}) AND category = 'communication' ORDER BY rank", ranks)
        rank = a["rank"].astype(np.int64)
        t, d = a["launch_ns"].astype(np.int64), a["dur_ns"].astype(np.int64)
        return {r: (t[i:j], d[i:j]) for r, i, j in rank_slices(rank)}

    @staticmethod
    def _cost(s: np.ndarray, e: np.ndarray, launches: tuple[np.ndarray, np.ndarray] | None) -> tuple[float, float]:
        """(host ns covered by one rank's SyncBatchNorm markers [s, e), device ns of comm ops launched inside
        them)."""
        ms, me = merge(s, e)
        host_ns = float((me - ms).sum())
        if ms.size == 0 or launches is None or launches[0].size == 0:
            return host_ns, 0.0
        # communication launched inside a SyncBatchNorm call: launch start within a merged marker interval
        t, dur = launches
        i = np.searchsorted(ms, t, side="right") - 1
        inside = (i >= 0) & (t < me[np.maximum(i, 0)])
        return host_ns, float(dur[inside].sum())


def _step_counts(rank: np.ndarray, step: np.ndarray,
                 kind: np.ndarray) -> dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Per rank (ascending) with a known marker: (its steps ascending, the calls of each step, the calls of
    each marker kind in KINDS order). Rows whose kind is unknown (-1) are not counted. A step's count is the
    largest count of one kind: the markers nest, so their sum would count each call twice."""
    ok = kind >= 0
    r, s, k = rank[ok], step[ok], kind[ok]
    if r.size == 0:
        return {}
    o = np.lexsort((k, s, r))
    r, s, k = r[o], s[o], k[o]
    new = np.ones(r.size, dtype=bool)
    new[1:] = (r[1:] != r[:-1]) | (s[1:] != s[:-1]) | (k[1:] != k[:-1])
    first = np.flatnonzero(new)
    cnt = np.diff(np.append(first, r.size))             # calls per (rank, step, kind)
    gr, gs, gk = r[first], s[first], k[first]
    new_step = np.ones(gr.size, dtype=bool)
    new_step[1:] = (gr[1:] != gr[:-1]) | (gs[1:] != gs[:-1])
    sfirst = np.flatnonzero(new_step)
    per_step = np.maximum.reduceat(cnt, sfirst)          # calls per (rank, step)
    sr, ss = gr[sfirst], gs[sfirst]
    ranks, rinv = np.unique(gr, return_inverse=True)
    totals = np.zeros((ranks.size, len(KINDS)), dtype=np.int64)
    np.add.at(totals, (rinv, gk), cnt)
    out: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
    for x, (rk, i, j) in enumerate(rank_slices(sr)):
        out[rk] = (ss[i:j], per_step[i:j], totals[x])
    return out
