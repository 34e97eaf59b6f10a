"""slow-rank's causes and sentences: why a rank is slower in a dimension (and the typed parts of the evidence
that says so), durations, step lists, the host ops of a cause and what a late rank did before arriving."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from ..metrics import collectives
from ..text import PART_TEXT, ms_text
from ..thresholds import T
from ..timeline.intervals import merge
from ..timeline.names import short_name
from .base import CheckContext
from .evidence import Record


class HostOp(Record):
    name: str
    category: str | None
    ms: float


class PartsCompared(Record):
    """A window's parts on the rank against its peers' median (`metrics.collectives.compare_parts`)."""

    cause: str                        # the part with the largest excess: compute_kernels | data_loading | ...
    window_ms: float
    peer_window_ms: float
    excess_ms: dict[str, float]       # part -> ms more than the peers
    top_host_ops: list[HostOp]


class LeadUp(PartsCompared):
    """What a late rank did before its late arrivals (`metrics.collectives.before_arrival`)."""

    rank_ms: dict[str, float]         # part -> ms
    peer_median_ms: dict[str, float]
    instances: int


class ReplayWindow(PartsCompared):
    """The window where a replayed rank loses its time (`_replay_ranks`), without each side's part times."""

    window: str                       # "tail" | "before collective <inst>"
    windows: int


class NoRecord(Record):
    """{}: nothing was measured for that part of the evidence."""


def compact(parts: dict) -> dict:
    """A replayed window's parts as evidence: the cause, the excess per part and the two window lengths (each
    side's per-part times follow from them and stay with `explain`)."""
    return {k: v for k, v in parts.items() if k not in ("rank_ms", "peer_median_ms")}


def window_record(record: dict, model: type[PartsCompared]) -> PartsCompared | NoRecord:
    """A window's parts (a `metrics.collectives` record) as `model`, or {} where nothing was measured."""
    return model.model_validate(record) if record else NoRecord()


class OpExcess(Record):
    """An op type that takes longer per step on the slow rank than the median of the others."""

    op: str
    delta_ms: float
    rank_ms: float
    peer_median_ms: float


class SlowTransport(Record):
    transport: str
    gbps: float
    peer_median_gbps: float


class LateArrival(Record):
    waits_less_ms: float    # its communication below the median rank's
    steps: list[int]


class CauseParts(Record):
    """What a dimension finding's cause rests on: the keys its evidence adds, by dimension."""

    top_ops: list[OpExcess] | None = None         # compute: the op types that exceed most
    worst_step: int | None = None                 # free: the longest idle gap of its first slow step ...
    largest_gap_ms: float | None = None
    gap_position: str | None = None               # at the start | at the end | in the middle
    host_activity: list[HostOp] | None = None     # ... and the host ops in it ([]: none traced)
    late_arrival: LateArrival | None = None       # compute / free of a rank that arrives last
    slow_transport: SlowTransport | None = None   # communication: its slowest transport ...
    waits_for: list[int] | None = None            # ... or the late ranks it waits for
    waiting_only: bool | None = None              # communication: it only waits (not named)

# Below this, an excess before a late arrival (ms) or a host op's time is not worth a number in a sentence:
# "0.0 ms more" or "aten::embedding 0.0 ms" reads as a cause and is none.
MIN_SHOWN_MS = 0.05


def host_ops_text(ops: Iterable[tuple[str, float]]) -> str:
    """"name 1.25 ms, name 0.30 ms" for the host ops (name, ms) of at least MIN_SHOWN_MS."""
    return ", ".join(f"{name} {ms_text(ms)}" for name, ms in ops if ms >= MIN_SHOWN_MS)


def _named(ops: list[dict]) -> list[tuple[str, float]]:
    """(name, ms) of host ops as `metrics.collectives.compare_parts` writes them."""
    return [(h["name"], h.get("ms", 0.0)) for h in ops]


def arrival_text(ra: collectives.RankArrival) -> str:
    """What the late rank did before its late arrivals, against the other ranks ("" without a record)."""
    b = ra.before
    if not b:
        return ""
    c = b["cause"]
    excess = b["excess_ms"][c]
    if excess < MIN_SHOWN_MS:
        return ("the traced work before its late arrivals matches the other ranks' (no part differs by "
                f"{ms_text(MIN_SHOWN_MS)} or more), so the delay is not in this profile's steps")
    text = (f"before each late arrival it spends {ms_text(excess)} more than the other ranks on "
            f"{PART_TEXT[c]} ({ms_text(b['rank_ms'][c])} against a median of {ms_text(b['peer_median_ms'][c])})")
    if ra.steps and ra.last > len(ra.steps):
        # several late arrivals per step: the per-step sum is what compares with the step time
        text += (f", {ms_text(excess * ra.last / len(ra.steps))} per step over its {ra.last} late arrivals in "
                 f"{len(ra.steps)} steps")
    if c == "host_ops" and (ops := host_ops_text(_named(b["top_host_ops"]))):
        text += "; its host ops: " + ops
    return text


def slow_steps_text(steps: list[int]) -> str:
    """"step 2", "steps 1 and 2", "steps 1-4" or "steps 1, 3 and 7": the steps a finding's numbers hold for."""
    if len(steps) == 1:
        return f"step {steps[0]}"
    if len(steps) > 2 and steps == list(range(steps[0], steps[-1] + 1)):
        return f"steps {steps[0]}-{steps[-1]}"
    return f"steps {', '.join(map(str, steps[:-1]))} and {steps[-1]}"


def per_step_text(slow_steps: list[int], impact_ms: float, steps: int) -> str:
    """How the finding's impact (ms per step over all the rank's `steps`) follows from the excess, when the
    rank is slow in only some of its steps (250 ms in 1 of 2 steps: 125 ms per step)."""
    if steps <= len(slow_steps):
        return ""
    return (f" (slow in {len(slow_steps)} of its {steps} steps: {impact_ms:.2f} ms per step over all of them, "
            "the impact)")


_PART_TEXT = {"untraced": "with nothing recorded on its host (a sleep, blocking I/O, GC or untraced work)",
              "data_loading": "in its data loader", "host_ops": "in host ops", "compute_kernels": "in compute kernels"}


def replay_cause_text(before: dict, cpu: bool = False) -> str:
    """What the late rank did in the window where it lost the time, against its peers (compare_parts)."""
    part = before["cause"]
    ex = before["excess_ms"][part]
    where = "after its last collective" if before.get("window") == "tail" else "before one of its collectives"
    what = "in host ops (its compute: no device)" if part == "host_ops" and cpu else _PART_TEXT.get(part, part)
    top = [h for h in before.get("top_host_ops", []) if h.get("ms", 0) > 0][:2]
    ops = f" ({host_ops_text(_named(top))})" if top and part in ("host_ops", "data_loading") else ""
    return (f"{where.capitalize()} it spends {ex:.2f} ms more than its peers ({before['window_ms']:.2f} against "
            f"{before['peer_window_ms']:.2f} ms) {what}{ops}")


def compute_cause(ctx: CheckContext, rank: int, steps: list[int]) -> tuple[str, CauseParts]:
    """Op types whose per-step time on the slow rank exceeds the median of the other ranks most."""
    q = ("SELECT rank, coalesce(op_type, name) AS op, sum(dur_ns) / 1e6 AS ms FROM compute_kernels "
         f"WHERE step IN ({','.join('?' * len(steps))}) GROUP BY rank, op")
    df = ctx.sql(q, [int(s) for s in steps])
    if df.empty:
        return "compute kernels run longer", CauseParts()
    piv = df.pivot_table(index="op", columns="rank", values="ms", fill_value=0.0) / len(steps)
    if rank not in piv.columns:
        return "compute kernels run longer", CauseParts()
    others = piv.drop(columns=[rank])
    base = others.median(axis=1) if not others.empty else piv[rank] * 0
    delta = (piv[rank] - base).sort_values(ascending=False)
    top = [OpExcess(op=op, delta_ms=round(float(d), 3), rank_ms=round(float(piv.at[op, rank]), 3),
                    peer_median_ms=round(float(base[op]), 3)) for op, d in delta.head(3).items() if d > 0]
    if not top:
        return "compute kernels run longer", CauseParts()
    text = ", ".join(f"{short_name(t.op)} +{t.delta_ms:.2f} ms ({t.rank_ms:.2f} against a median of "
                     f"{t.peer_median_ms:.2f})" for t in top)
    return f"slower kernels: {text} per step", CauseParts(top_ops=top)


def free_cause(ctx: CheckContext, rank: int, steps: list[int]) -> tuple[str, CauseParts]:
    """The longest device-idle gap in the worst step and what the host was doing during it."""
    worst = int(steps[0])
    w = ctx.sql("SELECT coalesce(device_start_ns, start_ns) AS w0, coalesce(device_end_ns, end_ns) AS w1 "
                "FROM steps WHERE rank = ? AND step = ?", [rank, worst])
    if w.empty:
        return "the device idles", CauseParts()
    w0, w1 = int(w.at[0, "w0"]), int(w.at[0, "w1"])
    ops = ctx.sql("SELECT start_ns, start_ns + dur_ns AS end_ns FROM device_ops WHERE rank = ? "
                  "AND start_ns < ? AND start_ns + dur_ns > ?", [rank, w1, w0])
    ms, me = merge(np.clip(ops["start_ns"].to_numpy(np.int64), w0, w1), np.clip(ops["end_ns"].to_numpy(np.int64),
                                                                                   w0, w1))
    starts = np.concatenate(([w0], me))
    ends = np.concatenate((ms, [w1]))
    gaps = ends - starts
    if gaps.size == 0 or gaps.max() <= 0:
        return "the device idles between kernels", CauseParts()
    i = int(np.argmax(gaps))
    g0, g1 = int(starts[i]), int(ends[i])
    host = ctx.sql("SELECT name, category, greatest(0, least(start_ns + dur_ns, ?) - greatest(start_ns, ?)) / 1e6 "
                   "AS ms FROM host_ops WHERE rank = ? AND start_ns < ? AND start_ns + dur_ns > ? "
                   "AND name NOT LIKE 'ProfilerStep#%'", [g1, g0, rank, g1, g0])
    gap_ms = (g1 - g0) / 1e6
    where = "at the end of" if g1 == w1 else ("at the start of" if g0 == w0 else "in the middle of")
    parts = CauseParts(worst_step=worst, largest_gap_ms=round(gap_ms, 3), gap_position=where.replace(" of", ""))
    if host.empty or host["ms"].sum() < 0.01 * gap_ms:
        parts.host_activity = []
        return (f"the device idles {ms_text(gap_ms)} {where} step {worst} with no host activity recorded "
                "(Python GC, I/O, sleep or work outside the profiled threads)"), parts
    top = host.groupby(["name", "category"], as_index=False)["ms"].sum().sort_values("ms", ascending=False).head(3)
    parts.host_activity = [HostOp(name=n, category=c, ms=round(float(m), 3)) for n, c, m in top.itertuples(index=False)]
    text = host_ops_text((h.name, h.ms) for h in parts.host_activity)
    return f"the device idles {ms_text(gap_ms)} {where} step {worst} while the host runs {text}", parts


def comm_cause(ctx: CheckContext, rank: int, late: list[int]) -> tuple[str, CauseParts]:
    """The rank's slowest transport against the other ranks', else the late ranks (`late`) it waits for."""
    bw = ctx.sql("SELECT rank, transport, sum(size_bytes) / nullif(sum(transit_ns), 0) AS gbps FROM comm_bandwidth "
                 "WHERE size_bytes > 0 GROUP BY rank, transport")
    if not bw.empty:
        mine = bw[bw["rank"] == rank]
        for t, g in mine.groupby("transport"):
            others = bw[(bw["transport"] == t) & (bw["rank"] != rank)]["gbps"]
            if others.empty or g["gbps"].isna().all():
                continue
            med = float(others.median())
            val = float(g["gbps"].iloc[0])
            if med and val < T.slow_link_ratio.value * med:
                return (f"its {t} bandwidth is {val:.1f} GB/s against {med:.1f} GB/s on the other ranks",
                        CauseParts(slow_transport=SlowTransport(transport=t, gbps=round(val, 3),
                                                                peer_median_gbps=round(med, 3))))
    if late:
        lr = sorted(late)
        return (f"it waits at collectives for rank(s) {', '.join(map(str, lr))}, which arrive last",
                CauseParts(waits_for=lr))
    return "its collectives take longer than on the other ranks", CauseParts()


def name_causes(ctx: CheckContext, out: dict[str, DimensionStats]) -> None:
    """Each slow entry's cause and its evidence parts, by dimension; a rank whose communication is far below
    the median arrives last (the others wait for it), which its compute / free cause says."""
    late = {e.rank: e for e in out["communication"].fast}
    for e in late.values():
        e.cause = (f"it arrives last at collectives: its communication takes {e.excess_ms:.2f} ms less than the "
                   f"median rank's {e.median_ms:.2f} ms because the other ranks wait for it")
    for dim in ("compute", "free"):
        for e in out[dim].slow:
            e.cause, e.evidence = (compute_cause if dim == "compute" else free_cause)(ctx, e.rank, e.steps)
            if e.rank in late:
                le = late[e.rank]
                e.evidence.late_arrival = LateArrival(waits_less_ms=le.excess_ms, steps=le.steps)
                e.cause += (f"; it arrives last at collectives (waits {le.excess_ms:.2f} ms less than the median), "
                            "so the other ranks wait for it")
    for e in out["communication"].slow:
        e.cause, e.evidence = comm_cause(ctx, e.rank, list(late))
        # waiting for a late peer is the peer's problem: the finding goes to the late rank's compute/free
        e.evidence.waiting_only = e.evidence.waits_for is not None and e.evidence.slow_transport is None


def host_cause(parts: CauseParts) -> str | None:
    """A dimension finding's cause from what the host did in the slow gap: nothing (untraced) or the loader."""
    host = parts.host_activity
    if host == []:
        return "untraced"
    if host and any(h.category == "dataloader" or "dataloader" in h.name.lower() for h in host[:1]):
        return "data_loading"
    return None


# the slow-rank check's per-dimension statistics (slow_rank.analyse), which the tools read too
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
    evidence: CauseParts = field(default_factory=CauseParts)


@dataclass
class DimensionStats:
    name: str
    median_ms: float | None
    spread_pct: float | None   # (max − min) / mean step, percent, worst step (the advisor's measure)
    slow: list[SlowEntry]
    fast: list[SlowEntry]      # ranks far below the median (communication: late arrivals)
