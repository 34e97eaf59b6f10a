"""Reader for the Ascend text export of one rank: torch_npu `*_ascend_pt` and MindSpore ≥ 2.5 `*_ascend_ms`.

Input (docs/formats.md §1, §4.2), all optional but
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

from .comm_columns import CommRows, MatrixRows, comm_rows_columns, matrix_rows_columns
from .common import ANALYSE_HINT, COMM_MB_BYTES, ENV_VARIABLES, OUTPUT_DIR, task_category
from .csv_io import PLAIN_CSV_BYTES
from .rank import describe
from .rank_files import RankFiles
from .reader import STREAMED, read_rank
from .trace_events import (
    ARGS_BATCH,
    BLOCK_BYTES,
    PIECE_BYTES,
    SENTINEL_IDS,
    CommArgs,
    Event,
    HardwareArgs,
    HostArgs,
    as_float,
    as_int,
    dur_ns,
    message_bytes,
    ts_ns,
)
from .trace_groups import TraceColumns
from .trace_parser import TraceParser
from .trace_view import launch_flows

__all__ = [
    "ANALYSE_HINT", "ARGS_BATCH", "BLOCK_BYTES", "COMM_MB_BYTES", "ENV_VARIABLES", "OUTPUT_DIR", "PIECE_BYTES",
    "PLAIN_CSV_BYTES", "SENTINEL_IDS", "STREAMED", "CommArgs", "CommRows", "Event", "HardwareArgs", "HostArgs",
    "MatrixRows", "RankFiles", "TraceColumns", "TraceParser", "as_float", "as_int", "comm_rows_columns",
    "describe", "dur_ns", "launch_flows", "matrix_rows_columns", "message_bytes", "read_rank", "task_category",
    "ts_ns",
]
