"""One rank directory -> RankTables: `read_rank` runs the phases in order, each one a function of the rank's
description (`RankDesc`), the files context (`RankFiles`: the tables being filled) and the results of the
phases before it."""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from ...errors import ProfileError
from ..ascend_events import HostOps, emit
from ..base import RankSource, RankTables
from .common import ANALYSE_HINT, OUTPUT_DIR
from .communication import communication, communication_matrix, step_trace_time
from .frames import Launches, Steps
from .kernel_details import device_ops, emit_device_ops, emit_steps, kernel_details
from .metadata import (
    api_statistic,
    device_info,
    memory_record,
    op_statistic,
    operator_details,
    operator_memory,
    profiler_info,
    profiler_metadata,
    ranks_row,
)
from .rank import RankDesc, describe
from .rank_files import RankFiles
from .trace_groups import TraceColumns, release
from .trace_tasks import Groups, TraceDeviceTasks, comm_tasks, trace_device_tasks
from .trace_view import freq, host_frame, labelled_device, launch_flows, overlap, trace, trace_steps

# The tables this reader only extends (never `add()`s), which it can hand on as it finishes them
STREAMED = ("comm_ops", "comm_bandwidth", "comm_packets", "links", "device_ops", "host_ops", "comm_tasks",
            "memory_records", "freq_samples")


def read_rank(src: RankSource, sink: Callable[[int, str, dict[str, Any]], None] | None = None,
              settle: Callable[[], None] | None = None) -> RankTables:
    """Parse one `*_ascend_pt` / `*_ascend_ms` text-export directory into normalized tables.

    `sink(rank, table, columns)`: the blocks of the STREAMED tables, typed, as each is finished (the parse
    workers send them on at once, so a rank's tables are not all in the worker at the end); the returned
    tables then hold the others. `settle()`: called after the phases that free the most (the trace's
    groups once joined, its host columns once framed); see `RankTables.stream`."""
    desc = describe(src)
    io = RankFiles(desc)
    if sink is not None:
        io.t.stream(sink, STREAMED, settle)
    # The reader creates millions of small containers (row tuples, lists) that live until the end; the
    # cyclic GC would rescan them over and over (1.5 s of 4 s on a 1M-event trace) without freeing any.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return read(desc, io)
    finally:
        io.close()
        if was_enabled:
            gc.enable()


def read(desc: RankDesc, io: RankFiles) -> RankTables:
    """Every phase of one rank, in order; returns `io.t`."""
    if not desc.root.is_dir():
        raise ProfileError(desc.root, "not a directory")
    if not any(desc.has(n) for n in ("trace_view.json", "kernel_details.csv", "step_trace_time.csv")):
        raise ProfileError(desc.root, f"no {OUTPUT_DIR}/ folder: the raw profile was never parsed into "
                                      f"deliverables; {ANALYSE_HINT}")
    info = profiler_info(desc, io)
    meta = profiler_metadata(desc, io, info)
    device = device_info(desc, io)
    # The communication JSONs first: their decoding (a block at a time: +58 MB for a 46 MB
    # communication.json, 400k events per rank) would otherwise sit on the trace's and kernel_details'
    # columns, and their tables leave (`RankTables.stream`) before the trace is read. Their warnings
    # keep their place after the trace's.
    mark = len(io.t.warnings)
    communication(desc, io, info.profiler_level, meta.world_size, meta.groups)
    communication_matrix(desc, io, meta.world_size, meta.groups)
    comm_warnings = io.t.warnings[mark:]
    del io.t.warnings[mark:]
    kd = kernel_details(desc, io)
    tr = trace(desc, io)
    io.t.settled()
    if kd is None and tr is None and not desc.has("step_trace_time.csv"):
        raise ProfileError(desc.out, "no device data: neither a readable trace_view.json nor "
                                     f"kernel_details.csv nor step_trace_time.csv; {ANALYSE_HINT}")
    # the device index: info.json's, else kernel_details' Device_id, else the trace's hardware lane label
    for found in (kd.device_id if kd is not None else None, labelled_device(tr)):
        if device.device_id is None and found is not None:
            device = replace(device, device_id=found)
    steps = trace_steps(desc, io, tr)
    host, pairs = _host_side(io, tr, steps, info.gc_detect)
    cand = _comm_side(io, tr, pairs, steps, meta.groups)
    ops, window = device_ops(desc, io, kd, cand, host, steps)
    # the trace tasks and kernel_details' columns (but its op types, for op_statistic) are in `ops` now:
    # freed before it is typed
    kd_op_type = kd.frame["op_type"] if kd is not None else None
    del cand, kd
    emit_device_ops(io, ops)
    del ops
    emit_steps(io, steps, window)
    if tr is not None:
        freq(io, tr)
        overlap(io, tr, steps)
    step_trace_time(desc, io)
    io.t.warnings += comm_warnings
    memory_record(desc, io, info)
    op_statistic(desc, io, kd_op_type)
    api_statistic(desc, io)
    if host is not None:
        host = operator_details(desc, io, host)
        if len(host.name):
            emit(io.t, host)
    operator_memory(desc, io)
    if info.framework == "mindspore":
        # MindSpore-only deliverables (dataset pipeline, its step_trace_time Stage): same tables, no 2nd path
        from ..mindspore_extra import read_ms_extras

        read_ms_extras(desc.root, io.t)
    origin = tr.min_ts if tr is not None else None
    if origin is None and len(window.start_ns):
        origin = int(window.start_ns.min())
    ranks_row(desc, io, info, meta, device, origin)
    return io.t


def _host_side(io: RankFiles, tr: TraceColumns | None, steps: Steps,
               gc_detect: bool) -> tuple[HostOps | None, Launches | None]:
    """The host ops and the launch flows (None, None without a trace); the trace's flows and host events are
    freed once read."""
    if tr is None:
        return None, None
    pairs = launch_flows(io, tr)
    release(tr, "flows")
    host = host_frame(io, tr, steps, pairs, gc_detect)
    release(tr, "host")
    io.t.settled()
    return host, pairs


def _comm_side(io: RankFiles, tr: TraceColumns | None, pairs: Launches | None, steps: Steps,
               groups: Groups) -> TraceDeviceTasks | None:
    """comm_tasks from the trace's HCCL sub-tasks (their table done and gone before the device_ops columns are
    built); returns the trace's device task candidates (None without a trace). The trace's hardware and
    communication events are freed."""
    if tr is None or pairs is None:
        return None
    cand, hcom, plane = trace_device_tasks(tr, pairs)
    release(tr, "hardware", "comm")
    comm_tasks(io.t, groups, hcom, plane, steps)
    return cand
