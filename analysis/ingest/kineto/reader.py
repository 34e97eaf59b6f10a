"""One Kineto file -> RankTables: read the events, then build the tables from the folded columns."""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np

from ...errors import ProfileError
from ..base import RankSource, RankTables
from .columns import (
    RankInfo,
    Steps,
    Trace,
    Windows,
    add_ranks_row,
    device_windows,
    join_launches,
    last_step_whole,
    profiler_steps,
    trace_columns,
)
from .folder import NONE, Folder
from .names import DEVICE_TASKS
from .source import Doc, Source, iter_events
from .steps import host_collectives, ints, stepless_window
from .tables import add_device_ops, add_host_ops, add_metadata


def read_rank(src: RankSource) -> RankTables:
    """Parse one Kineto trace file into a RankTables buffer (see the module docstring)."""
    path = Path(src.path)
    rank = src.rank if src.rank is not None else 0
    tables = RankTables(rank)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived allocations, no cycles: the cyclic GC would only cost time
    try:
        doc, folder = _read_events(path)
    finally:
        if gc_was_enabled:
            gc.enable()
    _build(tables, path, doc, folder)
    return tables


def _read_events(path: Path) -> tuple[Doc, Folder]:
    """The msgspec path: typed decode of pieces of the event list, folded one piece at a time."""
    doc = Doc()
    folder = Folder()
    source = Source(path)
    error: ProfileError | None = None
    try:
        for evs in iter_events(source, doc):
            folder.fold(evs)
            del evs
    except ProfileError as e:
        error = e
    except RecursionError:   # nesting past the decoder's depth outside the event list (its keys, its head)
        error = ProfileError(path, "invalid JSON: nested too deeply")
    finally:
        source.close()
    # damage (a gzip or JSON cut short, a corrupt block, a syntax error): the whole events before it are
    # kept; a gzip error explains a JSON one that follows from it. Nothing read: the error stands (exit 2)
    error = source.damage or error
    if error is not None:
        if not (folder.host.n or folder.dev.n):
            raise error
        doc.damage = error.problem
    elif not (folder.host.n or folder.dev.n or folder.gpu_step_starts):
        raise ProfileError(path, "no events: its traceEvents holds no complete event with a time (nothing to "
                                 "analyse)")
    return doc, folder


def _build(t: RankTables, path: Path, doc: Doc, f: Folder) -> None:
    meta = doc.meta
    tr = trace_columns(f)
    st = profiler_steps(tr)
    join_launches(tr, st)
    win = device_windows(tr, st, f)
    info = add_ranks_row(t, path, meta, tr, f)
    last_dropped = st.n >= 2 and (bool(doc.damage) or not last_step_whole(tr, st))
    window_note = _add_steps(t, tr, st, win, info, last_dropped, damaged=bool(doc.damage))
    # HTA's op set: with the last step dropped, the stream ops launched before it; else every stream op
    add_device_ops(t, tr, f, info.has_mtia, win.hta_kept if last_dropped else tr.d_stream >= 0)
    assert tr.h_step is not None
    host_collectives(t, tr.names, tr.h_nid, tr.h_cat, tr.h_step, tr.h_start, tr.h_dur, tr.h_tid, f.h_p2p)
    add_host_ops(t, tr, f)
    if info.with_stack:
        t.has("with_stack")
    if st.n:
        t.has("steps")
    add_metadata(t, meta, f)
    _warn(t, path, doc, f, tr, st, info, window_note)


def _add_steps(t: RankTables, tr: Trace, st: Steps, win: Windows, info: RankInfo, last_dropped: bool,
               damaged: bool = False) -> str:
    """The steps rows; without ProfilerStep one step 0 whose window leaves initialisation out (host rows and
    device ops before it get no step). Returns the note saying how that window was chosen ('' with steps)."""
    if st.n:
        kept_flags = [True] * st.n
        if last_dropped:
            kept_flags[-1] = False
        t.extend("steps", {
            "step": st.num.tolist(), "start_ns": st.start.tolist(), "end_ns": st.end.tolist(),
            "device_start_ns": ints(win.start), "device_end_ns": ints(win.end), "kept": kept_flags,
        })
        return ""
    assert tr.launch is not None and tr.h_step is not None and tr.d_step is not None
    all_ends = [int(a.max()) for a in (tr.h_start + tr.h_dur, tr.d_end) if a.size]
    win0, note = stepless_window(info.first_ns, tr.h_start, tr.h_dur, tr.h_cat, tr.h_nid, tr.h_tid,
                                  tr.names, tr.d_start, tr.launch)
    if win0 is None:
        return note
    # what starts before the window (initialisation) belongs to no step; a device op belongs to the step of
    # its launch, so the device window starts at the first op launched (or, unlaunched, started) in it
    has_launch = tr.has_launch
    issued = np.where(has_launch, tr.h_start[np.clip(tr.launch, 0, None)] if tr.nh else 0, tr.d_start)
    tr.h_step = np.where(tr.h_start < win0, NONE, np.where(tr.h_step == NONE, 0, tr.h_step))
    tr.d_step = np.where(issued < win0, NONE, np.where(tr.d_step == NONE, 0, tr.d_step))
    in_step = (tr.d_step == 0) & (tr.d_stream >= 0)
    d0 = int(tr.d_start[in_step].min()) if in_step.any() else win.span0
    if d0 is not None and win.span0 is not None:
        d0 = max(d0, win.span0)
    # a trace cut before its first ProfilerStep is not a stepless trace: its one window is no step of the job
    t.add("steps", step=0, start_ns=win0, end_ns=max(all_ends), kept=not damaged, device_start_ns=d0,
          device_end_ns=win.span1)
    return note


def _warn(t: RankTables, path: Path, doc: Doc, f: Folder, tr: Trace, st: Steps, info: RankInfo,
          window_note: str) -> None:
    """What the trace lacks, and what was left out or guessed."""
    nd = tr.nd
    if nd == 0:
        t.warn("no GPU events: device breakdown unavailable")
    if doc.damage:
        t.warn(f"{path.name} is damaged ({doc.damage}): the {f.host.n + f.dev.n} host and device events read "
               "before the damage are kept, the rest of the file is lost")
    if not st.n and doc.damage:
        t.warn("no ProfilerStep#N annotation before the damage: its events belong to no analysed step")
    elif not st.n:
        t.warn("no ProfilerStep#N annotations: the trace is analysed as one step (step 0)" + window_note)
    if not info.props and nd:
        t.warn("no deviceProperties: device name and SM count unknown")
    if not info.dist:
        t.warn("no distributedInfo: world size and process groups unknown")
    elif not isinstance(info.world_size, int):
        t.warn("distributedInfo has no world_size: world size unknown")
    if info.has_mtia:
        t.warn("MTIA trace: device ops are command-processor events (mtia_ccp_events), classified by name "
               "(dma* = memory, event_wait/record = sync, the rest = compute); no per-kernel names")
    if nd:
        no_corr = int(((tr.d_corr < 0) & (tr.d_task != DEVICE_TASKS.index("cuda_sync"))).sum())
        if no_corr:
            t.warn(f"{no_corr} device ops have no launch correlation: their step is assigned by time")
        unmatched = int(((tr.d_corr >= 0) & ~tr.has_launch).sum())
        if unmatched:
            t.warn(f"{unmatched} device ops whose launch is not in the trace: their step is assigned by time")
        if info.prop is not None and not isinstance(info.prop.get("numSms"), int):
            t.warn("deviceProperties has no numSms: device core count unknown")
    if info.origin is None and info.first_ns is not None:
        t.warn("timestamps are not epoch-based and baseTimeNanoseconds is absent: absolute time unknown")
    if f.no_dur:
        t.warn(f"{f.no_dur} complete events without a usable ts or dur (absent, or beyond int64 ns) were skipped")
    if doc.not_utf8:
        t.warn(f"{path.name}: {doc.not_utf8} byte sequence(s) that are not UTF-8 read as U+FFFD (in names or "
               "args)")
    if f.not_events:
        t.warn(f"{path.name}: {f.not_events} entries of traceEvents are not events (a number, string, list or "
               "null): skipped")
    if f.skipped:
        cats = ", ".join(f"{c} ({n})" for c, n in f.skipped.most_common(5))
        t.warn(f"{sum(f.skipped.values())} complete events of categories this reader does not know were skipped: "
               f"{cats}")
