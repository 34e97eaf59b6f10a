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
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..metrics import collectives
from ..metrics.stages import stage_of_ranks
from ..models import Finding
from ..replay.noise import noise_known
from ..text import ms_text
from ..thresholds import T
from ..timeline.intervals import merge
from ..timeline.names import short_name
from ._replay_ranks import ReplayRanks, replay_ranks
from ._slow_rank_text import (
    arrival_text,
    host_ops_text,
    per_step_text,
    replay_cause_text,
    slow_steps_text,
)
from .base import Check, CheckContext, register
from .gc_pause import fixed_stall

# "free" is judged on the device's idle time in the whole host step (idle_ms): on Ascend the profiler's
# Free stops at the last kernel, and a rank that idles after it (GC, I/O) is still the slow one.
DIMENSIONS = {"compute": "compute_ms", "communication": "comm_not_overlapped_ms", "free": "idle_ms"}
# what each dimension's number is, in a finding's words: "free" compares idle_ms, which holds the step's lead-in
# and tail besides the breakdown's free_ms, so a finding must not call that number "free"
DIMENSION_WORDS = {"compute": "compute", "communication": "communication not overlapped",
                   "free": "device idle (free time plus the step's lead-in and tail)"}


@dataclass
class SlowEntry:
    rank: int
    steps: list[int]
    value_ms: float          # mean value of the dimension over the slow steps
    median_ms: float         # mean of the per-step medians over the same steps
    excess_ms: float         # mean excess over the slow steps
    excess_pct: float        # excess / median, percent
    impact_ms: float         # excess summed over slow steps / all steps
    cause: str = ""
    evidence: dict = field(default_factory=dict)


@dataclass
class DimensionStats:
    name: str
    median_ms: float | None
    spread_pct: float | None   # (max − min) / mean step, percent, worst step (the advisor's measure)
    slow: list[SlowEntry]
    fast: list[SlowEntry]      # ranks far below the median (communication: late arrivals)


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
    return ctx.memo("slow-rank.analyse", lambda: _analyse(ctx))


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
    late = {e.rank: e for e in out["communication"].fast}
    for e in late.values():
        e.cause = (f"it arrives last at collectives: its communication takes {e.excess_ms:.2f} ms less than the "
                   f"median rank's {e.median_ms:.2f} ms because the other ranks wait for it")
    for dim in ("compute", "free"):
        for e in out[dim].slow:
            e.cause, e.evidence = (_compute_cause(ctx, e) if dim == "compute" else _free_cause(ctx, e))
            if e.rank in late:
                le = late[e.rank]
                e.evidence["late_arrival"] = {"waits_less_ms": le.excess_ms, "steps": le.steps}
                e.cause += (f"; it arrives last at collectives (waits {le.excess_ms:.2f} ms less than the median), "
                            "so the other ranks wait for it")
    for e in out["communication"].slow:
        e.cause, e.evidence = _comm_cause(ctx, e, late)
        # waiting for a late peer is the peer's problem: the finding goes to the late rank's compute/free
        e.evidence["waiting_only"] = "waits_for" in e.evidence and "slow_transport" not in e.evidence
    return out


def arrival(ctx: CheckContext) -> collectives.Arrivals:
    """Stragglers by arrival at matched collectives, with what each did before arriving, once per context."""
    return ctx.memo("slow-rank.arrival", lambda: _arrival(ctx))


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


def _compute_cause(ctx: CheckContext, e: SlowEntry) -> tuple[str, dict]:
    """Op types whose per-step time on the slow rank exceeds the median of the other ranks most."""
    steps = e.steps
    q = ("SELECT rank, coalesce(op_type, name) AS op, sum(dur_ns) / 1e6 AS ms FROM device_ops "
         f"WHERE category = 'compute' AND step IN ({','.join('?' * len(steps))}) GROUP BY rank, op")
    df = ctx.sql(q, [int(s) for s in steps])
    if df.empty:
        return "compute kernels run longer", {}
    piv = df.pivot_table(index="op", columns="rank", values="ms", fill_value=0.0) / len(steps)
    if e.rank not in piv.columns:
        return "compute kernels run longer", {}
    others = piv.drop(columns=[e.rank])
    base = others.median(axis=1) if not others.empty else piv[e.rank] * 0
    delta = (piv[e.rank] - base).sort_values(ascending=False)
    top = [(op, round(float(d), 3), round(float(piv.at[op, e.rank]), 3), round(float(base[op]), 3))
           for op, d in delta.head(3).items() if d > 0]
    if not top:
        return "compute kernels run longer", {}
    text = ", ".join(f"{short_name(op)} +{d:.2f} ms ({v:.2f} against a median of {b:.2f})" for op, d, v, b in top)
    return f"slower kernels: {text} per step", {"top_ops": [
        {"op": op, "delta_ms": d, "rank_ms": v, "peer_median_ms": b} for op, d, v, b in top]}


def _free_cause(ctx: CheckContext, e: SlowEntry) -> tuple[str, dict]:
    """The longest device-idle gap in the worst step and what the host was doing during it."""
    worst = e.steps[0]
    w = ctx.sql("SELECT coalesce(device_start_ns, start_ns) AS w0, coalesce(device_end_ns, end_ns) AS w1 "
                "FROM steps WHERE rank = ? AND step = ?", [e.rank, worst])
    if w.empty:
        return "the device idles", {}
    w0, w1 = int(w.at[0, "w0"]), int(w.at[0, "w1"])
    ops = ctx.sql("SELECT start_ns, start_ns + dur_ns AS end_ns FROM device_ops WHERE rank = ? "
                  "AND start_ns < ? AND start_ns + dur_ns > ?", [e.rank, w1, w0])
    ms, me = merge(np.clip(ops["start_ns"].to_numpy(np.int64), w0, w1), np.clip(ops["end_ns"].to_numpy(np.int64),
                                                                                   w0, w1))
    starts = np.concatenate(([w0], me))
    ends = np.concatenate((ms, [w1]))
    gaps = ends - starts
    if gaps.size == 0 or gaps.max() <= 0:
        return "the device idles between kernels", {}
    i = int(np.argmax(gaps))
    g0, g1 = int(starts[i]), int(ends[i])
    host = ctx.sql("SELECT name, category, greatest(0, least(start_ns + dur_ns, ?) - greatest(start_ns, ?)) / 1e6 "
                   "AS ms FROM host_ops WHERE rank = ? AND start_ns < ? AND start_ns + dur_ns > ? "
                   "AND name NOT LIKE 'ProfilerStep#%'", [g1, g0, e.rank, g1, g0])
    gap_ms = (g1 - g0) / 1e6
    where = "at the end of" if g1 == w1 else ("at the start of" if g0 == w0 else "in the middle of")
    ev: dict = {"worst_step": worst, "largest_gap_ms": round(gap_ms, 3), "gap_position": where.replace(" of", "")}
    if host.empty or host["ms"].sum() < 0.01 * gap_ms:
        ev["host_activity"] = []
        return (f"the device idles {ms_text(gap_ms)} {where} step {worst} with no host activity recorded "
                "(Python GC, I/O, sleep or work outside the profiled threads)"), ev
    top = host.groupby(["name", "category"], as_index=False)["ms"].sum().sort_values("ms", ascending=False).head(3)
    ev["host_activity"] = [{"name": n, "category": c, "ms": round(float(m), 3)}
                           for n, c, m in top.itertuples(index=False)]
    text = host_ops_text(ev["host_activity"])
    return f"the device idles {ms_text(gap_ms)} {where} step {worst} while the host runs {text}", ev


def _comm_cause(ctx: CheckContext, e: SlowEntry, late: dict[int, SlowEntry]) -> tuple[str, dict]:
    bw = ctx.sql("SELECT rank, transport, sum(size_bytes) / nullif(sum(transit_ns), 0) AS gbps FROM comm_bandwidth "
                 "WHERE size_bytes > 0 GROUP BY rank, transport")
    ev: dict = {}
    if not bw.empty:
        mine = bw[bw["rank"] == e.rank]
        for t, g in mine.groupby("transport"):
            others = bw[(bw["transport"] == t) & (bw["rank"] != e.rank)]["gbps"]
            if others.empty or g["gbps"].isna().all():
                continue
            med = float(others.median())
            val = float(g["gbps"].iloc[0])
            if med and val < T.slow_link_ratio.value * med:
                ev["slow_transport"] = {"transport": t, "gbps": round(val, 3), "peer_median_gbps": round(med, 3)}
                return f"its {t} bandwidth is {val:.1f} GB/s against {med:.1f} GB/s on the other ranks", ev
    if late:
        lr = sorted(late)
        ev["waits_for"] = lr
        return f"it waits at collectives for rank(s) {', '.join(map(str, lr))}, which arrive last", ev
    return "its collectives take longer than on the other ranks", ev


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

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        if len(ctx.all_ranks) < 2:
            return []
        rr = replay_ranks(ctx)
        if rr is not None:   # the replay says who holds the step back; ranks that only wait recover nothing
            out = self._replay_findings(ctx, rr)
            return out + self._dimension_findings(ctx, rr)
        arr = arrival(ctx)
        worst_wait = max((arr.ranks[r].caused_per_step_ms for r in arr.stragglers), default=0.0)
        out = [f for f in self._dimension_findings(ctx, None)
               if not (arr.stragglers and f.ranks[0] not in arr.stragglers
                       and f.evidence["excess_ms"] < worst_wait)]   # it waits for a straggler
        # a straggler already named in compute/free keeps one finding, its arrival record as evidence
        for r in arr.stragglers:
            own = [f for f in out if f.ranks == [r] and f.subject in ("compute", "free")]
            if not own:
                out.append(self._arrival_finding(ctx, arr, r))
                continue
            self._add_arrival(ctx, own[0], r)
        return out

    def _dimension_findings(self, ctx: CheckContext, rr: ReplayRanks | None) -> list[Finding]:
        """A finding per rank beyond the median in a dimension. With the replay, only for ranks it did not name
        whose move to the median still recovers time, and that time is the impact (a rank slower in compute
        whose peers have slack costs the job less than its excess)."""
        n_steps = Counter(r.rank for r in ctx.breakdown if r.step is not None)
        out: list[Finding] = []
        for dim, stats in analyse(ctx).items():
            for e in stats.slow:
                if e.evidence.get("waiting_only"):
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
                f = self.finding(
                    ctx, title=(f"rank {e.rank} is slower in {dim if dim != 'free' else 'device idle'}: "
                                f"{e.value_ms:.2f} ms against a median of "
                                f"{e.median_ms:.2f} ms in {slow_steps_text(e.steps)}"),
                    subject=dim, ranks=[e.rank], steps=e.steps, impact_ms=impact,
                    evidence={"dimension": dim, "value_ms": e.value_ms, "median_ms": e.median_ms,
                              "excess_ms": e.excess_ms, "spread_pct": stats.spread_pct,
                              **({"excess_pct": e.excess_pct} if e.median_ms >= MIN_PCT_BASE_MS else {}),
                              "thresholds": {"dim_excess_pct": T.slow_rank_dim_excess_pct.value,
                                             "min_excess_pct_of_step": T.slow_rank_min_excess_pct.value,
                                             "robust_z": T.slow_rank_robust_z.value},
                              "impact_method": method, **e.evidence, **_cause(ctx, e.rank, _host_cause(e))},
                    message=f"Rank {e.rank} spends {e.value_ms:.2f} ms in {DIMENSION_WORDS[dim]} in "
                            f"{slow_steps_text(e.steps)} "
                            f"against a median of {e.median_ms:.2f} ms, {e.excess_ms:.2f} ms more"
                            + (f"{per_step_text(e.steps, e.impact_ms, n_steps.get(e.rank, 0))}" if rr is None else
                               f"; replayed at the median it would save the job {impact:.2f} ms per step (its "
                               "peers have slack)") + f": {e.cause}.")
                out.append(f)
        return out

    def _arrival_finding(self, ctx: CheckContext, arr: collectives.Arrivals, r: int) -> Finding:
        ra = arr.ranks[r]
        why = arrival_text(ra)
        f = self.finding(
            ctx, title=(f"rank {r} arrives last at {ra.last} of {ra.matched} collectives; the other ranks wait "
                        f"{ra.caused_per_step_ms:.2f} ms per step for it"),
            subject="arrival", ranks=[r], steps=[s for s in ra.steps if s in set(ctx.steps_of(r))],
            impact_ms=ra.caused_per_step_ms,
            evidence={"dimension": "arrival", "source": arr.source, "matched": ra.matched, "last": ra.last,
                      "share_last": ra.share_last, "wait_caused_ms": ra.caused_ms,
                      "wait_caused_per_step_ms": ra.caused_per_step_ms, "before_arrival": ra.before,
                      "share_last_by_rank": {str(k): v.share_last for k, v in sorted(arr.ranks.items())
                                             if v.last}, "waiting_ranks_named": False,
                      "thresholds": {"dixon_alpha": T.straggler_dixon_alpha.value, "sigma": T.straggler_sigma.value,
                                     "min_wait_ms": T.straggler_min_wait_ms.value,
                                     "last_share": T.straggler_last_share.value},
                      "impact_method": "union of the others' waits before its late arrivals / its steps",
                      **_cause(ctx, r, ra.before.get("cause") if ra.before else None)},
            message=(f"Rank {r} arrives last, significantly, at {ra.last} of its {ra.matched} matched collectives "
                     f"({100 * ra.share_last:.0f}%); the other ranks wait {ra.caused_per_step_ms:.2f} ms per step "
                     f"for it" + (f": {why}." if why else ".")))
        return f

    def _replay_findings(self, ctx: CheckContext, rr: ReplayRanks) -> list[Finding]:
        """One finding per rank whose move to the median recovers step time in the replay; impact = that time."""
        out = []
        for r in rr.named:
            e = rr.by_rank[r]
            b = e.before
            why = replay_cause_text(b, cpu=ctx.vendor(r) == "cpu") if b else ""
            steps = e.steps or [s.step for s in rr.replay.steps if s.step not in rr.replay.abstained_steps]
            f = self.finding(
                ctx, title=(f"rank {r} holds the job back: at its peers' median the step would take "
                            f"{e.predicted_ms:.2f} ms instead of {e.measured_ms:.2f} ms"),
                subject=_SUBJECT.get(b.get("cause", ""), "compute") if b else "compute", ranks=[r], steps=steps,
                impact_ms=e.recovered_ms,
                evidence={"dimension": "replay", "measured_ms": e.measured_ms, "predicted_ms": e.predicted_ms,
                          "recovered_ms": e.recovered_ms, "window": e.window, "before": _compact(b),
                          **({"excess_ms": b["excess_ms"][b["cause"]]} if b else {}),
                          "recovered_by_rank": {str(k): v.recovered_ms for k, v in sorted(rr.by_rank.items())},
                          "replay_error_pct": max((x.error_pct for x in rr.replay.steps), default=0.0),
                          "thresholds": {"min_recovered_pct_of_step": T.slow_rank_min_excess_pct.value,
                                         "t_alpha": T.replay_t_alpha.value, "robust_z": T.slow_rank_robust_z.value},
                          "impact_method": "replay: measured step - the step replayed with this rank at the median "
                                           "of its peers, mean over the replayed steps",
                          **_cause(ctx, r, b.get("cause") if b else None)},
                message=(f"Rank {r} holds the job back by {e.recovered_ms:.2f} ms per step: replayed at its "
                         f"peers' median, the step takes {e.predicted_ms:.2f} ms, not {e.measured_ms:.2f} ms"
                         + (f". {why}" if why else "") + "."))
            self._add_arrival(ctx, f, r)
            if not noise_known(len(rr.replay.steps), len(rr.replay.ranks)):
                # one or two steps of a few ranks: one of them is always the slower; noise cannot be told
                f.severity = "low"
                f.evidence["noise_tested"] = False
                f.message += (f" {len(rr.replay.steps)} step(s) of {len(rr.replay.ranks)} ranks cannot tell this "
                              "from noise: profile 3 or more steps.")
            out.append(f)
        return out

    @staticmethod
    def _add_arrival(ctx: CheckContext, f: Finding, r: int) -> None:
        """A straggler's arrival record (who arrives last at matched collectives) as evidence of its finding."""
        arr = arrival(ctx)
        ra = arr.ranks.get(r)
        if ra is None or not ra.last:
            return
        f.evidence["arrival"] = {"matched": ra.matched, "last": ra.last, "share_last": ra.share_last,
                                 "wait_caused_per_step_ms": ra.caused_per_step_ms,
                                 "before_arrival": ra.before}
        why = arrival_text(ra)
        f.message += (f" It arrives last at {ra.last} of {ra.matched} collectives; the other ranks wait "
                      f"{ra.caused_per_step_ms:.2f} ms per step for it" + (f": {why}." if why else "."))


# the replay's cause, in the dimension vocabulary of slow-rank's subjects: time in compute kernels or host ops
# is compute; a host stall or the data loader leaves the device (or the step) free
_SUBJECT = {"compute_kernels": "compute", "host_ops": "compute", "untraced": "free", "data_loading": "free"}


def _compact(parts: dict) -> dict:
    """A window's parts as evidence: the cause, the excess per part and the two window lengths (each side's
    per-part times follow from them and stay with `explain`)."""
    return {k: v for k, v in parts.items() if k not in ("rank_ms", "peer_median_ms")}


def _cause(ctx: CheckContext, rank: int, cause: str | None) -> dict:
    """The cause the finding names, as evidence the knowledge base chooses the leading fixes by (the fixes'
    `when` / `lead_for`): compute_kernels, host_ops, data_loading or untraced; untraced time of the same length
    every step is a fixed stall (a timed wait, blocking I/O, work only this rank does), else GC-like."""
    if cause is None:
        return {}
    return {"cause": cause, "fixed_stall": cause == "untraced" and fixed_stall(ctx, rank) is not None}


def _host_cause(e: SlowEntry) -> str | None:
    """A dimension finding's cause from what the host did in the slow gap: nothing (untraced) or the loader."""
    host = e.evidence.get("host_activity")
    if host == []:
        return "untraced"
    if host and any(h.get("category") == "dataloader" or "dataloader" in str(h.get("name", "")).lower()
                    for h in host[:1]):
        return "data_loading"
    return None
