r"""Kineto (PyTorch profiler) trace reader: one `.json` / `.json.gz` file -> one rank's normalized tables.

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
    `Operator` in PyTorch 1.8; regex `ProfilerStep\s*#\s*(\d+)`) on the thread that has most of them,
    the first event per step number (a step written twice counts once); GPU copies (`gpu_user_annotation`, AMD) are not steps. Host window =
    the annotation. With >= 2 steps the last one gets `kept=False` (HTA drops it: the profiler usually
    cuts it short, its kernels still running), except on a host-only rank (CPU training) whose last step ends
    in the same op as the step before it: all of its work is in the annotation (`columns.last_step_whole`);
    a damaged file's last step is never kept. A trace without any ProfilerStep gets one step 0 from the end of its initialisation to its last event
    (`steps._stepless_window` says how the start is chosen; the warning repeats it).
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
    when it takes HTA's op set, the ops with `hta_kept` (stream ops; with the last step dropped, only
    those launched, or without a correlation starting, before the cutoff; Event / Context Sync always);
    counting all ops gives the device's real busy time instead.

Capabilities: kernels, steps, correlation, record_shapes, with_stack, nccl_msg_sizes, block_dim,
memory, comm_ops; never `gc` (Kineto does not record Python GC).
"""

from .events import TIME_LIMIT_US, TraceDoc, ts_ns, us_to_ns
from .names import (
    DTYPE_BYTES,
    LAUNCH_APIS,
    classify_device_op,
    collective_op_type,
)
from .reader import read_rank

__all__ = [
    "DTYPE_BYTES", "LAUNCH_APIS", "TIME_LIMIT_US", "TraceDoc", "classify_device_op",
    "collective_op_type", "read_rank", "ts_ns", "us_to_ns",
]
