"""Column-name tables for the Ascend text export (torch_npu `*_ascend_pt`, MindSpore `*_ascend_ms`, msprof).

Profiler versions rename, add, drop and reorder CSV columns, so readers never index by position: each file
has one `FileColumns` table mapping a canonical name to every header spelling seen in the wild. Headers
are compared after `normalize_header` (BOM, surrounding spaces and tabs removed, inner whitespace collapsed,
case folded), so `"Start Time(us)\t"` and `"start time(us)"` are the same column.

Known variants covered here (docs/formats.md §1.2):
- `Block Dim` / `Block Num`, `Mix Block Dim` / `Mix Block Num` (newer torch_npu writes *Num*);
- a `Device_id` column first (newer torch_npu), second (CANN 8.3) or none (MindSpore, older torch_npu);
  matched by name, never by position; its cells are the device index (not the rank), `host` in
  api_statistic.csv (host API rows);
- `OP State` and `HF32 Eligible` missing (older CANN); `Step Id` (torch_npu) / `Step ID` (MindSpore);
- msprof `op_summary_*.csv` names: `Op Name, OP Type, Task Type, Task Start Time(us), Task Duration(us),
  Task Wait Time(us)`;
- PMU metrics: PipeUtilization (`aic_mac_ratio` ...), ArithmeticUtilization (`aic_mac_fp16_ratio` ...), older
  unprefixed op_summary ratios (`mac_ratio`, `vec_ratio` ...), or none at all (Level0).

A column marked `required` must be present or the file cannot be used; every other column is optional and
its absence only switches the matching capability off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_WS_RE = re.compile(r"\s+")


def normalize_header(header: str) -> str:
    """Comparable form of a CSV header: no BOM, no surrounding whitespace/tabs, single spaces, lower case."""
    return _WS_RE.sub(" ", header.replace("\ufeff", "").strip()).lower()


@dataclass(frozen=True)
class Col:
    """One canonical column and the header spellings accepted for it (first match wins)."""

    name: str
    variants: tuple[str, ...]
    required: bool = False


@dataclass(frozen=True)
class Resolved:
    """Result of matching a file's header row against its `FileColumns` table."""

    found: dict[str, str]                      # canonical name -> header exactly as written in the file
    missing_required: list[str]                # canonical names (first variant shown) that are absent
    missing_optional: list[str]
    unknown: list[str] = field(default_factory=list)  # headers no table entry claims (kept for diagnostics)

    def has(self, *names: str) -> bool:
        return all(n in self.found for n in names)


@dataclass(frozen=True)
class FileColumns:
    """The mapping table of one file."""

    file: str
    columns: tuple[Col, ...]

    def resolve(self, headers: list[str]) -> Resolved:
        by_norm: dict[str, str] = {}
        for h in headers:
            by_norm.setdefault(normalize_header(h), h)
        found: dict[str, str] = {}
        claimed: set[str] = set()
        for col in self.columns:
            for v in col.variants:
                nv = normalize_header(v)
                if nv in by_norm and nv not in claimed:
                    found[col.name] = by_norm[nv]
                    claimed.add(nv)
                    break
        missing_req = [c.variants[0] for c in self.columns if c.required and c.name not in found]
        missing_opt = [c.name for c in self.columns if not c.required and c.name not in found]
        unknown = [h for n, h in by_norm.items() if n not in claimed]
        return Resolved(found, missing_req, missing_opt, unknown)


# --- kernel_details.csv (torch_npu / MindSpore) and msprof op_summary_*.csv -----------------------------

# Canonical ratio name -> accepted headers. The unprefixed op_summary names map the way msprof-analyze's
# advisor reads them: mac_* only from the cube (aic_), vec_* only from the vector core (aiv_).
PIPE_RATIO_COLUMNS: dict[str, tuple[str, ...]] = {
    "aic_mac_ratio": ("aic_mac_ratio", "mac_ratio"),
    "aic_scalar_ratio": ("aic_scalar_ratio", "scalar_ratio"),
    "aic_mte1_ratio": ("aic_mte1_ratio", "mte1_ratio"),
    "aic_mte2_ratio": ("aic_mte2_ratio", "mte2_ratio"),
    "aic_fixpipe_ratio": ("aic_fixpipe_ratio", "fixpipe_ratio"),
    "aiv_vec_ratio": ("aiv_vec_ratio", "vec_ratio"),
    "aiv_scalar_ratio": ("aiv_scalar_ratio",),
    "aiv_mte2_ratio": ("aiv_mte2_ratio",),
    "aiv_mte3_ratio": ("aiv_mte3_ratio", "mte3_ratio"),
}

# Headers of the ArithmeticUtilization metric set: recognised only to explain why pipe ratios are absent.
ARITHMETIC_COLUMNS: tuple[str, ...] = (
    "aic_mac_fp16_ratio", "aic_mac_int8_ratio", "aic_cube_fops", "aic_vector_fops", "aiv_vec_fp32_ratio",
    "aiv_vec_fp16_ratio", "aiv_vec_int32_ratio", "aiv_vec_misc_ratio", "aiv_cube_fops", "aiv_vector_fops",
    "mac_fp16_ratio", "mac_int8_ratio", "vec_fp32_ratio", "vec_fp16_ratio",
)

KERNEL_DETAILS = FileColumns("kernel_details.csv", (
    Col("device_id", ("Device_id", "Device Id", "Device ID")),
    Col("step", ("Step Id", "Step ID")),
    Col("model_id", ("Model ID", "Model Id")),
    Col("task_id", ("Task ID", "Task Id")),
    Col("stream_id", ("Stream ID", "Stream Id")),
    Col("name", ("Name", "Op Name", "OP Name"), required=True),
    Col("op_type", ("Type", "OP Type", "Op Type")),
    Col("op_state", ("OP State", "Op State")),
    Col("task_type", ("Accelerator Core", "Task Type")),
    Col("start", ("Start Time(us)", "Task Start Time(us)"), required=True),
    Col("dur", ("Duration(us)", "Task Duration(us)"), required=True),
    Col("wait", ("Wait Time(us)", "Task Wait Time(us)")),
    Col("block_dim", ("Block Dim", "Block Num")),
    Col("mix_block_dim", ("Mix Block Dim", "Mix Block Num")),
    Col("hf32_eligible", ("HF32 Eligible",)),
    Col("input_shapes", ("Input Shapes",)),
    Col("input_dtypes", ("Input Data Types",)),
    Col("input_formats", ("Input Formats",)),
    Col("output_shapes", ("Output Shapes",)),
    Col("output_dtypes", ("Output Data Types",)),
    Col("output_formats", ("Output Formats",)),
    Col("context_id", ("Context ID", "Context Id")),
    *(Col(name, variants) for name, variants in PIPE_RATIO_COLUMNS.items()),
))

# --- step_trace_time.csv (µs; torch_npu has a Device_id column, MindSpore has none) ---------------------

STEP_TRACE_TIME = FileColumns("step_trace_time.csv", (
    Col("device_id", ("Device_id", "Device Id", "Device ID")),
    Col("step", ("Step",), required=True),
    Col("computing", ("Computing",), required=True),
    Col("comm_not_overlapped", ("Communication(Not Overlapped)",), required=True),
    Col("overlapped", ("Overlapped",)),
    Col("communication", ("Communication",)),
    Col("free", ("Free",), required=True),
    Col("stage", ("Stage",)),
    Col("bubble", ("Bubble",)),
    Col("comm_not_overlapped_exclude_receive", ("Communication(Not Overlapped and Exclude Receive)",)),
    Col("preparing", ("Preparing",)),
))

# --- op_statistic.csv (cross-check of kernel_details) ---------------------------------------------------

OP_STATISTIC = FileColumns("op_statistic.csv", (
    Col("device_id", ("Device_id", "Device Id")),
    Col("op_type", ("OP Type", "Op Type", "Type"), required=True),
    Col("core_type", ("Core Type", "Accelerator Core")),
    Col("count", ("Count",), required=True),
    Col("total_us", ("Total Time(us)",), required=True),
    Col("min_us", ("Min Time(us)",)),
    Col("avg_us", ("Avg Time(us)",)),
    Col("max_us", ("Max Time(us)",)),
    Col("ratio_pct", ("Ratio(%)",)),
))

# --- memory_record.csv (allocator curve; MB = MiB, KB = KiB in the allocator files) ----------------------

MEMORY_RECORD = FileColumns("memory_record.csv", (
    Col("component", ("Component",)),
    Col("ts", ("Timestamp(us)",), required=True),
    Col("allocated_mb", ("Total Allocated(MB)",)),
    Col("reserved_mb", ("Total Reserved(MB)",)),
    Col("active_mb", ("Total Active(MB)",)),
    Col("allocated_kb", ("Total Allocated(KB)",)),
    Col("reserved_kb", ("Total Reserved(KB)",)),
    Col("active_kb", ("Total Active(KB)",)),
    Col("stream_ptr", ("Stream Ptr",)),
    Col("device_type", ("Device Type", "Device")),
))

OPERATOR_MEMORY = FileColumns("operator_memory.csv", (
    Col("name", ("Name",), required=True),
    Col("size_kb", ("Size(KB)",), required=True),
    Col("alloc_us", ("Allocation Time(us)",), required=True),
    Col("release_us", ("Release Time(us)",)),
    Col("dur_us", ("Duration(us)",)),
    Col("alloc_allocated_mb", ("Allocation Total Allocated(MB)",)),
    Col("alloc_reserved_mb", ("Allocation Total Reserved(MB)",)),
    Col("device_type", ("Device Type",)),
))

API_STATISTIC = FileColumns("api_statistic.csv", (
    Col("device_id", ("Device_id", "Device Id")),
    Col("level", ("Level",)),
    Col("api_name", ("API Name", "Api Name"), required=True),
    Col("time_us", ("Time(us)",), required=True),
    Col("count", ("Count",), required=True),
    Col("avg_us", ("Avg(us)",)),
    Col("min_us", ("Min(us)",)),
    Col("max_us", ("Max(us)",)),
    Col("variance", ("Variance",)),
))

OPERATOR_DETAILS = FileColumns("operator_details.csv", (
    Col("name", ("Name",), required=True),
    Col("input_shapes", ("Input Shapes",)),
    Col("call_stack", ("Call Stack",)),
    Col("host_self_us", ("Host Self Duration(us)",)),
    Col("host_total_us", ("Host Total Duration(us)",)),
    Col("device_self_us", ("Device Self Duration(us)",)),
    Col("device_total_us", ("Device Total Duration(us)",)),
))
