"""The report's per-rank timeline of one step: compute / communication / other device work / idle on a
shared time axis, one row per rank, so the late rank and the ranks waiting for it are visible.

Which step: the slowest kept step present on two or more ranks (largest mean step time over the ranks),
among the steps the first straggler is late in when there is one (synchronous steps last about as long
whether or not a rank was late); the caption says which. Which ranks: all up to MAX_TIMELINE_RANKS, else
those that stand out (`standing_out`) plus the stragglers.

Time axis: each rank's clock is shifted so that the collectives matched across ranks (the n-th instance of
the same collective in the same group, `metrics.collectives.instances`; without comm_ops, communication
device ops of the same name) end together: a collective ends at about the same moment on every rank, so
this needs no clock synchronisation between hosts. The shift of a rank is the median, over the instances
it shares with the reference rank in that step (else in the whole profile), of (reference end − its end).
Without a matched collective the ranks stay on their own clocks and the caption says the axis is not
aligned.

Classes (priority order, ns intervals clipped to the rank's host step window):
  compute        = union of compute device ops;
  communication  = union of communication device ops and comm_ops (gloo collectives are host-side: the
                   host waits in them), minus compute (overlapped communication is drawn as compute);
  other          = other device work (memory copies, syncs) not covered by the above;
  idle           = the rest of the host step window.
The totals beside a row are over the rank's host step window ("host step", its ProfilerStep span or trace
window), which can differ from the breakdown's step (an Ascend step table's Stage): the label says which.
Drawing: the axis is cut into PLOT_W pixel bins and each bin takes the class that covers most of it
(idle included), run-length encoded into rects; the totals beside each row are exact (ms).
"""

from __future__ import annotations

import itertools
import statistics
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..analysis.metrics import collectives
from ..analysis.metrics.breakdown import BreakdownRow, standing_out
from ..analysis.store import Profile
from ..analysis.timeline.intervals import Coverage
from .report_charts import Chart, Rect, Text, nice_step

MAX_TIMELINE_RANKS = 16
PLOT_W = 720          # px of the time axis
TIMELINE_CLASSES: list[tuple[str, str, str]] = [
    ("compute", "compute", "#3b6ea8"),
    ("comm", "communication (not overlapped; incl. waiting for peers)", "#e07b39"),
    ("other", "other device work (memory, sync)", "#8c6bb1"),
    ("idle", "idle (no device work)", "#e4e8ee"),
]


@dataclass
class Lane:
    rank: int
    w0: int                       # host step window on the shared axis (ns)
    w1: int
    bins: np.ndarray              # class index per pixel bin, -1 outside the window
    totals_ms: dict[str, float]


def _pick_step(rows: list[BreakdownRow], among: list[int]) -> tuple[int, float] | None:
    """(step, mean step ms over ranks) of the slowest step present on 2+ ranks, in `among` if any is."""
    by: dict[int, list[float]] = {}
    for r in rows:
        if r.step is not None and r.step_ms is not None:
            by.setdefault(r.step, []).append(r.step_ms)
    cands = [(statistics.fmean(v), s) for s, v in by.items() if len(v) >= 2]
    cands = [c for c in cands if c[1] in among] or cands
    if not cands:
        return None
    ms, step = max(cands)
    return step, ms


def _pick_ranks(totals: list[BreakdownRow], stragglers: list[int]) -> list[int]:
    if len(totals) <= MAX_TIMELINE_RANKS:
        return sorted(t.rank for t in totals)
    keep = {t.rank for t in standing_out(totals, MAX_TIMELINE_RANKS - min(len(stragglers), 4))}
    return sorted(keep | set(stragglers[:4]))


# Communication device ops matched by name and occurrence, for ranks without comm_ops rows (torch_npu
# Level0 writes no communication.json; its hcom_allReduce__868_0_1 ... kernels carry the same name on every
# rank). Rows of one op recorded twice a nanosecond apart count once (same µs).
_DEVICE_COMM_SQL = """
SELECT rank, step, start_ns, dur_ns, name || '#' || row_number() OVER (PARTITION BY rank, name ORDER BY start_ns)
       AS inst
FROM (SELECT rank, name, min(step) AS step, min(start_ns) AS start_ns, max(dur_ns) AS dur_ns FROM comm_kernels
      WHERE rank IN (SELECT unnest(?::BIGINT[]))
      GROUP BY rank, name, start_ns // 1000)
"""


def _matched(prof: Profile, ranks: list[int]) -> pd.DataFrame:
    """rank, step, inst, end of the collectives matched across ranks (metrics.collectives), else of the
    communication device ops matched by name."""
    try:
        df, _ = collectives.instances(lambda q: prof.sql(q))
    except Exception:  # a profile without the comm tables' rows: try the device ops
        df = pd.DataFrame()
    if df.empty or not set(df["rank"]) & set(ranks):
        df = prof.sql(_DEVICE_COMM_SQL, [ranks])
    df = df[df["rank"].isin(ranks)]
    return df.assign(end=df["start_ns"] + df["dur_ns"])[["rank", "step", "inst", "end"]]


def clock_offsets(prof: Profile, ranks: list[int], step: int) -> tuple[dict[int, int], bool]:
    """rank -> ns to add to its clock so that matched collectives end together; (offsets, aligned)."""
    df = _matched(prof, ranks)
    in_step = df[df["step"] == step]
    ref = next((r for r in ranks if r in set(in_step["rank"])), None)
    if ref is None:
        ref = next((r for r in ranks if r in set(df["rank"])), None)
    if ref is None:
        return {r: 0 for r in ranks}, False
    out: dict[int, int] = {}
    aligned = True
    for r in ranks:
        shift = None
        for part in (in_step, df):
            mine = part[part["rank"] == r].drop_duplicates("inst").set_index("inst")["end"]
            theirs = part[part["rank"] == ref].drop_duplicates("inst").set_index("inst")["end"]
            common = mine.index.intersection(theirs.index)
            if len(common):
                shift = int(np.median(theirs.loc[common].to_numpy() - mine.loc[common].to_numpy()))
                break
        if shift is None:
            aligned = False
        out[r] = shift or 0
    return out, aligned


def _lanes(prof: Profile, ranks: list[int], step: int, offsets: dict[int, int]) -> list[Lane]:
    win = {int(r): (int(s), int(e)) for r, s, e in prof.rows(
        "SELECT rank, start_ns, end_ns FROM steps WHERE step = ? AND rank IN (SELECT unnest(?::BIGINT[]))",
        [step, ranks])}
    if len(win) < 2:
        return []
    shifted = {r: (s + offsets.get(r, 0), e + offsets.get(r, 0)) for r, (s, e) in win.items()}
    t0 = min(s for s, _ in shifted.values())
    t1 = max(e for _, e in shifted.values())
    edges = np.linspace(t0, t1, PLOT_W + 1).astype(np.int64)
    lanes = []
    for r in sorted(win):
        s, e = win[r]
        off = offsets.get(r, 0)
        ops = prof.arrays("SELECT start_ns, dur_ns, category FROM device_ops WHERE rank = ? AND start_ns < ? "
                          "AND start_ns + dur_ns > ?", [r, e, s])
        comm = prof.arrays("SELECT start_ns, elapse_ns AS dur_ns FROM comm_ops WHERE rank = ? AND start_ns < ? "
                           "AND start_ns + elapse_ns > ?", [r, e, s])
        cat = np.asarray(ops["category"], dtype=object)
        starts = np.asarray(ops["start_ns"], dtype=np.int64)
        ends = starts + np.asarray(ops["dur_ns"], dtype=np.int64)
        cs = np.asarray(comm["start_ns"], dtype=np.int64)
        ce = cs + np.asarray(comm["dur_ns"], dtype=np.int64)
        is_comp, is_comm = cat == "compute", cat == "communication"
        comp = Coverage(np.clip(starts[is_comp], s, e), np.clip(ends[is_comp], s, e))
        cc = Coverage(np.clip(np.r_[starts[is_comp | is_comm], cs], s, e), np.clip(np.r_[ends[is_comp | is_comm], ce],
                                                                                 s, e))
        busy = Coverage(np.clip(np.r_[starts, cs], s, e), np.clip(np.r_[ends, ce], s, e))
        # bins on the rank's own clock, clipped to its window
        b0 = np.clip(edges[:-1] - off, s, e)
        b1 = np.clip(edges[1:] - off, s, e)
        c_comp = comp.within(b0, b1)
        c_comm = cc.within(b0, b1) - c_comp
        c_other = busy.within(b0, b1) - cc.within(b0, b1)
        c_idle = (b1 - b0) - busy.within(b0, b1)
        stack = np.vstack([c_comp, c_comm, c_other, c_idle])
        bins = np.where((b1 - b0) > 0, np.argmax(stack, axis=0), -1)
        w = np.array([s]), np.array([e])
        totals = {"compute": comp.within(*w)[0], "comm": cc.within(*w)[0] - comp.within(*w)[0],
                  "other": busy.within(*w)[0] - cc.within(*w)[0], "idle": (e - s) - busy.within(*w)[0]}
        lanes.append(Lane(r, s + off - t0, e + off - t0, bins, {k: float(v) / 1e6 for k, v in totals.items()}))
    return lanes


def step_timeline(prof: Profile, rows: list[BreakdownRow], totals: list[BreakdownRow],
                  stragglers: list[int], slow: set[int] | frozenset[int] = frozenset(),
                  late_steps: list[int] | None = None, path_of=None) -> Chart | None:
    """The timeline chart of one step for a profile of 2+ ranks; None when there is nothing to draw.
    Row labels: a straggler "arrives last", a rank another slow-rank finding names (`slow`) is "slow", the
    others "wait" when there is a straggler. `late_steps`: the steps the first straggler is late in.
    `path_of(step) -> CriticalPath | None`: the replay's critical path of the step, drawn over the lanes."""
    if len({r.rank for r in rows}) < 2:
        return None
    picked = _pick_step(rows, late_steps or [])
    if picked is None:
        return None
    step, mean_ms = picked
    ranks = _pick_ranks([t for t in totals if any(r.rank == t.rank and r.step == step for r in rows)], stragglers)
    offsets, aligned = clock_offsets(prof, ranks, step)
    lanes = _lanes(prof, ranks, step, offsets)
    if len(lanes) < 2:
        return None
    span_ns = max(ln.w1 for ln in lanes)
    left, right, row_h, gap, top = 150, 330, 18, 8, 30
    height = top + len(lanes) * (row_h + gap) + 34
    how = ("ranks aligned on the ends of their matched collectives" if aligned
           else "ranks on their own clocks (no collective matched across ranks: the axis is not aligned)")
    which = (f"the slowest of the steps rank {stragglers[0]} arrives late in" if late_steps and stragglers
             and step in late_steps else "the slowest kept step")
    ch = Chart(id="chart-timeline", title=f"Step {step} on each rank ({which}, mean {mean_ms:.2f} ms): compute, "
               "communication and idle time", width=left + PLOT_W + right,
               height=height, legend=[(label, colour) for _, label, colour in TIMELINE_CLASSES],
               note=how + ("; stragglers (arrive last at collectives) marked" if stragglers else ""),
               data={"step": str(step), "ranks": str(len(lanes)), "aligned": str(aligned).lower(),
                     "span-ms": f"{span_ns / 1e6:.3f}", "stragglers": ",".join(map(str, stragglers))})
    px = PLOT_W / max(span_ns, 1)
    for i, ln in enumerate(lanes):
        y = top + i * (row_h + gap)
        tag = (" (arrives last)" if ln.rank in stragglers else " (slow)" if ln.rank in slow
               else " (waits)" if stragglers else "")
        ch.texts.append(Text(left - 8, y + row_h * 0.72, f"rank {ln.rank}{tag}", anchor="end",
                             cls="straggler" if ln.rank in stragglers else ""))
        _runs(ch, ln, left, y, row_h, span_ns / 1e6 / PLOT_W)
        t = ln.totals_ms
        other = f", other {t['other']:.1f}" if t["other"] >= 0.05 else ""
        ch.texts.append(Text(left + PLOT_W + 8, y + row_h * 0.72, f"host step {(ln.w1 - ln.w0) / 1e6:.1f} ms: "
                             f"compute {t['compute']:.1f}, comm {t['comm']:.1f}{other}, idle {t['idle']:.1f}", size=10,
                             cls="value"))
        ch.lines.append((left + ln.w0 * px, y - 2, left + ln.w0 * px, y + row_h + 2))
        ch.lines.append((left + ln.w1 * px, y - 2, left + ln.w1 * px, y + row_h + 2))
    path = path_of(step) if path_of is not None else None
    if path is not None:
        _draw_path(prof, ch, path, lanes, offsets, left, top, row_h + gap, row_h, px)
    axis_y = top + len(lanes) * (row_h + gap)
    ch.lines.append((left, axis_y, left + PLOT_W, axis_y))
    span_ms = span_ns / 1e6
    tick = nice_step(span_ms)
    for k in range(int(span_ms / tick + 1e-9) + 1):
        x = left + PLOT_W * k * tick / span_ms
        ch.lines.append((x, axis_y, x, axis_y + 4))
        ch.texts.append(Text(x, axis_y + 16, f"{k * tick:g} ms", anchor="middle", size=10))
    return ch


def _runs(ch: Chart, ln: Lane, left: float, y: float, h: float, ms_per_px: float) -> None:
    """Run-length encode the lane's pixel classes into rects (one per run of the same class)."""
    b = ln.bins
    cut = np.flatnonzero(np.r_[True, b[1:] != b[:-1], True])
    for a, z in itertools.pairwise(cut):
        k = int(b[a])
        if k < 0:
            continue
        key, label, colour = TIMELINE_CLASSES[k]
        ch.rects.append(Rect(left + a, y, float(z - a), h, colour, f"rank {ln.rank}: {label}, "
                             f"{a * ms_per_px:.1f}-{z * ms_per_px:.1f} ms", key=f"{ln.rank}:{key}"))


PATH_COLOUR = "#c0392b"


def _draw_path(prof: Profile, ch: Chart, path, lanes: list[Lane], offsets: dict[int, int], left: float, top: float,
               pitch: float, row_h: float, px: float) -> None:
    """The critical path (replay.critical) over the lanes: each link a bar along the bottom of its rank's lane,
    at its time on the shared axis, and a vertical line where the path passes from one rank to another. Link
    times are on the replay's clock: ns since the earliest step start of the step's ranks (their own clocks,
    which the null replay reproduces), moved by each rank's offset here."""
    row = {ln.rank: i for i, ln in enumerate(lanes)}
    origin = prof.rows("SELECT min(start_ns) FROM steps WHERE kept AND step = ?", [path.step])[0][0]
    if origin is None:
        return
    t0 = min(ln_start for ln_start in _axis_starts(prof, path.step, offsets))
    prev: tuple[float, int] | None = None
    drawn = 0
    for lk in path.links:
        if lk.rank not in row:
            prev = None
            continue
        x0 = left + (origin + lk.start_ms * 1e6 + offsets.get(lk.rank, 0) - t0) * px
        w = max(lk.ms * 1e6 * px, 1.0)
        y = top + row[lk.rank] * pitch + row_h - 4
        ch.rects.append(Rect(x0, y, w, 4, PATH_COLOUR, f"critical path: {lk.kind} on rank {lk.rank}, "
                             f"{lk.ms:.2f} ms ({lk.share_pct:.1f}% of the step)", key=f"cp:{lk.rank}:{lk.kind}"))
        if prev is not None and prev[1] != lk.rank:
            y0 = top + row[prev[1]] * pitch + row_h - 2
            ch.lines.append((x0, min(y0, y + 2), x0, max(y0, y + 2)))
        prev = (x0 + w, lk.rank)
        drawn += 1
    if drawn:
        ch.legend.append(("critical path (replayed)", PATH_COLOUR))
        ch.note += f"; critical path: {path.summary}"
        ch.data["critical-links"] = str(drawn)


def _axis_starts(prof: Profile, step: int, offsets: dict[int, int]) -> list[int]:
    """The shifted step starts of the drawn ranks (the axis begins at the earliest)."""
    ranks = list(offsets)
    return [int(s) + offsets.get(int(r), 0) for r, s in prof.rows(
        "SELECT rank, start_ns FROM steps WHERE step = ? AND rank IN (SELECT unnest(?::BIGINT[]))", [step, ranks])]
