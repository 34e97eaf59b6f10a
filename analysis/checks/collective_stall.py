"""collective-stall: ranks held inside a collective that none of them is late for and that moves almost no data.

How it shows, for any job whose communication files give each op's transit time (Ascend communication.json and
the DB's communication tables): per collective instance (group, op, step), the profiled members' latest start is
when the last of them arrived; every member is then held until its own end. Held minus the data time (the
largest transit of a member) is time inside the op spent on nothing the profiled ranks did: either a member of
the group that has no profile here is late (its ranks are named: `ProfileInfo.missing_ranks`), or, with every
member profiled, the collective itself stalls (a link, a retransmission, the op's stream waiting on another).
A late *profiled* member is slow-rank's finding, not this one: its wait is before the latest start.

An instance counts where its stall is at least T.collective_stall_share of its held time and at least
T.straggler_min_wait_ms. impact_ms = the stall summed over a step's instances, mean over the kept steps: every
profiled member was held that long.
"""

from __future__ import annotations

import pandas as pd

from ..models import Finding
from ..text import ms_text
from ..thresholds import T
from ..units import NS_PER_MS
from ._common import in_kept_steps, placeholders, ranks_text
from .base import Check, CheckContext, register
from .evidence import Evidence, Record

_COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "alltoallv")


class StalledInstance(Record):
    """The instance with the longest stall."""

    op: str
    step: int
    held_ms: float
    transit_ms: float
    members_wait_ms: float


class CollectiveStallEvidence(Evidence):
    primary = None   # the impact is every profiled member's, summed over instances: no rank map
    threshold_share: float
    instances: int
    stall_ms_per_step: dict[str, float]   # op name -> stall per step
    worst: StalledInstance
    missing_ranks: list[int]   # where the world size comes from: the profile header
    impact_method: str = ("Σ per step of (held after the last profiled member arrived - transit) over the stalled "
                          "instances, mean over the kept steps")


@register
class CollectiveStallCheck(Check):
    id = "collective-stall"
    dimension = "communication"
    title = "Collective held with no member late and no data moving"
    fires_when = "the profiled members of a collective are held inside it, none of them late, while it moves no data"
    thresholds = ("collective_stall_share", "straggler_min_wait_ms")
    needs = ("comm_json",)
    vendors = ("ascend",)
    description = (
        "Per collective instance, the profiled members' time inside it after the last of them arrived, less its "
        'data time (transit): where that is at least {collective_stall_share:.0%} of the op, the group waits for '
        'a member with no profile here, or the collective itself stalls (link, retransmission, stream wait).'
    )
    evidence = CollectiveStallEvidence
    title_template = "{ranks} wait {impact} per step inside collectives {who_title}"
    # `worst` in a template is the primary map's entry (there is none): the worst instance comes as words
    message_template = ("After the last of {ranks} arrives they are held {impact} per step in collectives that move "
                        "little data ({ops_text}; {op}: held {held}, transit {transit}). {who_message}")

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        ops = ctx.sql(
            "SELECT rank, step, name, coalesce(group_name, '') AS g, lower(op_type) AS op_type, start_ns, "
            "elapse_ns, transit_ns, wait_ns FROM comm_ops "
            f"WHERE transit_ns IS NOT NULL AND rank IN ({placeholders(ranks)})", ranks)
        ops = in_kept_steps(ops[ops["op_type"].str.replace("_", "").isin(_COLLECTIVES)], ctx.view.kept_steps)
        hits = _stalled(ops)
        if hits.empty:
            return []
        n_steps = max(ops["step"].nunique(), 1)
        impact = float(hits["stall_ns"].sum()) / NS_PER_MS / n_steps
        rk = sorted(int(r) for r in ops.loc[ops.set_index(["g", "name", "step"]).index.isin(
            hits.set_index(["g", "name", "step"]).index), "rank"].unique())
        worst = hits.sort_values("stall_ns", ascending=False).iloc[0]
        per_op = (hits.groupby("name")["stall_ns"].sum() / NS_PER_MS / n_steps).sort_values(ascending=False)
        missing = list(ctx.profile.info.missing_ranks)
        who, subject = _who(ctx, missing, worst)
        return [self.finding(
            ctx, subject=subject, ranks=rk, steps=sorted(int(s) for s in hits["step"].dropna().unique()),
            impact_ms=impact,
            evidence=CollectiveStallEvidence(
                threshold_share=T.collective_stall_share.value, instances=len(hits),
                stall_ms_per_step={str(k): round(float(v), 3) for k, v in per_op.items()},
                worst=StalledInstance(op=str(worst["name"]), step=int(worst["step"]),
                                      held_ms=round(float(worst["held_ns"]) / NS_PER_MS, 3),
                                      transit_ms=round(float(worst["moved_ns"]) / NS_PER_MS, 3),
                                      members_wait_ms=round(float(worst["wait_ns"]) / NS_PER_MS, 3)),
                missing_ranks=missing),
            words={"impact": ms_text(impact), "who_title": who["title"], "who_message": who["message"],
                   "ops_text": ", ".join(f"{name} {ms_text(ms)}" for name, ms in per_op.head(3).items()),
                   "op": worst["name"], "held": ms_text(worst["held_ns"] / NS_PER_MS),
                   "transit": ms_text(worst["moved_ns"] / NS_PER_MS)},
        )]


def _stalled(ops: pd.DataFrame) -> pd.DataFrame:
    """One row per stalled instance (g, name, step): held_ns (the least time a profiled member spent in it after
    the last arrived), moved_ns (the largest transit), wait_ns (the largest member wait) and stall_ns."""
    if ops.empty:
        return ops
    ops = ops.assign(end_ns=ops["start_ns"] + ops["elapse_ns"])
    g = ops.groupby(["g", "name", "step"], dropna=False).agg(
        last=("start_ns", "max"), first_end=("end_ns", "min"), moved_ns=("transit_ns", "max"),
        wait_ns=("wait_ns", "max")).reset_index()
    g["held_ns"] = (g["first_end"] - g["last"]).clip(lower=0)
    g["stall_ns"] = (g["held_ns"] - g["moved_ns"]).clip(lower=0)
    ok = (g["stall_ns"] >= T.collective_stall_share.value * g["held_ns"]) & (
        g["stall_ns"] >= T.straggler_min_wait_ms.value * NS_PER_MS)
    return g[ok & (g["held_ns"] > 0)]


def _who(ctx: CheckContext, missing: list[int], worst: pd.Series) -> tuple[dict[str, str], str]:
    """Whom the group waits for, as far as this profile can tell, and the finding's subject."""
    info = ctx.profile.info
    if missing:
        size = (f"its groups have {info.world_size} members" if info.world_size_source == "communication groups"
                else f"the job has {info.world_size} ranks")
        return ({"title": f"for ranks with no profile here ({ranks_text(missing).removeprefix('ranks ')})",
                 "message": f"None of them is late, but {size} and {ranks_text(missing)} have no profile here: "
                            "the group waits for one of those; profile every member to see which."},
                "ranks with no profile")
    return ({"title": "that none of them is late for",
             "message": "Every member is profiled and none is late: the collective itself stalls (a slow or "
                        "congested link, a retransmission, or its stream waiting on another stream)."}, "collective")
