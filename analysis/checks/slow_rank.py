"""slow-rank: name the rank(s) slower than their peers, per dimension and step, and say why.

Dimensions (from the breakdown): `compute` (compute_ms), `communication` (comm_not_overlapped_ms) and
`free` (free_ms: device idle inside the step).

Algorithm, per dimension and per step, over the ranks present in that step:
  * m = median, MAD = median |x − m|; a rank is slow when
      excess = x − m  >= T.slow_rank_dim_excess_pct % of m        (a real difference for that dimension)
      and excess     >= T.slow_rank_min_excess_pct % of the step  (large enough to matter)
      and (n <= 3 or MAD == 0 or 0.6745·excess/MAD >= T.slow_rank_robust_z)   (an outlier, not noise)
    Median/MAD stay put when one rank of 8 or of 1024 is off, where the advisor's (max − min)/mean mixes
    steps and ranks and never names the rank.
  * communication: the rank that arrives last at a collective waits least, so a rank whose
    communication is far *below* the median is reported as `late_arrival` evidence on its compute/free
    finding (it makes the others wait), not as fast.
  * cause: compute — the op types whose time on the slow rank exceeds the median of the other ranks
    most; free — the longest device-idle gaps of that step and the host activity overlapping them;
    communication — the slowest transport of that rank, or the rank everybody waits for.

impact_ms = the rank's excess summed over its slow steps / the number of steps (time the whole job
loses per step, since synchronous peers wait for it). Severity from impact (docs/rules.md §1).

With pipeline stages known (metrics.stages.stage_of_ranks) the median is taken per step and stage.

Arrival (metrics/collectives.py): collectives matched across ranks name the rank that arrives last and
what it did before arriving (dimension `arrival`). When such stragglers exist, a rank that only waits for
them is never named: its compute/free/communication finding is dropped unless its excess reaches the wait
the stragglers cause per step.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import ClassVar

import numpy as np
import pandas as pd

from ..metrics import collectives
from ..metrics.stages import stage_of_ranks
from ..models import Finding
from ..replay.noise import noise_known
from ..thresholds import T
from ._replay_ranks import ReplayRanks, replay_ranks
from ._slow_rank_text import (
    DimensionStats,
    HostOp,
    LateArrival,
    LeadUp,
    NoRecord,
    OpExcess,
    ReplayWindow,
    SlowEntry,
    SlowTransport,
    arrival_text,
    compact,
    host_cause,
    name_causes,
    per_step_text,
    replay_cause_text,
    slow_steps_text,
    window_record,
)
from .base import Check, CheckContext, register
from .evidence import Evidence, Record
from .gc_pause import fixed_stall

# "free" is judged on the device's idle time in the whole host step (idle_ms): on Ascend the profiler's
# Free stops at the last kernel, and a rank that idles after it (GC, I/O) is still the slow one.
DIMENSIONS = {"compute": "compute_ms", "communication": "comm_not_overlapped_ms", "free": "idle_ms"}
# what each dimension's number is, in a finding's words: "free" compares idle_ms, which holds the step's lead-in
# and tail besides the breakdown's free_ms, so a finding must not call that number "free"
DIMENSION_WORDS = {"compute": "compute", "communication": "communication not overlapped",
                   "free": "device idle (free time plus the step's lead-in and tail)"}
DIMENSION_TITLE = ("rank {rank} is slower in {dim}: {value_ms:.2f} ms against a median of {median_ms:.2f} ms in "
                   "{slow_steps}")
DIMENSION_MESSAGE = ("Rank {rank} spends {value_ms:.2f} ms in {dim_words} in {slow_steps} against a median of "
                     "{median_ms:.2f} ms, {excess_ms:.2f} ms more")


def _robust_outliers(values: dict[int, float], step_ms: float, high: bool) -> dict[int, tuple[float, float]]:
    """rank -> (excess, median) for ranks beyond the median in the given direction."""
    if len(values) < 2:
        return {}
    xs = np.array(list(values.values()), dtype=float)
    m = float(np.median(xs))
    mad = float(np.median(np.abs(xs - m)))
    out = {}
    for r, x in values.items():
        excess = (x - m) if high else (m - x)
        if excess <= 0:
            continue
        if m > 0 and 100.0 * excess / m < T.slow_rank_dim_excess_pct.value:
            continue
        if step_ms > 0 and 100.0 * excess / step_ms < T.slow_rank_min_excess_pct.value:
            continue
        if len(values) > 3 and mad > 0 and 0.6745 * excess / mad < T.slow_rank_robust_z.value:
            continue
        out[r] = (excess, m)
    return out


def analyse(ctx: CheckContext) -> dict[str, DimensionStats]:
    """Per-dimension statistics and slow ranks (shared by the check and the slow-ranks tool), once per context."""
    return ctx.once(_analyse)


def _analyse(ctx: CheckContext) -> dict[str, DimensionStats]:
    rows = [r for r in ctx.breakdown if r.step is not None]
    # pipeline stages do different work by design: a rank is compared with the ranks of its own stage
    # (stage-imbalance judges the stages against each other)
    st = stage_of_ranks(ctx)
    stage = st[0] if st else {}
    by_step: dict[tuple[int, int], list] = defaultdict(list)
    for r in rows:
        by_step[(r.step, stage.get(r.rank, -1))].append(r)
    n_steps = Counter(r.rank for r in rows)  # (one pass: a scan per rank was quadratic in the ranks)
    out: dict[str, DimensionStats] = {}
    for dim, col in DIMENSIONS.items():
        slow_acc: dict[int, list[tuple[int, float, float, float]]] = defaultdict(list)
        fast_acc: dict[int, list[tuple[int, float, float, float]]] = defaultdict(list)
        medians, spreads = [], []
        for (step, _stage), rs in sorted(by_step.items()):
            vals = {r.rank: getattr(r, col) for r in rs if getattr(r, col) is not None}
            if len(vals) < 2:
                continue
            step_ms = float(np.mean([r.step_ms for r in rs if r.step_ms]))
            medians.append(float(np.median(list(vals.values()))))
            if step_ms:
                spreads.append(100.0 * (max(vals.values()) - min(vals.values())) / step_ms)
            for rank, (ex, m) in _robust_outliers(vals, step_ms, high=True).items():
                slow_acc[rank].append((step, vals[rank], m, ex))
            for rank, (ex, m) in _robust_outliers(vals, step_ms, high=False).items():
                fast_acc[rank].append((step, vals[rank], m, ex))

        def entries(acc: dict[int, list[tuple[int, float, float, float]]]) -> list[SlowEntry]:
            es = []
            for rank, items in sorted(acc.items()):
                steps = [i[0] for i in items]
                value = float(np.mean([i[1] for i in items]))
                med = float(np.mean([i[2] for i in items]))
                ex = float(np.mean([i[3] for i in items]))
                es.append(SlowEntry(rank=rank, steps=steps, value_ms=round(value, 3), median_ms=round(med, 3),
                                    excess_ms=round(ex, 3), excess_pct=round(100.0 * ex / med, 1) if med else 0.0,
                                    impact_ms=round(sum(i[3] for i in items) / max(n_steps.get(rank, 1), 1), 3)))
            return sorted(es, key=lambda e: -e.impact_ms)

        out[dim] = DimensionStats(dim, round(float(np.mean(medians)), 3) if medians else None,
                                  round(max(spreads), 2) if spreads else None, entries(slow_acc), entries(fast_acc))
    name_causes(ctx, out)
    return out


def arrival(ctx: CheckContext) -> collectives.Arrivals:
    """Stragglers by arrival at matched collectives, with what each did before arriving, once per context."""
    return ctx.once(_arrival)


def _arrival(ctx: CheckContext) -> collectives.Arrivals:
    steps = Counter(r.rank for r in ctx.breakdown if r.step is not None)
    def sql(q: str) -> pd.DataFrame:
        d = ctx.sql(q)
        return d if ctx.ranks is None or d.empty else d[d["rank"].isin(ctx.ranks)]

    a = collectives.arrivals(sql, dict(steps), ctx.mean_step_ms())
    for r in a.stragglers:
        cur = ctx.profile.cursor()
        try:
            a.ranks[r].before = collectives.before_arrival(cur, r, a)
        finally:
            cur.close()
    return a


# A percentage over a median below this (ms) is left out of the evidence: +3731% over 0.25 ms says less
# than the two numbers it comes from.
MIN_PCT_BASE_MS = 1.0


class Thresholds(Record):
    """The thresholds a finding was judged by, under its kind's own names (dimension, arrival, replay)."""

    dim_excess_pct: float | None = None
    min_excess_pct_of_step: float | None = None
    dixon_alpha: float | None = None
    sigma: float | None = None
    min_wait_ms: float | None = None
    last_share: float | None = None
    min_recovered_pct_of_step: float | None = None
    t_alpha: float | None = None
    robust_z: float | None = None


class ArrivalRecord(Record):
    """A straggler's arrival at matched collectives, on its compute / free / replay finding."""

    matched: int
    last: int
    share_last: float
    wait_caused_per_step_ms: float
    before_arrival: LeadUp | NoRecord


class SlowRankEvidence(Evidence):
    """One of three kinds by `dimension`: `replay` (the replay names the rank), `compute` | `communication` |
    `free` (beyond the median in that dimension; the keys of `CauseParts` say why) or `arrival` (it arrives last
    at collectives). The keys only some kinds write are optional."""

    primary = "recovered_by_rank"
    dimension: str
    # replay
    measured_ms: float | None = None
    predicted_ms: float | None = None
    recovered_ms: float | None = None
    window: str | None = None
    before: ReplayWindow | NoRecord | None = None
    recovered_by_rank: dict[int, float] | None = None   # rank -> ms recovered at its peers' median
    replay_error_pct: float | None = None
    noise_tested: bool | None = None
    # dimension (and the replay's excess of its cause)
    value_ms: float | None = None
    median_ms: float | None = None
    excess_ms: float | None = None
    spread_pct: float | None = None
    excess_pct: float | None = None
    top_ops: list[OpExcess] | None = None
    worst_step: int | None = None
    largest_gap_ms: float | None = None
    gap_position: str | None = None
    host_activity: list[HostOp] | None = None
    late_arrival: LateArrival | None = None
    slow_transport: SlowTransport | None = None
    waits_for: list[int] | None = None
    waiting_only: bool | None = None
    # arrival
    source: str | None = None
    matched: int | None = None
    last: int | None = None
    share_last: float | None = None
    wait_caused_ms: float | None = None
    wait_caused_per_step_ms: float | None = None
    before_arrival: LeadUp | NoRecord | None = None
    share_last_by_rank: dict[int, float] | None = None  # rank -> share of its collectives it arrives last at
    waiting_ranks_named: bool | None = None
    arrival: ArrivalRecord | None = None                # a replay / compute / free finding of a straggler
    thresholds: Thresholds
    # the cause the fixes are chosen by (`_cause`)
    cause: str | None = None
    fixed_stall: bool | None = None


@register
class SlowRankCheck(Check):
    id = "slow-rank"
    dimension = "compute"
    title = "Slow rank"
    fires_when = (
        "a rank holds the job back (replayed at its peers' median, the step is shorter), or, where the replay does "
        "not hold, is slower than the others in a dimension; `subject` = `compute` | `communication` | `free` | "
        "`arrival`"
    )
    thresholds = (
        "replay_extra_work_share", "replay_max_error_pct", "replay_t_alpha", "slow_link_ratio", "slow_rank_dim_excess_pct", "slow_rank_min_excess_pct", "slow_rank_robust_z",
        "straggler_chance_factor", "straggler_dixon_alpha", "straggler_last_share", "straggler_min_wait_ms",
        "straggler_sigma",
    )
    frameworks = ("pytorch", "mindspore")
    needs = ("steps",)
    vendors = ("ascend", "cuda", "rocm", "mtia", "cpu")
    description = ("Replays each step across ranks and names the rank whose move to its peers' median recovers "
                   "the most step time (that time is the impact), with what it did in the window it lost it; "
                   "where no step replays, per step and dimension (compute, communication not overlapped, free), "
                   "ranks beyond the median by a robust (MAD) test.")
    evidence = SlowRankEvidence
    # one shape per kind (a dimension's finding twice: its cost from the excess, or replayed). Words: `rank`;
    # `dim` the dimension's name in a title, `dim_words` what its number is (DIMENSION_WORDS); `slow_steps` the
    # steps the numbers hold for; `per_step` how the impact follows from them; `replayed_ms` the replay's saving;
    # `why` / `because` the cause (", : ..." / ". ..." or ""); `late` the arrival sentence; `noise` the caveat
    templates: ClassVar[dict[str, tuple[str, str]]] = {
        "dimension": (DIMENSION_TITLE, DIMENSION_MESSAGE + "{per_step}: {why}.{late}"),
        "dimension_replayed": (DIMENSION_TITLE, DIMENSION_MESSAGE + "; replayed at the median it would save the job "
                               "{replayed_ms:.2f} ms per step (its peers have slack): {why}.{late}"),
        "arrival": (
            "rank {rank} arrives last at {last} of {matched} collectives; the other ranks wait "
            "{wait_caused_per_step_ms:.2f} ms per step for it",
            "Rank {rank} arrives last, significantly, at {last} of its {matched} matched collectives "
            "({share_last:.0%}); the other ranks wait {wait_caused_per_step_ms:.2f} ms per step for it{because}.",
        ),
        "replay": (
            "rank {rank} holds the job back: at its peers' median the step would take {predicted_ms:.2f} ms instead "
            "of {measured_ms:.2f} ms",
            "Rank {rank} holds the job back by {recovered_ms:.2f} ms per step: replayed at its peers' median, the "
            "step takes {predicted_ms:.2f} ms, not {measured_ms:.2f} ms{because}.{late}{noise}",
        ),
    }

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        if len(ctx.all_ranks) < 2:
            return []
        rr = replay_ranks(ctx)
        if rr is not None:   # the replay says who holds the step back; ranks that only wait recover nothing
            out = self._replay_findings(ctx, rr)
            return out + self._dimension_findings(ctx, rr)
        arr = arrival(ctx)
        worst_wait = max((arr.ranks[r].caused_per_step_ms for r in arr.stragglers), default=0.0)
        # a straggler named in compute/free keeps one finding, its arrival record as evidence
        out = [f for f in self._dimension_findings(ctx, None, arr.stragglers)
               if not (arr.stragglers and f.ranks[0] not in arr.stragglers
                       and f.evidence["excess_ms"] < worst_wait)]   # it waits for a straggler
        for r in arr.stragglers:
            if not any(f.ranks == [r] and f.subject in ("compute", "free") for f in out):
                out.append(self._arrival_finding(ctx, arr, r))
        return out

    def _dimension_findings(self, ctx: CheckContext, rr: ReplayRanks | None,
                            stragglers: list[int] | None = None) -> list[Finding]:
        """A finding per rank beyond the median in a dimension. With the replay, only for ranks it did not name
        whose move to the median still recovers time, and that time is the impact (a rank slower in compute
        whose peers have slack costs the job less than its excess). A straggler's first compute / free finding
        holds its arrival record."""
        n_steps = Counter(r.rank for r in ctx.breakdown if r.step is not None)
        out: list[Finding] = []
        pending = set(stragglers or ())   # ranks whose arrival record is still to place
        for dim, stats in analyse(ctx).items():
            for e in stats.slow:
                if e.evidence.waiting_only:
                    continue
                impact, method = e.impact_ms, "excess over the per-step median, summed over slow steps / steps"
                if rr is not None:
                    if e.rank in rr.named:
                        continue
                    rec = rr.recovery(e.rank)
                    if rec.recovered_ms < T.straggler_min_wait_ms.value:
                        continue
                    impact, method = rec.recovered_ms, ("replay: measured step - the step replayed with this rank "
                                                        "at the median of its peers")
                ev = SlowRankEvidence(
                    dimension=dim, value_ms=e.value_ms, median_ms=e.median_ms, excess_ms=e.excess_ms,
                    spread_pct=stats.spread_pct,
                    **({"excess_pct": e.excess_pct} if e.median_ms >= MIN_PCT_BASE_MS else {}),
                    thresholds=Thresholds(dim_excess_pct=T.slow_rank_dim_excess_pct.value,
                                          min_excess_pct_of_step=T.slow_rank_min_excess_pct.value,
                                          robust_z=T.slow_rank_robust_z.value),
                    impact_method=method, **{k: getattr(e.evidence, k) for k in e.evidence.model_fields_set},
                    **_cause(ctx, e.rank, host_cause(e.evidence)))
                late = ""
                if dim in ("compute", "free") and e.rank in pending:
                    pending.discard(e.rank)
                    late = _add_arrival(ctx, ev, e.rank)
                out.append(self.finding(
                    ctx, shape="dimension" if rr is None else "dimension_replayed", subject=dim, ranks=[e.rank],
                    steps=e.steps, impact_ms=impact, evidence=ev,
                    words={"rank": e.rank, "dim": "device idle" if dim == "free" else dim,
                           "dim_words": DIMENSION_WORDS[dim], "slow_steps": slow_steps_text(e.steps),
                           "per_step": per_step_text(e.steps, e.impact_ms, n_steps.get(e.rank, 0)),
                           "replayed_ms": impact, "why": e.cause, "late": late}))
        return out

    def _arrival_finding(self, ctx: CheckContext, arr: collectives.Arrivals, r: int) -> Finding:
        ra, why = arr.ranks[r], arrival_text(arr.ranks[r])
        return self.finding(
            ctx, shape="arrival", subject="arrival", ranks=[r], steps=[s for s in ra.steps if s in set(ctx.steps_of(r))],
            impact_ms=ra.caused_per_step_ms,
            evidence=SlowRankEvidence(
                dimension="arrival", source=arr.source, matched=ra.matched, last=ra.last, share_last=ra.share_last,
                wait_caused_ms=ra.caused_ms, wait_caused_per_step_ms=ra.caused_per_step_ms,
                before_arrival=window_record(ra.before, LeadUp),
                share_last_by_rank={k: v.share_last for k, v in sorted(arr.ranks.items()) if v.last},
                waiting_ranks_named=False,
                thresholds=Thresholds(dixon_alpha=T.straggler_dixon_alpha.value, sigma=T.straggler_sigma.value,
                                      min_wait_ms=T.straggler_min_wait_ms.value,
                                      last_share=T.straggler_last_share.value),
                impact_method="union of the others' waits before its late arrivals / its steps",
                **_cause(ctx, r, ra.before.get("cause") if ra.before else None)),
            words={"rank": r, "because": f": {why}" if why else ""})

    def _replay_findings(self, ctx: CheckContext, rr: ReplayRanks) -> list[Finding]:
        """One finding per rank whose move to the median recovers step time in the replay; impact = that time."""
        out = []
        for r in rr.named:
            e = rr.by_rank[r]
            b = e.before
            why = replay_cause_text(b, cpu=ctx.vendor(r) == "cpu") if b else ""
            steps = e.steps or [s.step for s in rr.replay.steps if s.step not in rr.replay.abstained_steps]
            ev = SlowRankEvidence(
                dimension="replay", measured_ms=e.measured_ms, predicted_ms=e.predicted_ms,
                recovered_ms=e.recovered_ms, window=e.window, before=window_record(compact(b), ReplayWindow),
                **({"excess_ms": b["excess_ms"][b["cause"]]} if b else {}),
                recovered_by_rank={k: v.recovered_ms for k, v in sorted(rr.by_rank.items())},
                replay_error_pct=max((x.error_pct for x in rr.replay.steps), default=0.0),
                thresholds=Thresholds(min_recovered_pct_of_step=T.slow_rank_min_excess_pct.value,
                                      t_alpha=T.replay_t_alpha.value, robust_z=T.slow_rank_robust_z.value),
                impact_method="replay: measured step - the step replayed with this rank at the median of its peers, "
                              "mean over the replayed steps",
                **_cause(ctx, r, b.get("cause") if b else None))
            late, noise = _add_arrival(ctx, ev, r), ""
            n_steps = len(rr.replay.steps)
            if not noise_known(n_steps, len(rr.replay.ranks)):
                # one or two steps of a few ranks: one of them is always the slower; noise cannot be told
                ev.noise_tested = False
                noise = (f" {n_steps} step(s) of {len(rr.replay.ranks)} ranks cannot tell this from "
                         "noise: profile 3 or more steps.")
            elif n_steps == 1 and r not in rr.structural:
                # one step: the other ranks' spread says it was slow in that step, not that it always is (a
                # one-off of the host, the OS or the profiler looks the same); work its peers do not do would
                ev.noise_tested = False
                noise = (" This is one profiled step, and the rank runs no work its peers do not: a one-off "
                         "cannot be told from a rank that is always slow; profile 3 or more steps.")
            out.append(self.finding(
                ctx, shape="replay", subject=_SUBJECT.get(b.get("cause", ""), "compute") if b else "compute",
                ranks=[r], steps=steps, impact_ms=e.recovered_ms, evidence=ev, severity="low" if noise else None,
                words={"rank": r, "because": f". {why}" if why else "", "late": late, "noise": noise}))
        return out


def _add_arrival(ctx: CheckContext, ev: SlowRankEvidence, r: int) -> str:
    """A straggler's arrival record (who arrives last at matched collectives) as evidence of its finding, and
    the sentence its message ends with ("" and no record where it never arrives last)."""
    ra = arrival(ctx).ranks.get(r)
    if ra is None or not ra.last:
        return ""
    ev.arrival = ArrivalRecord(matched=ra.matched, last=ra.last, share_last=ra.share_last,
                               wait_caused_per_step_ms=ra.caused_per_step_ms,
                               before_arrival=window_record(ra.before, LeadUp))
    why = arrival_text(ra)
    return (f" It arrives last at {ra.last} of {ra.matched} collectives; the other ranks wait "
            f"{ra.caused_per_step_ms:.2f} ms per step for it" + (f": {why}." if why else "."))


# the replay's cause, in the dimension vocabulary of slow-rank's subjects: time in compute kernels or host ops
# is compute; a host stall or the data loader leaves the device (or the step) free
_SUBJECT = {"compute_kernels": "compute", "host_ops": "compute", "untraced": "free", "data_loading": "free"}


def _cause(ctx: CheckContext, rank: int, cause: str | None) -> dict:
    """The cause the finding names, as evidence the knowledge base chooses the leading fixes by (the fixes'
    `when` / `lead_for`): compute_kernels, host_ops, data_loading or untraced; untraced time of the same length
    every step is a fixed stall (a timed wait, blocking I/O, work only this rank does), else GC-like."""
    if cause is None:
        return {}
    return {"cause": cause, "fixed_stall": cause == "untraced" and fixed_stall(ctx, rank) is not None}
