"""Per (rank, step) time breakdown from the device timeline, for every vendor.

For a step with device window W = [device_start_ns, device_end_ns) and the step's device ops clipped
to W (all categories):

    busy                 = |union(all device ops) ∩ W|
    compute              = |union(compute ops) ∩ W|
    communication        = |union(communication ops) ∩ W|
    overlapped           = |comm ∩ compute ∩ W| = compute + communication − |union(comm, compute) ∩ W|
    comm_not_overlapped  = communication − overlapped
    free                 = |W| − busy                       (device idle inside the window; on Ascend
                           |W| − |union(compute, comm) ∩ W|, as torch_npu counts it)
    non_compute          = busy − compute                    (HTA's non-compute: comm/memory/sync alone)
    step                 = host ProfilerStep duration        (what the user calls step time); on Ascend
                           ranks with a step table, its Stage + Bubble (step_source says which)
    preparing            = device_start − host step start    (Ascend "Preparing": host-only lead-in)
    bubble               = Σ receive-op time in the step     (Ascend pipeline bubble: 0 without receives),
                           else null
    stage                = device window − bubble           (Ascend "Stage")

On Ascend ranks the device window is torch_npu's (its Overlap Analysis, step_trace_time.csv): from the
first start to the last end of the compute and communication ops that start in the reader's window, so
a memory copy or other task before the first kernel is neither free time nor stage, and "Preparing" runs
up to the first kernel or collective. On Kineto ranks it is HTA's: every device op counts.

These are the definitions of torch_npu's step_trace_time.csv (Overlap Analysis) and of HTA's temporal
breakdown (idle = span − union, compute = union of computation kernels); the readers choose W per
format so that both agree (see each reader's docstring). Ops are not filtered by their `step` column:
windows decide, so work spilling past a step boundary is charged to the window it runs in.

`hta_compat=True` reproduces HTA 0.5.0 exactly on Kineto ranks: only the device ops HTA keeps (those
whose launch precedes the last ProfilerStep; launches from before profiling started are dropped, and
their device time counts as idle), and op starts rounded up / ends down to whole µs, which HTA does to
float timestamps. Without it, all device work in the window counts.
"""

from __future__ import annotations

import itertools

import numpy as np

from ..ingest.formats import KINETO, is_ascend
from ..models import BreakdownRow
from ..store import Profile
from ..store.summaries import STEP_TABLE
from ..timeline.breakdown import step_breakdown_ns
from ..units import NS_PER_MS

# Event rows (device ops here, and the checks' event queries through `checks._arrays.rank_batches`) are read
# for a batch of ranks per query, up to this many rows: a query per rank costs more than its rows on many
# small ranks, and one query for all ranks would hold every event of a large cluster. The batch bounds what
# the driver holds of the events; smaller batches cost more queries (figures in evals/bench/).
BATCH_OPS = 250_000


_FIELDS = ("step_ms", "host_step_ms", "device_ms", "compute_ms", "communication_ms", "comm_not_overlapped_ms", "overlapped_ms",
           "free_ms", "bubble_ms", "preparing_ms", "stage_ms", "idle_ms", "non_compute_ms")


def _ms(ns: float | int | None) -> float | None:
    return None if ns is None else round(float(ns) / NS_PER_MS, 6)


def compute_breakdown(profile: Profile, *, hta_compat: bool = False, ranks: list[int] | None = None,
                      steps: list[int] | None = None, include_dropped: bool = False,
                      from_events: bool = False) -> list[BreakdownRow]:
    """Breakdown rows for every (rank, step), ordered by rank then step.

    A rank's rows come from its stored summary (`step_breakdown`, computed where the rank was parsed by
    the same `step_breakdown_ns`), so the driver reads ranks x steps rows; from its device ops only where
    there is none (a store built without summaries), with hta_compat (HTA's op set and µs rounding) or
    with `from_events` (every rank: what the summaries are checked against).
    Columns come straight from DuckDB as numpy arrays (no pandas: opening a profile and printing its
    breakdown stays within ~1.1x the largest input file of memory, see evals/bench/README.md).
    """
    cond = ["kept"] if not include_dropped else []
    params: list[object] = []
    for col, vals in (("rank", ranks), ("step", steps)):
        if vals is not None:
            cond.append(f"{col} IN (SELECT unnest(?::BIGINT[]))")
            params.append([int(v) for v in vals])
    where = f"WHERE {' AND '.join(cond)}" if cond else ""
    formats = dict(profile.rows("SELECT rank, format FROM ranks"))
    summarised: set[int] = set()
    rows: list[BreakdownRow] = []
    if not (hta_compat or from_events):
        summarised = {int(r[0]) for r in profile.rows(f"SELECT DISTINCT rank FROM {STEP_TABLE}")}
        rows += _summary_rows(profile, where, params, formats)
    st = profile.arrays("SELECT rank, step, start_ns, end_ns, device_start_ns IS NOT NULL AS d0_known, "
                        "device_end_ns IS NOT NULL AS d1_known, coalesce(device_start_ns, 0) AS d0, "
                        f"coalesce(device_end_ns, 0) AS d1 FROM steps {where} ORDER BY rank, step", params)
    st_rank = np.asarray(st["rank"], dtype=np.int64)
    step_ranks = np.unique(st_rank).tolist()
    event_ranks = [r for r in step_ranks if r not in summarised]
    if event_ranks:
        rows += _event_rows(profile, st, st_rank, event_ranks, formats, hta_compat)
    _steps_from_step_table(profile, rows)
    rows += _step_table_rows(profile, set(step_ranks), ranks, steps)
    rows.sort(key=lambda r: (r.rank, r.step if r.step is not None else -1))
    return rows


_SUMMARY_COLS = ("step", "start_ns", "end_ns", "window_start_ns", "window_end_ns", "window_start_known",
                 "has_device", "busy_ns", "compute_ns", "communication_ns", "compute_or_comm_ns")


def _summary_rows(profile: Profile, where: str, params: list[object], formats: dict[int, str]
                  ) -> list[BreakdownRow]:
    """The rows of the ranks that have a stored summary (the steps' filter `where` applies to it as is)."""
    s = profile.arrays(f"SELECT rank, {', '.join(_SUMMARY_COLS)}, coalesce(bubble_ns, 0) AS bubble_ns, "
                       f"bubble_ns IS NOT NULL AS bubble_known FROM {STEP_TABLE} {where} ORDER BY rank, step",
                       params)
    rank = np.asarray(s["rank"], dtype=np.int64)
    if not rank.size:
        return []
    cuts = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1], True]).tolist()
    rows: list[BreakdownRow] = []
    for i, j in itertools.pairwise(cuts):
        r = int(rank[i])
        rows += rank_rows(r, {k: np.asarray(v)[i:j] for k, v in s.items()}, ascend=is_ascend(formats.get(r)))
    return rows


def _event_rows(profile: Profile, st: dict[str, np.ndarray], st_rank: np.ndarray, ranks: list[int],
                formats: dict[int, str], hta_compat: bool) -> list[BreakdownRow]:
    """The rows of `ranks` computed from their device ops (`st`: the steps query, every rank's rows)."""
    kineto_ranks = {r for r in ranks if formats.get(r) == KINETO}
    # Receive ops (the pipeline bubble): communication.json's, else the trace's hcom_receive* tasks
    recv = profile.arrays(
        "SELECT rank, start_ns, elapse_ns FROM comm_ops WHERE op_type IN ('receive', 'recv') "
        "AND rank IN (SELECT unnest(?::BIGINT[])) UNION ALL "
        "SELECT rank, start_ns, dur_ns FROM comm_kernels WHERE lower(name) LIKE 'hcom_receive%' AND rank NOT IN (SELECT DISTINCT rank FROM comm_ops) "
        "AND rank IN (SELECT unnest(?::BIGINT[]))", [ranks, ranks])
    recv_rank = np.asarray(recv["rank"], dtype=np.int64)
    batched = _OpsByRank(profile, [r for r in ranks if not (hta_compat and r in kineto_ranks)])
    rows: list[BreakdownRow] = []
    for rank in ranks:
        sel = st_rank == rank
        if hta_compat and rank in kineto_ranks:
            # HTA's kept-op set (hta_compat on Kineto): ops whose launch precedes the last step
            ops = profile.arrays("SELECT start_ns, dur_ns, category = 'compute' AS comp, category = "
                                 "'communication' AS comm FROM device_ops WHERE rank = ? AND hta_kept", [rank])
        else:
            ops = batched.of(rank)
        rows += _rank_rows(rank, ops, {k: np.asarray(v)[sel] for k, v in st.items()},
                           recv, recv_rank == rank, ascend=is_ascend(formats.get(rank)), hta_compat=hta_compat)
    return rows


def _rank_rows(rank: int, ops: dict[str, np.ndarray], st: dict[str, np.ndarray], recv: dict[str, np.ndarray],
               r_sel: np.ndarray, *, ascend: bool, hta_compat: bool) -> list[BreakdownRow]:
    """The breakdown rows of one rank's steps `st` (the steps query's columns, this rank's rows) from its
    device ops; `recv` rows `r_sel` are its receive ops (the pipeline bubble)."""
    starts = np.asarray(ops["start_ns"], dtype=np.int64)
    ends = starts + np.asarray(ops["dur_ns"], dtype=np.int64)
    if hta_compat:
        starts = -((-starts) // 1000) * 1000
        ends = (ends // 1000) * 1000
    s = step_breakdown_ns(starts, ends, np.asarray(ops["comp"], dtype=bool), np.asarray(ops["comm"], dtype=bool),
                          st, np.asarray(recv["start_ns"], dtype=np.int64)[r_sel],
                          np.asarray(recv["elapse_ns"], dtype=np.int64)[r_sel], ascend=ascend)
    return rank_rows(rank, s, ascend=ascend)


def rank_rows(rank: int, s: dict[str, np.ndarray], *, ascend: bool) -> list[BreakdownRow]:
    """Breakdown rows (ms) of one rank from its per-step ns quantities: `step_breakdown_ns`'s columns, or
    the same columns read back from the stored `step_breakdown` (bubble_ns with NULL as 0 plus bubble_known)."""
    rows: list[BreakdownRow] = []
    h0 = np.asarray(s["start_ns"], dtype=np.int64)
    h1 = np.asarray(s["end_ns"], dtype=np.int64)
    w0 = np.asarray(s["window_start_ns"], dtype=np.int64)
    w1 = np.asarray(s["window_end_ns"], dtype=np.int64)
    d0_known = np.asarray(s["window_start_known"], dtype=bool)
    has_device = np.asarray(s["has_device"], dtype=bool)
    busy = np.asarray(s["busy_ns"], dtype=np.int64)
    comp = np.asarray(s["compute_ns"], dtype=np.int64)
    comm = np.asarray(s["communication_ns"], dtype=np.int64)
    union_cc = np.asarray(s["compute_or_comm_ns"], dtype=np.int64)
    overl = comp + comm - union_cc
    bubble_ns = np.asarray(s["bubble_ns"], dtype=np.int64)
    bubble_known = np.asarray(s["bubble_known"], dtype=bool)
    for i, step in enumerate(np.asarray(s["step"]).tolist()):
        dev = bool(has_device[i])
        bubble = int(bubble_ns[i]) if bubble_known[i] else None
        device = w1[i] - w0[i]
        rows.append(BreakdownRow(
            rank=int(rank), step=int(step), step_ms=_ms(h1[i] - h0[i]), host_step_ms=_ms(h1[i] - h0[i]),
            step_source="host",
            device_ms=_ms(w1[i] - w0[i]) if dev else None,
            compute_ms=_ms(comp[i]) if dev else None,
            communication_ms=_ms(comm[i]) if dev else None,
            comm_not_overlapped_ms=_ms(comm[i] - overl[i]) if dev else None,
            overlapped_ms=_ms(overl[i]) if dev else None,
            # Ascend: idle = not computing or communicating (a lone memory copy is idle too)
            free_ms=_ms(device - (union_cc[i] if ascend else busy[i])) if dev else None,
            bubble_ms=_ms(bubble),
            preparing_ms=_ms(w0[i] - h0[i]) if dev and d0_known[i] else None,
            stage_ms=_ms(device - (bubble or 0)) if dev else None,
            idle_ms=(_ms(h1[i] - h0[i] - union_cc[i]) if ascend else _ms(device - busy[i])) if dev else None,
            non_compute_ms=_ms(busy[i] - comp[i]) if dev else None,
        ))
    return rows


def _steps_from_step_table(profile: Profile, rows: list[BreakdownRow]) -> None:
    """step_ms = the profiler's Stage + Bubble where torch_npu's step table has the (rank, step): its step
    runs from the first to the last kernel or collective that starts in the step, the host span (kept in
    host_step_ms) adds the launch lead-in (Preparing) and the host tail. MindSpore's table keeps the host
    step: its checks weigh host-side waits against the whole iteration."""
    table = {(int(r[0]), int(r[1])): r[2] for r in profile.rows(
        "SELECT v.rank, v.step, v.stage_ns + coalesce(v.bubble_ns, 0) FROM vendor_step_trace v "
        "JOIN ranks r ON r.rank = v.rank WHERE v.step IS NOT NULL AND v.stage_ns IS NOT NULL "
        "AND coalesce(r.framework, 'pytorch') = 'pytorch'")}
    for row in rows:
        if (ns := table.get((row.rank, row.step))) is not None:
            row.step_ms, row.step_source = _ms(ns), "step_table"


def _step_table_rows(profile: Profile, timed: set[int], ranks: list[int] | None,
                     steps: list[int] | None) -> list[BreakdownRow]:
    """Rows of ranks with no timed steps (no trace) from the profiler's own step table: they keep their
    breakdown and take part in the cross-rank checks. step_ms is Stage + Bubble, as on traced ranks (the
    host step is unknown); what the table does not hold stays None."""
    out = []
    cols = "rank, step, computing_ns, communication_ns, comm_not_overlapped_ns, overlapped_ns, free_ns, " \
           "stage_ns, bubble_ns, preparing_ns"
    for r in profile.rows(f"SELECT {cols} FROM vendor_step_trace WHERE step IS NOT NULL ORDER BY rank, step"):
        rank, step, comp, comm, cno, ovl, free, stage, bubble, prep = r
        if rank in timed or (ranks is not None and rank not in ranks) or (steps is not None and step not in steps):
            continue
        step_ns = None if stage is None else stage + (bubble or 0)
        out.append(BreakdownRow(rank=int(rank), step=int(step), step_ms=_ms(step_ns),
                                step_source="step_table" if step_ns is not None else None,
                                device_ms=_ms(None if stage is None else stage + (bubble or 0)),
                                compute_ms=_ms(comp), communication_ms=_ms(comm), comm_not_overlapped_ms=_ms(cno),
                                overlapped_ms=_ms(ovl), free_ms=_ms(free), bubble_ms=_ms(bubble),
                                preparing_ms=_ms(prep), stage_ms=_ms(stage),
                                idle_ms=_ms(None if free is None else free + (prep or 0))))
    return out


# Fields of the profiler's own step table (vendor_step_trace, ns) and the breakdown fields they check.
VENDOR_FIELDS = (("computing_ns", "compute_ms"), ("comm_not_overlapped_ns", "comm_not_overlapped_ms"),
                 ("free_ns", "free_ms"), ("stage_ns", "stage_ms"), ("bubble_ns", "bubble_ms"),
                 ("preparing_ns", "preparing_ms"))
VENDOR_TOLERANCE = 0.005      # 0.5 %: the step table and the timeline must agree this closely
VENDOR_FLOOR_MS = 0.001       # below 1 µs of difference nothing is reported


def vendor_mismatches(profile: Profile, rows: list[BreakdownRow]) -> list[str]:
    """Warnings where the recomputed breakdown and the profiler's own step table (step_trace_time.csv,
    analysis.db StepTraceTime) differ by more than 0.5 %: one line per field, with how many (rank, step) rows
    differ, by how much at most, and the largest one's rank, step and both values."""
    cols = ", ".join(c for c, _ in VENDOR_FIELDS)
    table = {(int(r[0]), r[1]): r[2:] for r in profile.rows(f"SELECT rank, step, {cols} FROM vendor_step_trace")}
    by_field: dict[str, list[tuple[float, BreakdownRow, float, float, str]]] = {}
    for row in rows:
        vendor = table.get((row.rank, row.step))
        if vendor is None:
            continue
        for (col, field), v_ns in zip(VENDOR_FIELDS, vendor, strict=True):
            ours = getattr(row, field)
            if v_ns is None or ours is None:
                continue
            theirs = v_ns / NS_PER_MS
            diff = abs(ours - theirs)
            if diff > max(VENDOR_TOLERANCE * abs(theirs), VENDOR_FLOOR_MS):
                by_field.setdefault(field, []).append((diff, row, ours, theirs, col.removesuffix("_ns")))
    out = []
    for field, got in by_field.items():
        diff, row, ours, theirs, col = max(got, key=lambda g: g[0])
        where = f"rank {row.rank} step {row.step}: {ours:.3f} ms from the timeline, {theirs:.3f} ms in the table"
        out.append(f"{field} differs from the profiler's step table ({col}) in {len(got)} (rank, step) row"
                   f"{'s' if len(got) > 1 else ''}, by up to {diff:.3f} ms ({where}); the breakdown shows the "
                   "timeline's")
    return out


class _OpsByRank:
    """Each rank's device ops (start_ns, dur_ns, comp, comm), read for consecutive ranks in batches of at
    most BATCH_OPS rows (a rank with more is a batch of its own) and split per rank; `of()` is called with
    the ranks in the order given."""

    def __init__(self, profile: Profile, ranks: list[int]) -> None:
        self.profile = profile
        counts = dict(profile.rows("SELECT rank, count(*) FROM device_ops GROUP BY rank")) if ranks else {}
        self.batch_of: dict[int, int] = {}
        self.batches: list[list[int]] = []
        rows = 0
        for r in ranks:
            n = int(counts.get(r, 0))
            if not self.batches or rows + n > BATCH_OPS:
                self.batches.append([])
                rows = 0
            self.batches[-1].append(r)
            self.batch_of[r] = len(self.batches) - 1
            rows += n
        self.loaded = -1
        self.split: dict[int, dict[str, np.ndarray]] = {}

    def of(self, rank: int) -> dict[str, np.ndarray]:
        b = self.batch_of[rank]
        if b != self.loaded:
            self.split = self._load(self.batches[b])
            self.loaded = b
        return self.split[rank]

    def _load(self, ranks: list[int]) -> dict[str, dict[str, np.ndarray]]:
        ops = self.profile.arrays("SELECT rank, start_ns, dur_ns, category = 'compute' AS comp, category = "
                                  "'communication' AS comm FROM device_ops WHERE rank IN (SELECT unnest(?::BIGINT[]))",
                                  [ranks])
        order = np.argsort(np.asarray(ops["rank"], dtype=np.int64), kind="stable")
        rank = np.asarray(ops["rank"], dtype=np.int64)[order]
        cols = {c: np.asarray(ops[c])[order] for c in ("start_ns", "dur_ns", "comp", "comm")}
        lo = np.searchsorted(rank, ranks, side="left").tolist()
        hi = np.searchsorted(rank, ranks, side="right").tolist()
        return {r: {c: a[i:j] for c, a in cols.items()} for r, i, j in zip(ranks, lo, hi, strict=True)}


def totals(rows: list[BreakdownRow]) -> list[BreakdownRow]:
    """Per-rank sums over the given rows (None stays None only when every value is None)."""
    out: list[BreakdownRow] = []
    by_rank: dict[int, list[BreakdownRow]] = {}
    for r in rows:  # one pass (a scan of every row per rank took 127 ms on 1,024 ranks)
        by_rank.setdefault(r.rank, []).append(r)
    for rank in sorted(by_rank):
        rr = by_rank[rank]
        vals = {}
        for f in _FIELDS:
            xs = [getattr(r, f) for r in rr if getattr(r, f) is not None]
            vals[f] = round(sum(xs), 6) if xs else None
        out.append(BreakdownRow(rank=rank, step=None, steps=len(rr), **vals))
    return out


# What a rank's mean per step is compared on when only some ranks of a large cluster are shown.
_SELECTION_FIELDS = ("step_ms", "compute_ms", "comm_not_overlapped_ms", "free_ms")


def standing_out(totals: list[BreakdownRow], keep: int) -> list[BreakdownRow]:
    """At most `keep` of the per-rank totals (`totals()` rows), in rank order: those that stand out most
    (the ranks a chart or a short answer shows of a large cluster).

    A rank's distance from the others is its largest |mean per step - median| / scale over step, compute,
    exposed communication and free time, scale = max(1.4826 MAD, 1 % of the median, 1 µs). In synchronous
    training every rank has the same step time and a rank that computes slower shows only in its compute
    and free time; sorting by step time alone picks an arbitrary set of 1,024 equal ranks. Ties: the slower
    step first, then the lower rank."""
    if len(totals) <= keep:
        return totals
    import statistics

    means = {f: [per_step(getattr(t, f), t.steps) for t in totals] for f in _SELECTION_FIELDS}
    score = [0.0] * len(totals)
    for vals in means.values():
        known = [v for v in vals if v is not None]
        if not known:
            continue
        med = statistics.median(known)
        scale = max(1.4826 * statistics.median(abs(v - med) for v in known), 0.01 * abs(med), 1e-3)
        for i, v in enumerate(vals):
            if v is not None:
                score[i] = max(score[i], abs(v - med) / scale)
    step = means["step_ms"]
    order = sorted(range(len(totals)), key=lambda i: (-score[i], -(step[i] or 0.0), totals[i].rank))
    keep_ids = {totals[i].rank for i in order[:keep]}
    return [t for t in totals if t.rank in keep_ids]


def per_step(x: float | None, steps: int | None) -> float | None:
    """A per-rank total (a `totals()` field, ms) as a mean per step over the rank's `steps` (none: 1)."""
    return None if x is None else x / (steps or 1)


def mean_step_ms(rows: list[BreakdownRow]) -> float | None:
    xs = [r.step_ms for r in rows if r.step_ms is not None]
    return float(np.mean(xs)) if xs else None
