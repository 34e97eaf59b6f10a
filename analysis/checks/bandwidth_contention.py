"""bandwidth-contention: SDMA communication slowed down while it overlapped matmul kernels, on every rank.

Rule (msprof-analyze 26.2.0 bandwidth_contention_analysis, bandwidth_contention.yaml): a
communication op that moves SDMA data (communication.json: SDMA Transit Size > 0) and whose time span
[start, start + elapse) overlaps a matmul kernel (kernel name or op type contains "matmul") is contended
when its SDMA bandwidth is below T.contention_sdma_gbps (14.4 GB/s = 0.8 × the 18 GB/s SDMA baseline):
the collective's memory traffic competes with the cube unit's HBM reads.

The advisor compares kernel_details start times that may have been scaled to ns with communication
timestamps in µs; here both are ns on the rank's clock. Every rank is checked (the
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

from typing import NamedTuple

import numpy as np
import pandas as pd

from ..models import Finding
from ..thresholds import T
from ..units import NS_PER_MS
from ._common import (
    columns,
    kept_mask,
    n_steps,
    placeholders,
    rank_slices,
    ranks_and_steps,
    step_list,
    worst_rank,
)
from .base import Check, CheckContext, register
from .evidence import Entry, Evidence, Record

# (start ns, end ns, is a matmul) of a rank's compute kernels
_Kernels = tuple[np.ndarray, np.ndarray, np.ndarray]


class _Summary(NamedTuple):
    """A rank's SDMA ops in kept steps, in figures that do not depend on their row order."""

    overlapped_gbps: float | None   # Σ bytes / Σ transit of the ops overlapping a matmul
    alone_gbps: float | None        # the same over the ops overlapping no compute kernel
    contended: bool                 # some op overlapping a matmul is below the threshold


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


class ContendedOp(Record):
    op: str
    step: int | None
    elapse_ms: float
    gbps: float


class ContendedRank(Entry):
    weighs_by = "lost_ms_per_step"
    contended_ops: int
    contended_ops_per_step: float
    sdma_ops: int
    overlapping_ops: int
    min_gbps: float
    mean_gbps_contended: float | None
    mean_gbps_without_compute: float | None   # None: every SDMA op of the rank overlaps compute
    lost_ms_per_step: float
    steps: list[int]
    top_ops: list[ContendedOp]


class ContentionEvidence(Evidence):
    threshold_gbps: float
    per_rank: dict[int, ContendedRank]
    impact_method: str = ("Σ (SDMA transit − bytes / 14.4 GB/s) of contended ops per step, worst rank; lower bound "
                          "(the SDMA baseline is 18 GB/s)")


@register
class BandwidthContentionCheck(Check):
    id = "bandwidth-contention"
    dimension = "communication"
    title = "Communication / compute bandwidth contention"
    fires_when = "communication slows down while it overlaps compute"
    thresholds = ("contention_sdma_gbps",)
    needs = ("comm_json", "kernel_details")
    vendors = ("ascend",)
    description = (
        'SDMA collectives whose bandwidth falls below {contention_sdma_gbps} GB/s while they overlap matmul '
        'kernels, on every rank; impact = transit time beyond what {contention_sdma_gbps} GB/s would take.'
    )
    evidence = ContentionEvidence
    title_template = "SDMA at {worst.mean_gbps_contended:.1f} GB/s while overlapping matmul on {ranks}"
    message_template = (
        "{Ranks}: SDMA collectives that overlap matmul kernels move data below {contention_sdma_gbps:g} GB/s in "
        "{steps}; on rank {worst_rank} {worst.contended_ops_per_step:g} per step at "
        "{worst.mean_gbps_contended:.1f} GB/s{alone}, losing at least {ms:.2f} ms per step. Compare a run with the "
        "compute-communication overlap turned off, or schedule the collectives away from the large matmuls."
    )

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        thr = T.contention_sdma_gbps.value
        steps = ctx.view.kept_steps
        if not self._any_slow(ctx, ranks, steps, thr):
            return []   # no SDMA op below the threshold at all: nothing can be contended
        comp = self._compute_ops(ctx, ranks)
        # every rank's SDMA ops from one query, in no particular order: enough for counts and integer sums
        # (which rank is named); a named rank's ops are then fetched in the per-rank query's order
        by_rank = self._sdma_all(ctx, ranks, steps, comp, thr)
        overlapped_gbps = {r: v.overlapped_gbps for r, v in by_rank.items()}
        per_rank: dict[int, ContendedRank] = {}
        lost: dict[int, float] = {}
        for rank, summary in by_rank.items():
            if not summary.contended:
                continue
            alone = summary.alone_gbps
            peers_fast = sorted(
                r for r, g in overlapped_gbps.items() if r != rank and g is not None and g >= thr
            )
            if alone is not None and alone < thr:
                continue  # slow without overlap too: the link is slow (slow-link), not contended
            if alone is None and peers_fast:
                continue  # peers overlap the same way at full speed: this rank's link is slow
            # the float sums and the sort below follow the row order of the rank's own query
            exact = self._sdma_ops(ctx, rank, steps, comp.get(rank))
            if exact is None:   # the same rows as above: cannot happen
                continue
            lost[rank], per_rank[rank] = _rank_evidence(exact, thr, n_steps(steps, rank), alone)
        if not per_rank:
            return []
        return [self._finding(ctx, per_rank, lost, thr)]

    def _finding(self, ctx: CheckContext, per_rank: dict[int, ContendedRank], lost: dict[int, float],
                 thr: float) -> Finding:
        rank_w, ms_w = worst_rank(lost)
        w = per_rank[rank_w]
        rk, st = ranks_and_steps(per_rank)
        alone = w.mean_gbps_without_compute
        return self.finding(
            ctx, subject="SDMA", ranks=rk, steps=st, impact_ms=ms_w, impact_rank=rank_w, severity="low",
            evidence=ContentionEvidence(threshold_gbps=thr, per_rank=dict(sorted(per_rank.items()))),
            words={"alone": f" ({alone:.1f} GB/s with no compute beside it)" if alone is not None else "",
                   "ms": ms_w},
        )

    @staticmethod
    def _any_slow(ctx: CheckContext, ranks: list[int], steps: dict[int, list[int]], thr: float) -> bool:
        """Whether some SDMA op of a kept step runs below `thr` GB/s: the slowest op per (rank, step) from one
        aggregate query, with the bandwidth worked out as `_sdma_ops` does (reported, else bytes / transit).
        Most profiles have none, and then the per-rank op lists are not needed."""
        marks = placeholders(ranks)
        rows = ctx.profile.rows(
            "SELECT rank, step, min(CASE WHEN bandwidth_gbps > 0 THEN bandwidth_gbps "
            "ELSE size_bytes::DOUBLE / transit_ns::DOUBLE END) FROM sdma_transfers "
            f"WHERE rank IN ({marks}) GROUP BY ALL",
            [int(r) for r in ranks],
        )
        for rank, step, gbps in rows:
            kept = steps.get(int(rank), [])
            if kept and (step is None or int(step) not in kept):
                continue   # outside the kept steps (a rank without steps keeps everything)
            if gbps is not None and gbps < thr:
                return True
        return False

    @staticmethod
    def _compute_ops(ctx: CheckContext, ranks: list[int]) -> dict[int, _Kernels]:
        """Per rank: (start ns, end ns, is a matmul) of its compute kernels, from one query (overlap tests do
        not depend on the kernels' order)."""
        marks = placeholders(ranks)
        a = columns(ctx, "SELECT rank, start_ns, dur_ns, (lower(name) LIKE '%matmul%' OR "
                         "lower(coalesce(op_type, '')) LIKE '%matmul%') AS mm FROM compute_kernels "
                         f"WHERE rank IN ({marks}) ORDER BY rank",
                    [int(r) for r in ranks])
        rank = a["rank"].astype(np.int64)
        s = a["start_ns"].astype(np.int64)
        e = s + a["dur_ns"].astype(np.int64)
        mm = a["mm"].astype(bool)
        return {r: (s[i:j], e[i:j], mm[i:j]) for r, i, j in rank_slices(rank)}

    @staticmethod
    def _sdma_all(ctx: CheckContext, ranks: list[int], steps: dict[int, list[int]],
                  comp: dict[int, _Kernels], thr: float) -> dict[int, _Summary]:
        """What `_sdma_ops` of every rank (ranks in the given order, those with SDMA ops and matmuls) says
        about the rank, from one query. The rows of a rank are the same as its own query's, their order is
        not, so only order-free figures (flags, integer sums) come out of it.

        The step filter, the bandwidths and the sums run once over all ranks' rows, so their cost does not
        grow per rank; only the overlap tests, which need the rank's own kernels, go per rank."""
        marks = placeholders(ranks)
        a = columns(ctx, _SDMA_QUERY.format(where=f"rank IN ({marks})") + " ORDER BY rank",
                    [int(r) for r in ranks])
        if a["rank"].size == 0:
            return {}
        keep = kept_mask(a["rank"], a["step"], steps)
        rank = a["rank"][keep].astype(np.int64)
        size = a["size_bytes"][keep]
        transit = a["transit_ns"][keep]
        gbps = _bandwidth(a["bandwidth_gbps"][keep], size, transit)
        s = a["start_ns"][keep].astype("int64")
        e = s + a["elapse_ns"][keep].astype("int64")
        overlap = np.zeros(rank.size, dtype=bool)
        alone = np.zeros(rank.size, dtype=bool)
        slices: dict[int, tuple[int, int]] = {}
        for r, i, j in rank_slices(rank):
            kernels = comp.get(r)
            if kernels is None or not kernels[2].any():
                continue   # no matmul: nothing to overlap, the rank is not judged
            cs, ce, mm = kernels
            overlap[i:j] = overlaps(s[i:j], e[i:j], cs[mm], ce[mm])
            # the control group: SDMA ops that overlap no compute kernel at all (any kernel competes for HBM)
            alone[i:j] = ~overlaps(s[i:j], e[i:j], cs, ce)
            slices[r] = (i, j)
        if not slices:
            return {}
        contended = overlap & (gbps < thr)
        size64, transit64 = size.astype("int64"), transit.astype("int64")
        zero = np.zeros(1, dtype=np.int64)
        # per-slice integer sums (exact in any order) as differences of running totals
        def totals(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            return (np.concatenate((zero, np.cumsum(np.where(mask, size64, 0)))),
                    np.concatenate((zero, np.cumsum(np.where(mask, transit64, 0)))))
        ov_size, ov_transit = totals(overlap)
        al_size, al_transit = totals(alone)
        n_contended = np.concatenate((zero, np.cumsum(contended)))
        out: dict[int, _Summary] = {}
        for r in ranks:
            if int(r) not in slices:
                continue
            i, j = slices[int(r)]
            out[r] = _Summary(
                overlapped_gbps=_gbps_ratio(ov_size[j] - ov_size[i], ov_transit[j] - ov_transit[i]),
                alone_gbps=_gbps_ratio(al_size[j] - al_size[i], al_transit[j] - al_transit[i]),
                contended=bool(n_contended[j] - n_contended[i]),
            )
        return out

    @staticmethod
    def _sdma_ops(ctx: CheckContext, rank: int, steps: dict[int, list[int]],
                  comp: _Kernels | None) -> dict[str, np.ndarray] | None:
        """The rank's SDMA op instances (span from comm_ops, traffic from comm_bandwidth) in kept steps, with
        their bandwidth and whether they overlap a matmul kernel, as numpy columns; None without SDMA ops or
        matmuls. One query per rank: its row order (a join's) orders the float sums of the evidence."""
        a = columns(ctx, _SDMA_QUERY.format(where="rank = ?"), [rank])
        return BandwidthContentionCheck._judge(a, steps, comp)

    @staticmethod
    def _judge(a: dict[str, np.ndarray] | None, steps: dict[int, list[int]],
               comp: _Kernels | None) -> dict[str, np.ndarray] | None:
        """Kept-step SDMA ops with their bandwidth and overlaps (see `_sdma_ops`)."""
        if a is None or a["rank"].size == 0:
            return None
        keep = kept_mask(a["rank"], a["step"], steps)
        ops = {k: v[keep] for k, v in a.items()}
        if ops["rank"].size == 0 or comp is None or not comp[2].any():
            return None
        cs, ce, mm = comp
        ops["gbps"] = _bandwidth(ops["bandwidth_gbps"], ops["size_bytes"], ops["transit_ns"])
        s = ops["start_ns"].astype("int64")
        e = s + ops["elapse_ns"].astype("int64")
        ops["overlap"] = overlaps(s, e, cs[mm], ce[mm])
        # the control group: SDMA ops that overlap no compute kernel at all (any kernel competes for HBM)
        ops["alone"] = ~overlaps(s, e, cs, ce)
        return ops


_SDMA_QUERY = ("SELECT rank, step, name, start_ns, elapse_ns, size_bytes, transit_ns, bandwidth_gbps "
               "FROM sdma_transfers WHERE {where}")


def _bandwidth(reported: np.ndarray, size_bytes: np.ndarray, transit_ns: np.ndarray) -> np.ndarray:
    """Per op: the bandwidth as reported, else bytes / transit time (GB/s = bytes/ns)."""
    bw = reported.astype("float64")
    with np.errstate(invalid="ignore"):
        ratio = size_bytes.astype("float64") / transit_ns.astype("float64")
        return np.where(bw > 0, bw, ratio)


def _gbps_of(size_bytes: np.ndarray, transit_ns: np.ndarray) -> float | None:
    """Σ bytes / Σ transit time of a set of ops (GB/s), None when empty (integer sums: exact in any
    order)."""
    t = transit_ns.astype("int64").sum() if transit_ns.size else 0
    return _gbps_ratio(size_bytes.astype("int64").sum(), t)


def _gbps_ratio(size_sum: int | np.integer, transit_sum: int | np.integer) -> float | None:
    """Σ bytes / Σ transit time (GB/s) from the two integer sums, None without transit time."""
    t = float(transit_sum)
    return round(float(size_sum) / t, 4) if t > 0 else None


def _gbps(ops: pd.DataFrame) -> float | None:
    """Σ bytes / Σ transit time of a set of ops (GB/s), None when empty."""
    return _gbps_of(ops["size_bytes"].to_numpy(), ops["transit_ns"].to_numpy())


def _rank_evidence(exact: dict[str, np.ndarray], thr: float, k: int, alone: float | None
                   ) -> tuple[float, ContendedRank]:
    """(lost ms per step, evidence) of one contended rank from its SDMA ops (`_sdma_ops`) over k steps:
    the transit time beyond what `thr` GB/s would take, of ops that overlap a matmul below `thr`. The float
    sums and the sort follow the row order of the rank's own query."""
    ops = pd.DataFrame(exact)
    bad = ops[exact["overlap"] & (exact["gbps"] < thr)]
    extra = (bad["transit_ns"].astype("float64") - bad["size_bytes"].astype("float64") / thr).clip(lower=0)
    lost = float(extra.sum()) / NS_PER_MS / k
    worst = bad.sort_values("gbps").head(10)
    return lost, ContendedRank(
        contended_ops=len(bad),
        contended_ops_per_step=round(len(bad) / k, 2),
        sdma_ops=len(ops),
        overlapping_ops=int(exact["overlap"].sum()),
        min_gbps=round(float(bad["gbps"].min()), 4),
        mean_gbps_contended=_gbps(bad),
        mean_gbps_without_compute=alone,
        lost_ms_per_step=round(lost, 4),
        steps=step_list(bad["step"]),
        top_ops=[
            ContendedOp(op=str(r.name), step=None if pd.isna(r.step) else int(r.step),
                        elapse_ms=round(float(r.elapse_ns) / NS_PER_MS, 4), gbps=round(float(r.gbps), 4))
            for r in worst.itertuples(index=False)
        ],
    )
