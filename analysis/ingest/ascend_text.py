"""Reader for the Ascend text export of one rank: torch_npu `*_ascend_pt` and MindSpore ≥ 2.5 `*_ascend_ms`.

Input (ascend-format-and-advisor-rules.md §2, mindspore-format-and-db.md §1.4/§2.3/§4.2), all optional but
at least one of the first two:

| file | -> tables |
| --- | --- |
| `ASCEND_PROFILER_OUTPUT/trace_view.json` | host_ops, device_ops (trace-only tasks, `hcom_*` ops), comm_tasks, steps, freq_samples, correlation ids |
| `ASCEND_PROFILER_OUTPUT/kernel_details.csv` | device_ops (type, block dims, op state, shapes, dtypes, pipe ratios) |
| `step_trace_time.csv` | vendor_step_trace (cross-check of the breakdown) |
| `communication.json` | comm_ops, comm_bandwidth, comm_packets |
| `communication_matrix.json` | links (group-local ranks mapped to global ranks) |
| `memory_record.csv` | memory_records |
| `op_statistic.csv`, `api_statistic.csv`, `operator_details.csv`, `operator_memory.csv` | cross-checks, metadata, host call stacks, a capability |
| `profiler_info_{rank}.json`, `profiler_metadata.json`, `PROF_*/device_*/info.json.N` | ranks, env_vars, metadata |

Units and exactness:
* every time becomes integer ns; µs strings (`ts`, CSV `Start Time(us)`) are converted exactly, never through
  float: trace strings by `parse_us_to_ns`, CSV columns by DuckDB `DECIMAL(38,3)` (round half away from zero);
  `communication*.json` numbers give the integers the exact decimal gives (ROUND_HALF_UP of value x scale):
  floats only where that is shown exact, the text otherwise (see `_scaled_fast`, `_comm_json`);
* communication "MB" are 10^6 bytes: in cluster4 an HCCL Memcpy of `size(Byte)` 1,000,100 is the packet
  bucket `"1.0001"` MB, and `Bandwidth(GB/s)` = `Transit Size(MB)` / `Transit Time(ms)` (3.0003 / 0.18 =
  16.6683) is then bytes/ns = GB/s, the same unit as the trace's `bandwidth(GB/s)` (1,000,100 B / 60 µs = 16.67);
  msprof's own docs show 16 MiB buffers as `16.777216` MB. Allocator files (memory_record.csv) use MiB.

Steps: `ProfilerStep#N` gives the host window [ts, ts + dur). A device op belongs to the step given by
kernel_details `Step Id`, else the step of the host op that launched it (the `async_npu` flow), else the
step whose host window contains its start. The device window is [first device op start of the step, host
step end], the definition torch_npu's step_trace_time.csv uses (Free then agrees within 0.5 % on cluster4).

Joining trace and kernel_details: a device task in the trace and a kernel_details row are the same task when
they share the start ns and the kernel name (MindSpore prefixes CSV names with `launch op/`, so the last
`/` part is compared), else start ns + Stream ID + Task ID. Joined rows take the CSV's columns and the
trace's correlation id and group; unmatched trace tasks stay as device ops of their own.

Errors: no output folder, no device data (neither trace_view.json nor kernel_details.csv), an empty,
truncated or invalid trace_view.json, and an empty kernel_details.csv or one without its required columns
raise `ProfileError` naming the file. Every other problem (a missing or broken optional file, a missing
optional column) is a warning naming the file, and the capability it would have given is not set, so the
checks that need it report "not applicable" instead of a false finding. Nothing is written next to the input.
"""

from __future__ import annotations

import csv
import functools
import gc
import itertools
import json
import operator
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, fields
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import numpy as np

from .ascend_columns import (
    API_STATISTIC,
    ARITHMETIC_COLUMNS,
    KERNEL_DETAILS,
    MEMORY_RECORD,
    OP_STATISTIC,
    OPERATOR_DETAILS,
    OPERATOR_MEMORY,
    PIPE_RATIO_COLUMNS,
    STEP_TRACE_TIME,
    FileColumns,
    Resolved,
    normalize_header,
)
from .ascend_common import DTYPE_BYTES, collective_of, group_hash
from .base import ProfileError, RankSource, RankTables, parse_us_to_ns

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
COMM_MB_BYTES = 1_000_000       # communication.json / communication_matrix.json "MB" (see module docstring)
MEM_MB_BYTES = 1 << 20          # allocator "MB" (memory_record.csv) are MiB
MEM_KB_BYTES = 1 << 10
INT32_MAX = 2**31 - 1           # INTEGER columns; msprof writes 4294967295 for "no value"
ANALYSE_HINT = "re-run torch_npu.profiler.profiler.analyse() (or the MindSpore offline analyse) on the profile"

# The 9 variables torch_npu records (profiler_metadata.json ENV_VARIABLES); '' means unset.
ENV_VARIABLES = ("ASCEND_GLOBAL_LOG_LEVEL", "HCCL_RDMA_TC", "HCCL_RDMA_SL", "ACLNN_CACHE_LIMIT",
                 "HOST_CACHE_CAPACITY", "ASCEND_ENHANCE_ENABLE", "PYTORCH_NPU_ALLOC_CONF",
                 "ASCEND_LAUNCH_BLOCKING", "HCCL_ALGO")

_AGGREGATE_KEY_RE = re.compile(r"-(top\d+|middle|bottom|total)$", re.I)
_LINK_RE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")
_STEP_KEY_RE = re.compile(r"(\d+)\s*$")
_GROUP_THREAD_RE = re.compile(r"^Group\s+(\S+)\s+Communication", re.I)
_HCOM_SUFFIX_RE = re.compile(r"(_\d+)+$")
_HCOM_SUFFIX_LINES_RE = re.compile(r"(_\d+)+$", re.M)
_LEVEL_RE = re.compile(r"(Level\w+)", re.I)






def task_category(task_type: str | None, name: str, default: str) -> str:
    """device_ops.category of an Ascend task from its Task Type / Accelerator Core (name for hcom_ ops)."""
    if name.startswith("hcom_"):
        return "communication"
    tt = (task_type or "").upper()
    if not tt or tt == "N/A":
        return default
    if tt in ("HCCL", "COMMUNICATION") or tt.startswith("HCCL"):
        return "communication"
    if tt.startswith(("AI_CORE", "AI_VECTOR", "MIX_", "AI_CPU", "AIV", "AIC", "FFTS", "DSA", "C_CORE")):
        return "compute"
    if "DMA" in tt or "MEMCPY" in tt or "MEMSET" in tt:
        return "memory"
    if any(k in tt for k in ("EVENT", "NOTIFY", "WAIT", "WRITE_VALUE", "BARRIER", "SYNC")):
        return "sync"
    if tt == "OTHER":
        # Older CANN types every hardware task "Other" (mstt-fixtures/timeline_advice: aclnn*, trans_*,
        # Conv2D* kernels and MEMCPY): the name tells copies and waits from kernels.
        up = name.upper()
        if up.startswith(("MEMCPY", "MEMSET")) or "DMA" in up:
            return "memory"
        if up.startswith(("EVENT", "NOTIFY", "WAIT")):
            return "sync"
        return "compute"
    return default


# --------------------------------------------------------------------------------------------------------
# trace_view.json: streaming typed decode
#
# The file is read in blocks of BLOCK_BYTES; each block is cut after the last complete top-level event (a
# `}` followed by `,` and `{`) and the piece is decoded by msgspec into typed `Event` structs. A cut that
# falls inside a nested value or a string makes the piece invalid JSON, so the cut is retried on a larger
# window: a piece is only accepted when msgspec decodes it, and a broken file is reported with the byte
# offset where decoding failed. `args` stay raw (`msgspec.Raw`) unless the event kind needs them.

BLOCK_BYTES = 32 << 20
# Ids that mean "none" in torch_npu / CANN exports (UINT32_MAX, -1, UINT64_MAX): NULL, never joined on.
SENTINEL_IDS = frozenset({4294967295, -1, 18446744073709551615})
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def _sentinel_id(value: Any) -> bool:
    """Whether an opaque id (int, numeral text, Decimal) is one of SENTINEL_IDS."""
    return as_int(value) in SENTINEL_IDS

# A window that grows beyond this without a decodable piece means the file is corrupt.
MAX_WINDOW_BYTES = 8 * BLOCK_BYTES
# By default the file is read in pieces of PIECE_BYTES first: the events of a piece and their rows stay in
# the CPU caches (a sixth less time than whole 32 MB blocks on bench8). The pieces give the same events in the
# same order (a cut is only accepted where the piece decodes); a file this cannot read (broken JSON, an event
# larger than 8 pieces, a value that fails) is read again in blocks of BLOCK_BYTES, which fails as it always
# did (an early piece must not fail first on what the whole-file read never reaches).
PIECE_BYTES = 256 << 10

# Event kinds, decided from the pid's process_name.
SKIP, FRAMEWORK, CANN, HARDWARE, COMM, OVERLAP, FREQ = range(7)
HOST_KINDS = (FRAMEWORK, CANN)
_DEVICE_KINDS = (HARDWARE, COMM)     # where a launch flow ends

_PROCESS_KINDS: dict[str, int] = {
    "python": FRAMEWORK,        # torch_npu host ops
    "pytorch": FRAMEWORK,
    "mindspore": FRAMEWORK,     # MindSpore framework events
    "cpu op": FRAMEWORK,        # MindSpore host CPU kernels
    "cann": CANN,
    "ascend hardware": HARDWARE,
    "communication": COMM,      # torch_npu
    "hccl": COMM,               # MindSpore, older torch_npu
    "overlap analysis": OVERLAP,
    "ai core freq": FREQ,
}

_STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")
_WS = b" \t\r\n"


class Event(msgspec.Struct, gc=False):
    """One trace event; unknown keys (`bp`, ...) are ignored, `args` is kept raw until needed."""

    ph: str = ""
    name: str = ""
    pid: int | str = 0
    tid: int | str = 0
    ts: Any = None          # a µs string normally; a JSON number is decoded as an exact Decimal
    dur: float | str | None = None
    cat: str | None = None
    id: int | str | None = None
    args: msgspec.Raw = msgspec.Raw(b"{}")


class HostArgs(msgspec.Struct, gc=False):
    call_stack: Any = msgspec.field(default=None, name="Call stack")
    call_stack2: Any = msgspec.field(default=None, name="Call Stack")
    input_dims: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=msgspec.Raw(b""), name="Input type")
    connection_id: Any = None


class HardwareArgs(msgspec.Struct, gc=False):
    task_type: Any = msgspec.field(default=None, name="Task Type")
    stream_id: Any = msgspec.field(default=None, name="Stream Id")
    physic_stream_id: Any = msgspec.field(default=None, name="Physic Stream Id")
    task_id: Any = msgspec.field(default=None, name="Task Id")
    connection_id: Any = None


class CommArgs(msgspec.Struct, gc=False):
    size: Any = msgspec.field(default=None, name="size(Byte)")
    transport: Any = msgspec.field(default=None, name="transport type")
    link: Any = msgspec.field(default=None, name="link type")
    src: Any = msgspec.field(default=None, name="src rank")
    dst: Any = msgspec.field(default=None, name="dst rank")
    bandwidth: Any = msgspec.field(default=None, name="bandwidth(GB/s)")
    # (`task type` and `stream id` are not read: no table takes them from communication events)
    connection_id: Any = None
    data_type: Any = None       # hcom_* ops: element type and count give the message size
    count: Any = None


_HOST_ARGS = msgspec.json.Decoder(HostArgs)
_HW_ARGS = msgspec.json.Decoder(HardwareArgs)
_COMM_ARGS = msgspec.json.Decoder(CommArgs)
_ANY = msgspec.json.Decoder()
_NO_HOST_ARGS = HostArgs()
# the same, for the args of many events at once (see _decode_args)
_ARGS_LISTS = {id(d): msgspec.json.Decoder(list[t])
               for d, t in ((_HOST_ARGS, HostArgs), (_HW_ARGS, HardwareArgs), (_COMM_ARGS, CommArgs))}
_FOURTH_LAST = operator.itemgetter(-4)
_DROP_DOT = operator.methodcaller("replace", ".", "", 1)
_FLOW_PHASES = frozenset({"s", "f", "t"})
_STR_ONLY = frozenset({str})
_FLOAT_ONLY = frozenset({float})
_INT_OR_NONE = frozenset({int, type(None)})
_INT_ONLY = frozenset({int})
_STR_OR_NONE = frozenset({str, type(None)})
_FLOAT_OR_NONE = frozenset({float, type(None)})
_NUMBER_OR_NONE = frozenset({int, float, type(None)})


ARGS_BATCH = 4096  # events whose args are decoded in one call (a few MB of text at most)


def _decode_args(dec: msgspec.json.Decoder, raws: Sequence[msgspec.Raw], default: Any) -> list[Any]:
    """The raw args objects of many events decoded by `dec`, ARGS_BATCH at a time as one JSON array
    `[a,b,...]` (the per-call overhead is most of the cost of a small object); a batch that fails is
    decoded one by one, `default` where invalid."""
    out: list[Any] = []
    for i in range(0, len(raws), ARGS_BATCH):
        batch = raws[i:i + ARGS_BATCH]
        try:
            out += _ARGS_LISTS[id(dec)].decode(b"[%b]" % b",".join(batch))
            continue
        except (msgspec.DecodeError, msgspec.ValidationError):
            pass
        for r in batch:
            try:
                out.append(dec.decode(r))
            except (msgspec.DecodeError, msgspec.ValidationError):
                out.append(default)
    return out


def _start_ns(ts: Any) -> int | None:
    """Exact ns of an event's ts (None when unreadable); fast path for the usual "…250.125" string: dropping
    the dot gives exact ns."""
    if type(ts) is str and len(ts) > 4 and ts[-4] == ".":
        try:
            return int(ts.replace(".", "", 1))
        except ValueError:
            return ts_ns(ts)
    return ts_ns(ts)


# 10**k, k = n-1 .. 0, for the n digits of a µs string of n + 1 characters (see _milli_strings)
_DIGIT_WEIGHTS = {n: 10 ** np.arange(n - 1, -1, -1, dtype=np.uint64) for n in range(4, 20)}
_I64_LIMIT = np.uint64(2**63 - 1)


def _milli_strings(ts: Sequence[str]) -> np.ndarray | None:
    """int(t.replace(".", "", 1)) of every ts as an int64 array when all are ASCII strings of one length
    (5 to 20) with digits only and the dot 4th from the end, as the export writes them ("…250.125"): the
    digits of all are then one uint8 matrix, weighted by powers of ten in one product (no Python int per
    value; ~7x faster than the per-string parse). None (the per-string path decides) for anything else,
    or a value beyond int64."""
    lengths = set(map(len, ts))
    if len(lengths) != 1:
        return None
    width = lengths.pop()
    if not 5 <= width <= 20:
        return None
    try:
        text = "".join(ts).encode("ascii")
    except UnicodeEncodeError:
        return None
    chars = np.frombuffer(text, dtype=np.uint8).reshape(len(ts), width)
    if not (chars[:, width - 4] == 0x2E).all():  # '.'
        return None
    digits = np.delete(chars, width - 4, axis=1) - np.uint8(0x30)  # not a digit: wraps above 9
    if (digits > 9).any():
        return None
    # at most 19 digits: below 10**19 < 2**64, so the uint64 sum cannot wrap
    value = digits.astype(np.uint64) @ _DIGIT_WEIGHTS[width - 1]
    if width == 20 and (value > _I64_LIMIT).any():
        return None
    return value.astype(np.int64)


def _starts_ns(ts: Sequence[Any]) -> np.ndarray | list[int | None]:
    """[_start_ns(t) for t in ts]; an int64 array when every ts is the usual µs string (`_milli_strings`),
    else the fast path for all at once (C-level maps) when every ts takes it."""
    if ts and _STR_ONLY.issuperset(map(type, ts)):
        fixed = _milli_strings(ts)
        if fixed is not None:
            return fixed
        if min(map(len, ts)) > 4 and set(map(_FOURTH_LAST, ts)) == {"."}:
            try:
                return list(map(int, map(_DROP_DOT, ts)))
            except ValueError:
                pass
    return [_start_ns(t) for t in ts]


def _durs_ns(durs: Sequence[Any]) -> Any:
    """ns of µs durations: round(d * 1000) of a float (half to even), `dur_ns` of anything else; an int64
    array when all are finite floats (np.rint of the same product)."""
    if durs and _FLOAT_ONLY.issuperset(map(type, durs)):
        x = np.array(durs, dtype=np.float64) * 1000
        if np.isfinite(x).all() and np.abs(x).max() < 2.0**62:
            return np.rint(x).astype(np.int64)
    return [round(d * 1000) if type(d) is float else dur_ns(d) for d in durs]


def _ints(values: list[Any]) -> list[int | None]:
    """[as_int(v) for v in values]; a column of ints and None is returned as it is."""
    if _INT_OR_NONE.issuperset(map(type, values)):
        return values
    return [as_int(v) for v in values]


def _floats(values: list[Any]) -> list[float | None]:
    """[as_float(v) for v in values] (a float column as it is)."""
    types = set(map(type, values))
    if types <= _FLOAT_OR_NONE:
        return values
    if types <= _NUMBER_OR_NONE:
        obj = np.array(values, dtype=object)
        nulls = np.equal(obj, None)
        obj[nulls] = 0.0
        try:
            out: list[float | None] = obj.astype(np.float64).tolist()  # float() of each value
        except OverflowError:
            return [as_float(v) for v in values]
        for i in np.flatnonzero(nulls).tolist():
            out[i] = None
        return out
    return [as_float(v) for v in values]


def message_bytes(counts: list[int | None], data_type: Sequence[Any]) -> list[int | None]:
    """Per Communication event, its message bytes: count x the element size of its data_type
    (`DTYPE_BYTES`, by upper-cased text); None without a count or a known data type."""
    msg: list[int | None] = [None] * len(counts)
    for i in np.flatnonzero(np.not_equal(np.array(counts, dtype=object), None)).tolist():
        if data_type[i] is not None:
            width = DTYPE_BYTES.get(str(data_type[i]).upper())
            if width is not None:
                msg[i] = counts[i] * width
    return msg


def ts_ns(v: str | Decimal | float | int | None) -> int | None:
    """Exact ns of a µs timestamp; fast path for the usual 3-decimal string (drop the dot)."""
    if type(v) is str:
        if len(v) > 4 and v[-4] == ".":
            try:
                return int(v.replace(".", "", 1))
            except ValueError:
                pass
        try:
            return parse_us_to_ns(v)
        except ValueError:
            return None
    if v is None:
        return None
    return parse_us_to_ns(v)


def dur_ns(v: float | str | int | None) -> int:
    """ns of a µs duration (floats rounded to the nearest ns; missing -> 0)."""
    if v is None:
        return 0
    if type(v) is float:
        return round(v * 1000)
    try:
        return parse_us_to_ns(v)
    except ValueError:
        return 0


def as_int(v: Any) -> int | None:
    """Integer value of a JSON scalar (int, integral float, digit string), else None."""
    if type(v) is int:
        return v
    if type(v) is float:
        return int(v) if v.is_integer() else None
    if type(v) is str:
        s = v.strip()
        if s.lstrip("-").isdigit():
            return int(s)
    return None


def as_float(v: Any) -> float | None:
    if type(v) in (int, float):
        return float(v)
    if type(v) is str:
        try:
            return float(v.strip())
        except ValueError:
            return None
    return None


def _text(v: Any) -> str | None:
    if v is None or v == "":
        return None
    return v if type(v) is str else str(v)


_HOST_FIELDS = ("h_pid", "h_tid", "h_name", "h_cat", "h_start", "h_dur", "h_stack", "h_dims", "h_types",
                "h_conn")
_HW_FIELDS = ("d_pid", "d_tid", "d_name", "d_start", "d_dur", "d_task_type", "d_stream", "d_task_id", "d_conn")
_COMM_FIELDS = ("c_pid", "c_tid", "c_name", "c_start", "c_dur", "c_size", "c_transport", "c_link", "c_src",
                "c_dst", "c_bw", "c_conn", "c_msg_bytes")
_OVERLAP_FIELDS = ("o_name", "o_start", "o_dur")
_FLOW_FIELDS = ("fl_cat", "fl_id", "fl_ph", "fl_pid", "fl_tid", "fl_ts")
# Never-null integer columns: stored as int64 numpy arrays (8 bytes a value instead of a Python int object).
_INT64_FIELDS = frozenset({"h_start", "h_dur", "d_start", "d_dur", "c_start", "c_dur", "o_start", "o_dur",
                           "fl_ts"})
_START_FIELDS = frozenset({"h_start", "d_start", "c_start", "o_start"})  # the X events min_ts is taken from
# Communication argument columns joined into numpy by `_finish` (what `_trace_device_tasks` takes rows of):
# nullable ints as masked int64 arrays (the list of values when one is beyond int64), bandwidth as float64
# (NaN: none).
_NULLABLE_INT_FIELDS = frozenset({"c_size", "c_src", "c_dst", "c_conn", "c_msg_bytes"})
_FLOAT_FIELDS = frozenset({"c_bw"})


@dataclass
class TraceColumns:
    """Everything kept from trace_view.json as parallel columns (sequences of equal length per group).

    While parsing, each event is one tuple in `*_rows` (one append per event is much cheaper than one per
    field; device, communication and overlap events and flows as decoded, host events converted); after
    each decoded piece the rows are transposed and converted into compact column parts (int64 arrays,
    lists of shared strings), which `TraceParser._finish` joins. Start/dur columns are int64 ns arrays.
    """

    # host events (Python/MindSpore framework + CANN APIs + GC): h_cat is host_ops.category
    h_pid: Sequence[Any] = ()
    h_tid: Sequence[Any] = ()
    h_name: Sequence[str] = ()
    h_cat: Sequence[str] = ()
    h_start: Sequence[int] = ()
    h_dur: Sequence[int] = ()
    h_stack: Sequence[str | None] = ()
    h_dims: Sequence[str | None] = ()
    h_types: Sequence[str | None] = ()
    h_conn: Sequence[int | None] = ()
    # device tasks (Ascend Hardware)
    d_pid: Sequence[Any] = ()
    d_tid: Sequence[Any] = ()
    d_name: Sequence[str] = ()
    d_start: Sequence[int] = ()
    d_dur: Sequence[int] = ()
    d_task_type: Sequence[str | None] = ()
    d_stream: Sequence[int | None] = ()
    d_task_id: Sequence[int | None] = ()
    d_conn: Sequence[int | None] = ()
    # Communication / HCCL process: hcom_* ops and their tasks (split by thread name later)
    c_pid: Sequence[Any] = ()
    c_tid: Sequence[Any] = ()
    c_name: Sequence[str] = ()
    c_start: Sequence[int] = ()
    c_dur: Sequence[int] = ()
    c_size: Sequence[int | None] = ()
    c_transport: Sequence[str | None] = ()
    c_link: Sequence[str | None] = ()
    c_src: Sequence[int | None] = ()
    c_dst: Sequence[int | None] = ()
    c_bw: Sequence[float | None] = ()
    c_conn: Sequence[int | None] = ()
    c_msg_bytes: Sequence[int | None] = ()
    # Overlap Analysis intervals (name = Computing / Communication / Communication(Not Overlapped) / Free)
    o_name: Sequence[str] = ()
    o_start: Sequence[int] = ()
    o_dur: Sequence[int] = ()
    # AI Core Freq counter samples
    f_ts: list[int] = field(default_factory=list)
    f_mhz: list[float] = field(default_factory=list)
    # flow endpoints (s/f/t): a flow is identified by (cat or name, id)
    fl_cat: Sequence[str] = ()
    fl_id: Sequence[Any] = ()
    fl_ph: Sequence[str] = ()
    fl_pid: Sequence[Any] = ()
    fl_tid: Sequence[Any] = ()
    fl_ts: Sequence[int] = ()
    # ProfilerStep#N -> (N, start_ns, dur_ns)
    steps: list[tuple[int, int, int]] = field(default_factory=list)
    # metadata
    process_names: dict[Any, str] = field(default_factory=dict)
    process_labels: dict[Any, str] = field(default_factory=dict)
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)
    kinds: dict[Any, int] = field(default_factory=dict)
    n_events: int = 0
    n_unclassified: int = 0          # X events on pids that never got a process_name
    n_unsupported_phase: int = 0     # B/E pairs and other phases this reader does not use
    n_bad_ts: int = 0
    min_ts: int | None = None
    with_stack: bool = False
    # row buffers of the piece being classified (see TraceParser._flush)
    host_rows: list[tuple[Any, ...]] = field(default_factory=list)
    hw_rows: list[tuple[Any, ...]] = field(default_factory=list)
    comm_rows: list[tuple[Any, ...]] = field(default_factory=list)
    overlap_rows: list[tuple[Any, ...]] = field(default_factory=list)
    flow_rows: list[tuple[Any, ...]] = field(default_factory=list)


class TraceParser:
    """Decode one trace_view.json into `TraceColumns` (algorithm in the comment above BLOCK_BYTES)."""

    def __init__(self, path: Path, block_bytes: int = BLOCK_BYTES) -> None:
        self.path = path
        self.block = block_bytes
        self.out = TraceColumns()
        self._pending: list[Event] = []
        # Names, categories, shapes repeat millions of times: keep one string object per distinct value.
        self._names: dict[str, str] = {}
        self._framework_cat: dict[tuple[str, str | None], str] = {}
        self._blobs: dict[bytes, str] = {}
        self._ids: dict[Any, Any] = {}     # pid / tid values
        self._parts: dict[str, list[Any]] = {}

    # -- decoding -------------------------------------------------------------------------------------

    def parse(self) -> TraceColumns:
        """The trace as columns: with the default block size read in pieces first (see PIECE_BYTES)."""
        if self.block == BLOCK_BYTES:
            try:
                self.out = TraceParser(self.path, PIECE_BYTES)._parse(8 * PIECE_BYTES)
                return self.out
            except Exception:  # the block-size read below fails as the reader always did
                pass
        return self._parse(MAX_WINDOW_BYTES)

    def _parse(self, max_window: int) -> TraceColumns:
        dec = msgspec.json.Decoder(list[Event], float_hook=Decimal)
        with open(self.path, "rb") as f:
            first = f.read(self.block)
            if not first:
                raise ProfileError(self.path, f"empty file (0 bytes); {ANALYSE_HINT}")
            head = first.lstrip(b"\xef\xbb\xbf" + _WS)
            if not head:
                raise ProfileError(self.path, f"empty file (only whitespace); {ANALYSE_HINT}")
            if head[:1] == b"{":
                raise ProfileError(self.path, "is a JSON object, but the Ascend trace_view.json is a JSON array "
                                              "of events (is this a Kineto trace?)")
            if head[:1] != b"[":
                raise ProfileError(self.path, "not JSON: expected '[' at the start of the event array")
            offset = len(first) - len(head) + 1      # file offset of carry[0]
            del head
            more = f.read(self.block) if len(first) - offset < self.block // 2 else None
            if more == b"":
                # The whole file is one piece: decoded where it was read ('[' included), without copies of
                # the file (each costs as much as reading it).
                self._decode_tail(dec, first, offset, offset)
                self._finish()
                return self.out
            carry = bytearray(first)
            del carry[:offset], first
            read_done = more is not None  # the first round's read (below) was done above
            if more:
                carry += more
            del more
            eof = False
            widen = False
            while True:
                if read_done:
                    read_done = False
                elif not eof and (len(carry) < self.block // 2 or widen):
                    more = f.read(self.block)
                    if more:
                        carry += more
                    else:
                        eof = True
                if eof:
                    self._decode_tail(dec, carry, 0, offset)
                    break
                cut = _last_boundary(carry)
                if cut is None:
                    widen = True
                    if len(carry) > max_window:
                        raise ProfileError(self.path, f"invalid JSON near byte {offset}: no event boundary "
                                                      f"in {len(carry)} bytes")
                    continue
                end, nxt = cut
                # "[" + events + "]" in one copy
                piece = bytearray(end + 2)
                piece[0], piece[-1] = 0x5B, 0x5D
                with memoryview(carry) as mv:
                    piece[1:end + 1] = mv[:end]
                try:
                    events = dec.decode(piece)
                except msgspec.DecodeError as e:
                    # The cut fell inside a nested value/string (or the data is broken): widen the window.
                    widen = True
                    if len(carry) > max_window:
                        raise ProfileError(self.path, f"invalid JSON near byte {offset}: {e}") from None
                    continue
                widen = False
                self._consume(events)
                del events, piece
                offset += nxt
                del carry[:nxt]
        self._finish()
        return self.out

    def _decode_tail(self, dec: msgspec.json.Decoder, buf: bytes | bytearray, start: int,
                     offset: int) -> None:
        """Decode the rest of the event array, buf[start:] (file offset `offset`): '[' + the events + ']'.

        When buf[start - 1] is the array's '[' (a file read in one piece) the text is decoded in place,
        else from one copy.
        """
        end = len(buf)
        while end > start and buf[end - 1] in _WS:
            end -= 1
        if end == start or buf[end - 1] != 0x5D:  # ']'
            raise ProfileError(self.path, f"truncated: the file ends at byte {offset + len(buf) - start} "
                                          f"inside the event array (no closing ']'); {ANALYSE_HINT}")
        if start and buf[start - 1] == 0x5B:  # '['
            text: Any = memoryview(buf)[start - 1:end]
        else:
            text = bytearray(end - start + 1)
            text[0] = 0x5B
            text[1:] = memoryview(buf)[start:end]
        try:
            events = dec.decode(text)
        except msgspec.DecodeError as e:
            msg = str(e)
            if "truncated" in msg.lower():
                raise ProfileError(self.path, f"truncated JSON after byte {offset} ({msg}); {ANALYSE_HINT}") \
                    from None
            raise ProfileError(self.path, f"invalid JSON after byte {offset}: {msg}") from None
        self._consume(events)

    # -- classification -------------------------------------------------------------------------------

    def _consume(self, events: list[Event]) -> None:
        """Route each event of one decoded piece. This is the hot loop: the common cases (X events of the
        communication, device and host processes) are handled inline. Communication and device tasks are
        only collected: their ts, dur, args and shared strings are converted a column at a time in `_flush`
        (as is the earliest start, min_ts). Reading the event attributes stays here: Python 3.11's
        specialized attribute reads cost less than C-level getters mapped over the events."""
        out = self.out
        kinds = out.kinds
        names = self._names
        host_rows = out.host_rows
        hw_rows = out.hw_rows
        comm_rows = out.comm_rows
        overlap_rows = out.overlap_rows
        flow_rows = out.flow_rows
        ids = self._ids
        dropped_min = None   # earliest start of the X events that count for min_ts but are not kept
        out.n_events += len(events)
        for ev in events:
            ph = ev.ph
            if ph != "X":
                if ph in _FLOW_PHASES:  # a flow is identified by (cat or name, id)
                    if ev.id is not None:
                        flow_rows.append((ev.cat or ev.name, ev.id, ph, ev.pid, ev.tid, ev.ts))
                else:
                    self._other(ev, ph)
                continue
            pid = ev.pid
            kind = kinds.get(pid)
            if kind == COMM:
                comm_rows.append((pid, ev.tid, ev.name, ev.ts, ev.dur, ev.args))
                continue
            if kind == HARDWARE:
                hw_rows.append((pid, ev.tid, ev.name, ev.ts, ev.dur, ev.args))
                continue
            if kind == OVERLAP:
                overlap_rows.append((ev.name, ev.ts, ev.dur))
                continue
            if kind is None:
                # process_name not seen yet: keep the event (detached from the input buffer) for later.
                ev.args = msgspec.Raw(bytes(ev.args))
                self._pending.append(ev)
                continue
            if kind == SKIP and (ev.cat is None or ev.cat.lower() != "gc"):
                continue
            ts = ev.ts
            # fast path for the usual "…250.125" string: dropping the dot gives exact ns
            if type(ts) is str and len(ts) > 4 and ts[-4] == ".":
                try:
                    start = int(ts.replace(".", "", 1))
                except ValueError:
                    start = ts_ns(ts)
            else:
                start = ts_ns(ts)
            if start is None:
                out.n_bad_ts += 1
                continue
            d = ev.dur
            dur = round(d * 1000) if type(d) is float else dur_ns(d)
            name = ev.name
            name = names.setdefault(name, name)
            cat = ev.cat
            if kind in HOST_KINDS:
                pid = ids.setdefault(pid, pid)
                tid = ids.setdefault(ev.tid, ev.tid)
                if cat is not None and cat.lower() == "gc":
                    host_rows.append((pid, tid, name, "gc", start, dur, None))
                    continue
                if kind == CANN:
                    category = "cann"
                else:
                    category = self._framework_cat.get((name, cat)) or self._categorize(name, cat)
                    if category == "user_annotation" and name.startswith("ProfilerStep#"):
                        m = _STEP_RE.match(name)
                        if m:
                            out.steps.append((int(m.group(1)), start, dur))
                raw = ev.args
                host_rows.append((pid, tid, name, category, start, dur, raw if len(raw) > 2 else None))
            elif cat is not None and cat.lower() == "gc":  # GC is recognised by cat, whatever the process
                host_rows.append((ev.pid, ev.tid, name, "gc", start, dur, None))
            elif dropped_min is None or start < dropped_min:
                dropped_min = start
        self._flush(dropped_min)

    def _lower_min_ts(self, t: int | None) -> None:
        if t is not None and (self.out.min_ts is None or t < self.out.min_ts):
            self.out.min_ts = t

    def _flush(self, min_ts: int | None = None) -> None:
        """Move the row buffers of one piece into column parts (int64 arrays for start/dur) and lower
        out.min_ts to the piece's earliest start (`min_ts`: that of the events not kept).

        Device, communication and overlap rows and flows come raw from `_consume` (ts, dur, args as
        decoded), converted here a column at a time; host, device and communication rows end with their raw
        `args`, decoded in one call per batch (`_decode_args`).
        """
        out = self.out
        for rows, names, args in ((out.host_rows, _HOST_FIELDS, self._host_arg_columns),
                                  (out.hw_rows, _HW_FIELDS, self._hw_arg_columns),
                                  (out.comm_rows, _COMM_FIELDS, self._comm_arg_columns),
                                  (out.overlap_rows, _OVERLAP_FIELDS, None),
                                  (out.flow_rows, _FLOW_FIELDS, None)):
            if not rows:
                continue
            cols: list[Sequence[Any]] = list(zip(*rows, strict=True))
            rows.clear()
            if names is _FLOW_FIELDS:
                cols = self._flow_columns(cols)
            elif names is not _HOST_FIELDS:
                cols = self._timed_columns(cols)
            if not cols:
                continue
            if args is not None:
                cols = cols[:-1] + args(cols[-1], cols[1])
            self.add_parts(names, cols)
        self._lower_min_ts(min_ts)

    def add_parts(self, names: tuple[str, ...], cols: Sequence[Sequence[Any]]) -> None:
        """Append one group's columns (int64 arrays for the start / dur fields); the earliest start lowers
        out.min_ts."""
        parts = self._parts
        for fname, col in zip(names, cols, strict=True):
            if fname in _INT64_FIELDS:
                col = np.asarray(col, dtype=np.int64)
                if fname in _START_FIELDS:
                    self._lower_min_ts(int(col.min()))
            parts.setdefault(fname, []).append(col)

    def _timed_columns(self, cols: list[Sequence[Any]]) -> list[Sequence[Any]]:
        """The columns of collected device / communication tasks, (pid, tid, name, ts, dur, args), or overlap
        intervals, (name, ts, dur), with ts and dur in ns: what `_consume` does per event for host events
        (events without a readable ts dropped and counted, shared pid / tid / name objects). [] when none
        is left."""
        i_ts = 3 if len(cols) == 6 else 1   # tasks: (pid, tid, name, ts, dur, args); overlap: (name, ts, dur)
        start = _starts_ns(cols[i_ts])
        if type(start) is list and None in start:
            keep = [s is not None for s in start]
            self.out.n_bad_ts += len(keep) - sum(keep)
            cols = [list(itertools.compress(c, keep)) for c in cols]
            start = list(itertools.compress(start, keep))
            if not start:
                return []
        ids, names = self._ids, self._names
        dur = _durs_ns(cols[i_ts + 1])
        if i_ts == 1:
            return [list(map(names.setdefault, cols[0], cols[0])), start, dur]
        pid, tid, name, _, _, args = cols
        return [list(map(ids.setdefault, pid, pid)), list(map(ids.setdefault, tid, tid)),
                list(map(names.setdefault, name, name)), start, dur, args]

    def _flow_columns(self, cols: list[Sequence[Any]]) -> list[Sequence[Any]]:
        """(cat, id, ph, pid, tid, ts ns) columns of collected flow events (cat, id, ph, pid, tid, ts):
        flows without a readable ts are dropped (`ts_ns`); shared cat / pid / tid objects. [] when none."""
        cat, flow_id, ph, pid, tid, ts = cols
        start = _starts_ns(ts)  # ts_ns of each (the same fast path, then the same parse)
        if type(start) is list and None in start:
            keep = [s is not None for s in start]
            cat, flow_id, ph, pid, tid, start = (list(itertools.compress(c, keep))
                                                 for c in (cat, flow_id, ph, pid, tid, start))
            if not start:
                return []
        ids, names = self._ids, self._names
        return [list(map(names.setdefault, cat, cat)), flow_id, ph, list(map(ids.setdefault, pid, pid)),
                list(map(ids.setdefault, tid, tid)), start]

    def _categorize(self, name: str, cat: str | None) -> str:
        """host_ops.category of a framework event (cached per (name, cat))."""
        if name.startswith("ProfilerStep#"):
            category = "user_annotation"
        elif "dataloader" in name.lower():
            category = "dataloader"
        elif cat is None or cat == "cpu_op":
            category = "cpu_op"
        elif cat in ("python_function", "user_annotation"):
            category = cat
        else:
            category = "other"
        self._framework_cat[(name, cat)] = category
        return category

    def _label(self, v: Any) -> str | None:
        """A short repeated arg value (task type, transport ...) as one shared str."""
        if type(v) is str:
            return self._names.setdefault(v, v) if v else None
        return _text(v)

    def _blob(self, raw: msgspec.Raw) -> str | None:
        """Raw JSON text of an arg (Input Dims ...) as one shared str per distinct value."""
        if not len(raw):
            return None
        b = bytes(raw)
        s = self._blobs.get(b)
        if s is None:
            s = self._blobs[b] = b.decode("utf-8", "replace")
        return s

    def _labels(self, values: Sequence[Any]) -> list[str | None]:
        """`_label` of every value of a column."""
        if _STR_OR_NONE.issuperset(map(type, values)):
            share = self._names.setdefault
            table = {v: share(v, v) if v else None for v in set(values)}
            return list(map(table.__getitem__, values))
        return [self._label(v) for v in values]

    def _host_arg_columns(self, raws: Sequence[Any], tids: Sequence[Any]) -> list[Sequence[Any]]:
        """(call stack, input dims JSON, input types JSON, connection id) columns from the raw args (None
        where the event has no args); `tids` is unused (the signature of the other `_*_arg_columns`)."""
        n = len(raws)
        stack: list[str | None] = [None] * n
        dims: list[str | None] = [None] * n
        types: list[str | None] = [None] * n
        conn: list[int | None] = [None] * n
        idx = [i for i, r in enumerate(raws) if r is not None]
        if idx:
            blob = self._blob
            args = _decode_args(_HOST_ARGS, [raws[i] for i in idx], _NO_HOST_ARGS)
            for i, a in zip(idx, args, strict=True):
                stack[i], dims[i], types[i], conn[i] = \
                    self.call_stack(a.call_stack, a.call_stack2), blob(a.input_dims), blob(a.input_type), \
                    as_int(a.connection_id)
        return [stack, dims, types, conn]

    def call_stack(self, stack: Any, stack2: Any) -> str | None:
        """A host event's call stack text ("Call stack", else "Call Stack"); notes that the trace has one."""
        s = _text(stack if stack is not None else stack2)
        if s is not None:
            self.out.with_stack = True
        return s

    def _hw_arg_columns(self, raws: Sequence[Any], tids: Sequence[Any]) -> list[Sequence[Any]]:
        """(task type, stream, task id, connection id) columns of Ascend Hardware tasks; the stream is Stream
        Id, else Physic Stream Id, else the tid."""
        args = _decode_args(_HW_ARGS, raws, HardwareArgs())
        # one comprehension per field: attribute reads in bytecode beat C-level getters / astuple here
        return self.hw_columns([a.task_type for a in args], [a.stream_id for a in args],
                               [a.physic_stream_id for a in args], [a.task_id for a in args],
                               [a.connection_id for a in args], tids)

    def hw_columns(self, task_type: list[Any], stream_id: list[Any], physic: list[Any], task_id: list[Any],
                   conn: list[Any], tids: Sequence[Any]) -> list[Sequence[Any]]:
        """The Hardware arg columns from the args' values as decoded."""
        stream = _ints(stream_id)
        if None in stream:
            phys = _ints(physic)
            stream = [s if s is not None else p if p is not None else as_int(t)
                      for s, p, t in zip(stream, phys, tids, strict=True)]
        return [self._labels(task_type), stream, _ints(task_id), _ints(conn)]

    def _comm_arg_columns(self, raws: Sequence[Any], tids: Sequence[Any]) -> list[Sequence[Any]]:
        """(size, transport, link, src, dst, bandwidth, connection id, message bytes) columns of Communication
        events; message bytes = count x element size (hcom_* ops)."""
        args = _decode_args(_COMM_ARGS, raws, CommArgs())
        return self.comm_columns([a.size for a in args], [a.transport for a in args], [a.link for a in args],
                                 [a.src for a in args], [a.dst for a in args], [a.bandwidth for a in args],
                                 [a.connection_id for a in args], [a.data_type for a in args],
                                 [a.count for a in args])

    def comm_columns(self, size: list[Any], transport: list[Any], link: list[Any], src: list[Any],
                     dst: list[Any], bw: list[Any], conn: list[Any], data_type: list[Any],
                     count: list[Any]) -> list[Sequence[Any]]:
        """The Communication arg columns from the args' values as decoded."""
        return [_ints(size), self._labels(transport), self._labels(link), _ints(src), _ints(dst), _floats(bw),
                _ints(conn), message_bytes(_ints(count), data_type)]

    def _other(self, ev: Event, ph: str) -> None:
        out = self.out
        if ph == "M":
            self._on_meta(ev)
        elif ph in _FLOW_PHASES:  # (taken inline by `_consume`)
            if ev.id is not None:
                cat = ev.cat or ev.name
                out.flow_rows.append((cat, ev.id, ph, ev.pid, ev.tid, ev.ts))
        elif ph == "C":
            if ev.name == "AI Core Freq":
                self._on_freq(ev)
        elif ph not in ("i", "I", "R"):
            out.n_unsupported_phase += 1

    def _on_meta(self, ev: Event) -> None:
        out = self.out
        try:
            args = _ANY.decode(ev.args)
        except msgspec.DecodeError:
            return
        if not isinstance(args, dict):
            return
        if ev.name == "process_name":
            pname = str(args.get("name", ""))
            out.process_names[ev.pid] = pname
            out.kinds[ev.pid] = _PROCESS_KINDS.get(pname.strip().lower(), SKIP)
        elif ev.name == "process_labels":
            out.process_labels[ev.pid] = str(args.get("labels", ""))
        elif ev.name == "thread_name":
            out.thread_names[(ev.pid, ev.tid)] = str(args.get("name", ""))

    def _on_freq(self, ev: Event) -> None:
        t = ts_ns(ev.ts)
        try:
            args = _ANY.decode(ev.args)
        except msgspec.DecodeError:
            return
        if t is None or not isinstance(args, dict):
            return
        mhz = as_float(args.get("MHz"))
        if mhz is None:  # other spellings: take the first numeric value
            mhz = next((x for x in map(as_float, args.values()) if x is not None), None)
        if mhz is not None:
            self.out.f_ts.append(t)
            self.out.f_mhz.append(mhz)

    def _finish(self) -> None:
        """Classify events whose process_name came after them, then transpose the row buffers."""
        pending, self._pending = self._pending, []
        out = self.out
        if pending:
            unknown = {ev.pid for ev in pending if ev.pid not in out.kinds}
            for pid in unknown:
                out.kinds[pid] = SKIP  # no process_name at all: only GC events (by cat) are kept
            out.n_unclassified += sum(1 for ev in pending if ev.pid in unknown
                                      and (ev.cat is None or ev.cat.lower() != "gc"))
            out.n_events -= len(pending)  # _consume counts them again
            self._consume(pending)
        done = set(self._parts)
        for fname in list(self._parts):
            parts = self._parts.pop(fname)  # (each field's pieces go as it is joined: not all twice at once)
            if fname in _INT64_FIELDS:
                setattr(out, fname, parts[0] if len(parts) == 1 else np.concatenate(parts))
            elif fname in _NULLABLE_INT_FIELDS:
                setattr(out, fname, _nullable_int_parts(parts))
            elif fname in _FLOAT_FIELDS:
                setattr(out, fname, np.concatenate([_float64_part(p) for p in parts]))
            else:
                setattr(out, fname, parts[0] if len(parts) == 1 else list(itertools.chain.from_iterable(parts)))
        for names in (_HOST_FIELDS, _HW_FIELDS, _COMM_FIELDS, _OVERLAP_FIELDS, _FLOW_FIELDS):
            for fname in names:
                if fname not in done:
                    setattr(out, fname, np.empty(0, dtype=np.int64) if fname in _INT64_FIELDS
                            else _nullable_int_parts([]) if fname in _NULLABLE_INT_FIELDS
                            else np.empty(0, dtype=np.float64) if fname in _FLOAT_FIELDS else ())


class _Released(tuple):
    """A `TraceColumns` field after its last reader ran (`_release`): any use of it is a bug."""

    def __len__(self) -> int:
        raise RuntimeError("a released trace column was read")

    def __iter__(self) -> Any:
        raise RuntimeError("a released trace column was read")

    def __getitem__(self, i: Any) -> Any:
        raise RuntimeError("a released trace column was read")


_RELEASED = _Released()


def _release(tr: TraceColumns, *prefixes: str) -> None:
    """Drop the trace's columns of these groups (h_: host, d_: device, c_: communication, fl_: flows) once
    the phase that turns them into tables or frames has run: ~37 MB of columns for a rank of 400k
    events would otherwise sit under every later phase."""
    for f in fields(tr):
        if f.name.startswith(prefixes):
            setattr(tr, f.name, _RELEASED)


def _last_boundary(buf: bytes) -> tuple[int, int] | None:
    """(end of the last complete top-level candidate element, start of the next) or None.

    A candidate is `}` + whitespace + `,` + whitespace + `{`; whether it really is top level is decided by
    decoding (see TraceParser.parse).
    """
    n = len(buf)
    end = n
    while True:
        k = buf.rfind(b"}", 0, end)
        if k < 0:
            return None
        j = k + 1
        while j < n and buf[j] in _WS:
            j += 1
        if j < n and buf[j] == 0x2C:  # ','
            j += 1
            while j < n and buf[j] in _WS:
                j += 1
            if j < n and buf[j] == 0x7B:  # '{'
                return k + 1, j
        end = k


# --------------------------------------------------------------------------------------------------------
# small converters


def _ma(data: np.ndarray, mask: np.ndarray) -> np.ma.MaskedArray:
    """A nullable int64 column: its data and its full NULL mask (both kept, not copied), which `RankTables`
    reads directly; `._data` / `._mask` give them back."""
    return np.ma.MaskedArray(data, mask=mask)


def _i64(values: Any) -> np.ma.MaskedArray:
    """pd.array(values, dtype="Int64") as a masked int64 array (a copy); lists of ints and None and integer
    arrays are converted here, anything else by pandas (imported only then: odd values, ints beyond int64,
    which raise pandas' own error)."""
    if isinstance(values, (list, tuple)):
        if _INT_OR_NONE.issuperset(map(type, values)):
            a = _int_array(values)
            if a is not None:
                return a
    elif isinstance(values, np.ndarray) and values.ndim == 1 and values.dtype.kind == "i":
        data = np.array(np.ma.getdata(values), dtype=np.int64)
        mask = np.array(np.ma.getmaskarray(values), dtype=bool) if isinstance(values, np.ma.MaskedArray) \
            else np.zeros(len(data), dtype=bool)
        return _ma(data, mask)
    import pandas as pd

    a = pd.array(values, dtype="Int64")
    return _ma(np.array(a._data, dtype=np.int64), np.array(a._mask, dtype=bool))


def _int_array(values: Sequence[int | None]) -> np.ma.MaskedArray | None:
    """Ints and None as a masked int64 array (with the data pandas puts under the mask, 1); None when a
    value is beyond int64."""
    try:
        if None in values:
            obj = np.array(values, dtype=object)
            mask = np.equal(obj, None)
            obj[mask] = 1
            data = obj.astype(np.int64)
        else:
            data = np.array(values, dtype=np.int64)
            mask = np.zeros(len(values), dtype=bool)
    except OverflowError:
        return None
    return _ma(data, mask)


def _i64_rows(values: Any, keep: np.ndarray) -> np.ma.MaskedArray:
    """`_i64(values)` of the rows where `keep` (a bool array) of a nullable int column: a masked int64 array
    (`_nullable_int_parts`), or a list of ints and None (as `_ints` makes) of which only those rows are
    converted. The other rows are converted too when one is not None: a value beyond int64 anywhere makes
    `_i64` of the whole column raise, and it still does."""
    if isinstance(values, np.ma.MaskedArray):
        return _ma(values._data[keep], values._mask[keep])
    a = _int_array(list(itertools.compress(values, keep.tolist())))
    if a is not None:
        others = list(itertools.compress(values, (~keep).tolist()))
        if others.count(None) == len(others) or _int_array(others) is not None:
            return a
    return _i64(values)[np.flatnonzero(keep)]


def _nullable_int_parts(parts: list[Any]) -> Any:
    """Parts of a nullable int column (masked int64 arrays, lists of ints and None) as one masked int64
    array; the list of all the values when one is beyond int64 (`_i64_rows` then raises as it did)."""
    arrays = [p if isinstance(p, np.ma.MaskedArray) else _int_array(p) for p in parts]
    if any(a is None for a in arrays):
        return list(itertools.chain.from_iterable(p.tolist() if isinstance(p, np.ndarray) else p for p in parts))
    if not arrays:
        return _ma(np.empty(0, dtype=np.int64), np.empty(0, dtype=bool))
    if len(arrays) == 1:
        return arrays[0]
    return _ma(np.concatenate([a._data for a in arrays]), np.concatenate([a._mask for a in arrays]))


def _float64_part(part: Any) -> np.ndarray:
    """A part of a float column (a float64 array, or a list of floats and None) as float64, NaN for none."""
    if isinstance(part, np.ndarray):
        return np.ma.filled(part, np.nan) if isinstance(part, np.ma.MaskedArray) else part
    return np.ma.filled(_float64(part), np.nan)


def _int32(values: Any) -> np.ma.MaskedArray:
    """Nullable ints for an INTEGER column; out-of-range values (msprof's 4294967295 = "none") become NULL."""
    a = _i64(values)
    data, mask = a._data, a._mask
    out_of_range = ((data < -INT32_MAX) | (data > INT32_MAX)) & ~mask
    if out_of_range.any():
        mask[out_of_range] = True
    return a


def _dec(v: Any) -> Decimal | None:
    """Decimal of a JSON number (decoded with float_hook=Decimal) or numeric string; None otherwise."""
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, Decimal):
        return v
    if isinstance(v, int):
        return Decimal(v)
    if isinstance(v, float):
        return Decimal(repr(v))
    if isinstance(v, str):
        try:
            d = Decimal(v.strip())
        except InvalidOperation:
            return None
        return d if d.is_finite() else None
    return None


def _scaled(v: Any, scale: int) -> int | None:
    """round(v * scale) for a Decimal-able value, exact (µs*1000 -> ns, ms*10^6 -> ns, MB*10^6 -> B)."""
    d = _dec(v)
    return None if d is None else int((d * scale).to_integral_value(ROUND_HALF_UP))


# communication*.json numbers: the helpers below give exactly what `_scaled` / `_dec` (the exact Decimal
# conversion) give, from the number's JSON text (float_hook=str) or from its float (`_scaled_floats`).
_F40 = float(1 << 40)
_INT_EXACT = 10**18                     # |int| * scale (<= 10^6) stays within Decimal's 28 digits
_PLAIN_TYPES = frozenset({str, int})    # what float() reads the same way _dec does (bool is not int here)
_JSON_NUMBER_RE = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")


class _NumbersAsText(Exception):
    """A communication*.json value that needs the numbers' text: a float that `_scaled_floats` cannot show
    exact (the file is read again with numbers as text), or a value whose meaning depends on how numbers are
    decoded, a number where text or an object is expected (read again with numbers as Decimal)."""


def _scaled_text(s: str, digits: int) -> int | None:
    """Exact s * 10**digits of a plain decimal numeral with at most `digits` decimals (the integer arithmetic
    Decimal does for it within its 28 digits), else None."""
    whole, dot, frac = s.partition(".")
    neg = whole[:1] == "-"
    if neg:
        whole = whole[1:]
    if not (whole.isascii() and whole.isdigit()) or (dot and not (frac.isascii() and frac.isdigit())) \
            or len(frac) > digits or len(whole) + digits > 28:
        return None
    n = int(whole) * 10**digits + (int(frac) * 10**(digits - len(frac)) if frac else 0)
    return -n if neg else n


def _scaled_fast(v: Any, scale: int, digits: int) -> int | None:
    """`_scaled(v, scale)` for scale = 10**digits, without Decimal for the usual values.

    float(text) is the correctly rounded double x' of the text's value x (|x' - x| <= |x|·2^-53), and
    p = fl(x'·scale) differs from x·scale by at most 2·|p|·2^-53 < 2^-12 while |p| < 2^40. So when p lies
    within 1e-3 of an integer N, x·scale lies within 1e-3 + 2^-12 of N and ROUND_HALF_UP(x·scale) = N: the
    float step is exact for every value with at most `digits` decimals below 2^40 / scale (all msprof
    writes: ms and MB with up to 6 decimals). Longer plain numerals (epoch µs) are scaled as integers; the
    rest (more decimals, exponents, text) goes through Decimal.
    """
    t = type(v)
    if t is str:
        try:
            p = float(v) * scale
        except ValueError:
            return _scaled(v, scale)
        if -_F40 < p < _F40:
            n = round(p)
            if abs(p - n) <= 1e-3:
                return n
        n = _scaled_text(v, digits)
        return n if n is not None else _scaled(v, scale)
    if t is int and -_INT_EXACT < v < _INT_EXACT:
        return v * scale
    return _scaled(v, scale)


def _plain_floats(values: list[Any]) -> np.ndarray | None:
    """float() of every value as float64 when all are str / int and parse, else None."""
    if not _PLAIN_TYPES.issuperset(map(type, values)):
        return None
    try:
        return np.fromiter(map(float, values), dtype=np.float64, count=len(values))
    except (ValueError, OverflowError):
        return None


def _scaled_ints(values: list[Any], scale: int, digits: int) -> list[int | None]:
    """[_scaled_fast(v, scale, digits) for v in values] with the float step (and its exactness test, see
    `_scaled_fast`) done for the whole column at once; None stays None (as `_scaled_fast` gives) and the
    others are converted together; plain numerals too large for the float step (epoch µs) are scaled as
    integers together (`_scaled_uniform`, `_scaled_texts`); the rest is converted one by one."""
    if None in values:
        at = [i for i, v in enumerate(values) if v is not None]
        out: list[int | None] = [None] * len(values)
        for i, n in zip(at, _scaled_ints([values[i] for i in at], scale, digits), strict=True):
            out[i] = n
        return out
    a = _plain_floats(values) if values else None
    if a is None:
        return [_scaled_fast(v, scale, digits) for v in values]
    with np.errstate(over="ignore", invalid="ignore"):  # inf / nan: not ok, converted one by one
        p = a * scale
        r = np.rint(p)
        ok = (np.abs(p - r) <= 1e-3) & (np.abs(p) < _F40)
    if not ok.any():  # (epoch µs: all too large for the float step) all as text, without the row indices
        out = _scaled_uniform(values, digits)
        if out is not None:
            return out
        out = _scaled_texts(values, digits)
        if None in out:
            out = [n if n is not None else _scaled_fast(v, scale, digits) for n, v in zip(out, values, strict=True)]
        return out
    out = np.where(ok, r, 0).astype(np.int64).tolist()
    if not ok.all():
        bad = np.flatnonzero(~ok).tolist()
        for i, n in zip(bad, _scaled_texts([values[i] for i in bad], digits), strict=True):
            out[i] = n if n is not None else _scaled_fast(values[i], scale, digits)
    return out


def _scaled_i64(values: list[Any], scale: int, digits: int) -> list[int | None]:
    """`_scaled_ints`, a result beyond int64 as None: communication*.json numbers that large (over 292
    years in ns, 9 exabytes) are not measurements, and would stop the rank's read as a column's value."""
    out = _scaled_ints(values, scale, digits)
    if any(v is not None and not _I64_MIN <= v <= _I64_MAX for v in out):
        out = [v if v is None or _I64_MIN <= v <= _I64_MAX else None for v in out]
    return out


@functools.cache
def _plain_numerals(digits: int, whole: int = 0) -> re.Pattern[str]:
    """Lines of plain decimal numerals that `_scaled_text(s, digits)` converts: an optional '-', 1 to
    `whole` (default 28 - digits) ASCII digits, and 1 to `digits` decimals after a '.'."""
    one = f"-?[0-9]{{1,{whole or 28 - digits}}}" + (f"(?:\\.[0-9]{{1,{digits}}})?" if digits else "")
    return re.compile(f"{one}(?:\n{one})*")


@functools.cache
def _fixed_numerals(decimals: int, whole: int) -> re.Pattern[str]:
    """Lines of plain decimal numerals with exactly `decimals` decimals (0: no '.') and 1 to `whole` digits
    before them (one of the shapes `_plain_numerals` matches)."""
    one = f"-?[0-9]{{1,{whole}}}" + (f"\\.[0-9]{{{decimals}}}" if decimals else "")
    return re.compile(f"{one}(?:\n{one})*")


def _scaled_uniform(values: list[Any], digits: int) -> list[int] | None:
    """`_scaled_texts(values, digits)` when every value is a plain numeral with the decimals of the first
    (a fixed format, as the epoch µs of communication.json): the digits without the dots times one power
    of ten (~3x faster than a power per value); None for any other column."""
    if not values or not _STR_ONLY.issuperset(map(type, values)):
        return None
    text = "\n".join(values)
    first = values[0]
    decimals = len(first) - first.index(".") - 1 if "." in first else 0
    if text.count("\n") != len(values) - 1 or decimals > digits \
            or not _fixed_numerals(decimals, 28 - digits).fullmatch(text):
        return None
    ints = map(int, text.replace(".", "").split("\n"))
    power = 10 ** (digits - decimals)
    return list(ints) if power == 1 else [n * power for n in ints]


def _scaled_texts(values: list[Any], digits: int) -> list[int | None]:
    """[_scaled_text(v, digits) if type(v) is str else None for v in values]; when every value is such a
    numeral (one regex match of all the lines), the integer arithmetic for all at once: the digits
    without the dot, times 10 ** (digits - decimals)."""
    if _STR_ONLY.issuperset(map(type, values)):
        text = "\n".join(values)
        if text.count("\n") == len(values) - 1 and _plain_numerals(digits).fullmatch(text):
            return [int(v.replace(".", "", 1)) * 10 ** (digits + 1 + v.index(".") - len(v)) if "." in v
                    else int(v) * 10 ** digits for v in values]
    return [_scaled_text(v, digits) if type(v) is str else None for v in values]


def _scaled_exact(values: list[float | None], scale: int) -> tuple[np.ndarray, np.ndarray]:
    """(round(v * scale) as int64, 0 where null; null mask) of numbers decoded as floats (None: null), when
    the float step is exact for every one of them (see `_scaled_fast`); else raises `_NumbersAsText`: the
    file is read again with numbers as text."""
    a = np.array(values, dtype=np.float64)  # None -> NaN (a JSON number is never NaN)
    with np.errstate(over="ignore", invalid="ignore"):
        p = a * scale
        r = np.rint(p)
        ok = (np.abs(p - r) <= 1e-3) & (np.abs(p) < _F40)
    nulls = np.isnan(a)
    if not (ok | nulls).all():
        raise _NumbersAsText
    return np.where(ok, r, 0).astype(np.int64), nulls


def _scaled_floats(values: list[float | None], scale: int, digits: int) -> list[int | None]:
    """`_scaled_ints` of numbers decoded as floats (None stays None), as `_scaled_exact` converts them."""
    data, nulls = _scaled_exact(values, scale)
    out: list[int | None] = data.tolist()
    for i in np.flatnonzero(nulls).tolist():
        out[i] = None
    return out


def _scaled_column(values: list[Any], scale: int, digits: int, typed: bool) -> np.ma.MaskedArray:
    """`_i64` of `_scaled_floats` (`typed`: numbers decoded as floats) or of `_scaled_ints` (as text); the
    floats without a list of ints in between."""
    if typed:
        return _ma(*_scaled_exact(values, scale))
    return _i64(_scaled_i64(values, scale, digits))


def _dec_float(v: Any) -> float | None:
    d = _dec(v)
    return float(d) if d is not None else None


def _dec_floats(values: list[Any]) -> list[float | None]:
    """[float(_dec(v)) or None for v in values]: float(text) is what float(Decimal(text)) gives (both round
    the same exact value correctly) whenever it is finite; other values go through `_dec`."""
    a = _plain_floats(values) if values else None
    if a is None:
        return [_dec_float(v) for v in values]
    out: list[float | None] = a.tolist()
    fin = np.isfinite(a)
    if not fin.all():
        for i in np.flatnonzero(~fin).tolist():
            out[i] = _dec_float(values[i])
    return out


# communication*.json entries, decoded into structs with only the keys this reader uses (see `_comm_json`).
# The typed decoding reads ms / MB / GB/s numbers as floats: msgspec rounds correctly, as float(text) and
# float(Decimal(text)) do (checked on 4 million random numbers, long mantissas and halfway cases included),
# and `_scaled_floats` checks that the integers it makes are exact. The start timestamp stays text: 19
# digits do not fit a float. The generic decoding fills the same structs with text (structs do not check
# their field types when built).


class _TimeInfo(msgspec.Struct, gc=False):
    start: Any = msgspec.field(default=None, name="Start Timestamp(us)")
    elapse: float | None = msgspec.field(default=None, name="Elapse Time(ms)")
    transit: float | None = msgspec.field(default=None, name="Transit Time(ms)")
    wait: float | None = msgspec.field(default=None, name="Wait Time(ms)")
    sync: float | None = msgspec.field(default=None, name="Synchronization Time(ms)")
    idle: float | None = msgspec.field(default=None, name="Idle Time(ms)")


class _Band(msgspec.Struct, gc=False):
    size: float | None = msgspec.field(default=None, name="Transit Size(MB)")
    transit: float | None = msgspec.field(default=None, name="Transit Time(ms)")
    bandwidth: float | None = msgspec.field(default=None, name="Bandwidth(GB/s)")
    large_packet_ratio: float | None = msgspec.field(default=None, name="Large Packet Ratio")
    distribution: Any = msgspec.field(default=None, name="Size Distribution")


class _OpInfo(msgspec.Struct, gc=False):
    time: _TimeInfo | None = msgspec.field(default=None, name="Communication Time Info")
    bands: dict[str, _Band] | None = msgspec.field(default=None, name="Communication Bandwidth Info")


class _Link(msgspec.Struct, gc=False):
    op_name: Any = msgspec.field(default=None, name="Op Name")
    transport: Any = msgspec.field(default=None, name="Transport Type")
    size: float | None = msgspec.field(default=None, name="Transit Size(MB)")
    transit: float | None = msgspec.field(default=None, name="Transit Time(ms)")
    bandwidth: float | None = msgspec.field(default=None, name="Bandwidth(GB/s)")


_NO_TIME_INFO = _TimeInfo()
# step -> kind -> op -> entry
_COMM_TYPED = msgspec.json.Decoder(dict[str, dict[str, dict[str, _OpInfo]]], float_hook=str)
_MATRIX_TYPED = msgspec.json.Decoder(dict[str, dict[str, dict[str, dict[str, _Link]]]], float_hook=str)


@dataclass
class CommRows:
    """communication.json gathered into columns: per op (its key is not "Total Op Info"), per transport of
    an op's bandwidth object and per packet bucket of a transport's "Size Distribution", in file order.
    Numbers not yet converted are raw: decoded as floats (the typed decodings) float lists (None: null)
    or float64 arrays (NaN: null), decoded as text lists of their text. Converted ones are exact ints
    within int64 (`_scaled_i64`): nullable int64 arrays, or lists of ints and None."""
    step: list[int | None]
    name: list[str]
    group: list[str | None]
    start: Any                      # converted: ns
    elapse: Sequence[Any]
    transit: Sequence[Any]
    wait: Sequence[Any]
    sync: Sequence[Any]
    idle: Sequence[Any]
    b_op: np.ndarray                # int64: the op (index) of each transport row
    b_name: list[str]
    b_size: Sequence[Any]
    b_transit: Sequence[Any]
    b_bw: Sequence[Any]
    b_lpr: Sequence[Any]
    p_band: np.ndarray              # int64: the transport row of each packet bucket
    p_packet: list[Any]             # its key (the packet size in MB, as text)
    p_count: Any                    # converted: its count, and its total time in ns
    p_total: Any


def _comm_gather(data: dict[str, Any], exact: bool, typed: bool) -> CommRows | None:
    """`CommRows` of communication.json decoded into `_OpInfo` structs (`typed`) or dicts; None: no op.
    A "Communication Time Info" that is not an object counts as absent."""
    ops: list[tuple[Any, ...]] = []
    band_ops: list[int] = []                   # the ops (index in ops) with a bandwidth object, and it
    band_infos: list[dict[str, _Band]] = []
    for step, op_key, info in _step_ops(data):
        if op_key == "Total Op Info":
            continue
        name, _, group = str(op_key).partition("@")
        if typed:
            ti = info.time if info.time is not None else _NO_TIME_INFO
            bw = info.bands
        elif not isinstance(info, dict):
            continue
        else:
            t = info.get("Communication Time Info")
            if type(t) is not dict:  # (a number, text or list here used to stop the rank's read)
                t = {}
            ti = _TimeInfo(t.get("Start Timestamp(us)"), t.get("Elapse Time(ms)"),
                           t.get("Transit Time(ms)"), t.get("Wait Time(ms)"),
                           t.get("Synchronization Time(ms)"), t.get("Idle Time(ms)"))
            bw = info.get("Communication Bandwidth Info") or {}
            if isinstance(bw, dict):
                bw = {str(k): _Band(b.get("Transit Size(MB)"), b.get("Transit Time(ms)"),
                                    b.get("Bandwidth(GB/s)"), b.get("Large Packet Ratio"),
                                    b.get("Size Distribution"))
                      for k, b in bw.items() if isinstance(b, dict)}
        if isinstance(bw, dict):
            band_ops.append(len(ops))
            band_infos.append(bw)
        ops.append((step, name, group or None, ti.start, ti.elapse, ti.transit, ti.wait, ti.sync,
                    ti.idle))
    if not ops:
        return None
    step, name, group, start, elapse, transit, wait, sync, idle = map(list, zip(*ops, strict=True))
    infos: list[_Band] = list(itertools.chain.from_iterable(map(dict.values, band_infos)))
    packets: list[tuple[int, Any, Any, Any]] = []
    for j, b in enumerate(infos):
        if isinstance(b.distribution, dict):
            packets += [(j, packet, ct[0], ct[1]) for packet, ct in b.distribution.items()
                        if isinstance(ct, list) and len(ct) >= 2]
    p_band, p_packet, p_count, p_total = map(list, zip(*packets, strict=True)) if packets else ([], [], [], [])
    return CommRows(step, name, group, _scaled_i64(start, 1000, 3), elapse, transit, wait, sync, idle,
                    np.repeat(np.array(band_ops, dtype=np.int64), list(map(len, band_infos))),
                    list(itertools.chain.from_iterable(band_infos)), [b.size for b in infos],
                    [b.transit for b in infos], [b.bandwidth for b in infos],
                    [b.large_packet_ratio for b in infos], np.array(p_band, dtype=np.int64), p_packet,
                    _scaled_i64(p_count, 1, 0), _scaled_i64(p_total, 1_000_000, 6))


def _comm_json_columns(data: dict[str, Any], exact: bool, typed: bool) -> tuple[
        dict[str, Any] | None, dict[str, Any] | None, dict[str, Any] | None, int]:
    """`comm_rows_columns` of `_comm_gather`."""
    rows = _comm_gather(data, exact, typed)
    return (None, None, None, 0) if rows is None else comm_rows_columns(rows, typed)


def _take(col: Any, rows: np.ndarray) -> Any:
    """col[rows] of a list or an array (a masked one keeps its mask)."""
    if isinstance(col, np.ndarray):
        return col[rows]
    return [col[j] for j in rows.tolist()]


def _nulls_of(values: Any) -> np.ndarray:
    """NULL mask of a converted column."""
    if isinstance(values, np.ma.MaskedArray):
        return np.ma.getmaskarray(values)
    return np.fromiter((v is None for v in values), dtype=bool, count=len(values))


_MOVED_TRANSPORTS = ("SDMA", "HCCS", "PCIE", "SIO", "RDMA")
_SUM_SAFE = 1 << 60  # sizes below this add up (four at most) within int64


def _bytes_moved(n_ops: int, ops_of: np.ndarray, names: list[str], sizes: Any) -> Any:
    """Per op, bytes moved = SDMA (the on-node total; else HCCS + PCIE + SIO) + RDMA of its kept transport
    rows (`ops_of`, `names`, `sizes`: ints), a transport's name compared upper-cased, its last row counting
    when an op repeats it; NULL for an op without a kept row. A nullable int64 array; a list when a size is
    beyond what int64 sums safely."""
    if isinstance(sizes, np.ndarray) and (not len(sizes) or np.abs(sizes).max() < _SUM_SAFE):
        upper = {t: t.upper() for t in set(names)}
        code_of = {t: _MOVED_TRANSPORTS.index(u) if u in _MOVED_TRANSPORTS else len(_MOVED_TRANSPORTS)
                   for t, u in upper.items()}
        codes = np.array([code_of[t] for t in names], dtype=np.int64)
        key = ops_of * (len(_MOVED_TRANSPORTS) + 1) + codes
        _, first_rev = np.unique(key[::-1], return_index=True)  # the last row of each (op, transport)
        last = len(key) - 1 - first_rev
        value = np.zeros((n_ops, len(_MOVED_TRANSPORTS) + 1), dtype=np.int64)
        has = np.zeros_like(value, dtype=bool)
        value[ops_of[last], codes[last]] = sizes[last]
        has[ops_of[last], codes[last]] = True
        sdma, hccs, pcie, sio, rdma = (value[:, k] for k in range(len(_MOVED_TRANSPORTS)))
        moved = np.where(has[:, 0], sdma, hccs + pcie + sio) + rdma
        mask = np.ones(n_ops, dtype=bool)
        mask[ops_of] = False
        return _ma(np.where(mask, 1, moved), mask)
    by_op: dict[int, dict[str, int]] = {}
    for i, tname, size in zip(ops_of.tolist(), names, list(sizes), strict=True):
        by_op.setdefault(i, {})[tname.upper()] = size
    out: list[int | None] = [None] * n_ops
    for i, by_name in by_op.items():
        onnode = by_name.get("SDMA")
        if onnode is None:
            onnode = sum(by_name.get(k, 0) for k in ("HCCS", "PCIE", "SIO"))
        total = onnode + by_name.get("RDMA", 0)
        out[i] = total if _I64_MIN <= total <= _I64_MAX else None
    return out


def comm_rows_columns(rows: CommRows, typed: bool) -> tuple[
        dict[str, Any] | None, dict[str, Any] | None, dict[str, Any] | None, int]:
    """(comm_ops, comm_bandwidth, comm_packets columns or None, ops skipped) of communication.json's rows.

    An op needs Start Timestamp(us) and Elapse Time(ms); its bandwidth rows are the transports with a size
    or a time, its bytes moved come from those (`_bytes_moved`), and a packet bucket is kept when its
    transport row is, with a size, count and total. Raw numbers become exact integers here
    (`_scaled_column`: floats raising `_NumbersAsText` when one cannot be shown exact, text through
    `_scaled_i64`).
    """
    step, name, group = rows.step, rows.name, rows.group
    n_ops = len(step)
    steps: Any = _int_array(step)
    if steps is None:  # (a step number beyond int64: the column stays a list)
        steps = step
    names, groups = _objects(name), _objects(group)
    elapse = _scaled_column(rows.elapse, 1_000_000, 6, typed)
    valid = ~_nulls_of(rows.start) & ~np.ma.getmaskarray(elapse)
    skipped = int(n_ops - valid.sum())

    moved: Any = None
    bands_out = packets_out = None
    if len(rows.b_name):
        of_op = rows.b_op
        sizes = _scaled_column(rows.b_size, COMM_MB_BYTES, 6, typed)
        times = _scaled_column(rows.b_transit, 1_000_000, 6, typed)
        sz, tm = np.ma.filled(sizes, 0), np.ma.filled(times, 0)
        kept = valid[of_op] & ((sz != 0) | (tm != 0))
        rws = np.flatnonzero(kept)
        if len(rws):
            ops_of = of_op[rws]
            b_names = _objects(rows.b_name)
            k_names = b_names[rws].tolist()
            moved = _bytes_moved(n_ops, ops_of, k_names, sz[rws])
            bw, lpr = _take(rows.b_bw, rws), _take(rows.b_lpr, rws)
            if not typed:
                bw, lpr = _dec_floats(bw), _dec_floats(lpr)
            no_null = np.zeros(len(rws), dtype=bool)
            bands_out = {"step": _take(steps, ops_of), "op_name": names[ops_of].tolist(),
                         "group_name": groups[ops_of].tolist(), "transport": k_names,
                         "size_bytes": _ma(sz[rws], no_null), "transit_ns": _ma(tm[rws], no_null.copy()),
                         "bandwidth_gbps": _float_column(bw, known=True),
                         "large_packet_ratio": _float_column(lpr, known=True)}
            if len(rows.p_band):
                distinct = list(dict.fromkeys(rows.p_packet))
                table = dict(zip(distinct, _scaled_i64(distinct, COMM_MB_BYTES, 6), strict=True))
                packet = [table[k] for k in rows.p_packet]
                keep = kept[rows.p_band] & ~np.fromiter((v is None for v in packet), dtype=bool, count=len(packet)) \
                    & ~_nulls_of(rows.p_count) & ~_nulls_of(rows.p_total)
                pk = np.flatnonzero(keep)
                if len(pk):
                    p_op = of_op[rows.p_band[pk]]
                    packets_out = {"step": _take(steps, p_op), "op_name": names[p_op].tolist(),
                                   "transport": b_names[rows.p_band[pk]].tolist(),
                                   "packet_bytes": _i64(_take(packet, pk)),
                                   "count": _i64(_take(rows.p_count, pk)),
                                   "total_ns": _i64(_take(rows.p_total, pk))}
    ops_out = None
    if skipped < n_ops:
        keep_ops = np.flatnonzero(valid)
        if moved is None:
            size = _ma(np.ones(len(keep_ops), dtype=np.int64), np.ones(len(keep_ops), dtype=bool))
        else:
            size = _i64(_take(moved, keep_ops))
        kept_names = names[keep_ops].tolist()
        start = rows.start
        ops_out = {"step": _int32(_take(step, keep_ops)), "name": kept_names,
                   "op_type": [collective_of(n) for n in kept_names], "group_name": groups[keep_ops].tolist(),
                   "start_ns": _i64(_take(start, keep_ops)), "elapse_ns": _i64(elapse[keep_ops]),
                   "transit_ns": _scaled_column(_take(rows.transit, keep_ops), 1_000_000, 6, typed),
                   "wait_ns": _scaled_column(_take(rows.wait, keep_ops), 1_000_000, 6, typed),
                   "sync_ns": _scaled_column(_take(rows.sync, keep_ops), 1_000_000, 6, typed),
                   "idle_ns": _scaled_column(_take(rows.idle, keep_ops), 1_000_000, 6, typed), "size_bytes": size}
    return ops_out, bands_out, packets_out, skipped


@dataclass
class MatrixRows:
    """communication_matrix.json gathered: per op kept (its links counted), and per link kept (a `src-dst`
    key, its op not an aggregate), in file order. Numbers as in `CommRows`."""
    op_steps: list[int | None]
    op_links: list[int]
    names: list[str]                # per link: its op key's name, and group (None: none)
    groups: list[str | None]
    src: Any                        # global ranks: int64 masked arrays (no NULL), or lists of ints
    dst: Any
    op_name: list[Any]              # raw "Op Name" / "Transport Type" values
    transport: list[Any]
    size: Sequence[Any]
    transit: Sequence[Any]
    bandwidth: Sequence[Any]


def _decimal_text(v: Any, exact: bool) -> str | None:
    """`_text` of a value as the Decimal decoding gives it; `exact=False` (numbers decoded as text) raises
    `_NumbersAsText` where that could differ: a numeral whose Decimal text is not itself, a list or object."""
    if not exact and (isinstance(v, (list, dict)) or (
            type(v) is str and _JSON_NUMBER_RE.fullmatch(v) and str(Decimal(v)) != v)):
        raise _NumbersAsText
    return _text(v)


def _decimal_texts(values: Sequence[Any], exact: bool) -> list[str | None]:
    """`_decimal_text` of each value, once per distinct value when all are str / None (names repeat; the
    types are checked on the distinct values)."""
    try:
        distinct = set(values)
    except TypeError:  # a list or an object: _decimal_text() raises on it
        return [_decimal_text(v, exact) for v in values]
    if _STR_OR_NONE.issuperset(map(type, distinct)):
        table = {v: _decimal_text(v, exact) for v in distinct}
        return list(map(table.__getitem__, values))
    return [_decimal_text(v, exact) for v in values]


def matrix_rows_columns(rows: MatrixRows, exact: bool, typed: bool) -> dict[str, Any]:
    """The links columns of communication_matrix.json's rows: Op Name (else the op key's name), transport
    as text, MB and ms as exact integer bytes and ns (`_scaled_column`), GB/s as float. `exact`: strings
    are the document's strings (the Decimal decoding, or a decoding that tells numbers from strings),
    else numbers decoded as text may hide among them (see `_decimal_text`)."""
    names, op_name = rows.names, rows.op_name
    # `Op Name` is nearly always the op key's name: then text(name) or name is the name itself (a value
    # equal to a str is a str: JSON gives no other type that compares equal to one)
    if op_name == names:
        if not exact:
            for n in set(names):
                _decimal_text(n, exact)  # raises where the Decimal decoding could differ
        op_col = names
    else:
        op_col = [o or n for o, n in zip(_decimal_texts(op_name, exact), names, strict=True)]
    step = _int_array(rows.op_steps)
    counts = rows.op_links
    return {
        "step": _ma(np.repeat(step._data, counts), np.repeat(step._mask, counts))
        if step is not None else [s for s, n in zip(rows.op_steps, counts, strict=True) for _ in range(n)],
        "op_name": op_col, "group_name": rows.groups, "src_rank": rows.src, "dst_rank": rows.dst,
        "transport": _decimal_texts(rows.transport, exact),
        "size_bytes": _scaled_column(rows.size, COMM_MB_BYTES, 6, typed),
        "transit_ns": _scaled_column(rows.transit, 1_000_000, 6, typed),
        "bandwidth_gbps": _float_column(rows.bandwidth if typed else _dec_floats(rows.bandwidth), known=True),
    }


def _int_pairs(pairs: list[tuple[int, int]]) -> tuple[np.ma.MaskedArray, np.ma.MaskedArray] | None:
    """The two int64 columns of (a, b) pairs of ints; None when a value is beyond int64."""
    try:
        a = np.fromiter(itertools.chain.from_iterable(pairs), dtype=np.int64, count=2 * len(pairs)).reshape(-1, 2)
    except OverflowError:
        return None
    no_null = np.zeros(len(a), dtype=bool)
    return _ma(a[:, 0].copy(), no_null), _ma(a[:, 1].copy(), no_null.copy())


def _float_column(values: list[float | None], known: bool = False) -> Any:
    """A list of floats / None (`known`: no need to check) as a float64 array (None -> NaN, which RankTables
    stores as NULL, as it does None and NaN in a list)."""
    if known or _FLOAT_OR_NONE.issuperset(map(type, values)):
        return np.array(values, dtype=np.float64)
    return values


def _jdump(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def _step_ops(data: dict[Any, Any]) -> Iterator[tuple[int | None, Any, Any]]:
    """(step number, op key, value) of a communication*.json document `{step: {kind: {op key: value}}}`;
    levels that are not objects are skipped."""
    for step_key, kinds in data.items():
        if not isinstance(kinds, dict):
            continue
        step = _step_number(str(step_key))
        for by_op in kinds.values():
            if isinstance(by_op, dict):
                for op_key, value in by_op.items():
                    yield step, op_key, value


def _step_number(key: str) -> int | None:
    """'step12' -> 12 (communication*.json step keys); None when the key carries no number."""
    m = _STEP_KEY_RE.search(key)
    return int(m.group(1)) if m else None


def _level(v: Any) -> str | None:
    """'ProfilerLevel.Level1' / 'Level1' -> 'Level1'."""
    if v in (None, ""):
        return None
    m = _LEVEL_RE.search(str(v))
    return m.group(1) if m else str(v)


@dataclass
class _Steps:
    """ProfilerStep windows sorted by start: ids, host start/end (ns)."""

    ids: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    start: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    end: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    @property
    def empty(self) -> bool:
        return self.ids.size == 0

    def of(self, t: np.ndarray) -> np.ndarray:
        """Step whose host window [start, end) contains t, else -1."""
        t = np.asarray(t, dtype=np.int64)
        if self.empty or t.size == 0:
            return np.full(t.shape, -1, dtype=np.int64)
        i = np.searchsorted(self.start, t, side="right") - 1
        ic = np.clip(i, 0, None)
        return np.where((i >= 0) & (t < self.end[ic]), self.ids[ic], -1)

    def of_device(self, t: np.ndarray) -> np.ndarray:
        """Like `of`, but device work that starts after its host step ended and before the next step began
        (the device lags the host) still belongs to the earlier step."""
        t = np.asarray(t, dtype=np.int64)
        if self.empty or t.size == 0:
            return np.full(t.shape, -1, dtype=np.int64)
        i = np.searchsorted(self.start, t, side="right") - 1
        ic = np.clip(i, 0, None)
        nxt = np.append(self.start[1:], self.end[-1])
        limit = np.maximum(self.end[ic], nxt[ic])
        return np.where((i >= 0) & (t < limit), self.ids[ic], -1)


@dataclass
class _Launches:
    """Launch links (`_RankReader.launch_flows`), parallel lists: correlation id, the host end (tid, ns) and
    the device end (pid, tid, ns) of each."""

    corr: list[int] = field(default_factory=list)
    s_tid: list[Any] = field(default_factory=list)
    s_ts: list[int] = field(default_factory=list)
    f_pid: list[Any] = field(default_factory=list)
    f_tid: list[Any] = field(default_factory=list)
    f_ts: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.corr)


def _op_types(names: list[str]) -> list[str]:
    """An hcom op's type: its name without the counter suffix (`hcom_allReduce__100_0_1` ->
    `hcom_allReduce_`), else the name. One regex pass over all the names joined by line (the same match
    per line as per name when no name holds a line break)."""
    text = "\n".join(names)
    if text.count("\n") != len(names) - 1:
        return [_HCOM_SUFFIX_RE.sub("", n) or n for n in names]
    return [t or n for t, n in zip(_HCOM_SUFFIX_LINES_RE.sub("", text).split("\n"), names, strict=True)]


def _short_names(names: list[Any]) -> list[str]:
    """Kernel names without a MindSpore `launch op/` prefix (only split when some name has a '/')."""
    s = list(map(str, names))
    if "/" not in "".join(s):
        return s
    return [n.rsplit("/", 1)[-1] for n in s]


def _first_rows(keys: Iterable[Any], rows: Sequence[int] | None = None) -> dict[Any, int]:
    """key -> its first row (0, 1, ... or `rows`), keys in order of first appearance."""
    first: dict[Any, int] = {}
    if rows is None:
        for j, key in enumerate(keys):
            first.setdefault(key, j)
    else:
        for j, key in zip(rows, keys, strict=True):
            first.setdefault(key, j)
    return first


def _first_matches(keys: Iterable[Any], first: dict[Any, int], rows: Sequence[int]) -> tuple[list[int], list[int]]:
    """(left rows, right rows) of an inner join of the first left row of each key (rows `rows`, keys
    `keys`) with `first` (key -> right row), in left order."""
    seen: set[Any] = set()
    left: list[int] = []
    right: list[int] = []
    for i, key in zip(rows, keys, strict=True):
        if key not in seen:
            seen.add(key)
            j = first.get(key)
            if j is not None:
                left.append(i)
                right.append(j)
    return left, right


def _factorize(values: Sequence[Any]) -> tuple[np.ndarray, list[Any]]:
    """pd.factorize(values, use_na_sentinel=False) of a column of ints and str (None ...): (code of each row,
    the distinct values by code), codes in order of first appearance. A column of int64 ints goes through
    numpy (np.unique, then the codes renumbered by first row); any other through a dict (pandas' hash table
    groups ints and str as a dict does: by ==, the first row's value kept)."""
    n = len(values)
    if isinstance(values, np.ndarray) and values.dtype == np.int64:
        arr = values
    elif n and _INT_ONLY.issuperset(map(type, values)):
        try:
            arr = np.array(values, dtype=np.int64)
        except OverflowError:
            arr = None
    else:
        arr = None
    if arr is not None:
        uniq, first, inv = np.unique(arr, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        renum = np.empty(len(order), dtype=np.intp)
        renum[order] = np.arange(len(order), dtype=np.intp)
        return renum[inv.reshape(-1)], uniq[order].tolist()
    index: dict[Any, int] = {}
    codes = np.fromiter((index.setdefault(v, len(index)) for v in values), dtype=np.intp, count=n)
    return codes, list(index)


def _pair_codes(a: Sequence[Any], b: Sequence[Any]) -> tuple[np.ndarray, list[tuple[Any, Any]]]:
    """(code of each row, the distinct (a, b) pairs by code) of two columns: each column factorized, then the
    two codes combined into one (no tuple per row)."""
    ca, ua = _factorize(a)
    cb, ub = _factorize(b)
    nb = max(len(ub), 1)
    codes, pairs = _factorize(ca.astype(np.int64) * nb + cb)
    return codes, [(ua[k // nb], ub[k % nb]) for k in pairs]


def _groups(codes: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(code, its rows ascending) of each distinct code (a stable sort, then the runs)."""
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    for rows in np.split(order, cuts) if len(order) else ():
        yield int(codes[rows[0]]), rows


def _comm_lane(tname: str | None) -> tuple[bool | None, str | None]:
    """(carries hcom ops, group hash) of a Communication thread from its name: "Group <hash> Communication"
    (or another "...communication..." name that is not a "Plane"); (None, None) without a name."""
    if tname is None:
        return None, None
    m = _GROUP_THREAD_RE.match(tname) if tname else None
    return (m is not None or ("communication" in tname.lower() and "plane" not in tname.lower()),
            m.group(1) if m else None)


def _nulls(n: int) -> np.ma.MaskedArray:
    """n NULLs as a masked int64 array."""
    return _ma(np.ones(n, dtype=np.int64), np.ones(n, dtype=bool))


def _put(a: np.ma.MaskedArray, rows: np.ndarray, values: np.ma.MaskedArray) -> np.ma.MaskedArray:
    """A copy of `a` with `values` at `rows`."""
    data, mask = a._data.copy(), a._mask.copy()
    data[rows], mask[rows] = values._data, values._mask
    return _ma(data, mask)


def _concat(a: Any, b: Any) -> Any:
    """Two columns of one kind (numpy arrays or masked int64 arrays) one after the other."""
    if isinstance(a, np.ma.MaskedArray):
        return _ma(np.concatenate([a._data, b._data]), np.concatenate([a._mask, b._mask]))
    return np.concatenate([a, b])


def _float64(values: list[float | None]) -> Any:
    """pd.array(values, dtype="Float64") of floats and None as a float64 array (None -> NaN: `RankTables`
    stores NaN as NULL, as pandas does); other values through pandas (imported only then)."""
    if _FLOAT_OR_NONE.issuperset(map(type, values)):
        return np.array(values, dtype=np.float64)
    import pandas as pd

    a = pd.array(values, dtype="Float64")
    return np.ma.MaskedArray(np.array(a._data, dtype=np.float64), mask=np.array(a._mask, dtype=bool))


def _int64s(col: np.ndarray) -> np.ndarray:
    """An int column of a `_Frame` without NULLs as int64."""
    return np.array(np.ma.getdata(col), dtype=np.int64)


def _interned(texts: list[Any]) -> list[Any]:
    """The same values with one object per distinct value."""
    seen: dict[Any, Any] = {}
    return list(map(seen.setdefault, texts, texts))


def _objects(col: Sequence[Any]) -> np.ndarray:
    """A column of scalars (str, int, None ...) as an object array (rows are then taken by index in C)."""
    a = np.empty(len(col), dtype=object)
    a[:] = col
    return a


def _na_steps(a: np.ndarray) -> np.ma.MaskedArray:
    """Step ids (-1 = none) as an INTEGER column: negative and out-of-range ids are NULL."""
    if not a.size:
        return _i64([])
    data = np.array(a, dtype=np.int64)
    mask = (data < 0) | (data > INT32_MAX)
    data[mask] = 1
    return _ma(data, mask)


# --------------------------------------------------------------------------------------------------------
# CSV through DuckDB: every column read as text, cleaned (trailing tabs, quotes, N/A) and converted in SQL

# The characters trimmed from every cell, as literals: binding `chr(9) || ...` cost ~0.3 ms per column per
# query, which on small files (step_trace_time: 2 rows, 9 columns) was most of the read.
_TRIM = " \t\r\n"
# DuckDB's CSV sniffer costs ~25 ms per file, as much as parsing a 600 KB kernel_details.csv, and the reader
# ran it twice per file (DESCRIBE, then SELECT); the header is read here instead (`_csv_header`) and every
# column is declared VARCHAR, which is what the sniffer was told to conclude anyway (all_varchar, header,
# delimiter and quoting given). strict_mode=false keeps its handling of ragged rows (null_padding: short
# rows padded, cells past the header dropped).
_CSV = ("read_csv(?, header=true, auto_detect=false, delim=',', quote='\"', escape='\"', null_padding=true, "
        "strict_mode=false, columns={columns})")


def _csv_header(path: Path) -> list[str]:
    """The column names DuckDB gives the header row of `path`: the cells (BOM dropped), an empty one named
    `column<i>`, a repeated one suffixed `_1`, `_2` .... Raises ValueError when there is no header row."""
    with path.open(encoding="utf-8-sig", newline="") as f:
        cells = next(csv.reader(f), None)
    if not cells:
        raise ValueError("no header row")
    names: list[str] = []
    seen: set[str] = set()
    for i, cell in enumerate(cells):
        name = cell or f"column{i}"
        base, k = name, 0
        while name in seen:
            k += 1
            name = f"{base}_{k}"
        seen.add(name)
        names.append(name)
    return names


# A CSV up to this size that
# has nothing DuckDB's reader treats specially is split here: the small per-rank files (step_trace_time,
# op_statistic, a short kernel_details) cost DuckDB 1-4 ms a query, ~10 ms of a small rank's ~75 ms, and a
# split 0.05-0.3 ms; above it, one Python str per cell costs more than DuckDB.
PLAIN_CSV_BYTES = 64 * 1024
# A line whose every field is either unquoted without a quote character, or wholly quoted (quotes
# doubled inside, no line break): both DuckDB and the csv module read such a line the same way.
_CSV_FIELD = r'(?:"(?:[^"\r\n]|"")*"|[^",\r\n]*)'
_CSV_LINE = re.compile(rf"{_CSV_FIELD}(?:,{_CSV_FIELD})*")


def _plain_csv(path: Path, header: list[str]) -> list[list[str | None]] | None:
    """The columns `read_csv` as `_CSV` configures it gives for `path` (cells as text, an empty cell NULL,
    a quoted empty one too), when the file is small and plain: UTF-8, '\n' or '\r\n' line ends, no empty
    line, every field unquoted or wholly quoted (`_CSV_LINE`), every row as many cells as the header.
    Anything else (None) is left to DuckDB, whose dialect (padding short rows, stray quotes or '\r',
    quoted line breaks) is the reference."""
    try:
        if path.stat().st_size > PLAIN_CSV_BYTES:
            return None
        text = path.read_bytes().decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    text = text.removeprefix("\ufeff")
    if "\x00" in text:
        return None
    if "\r" in text:
        text = text.replace("\r\n", "\n")
        if "\r" in text:
            return None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if not lines or "" in lines:
        return None
    if '"' in text:
        if not all(map(_CSV_LINE.fullmatch, lines)):
            return None
        rows = list(csv.reader(lines))
    else:
        rows = [line.split(",") for line in lines]
    width = len(header)
    if any(len(r) != width for r in rows):
        return None
    rows = rows[1:]
    return [[c if c else None for c in col] for col in zip(*rows, strict=True)] if rows else [[] for _ in header]


def _csv_source(names: list[str], parallel: bool = True) -> str:
    """The `read_csv` call of a CSV with these header names, every column VARCHAR. `parallel=False` for a
    file with line breaks inside quoted cells (operator_details.csv call stacks): DuckDB's parallel scanner
    refuses those together with null_padding."""
    cols = ", ".join("'" + n.replace("'", "''") + "': 'VARCHAR'" for n in names)
    src = _CSV.format(columns="{" + cols + "}")
    return src if parallel else src[:-1] + ", parallel=false)"


def _q(col: str) -> str:
    return '"' + col.replace('"', '""') + '"'


def _sql_text(col: str, quotes: bool = False) -> str:
    chars = _TRIM + ('"' if quotes else "")
    return f"NULLIF(NULLIF(trim({_q(col)}, '{chars}'), ''), 'N/A')"


def _sql_int(col: str) -> str:
    return f"TRY_CAST(round(TRY_CAST({_sql_text(col)} AS DOUBLE)) AS BIGINT)"


def _sql_float(col: str) -> str:
    return f"TRY_CAST({_sql_text(col)} AS DOUBLE)"


def _sql_ns(col: str) -> str:
    """Exact µs text -> ns: DECIMAL(38,3) keeps every digit of an absolute epoch µs value."""
    return f"TRY_CAST(round(TRY_CAST({_sql_text(col)} AS DECIMAL(38,3)) * 1000) AS BIGINT)"


def _sql_bytes(col: str, unit: int) -> str:
    return f"TRY_CAST(round(TRY_CAST({_sql_text(col)} AS DOUBLE) * {unit}) AS BIGINT)"


# A converted CSV column: (alias, CSV column, kind); the kind names its `_sql_*` conversion (`_sql_of`), which
# `_plain_column` reproduces in Python for plain cells.
_TEXT, _QTEXT, _INT, _NS, _FLOAT = "text", "qtext", "int", "ns", "float"
_I64_MIN, _I64_MAX = -(2 ** 63), 2 ** 63 - 1
Converted = tuple[str, str, str]


def _sql_of(alias: str, col: str, kind: str) -> str:
    conv = {_TEXT: _sql_text, _QTEXT: functools.partial(_sql_text, quotes=True), _INT: _sql_int, _NS: _sql_ns,
            _FLOAT: _sql_float}[kind]
    return f"{conv(col)} AS {alias}"


# Lines of plain float numerals: '-', up to 15 integer digits, up to 15 decimals. DuckDB's VARCHAR -> DOUBLE
# cast (fast_float) and Python's float() both round these correctly, to the same nearest double.
_PLAIN_FLOATS = re.compile(r"-?[0-9]{1,15}(?:\.[0-9]{1,15})?(?:\n-?[0-9]{1,15}(?:\.[0-9]{1,15})?)*")
# Lines of µs numerals with exactly 3 decimals (a subset of `_plain_numerals(3, 18)`).
_MILLI_NUMERALS = re.compile(r"-?[0-9]{1,18}\.[0-9]{3}(?:\n-?[0-9]{1,18}\.[0-9]{3})*")


def _plain_column(cells: list[str | None], kind: str, nulls: bool) -> Any:
    """The `_Frame` column DuckDB gives for the `_sql_of` conversion `kind` of VARCHAR `cells` (None: NULL),
    or None when a non-NULL cell (after trim and NULLIF) is not a plain numeral that both convert alike.
    `nulls`: whether `cells` may hold None.

    Text: a list. Numbers: int64 / float64 arrays, a masked int64 array when an integer column has NULLs
    (NaN marks them in a float column). int: at most 15 digits, no decimals (exact as DOUBLE, so round()
    keeps it); ns: at most 18 integer digits (absolute epoch µs have 16) and 3 decimals, scaled exactly as
    DECIMAL(38,3) does, when all fit BIGINT (DuckDB's TRY_CAST gives NULL for the others)."""
    chars = _TRIM + '"' if kind == _QTEXT else _TRIM
    texts = ([c if c is None else c.strip(chars) for c in cells] if nulls
             else list(map(str.strip, cells, itertools.repeat(chars))))  # type: ignore[arg-type]
    if "" in texts or "N/A" in texts:
        texts = [None if t == "" or t == "N/A" else t for t in texts]
    if kind in (_TEXT, _QTEXT):
        return texts
    present = [t for t in texts if t is not None]
    text = "\n".join(present)
    plain = {_INT: _plain_numerals(0, 15), _NS: _plain_numerals(3, 18), _FLOAT: _PLAIN_FLOATS}[kind]
    if present and (text.count("\n") != len(present) - 1 or not plain.fullmatch(text)):
        return None
    if kind == _NS and _MILLI_NUMERALS.fullmatch(text):
        # the usual export: 3 decimals everywhere, so the digits without the dot are the ns
        values: list[Any] = list(map(int, text.replace(".", "").split("\n")))
    else:
        values = (list(map(int, present)) if kind == _INT else _scaled_texts(present, 3) if kind == _NS
                  else list(map(float, present)))
    if kind == _NS and values and not (min(values) >= _I64_MIN and max(values) <= _I64_MAX):
        return None
    dtype = np.float64 if kind == _FLOAT else np.int64
    if len(present) == len(texts):
        return np.array(values, dtype=dtype)
    mask = np.array([t is None for t in texts], dtype=bool)
    data = np.full(len(texts), np.nan if kind == _FLOAT else 0, dtype=dtype)
    data[~mask] = values
    return data if kind == _FLOAT else _ma(data, mask)


class _Frame:
    """The columns of a CSV read, all of one length (what the reader took from a DataFrame): int64 arrays
    (masked, with a full mask, when a column has NULLs), float64 arrays (NaN: NULL), object arrays of
    str / None."""

    __slots__ = ("cols", "n")

    def __init__(self, cols: dict[str, np.ndarray], n: int) -> None:
        self.cols = cols
        self.n = n

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]

    def __setitem__(self, name: str, col: np.ndarray) -> None:
        self.cols[name] = col

    def __contains__(self, name: str) -> bool:
        return name in self.cols

    def __len__(self) -> int:
        return self.n

    def take(self, rows: np.ndarray) -> _Frame:
        return _Frame({c: v[rows] for c, v in self.cols.items()}, len(rows))

    def keep(self, *names: str) -> None:
        """Drop every column but `names` (a frame whose other columns were read for the last time)."""
        self.cols = {c: v for c, v in self.cols.items() if c in names}


def _isna(col: np.ndarray) -> np.ndarray:
    """NULL mask of a `_Frame` column."""
    if isinstance(col, np.ma.MaskedArray):
        return np.ma.getmaskarray(col)
    if col.dtype.kind == "f":
        return np.isnan(col)
    if col.dtype == object:
        return np.equal(col, None)
    return np.zeros(len(col), dtype=bool)


def _frame_column(a: np.ndarray) -> np.ndarray:
    """A column of DuckDB's `fetchnumpy()` as a `_Frame` column (the values `.df()` gives)."""
    if a.dtype.kind in "iu":
        if isinstance(a, np.ma.MaskedArray):
            mask = np.array(np.ma.getmaskarray(a), dtype=bool)
            return _ma(np.array(np.ma.getdata(a), dtype=np.int64), mask) if mask.any() else \
                np.array(np.ma.getdata(a), dtype=np.int64)
        return a.astype(np.int64, copy=False)
    if a.dtype.kind == "f":
        data = np.array(np.ma.getdata(a), dtype=np.float64)
        if isinstance(a, np.ma.MaskedArray):
            data[np.ma.getmaskarray(a)] = np.nan
        return data
    data = np.array(np.ma.getdata(a), dtype=object)
    if isinstance(a, np.ma.MaskedArray):
        data[np.ma.getmaskarray(a)] = None
    return data


# --------------------------------------------------------------------------------------------------------
# the rank reader


_DUCK = threading.local()   # .con, .pid: this thread's in-memory DuckDB (see _csv_cursor)
_ABANDONED: list[Any] = []  # databases inherited through fork(): never closed in the child


def _csv_cursor() -> duckdb.DuckDBPyConnection:
    """A new cursor on this thread's in-memory DuckDB, which runs the CSV reads of every rank.

    Creating a database costs ~20 ms, about as much as reading a rank's CSVs; a cursor costs nothing. Only
    read_csv queries run on it and nothing is stored in it, so ranks cannot see each other. The database
    lives as long as its thread; a process forked from this one makes its own (one copied by fork is left
    alone: its threads did not come along).
    """
    con = getattr(_DUCK, "con", None)
    if con is None or _DUCK.pid != os.getpid():
        if con is not None:
            _ABANDONED.append(con)
        con = _DUCK.con = duckdb.connect()
        _DUCK.pid = os.getpid()
    return con.cursor()


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
    reader = _RankReader(src)
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


class _RankReader:
    """One rank directory -> RankTables; each method reads one file and fills its tables/capabilities."""

    def __init__(self, src: RankSource) -> None:
        self.src = src
        self.root = Path(src.path)
        # a rank folder holds ASCEND_PROFILER_OUTPUT/; a bare copy of the deliverables is read where it is
        self.out = self.root / OUTPUT_DIR if (self.root / OUTPUT_DIR).is_dir() else self.root
        self.rank = src.rank if src.rank is not None else 0
        self.t = RankTables(self.rank)
        ms = src.format.startswith("ascend_ms") or self.root.name.endswith("_ascend_ms")
        self.framework = "mindspore" if ms else "pytorch"
        self._con: duckdb.DuckDBPyConnection | None = None  # (see `con`)
        self.framework_version: str | None = None
        self.profiler_level: str | None = None
        self.with_stack: bool | None = None
        self.profile_memory: bool | None = None
        self.gc_detect: bool = False
        self.aic_metrics: str | None = None
        self.world_size: int | None = None
        self.device: dict[str, Any] = {}
        self.groups: dict[str, dict[str, Any]] = {}      # group hash -> {group_name, pg_name, global_ranks}
        self.time_origin: int | None = None
        self.comm_task_cols: dict[str, Any] | None = None  # HCCL sub-tasks of the trace (Plane threads)
        self.device_tasks: dict[str, Any] = {}             # its device task candidates (device_ops)
        self._csv_columns: dict[Path, list[str]] = {}      # CSV -> its column names (resolve_csv)

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """A cursor on this thread's CSV database (`_csv_cursor`), made when a CSV first needs DuckDB: the C
        scanner reads the plain ones, and a database costs a process ~24 MB (a parse worker's own)."""
        if self._con is None:
            self._con = _csv_cursor()
        return self._con

    def close(self) -> None:
        if self._con is not None:
            self._con.close()

    # -- helpers --------------------------------------------------------------------------------------

    def rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def warn(self, path: Path, message: str) -> None:
        self.t.warn(f"{self.rel(path)}: {message}")

    def load_json(self, path: Path, *, numbers: Callable[[str], Any] | None = None) -> Any:
        """Decoded JSON, or None with a warning naming the file (empty / unreadable / invalid).

        `numbers` gets the text of every non-integer JSON number (msgspec float_hook: `Decimal` for exact
        values, `str` to convert them later); by default they are floats.
        """
        data = self._json_bytes(path)
        return None if data is None else self._decode_json(path, data, numbers)

    def _json_bytes(self, path: Path) -> bytes | None:
        """The bytes of a JSON file, or None with a warning (unreadable / empty)."""
        try:
            data = path.read_bytes()
        except OSError as e:
            self.warn(path, f"unreadable ({e.strerror}); skipped")
            return None
        if not data or data.isspace():
            self.warn(path, "empty file; skipped")
            return None
        return data

    def _decode_json(self, path: Path, data: bytes, numbers: Callable[[str], Any] | None) -> Any:
        """`load_json`'s decoding of the bytes of `path`."""
        try:
            if numbers is not None:
                return msgspec.json.Decoder(float_hook=numbers).decode(data)
            return msgspec.json.decode(data)
        except msgspec.DecodeError as e:
            self.warn(path, f"invalid JSON ({e}); skipped")
            return None
        except UnicodeDecodeError as e:  # msgspec's own error for a key that is not UTF-8
            self.warn(path, f"invalid JSON (not UTF-8 at byte {e.start}); skipped")
            return None

    def resolve_csv(self, path: Path, table: FileColumns, *, required: bool) -> Resolved | None:
        """Match a CSV header against its column table.

        A required file that is empty, unreadable or lacks required columns raises ProfileError; an optional
        one is skipped with a warning (None).
        """
        def fail(problem: str) -> None:
            if required:
                raise ProfileError(path, problem)
            self.warn(path, f"{problem}; skipped")

        if path.stat().st_size == 0:
            fail(f"empty file (0 bytes); {ANALYSE_HINT}")
            return None
        try:
            cols = _csv_header(path)
        except (OSError, ValueError, csv.Error) as e:  # UnicodeDecodeError is a ValueError
            fail(f"not a readable CSV ({str(e).splitlines()[0] if str(e) else type(e).__name__})")
            return None
        self._csv_columns[path] = cols
        res = table.resolve(cols)
        if res.missing_required:
            fail(f"missing required columns: {', '.join(res.missing_required)} "
                 f"(header: {', '.join(normalize_header(c) for c in cols[:12])}{' ...' if len(cols) > 12 else ''})")
            return None
        return res

    def query_csv(self, path: Path, select: list[str], *, required: bool = False) -> _Frame | None:
        """Run the converting SELECT over a CSV; a parse failure raises (required file) or warns (None)."""
        error = ""
        for parallel in (True, False):
            try:
                source = _csv_source(self._csv_columns[path], parallel)
                got = self.con.execute(f"SELECT {', '.join(select)} FROM {source}", [str(path)]).fetchnumpy()
                cols = {name: _frame_column(a) for name, a in got.items()}
                return _Frame(cols, len(next(iter(cols.values()))) if cols else 0)
            except duckdb.Error as e:
                error = str(e)
                if "parallel=false" not in error:  # the one failure the serial scanner does not have
                    break
        problem = f"cannot parse CSV: {error.splitlines()[0] if error else 'unknown error'}"
        if required:
            raise ProfileError(path, problem) from None
        self.warn(path, f"{problem}; skipped")
        return None

    def query_converted(self, path: Path, cols: list[Converted], *, required: bool = False) -> _Frame | None:
        """`query_csv` of the `_sql_of` conversions `cols`, converted in Python (`_plain_column`) when every
        cell allows it: DuckDB evaluating the ~25 conversions of a 1,600-row kernel_details.csv costs ~3x
        the plain read of its columns (~23 vs ~7 ms). Any other file (no rows, a cell that is not plain, a
        DuckDB error) goes through `query_csv`, which decides."""
        frame = None
        names = list(dict.fromkeys(col for _, col, _ in cols))
        header = self._csv_columns[path]
        plain = _plain_csv(path, header)
        if plain is not None:  # what DuckDB reads from it, without DuckDB's ~1-4 ms per query
            cells = {name: plain[header.index(name)] for name in names}
            nulls = {name: None in c for name, c in cells.items()}
        else:
            try:
                got = self.con.execute(f"SELECT {', '.join(map(_q, names))} FROM {_csv_source(header)}",
                                       [str(path)]).fetchnumpy()
            except duckdb.Error:
                got = {}
            # by position: DuckDB may rename result columns (its names are case-insensitive)
            arrays = dict(zip(names, got.values(), strict=True)) if len(got) == len(names) else {}
            cells = {name: a.tolist() for name, a in arrays.items()}  # masked (NULL) -> None
            nulls = {name: isinstance(a, np.ma.MaskedArray) for name, a in arrays.items()}
        if cells and len(cells[names[0]]):
            out = {}
            for alias, col, kind in cols:
                out[alias] = _plain_column(cells[col], kind, nulls[col])
                if out[alias] is None:
                    break
                if type(out[alias]) is list:  # text: one str per distinct value (names repeat every step)
                    out[alias] = _objects(_interned(out[alias]))
            else:
                frame = _Frame(out, len(out[cols[0][0]]))
        if frame is None:
            return self.query_csv(path, [_sql_of(*c) for c in cols], required=required)
        return frame

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
            _release(tr, "fl_")
            host = self.host_frame(tr, steps, pairs)
            _release(tr, "h_")
            self.t.settled()
        # the trace's device tasks and hcom ops, then its HCCL sub-tasks (their table done and gone before
        # the device_ops columns are built), then device_ops
        self.device_tasks, comm_ops = self._trace_device_tasks(tr, pairs)
        if tr is not None:
            _release(tr, "d_", "c_")
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
            from .mindspore_extra import read_ms_extras

            read_ms_extras(self.root, self.t)
        self.ranks_row(dev)
        return self.t

    # -- rank directory metadata ----------------------------------------------------------------------

    def profiler_info(self) -> None:
        named = self.root / f"profiler_info_{self.rank}.json"
        files = [named] if named.is_file() else sorted(self.root.glob("profiler_info*.json"))
        if not files:
            self.warn(self.root, "no profiler_info_{rank}.json: framework version, profiler level and "
                                 "with_stack unknown")
            return
        info = self.load_json(files[0])
        if not isinstance(info, dict):
            return
        if "ms_version" in info:
            self.framework = "mindspore"
        elif "torch_npu_version" in info:
            self.framework = "pytorch"
        self.framework_version = _text(info.get("torch_npu_version") or info.get("ms_version"))
        cfg = info.get("config") if isinstance(info.get("config"), dict) else {}
        exp = cfg.get("experimental_config") if isinstance(cfg.get("experimental_config"), dict) else {}
        common = cfg.get("common_config") if isinstance(cfg.get("common_config"), dict) else {}
        params = info.get("profiler_parameters") if isinstance(info.get("profiler_parameters"), dict) else {}
        self.profiler_level = _level(exp.get("_profiler_level") or params.get("profiler_level"))
        ws = common.get("with_stack", params.get("with_stack"))
        self.with_stack = bool(ws) if ws is not None else None
        pm = common.get("profile_memory", params.get("profile_memory"))
        self.profile_memory = bool(pm) if pm is not None else None
        # torch_npu records GC only when experimental_config._gc_detect_threshold is set: then "no GC
        # event" is a measurement, otherwise it is unknown.
        self.gc_detect = exp.get("_gc_detect_threshold") is not None
        self.aic_metrics = _text(exp.get("_aic_metrics") or params.get("aic_metrics"))
        if cfg:
            self.t.add("metadata", key="config", value_json=_jdump(cfg))
        if params:
            self.t.add("metadata", key="profiler_parameters", value_json=_jdump(params))
        for k in ("cann_version", "jit_level", "rank_size"):
            if info.get(k) is not None:
                self.t.add("metadata", key=k, value_json=_jdump(info[k]))
        if self.world_size is None:
            self.world_size = as_int(info.get("rank_size"))

    def profiler_metadata(self) -> None:
        path = self.root / "profiler_metadata.json"
        if not path.is_file():
            self.warn(self.root, "no profiler_metadata.json: environment variables, distributed args and "
                                 "parallel groups unknown")
            return
        md = self.load_json(path)
        if not isinstance(md, dict):
            return
        env = md.get("ENV_VARIABLES")
        if isinstance(env, dict):
            for name, value in env.items():
                # '' is how torch_npu records "unset"; keep it, never turn it into NULL
                self.t.add("env_vars", name=str(name), value="" if value is None else str(value))
            self.t.has("env")
        elif env is not None:
            self.warn(path, "ENV_VARIABLES is not an object; environment variables unknown")
        for k, v in md.items():
            if k != "ENV_VARIABLES":
                self.t.add("metadata", key=str(k), value_json=_jdump(v))
        da = md.get("distributed_args")
        if isinstance(da, dict) and as_int(da.get("world_size")) is not None:
            self.world_size = as_int(da.get("world_size"))
        pgi = md.get("parallel_group_info")
        if isinstance(pgi, dict):
            for gname, g in pgi.items():
                if not isinstance(g, dict):
                    continue
                ranks = [r for r in (as_int(x) for x in g.get("global_ranks") or []) if r is not None]
                self.groups[group_hash(str(gname))] = {"group_name": str(gname), "pg_name": g.get("group_name"),
                                                       "global_ranks": ranks}
            if self.groups:
                self.t.add("metadata", key="comm_groups", value_json=_jdump(self.groups))

    def device_info(self) -> None:
        files = sorted(p for p in self.root.glob("PROF_*/device_*/info.json*") if not p.name.endswith(".done"))
        if not files:
            self.warn(self.root, "no PROF_*/device_*/info.json.*: AI core counts and rated frequency unknown "
                                 "(block-dim and frequency checks not applicable)")
            return
        for f in files:
            di = self.load_json(f)
            if not isinstance(di, dict):
                continue
            devs = di.get("DeviceInfo") or [{}]
            d0 = devs[0] if isinstance(devs, list) and devs and isinstance(devs[0], dict) else {}
            dev_id = as_int(d0.get("id"))
            if dev_id is None and (m := re.search(r"device_(\d+)", f.parent.name)):
                dev_id = int(m.group(1))
            self.device = {"device_name": _text(di.get("platform_version")), "device_id": dev_id,
                           "ai_core_num": as_int(d0.get("ai_core_num")), "aiv_num": as_int(d0.get("aiv_num")),
                           "rated_freq_mhz": as_float(d0.get("aic_frequency"))}
            if self.device["ai_core_num"] is not None:
                self.t.has("core_counts")
            if self.device["rated_freq_mhz"]:
                self.t.has("rated_freq")
            return

    # -- kernel_details.csv ---------------------------------------------------------------------------

    def kernel_details(self) -> _Frame | None:
        """kernel_details.csv as a frame; a damaged file costs only itself when the trace or the step table can
        still give the rank its device data (ProfileError otherwise)."""
        try:
            return self._kernel_details()
        except ProfileError as e:
            others = [n for n in ("trace_view.json", "step_trace_time.csv") if (self.out / n).is_file()]
            if not others:
                raise
            self.warn(self.out / "kernel_details.csv", f"{e.problem}; skipped (kernel types, shapes and pipe "
                                                       f"ratios unknown; the rank keeps {' and '.join(others)})")
            return None

    def _kernel_details(self) -> _Frame | None:
        path = self.out / "kernel_details.csv"
        if not path.is_file():
            # msprof's op_summary carries the same columns under other names (ascend_columns.KERNEL_DETAILS)
            alt = sorted(self.root.glob("PROF_*/mindstudio_profiler_output/op_summary_*.csv"))
            if not alt:
                self.warn(path, "missing: kernel types, block dims, op state, shapes and pipe ratios unknown")
                return None
            self.warn(path, f"missing; using {self.rel(alt[0])} instead")
            path = alt[0]
        res = self.resolve_csv(path, KERNEL_DETAILS, required=True)
        if res is None:  # unreachable: a required file raises instead
            return None
        f = res.found
        sel: list[Converted] = [("name", f["name"], _TEXT), ("start_ns", f["start"], _NS), ("dur_ns", f["dur"], _NS)]
        sel += [(c, f[c], _INT) for c in ("step", "stream_id", "task_id", "block_dim", "mix_block_dim", "device_id")
                if c in f]
        sel += [(c, f[c], _TEXT) for c in ("op_type", "op_state", "task_type") if c in f]
        sel += [(c, f[c], _QTEXT) for c in ("input_shapes", "input_dtypes", "input_formats", "output_shapes",
                                              "output_dtypes") if c in f]
        ratios = [c for c in PIPE_RATIO_COLUMNS if c in f]
        sel += [(c, f[c], _FLOAT) for c in ratios]
        df = self.query_converted(path, sel, required=True)
        if df is None or not len(df):
            self.warn(path, "no rows (no kernels recorded)")
            return None
        bad = _isna(df["name"]) | _isna(df["start_ns"]) | _isna(df["dur_ns"])
        if bad.any():
            self.warn(path, f"{int(bad.sum())} of {len(df)} rows without a name, start or duration skipped")
            df = df.take(np.flatnonzero(~bad))
            if not len(df):
                return None
        n = len(df)
        # absent columns: all NULL
        for c in ("step", "stream_id", "task_id", "block_dim", "mix_block_dim", "device_id"):
            if c not in df:
                df[c] = _nulls(n)
        for c in ("op_type", "op_state", "task_type", "input_shapes", "input_dtypes", "input_formats",
                  "output_shapes", "output_dtypes"):
            if c not in df:
                df[c] = np.full(n, None, dtype=object)
        for c in PIPE_RATIO_COLUMNS:
            if c not in df:
                df[c] = np.full(n, np.nan)
        self.t.has("kernel_details")
        self._kernel_capabilities(path, res, df, ratios)
        dev_id = ~_isna(df["device_id"])
        if dev_id.any() and self.device.get("device_id") is None:
            self.device["device_id"] = int(np.ma.getdata(df["device_id"])[np.argmax(dev_id)])
        return df

    def _kernel_capabilities(self, path: Path, res: Resolved, df: _Frame, ratios: list[str]) -> None:
        f = res.found

        def any_value(c: str) -> bool:
            return not _isna(df[c]).all()

        if "op_state" in f and any_value("op_state"):
            self.t.has("op_state")
        elif "op_state" not in f:
            self.warn(path, "no OP State column (older CANN): operator state unknown, the dynamic-shape check "
                            "is not applicable")
        if "block_dim" in f and any_value("block_dim"):
            self.t.has("block_dim")
        elif "block_dim" not in f:
            self.warn(path, "no Block Dim / Block Num column: the block-dim check is not applicable")
        if "input_shapes" in f and any_value("input_shapes"):
            self.t.has("shapes")
        if "input_dtypes" in f and any_value("input_dtypes"):
            self.t.has("dtypes")
        if "input_shapes" not in f or "input_dtypes" not in f:
            self.warn(path, "no Input Shapes / Input Data Types columns (Level0 or record_shapes off): "
                            "shape and dtype checks are not applicable")
        if ratios and any(map(any_value, ratios)):
            self.t.has("pipe_ratios")
            self.t.add("metadata", key="kernel_metrics", value_json=_jdump("PipeUtilization"))
        else:
            arith = {normalize_header(c) for c in res.unknown} & set(ARITHMETIC_COLUMNS)
            if arith:
                self.warn(path, "PMU metrics are ArithmeticUtilization (aic_metrics), not PipeUtilization: "
                                "pipe ratios unknown, the no-bound check is not applicable")
                self.t.add("metadata", key="kernel_metrics", value_json=_jdump("ArithmeticUtilization"))
            else:
                self.warn(path, "no PMU pipe-ratio columns (Level0 or aic_metrics off): the no-bound check is "
                                "not applicable")

    # -- trace_view.json ------------------------------------------------------------------------------

    def trace(self) -> TraceColumns | None:
        path = self.out / "trace_view.json"
        if not path.is_file():
            self.warn(path, "missing: no host ops, steps, launch links, communication tasks or frequency samples")
            return None
        try:
            tr = TraceParser(path).parse()
        except ProfileError as e:
            # A damaged trace costs what it holds: the rank keeps its CSVs, step table and communication
            # files (read() refuses the rank only when nothing usable is left).
            self.warn(path, f"{e.problem.split(';')[0]}: skipped; no host ops, steps, launch links, "
                            "communication tasks or frequency samples")
            return None
        if tr.n_events == 0:
            self.warn(path, "no events")
        else:
            self.t.has("trace")
        if tr.n_unclassified:
            self.warn(path, f"{tr.n_unclassified} events on processes without a process_name were ignored")
        if tr.n_unsupported_phase:
            self.warn(path, f"{tr.n_unsupported_phase} events of unsupported phases (B/E/...) were ignored")
        if tr.n_bad_ts:
            self.warn(path, f"{tr.n_bad_ts} events without a readable ts were ignored")
        self.time_origin = tr.min_ts
        if self.device.get("device_id") is None:
            # without info.json the device index is in the hardware lane's label ("NPU 3")
            for pid, kind in tr.kinds.items():
                m = re.search(r"NPU\s*(\d+)", tr.process_labels.get(pid, "")) if kind == HARDWARE else None
                if m:
                    self.device["device_id"] = int(m.group(1))
                    break
        return tr

    def steps(self, tr: TraceColumns | None) -> _Steps:
        if tr is None:
            return _Steps()
        if not tr.steps:
            if tr.n_events:
                self.warn(self.out / "trace_view.json", "no ProfilerStep#N events (no profiler schedule): "
                                                        "per-step tables (steps, breakdown) are empty")
            return _Steps()
        seen: dict[int, tuple[int, int]] = {}
        for n, start, dur in tr.steps:
            if n in seen:
                self.warn(self.out / "trace_view.json", f"ProfilerStep#{n} appears twice; the first is kept")
                continue
            seen[n] = (start, start + dur)
        items = sorted(seen.items(), key=lambda kv: kv[1][0])
        return _Steps(np.array([k for k, _ in items], dtype=np.int64),
                      np.array([v[0] for _, v in items], dtype=np.int64),
                      np.array([v[1] for _, v in items], dtype=np.int64))

    def launch_flows(self, tr: TraceColumns) -> _Launches:
        """Host -> device flow pairs (async_npu, HostToDevice, ...), one per flow (cat, id) in the order of
        their first start event (the first start and the first end of a flow are paired).

        A flow is a launch link when its start is on a host process and its end on a device one; host-only
        flows (async_task_queue enqueue -> dequeue, fwdbwd) are left out. A few thousand flows per rank: one
        pass with dicts (a DataFrame, two drop_duplicates and a merge cost ~5x more).
        """
        pairs = _Launches()
        if not len(tr.fl_ts):
            return pairs
        kinds = tr.kinds
        starts: dict[tuple[Any, Any], int] = {}   # (cat, id) -> row of its first start on a host process
        ends: dict[tuple[Any, Any], int] = {}     # (cat, id) -> row of its first end on a device process
        for j, (key, ph, pid) in enumerate(zip(zip(tr.fl_cat, tr.fl_id, strict=True), tr.fl_ph, tr.fl_pid,
                                                     strict=True)):
            if ph == "s":
                if key not in starts and kinds.get(pid) in HOST_KINDS:
                    starts[key] = j
            elif ph == "f" and key not in ends and kinds.get(pid) in _DEVICE_KINDS:
                ends[key] = j
        # A sentinel id (UINT32_MAX, -1, UINT64_MAX) names no flow: pairing on it would join unrelated events.
        matched = [(key, s, ends[key]) for key, s in starts.items() if key in ends and not _sentinel_id(key[1])]
        if not matched:
            return pairs
        # Flow ids are opaque (HCCL's exceed int64: "55426082093320372223", as text or a number). An int64 id
        # is kept: it is the CANN connection id the DB export joins on, shared by a task's async_npu and
        # HostToDevice flows. Any other (cat, id) is interned after the largest, by first appearance.
        ids = [i if i is not None and _INT64_MIN <= i <= _INT64_MAX else None
               for i in (as_int(key[1]) for key, _, _ in matched)]
        if None in ids:
            base = max((i for i in ids if i is not None), default=-1) + 1
            first: dict[tuple[Any, Any], int] = {}
            ids = [i if i is not None else base + first.setdefault(key, len(first))
                   for i, (key, _, _) in zip(ids, matched, strict=True)]
        s_rows = [s for _, s, _ in matched]
        f_rows = [f for _, _, f in matched]
        ts = tr.fl_ts.tolist()
        pairs.corr = ids
        pairs.s_tid = [tr.fl_tid[j] for j in s_rows]
        pairs.s_ts = [ts[j] for j in s_rows]
        pairs.f_pid = [tr.fl_pid[j] for j in f_rows]
        pairs.f_tid = [tr.fl_tid[j] for j in f_rows]
        pairs.f_ts = [ts[j] for j in f_rows]
        self.t.has("correlation")
        return pairs

    def host_frame(self, tr: TraceColumns, steps: _Steps, pairs: _Launches) -> dict[str, Any]:
        """Host ops with step, nesting depth and correlation id, as the host_ops columns (lists, int64 and
        masked int64 arrays; a DataFrame's text inference cost more than the rest of the columns).

        Depth and the launch binding come from one sweep per (pid, tid) track, ops sorted by (start, -dur)
        with a stack of open ops: the depth is the stack height; a flow start at time t binds to the innermost
        op open at t on every host track of the same OS thread (the torch op on the Python track and the
        `Node@launch` on the CANN track). ProfilerStep annotations never take a correlation id.
        """
        n = len(tr.h_name)
        start = np.array(tr.h_start, dtype=np.int64)
        dur = np.array(tr.h_dur, dtype=np.int64)
        end = start + dur
        track, tracks = _pair_codes(tr.h_pid, tr.h_tid)   # track = (pid, tid)
        points: dict[Any, list[tuple[int, int]]] = {}
        for tid, ts, c in zip(pairs.s_tid, pairs.s_ts, pairs.corr, strict=True):
            points.setdefault(tid, []).append((ts, c))
        for v in points.values():
            v.sort()
        depth = [0] * n
        corr: list[int | None] = [None] * n
        ann = [c == "user_annotation" for c in tr.h_cat]
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
        if not len(pairs):
            # Exports without launch flows: CANN events carry the launch id themselves (args.connection_id).
            # With flows, the flows alone decide: connection ids of other APIs (HCCL launches) may reuse
            # numbers of the flow id space.
            corr = list(tr.h_conn)
        tid_ints = [as_int(tid) for _, tid in tracks]
        host = {
            "name": list(tr.h_name), "category": list(tr.h_cat),
            # (converted once per track: the column's values, so a tid beyond int64 raises the same error)
            "tid": _i64(tid_ints)[track],
            "start_ns": start, "dur_ns": dur, "correlation_id": _i64(corr), "depth": _int32(depth),
            "input_dims": list(tr.h_dims), "input_types": list(tr.h_types), "call_stack": list(tr.h_stack),
            "step": _na_steps(steps.of(start)),
        }
        cats = set(tr.h_cat)
        if n:
            self.t.has("host_ops")
        if cats & {"cpu_op", "python_function", "user_annotation", "dataloader", "other"}:
            self.t.has("framework_ops")
        if "cann" in cats:
            self.t.has("cann_api")
        if "dataloader" in cats:
            self.t.has("dataloader")
        if "gc" in cats or self.gc_detect:
            self.t.has("gc")
        if tr.with_stack:
            self.t.has("with_stack", "call_stack")
        return host

    # -- device ops -----------------------------------------------------------------------------------

    def device_ops(self, kd: _Frame | None, host: dict[str, Any] | None, steps: _Steps) -> dict[str, np.ndarray]:
        """device_ops rows: kernel_details joined with the trace's device tasks (`device_tasks`, from
        `_trace_device_tasks`; taken, so they are freed once joined).

        The rows are the kernel_details rows (with the correlation id, group and missing stream of their
        trace task), then the trace tasks no row matched. Built as columns (numpy / lists): a few thousand
        rows per rank, where DataFrame copies, `.loc` writes and a concat cost more than the values.
        Returns the rows' step and start_ns (what `emit_steps` and `ranks_row` read).
        """
        cand, self.device_tasks = self.device_tasks, {}
        n_cand = len(cand["name"]) if cand else 0
        if kd is not None and n_cand:
            ki, ti = self._join(kd, cand)
            if len(ki) < len(kd):
                self.warn(self.out / "kernel_details.csv",
                          f"{len(kd) - len(ki)} of {len(kd)} rows have no matching device task in "
                          "trace_view.json (start time + name or stream/task id); they are kept without "
                          "launch links")
        else:
            ki = ti = np.empty(0, dtype=np.int64)
        if kd is None and not n_cand:
            return {"step": np.empty(0, dtype=np.int64), "start_ns": np.empty(0, dtype=np.int64)}
        n_kd = len(kd) if kd is not None else 0
        rest = np.ones(n_cand, dtype=bool)    # the trace tasks no kernel_details row matched
        rest[ti] = False
        rest = np.flatnonzero(rest)
        n_rest = len(rest)
        cols: dict[str, Any] = {}
        if kd is not None:
            k_stream = _i64(kd["stream_id"])
            k_corr = _nulls(n_kd)
            k_group = np.full(n_kd, None, dtype=object)
            if len(ki):
                k_corr = _put(k_corr, ki, cand["corr"][ti])
                k_group[ki] = cand["group_name"][ti]
                fill = k_stream._mask[ki]
                k_stream = _put(k_stream, ki[fill], cand["stream_id"][ti[fill]])
            k_name, k_type = kd["name"], kd["task_type"]
            cols = {"name": k_name, "op_type": kd["op_type"], "task_type": k_type,
                    "category": self._categories(k_type, k_name, "compute"), "stream_id": k_stream,
                    "start_ns": _int64s(kd["start_ns"]), "dur_ns": _int64s(kd["dur_ns"]),
                    "correlation_id": k_corr, "group_name": k_group, "size_bytes": _nulls(n_kd)}
        if n_rest:
            r_name, r_type = cand["name"][rest], cand["task_type"][rest]
            r_cols = {"name": r_name, "op_type": cand["op_type"][rest], "task_type": r_type,
                      "category": self._categories(r_type, r_name, "other"), "stream_id": cand["stream_id"][rest],
                      "start_ns": cand["start_ns"][rest], "dur_ns": cand["dur_ns"][rest],
                      "correlation_id": cand["corr"][rest], "group_name": cand["group_name"][rest],
                      "size_bytes": cand["size_bytes"][rest]}
            cols = {c: _concat(v, r_cols[c]) for c, v in cols.items()} if cols else r_cols
        category = cols["category"]
        # kernel_details Step Id: the kd rows' own, none for the trace's
        source = _concat(_i64(kd["step"]), _nulls(n_rest)) if kd is not None else _nulls(n_rest)
        step = self._device_steps(cols["start_ns"], cols["correlation_id"], source, host, steps)
        collective = [collective_of(str(n)) if c == "communication" else None
                      for n, c in zip(cols["name"].tolist(), category.tolist(), strict=True)]
        out = {"step": _na_steps(step), **cols, "collective": collective}
        if kd is not None:
            for c in ("block_dim", "mix_block_dim"):
                out[c] = _int32(_concat(_i64(kd[c]), _nulls(n_rest)))
            for c in ("op_state", "input_shapes", "input_dtypes", "input_formats", "output_shapes",
                      "output_dtypes"):
                out[c] = _concat(kd[c], np.full(n_rest, None, dtype=object))
            for c in PIPE_RATIO_COLUMNS:
                out[c] = _concat(np.array(kd[c], dtype=np.float64), np.full(n_rest, np.nan))
            kd.keep("op_type")  # (op_statistic's; the rest is in `out` now, not twice while it is typed)
        cand = r_cols = None  # (their columns are in `out`)
        self.t.extend("device_ops", out)
        self.t.has("device_ops")
        return {"step": step, "start_ns": cols["start_ns"]}

    def _trace_device_tasks(self, tr: TraceColumns | None,
                            pairs: _Launches | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Device task candidates from the trace (hcom ops, then Ascend Hardware tasks; a task with the name
        and start of an earlier one is dropped) and the hcom ops alone, as columns (object / int64 arrays,
        masked int64 arrays); the HCCL sub-tasks (Plane threads) go to `comm_task_cols`."""
        if tr is None:
            return {}, {}
        # (converted first, as the frame-based reader did: a value beyond int64 raises before any other)
        hw_stream, hw_task, hw_conn = _i64(tr.d_stream), _i64(tr.d_task_id), _i64(tr.d_conn)
        # Which Communication threads carry the ops: "Group <hash> Communication"; the others are "Plane N".
        # Decided once per thread (None: no thread name, then by the event name).
        thread, threads = _pair_codes(tr.c_pid, tr.c_tid)
        lanes = [_comm_lane(tr.thread_names.get(key)) for key in threads]
        lane_op = [op for op, _ in lanes]
        if None in lane_op:
            is_op = [name.startswith("hcom_") if op is None else op
                     for op, name in zip(map(lane_op.__getitem__, thread.tolist()), tr.c_name, strict=True)]
            op_mask = np.array(is_op, dtype=bool) if is_op else np.zeros(0, dtype=bool)
        else:
            op_mask = np.array(lane_op, dtype=bool)[thread]
            is_op = op_mask.tolist()
        # the ops and the tasks (Plane threads), each built from its own rows of the trace's columns (split
        # in C by itertools.compress; only the rows kept are converted)
        task_mask = ~op_mask
        is_task = task_mask.tolist()

        def of_ops(col: Sequence[Any]) -> list[Any]:
            return list(itertools.compress(col, is_op))

        def of_tasks(col: Sequence[Any]) -> list[Any]:
            return list(itertools.compress(col, is_task))

        c_start, c_dur = np.asarray(tr.c_start, dtype=np.int64), np.asarray(tr.c_dur, dtype=np.int64)
        op_names = of_ops(tr.c_name)
        n_ops, n_hw = len(op_names), len(tr.d_name)
        ops = {"pid": of_ops(tr.c_pid), "tid": of_ops(tr.c_tid), "name": op_names, "start_ns": c_start[op_mask],
               "dur_ns": c_dur[op_mask], "conn": _i64_rows(tr.c_conn, op_mask),
               "size_bytes": _i64_rows(tr.c_msg_bytes, op_mask),
               "group_name": _objects([group for _, group in lanes])[thread[op_mask]].tolist()}
        self.comm_task_cols = {
            "pid": of_tasks(tr.c_pid), "tid": of_tasks(tr.c_tid), "name": of_tasks(tr.c_name),
            "start_ns": c_start[task_mask], "dur_ns": c_dur[task_mask], "size": _i64_rows(tr.c_size, task_mask),
            "transport": of_tasks(tr.c_transport), "link": of_tasks(tr.c_link),
            "src": _i64_rows(tr.c_src, task_mask), "dst": _i64_rows(tr.c_dst, task_mask),
            "bw": tr.c_bw[task_mask], "thread": thread[task_mask], "threads": threads,
        }
        cand = {"pid": _objects(ops["pid"] + list(tr.d_pid)), "tid": _objects(ops["tid"] + list(tr.d_tid)),
                "name": _objects(op_names + list(tr.d_name)),
                "start_ns": np.concatenate([ops["start_ns"], np.asarray(tr.d_start, dtype=np.int64)]),
                "dur_ns": np.concatenate([ops["dur_ns"], np.asarray(tr.d_dur, dtype=np.int64)]),
                "task_type": _objects(["HCCL"] * n_ops + list(tr.d_task_type)),
                "stream_id": _concat(_nulls(n_ops), hw_stream), "task_id": _concat(_nulls(n_ops), hw_task),
                "conn": _concat(ops["conn"], hw_conn), "group_name": _objects(ops["group_name"] + [None] * n_hw),
                "op_type": _objects(_op_types(op_names) + [None] * n_hw),
                "size_bytes": _concat(ops["size_bytes"], _nulls(n_hw))}
        # an op present both as a Communication op and an Ascend Hardware task is one op (keep the former)
        starts = cand["start_ns"].tolist()
        keys = list(zip(cand["name"].tolist(), starts, strict=True))
        if len(set(keys)) < len(keys):
            first = _first_rows(keys)
            keep = np.fromiter(first.values(), dtype=np.int64, count=len(first))
            cand = {c: v[keep] for c, v in cand.items()}
            starts = cand["start_ns"].tolist()
        # launch links come from the flows; args.connection_id only when the export has no flows (see host_frame)
        if pairs is None or not len(pairs):
            cand["corr"] = cand["conn"]
        else:
            # the task a flow ends on: same pid, tid and start (the first flow of a place wins)
            corr_at: dict[tuple[Any, Any, int], int] = {}
            for place, c in zip(zip(pairs.f_pid, pairs.f_tid, pairs.f_ts, strict=True), pairs.corr, strict=True):
                corr_at.setdefault(place, c)
            cand["corr"] = _i64([corr_at.get(key) for key in zip(cand["pid"].tolist(), cand["tid"].tolist(),
                                                                  starts, strict=True)])
        return cand, ops

    @staticmethod
    def _join(kd: _Frame, cand: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """(kernel_details row, trace candidate) index pairs of the same task, one-to-one: the first row of
        each key on either side, in kernel_details order (what merging the deduplicated sides gives)."""
        # first: same start and short name. kernel_details names are never null here (rows without one are
        # dropped), so a null key of the trace never matches.
        t_start, k_start = cand["start_ns"], _int64s(kd["start_ns"])
        first = _first_rows(zip(t_start.tolist(), _short_names(cand["name"].tolist()), strict=True))
        ki, ti = _first_matches(zip(k_start.tolist(), _short_names(kd["name"].tolist()), strict=True),
                                first, range(len(kd)))
        # second chance: same start on the same stream with the same task id (names differ), among the rows
        # left with both ids
        if len(ki) < len(kd) and len(ti) < len(t_start):
            t_stream, t_task = cand["stream_id"], cand["task_id"]
            t_rows = ~(t_stream._mask | t_task._mask)
            t_rows[ti] = False
            t_rows = np.flatnonzero(t_rows)
            k_stream, k_task = _i64(kd["stream_id"]), _i64(kd["task_id"])
            k_rows = ~(k_stream._mask | k_task._mask)
            k_rows[ki] = False
            k_rows = np.flatnonzero(k_rows)
            if len(k_rows) and len(t_rows):
                second = _first_rows(zip(t_start[t_rows].tolist(), t_stream._data[t_rows].tolist(),
                                         t_task._data[t_rows].tolist(), strict=True), t_rows.tolist())
                ki2, ti2 = _first_matches(zip(k_start[k_rows].tolist(), k_stream._data[k_rows].tolist(),
                                              k_task._data[k_rows].tolist(), strict=True), second, k_rows.tolist())
                ki += ki2
                ti += ti2
        return np.array(ki, dtype=np.int64), np.array(ti, dtype=np.int64)

    @staticmethod
    def _categories(task_type: Sequence[Any], name: Sequence[Any], default: str) -> np.ndarray:
        """`task_category` of each row, computed once per distinct (task type, hcom_ name) pair; tasks typed
        "Other" (older CANN) per name, which is all that tells them apart."""
        types = [tt if isinstance(tt, str) else None for tt in task_type]
        keys = list(zip(types, [str(n) if tt is not None and tt.upper() == "OTHER" else str(n).startswith("hcom_")
                                for tt, n in zip(types, name, strict=True)], strict=True))
        table = {key: task_category(key[0], key[1] if isinstance(key[1], str) else "hcom_" if key[1] else "",
                                    default) for key in set(keys)}
        return _objects(list(map(table.__getitem__, keys)))

    def _device_steps(self, start: np.ndarray, corr: np.ma.MaskedArray, source: np.ma.MaskedArray,
                      host: dict[str, Any] | None, steps: _Steps) -> np.ndarray:
        """Step of each device op (-1 = none): kernel_details Step Id (`source`), else the step of the host
        op that launched it (`corr`), else the step its start falls in (see `_Steps.of_device`)."""
        out = steps.of_device(start)
        if host is not None and len(host["name"]):
            h_corr, h_step = host["correlation_id"], host["step"]
            ok = np.flatnonzero(~(h_corr._mask | h_step._mask)).tolist()
            by_corr: dict[int, tuple[int, int]] = {}
            if ok:
                for c, s, t in zip(h_corr._data[ok].tolist(), h_step._data[ok].tolist(),
                                   host["start_ns"][ok].tolist(), strict=True):
                    by_corr.setdefault(c, (s, t))
            if by_corr:
                linked = np.flatnonzero(~corr._mask)
                via = np.full(len(start), -1, dtype=np.int64)
                for i, c, t in zip(linked.tolist(), corr._data[linked].tolist(), start[linked].tolist(),
                                   strict=True):
                    hit = by_corr.get(c)
                    # a task cannot start before its launch: a link that says so is not trusted
                    if hit is not None and hit[1] <= t:
                        via[i] = hit[0]
                out = np.where(via >= 0, via, out)
        if not source._mask.all():
            known = set(steps.ids.tolist())
            vals = set(source._data[~source._mask].tolist())
            if known and not vals <= known:
                self.warn(self.out / "kernel_details.csv",
                          f"Step Id values {sorted(vals - known)[:5]} are not ProfilerStep numbers of the trace; "
                          "steps are taken from the trace instead")
            else:
                sv = np.where(source._mask, -1, source._data)
                out = np.where(sv >= 0, sv, out)
        return out.astype(np.int64)

    def emit_steps(self, steps: _Steps, dev: dict[str, np.ndarray]) -> None:
        """steps rows; the device window starts at the step's first device op (`dev`: step, start_ns)."""
        if steps.empty:
            return
        first: dict[int, int] = {}
        mine = dev["step"] >= 0
        if mine.any():
            ids, of_id = np.unique(dev["step"][mine], return_inverse=True)
            lo = np.full(len(ids), np.iinfo(np.int64).max, dtype=np.int64)
            np.minimum.at(lo, of_id, dev["start_ns"][mine])
            first = dict(zip(ids.tolist(), lo.tolist(), strict=True))
        for sid, s0, s1 in zip(steps.ids.tolist(), steps.start.tolist(), steps.end.tolist(), strict=True):
            d0 = first.get(sid)
            self.t.add("steps", step=sid, start_ns=s0, end_ns=s1, device_start_ns=d0,
                       device_end_ns=s1 if d0 is not None else None, kept=True)
        self.t.has("steps")

    # -- communication tasks, frequency, overlap ------------------------------------------------------

    def map_rank(self, group: str | None, local: Any) -> int | None:
        """Group-local rank -> global rank through parallel_group_info (unchanged when the group is unknown)."""
        r = as_int(local)
        if r is None or r < 0 or r > INT32_MAX:
            return None
        g = self.groups.get(group) if group else None
        if g and 0 <= r < len(g["global_ranks"]):
            return g["global_ranks"][r]
        return r

    def comm_tasks(self, ops: dict[str, Any], steps: _Steps) -> None:
        """HCCL sub-tasks (Plane threads) with the hcom op that encloses them on their group's op thread."""
        tasks, self.comm_task_cols = self.comm_task_cols, None
        if tasks is None or not len(tasks["start_ns"]):
            return
        start = tasks["start_ns"]
        n = len(start)
        op_name = np.full(n, None, dtype=object)
        op_group = np.full(n, None, dtype=object)
        op_step = np.full(n, -1, dtype=np.int64)   # step of the enclosing op, -1 = none
        if len(ops["name"]):
            o_start = ops["start_ns"]
            o_end = o_start + ops["dur_ns"]
            o_steps = steps.of_device(o_start)     # as their device_ops rows
            o_name, o_group = _objects(ops["name"]), _objects(ops["group_name"])
            of_thread: dict[tuple[Any, Any], list[int]] = {}   # op thread (pid, tid) -> its ops
            for j, key in enumerate(zip(ops["pid"], ops["tid"], strict=True)):
                of_thread.setdefault(key, []).append(j)
            threads: dict[Any, list[Any]] = {}
            for pid, tid in of_thread:
                threads.setdefault(pid, []).append(tid)
            # op thread -> its ops by start; quicksort, what pandas' sort_values ran, so that ops of equal start
            # come in the same order (the last of them encloses a task)
            by_start: dict[tuple[Any, Any], np.ndarray] = {}
            for code, rows in _groups(tasks["thread"]):
                pid, tid = tasks["threads"][code]
                cands = threads.get(pid, [])
                # a Plane thread follows its group's op thread in tid order
                below = [t for t in cands if isinstance(t, int) and isinstance(tid, int) and t < tid]
                gt = max(below) if below else (cands[0] if cands else None)
                if gt is None:
                    continue
                o = by_start.get((pid, gt))
                if o is None:
                    o = np.array(of_thread[(pid, gt)], dtype=np.int64)
                    o = by_start[(pid, gt)] = o[np.argsort(o_start[o], kind="quicksort")]
                ts = start[rows]
                i = np.searchsorted(o_start[o], ts, side="right") - 1
                ok = (i >= 0) & (ts < o_end[o][np.clip(i, 0, None)])
                rows, j = rows[ok], o[i[ok]]
                op_name[rows] = o_name[j]
                op_group[rows] = o_group[j]
                op_step[rows] = o_steps[j]
        step = np.where(op_step >= 0, op_step, steps.of_device(start))
        self.t.extend("comm_tasks", {
            "step": _na_steps(step), "op_name": op_name.tolist(), "name": tasks["name"],
            "start_ns": start, "dur_ns": tasks["dur_ns"], "size_bytes": tasks["size"],
            "transport": tasks["transport"], "link_type": tasks["link"],
            "src_rank": self._global_ranks(op_group, tasks["src"]),
            "dst_rank": self._global_ranks(op_group, tasks["dst"]),
            "bandwidth_gbps": tasks["bw"],
        })
        self.t.has("comm_tasks")

    def _global_ranks(self, groups: np.ndarray, local: np.ma.MaskedArray) -> np.ma.MaskedArray:
        """`map_rank(group, local)` of every row as an INTEGER column (`_int32` of it), a group at a time."""
        data = np.array(local._data, dtype=np.int64)
        mask = np.array(local._mask, dtype=bool) | (data < 0) | (data > INT32_MAX)
        for g in set(groups.tolist()):
            info = self.groups.get(g) if g else None
            ranks = info["global_ranks"] if info else None
            if not ranks:
                continue
            try:
                table = np.array(ranks, dtype=np.int64)
            except OverflowError:  # a global rank beyond int64: one row at a time
                return _int32([self.map_rank(g, x)
                               for g, x in zip(groups.tolist(), local.tolist(), strict=True)])
            sel = (groups == g) & ~mask & (data < len(table))
            data[sel] = table[data[sel]]
        mask |= (data < -INT32_MAX) | (data > INT32_MAX)
        data[mask] = 1
        return _ma(data, mask)

    def freq(self, tr: TraceColumns) -> None:
        if not tr.f_ts:
            return
        order = np.argsort(np.array(tr.f_ts, dtype=np.int64), kind="stable")
        self.t.extend("freq_samples", {"ts_ns": _i64(np.array(tr.f_ts, dtype=np.int64)[order]),
                                       "freq_mhz": np.array(tr.f_mhz, dtype=float)[order]})
        self.t.has("freq")

    def overlap(self, tr: TraceColumns, steps: _Steps) -> None:
        """Per-step sums of the profiler's own Overlap Analysis lanes (metadata `overlap_analysis`, ns).

        Kept for cross-checks only: the breakdown is recomputed from device ops, never copied from here.
        """
        if not tr.o_name or steps.empty:
            return
        # a (step x lane) table of int64 sums (wrapping as pandas' groupby sum does), steps and lanes sorted
        step = steps.of(np.array(tr.o_start, dtype=np.int64))
        mine = np.flatnonzero(step >= 0)
        lanes = [tr.o_name[i] for i in mine.tolist()]
        step_ids, of_step = np.unique(step[mine], return_inverse=True)
        names = sorted(set(lanes))
        of_name = np.array(list(map({n: j for j, n in enumerate(names)}.__getitem__, lanes)), dtype=np.int64)
        sums = np.zeros((len(step_ids), len(names)), dtype=np.int64)
        np.add.at(sums, (of_step, of_name), np.array(tr.o_dur, dtype=np.int64)[mine])
        rows = [{"step": sid, **dict(zip(names, r, strict=True))}
                for sid, r in zip(step_ids.tolist(), sums.tolist(), strict=True)]
        self.t.add("metadata", key="overlap_analysis", value_json=_jdump(rows))

    # -- other deliverables ---------------------------------------------------------------------------

    def step_trace_time(self) -> None:
        path = self.out / "step_trace_time.csv"
        if not path.is_file():
            self.warn(path, "missing: the vendor per-step breakdown (cross-check) is unavailable")
            return
        res = self.resolve_csv(path, STEP_TRACE_TIME, required=False)
        if res is None:
            return
        f = res.found
        names = ("computing", "comm_not_overlapped", "overlapped", "communication", "free", "stage", "bubble",
                 "preparing")
        df = self.query_converted(path, [("step", f["step"], _INT), *((c, f[c], _NS) for c in names if c in f)])
        if df is None:
            return
        if not len(df):
            self.warn(path, "no rows")
            return
        cols = {"step": _int32(df["step"])}
        for c, out in (("computing", "computing_ns"), ("comm_not_overlapped", "comm_not_overlapped_ns"),
                       ("overlapped", "overlapped_ns"), ("communication", "communication_ns"),
                       ("free", "free_ns"), ("stage", "stage_ns"), ("bubble", "bubble_ns"),
                       ("preparing", "preparing_ns")):
            if c in df:
                cols[out] = _i64(df[c])
        masks = [np.ma.getmaskarray(v) for k, v in cols.items() if k != "step"]
        short = int(np.logical_or.reduce(masks).sum()) if masks else 0
        if short:   # a cut row: its fields stay unknown (null), never 0
            self.warn(path, f"{short} row(s) with empty fields: those values are unknown for their steps")
        self.t.extend("vendor_step_trace", cols)
        self.t.has("vendor_step_trace")

    def communication(self) -> None:
        """communication.json -> comm_ops, comm_bandwidth, comm_packets ("Total Op Info" rows skipped).

        Decoded and converted as `_comm_json` describes, the rows added with one `extend` per table.
        """
        path = self.out / "communication.json"
        if not path.is_file():
            # Level0 never writes it; at any other level (or an unknown one) its absence loses data
            if self.profiler_level != "Level0" or self.world_size not in (None, 1) or self.groups:
                self.warn(path, "missing: per-op wait/transit times and bandwidth unknown")
            return
        res = self._comm_json(path, _COMM_TYPED, _comm_json_columns)
        if res is None:
            return
        ops, bands, packets, skipped = res
        if skipped:
            self.warn(path, f"{skipped} ops without Start Timestamp(us) / Elapse Time(ms) skipped")
        if bands:
            self.t.extend("comm_bandwidth", bands)
        if packets:
            self.t.extend("comm_packets", packets)
        if ops:
            self.t.extend("comm_ops", ops)
            self.t.has("comm_ops")
        self.t.has("comm_json")

    def _comm_json(self, path: Path, typed: msgspec.json.Decoder, columns: Callable[..., Any]) -> Any:
        """`columns(data, exact, typed)` of a communication*.json, or None with the warning `load_json` gives.

        The file is read whole, and three decodings, the first that works: (1) into `typed`'s structs (only the keys this reader uses, no
        dict per entry; ms / MB / GB/s numbers as floats, the rest as text), (2) generically into dicts with
        numbers as their text (float_hook=str: a third of the cost of Decimal), for a file of another shape or
        a float that cannot be shown exact, (3) with numbers as Decimal, as this reader always did, for a file
        whose meaning depends on how numbers decode (`_NumbersAsText`). Columns are converted a column at a
        time by the exact helpers (`_scaled_floats`, `_scaled_ints` ...).
        """
        data = self._json_bytes(path)
        if data is None:
            return None
        try:
            decoded = typed.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
            decoded = None  # the generic decoding below reports an invalid file
        if decoded is not None:
            # the structs keep nothing of the bytes: freed before the columns are built, the file is
            # read again in the rare fallback (a 46 MB communication.json: a 44 MB lower peak)
            del data
            try:
                return columns(decoded, False, True)
            except _NumbersAsText:
                del decoded
            data = self._json_bytes(path)
            if data is None:
                return None
        generic = self._decode_json(path, data, str)
        if generic is None:
            return None
        if not isinstance(generic, dict):
            self.warn(path, "not a JSON object; skipped")
            return None
        try:
            return columns(generic, False, False)
        except _NumbersAsText:
            return columns(self._decode_json(path, data, Decimal), True, False)

    def communication_matrix(self) -> None:
        """communication_matrix.json -> links; aggregate keys (-top1/-middle/-bottom/-total) are skipped.

        Decoded and converted as `_comm_json` describes; link keys are mapped to global ranks once per group
        and key.
        """
        path = self.out / "communication_matrix.json"
        if not path.is_file():
            if self.world_size not in (None, 1) or self.groups:
                self.warn(path, "missing: per-link bandwidth unknown")
            return
        res = self._comm_json(path, _MATRIX_TYPED, self._matrix_columns)
        if res is None:
            return
        cols, unmapped, bad_keys = res
        if cols is not None:
            self.t.extend("links", cols)
        if unmapped:
            self.warn(path, f"group(s) {', '.join(sorted(unmapped))[:120]} not in parallel_group_info: link ranks "
                            "kept as written (they may be group-local)")
        if bad_keys:
            self.warn(path, f"{bad_keys} link entries without a 'src-dst' key skipped")
        self.t.has("comm_matrix")

    def _matrix_columns(self, data: dict[str, Any], exact: bool,
                        typed: bool) -> tuple[dict[str, Any] | None, set[str], int]:
        """(links columns or None, unmapped groups, bad link keys) of communication_matrix.json, decoded into
        `_Link` structs (`typed`) or dicts.

        `exact=False` (numbers decoded as text) raises `_NumbersAsText` where the Decimal decoding could
        differ: a number as `Op Name` / `Transport Type` whose Decimal text is not its JSON text, or a list or
        object there.
        """
        links: list[_Link] = []
        ranks: list[tuple[int, int]] = []
        op_steps: list[int | None] = []    # per op, with its number of links
        op_links: list[int] = []
        names: list[str] = []
        groups: list[str | None] = []
        unmapped: set[str] = set()
        bad_keys = 0
        pairs_of: dict[str, dict[str, tuple[int, int] | None]] = {}  # group -> link key -> (src, dst) global
        known = self.groups
        for step, op_key, by_link in _step_ops(data):
            name, _, group = str(op_key).partition("@")
            # (an aggregate key has a '-': the regex only runs on those names)
            if op_key == "Total Op Info" or ("-" in name and _AGGREGATE_KEY_RE.search(name)) \
                    or not isinstance(by_link, dict):
                continue
            if group and group not in known and self._local_group(group, by_link):
                unmapped.add(group)
            pairs = pairs_of.get(group)
            if pairs is None:
                pairs = pairs_of[group] = {}
            if not by_link.keys() <= pairs.keys():  # (compared in C, without building a set)
                for lk in by_link.keys() - pairs.keys():
                    pairs[lk] = self._link_ranks(group, lk)
            sds = list(map(pairs.__getitem__, by_link))
            vals = list(by_link.values())
            if not typed:
                ok = [isinstance(v, dict) for v in vals]
                sds = [sd if good else None for sd, good in zip(sds, ok, strict=True)]
                vals = [_Link(v.get("Op Name"), v.get("Transport Type"), v.get("Transit Size(MB)"),
                              v.get("Transit Time(ms)"), v.get("Bandwidth(GB/s)")) if good else None
                        for v, good in zip(vals, ok, strict=True)]
            if None in sds:
                keep = [sd is not None for sd in sds]
                bad_keys += len(sds) - sum(keep)
                sds, vals = list(itertools.compress(sds, keep)), list(itertools.compress(vals, keep))
            n = len(vals)
            links += vals
            ranks += sds
            op_steps.append(step)
            op_links.append(n)
            names += [name] * n
            groups += [group or None] * n
        if not links:
            return None, unmapped, bad_keys
        rank = _int_pairs(ranks)
        rows = MatrixRows(op_steps, op_links, names, groups,
                          rank[0] if rank else [r[0] for r in ranks], rank[1] if rank else [r[1] for r in ranks],
                          [v.op_name for v in links], [v.transport for v in links], [v.size for v in links],
                          [v.transit for v in links], [v.bandwidth for v in links])
        return matrix_rows_columns(rows, exact, typed), unmapped, bad_keys

    def _link_ranks(self, group: str, key: str) -> tuple[int, int] | None:
        """(src, dst) global ranks of a `src-dst` link key of a group, None for a bad key."""
        m = _LINK_RE.match(str(key))
        if not m:
            return None
        src, dst = self.map_rank(group, m.group(1)), self.map_rank(group, m.group(2))
        return None if src is None or dst is None else (src, dst)

    def _local_group(self, group: str, links: dict[str, Any]) -> bool:
        """True when a group's link ranks cannot be mapped to global ranks (unknown group whose self link
        `r-r` is not this rank's global id)."""
        if not group or group in self.groups:
            return False
        for lk in links:
            m = _LINK_RE.match(str(lk))
            if m and m.group(1) == m.group(2):
                return int(m.group(1)) != self.rank
        return True

    def memory_record(self) -> None:
        path = self.out / "memory_record.csv"
        if not path.is_file():
            if self.profile_memory:
                self.warn(path, "missing although profile_memory was on: memory checks not applicable")
            return
        res = self.resolve_csv(path, MEMORY_RECORD, required=False)
        if res is None:
            return
        f = res.found
        sel = [f"{_sql_ns(f['ts'])} AS ts_ns"]
        sel.append(f"{_sql_text(f['component'])} AS component" if "component" in f else "NULL AS component")
        for kind in ("allocated", "reserved", "active"):
            if f"{kind}_mb" in f:
                sel.append(f"{_sql_bytes(f[f'{kind}_mb'], MEM_MB_BYTES)} AS {kind}_bytes")
            elif f"{kind}_kb" in f:
                sel.append(f"{_sql_bytes(f[f'{kind}_kb'], MEM_KB_BYTES)} AS {kind}_bytes")
            else:
                sel.append(f"CAST(NULL AS BIGINT) AS {kind}_bytes")
        df = self.query_csv(path, sel)
        if df is None:
            return
        rows = np.flatnonzero(~_isna(df["ts_ns"]))
        if not len(rows):
            self.warn(path, "no rows")
            return
        rows = rows[np.argsort(np.ma.getdata(df["ts_ns"])[rows], kind="stable")]
        df = df.take(rows)
        self.t.extend("memory_records", {"ts_ns": _i64(df["ts_ns"]), "component": df["component"],
                                         "allocated_bytes": _i64(df["allocated_bytes"]),
                                         "reserved_bytes": _i64(df["reserved_bytes"]),
                                         "active_bytes": _i64(df["active_bytes"])})
        self.t.has("memory_record", "memory")

    def op_statistic(self, kd: _Frame | None) -> None:
        """Cross-check kernel_details against op_statistic.csv (same counts per OP Type) - a cheap way to
        notice a truncated or filtered kernel_details.csv."""
        path = self.out / "op_statistic.csv"
        if not path.is_file() or kd is None:
            return
        res = self.resolve_csv(path, OP_STATISTIC, required=False)
        if res is None or _isna(kd["op_type"]).all():
            return
        f = res.found
        st = self.query_converted(path, [("op_type", f["op_type"], _TEXT), ("count", f["count"], _INT)])
        if st is None:
            return
        # per op type (sorted) the sum of its counts, wrapping at int64 as pandas' groupby sum does
        want: dict[str, int] = {}
        full = ~(_isna(st["op_type"]) | _isna(st["count"]))
        for t, c in zip(st["op_type"][full].tolist(), np.ma.getdata(st["count"])[full].tolist(), strict=True):
            want[t] = want.get(t, 0) + c
        want = {t: (want[t] + 2 ** 63) % 2 ** 64 - 2 ** 63 for t in sorted(want)}
        have: dict[str, int] = {}
        for t in kd["op_type"].tolist():
            if t is not None:
                have[t] = have.get(t, 0) + 1
        diff = [t for t in want if int(want[t]) != int(have.get(t, 0))]
        if diff:
            self.warn(path, f"op counts differ from kernel_details.csv for {len(diff)} op types "
                            f"(e.g. {diff[0]}: {int(want[diff[0]])} vs {int(have.get(diff[0], 0))}); "
                            "kernel_details.csv may be incomplete")

    def api_statistic(self) -> None:
        path = self.out / "api_statistic.csv"
        if not path.is_file():
            return
        res = self.resolve_csv(path, API_STATISTIC, required=False)
        if res is None:
            return
        f = res.found
        sel = [f"{_sql_text(f['api_name'])} AS api", f"{_sql_ns(f['time_us'])} AS time_ns",
               f"{_sql_int(f['count'])} AS count"]
        if "level" in f:
            sel.append(f"{_sql_text(f['level'])} AS level")
        df = self.query_csv(path, sel)
        if df is None:
            return
        values = {k: np.ma.getdata(v).tolist() for k, v in df.cols.items()}
        nulls = {k: _isna(v).tolist() for k, v in df.cols.items()}
        rows = [{k: (None if nulls[k][i] else (int(values[k][i]) if k in ("time_ns", "count") else values[k][i]))
                 for k in values} for i in range(len(df))]
        self.t.add("metadata", key="api_statistic", value_json=_jdump(rows))
        self.t.has("api_statistic")

    def operator_details(self, host: dict[str, Any]) -> None:
        """operator_details.csv `Call Stack` -> host_ops.call_stack for ops that have none, only where the op
        name has exactly one distinct stack (the file is aggregated, so an ambiguous name is left alone)."""
        path = self.out / "operator_details.csv"
        if not path.is_file():
            return
        res = self.resolve_csv(path, OPERATOR_DETAILS, required=False)
        if res is None:
            return
        self.t.has("operator_details")
        if "call_stack" not in res.found:
            return
        df = self.query_csv(path, [f"{_sql_text(res.found['name'])} AS name",
                                   f"{_sql_text(res.found['call_stack'], quotes=True)} AS stack"])
        if df is None:
            return
        # the names with one distinct stack (rows with both), and that stack
        first: dict[str, str] = {}
        distinct: dict[str, set[str]] = {}
        for name, stack in zip(df["name"].tolist(), df["stack"].tolist(), strict=True):
            if name is not None and stack is not None:
                first.setdefault(name, stack)
                distinct.setdefault(name, set()).add(stack)
        if not first:
            return
        one = {name: first[name] for name, s in distinct.items() if len(s) == 1}
        filled = False
        call_stack = host["call_stack"]
        for i, (stack, name) in enumerate(zip(call_stack, host["name"], strict=True)):
            if stack is None and name in one:
                call_stack[i] = one[name]
                filled = True
        if filled:
            self.t.has("call_stack")

    def operator_memory(self) -> None:
        path = self.out / "operator_memory.csv"
        if path.is_file() and self.resolve_csv(path, OPERATOR_MEMORY, required=False) is not None:
            self.t.has("operator_memory")

    def emit_host(self, host: dict[str, Any]) -> None:
        if len(host["name"]):
            self.t.extend("host_ops", host)

    def ranks_row(self, dev: dict[str, np.ndarray]) -> None:
        origin = self.time_origin
        if origin is None and len(dev["start_ns"]):
            origin = int(dev["start_ns"].min())
        stacks = "call_stack" in self.t.capabilities
        with_stack = (bool(self.with_stack) or stacks) if self.with_stack is not None else (stacks or None)
        d = self.device
        self.t.add("ranks", source_path=str(self.root), format=self.src.format, vendor="ascend",
                   framework=self.framework, framework_version=self.framework_version,
                   device_name=d.get("device_name"), device_id=d.get("device_id"), world_size=self.world_size,
                   ai_core_num=d.get("ai_core_num"), aiv_num=d.get("aiv_num"),
                   rated_freq_mhz=d.get("rated_freq_mhz"), profiler_level=self.profiler_level,
                   with_stack=with_stack, time_origin_ns=origin)
        if with_stack:
            self.t.has("with_stack")
