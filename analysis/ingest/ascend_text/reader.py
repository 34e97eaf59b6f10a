"""One rank directory -> RankTables: `read_rank` runs `RankReader`, one method per file."""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from ...errors import ProfileError
from ..base import RankSource, RankTables
from .common import ANALYSE_HINT, OUTPUT_DIR
from .communication import CommunicationFiles
from .kernel_details import DeviceOps
from .metadata import MetadataFiles
from .trace_parser import release
from .trace_view import TraceView

# The tables this reader only extends (never `add()`s), which it can hand on as it finishes them
STREAMED = ("comm_ops", "comm_bandwidth", "comm_packets", "links", "device_ops", "host_ops", "comm_tasks",
            "memory_records", "freq_samples")


def read_rank(src: RankSource, sink: Callable[[int, str, dict[str, Any]], None] | None = None,
              settle: Callable[[], None] | None = None) -> RankTables:
    """Parse one `*_ascend_pt` / `*_ascend_ms` text-export directory into normalized tables.

    `sink(rank, table, columns)`: the blocks of the STREAMED tables, typed, as each is finished (the parse
    workers send them on at once, so a rank's tables are not all in the worker at the end); the returned
    tables then hold the others. `settle()`: called after the phases that free the most (the trace's
    pieces once joined, its host columns once framed); see `RankTables.stream`."""
    reader = RankReader(src)
    if sink is not None:
        reader.t.stream(sink, STREAMED, settle)
    # The reader creates millions of small containers (row tuples, lists) that live until the end; the
    # cyclic GC would rescan them over and over (1.5 s of 4 s on a 1M-event trace) without freeing any.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return reader.read()
    finally:
        reader.close()
        if was_enabled:
            gc.enable()


class RankReader(TraceView, DeviceOps, CommunicationFiles, MetadataFiles):
    """One rank directory -> RankTables; each method reads one file and fills its tables/capabilities."""

    # -- driver ---------------------------------------------------------------------------------------

    def read(self) -> RankTables:
        if not self.root.is_dir():
            raise ProfileError(self.root, "not a directory")
        if not any((self.out / n).is_file() for n in ("trace_view.json", "kernel_details.csv",
                                                       "step_trace_time.csv")):
            raise ProfileError(self.root, f"no {OUTPUT_DIR}/ folder: the raw profile was never parsed into "
                                          f"deliverables; {ANALYSE_HINT}")
        self.profiler_info()
        self.profiler_metadata()
        self.device_info()
        # The communication JSONs first: their decoding (a block at a time: +58 MB for a 46 MB
        # communication.json, 400k events per rank) would otherwise sit on the trace's and kernel_details'
        # columns, and their tables leave (`RankTables.stream`) before the trace is read. Their warnings
        # keep their place after the trace's.
        mark = len(self.t.warnings)
        self.communication()
        self.communication_matrix()
        comm_warnings = self.t.warnings[mark:]
        del self.t.warnings[mark:]
        kd = self.kernel_details()
        tr = self.trace()
        self.t.settled()
        if kd is None and tr is None and not (self.out / "step_trace_time.csv").is_file():
            raise ProfileError(self.out, "no device data: neither a readable trace_view.json nor "
                                         f"kernel_details.csv nor step_trace_time.csv; {ANALYSE_HINT}")
        steps = self.steps(tr)
        host = pairs = None
        if tr is not None:
            pairs = self.launch_flows(tr)
            release(tr, "fl_")
            host = self.host_frame(tr, steps, pairs)
            release(tr, "h_")
            self.t.settled()
        # the trace's device tasks and hcom ops, then its HCCL sub-tasks (their table done and gone before
        # the device_ops columns are built), then device_ops
        self.device_tasks, comm_ops = self._trace_device_tasks(tr, pairs)
        if tr is not None:
            release(tr, "d_", "c_")
            self.comm_tasks(comm_ops, steps)
        dev = self.device_ops(kd, host, steps)
        self.emit_steps(steps, dev)
        if tr is not None:
            self.freq(tr)
            self.overlap(tr, steps)
        self.step_trace_time()
        self.t.warnings += comm_warnings
        self.memory_record()
        self.op_statistic(kd)
        self.api_statistic()
        if host is not None:
            self.operator_details(host)
            self.emit_host(host)
        self.operator_memory()
        if self.framework == "mindspore":
            # MindSpore-only deliverables (dataset pipeline, its step_trace_time Stage): same tables, no 2nd path
            from ..mindspore_extra import read_ms_extras

            read_ms_extras(self.root, self.t)
        self.ranks_row(dev)
        return self.t
