"""retransmission: RDMA transfers that were retransmitted (a single transit longer than 4 s).

Rule (msprof-analyze 26.2.0 communication_retransmission_analysis, rdma_analysis.yaml): for
one collective instance (communication group, op name, step) across the ranks that ran it:
- the *shortest* elapse time over the ranks must reach T.retransmission_ms (4000 ms): when only some
  ranks waited that long, they waited for a late peer (desynchronisation), which is not retransmission;
- some rank's RDMA transit time exceeds T.retransmission_ms: the RoCE retransmit timeout fired.
The ranks named are those whose RDMA transit exceeds the threshold. The advisor reads the cluster
communication file; here comm_ops (elapse) and comm_bandwidth (RDMA transit) of every rank are joined,
which is the same data per rank.

impact_ms = Σ over the retransmitted instances of the shortest elapse across ranks, divided by the number
of steps: every rank was held that long. Subject: RDMA. Severity: the advisor's fixed HIGH.
"""

from __future__ import annotations

import pandas as pd

from ..models import Finding
from ..thresholds import T
from ..units import BYTES_PER_MB, NS_PER_MS
from ._common import in_kept_steps, placeholders, steps_text
from .base import Check, CheckContext, register
from .evidence import Evidence, Record


class RetransmittedOp(Record):
    """One retransmitted collective instance (group, op, step)."""

    group: str | None
    op: str
    step: int | None
    min_elapse_ms: float
    ranks: list[int]
    rdma_transit_ms: dict[int, float]   # the ranks whose RDMA transit exceeds the threshold
    rdma_mb: dict[int, float]


class RetransmissionEvidence(Evidence):
    # the impact is summed over the instances, not taken from a rank map
    primary = None
    threshold_ms: int | float   # the threshold's value as the table writes it (4000)
    groups: list[str]
    instances: list[RetransmittedOp]   # the first 20
    impact_method: str = "Σ shortest elapse across ranks of the retransmitted ops / steps"


@register
class RetransmissionCheck(Check):
    id = "retransmission"
    dimension = "communication"
    title = "RDMA retransmission"
    fires_when = "RDMA transfers were retransmitted"
    thresholds = ("retransmission_ms",)
    needs = ("comm_json",)
    vendors = ("ascend",)
    description = (
        'Collective instances whose elapse is >= {retransmission_ms} ms on every rank and whose RDMA transit '
        'exceeds {retransmission_ms} ms on some rank (RoCE retransmission), per group, op and step.'
    )
    evidence = RetransmissionEvidence
    title_template = "RDMA retransmission in {n} collective(s) on {ranks}"
    message_template = (
        "{n} collective instance(s) in {n_groups} group(s) took >= {retransmission_ms:g} ms on every rank, and "
        "{ranks} spent up to {longest_ms:.0f} ms in one RDMA transfer ({op}, {where}): the RoCE retransmit timeout "
        "fired. Check the RDMA links / switch and the network configuration of these nodes."
    )

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        thr_ns = T.retransmission_ms.value * NS_PER_MS
        marks = placeholders(ranks)
        # an instance qualifies only with some rank's RDMA transit (Σ per rank, step and op) above the
        # threshold: without one anywhere, the per-instance join below cannot find anything
        longest = ctx.profile.rows(
            "SELECT max(t) FROM (SELECT sum(transit_ns) AS t FROM comm_bandwidth WHERE "
            f"upper(transport) = 'RDMA' AND rank IN ({marks}) GROUP BY rank, step, op_name)", ranks)[0][0]
        if longest is None or not float(longest) > thr_ns:
            return []
        ops = ctx.sql(
            "SELECT o.rank, o.step, o.name, o.group_name, o.elapse_ns, "
            "coalesce(b.transit_ns, 0) AS rdma_ns, coalesce(b.size_bytes, 0) AS rdma_bytes "
            "FROM comm_ops o LEFT JOIN (SELECT rank, step, op_name, sum(transit_ns) AS transit_ns, "
            "sum(size_bytes) AS size_bytes FROM comm_bandwidth WHERE upper(transport) = 'RDMA' "
            "GROUP BY ALL) b "
            "ON b.rank = o.rank AND b.op_name = o.name AND b.step IS NOT DISTINCT FROM o.step "
            f"WHERE o.rank IN ({marks})",
            ranks,
        )
        steps = ctx.view.kept_steps
        hits = _retransmitted(in_kept_steps(ops, steps), thr_ns)
        if not hits:
            return []
        rk = sorted({r for h in hits for r in h.ranks})
        st = sorted({h.step for h in hits if h.step is not None})
        n = max(len({s for ss in steps.values() for s in ss}), 1)
        impact = sum(h.min_elapse_ms for h in hits) / n
        groups = sorted({h.group or "?" for h in hits})
        worst = max(hits, key=lambda h: max(h.rdma_transit_ms.values()))
        return [
            self.finding(
                ctx, subject="RDMA", ranks=rk, steps=st, impact_ms=impact, severity="high",
                evidence=RetransmissionEvidence(threshold_ms=T.retransmission_ms.value, groups=groups,
                                                instances=hits[:20]),
                words={"n": len(hits), "n_groups": len(groups), "longest_ms": max(worst.rdma_transit_ms.values()),
                       "op": worst.op, "where": steps_text([worst.step] if worst.step is not None else [])},
            )
        ]


def _retransmitted(ops: pd.DataFrame, thr_ns: float) -> list[RetransmittedOp]:
    """Collective instances (group, op, step) whose elapse is >= thr_ns on every rank and whose RDMA
    transit exceeds thr_ns on some rank, with those ranks' transit times and sizes."""
    if ops.empty:
        return []
    # only op instances long on every rank and with a long RDMA transit somewhere can qualify
    keys = ["group_name", "name", "step"]
    agg = ops.groupby(keys, dropna=False).agg(min_e=("elapse_ns", "min"), max_r=("rdma_ns", "max")).reset_index()
    cand = agg[(agg["min_e"] >= thr_ns) & (agg["max_r"] > thr_ns)][keys]
    ops = ops.merge(cand, on=keys, how="inner")
    hits = []
    for (group, name, step), g in ops.groupby(keys, dropna=False, sort=True):
        min_elapse = float(g["elapse_ns"].min())
        slow = g[g["rdma_ns"] > thr_ns]
        if min_elapse < thr_ns or slow.empty:
            continue  # short on some rank: desync, not retransmission
        hits.append(RetransmittedOp(
            group=None if pd.isna(group) else str(group),
            op=str(name),
            step=None if pd.isna(step) else int(step),
            min_elapse_ms=min_elapse / NS_PER_MS,
            ranks=sorted(int(r) for r in slow["rank"]),
            rdma_transit_ms={int(r.rank): round(float(r.rdma_ns) / NS_PER_MS, 3) for r in slow.itertuples(index=False)},
            rdma_mb={int(r.rank): round(float(r.rdma_bytes) / BYTES_PER_MB, 4) for r in slow.itertuples(index=False)},
        ))
    return hits
