"""Kineto (PyTorch profiler) trace reader: one `.json` / `.json.gz` file -> one rank's normalized tables.

Parsing (fast, bounded memory):
  * the file is read in blocks (gzip is decompressed as it is read), so neither the whole text nor all
    events are held at once;
  * the `traceEvents` array is cut into pieces of ~512 KiB at top-level element boundaries: a cut is a
    `}` followed by `,`; the piece `[` + elements + `]` is decoded (in place, no copy) with one reusable typed
    `msgspec.json.Decoder` whose Structs keep only the fields stored here (ph, cat, name, pid, tid, ts,
    dur and a few args). A candidate cut that falls inside a string or a nested object cannot give a
    valid array, so a failed decode ending at the cut just means "try the previous `}`"; an error
    before the cut is real bad JSON and is reported with its byte offset;
  * the keys before `traceEvents` (deviceProperties, distributedInfo...) are parsed from the head, the
    keys after it (traceName, displayTimeUnit, baseTimeNanoseconds...) from the tail; a top-level JSON
    list of events is accepted too. Layouts the streaming path cannot handle (no `"traceEvents"` key
    in the first 64 MiB, or a key inside a string) fall back to decoding the whole file at once;
  * each decoded piece is folded at once into compact per-column numpy arrays (names interned to ids),
    then dropped; ts/dur become integer ns. Pieces are small on purpose: the ~1,600 events of a piece
    stay in the CPU cache while a dozen column passes run over them (8 MiB pieces cost ~40 % more).
    Interned texts (names, categories, call stacks) reach the store as `Coded` columns (ids + labels)
    and nullable ints as numpy masked arrays: no Python object per row, and no pandas in a parse worker.

Timestamps: Kineto `ts`/`dur` are µs, ints in older traces, floats with ns decimals in newer ones
(`displayTimeUnit` only says how a viewer displays them). A float µs value x is converted as
floor(x)·1000 + round(frac(x)·1000): exact for every ns-decimal value below 2^43 µs (~100 days of
steady clock, which is what Kineto writes next to `baseTimeNanoseconds`), and for integer µs up to
2^53. Stored times stay on the trace's own clock; `ranks.time_origin_ns` = first event +
`baseTimeNanoseconds` (when the trace has it) gives the epoch time for cross-rank alignment.

Tables filled: ranks, steps, device_ops, host_ops, comm_ops, metadata, memory_records, capabilities,
ingest warnings. Categories:
  * device_ops: cat kernel / gpu_memcpy / gpu_memset / cuda_sync (+ legacy Kernel, Memcpy, Memset) and
    MTIA `mtia_ccp_events`. `gpu_user_annotation` ranges are not device work (HTA leaves them out of its
    breakdown: they carry no `stream` arg) and are not stored. `category` comes from `classify_device_op`
    (HTA 0.5.0's COMPUTATION regex for compute; communication also by `ncclDevKernel`, `rccl`, `hccl`
    names and by a `Collective name` arg). `step` = the step of the correlated launch, else (no
    correlation, or launch not in the trace) the step containing the op's own start.
  * host_ops: cpu_op, user_annotation, cuda_runtime / cuda_driver (+ legacy Operator, Runtime),
    python_function, mtia_runtime; `depth` = nesting depth on the thread; `collective` and `msg_bytes`
    from record_param_comms args (In msg nelems × dtype size).
  * comm_ops: one row per communication device op (kernel), op_type from `Collective name` (on the
    kernel, or on the cpu op with the kernel's External id) else from the kernel name.

Steps and device windows (chosen so that breakdown totals over the kept steps equal HTA 0.5.0's
temporal breakdown, see metrics/breakdown.py):
  * a step is a host `ProfilerStep#N` event of any host category (`user_annotation`; `cpu_op` / legacy
    `Operator` in PyTorch 1.8; regex `ProfilerStep\\s*#\\s*(\\d+)`) on the thread that has most of them,
    the first event per step number (a step written twice counts once); GPU copies (`gpu_user_annotation`, AMD) are not steps. Host window =
    the annotation. With >= 2 steps the last one gets `kept=False` (HTA drops it: the profiler usually
    cuts it short). A trace without any ProfilerStep gets one step 0 spanning the whole trace.
  * HTA keeps (with >= 2 step names) only the device ops whose correlated CPU event starts before the
    cutoff = the latest start of any `ProfilerStep#` event (CPU or gpu_user_annotation), plus ops
    without correlation that start before it; its span is first start .. last end of the kept ops
    with a stream.
  * device windows tile that span: a kept step's window starts at the first kept device op of that
    step (the first kept step's window at the first kept op overall, even one launched before any
    step) and ends where the next kept step's window starts; the last kept step's window ends at the
    last kept op's end. Kept ops launched between steps, or in the dropped step (possible when the
    cutoff comes from a later gpu_user_annotation copy), thus fall in the previous step's window.
    A kept step without device ops gets an empty window. The dropped step's window runs from the end
    of the span to the end of the last device op. Ranks without device ops have NULL windows.
  * all device ops are stored, so other work can run inside the span: kernels launched before the
    trace started (their launch is missing, HTA drops them; 56 ms on trace_diff/test) and ops of the
    dropped step overlapping the last kept one. Over the windows, the breakdown equals HTA's numbers
    when it takes HTA's op set (`HTA_KEPT_DEVICE_OPS_SQL`); counting all ops gives the device's real
    busy time instead.

Capabilities: kernels, steps, correlation, record_shapes, with_stack, nccl_msg_sizes, block_dim,
memory, comm_ops; never `gc` (Kineto does not record Python GC).
"""

from __future__ import annotations

import contextlib
import gc
import re
import zlib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import lru_cache
from pathlib import Path
from typing import Any, BinaryIO, ClassVar, Union

import msgspec
import numpy as np

from ..metrics.comm_kinds import comm_kernel_name, comm_launcher_name, comm_streams, launched_inside
from .base import Coded, ProfileError, RankSource, RankTables

# --------------------------------------------------------------------------------------------------
# Name tables
# --------------------------------------------------------------------------------------------------

#: Host APIs that enqueue device work (their `correlation` equals the device op's). Used to pick the
#: launch among several host events sharing a correlation id, and by launch / queue metrics.
LAUNCH_APIS: frozenset[str] = frozenset({
    # CUDA runtime / driver (driver calls come from Triton and other JITs)
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cuLaunchKernel", "cuLaunchKernelEx",
    "cuLaunchCooperativeKernel", "cudaMemcpyAsync", "cudaMemcpy", "cudaMemcpy2DAsync",
    "cudaMemcpyPeerAsync", "cudaMemcpyToSymbolAsync", "cudaMemcpyFromSymbolAsync", "cudaMemsetAsync",
    "cudaMemset", "cudaGraphLaunch", "cuGraphLaunch", "cuMemcpyAsync", "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2", "cuMemsetD8Async", "cuMemsetD32Async",
    # ROCm / HIP
    "hipLaunchKernel", "hipExtLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel",
    "hipLaunchCooperativeKernel", "hipMemcpyAsync", "hipMemcpyWithStream", "hipMemcpy", "hipMemsetAsync",
    "hipMemset", "hipGraphLaunch", "hipMemcpyDtoDAsync", "hipMemcpyHtoDAsync", "hipMemcpyDtoHAsync",
    # MTIA
    "runFunction", "runFunction - job_prep_and_submit_for_execution", "enqueueCommand memcpyHtoDAsync",
    "enqueueCommand memcpyDtoHAsync",
})

_STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")

#: The device ops of one rank that HTA 0.5.0 keeps for its temporal breakdown and comm/comp overlap, as
#: SQL over the normalized tables (bind the rank as the only parameter; yields start_ns, dur_ns, category).
#: HTA counts only ops with a stream and, when a last step was dropped, only ops whose correlated host
#: event starts before that step (ops without a correlation: by their own start; Event / Context Sync:
#: always). Device windows tile exactly the span of these ops, but other ops can run inside that span:
#: kernels launched before the trace started (HTA drops them: their launch is missing) and ops of the
#: dropped step overlapping the last kept one. A breakdown that must equal HTA's numbers (hta_compat)
#: restricts itself to these ops; the plain breakdown counts all device work in the windows. The cutoff
#: here is the dropped step's start; HTA also considers later gpu_user_annotation ProfilerStep copies,
#: which are not stored (no difference on the reference traces).
HTA_KEPT_DEVICE_OPS_SQL = """
SELECT d.start_ns, d.dur_ns, d.category
FROM device_ops d
WHERE d.rank = $1 AND d.stream_id IS NOT NULL AND (
    NOT EXISTS (SELECT 1 FROM steps s WHERE s.rank = d.rank AND NOT s.kept)
    OR (d.correlation_id IS NULL AND (d.name IN ('Event Sync', 'Context Sync')
        OR d.start_ns < (SELECT max(s.start_ns) FROM steps s WHERE s.rank = d.rank)))
    OR EXISTS (SELECT 1 FROM host_ops h
               WHERE h.rank = d.rank AND h.correlation_id = d.correlation_id
                 AND h.start_ns < (SELECT max(s.start_ns) FROM steps s WHERE s.rank = d.rank)))
"""

# Device-op classification. HTA 0.5.0: COMMUNICATION `^nccl.*Kernel`; MEMORY `^Memcpy|^Memset|^dma`;
# COMPUTATION = not matching `^nccl.*Kernel|.*Memcpy|^Memset|.*Sync`; OTHER = the rest. We keep its
# compute set exactly (so compute time matches) and widen communication to RCCL/HCCL/ncclDevKernel names
# and to kernels carrying a `Collective name` arg.
_MEMORY_RE = re.compile(r"^(hip)?Memcpy|^(hip)?Memset|^dma")
_SYNC_RE = re.compile(r"^Stream Wait Event|^(Stream|Event|Context|Device) Sync|^event_(wait|record)$")
# names HTA (0.5.0 + v0.6.1 exclusions) does not count as computation
_NOT_COMPUTE_RE = re.compile(r"^nccl.*Kernel|.*Memcpy|^Memset|.*Sync|^Stream Wait Event|cuda.*LaunchKernel|"
                             r"^runFunction")

_DEVICE_CATS: dict[str, str] = {
    "kernel": "kernel", "Kernel": "kernel", "gpu_memcpy": "gpu_memcpy", "Memcpy": "gpu_memcpy",
    "gpu_memset": "gpu_memset", "Memset": "gpu_memset", "cuda_sync": "cuda_sync",
    "mtia_ccp_events": "mtia_ccp_events",
}
_HOST_CATS: dict[str, str] = {
    "cpu_op": "cpu_op", "Operator": "cpu_op", "user_annotation": "user_annotation",
    "cuda_runtime": "runtime", "Runtime": "runtime", "mtia_runtime": "runtime", "cuda_driver": "driver",
    "python_function": "python_function",
}
_DEVICE_TASKS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "mtia_ccp_events")
_HOST_CATEGORIES = ("cpu_op", "user_annotation", "runtime", "driver", "python_function", "dataloader")
_DEVICE_CODE = {c: _DEVICE_TASKS.index(t) for c, t in _DEVICE_CATS.items()}
_HOST_CODE = {c: _HOST_CATEGORIES.index(t) for c, t in _HOST_CATS.items()}
_H_USER_ANN = _HOST_CATEGORIES.index("user_annotation")
_H_CPU_OP = _HOST_CATEGORIES.index("cpu_op")
_H_RUNTIME = _HOST_CATEGORIES.index("runtime")
_H_DRIVER = _HOST_CATEGORIES.index("driver")
_H_PYTHON = _HOST_CATEGORIES.index("python_function")
_H_DATALOADER = _HOST_CATEGORIES.index("dataloader")
_D_KERNEL = _DEVICE_TASKS.index("kernel")
_D_MTIA = _DEVICE_TASKS.index("mtia_ccp_events")
# HTA counts these as GPU work even without a correlation id
_HTA_SYNC_NAMES = frozenset({"Event Sync", "Context Sync"})
# complete-event categories that are read on purpose and not stored: the profiler's own span, flows drawn
# as spans by some exporters, CUPTI range-profiler counters
_IGNORED_CATS = frozenset({"Trace", "ac2g", "fwdbwd", "async_cpu_to_gpu", "async_gpu", "cuda_profiler_range",
                           "gpu_user_annotation"})

#: bytes per element of the c10 ScalarType names PyTorch writes in the `dtype` arg
DTYPE_BYTES: dict[str, int] = {
    "Byte": 1, "Char": 1, "Bool": 1, "QInt8": 1, "QUInt8": 1, "QUInt4x2": 1, "QUInt2x4": 1, "Bits1x8": 1,
    "Bits2x4": 1, "Bits4x2": 1, "Bits8": 1, "Float8_e5m2": 1, "Float8_e4m3fn": 1, "Float8_e5m2fnuz": 1,
    "Float8_e4m3fnuz": 1, "Float8_e8m0fnu": 1, "UInt8": 1, "Int8": 1,
    "Short": 2, "Half": 2, "BFloat16": 2, "UInt16": 2, "Bits16": 2, "ComplexHalf": 4,
    "Int": 4, "Float": 4, "QInt32": 4, "UInt32": 4,
    "Long": 8, "Double": 8, "ComplexFloat": 8, "UInt64": 8,
    "ComplexDouble": 16,
}
# c10::DeviceType codes in [memory] events
_DEVICE_TYPE_NAMES = {0: "cpu", 1: "cuda", 6: "hip", 12: "xpu", 13: "mps", 19: "mtia", 20: "privateuse1"}

_COLLECTIVE_KERNEL_RE = re.compile(r"(?:nccl|rccl|hccl)(?:Dev)?Kernel_([A-Za-z]+)", re.I)
_OLD_NCCL_KERNEL_RE = re.compile(r"^nccl([A-Z][A-Za-z]+?)(?:Ring|Tree|CollNet|NVLS|PAT)", re.S)
_OP_TYPES = {
    "allreduce": "allreduce", "allgather": "allgather", "allgatherintotensor": "allgather",
    "reducescatter": "reducescatter", "reducescattertensor": "reducescatter", "broadcast": "broadcast",
    "alltoall": "alltoall", "alltoallv": "alltoall", "alltoallbase": "alltoall", "send": "send",
    "recv": "receive", "receive": "receive", "sendrecv": "sendrecv", "reduce": "reduce", "gather": "gather",
    "scatter": "scatter", "barrier": "barrier", "allgatherbase": "allgather", "reducescatterbase":
    "reducescatter", "allgathercoalesced": "allgather", "reducescattercoalesced": "reducescatter",
    "allreducecoalesced": "allreduce",
}

_WS = frozenset(b" \t\r\n")
_BLOCK = 512 << 10        # bytes read (decompressed) per read call
_PIECE = 512 << 10        # target size of one decoded piece of the traceEvents array (see below)
_HEAD_LIMIT = 64 << 20    # how far to look for the "traceEvents" key before decoding the whole file
_MAX_CUT_TRIES = 64
_BYTE_RE = re.compile(r"\(byte (\d+)\)")
_EPOCH_US = 10**15        # µs timestamps above this (Sep 2001) are on the epoch clock
TIME_LIMIT_US = 9e15      # |ts| and |dur| below this (µs) fit int64 ns; an event beyond it is skipped


# --------------------------------------------------------------------------------------------------
# Decoding types: only the fields we store. gc=False: these never form cycles, so the cyclic GC need
# not track (and repeatedly scan) hundreds of thousands of them.
# --------------------------------------------------------------------------------------------------

class _Args(msgspec.Struct, gc=False, frozen=True):
    correlation: int = -1
    external_id: int = msgspec.field(name="External id", default=-1)
    stream: int | str | None = None
    device: int | None = None
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw())
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=msgspec.Raw())
    call_stack: str | None = msgspec.field(name="Call stack", default=None)
    collective: str | None = msgspec.field(name="Collective name", default=None)
    in_nelems: int | None = msgspec.field(name="In msg nelems", default=None)
    out_nelems: int | None = msgspec.field(name="Out msg nelems", default=None)
    dtype: str | None = None
    group_size: int | None = msgspec.field(name="Group size", default=None)
    pg_name: str | int | None = msgspec.field(name="Process Group Name", default=None)
    nbytes: int | None = msgspec.field(name="bytes", default=None)
    size: int | str | None = None                    # MTIA dma_request bytes (AMD runtime: a string)
    grid: list[int] | str | None = None              # CUDA grid [x, y, z] (Triton cpu ops: "grid(100,)")
    sync_kind: str | None = msgspec.field(name="cuda_sync_kind", default=None)
    total_allocated: int | None = msgspec.field(name="Total Allocated", default=None)
    total_reserved: int | None = msgspec.field(name="Total Reserved", default=None)
    device_type: int | None = msgspec.field(name="Device Type", default=None)
    device_id: int | None = msgspec.field(name="Device Id", default=None)


_NO_ARGS = _Args()
_EMPTY_RAW = msgspec.Raw()


class _Fields(msgspec.Struct, gc=False):
    """The stored fields of an event."""

    cat: str | None = None
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    # µs. `ts` is decoded from the numeral's text (an epoch-µs float such as 1610366662254410.123 has no
    # binary float within 0.25 µs of it) and made integer ns by `ts_ns`; `dur` stays a float: durations
    # are below 2^43 µs, where `us_to_ns` gives the exact ns of a numeral with up to 3 decimals
    ts: Decimal | None = None
    dur: float | None = None
    args: _Args = _NO_ARGS


class _Event(_Fields):
    """An event of any phase (what the loose decode gives, see `_coerce_event`)."""

    ph: str = ""


# The typed decode picks a struct by the event's "ph" (a msgspec tagged union): complete ("X") and instant
# ("i") events get every stored field, every other phase an empty struct, so their keys are skipped
# without building strings or numbers. Flow events ("s"/"f": ~30 % of a GPU trace's events) are never
# read, and their decode was ~12 % of a trace's. A phase missing from this list (or no "ph" at all) fails
# the piece's typed decode, which then takes the loose path (`_decode_events`) with the same result.
_PHASES = "BbCcDEefIMNnOPRstVv()"


class _Complete(_Fields, tag_field="ph", tag="X"):
    ph: ClassVar[str] = "X"


class _Instant(_Complete, tag="i"):
    ph: ClassVar[str] = "i"


_SKIPPED = tuple(msgspec.defstruct(f"_Phase{ord(p)}", [("ph", ClassVar[str], p)], tag_field="ph", tag=p,
                                   gc=False) for p in _PHASES)
_TypedEvent = Union[(_Complete, _Instant, *_SKIPPED)]  # a runtime union over a tuple of types


class TraceDoc(msgspec.Struct, gc=False):
    """A whole Kineto document with only the stored fields (the benchmark's parse floor decodes this)."""

    traceEvents: list[_TypedEvent]  # type: ignore[valid-type]


class _LooseEvent(msgspec.Struct, gc=False):
    """Same fields, any JSON types: used for a piece whose values do not fit the strict types."""

    ph: Any = ""
    cat: Any = None
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: Any = None


_EVENTS = msgspec.json.Decoder(list[_TypedEvent])  # type: ignore[valid-type]
_LOOSE_EVENTS = msgspec.json.Decoder(list[_LooseEvent])
_RAW_DICT = msgspec.json.Decoder(dict[str, msgspec.Raw])
_ANY = msgspec.json.Decoder()


def _coerce_event(e: _LooseEvent) -> _Event:
    """Strict event from a loose one: values of unexpected types become the field's default."""
    def num(v: Any) -> int | float | None:
        if isinstance(v, bool):
            return None
        if isinstance(v, (int, float)):
            return v
        if isinstance(v, str):
            try:
                return float(v) if any(c in v for c in ".eE") else int(v)
            except ValueError:
                return None
        return None

    args = _NO_ARGS
    if isinstance(e.args, dict):
        kw: dict[str, Any] = {}
        for f in msgspec.structs.fields(_Args):
            if f.encode_name in e.args:
                v = e.args[f.encode_name]
                if f.name in ("input_dims", "input_type"):
                    if isinstance(v, list):
                        kw[f.name] = msgspec.Raw(msgspec.json.encode(v))
                    continue
                with contextlib.suppress(msgspec.ValidationError, TypeError):
                    v = msgspec.convert(v, f.type, strict=False)
                    if not (isinstance(v, int) and not -(2**63) <= v < 2**63):  # ids beyond int64: unknown
                        kw[f.name] = v
        args = _Args(**kw)

    def text(v: Any, default: str | None) -> Any:
        return v if isinstance(v, str) else default

    def ident(v: Any) -> int | str | None:
        return v if isinstance(v, (int, str)) and not isinstance(v, bool) else None

    return _Event(ph=text(e.ph, ""), cat=text(e.cat, None), name=text(e.name, ""), pid=ident(e.pid),
                  tid=ident(e.tid), ts=_decimal(e.ts), dur=num(e.dur), args=args)


# --------------------------------------------------------------------------------------------------
# Public helpers
# --------------------------------------------------------------------------------------------------

@lru_cache(maxsize=65536)
def classify_device_op(name: str, task_type: str, has_collective: bool = False) -> str:
    """Category of a device op: compute | communication | memory | sync | other.

    `task_type` is the normalized Kineto cat (kernel, gpu_memcpy, gpu_memset, cuda_sync,
    mtia_ccp_events). Compute is exactly HTA 0.5.0's COMPUTATION (a kernel whose name matches none of
    `^nccl.*Kernel|.*Memcpy|^Memset|.*Sync`, plus v0.6.1's launch / runFunction exclusions), so compute
    time matches HTA; names HTA calls OTHER are 'sync' when they are synchronisation events, else 'other'.
    """
    if task_type == "cuda_sync":
        return "sync"
    if task_type in ("gpu_memcpy", "gpu_memset"):
        return "memory"
    if has_collective or comm_kernel_name(name):
        return "communication"
    if _MEMORY_RE.match(name):
        return "memory"
    if _SYNC_RE.match(name):
        return "sync"
    if _NOT_COMPUTE_RE.match(name):
        return "other"
    return "compute"


def collective_op_type(collective: str | None, kernel_name: str | None = None) -> str | None:
    """Normalized collective type (allreduce, allgather, reducescatter, broadcast, alltoall, send,
    receive, sendrecv, reduce, gather, scatter, barrier) from a `Collective name` arg, else from an
    NCCL/RCCL/HCCL kernel name (`ncclDevKernel_AllReduce_...`, `ncclAllReduceRingLLKernel_...`)."""
    if collective:
        key = re.sub(r"[^a-z]", "", collective.lower())
        for suffix in ("intotensorcoalesced", "tensorcoalesced", "intotensor", "base", "coalesced", "tensor"):
            if key not in _OP_TYPES and key.endswith(suffix):
                key = key[: -len(suffix)]
        if key in _OP_TYPES:
            return _OP_TYPES[key]
        return collective.lower()
    if kernel_name:
        m = _COLLECTIVE_KERNEL_RE.search(kernel_name) or _OLD_NCCL_KERNEL_RE.match(kernel_name)
        if m:
            return _OP_TYPES.get(m.group(1).lower())
    return None


def ts_ns(ts: Decimal) -> int:
    """A decimal µs timestamp as integer ns, rounded half-even below the ns (exact: no binary float)."""
    return int(ts.scaleb(3).to_integral_value())


def _decimal(v: Any) -> Decimal | None:
    """A loose JSON value as a finite Decimal (a float keeps its shortest repr), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return None
    try:
        d = Decimal(repr(v) if isinstance(v, float) else v)
    except InvalidOperation:
        return None
    return d if d.is_finite() else None


def us_to_ns(us: np.ndarray) -> np.ndarray:
    """float64 µs -> int64 ns: floor(x)·1000 + round(frac(x)·1000), exact for ns-decimal inputs < 2^43 µs.

    Multiplying by 1000 first would lose the last ns above ~4.5e12 µs (ulp of the product > 0.5 ns).
    """
    whole = np.floor(us)
    frac_ns = np.rint((us - whole) * 1000.0).astype(np.int64)
    return whole.astype(np.int64) * 1000 + frac_ns


# --------------------------------------------------------------------------------------------------
# Streaming the document
# --------------------------------------------------------------------------------------------------

@dataclass
class _Doc:
    """What the stream found besides the events."""

    meta: dict[str, Any] = field(default_factory=dict)
    top_level_list: bool = False
    head: bytes = b""  # what was read before falling back to the whole-document decode
    damage: str | None = None  # why reading stopped early (a cut gzip, truncated JSON), events kept


class _Source:
    """Decompressed bytes of a trace, read block by block; maps I/O and gzip errors to ProfileError."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self._raw: BinaryIO = open(path, "rb")  # noqa: SIM115 - closed in close()
        except OSError as e:
            raise ProfileError(path, f"cannot read ({e.strerror})") from None
        magic = self._raw.read(2)
        self._raw.seek(0)
        self.gz = magic == b"\x1f\x8b"
        self._f: BinaryIO = self._raw
        # gzip is inflated here, not by GzipFile, so that the bytes inflated before damage (a file cut
        # short, a corrupt block) are returned: the damage then reads as the end of the stream, and
        # `damage` holds the error for the caller
        self._z = zlib.decompressobj(31) if self.gz else None
        self.damage: ProfileError | None = None
        self.eof = False

    def read(self, n: int) -> bytes:
        if self.eof:
            return b""
        if self._z is not None:
            return self._inflate(n)
        try:
            data = self._f.read(n)
        except OSError as e:
            raise ProfileError(self.path, f"cannot read ({e})") from None
        if not data:
            self.eof = True
        return data

    def _inflate(self, n: int) -> bytes:
        """Up to about n inflated bytes (members of a multi-member gzip in turn); b"" at the end."""
        z = self._z
        assert z is not None
        out: list[bytes] = []
        have = 0
        while have < n:
            try:
                comp = z.unconsumed_tail or self._raw.read(64 << 10)
                if not comp:
                    if not z.eof:
                        self.eof = True
                        self.damage = ProfileError(self.path, "corrupt gzip (Compressed file ended before "
                                                     "the end-of-stream marker was reached)")
                    break
                data = z.decompress(comp, n - have)
            except OSError as e:
                self.eof = True
                self.damage = ProfileError(self.path, f"cannot read ({e})")
                break
            except zlib.error as e:
                self.eof = True
                self.damage = ProfileError(self.path, f"corrupt gzip ({e})")
                break
            out.append(data)
            have += len(data)
            if z.eof:  # end of a member: another member, or the end (zero padding counts as the end)
                if z.unused_data:
                    self._raw.seek(-len(z.unused_data), 1)
                nxt = self._raw.read(1)
                if nxt in (b"", b"\0"):
                    self.eof = True
                    break
                self._raw.seek(-1, 1)
                self._z = z = zlib.decompressobj(31)
        if not have:
            self.eof = True
        return b"".join(out)

    def read_all(self) -> bytes:
        parts = []
        while chunk := self.read(64 << 20):
            parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        if self._f is not self._raw:
            self._f.close()
        self._raw.close()


def _err_pos(e: Exception) -> int | None:
    m = _BYTE_RE.search(str(e))
    return int(m.group(1)) if m else None


def _invalid(path: Path, e: Exception, offset: int, total: int) -> ProfileError:
    """ProfileError for bad JSON. `offset` maps a position inside the decoded piece to the decompressed
    stream; `total` is the stream's length (where truncated data ends)."""
    msg = str(e)
    if "truncated" in msg:
        return ProfileError(path, f"invalid JSON: truncated (the data ends at byte {total} inside an unfinished "
                                  "value)")
    pos = _err_pos(e)
    core = _BYTE_RE.sub("", msg).replace("JSON is malformed: ", "").strip()
    where = f" at byte {offset + pos}" if pos is not None else ""
    return ProfileError(path, f"invalid JSON: {core}{where}")


def _decode_events(piece: bytes | memoryview) -> list[_Event]:
    """Typed decode of `[ ... ]`; values of unexpected types fall back to a loose decode + coercion."""
    try:
        return _EVENTS.decode(piece)
    except msgspec.ValidationError:
        return [_coerce_event(e) for e in _LOOSE_EVENTS.decode(piece)]


def _split_array_end(piece: bytes, e: Exception) -> int | None:
    """For a 'trailing characters' error: the length of the leading complete array in `piece`."""
    if "trailing characters" not in str(e):
        return None
    pos = _err_pos(e)
    k = min(pos if pos is not None else len(piece), len(piece)) - 1
    # msgspec points at (or just past) the first trailing character; the array's ']' precedes it
    for _ in range(3):
        while k >= 0 and piece[k] != 0x5D:
            k -= 1
        if k < 0:
            return None
        try:
            msgspec.json.decode(piece[: k + 1], type=list[msgspec.Raw])
            return k + 1
        except msgspec.DecodeError:
            k -= 1
    return None


def _open_array(src: _Source, doc: _Doc) -> tuple[bytearray, int] | None:
    """Read the head of the document up to the first element of the event list.

    Returns the bytes read so far and the offset just past the list's `[` (filling `doc.meta` with the
    keys before `traceEvents`, or setting `doc.top_level_list`), or None when the layout needs the
    whole-document fallback (no `"traceEvents"` key in the first 64 MiB, or the key inside a string);
    the bytes read are then in `doc.head`."""
    buf = bytearray()
    while len(buf) < (1 << 16) and (data := src.read(_BLOCK)):
        buf += data
    i = 0
    if buf[:3] == b"\xef\xbb\xbf":
        i = 3
    while i < len(buf) and buf[i] in _WS:
        i += 1
    if i >= len(buf):
        raise ProfileError(src.path, "empty file")
    first = buf[i]
    if first == 0x5B:   # '[': a bare list of events
        doc.top_level_list = True
        pos = i + 1
    elif first == 0x7B:  # '{'
        key = buf.find(b'"traceEvents"', i)
        while key < 0 and not src.eof and len(buf) < _HEAD_LIMIT:
            buf += src.read(_BLOCK)
            key = buf.find(b'"traceEvents"', max(i, len(buf) - _BLOCK - 16))
        pos = -1
        if key >= 0:
            j = key + len(b'"traceEvents"')
            while j < len(buf) and buf[j] in _WS:
                j += 1
            if j < len(buf) and buf[j] == 0x3A:  # ':'
                j += 1
                while j < len(buf) and buf[j] in _WS:
                    j += 1
                if j < len(buf) and buf[j] == 0x5B:
                    try:
                        head = _ANY.decode(bytes(buf[i:key]) + b'"traceEvents":0}')
                        doc.meta.update({k: v for k, v in head.items() if k != "traceEvents"})
                        pos = j + 1
                    except msgspec.DecodeError:
                        pos = -1  # the key was inside a string: fall back
        if pos < 0:
            doc.head = bytes(buf[i:])
            return None
    else:
        raise ProfileError(src.path, f"invalid JSON: expected '{{' or '[' at byte {i}, found {chr(first)!r}")
    return buf, pos


def _iter_events(src: _Source, doc: _Doc) -> Iterator[list[_Event]]:
    """Yield lists of events in file order, filling `doc` with the top-level metadata."""
    opened = _open_array(src, doc)
    if opened is None:
        yield from _whole_document(src, doc.head + src.read_all(), doc)
        return
    buf, pos = opened
    base = 0  # offset of buf[0] in the decompressed stream
    while True:
        if not src.eof and len(buf) - pos < _PIECE:
            # gather blocks and join once (bytearray += would copy the growing buffer again and again)
            chunks: list[bytes | bytearray] = [buf]
            have = len(buf) - pos
            while not src.eof and have < _PIECE:
                block = src.read(_BLOCK)
                chunks.append(block)
                have += len(block)
            buf = bytearray().join(chunks)
            del chunks
        if src.eof:
            piece = b"[" + bytes(buf[pos:])
            try:
                yield _decode_events(piece)
                if not doc.top_level_list:
                    raise ProfileError(src.path, "invalid JSON: truncated (the top-level object is not closed)")
            except msgspec.DecodeError as e:
                end = _split_array_end(piece, e)
                if end is None:
                    yield _events_before_damage(piece, _err_pos(e))
                    raise _invalid(src.path, e, base + pos - 1, base + len(buf)) from None
                yield _decode_events(piece[:end])
                _read_tail(src, piece[end:], doc, base + pos - 1 + end)
            return
        hi = len(buf)
        done = False
        for _ in range(_MAX_CUT_TRIES):
            j = buf.rfind(b"}", pos, hi)
            if j < 0:
                break
            k = j + 1
            while k < len(buf) and buf[k] in _WS:
                k += 1
            if k >= len(buf) or buf[k] != 0x2C:  # not followed by ','
                hi = j
                continue
            # decode in place, without copying the piece: the separator before pos becomes '[' and
            # the byte after the '}' (',' or whitespace) becomes ']' for the duration of the decode.
            # msgspec.Raw values keep a buffer export until the consumer drops the events, so `buf` is
            # never resized after a successful decode (see below).
            buf[pos - 1] = 0x5B
            saved = buf[j + 1]
            buf[j + 1] = 0x5D
            mv = memoryview(buf)
            view = mv[pos - 1: j + 2]
            try:
                evs = _decode_events(view)  # type: ignore[arg-type]
            except msgspec.DecodeError as e:
                view.release()
                mv.release()
                buf[j + 1] = saved
                piece = b"[" + bytes(buf[pos: j + 1]) + b"]"
                end = _split_array_end(piece, e)
                if end is not None:  # the events array ended inside this piece
                    yield _decode_events(piece[:end])
                    tail = piece[end:-1] + bytes(buf[j + 1:]) + src.read_all()
                    _read_tail(src, tail, doc, base + pos - 1 + end)
                    return
                p = _err_pos(e)
                if "truncated" not in str(e) and p is not None and p < len(piece) - 2:
                    raise _invalid(src.path, e, base + pos - 1, base + len(buf)) from None
                hi = j  # the cut was inside a string or a nested value: try the previous '}'
                continue
            yield evs
            del evs, view, mv
            pos = k + 1
            done = True
            break
        if not done:
            # no usable cut in the buffer (one huge event, or an odd layout): read more; if the
            # buffer keeps growing without a cut, decode the rest in one go
            if len(buf) - pos > _HEAD_LIMIT:
                rest = b"[" + bytes(buf[pos:]) + src.read_all()
                yield from _finish_rest(src, rest, doc, base + pos - 1)
                return
            buf += src.read(_BLOCK)
            continue
        # continue in a new buffer holding the unconsumed bytes (and the separator before them): the old
        # one may still be pinned by msgspec.Raw values of events the consumer has not dropped yet
        base += pos - 1
        buf = buf[pos - 1:]
        pos = 1


def _events_before_damage(piece: bytes, at: int | None) -> list[_Event]:
    """The whole events of `[ ...` that precede a decode error at byte `at` (None: unknown, the end): the
    piece is cut after the last `},` before it at which the part before decodes (at most _MAX_CUT_TRIES
    tries); [] when none does. The caller then raises the error; the reader keeps these events."""
    hi = len(piece) if at is None else min(at, len(piece))
    for _ in range(_MAX_CUT_TRIES):
        j = piece.rfind(b"}", 1, hi)
        if j < 0:
            break
        k = j + 1
        while k < len(piece) and piece[k] in _WS:
            k += 1
        if k < len(piece) and piece[k] == 0x2C:
            try:
                return _decode_events(piece[: j + 1] + b"]")
            except msgspec.DecodeError:
                pass
        hi = j
    return []


def _finish_rest(src: _Source, piece: bytes, doc: _Doc, offset: int) -> Iterator[list[_Event]]:
    try:
        yield _decode_events(piece)
        if not doc.top_level_list:
            raise ProfileError(src.path, "invalid JSON: truncated (the top-level object is not closed)")
    except msgspec.DecodeError as e:
        end = _split_array_end(piece, e)
        if end is None:
            yield _events_before_damage(piece, _err_pos(e))
            raise _invalid(src.path, e, offset, offset + len(piece)) from None
        yield _decode_events(piece[:end])
        _read_tail(src, piece[end:], doc, offset + end)


def _read_tail(src: _Source, tail: bytes, doc: _Doc, offset: int) -> None:
    """Parse what follows the traceEvents array: `, "key": value ... }`."""
    if doc.top_level_list:
        raise ProfileError(src.path, f"invalid JSON: trailing characters after the event list at byte {offset}")
    try:
        rest = _ANY.decode(b'{"traceEvents":0' + tail)
    except msgspec.DecodeError as e:
        raise _invalid(src.path, e, offset - len(b'{"traceEvents":0'), offset + len(tail)) from None
    doc.meta.update({k: v for k, v in rest.items() if k != "traceEvents"})


def _whole_document(src: _Source, data: bytes, doc: _Doc) -> Iterator[list[_Event]]:
    """Fallback: decode the whole document at once."""
    if not data.strip():
        raise ProfileError(src.path, "empty file")
    try:
        top = _RAW_DICT.decode(data)
    except msgspec.ValidationError:
        raise ProfileError(src.path, "no traceEvents: the top-level JSON value is not an object or a list") \
            from None
    except msgspec.DecodeError as e:
        raise _invalid(src.path, e, 0, len(data)) from None
    if "traceEvents" not in top:
        keys = ", ".join(sorted(top)[:8]) or "none"
        raise ProfileError(src.path, f"no traceEvents: not a Kineto / Chrome trace (top-level keys: {keys})")
    for k, v in top.items():
        if k != "traceEvents":
            doc.meta[k] = _ANY.decode(v)
    raw = bytes(top.pop("traceEvents"))
    del top
    try:
        yield _decode_events(raw)
    except msgspec.DecodeError:
        raise ProfileError(src.path, "no traceEvents: `traceEvents` is not a list of events") from None


# --------------------------------------------------------------------------------------------------
# Folding events into columns
# --------------------------------------------------------------------------------------------------

def _int_or_none(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        s = v.strip()
        try:
            return int(s, 0)
        except ValueError:
            m = re.search(r"(-?\d+)$", s)  # legacy "stream 7"
            return int(m.group(1)) if m else None
    return None


def _int_column(values: list[Any]) -> np.ndarray:
    """ints (the common case, converted in C) or a mix with str/None/ints beyond int64 -> int64, anything
    that is not an int64 becoming the _NONE sentinel (absent)."""
    try:
        a = np.array(values)  # (not dtype=int64: numpy would read "7" and 1.5 as ints, and True as 1)
    except (TypeError, ValueError, OverflowError):
        a = None
    if a is not None and a.dtype == np.int64:
        return a
    return np.array([v if type(v) is int and -(2**63) <= v < 2**63 else _NONE for v in values], dtype=np.int64)


def _canonical_raws(raws: list[msgspec.Raw]) -> list[msgspec.Raw]:
    """The raw `Input Dims` / `Input type` values made canonical: a value that is not a JSON list (a
    string, null) counts as absent, as the loose decode has it, and a list written with newlines, tabs
    or escapes (a pretty-printed trace) is re-encoded compactly, as the loose decode does, so a value
    gives the same text whichever decode read its piece."""
    out = []
    for r in raws:
        if r:
            b = bytes(r)
            if b[0] != 0x5B:
                r = _EMPTY_RAW
            elif any(c in b for c in _NOT_COMPACT):
                r = msgspec.Raw(msgspec.json.encode(_ANY.decode(b)))
        out.append(r)
    return out


_NOT_COMPACT = (b"\n", b"\r", b"\t", b"\\")


def _shape_texts(raws: list[msgspec.Raw], intern: dict[str, str | None]) -> list[str | None]:
    """Input Dims JSON -> text, e.g. `[[4096, 1000], [1000, 4000]]` -> "4096,1000;1000,4000" (tensors split
    by ';' like Ascend; a scalar input is an empty field; nested tensor lists are flattened). Done on one
    blob per piece (bytes.join takes the Raw buffers directly) so no Python code runs per value; equal
    texts share one str. An absent arg, a value that is not a list, or no inputs at all, gives None."""
    blob = b"\x01".join(raws).replace(b" ", b"").replace(b"],[", b";").translate(None, b"[]")
    parts = blob.decode("utf-8", "replace").split("\x01")
    return list(map(intern.setdefault, parts, parts))


def _type_texts(raws: list[msgspec.Raw], intern: dict[str, str | None]) -> list[str | None]:
    """Input type JSON -> text: `["float", "Scalar"]` -> "float;Scalar" (same blob technique)."""
    blob = b"\x01".join(raws).replace(b'", "', b";").replace(b'","', b";").translate(None, b'[]"')
    parts = blob.decode("utf-8", "replace").split("\x01")
    return list(map(intern.setdefault, parts, parts))


class _Columns:
    """Per-column accumulation: one array (or list of str) per decoded piece, concatenated at the end."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.done: dict[str, list[Any]] = {n: [] for n in names}
        self.n = 0

    def column(self, n: str, dtype: Any) -> Any:
        parts = self.done[n]
        if dtype is None:
            out: list[Any] = []
            for p in parts:
                out.extend(p)
            return out
        if not parts:
            return np.empty(0, dtype=dtype)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]


_HOST_COLS = ("name", "cat", "tid", "ts", "dur", "corr", "ext", "dims", "types", "stack")
_DEV_COLS = ("name", "task", "stream", "device", "ts", "dur", "corr", "ext", "grid", "nbytes")
_NONE = -(2**62)  # sentinel for "absent" in int64 columns


@dataclass
class _Comm:
    collective: str | None
    in_nelems: int | None
    out_nelems: int | None
    dtype: str | None
    group: str | None

    def size_bytes(self) -> int | None:
        """Payload of the collective: max(in, out) elements × dtype size (nccl-tests' "size")."""
        n = max((x for x in (self.in_nelems, self.out_nelems) if x is not None), default=None)
        es = DTYPE_BYTES.get(self.dtype or "")
        return n * es if n is not None and es is not None else None

    def in_bytes(self) -> int | None:
        es = DTYPE_BYTES.get(self.dtype or "")
        return self.in_nelems * es if self.in_nelems is not None and es is not None else None


class _Folder:
    """Folds decoded events into compact columns, one piece at a time.

    Names are interned to integer ids (`name_ids`, insertion order = id), so per-name work later
    (step regex, launch table, classification) runs once per distinct name and columns hold int32.
    """

    def __init__(self) -> None:
        self.host = _Columns(_HOST_COLS)
        self.dev = _Columns(_DEV_COLS)
        self.name_ids: dict[str, int] = {}
        # call stacks interned like names; the host column "stack" holds their ids (-1: none)
        self.stack_ids: dict[str, int] = {}
        self.h_comm: dict[int, _Comm] = {}
        self.d_comm: dict[int, _Comm] = {}
        # interned shape / dtype texts (they repeat every step); "" (absent, or no inputs) -> None
        self.texts: dict[str, str | None] = {"": None}
        self.has_shapes = False
        self.gpu_step_starts: list[int] = []  # ns
        self.gpu_step_names: set[int] = set()
        self.memory: list[tuple[int, str, int | None, int | None]] = []
        self.skipped: Counter[str] = Counter()
        self.no_dur = 0

    def fold(self, evs: list[_Event]) -> None:
        """Append one decoded piece. Events are split by cat in one pass; each column is then pulled out
        with a list comprehension (a tight loop per column costs far less than one Python statement per
        field per event)."""
        hget = _HOST_CODE.get
        dget = _DEVICE_CODE.get
        hl: list[_Event] = []
        dl: list[_Event] = []
        hc: list[int] = []
        dc: list[int] = []
        h_add, hc_add, d_add, dc_add = hl.append, hc.append, dl.append, dc.append
        for e in evs:
            if e.ph == "X":
                c = e.cat
                code = hget(c)  # type: ignore[arg-type]
                if code is not None:
                    h_add(e)
                    hc_add(code)
                    continue
                code = dget(c)  # type: ignore[arg-type]
                if code is not None:
                    d_add(e)
                    dc_add(code)
                elif c == "gpu_user_annotation":
                    if (m := _STEP_RE.match(e.name)) and e.ts is not None:
                        self.gpu_step_starts.append(ts_ns(e.ts))
                        self.gpu_step_names.add(int(m.group(1)))
                elif c not in _IGNORED_CATS:
                    self.skipped[c or "(none)"] += 1
            elif e.ph == "i" and e.name == "[memory]":
                self._memory(e)
        if hl:
            self._fold_host(*self._with_times(hl, hc))
        if dl:
            self._fold_device(*self._with_times(dl, dc))

    def _with_times(self, evs: list[_Event], codes: list[int]
                    ) -> tuple[list[_Event], list[int], list[int], list[float]]:
        """The events with a time, their codes, `ts` as int ns and `dur` as float µs."""
        ts = [e.ts for e in evs]
        dur = [e.dur for e in evs]
        # complete events without ts/dur carry no time: skipped (like HTA); so are times whose ns do not
        # fit int64 (beyond ~285 years of µs), which no clock writes
        if None in ts or None in dur or not (min(ts) > -TIME_LIMIT_US and max(ts) < TIME_LIMIT_US
                                             and min(dur) > -TIME_LIMIT_US and max(dur) < TIME_LIMIT_US):
            keep = [i for i, e in enumerate(evs) if e.ts is not None and e.dur is not None
                    and -TIME_LIMIT_US < e.ts < TIME_LIMIT_US and -TIME_LIMIT_US < e.dur < TIME_LIMIT_US]
            self.no_dur += len(evs) - len(keep)
            evs = [evs[i] for i in keep]
            codes = [codes[i] for i in keep]
            ts = [ts[i] for i in keep]
            dur = [dur[i] for i in keep]
        return evs, codes, [ts_ns(t) for t in ts], dur  # type: ignore[return-value,arg-type]

    def _ids(self, evs: list[_Event]) -> np.ndarray:
        ids = self.name_ids
        names = [e.name for e in evs]
        got = list(map(ids.get, names))  # C-level lookups; new names are rare after the first pieces
        if None in got:
            got = [ids.setdefault(n, len(ids)) for n in names]
        return np.array(got, dtype=np.int32)

    def _fold_host(self, hl: list[_Event], codes: list[int], ts: list[int], dur: list[float]) -> None:
        base = self.host.n
        cols = self.host.done
        cols["name"].append(self._ids(hl))
        cols["cat"].append(np.array(codes, dtype=np.int8))
        cols["tid"].append(_int_column([e.tid for e in hl]))
        cols["ts"].append(np.array(ts, dtype=np.int64))
        cols["dur"].append(np.array(dur, dtype=np.float64))
        args = [e.args for e in hl]
        cols["corr"].append(_int_column([a.correlation for a in args]))
        cols["ext"].append(_int_column([a.external_id for a in args]))
        dims = [a.input_dims for a in args]
        if any(dims) and any(dims := _canonical_raws(dims)):
            cols["dims"].append(_shape_texts(dims, self.texts))
            cols["types"].append(_type_texts(_canonical_raws([a.input_type for a in args]), self.texts))
            self.has_shapes = True
        else:
            cols["dims"].append([None] * len(hl))
            cols["types"].append([None] * len(hl))
        sids = self.stack_ids
        cols["stack"].append(np.array([sids.setdefault(a.call_stack, len(sids)) if a.call_stack else -1
                                       for a in args], dtype=np.int32))
        for i in [i for i, a in enumerate(args) if a.collective is not None or a.in_nelems is not None]:
            a = args[i]
            self.h_comm[base + i] = _Comm(a.collective, a.in_nelems, a.out_nelems, a.dtype,
                                          None if a.pg_name is None else str(a.pg_name))
        self.host.n = base + len(hl)

    def _fold_device(self, dl: list[_Event], codes: list[int], ts: list[int], dur: list[float]) -> None:
        base = self.dev.n
        cols = self.dev.done
        cols["name"].append(self._ids(dl))
        cols["task"].append(np.array(codes, dtype=np.int8))
        args = [e.args for e in dl]
        streams = [a.stream for a in args]
        if all(type(s) is int for s in streams):
            cols["stream"].append(_int_column(streams))
        else:  # no int `stream` arg: a string ("0x0"), or the tid (legacy "stream 7")
            fixed = [s if type(s) is int else _int_or_none(s if s is not None else e.tid)
                     for s, e in zip(streams, dl, strict=True)]
            cols["stream"].append(_int_column(fixed))
        cols["device"].append(np.array([a.device if a.device is not None else
                                        (e.pid if type(e.pid) is int else _NONE)
                                        for a, e in zip(args, dl, strict=True)], dtype=np.int64))
        cols["ts"].append(np.array(ts, dtype=np.int64))
        cols["dur"].append(np.array(dur, dtype=np.float64))
        cols["corr"].append(_int_column([a.correlation for a in args]))
        cols["ext"].append(_int_column([a.external_id for a in args]))
        cols["grid"].append(_int_column([g[0] * g[1] * g[2] if type(g) is list and len(g) == 3 else _NONE
                                      for g in [a.grid for a in args]]))
        nbytes = [a.nbytes if a.nbytes is not None else
                  (_int_or_none(a.size) if t == _D_MTIA else None) for a, t in zip(args, codes, strict=True)]
        cols["nbytes"].append(_int_column(nbytes))
        for i in [i for i, a in enumerate(args) if a.collective is not None or a.in_nelems is not None]:
            a = args[i]
            self.d_comm[base + i] = _Comm(a.collective, a.in_nelems, a.out_nelems, a.dtype,
                                          None if a.pg_name is None else str(a.pg_name))
        self.dev.n = base + len(dl)

    def _memory(self, e: _Event) -> None:
        a = e.args
        if e.ts is None or (a.total_allocated is None and a.total_reserved is None):
            return
        dt = a.device_type
        kind = _DEVICE_TYPE_NAMES.get(dt, f"device_type{dt}") if dt is not None else "unknown"
        comp = kind if kind == "cpu" else f"{kind}:{a.device_id if a.device_id is not None else 0}"
        self.memory.append((ts_ns(e.ts), comp, a.total_allocated, a.total_reserved))


# --------------------------------------------------------------------------------------------------
# Post-processing
# --------------------------------------------------------------------------------------------------

def _ints(a: np.ndarray, absent: np.ndarray | None = None) -> np.ndarray:
    """int64 column -> nullable int column (absent = the _NONE sentinel, or the given mask): a numpy
    masked array, which the store inserts as it is (no Python object per value, no pandas)."""
    mask = (a == _NONE) if absent is None else absent
    a = a.astype(np.int64, copy=False)
    return np.ma.MaskedArray(a, mask=mask) if mask.any() else a


def _sparse_text(n: int, values: dict[int, str | None]) -> Coded:
    """n rows of text, NULL except at the given rows (call stacks, collective names)."""
    codes = np.full(n, -1, dtype=np.int32)
    labels: dict[str, int] = {}
    for i, v in values.items():
        if v is not None:
            codes[i] = labels.setdefault(v, len(labels))
    return Coded(codes, list(labels))


def _nesting_depth(tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting depth of each interval among the intervals of its thread (0 = outermost).

    Order per thread by (start asc, end desc): a parent precedes its children. The depth of interval i
    is the number of earlier intervals still open at its start = (its rank in that order) − (number of
    intervals of the thread that ended at or before its start). Zero-length intervals are treated as
    ending half a ns after they start, so one at a parent's start counts as its child. O(n log n).
    """
    n = tid.size
    depth = np.zeros(n, dtype=np.int64)
    if n == 0:
        return depth
    s2 = start * 2
    e2 = np.where(end > start, end * 2, s2 + 1)
    order = np.lexsort((-e2, s2, tid))
    t_sorted = tid[order]
    bounds = np.flatnonzero(np.diff(t_sorted)) + 1
    for grp in np.split(order, bounds):
        gs = s2[grp]
        ends_sorted = np.sort(e2[grp])
        closed = np.searchsorted(ends_sorted, gs, side="right")
        depth[grp] = np.maximum(np.arange(grp.size) - closed, 0)
    return depth


def _step_of(ts: np.ndarray, st_start: np.ndarray, st_end: np.ndarray, st_num: np.ndarray) -> np.ndarray:
    """Step number whose [start, end) contains each ts (HTA's rule), else _NONE. Steps sorted by start."""
    if st_start.size == 0:
        return np.full(ts.size, _NONE, dtype=np.int64)
    i = np.searchsorted(st_start, ts, side="right") - 1
    ic = np.clip(i, 0, None)
    inside = (i >= 0) & (ts < st_end[ic])
    return np.where(inside, st_num[ic], _NONE)


_GLOO_RE = re.compile(r"^gloo:(\w+)$")


def _host_collectives(t: RankTables, names: np.ndarray, h_nid: np.ndarray, h_cat: np.ndarray,
                      h_step: np.ndarray, h_start: np.ndarray, h_dur: np.ndarray) -> None:
    """Gloo collectives run on the host: their `gloo:<op>` annotation (start and duration on the host
    clock) becomes a comm_ops row so that cross-rank checks can match them. The trace gives no process
    group, sequence number or Collective name for them (c10d::allreduce_ carries only Input Dims), so
    group_name and size are unknown (null)."""
    ids = [i for i, n in enumerate(names.tolist()) if _GLOO_RE.match(str(n))]
    if not ids or not h_nid.size:
        return
    rows = np.flatnonzero(np.isin(h_nid, ids) & (h_cat == _H_USER_ANN))
    if not rows.size:
        return
    ops = [collective_op_type(_GLOO_RE.match(str(names[h_nid[i]])).group(1)) for i in rows.tolist()]  # type: ignore[union-attr]
    t.extend("comm_ops", {
        "step": _ints(h_step[rows]), "name": [str(names[h_nid[i]]) for i in rows.tolist()], "op_type": ops,
        "group_name": [None] * rows.size, "start_ns": h_start[rows].tolist(), "elapse_ns": h_dur[rows].tolist(),
        "size_bytes": [None] * rows.size,
    })
    t.has("comm_ops")


def _launcher_ops(names: list[str], h_nid: np.ndarray, h_cat: np.ndarray, h_tid: np.ndarray,
                  h_start: np.ndarray, h_dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Host ops whose name says communication (comm_kinds rule 2), and which host events (runtime /
    driver launch calls) start inside one of them on the same thread: (is_launcher_op, launched_inside)."""
    is_op = np.array([comm_launcher_name(str(n)) for n in names], dtype=bool)[h_nid] if h_nid.size else \
        np.zeros(0, dtype=bool)
    is_op &= (h_cat != _H_RUNTIME) & (h_cat != _H_DRIVER)
    calls = (h_cat == _H_RUNTIME) | (h_cat == _H_DRIVER)
    inside = np.zeros(h_nid.size, dtype=bool)
    if is_op.any() and calls.any():
        ci = np.flatnonzero(calls)
        inside[ci] = launched_inside(h_tid[is_op], h_start[is_op], h_start[is_op] + h_dur[is_op],
                                     h_tid[ci], h_start[ci])
    return is_op, inside


def _comm_by_launcher_and_stream(labels: np.ndarray, inverse: np.ndarray, launch: np.ndarray,
                                 is_kernel: np.ndarray, stream: np.ndarray,
                                 launchers: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Kernels launched inside a communication op, or on a communication stream, become communication
    (comm_kinds rules 2 and 3); memcpy / memset / sync keep their category. Returns (labels, inverse)."""
    _, inside = launchers
    by_launch = is_kernel & (launch >= 0) & inside[np.clip(launch, 0, None)] if inside.size else \
        np.zeros(launch.size, dtype=bool)
    is_comm = labels[inverse] == "communication"
    comm_so_far = (is_comm | by_launch) & is_kernel
    streams = comm_streams(stream, is_kernel & (stream >= 0), comm_so_far)
    by_stream = is_kernel & (stream >= 0) & np.isin(stream, streams)
    make = (by_launch | by_stream) & ~is_comm
    if not make.any():
        return labels, inverse
    if "communication" not in labels.tolist():
        labels = np.append(labels, np.array(["communication"], dtype=object))
    inverse = inverse.copy()
    inverse[make] = labels.tolist().index("communication")
    return labels, inverse


def _stepless_window(first_ns: int | None, h_start: np.ndarray, h_dur: np.ndarray, h_cat: np.ndarray,
                     h_nid: np.ndarray, names: np.ndarray, d_start: np.ndarray, launch: np.ndarray
                     ) -> tuple[int | None, str]:
    """Start (ns) of the one step of a trace without ProfilerStep, and a note saying how it was chosen.

    Host time before the first device op's launch call (or the first device op, when its launch is not
    in the trace) is initialisation: CUDA context creation, library handles (a first cuBLAS / cuDNN call
    runs a long cudaFree), module loading. It runs once, so it is left out of the window. A trace
    without device ops keeps its whole span."""
    if first_ns is None or not d_start.size:
        return first_ns, ": the whole trace"
    firsts = [int(d_start.min())]
    if (launch >= 0).any():
        firsts.append(int(h_start[launch[launch >= 0]].min()))
    win0 = min(firsts)
    if win0 <= first_ns:
        return first_ns, ": the whole trace (its first event is GPU work or its launch)"
    before = np.flatnonzero(((h_cat == _H_RUNTIME) | (h_cat == _H_DRIVER)) & (h_start < win0))
    biggest = ""
    if before.size:
        k = before[np.argmax(h_dur[before])]
        biggest = f", the longest call there {names[h_nid[k]]} {int(h_dur[k]) / 1e6:.1f} ms"
    return win0, (f": it starts at the first GPU work's launch, {(win0 - first_ns) / 1e6:.1f} ms after the "
                  f"trace starts; the time before it is initialisation and belongs to no step{biggest}")


def _vendor(meta: dict[str, Any], n_dev: int, has_mtia: bool, hip_runtime: bool) -> str:
    props = meta.get("deviceProperties") or []
    names = " ".join(str(p.get("name", "")) for p in props if isinstance(p, dict))
    backend = str((meta.get("distributedInfo") or {}).get("backend", "")) if isinstance(
        meta.get("distributedInfo"), dict) else ""
    if has_mtia or backend.startswith("mtia"):
        return "mtia"
    if hip_runtime or re.search(r"\bAMD\b|Radeon|Instinct|\bMI\d{3}", names):
        return "rocm"
    if n_dev or re.search(r"NVIDIA|Tesla|Quadro|GeForce|\bRTX\b", names) or "nccl" in backend:
        return "cuda"
    return "cpu"


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
    _build(tables, src, path, doc, folder)
    return tables


def _read_events(path: Path) -> tuple[_Doc, _Folder]:
    """The msgspec path: typed decode of pieces of the event list, folded one piece at a time."""
    doc = _Doc()
    folder = _Folder()
    source = _Source(path)
    error: ProfileError | None = None
    try:
        for evs in _iter_events(source, doc):
            folder.fold(evs)
            del evs
    except ProfileError as e:
        error = e
    finally:
        source.close()
    # damage (a gzip or JSON cut short, a corrupt block, a syntax error): the whole events before it are
    # kept; a gzip error explains a JSON one that follows from it. Nothing read: the error stands (exit 2)
    error = source.damage or error
    if error is not None:
        if not (folder.host.n or folder.dev.n):
            raise error
        doc.damage = error.problem
    return doc, folder


def _build(t: RankTables, src: RankSource, path: Path, doc: _Doc, f: _Folder) -> None:
    meta = doc.meta
    rank = t.rank
    base_ns = meta.get("baseTimeNanoseconds")
    base_ns = base_ns if isinstance(base_ns, int) and not isinstance(base_ns, bool) else None

    # ---- per-name lookup tables (names are interned to ids while folding)
    names = np.array(list(f.name_ids), dtype=object)
    n_names = names.size
    step_of_name = np.full(n_names, -1, dtype=np.int64)
    for n, i in f.name_ids.items():
        if m := _STEP_RE.match(n):
            step_of_name[i] = int(m.group(1))
    is_launch_name = np.fromiter((n in LAUNCH_APIS for n in f.name_ids), dtype=bool, count=n_names)
    is_dataloader_name = np.fromiter((n.startswith("enumerate(DataLoader)") for n in f.name_ids), dtype=bool,
                                     count=n_names)
    is_hta_sync_name = np.fromiter((n in _HTA_SYNC_NAMES for n in f.name_ids), dtype=bool, count=n_names)

    # ---- host columns
    h = f.host
    h_nid = h.column("name", np.int32)
    h_cat = h.column("cat", np.int8)
    h_tid = h.column("tid", np.int64)
    h_start = h.column("ts", np.int64)
    h_dur = np.maximum(us_to_ns(h.column("dur", np.float64)), 0)
    h_corr = h.column("corr", np.int64)
    h_ext = h.column("ext", np.int64)
    nh = h_nid.size

    # ---- device columns
    d = f.dev
    d_nid = d.column("name", np.int32)
    d_task = d.column("task", np.int8)
    d_stream = d.column("stream", np.int64)
    d_dev = d.column("device", np.int64)
    d_start = d.column("ts", np.int64)
    d_dur = np.maximum(us_to_ns(d.column("dur", np.float64)), 0)
    d_end = d_start + d_dur
    d_corr = d.column("corr", np.int64)
    d_ext = d.column("ext", np.int64)
    d_grid = d.column("grid", np.int64)
    d_bytes = d.column("nbytes", np.int64)
    nd = d_nid.size

    # ---- data loader annotations get their own host category
    h_cat[is_dataloader_name[h_nid] & ((h_cat == _H_CPU_OP) | (h_cat == _H_USER_ANN))] = _H_DATALOADER

    # ---- steps: host ProfilerStep#N of any category (user_annotation; cpu_op / legacy `Operator` in older
    # PyTorch; python_function) on the thread that has most of them, one event per step number
    h_stepname = step_of_name[h_nid]
    all_step_idx = np.flatnonzero(h_stepname >= 0)
    step_idx = all_step_idx
    if step_idx.size:
        tids, counts = np.unique(h_tid[step_idx], return_counts=True)
        step_idx = step_idx[h_tid[step_idx] == tids[np.argmax(counts)]]
        step_idx = step_idx[np.argsort(h_start[step_idx], kind="stable")]
        _, first = np.unique(h_stepname[step_idx], return_index=True)  # one event per step number
        step_idx = step_idx[np.sort(first)]
    st_num = h_stepname[step_idx]
    st_start = h_start[step_idx]
    st_end = st_start + h_dur[step_idx]
    n_steps = st_num.size
    synthetic_step = n_steps == 0

    h_step = _step_of(h_start, st_start, st_end, st_num)

    # ---- correlation: device op -> host launch (prefer launch APIs when several share an id)
    launch = np.full(nd, -1, dtype=np.int64)
    corr_host = np.flatnonzero(h_corr >= 0)
    if nd and corr_host.size:
        is_launch = is_launch_name[h_nid[corr_host]]
        order = np.lexsort((~is_launch, h_corr[corr_host]))
        hc_sorted = h_corr[corr_host][order]
        uniq, first = np.unique(hc_sorted, return_index=True)
        host_of = corr_host[order][first]
        pos = np.searchsorted(uniq, d_corr)
        posc = np.clip(pos, 0, max(uniq.size - 1, 0))
        found = (d_corr >= 0) & (pos < uniq.size) & (uniq[posc] == d_corr)
        launch = np.where(found, host_of[posc], -1)
    has_launch = launch >= 0
    d_step = np.where(has_launch, h_step[np.clip(launch, 0, None)] if nh else _NONE,
                      _step_of(d_start, st_start, st_end, st_num))

    # ---- HTA's kept device ops and the device windows
    stream_ok = d_stream >= 0
    step_name_count = len(set(h_stepname[all_step_idx].tolist()) | f.gpu_step_names)
    if step_name_count >= 2:
        # HTA's cutoff: the latest start of any ProfilerStep# event that is not a GPU kernel, i.e. CPU
        # annotations on any thread and gpu_user_annotation copies alike
        gpu_copies = np.array(f.gpu_step_starts, dtype=np.int64)
        cutoff = int(np.concatenate([h_start[all_step_idx], gpu_copies]).max())
        # HTA treats a device op without a correlation (or with no stream) as a CPU event kept by its
        # own start; Event/Context Sync are GPU events even without one
        sync_named = is_hta_sync_name[d_nid]
        launch_start = np.where(has_launch, h_start[np.clip(launch, 0, None)] if nh else 0, 0)
        gpu_like = (d_corr >= 0) & stream_ok
        kept = np.where(gpu_like, has_launch & (launch_start < cutoff), d_start < cutoff) | \
            (sync_named & (d_corr < 0))
    else:
        kept = np.ones(nd, dtype=bool)
    span_mask = kept & stream_ok
    kept_steps = st_num[:-1] if n_steps >= 2 else st_num

    dev_start = np.full(n_steps, _NONE, dtype=np.int64)
    dev_end = np.full(n_steps, _NONE, dtype=np.int64)
    span0 = span1 = None
    if span_mask.any():
        span0 = int(d_start[span_mask].min())
        span1 = int(d_end[span_mask].max())
        nk = kept_steps.size
        if nk:
            firsts: list[int | None] = []
            ks, kstart = d_step[span_mask], d_start[span_mask]
            for num in kept_steps.tolist():
                sel = kstart[ks == num]
                firsts.append(int(sel.min()) if sel.size else None)
            firsts[0] = span0
            # an empty step's window starts (and ends) where the next non-empty one starts
            nxt = span1
            for k in range(nk - 1, -1, -1):
                if firsts[k] is None:
                    firsts[k] = nxt
                nxt = firsts[k]  # type: ignore[assignment]
            starts = np.maximum.accumulate(np.array(firsts, dtype=np.int64))
            dev_start[:nk] = starts
            dev_end[:nk] = np.append(starts[1:], span1)
        if n_steps >= 2:
            dev_start[-1] = span1
            dev_end[-1] = max(span1, int(d_end[stream_ok].max()) if stream_ok.any() else span1)

    # ---- ranks
    props = [p for p in (meta.get("deviceProperties") or []) if isinstance(p, dict)]
    dist = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else {}
    device_id = None
    if nd:
        dv = d_dev[d_dev != _NONE]
        if dv.size:
            vals, cnt = np.unique(dv, return_counts=True)
            device_id = int(vals[np.argmax(cnt)])
    prop = next((p for p in props if p.get("id") == device_id), props[0] if props else None)
    runtime_ids = np.unique(h_nid[(h_cat == _H_RUNTIME) | (h_cat == _H_DRIVER)])
    hip_runtime = any(str(n).startswith("hip") for n in names[runtime_ids])
    has_mtia = bool(nd and (d_task == _D_MTIA).any())
    vendor = _vendor(meta, nd, has_mtia, hip_runtime)
    all_starts = [int(a.min()) for a in (h_start, d_start) if a.size]
    first_ns = min(all_starts) if all_starts else None
    if first_ns is not None and base_ns is not None:
        origin = first_ns + base_ns
    elif first_ns is not None and first_ns >= _EPOCH_US * 1000:
        origin = first_ns
    else:
        origin = None
    ws = dist.get("world_size")
    with_stack = bool(meta.get("with_stack")) or bool(f.stack_ids) or bool((h_cat == _H_PYTHON).any())
    t.add("ranks", rank=rank, source_path=str(path), format="kineto", vendor=vendor, framework="pytorch",
          framework_version=None, device_name=prop.get("name") if prop else None,
          device_id=device_id if device_id is not None else (prop.get("id") if prop else None),
          world_size=ws if isinstance(ws, int) else None,
          ai_core_num=prop.get("numSms") if prop and isinstance(prop.get("numSms"), int) else None,
          with_stack=with_stack, time_origin_ns=origin)

    # ---- steps
    window_note = ""
    if synthetic_step:
        all_ends = [int(a.max()) for a in (h_start + h_dur, d_end) if a.size]
        win0, window_note = _stepless_window(first_ns, h_start, h_dur, h_cat, h_nid, names, d_start, launch)
        if win0 is not None:
            t.add("steps", step=0, start_ns=win0, end_ns=max(all_ends), kept=True,
                  device_start_ns=span0, device_end_ns=span1)
            # what starts before the window (initialisation) belongs to no step
            h_step = np.where(h_start < win0, _NONE, np.where(h_step == _NONE, 0, h_step))
            d_step = np.where(d_start < win0, _NONE, np.where(d_step == _NONE, 0, d_step))
    else:
        kept_flags = [True] * n_steps
        if n_steps >= 2:
            kept_flags[-1] = False
        t.extend("steps", {
            "step": st_num.tolist(), "start_ns": st_start.tolist(), "end_ns": st_end.tolist(),
            "device_start_ns": _ints(dev_start), "device_end_ns": _ints(dev_end), "kept": kept_flags,
        })

    # ---- device_ops (+ comm_ops)
    if nd:
        # collective info: on the kernel, else on the cpu op that launched it (same External id)
        h_comm_by_ext: dict[int, _Comm] = {}
        for i, c in f.h_comm.items():
            if h_ext[i] >= 0 and c.collective:
                h_comm_by_ext.setdefault(int(h_ext[i]), c)
        comm_info: dict[int, _Comm] = dict(f.d_comm)
        if h_comm_by_ext:
            for i in np.flatnonzero((d_task == _D_KERNEL) & (d_ext >= 0)).tolist():
                if i not in comm_info and (c := h_comm_by_ext.get(int(d_ext[i]))) is not None:
                    comm_info[i] = c
        has_coll = np.zeros(nd, dtype=bool)
        for i, c in comm_info.items():
            has_coll[i] = bool(c.collective) and d_task[i] == _D_KERNEL
        # classify once per distinct (name, task type, has collective arg)
        key = (d_nid.astype(np.int64) * len(_DEVICE_TASKS) + d_task) * 2 + has_coll
        uniq, inverse = np.unique(key, return_inverse=True)
        labels = np.array([classify_device_op(str(names[k // 2 // len(_DEVICE_TASKS)]),
                                              _DEVICE_TASKS[(k // 2) % len(_DEVICE_TASKS)], bool(k % 2))
                           for k in uniq.tolist()], dtype=object)
        labels, inverse = _comm_by_launcher_and_stream(
            labels, inverse, launch, d_task == _D_KERNEL, d_stream,
            _launcher_ops(names, h_nid, h_cat, h_tid, h_start, h_dur))
        category = labels[inverse]
        collective = np.full(nd, None, dtype=object)
        group = np.full(nd, None, dtype=object)
        size = d_bytes.copy()
        comm_rows = np.flatnonzero(category == "communication")
        for i in comm_rows.tolist():
            c = comm_info.get(i)
            collective[i] = collective_op_type(c.collective if c else None, names[d_nid[i]])
            if c is not None:
                group[i] = c.group
                if size[i] == _NONE and (b := c.size_bytes()) is not None:
                    size[i] = b
        t.extend("device_ops", {
            "step": _ints(d_step), "name": Coded(d_nid, names), "category": Coded(inverse, labels),
            "task_type": Coded(d_task, _DEVICE_TASKS), "stream_id": _ints(d_stream),
            "start_ns": _ints(d_start), "dur_ns": _ints(d_dur), "correlation_id": _ints(d_corr, d_corr < 0),
            "block_dim": _ints(d_grid), "size_bytes": _ints(size), "collective": collective, "group_name": group,
        })
        if comm_rows.size:
            t.extend("comm_ops", {
                "step": _ints(d_step[comm_rows]), "name": Coded(d_nid[comm_rows], names),
                "op_type": collective[comm_rows],
                "group_name": group[comm_rows], "start_ns": _ints(d_start[comm_rows]),
                "elapse_ns": _ints(d_dur[comm_rows]), "size_bytes": _ints(size[comm_rows]),
            })
            t.has("comm_ops")
            if (size[comm_rows] != _NONE).any():
                t.has("nccl_msg_sizes")
        if (d_task == _D_KERNEL).any() or has_mtia:
            t.has("kernels")
        if has_launch.any():
            t.has("correlation")
        if (d_grid != _NONE).any():
            t.has("block_dim")

    _host_collectives(t, names, h_nid, h_cat, h_step, h_start, h_dur)

    # ---- host_ops
    if nh:
        depth = _nesting_depth(h_tid, h_start, h_start + h_dur)
        host = {
            "step": _ints(h_step), "name": Coded(h_nid, names), "category": Coded(h_cat, _HOST_CATEGORIES),
            "tid": _ints(h_tid), "start_ns": _ints(h_start), "dur_ns": _ints(h_dur),
            "correlation_id": _ints(h_corr, h_corr < 0), "external_id": _ints(h_ext, h_ext < 0),
            "depth": _ints(depth),
        }
        # sparse columns only when the trace has them (an absent column is NULL; a column of NULLs
        # still costs the insert a pass over every row)
        if f.has_shapes:
            host["input_dims"], host["input_types"] = h.column("dims", None), h.column("types", None)
        if f.stack_ids:
            host["call_stack"] = Coded(h.column("stack", np.int32), list(f.stack_ids))
        if f.h_comm:
            msg = np.full(nh, _NONE, dtype=np.int64)
            for i, c in f.h_comm.items():
                if (b := c.in_bytes()) is not None and -(2**62) < b < 2**63:
                    msg[i] = b
            host["collective"] = _sparse_text(nh, {i: c.collective for i, c in f.h_comm.items()})
            host["msg_bytes"] = _ints(msg)
        t.extend("host_ops", host)
        if f.has_shapes:
            t.has("record_shapes")
    if with_stack:
        t.has("with_stack")
    if not synthetic_step:
        t.has("steps")

    # ---- metadata, memory
    for k, v in meta.items():
        t.add("metadata", key=k, value_json=msgspec.json.encode(v).decode())
    if f.memory:
        mts = [m[0] for m in f.memory]
        t.extend("memory_records", {
            "ts_ns": mts, "component": [m[1] for m in f.memory],
            "allocated_bytes": [m[2] for m in f.memory], "reserved_bytes": [m[3] for m in f.memory],
        })
        t.has("memory")

    # ---- what the trace lacks
    if nd == 0:
        t.warn("no GPU events: device breakdown unavailable")
    if doc.damage:
        t.warn(f"{path.name} is damaged ({doc.damage}): the {f.host.n + f.dev.n} host and device events read "
               "before the damage are kept, the rest of the file is lost")
    if synthetic_step:
        t.warn("no ProfilerStep#N annotations: the trace is analysed as one step (step 0)" + window_note)
    if not props and nd:
        t.warn("no deviceProperties: device name and SM count unknown")
    if not dist:
        t.warn("no distributedInfo: world size and process groups unknown")
    elif not isinstance(ws, int):
        t.warn("distributedInfo has no world_size: world size unknown")
    if has_mtia:
        t.warn("MTIA trace: device ops are command-processor events (mtia_ccp_events), classified by name "
               "(dma* = memory, event_wait/record = sync, the rest = compute); no per-kernel names")
    if nd:
        no_corr = int(((d_corr < 0) & (d_task != _DEVICE_TASKS.index("cuda_sync"))).sum())
        if no_corr:
            t.warn(f"{no_corr} device ops have no launch correlation: their step is assigned by time")
        unmatched = int(((d_corr >= 0) & ~has_launch).sum())
        if unmatched:
            t.warn(f"{unmatched} device ops whose launch is not in the trace: their step is assigned by time")
        if prop is not None and not isinstance(prop.get("numSms"), int):
            t.warn("deviceProperties has no numSms: device core count unknown")
    if origin is None and first_ns is not None:
        t.warn("timestamps are not epoch-based and baseTimeNanoseconds is absent: absolute time unknown")
    if f.no_dur:
        t.warn(f"{f.no_dur} complete events without a usable ts or dur (absent, or beyond int64 ns) were skipped")
    if f.skipped:
        cats = ", ".join(f"{c} ({n})" for c, n in f.skipped.most_common(5))
        t.warn(f"{sum(f.skipped.values())} complete events of categories this reader does not know were skipped: "
               f"{cats}")
