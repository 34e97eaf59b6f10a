"""trace_view.json -> host ops, steps, launch flows, frequency and overlap tables (the trace's phases)."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ...errors import ProfileError
from ..ascend_events import HostOps
from .frames import Launches, Steps, jdump, na_steps, pair_codes
from .numbers import i64, int32
from .rank import RankDesc
from .rank_files import RankFiles
from .trace_events import DEVICE_KINDS, HARDWARE, HOST_KINDS, INT64_MAX, INT64_MIN, as_int, sentinel_id
from .trace_groups import HostEvents, TraceColumns
from .trace_parser import TraceParser

_LOST = "no host ops, steps, launch links, communication tasks or frequency samples"


def trace(desc: RankDesc, io: RankFiles) -> TraceColumns | None:
    """trace_view.json parsed (`TraceParser`), None with a warning when it is missing or damaged."""
    path = desc.path("trace_view.json")
    if not desc.has("trace_view.json"):
        io.warn(path, f"missing: {_LOST}")
        return None
    try:
        tr = TraceParser(path).parse()
    except ProfileError as e:
        # A damaged trace costs what it holds: the rank keeps its CSVs, step table and communication
        # files (read() refuses the rank only when nothing usable is left).
        io.warn(path, f"{e.problem.split(';')[0]}: skipped; {_LOST}")
        return None
    if tr.n_events == 0:
        io.warn(path, "no events")
    else:
        io.t.has("trace")
    if tr.n_unclassified:
        io.warn(path, f"{tr.n_unclassified} events on processes without a process_name were ignored")
    if tr.n_unsupported_phase:
        io.warn(path, f"{tr.n_unsupported_phase} events of unsupported phases (B/E/...) were ignored")
    if tr.n_bad_ts:
        io.warn(path, f"{tr.n_bad_ts} events without a readable ts were ignored")
    return tr


def labelled_device(tr: TraceColumns | None) -> int | None:
    """The device index in the hardware lane's label ("NPU 3"): where it is written without info.json."""
    if tr is None:
        return None
    for pid, kind in tr.kinds.items():
        m = re.search(r"NPU\s*(\d+)", tr.process_labels.get(pid, "")) if kind == HARDWARE else None
        if m:
            return int(m.group(1))
    return None


def trace_steps(desc: RankDesc, io: RankFiles, tr: TraceColumns | None) -> Steps:
    """The ProfilerStep#N windows, sorted by start (the first of a repeated step kept)."""
    if tr is None:
        return Steps()
    path = desc.path("trace_view.json")
    if not tr.steps:
        if tr.n_events:
            io.warn(path, "no ProfilerStep#N events (no profiler schedule): per-step tables (steps, breakdown) "
                          "are empty")
        return Steps()
    seen: dict[int, tuple[int, int]] = {}
    for n, start, dur in tr.steps:
        if n in seen:
            io.warn(path, f"ProfilerStep#{n} appears twice; the first is kept")
            continue
        seen[n] = (start, start + dur)
    items = sorted(seen.items(), key=lambda kv: kv[1][0])
    return Steps(np.array([k for k, _ in items], dtype=np.int64),
                 np.array([v[0] for _, v in items], dtype=np.int64),
                 np.array([v[1] for _, v in items], dtype=np.int64))


def launch_flows(io: RankFiles, tr: TraceColumns) -> Launches:
    """Host -> device flow pairs (async_npu, HostToDevice, ...), one per flow (cat, id) in the order of
    their first start event (the first start and the first end of a flow are paired).

    A flow is a launch link when its start is on a host process and its end on a device one; host-only
    flows (async_task_queue enqueue -> dequeue, fwdbwd) are left out. A few thousand flows per rank: one
    pass with dicts (a DataFrame, two drop_duplicates and a merge cost ~5x more).
    """
    fl = tr.flows
    if not len(fl.ts):
        return Launches()
    kinds = tr.kinds
    starts: dict[tuple[Any, Any], int] = {}   # (cat, id) -> row of its first start on a host process
    ends: dict[tuple[Any, Any], int] = {}     # (cat, id) -> row of its first end on a device process
    for j, (key, ph, pid) in enumerate(zip(zip(fl.cat, fl.id, strict=True), fl.ph, fl.pid, strict=True)):
        if ph == "s":
            if key not in starts and kinds.get(pid) in HOST_KINDS:
                starts[key] = j
        elif ph == "f" and key not in ends and kinds.get(pid) in DEVICE_KINDS:
            ends[key] = j
    # A sentinel id (UINT32_MAX, -1, UINT64_MAX) names no flow: pairing on it would join unrelated events.
    matched = [(key, s, ends[key]) for key, s in starts.items() if key in ends and not sentinel_id(key[1])]
    if not matched:
        return Launches()
    # Flow ids are opaque (HCCL's exceed int64: "55426082093320372223", as text or a number). An int64 id
    # is kept: it is the CANN connection id the DB export joins on, shared by a task's async_npu and
    # HostToDevice flows. Any other (cat, id) is interned after the largest, by first appearance.
    ids = [i if i is not None and INT64_MIN <= i <= INT64_MAX else None
           for i in (as_int(key[1]) for key, _, _ in matched)]
    if None in ids:
        base = max((i for i in ids if i is not None), default=-1) + 1
        first: dict[tuple[Any, Any], int] = {}
        ids = [i if i is not None else base + first.setdefault(key, len(first))
               for i, (key, _, _) in zip(ids, matched, strict=True)]
    s_rows = [s for _, s, _ in matched]
    f_rows = [f for _, _, f in matched]
    ts = fl.ts.tolist()
    io.t.has("correlation")
    return Launches(corr=ids, s_tid=[fl.tid[j] for j in s_rows], s_ts=[ts[j] for j in s_rows],
                    f_pid=[fl.pid[j] for j in f_rows], f_tid=[fl.tid[j] for j in f_rows],
                    f_ts=[ts[j] for j in f_rows])


def host_frame(io: RankFiles, tr: TraceColumns, steps: Steps, pairs: Launches, gc_detect: bool) -> HostOps:
    """Host ops with step, nesting depth and correlation id, as the host_ops columns (lists, int64 and
    masked int64 arrays; a DataFrame's text inference cost more than the rest of the columns).

    `gc_detect`: the profile recorded GC (profiler_info), so that no GC event means none happened.
    """
    h = tr.host
    start = np.array(h.start, dtype=np.int64)
    dur = np.array(h.dur, dtype=np.int64)
    track, tracks = pair_codes(h.pid, h.tid)   # track = (pid, tid)
    depth, corr = _depth_and_links(h, start, dur, track, tracks, pairs)
    if not len(pairs):
        # Exports without launch flows: CANN events carry the launch id themselves (args.connection_id).
        # With flows, the flows alone decide: connection ids of other APIs (HCCL launches) may reuse
        # numbers of the flow id space.
        corr = list(h.conn)
    tid_ints = [as_int(tid) for _, tid in tracks]
    host = HostOps(
        name=list(h.name), category=list(h.cat),
        # (converted once per track: the column's values, so a tid beyond int64 raises the same error)
        tid=i64(tid_ints)[track],
        start_ns=start, dur_ns=dur, correlation_id=i64(corr), depth=int32(depth),
        input_dims=list(h.dims), input_types=list(h.types), call_stack=list(h.stack),
        step=na_steps(steps.of(start)),
    )
    _host_capabilities(io, h, tr.with_stack, gc_detect)
    return host


def _depth_and_links(h: HostEvents, start: np.ndarray, dur: np.ndarray, track: np.ndarray,
                     tracks: list[tuple[Any, Any]], pairs: Launches) -> tuple[list[int], list[int | None]]:
    """(nesting depth, launch correlation id) of each host op.

    One sweep per (pid, tid) track, ops sorted by (start, -dur) with a stack of open ops: the depth is the
    stack height; a flow start at time t binds to the innermost op open at t on every host track of the same
    OS thread (the torch op on the Python track and the `Node@launch` on the CANN track). ProfilerStep
    annotations never take a correlation id.
    """
    n = len(h.name)
    end = start + dur
    points: dict[Any, list[tuple[int, int]]] = {}
    for tid, ts, c in zip(pairs.s_tid, pairs.s_ts, pairs.corr, strict=True):
        points.setdefault(tid, []).append((ts, c))
    for v in points.values():
        v.sort()
    depth = [0] * n
    corr: list[int | None] = [None] * n
    ann = [c == "user_annotation" for c in h.cat]
    start_l, end_l, track_l = start.tolist(), end.tolist(), track.tolist()
    stack: list[int] = []

    def bind(ts: int, c: int) -> None:
        while stack and end_l[stack[-1]] <= ts:
            stack.pop()
        if stack:
            i = stack[-1]
            if not ann[i] and corr[i] is None:
                corr[i] = c

    cur = None
    pts: list[tuple[int, int]] = []
    pi = 0
    for k in np.lexsort((-dur, start, track)).tolist():
        tk = track_l[k]
        if tk != cur:
            while pi < len(pts):
                bind(*pts[pi])
                pi += 1
            cur, stack, pi = tk, [], 0
            pts = points.get(tracks[tk][1], [])
        s = start_l[k]
        while pi < len(pts) and pts[pi][0] < s:
            bind(*pts[pi])
            pi += 1
        while stack and end_l[stack[-1]] <= s:
            stack.pop()
        depth[k] = len(stack)
        stack.append(k)
    while pi < len(pts):
        bind(*pts[pi])
        pi += 1
    return depth, corr


def _host_capabilities(io: RankFiles, h: HostEvents, with_stack: bool, gc_detect: bool) -> None:
    """The capabilities the host ops give, from their categories and the export's with_stack flag."""
    cats = set(h.cat)
    if len(h.name):
        io.t.has("host_ops")
    if cats & {"cpu_op", "python_function", "user_annotation", "dataloader", "other"}:
        io.t.has("framework_ops")
    if "cann" in cats:
        io.t.has("cann_api")
    if "dataloader" in cats:
        io.t.has("dataloader")
    if "gc" in cats or gc_detect:
        io.t.has("gc")
    if with_stack:
        io.t.has("with_stack", "call_stack")


def freq(io: RankFiles, tr: TraceColumns) -> None:
    """freq_samples: the AI Core Freq counter, by time."""
    f = tr.freq
    if not f.ts:
        return
    order = np.argsort(np.array(f.ts, dtype=np.int64), kind="stable")
    io.t.extend("freq_samples", {"ts_ns": i64(np.array(f.ts, dtype=np.int64)[order]),
                                 "freq_mhz": np.array(f.mhz, dtype=float)[order]})
    io.t.has("freq")


def overlap(io: RankFiles, tr: TraceColumns, steps: Steps) -> None:
    """Per-step sums of the profiler's own Overlap Analysis lanes (metadata `overlap_analysis`, ns).

    Kept for cross-checks only: the breakdown is recomputed from device ops, never copied from here.
    """
    o = tr.overlap
    if not o.name or steps.empty:
        return
    # a (step x lane) table of int64 sums (wrapping as pandas' groupby sum does), steps and lanes sorted
    step = steps.of(np.array(o.start, dtype=np.int64))
    mine = np.flatnonzero(step >= 0)
    lanes = [o.name[i] for i in mine.tolist()]
    step_ids, of_step = np.unique(step[mine], return_inverse=True)
    names = sorted(set(lanes))
    of_name = np.array(list(map({n: j for j, n in enumerate(names)}.__getitem__, lanes)), dtype=np.int64)
    sums = np.zeros((len(step_ids), len(names)), dtype=np.int64)
    np.add.at(sums, (of_step, of_name), np.array(o.dur, dtype=np.int64)[mine])
    rows = [{"step": sid, **dict(zip(names, r, strict=True))}
            for sid, r in zip(step_ids.tolist(), sums.tolist(), strict=True)]
    io.t.add("metadata", key="overlap_analysis", value_json=jdump(rows))
