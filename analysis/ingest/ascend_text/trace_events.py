"""trace_view.json events: the typed structs msgspec decodes, and the exact conversion of their
numbers (µs text -> integer ns, opaque ids, sentinels)."""

from __future__ import annotations

import operator
import re
from collections.abc import Sequence
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np

from ..ascend_common import DTYPE_BYTES
from ..base import parse_us_to_ns

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


INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1


def sentinel_id(value: Any) -> bool:
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


DEVICE_KINDS = (HARDWARE, COMM)     # where a launch flow ends


PROCESS_KINDS: dict[str, int] = {
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


STEP_RE = re.compile(r"^ProfilerStep#(\d+)$")


WS = b" \t\r\n"


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


HOST_ARGS = msgspec.json.Decoder(HostArgs)


HW_ARGS = msgspec.json.Decoder(HardwareArgs)


COMM_ARGS = msgspec.json.Decoder(CommArgs)


ANY = msgspec.json.Decoder()


NO_HOST_ARGS = HostArgs()


# the same, for the args of many events at once (see decode_args)
_ARGS_LISTS = {id(d): msgspec.json.Decoder(list[t])
               for d, t in ((HOST_ARGS, HostArgs), (HW_ARGS, HardwareArgs), (COMM_ARGS, CommArgs))}


_FOURTH_LAST = operator.itemgetter(-4)


_DROP_DOT = operator.methodcaller("replace", ".", "", 1)


FLOW_PHASES = frozenset({"s", "f", "t"})


STR_ONLY = frozenset({str})


_FLOAT_ONLY = frozenset({float})


INT_OR_NONE = frozenset({int, type(None)})


INT_ONLY = frozenset({int})


STR_OR_NONE = frozenset({str, type(None)})


FLOAT_OR_NONE = frozenset({float, type(None)})


_NUMBER_OR_NONE = frozenset({int, float, type(None)})


ARGS_BATCH = 4096  # events whose args are decoded in one call (a few MB of text at most)


def decode_args(dec: msgspec.json.Decoder, raws: Sequence[msgspec.Raw], default: Any) -> list[Any]:
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


def start_ns_of(ts: Any) -> int | None:
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


def starts_ns(ts: Sequence[Any]) -> np.ndarray | list[int | None]:
    """[start_ns_of(t) for t in ts]; an int64 array when every ts is the usual µs string (`_milli_strings`),
    else the fast path for all at once (C-level maps) when every ts takes it."""
    if ts and STR_ONLY.issuperset(map(type, ts)):
        fixed = _milli_strings(ts)
        if fixed is not None:
            return fixed
        if min(map(len, ts)) > 4 and set(map(_FOURTH_LAST, ts)) == {"."}:
            try:
                return list(map(int, map(_DROP_DOT, ts)))
            except ValueError:
                pass
    return [start_ns_of(t) for t in ts]


def durs_ns(durs: Sequence[Any]) -> Any:
    """ns of µs durations: round(d * 1000) of a float (half to even), `dur_ns` of anything else; an int64
    array when all are finite floats (np.rint of the same product)."""
    if durs and _FLOAT_ONLY.issuperset(map(type, durs)):
        x = np.array(durs, dtype=np.float64) * 1000
        if np.isfinite(x).all() and np.abs(x).max() < 2.0**62:
            return np.rint(x).astype(np.int64)
    return [round(d * 1000) if type(d) is float else dur_ns(d) for d in durs]


def ints(values: list[Any]) -> list[int | None]:
    """[as_int(v) for v in values]; a column of ints and None is returned as it is."""
    if INT_OR_NONE.issuperset(map(type, values)):
        return values
    return [as_int(v) for v in values]


def floats(values: list[Any]) -> list[float | None]:
    """[as_float(v) for v in values] (a float column as it is)."""
    types = set(map(type, values))
    if types <= FLOAT_OR_NONE:
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


def text_or_none(v: Any) -> str | None:
    if v is None or v == "":
        return None
    return v if type(v) is str else str(v)


HOST_FIELDS = ("h_pid", "h_tid", "h_name", "h_cat", "h_start", "h_dur", "h_stack", "h_dims", "h_types",
                "h_conn")


HW_FIELDS = ("d_pid", "d_tid", "d_name", "d_start", "d_dur", "d_task_type", "d_stream", "d_task_id", "d_conn")


COMM_FIELDS = ("c_pid", "c_tid", "c_name", "c_start", "c_dur", "c_size", "c_transport", "c_link", "c_src",
                "c_dst", "c_bw", "c_conn", "c_msg_bytes")


OVERLAP_FIELDS = ("o_name", "o_start", "o_dur")


FLOW_FIELDS = ("fl_cat", "fl_id", "fl_ph", "fl_pid", "fl_tid", "fl_ts")


# Never-null integer columns: stored as int64 numpy arrays (8 bytes a value instead of a Python int object).
INT64_FIELDS = frozenset({"h_start", "h_dur", "d_start", "d_dur", "c_start", "c_dur", "o_start", "o_dur",
                           "fl_ts"})


START_FIELDS = frozenset({"h_start", "d_start", "c_start", "o_start"})  # the X events min_ts is taken from


# Communication argument columns joined into numpy by `_finish` (what `trace_device_tasks` takes rows of):
# nullable ints as masked int64 arrays (the list of values when one is beyond int64), bandwidth as float64
# (NaN: none).
NULLABLE_INT_FIELDS = frozenset({"c_size", "c_src", "c_dst", "c_conn", "c_msg_bytes"})


FLOAT_FIELDS = frozenset({"c_bw"})
