"""uneven-work: a rank runs work its peers do not, in every step (ops counted, not timed).

Peers are the ranks that do the same work: the rank's pipeline stage where stages are known, else every
rank of the job. The replay's work table (replay/work.py) holds, per kept step, the ops one level under the
step annotation; counted by op name (not shapes, so data-dependent shapes are not work of their own), a rank
that runs an op more often than the median of its peers in every step does work they do not: rank-only
logging, evaluation, metrics or checkpointing, a branch taken on one rank, extra compute. Counts do not move
with the host's load, so this holds where the ranks' times are too noisy to tell (a shared host).

Fires when that extra work takes at least T.slow_rank_min_excess_pct of the mean step in every step, on a
rank that slow-rank does not name already (slow-rank names a rank whose move to its peers' median recovers
step time, with cause host_ops). impact_ms = what the replay recovers with the rank at its peers' median:
often ~0 here, because the extra work falls where the rank waits anyway (a pipeline bubble, a collective
that waits for another rank); it is still work a shared host pays for and a change of schedule exposes.
Severity: the impact rule (low where nothing is recovered). Subject: the op with the most extra time.
"""

from __future__ import annotations

import numpy as np

from ..metrics.stages import stage_of_ranks
from ..models import Finding
from ..replay.work import extra_calls
from ..text import ranks_text
from ..thresholds import T
from ._replay_ranks import replay_ranks
from .base import Check, CheckContext, register
from .evidence import Entry, Evidence, Record


class ExtraOp(Record):
    op: str
    extra_per_step: float      # how many more times per step than the median of the peers
    ms_per_step: float         # those extra calls' time per step (each at the rank's own mean time of the op)


class UnevenRank(Entry):
    weighs_by = "extra_ms_per_step"
    peers: list[int]
    extra_ms_per_step: float
    recovered_ms: float | None   # the replay's step gain with the rank at its peers' median; None: no replay
    steps: list[int]
    ops: list[ExtraOp]


class UnevenWorkEvidence(Evidence):
    per_rank: dict[int, UnevenRank]
    peers_from: str            # "pipeline stage" or "every rank"
    impact_method: str = ("replay: measured step - the step replayed with the rank at its peers' median, mean over "
                          "the replayed steps (0 where the extra work falls in the rank's waits)")


@register
class UnevenWorkCheck(Check):
    id = "uneven-work"
    dimension = "compute"
    title = "Work only some ranks do"
    fires_when = ("a rank runs ops its peers (its pipeline stage, else every rank) do not, in every step, that take "
                  "a visible share of the step; `subject` = the op with the most extra time")
    thresholds = ("slow_rank_min_excess_pct",)
    frameworks = ("pytorch",)
    needs = ("steps",)
    vendors = ("ascend", "cuda", "rocm", "cpu")
    description = ("Counts, per kept step, the host ops one level under the step annotation by name on every rank "
                   "and names a rank that runs some of them more often than the median of its peers in every step, "
                   "the extra calls taking at least {slow_rank_min_excess_pct}% of the mean step; a rank slow-rank "
                   "already names is left to it. impact = the replay's gain with the rank at its peers' median.")
    evidence = UnevenWorkEvidence
    title_template = "rank {worst_rank} runs work its peers do not: {top}, {worst.extra_ms_per_step:.1f} ms per step"
    message_template = (
        "Ops run on {ranks} that their peers do not run, in every step ({steps}): on rank {worst_rank}, {ops_text} "
        "more per step than the median of {peers_text}, {worst.extra_ms_per_step:.1f} ms per step. {replayed} Look for "
        "work done on one rank only (`if rank == 0:` logging, metrics, evaluation, checkpoints) or a branch that "
        "differs per rank, and move it out of the step, do it every N steps, or spread it over the ranks."
    )

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        got = ctx.view.replay
        if got is None or len(ranks) < 2:
            return []
        steps, rep = got
        used = [s for s in steps if s.si.step not in rep.abstained_steps and s.si.work is not None]
        if not used:
            return []
        st = stage_of_ranks(ctx)
        groups = st[0] if st and len(set(st[0].values())) >= 2 else None
        rr = replay_ranks(ctx)
        named = set(rr.named) if rr is not None else set()
        floor = T.slow_rank_min_excess_pct.value / 100 * float(np.mean([s.measured for s in used]))
        per_rank: dict[int, UnevenRank] = {}
        extra = _extra_ops(used, groups)
        for r in sorted(set(ranks) - named):
            entry = _rank_entry(extra.get(r), len(used), [s.si.step for s in used])
            if entry is None or entry.extra_ms_per_step < floor:
                continue
            if rr is not None:
                entry.recovered_ms = round(max(rr.recovery(r).recovered_ms, 0.0), 3)
            per_rank[r] = entry
        if not per_rank:
            return []
        rank_w, w = max(per_rank.items(), key=lambda kv: (kv[1].extra_ms_per_step, -kv[0]))
        recovered = w.recovered_ms
        replayed = ("Replayed at its peers' median the step would gain nothing: the extra work falls where the rank "
                    "waits anyway (a pipeline bubble, a collective that waits for another rank), yet a host whose "
                    "cores the ranks share pays for it." if recovered is not None and recovered < floor else
                    f"Replayed at its peers' median the step takes {recovered:.2f} ms less." if recovered is not None
                    else "The replay does not hold for this profile, so its cost to the step is not estimated.")
        rk = sorted(per_rank)
        return [self.finding(
            ctx, subject=w.ops[0].op, ranks=rk, steps=sorted({s for v in per_rank.values() for s in v.steps}),
            impact_ms=recovered, impact_rank=rank_w,
            evidence=UnevenWorkEvidence(per_rank=per_rank,
                                        peers_from="pipeline stage" if groups else "every rank"),
            words={"top": f"{w.ops[0].extra_per_step:g} x {w.ops[0].op}", "replayed": replayed,
                   "ops_text": ", ".join(f"{o.extra_per_step:g} x `{o.op}`" for o in w.ops[:3]),
                   "peers_text": ranks_text(w.peers)})]


def _extra_ops(steps: list, groups: dict[int, int] | None) -> dict[int, dict]:
    """rank -> {"peers": set, "n": {op: [extra calls per step]}, "ms": {op: [their ms per step]}}: per step, the
    calls of each op (by name) beyond the median of the rank's peers (`replay.work.extra_calls`)."""
    out: dict[int, dict] = {}
    for s in steps:
        group = {int(r): (groups or {}).get(int(r), 0) for r in s.si.ranks}
        ops, extra = extra_calls(s.si.work, s.si.ranks, np.array(list(group.values())), by="op")
        for r, (n, ms) in extra.items():
            rec = out.setdefault(r, {"peers": set(), "n": {}, "ms": {}})
            rec["peers"].update(x for x, g in group.items() if g == group[r] and x != r)
            for op, k, e in zip(ops, n.tolist(), ms.tolist(), strict=True):
                rec["n"].setdefault(op, []).append(k)
                rec["ms"].setdefault(op, []).append(e)
    return out


def _rank_entry(rec: dict | None, n_steps: int, steps: list[int]) -> UnevenRank | None:
    """The rank's entry: the ops it runs more often than its peers in every one of the `n_steps` steps."""
    if rec is None:
        return None
    every = [op for op, xs in rec["n"].items() if len(xs) == n_steps and min(xs) > 0]
    if not every:
        return None
    ops = sorted((ExtraOp(op=op, extra_per_step=round(float(np.mean(rec["n"][op])), 2),
                          ms_per_step=round(float(np.mean(rec["ms"][op])), 3)) for op in every),
                 key=lambda o: (-o.ms_per_step, o.op))
    return UnevenRank(peers=sorted(rec["peers"]), extra_ms_per_step=round(sum(o.ms_per_step for o in ops), 3),
                      recovered_ms=None, steps=sorted(steps), ops=ops[:5])
