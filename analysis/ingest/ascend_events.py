"""The events both Ascend readers (text export, DB export) hand to the store, one struct-of-arrays type per
kind: host ops, device ops, communication ops and their HCCL sub-tasks.

Each field is one column of the schema table of the same name (schema.sql), as `RankTables.extend` takes it:
a list, a numpy array (`np.ma.MaskedArray` for NULLs) or a pandas array. A field left None is a column the
reader does not give: absent from the block, so NULL (or its schema DEFAULT) in the store, which is not the
same as a column of NULLs for the readers' tests and their capabilities. Every present column has one value
per row.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from .base import RankTables


@dataclass(frozen=True, slots=True)
class _Columns:
    def columns(self) -> dict[str, Any]:
        """The present columns by name, as `RankTables.extend` takes them."""
        return {f.name: v for f in fields(self) if (v := getattr(self, f.name)) is not None}

    def __len__(self) -> int:
        return len(self.start_ns)  # type: ignore[attr-defined]  # (every kind has start_ns)


@dataclass(frozen=True, slots=True)
class HostOps(_Columns):
    """host_ops: framework ops, CANN API calls and GC pauses."""

    name: Any
    category: Any
    tid: Any
    start_ns: Any
    dur_ns: Any
    step: Any
    correlation_id: Any = None
    depth: Any = None
    input_dims: Any = None
    input_types: Any = None
    call_stack: Any = None


@dataclass(frozen=True, slots=True)
class DeviceOps(_Columns):
    """device_ops: kernels, memory copies, waits and the collectives' op spans."""

    step: Any
    name: Any
    category: Any
    task_type: Any
    start_ns: Any
    dur_ns: Any
    correlation_id: Any
    op_type: Any = None
    stream_id: Any = None
    group_name: Any = None
    size_bytes: Any = None
    collective: Any = None
    block_dim: Any = None
    mix_block_dim: Any = None
    op_state: Any = None
    input_shapes: Any = None
    input_dtypes: Any = None
    input_formats: Any = None
    output_shapes: Any = None
    output_dtypes: Any = None
    # the PMU pipe ratios (PipeUtilization), ascend_columns.PIPE_RATIO_COLUMNS
    aic_mac_ratio: Any = None
    aic_scalar_ratio: Any = None
    aic_mte1_ratio: Any = None
    aic_mte2_ratio: Any = None
    aic_fixpipe_ratio: Any = None
    aiv_vec_ratio: Any = None
    aiv_scalar_ratio: Any = None
    aiv_mte2_ratio: Any = None
    aiv_mte3_ratio: Any = None


@dataclass(frozen=True, slots=True)
class CommOps(_Columns):
    """comm_ops: one row per collective call, with the communication analysis' times when known."""

    step: Any
    name: Any
    op_type: Any
    group_name: Any
    start_ns: Any
    elapse_ns: Any
    size_bytes: Any
    transit_ns: Any = None
    wait_ns: Any = None
    sync_ns: Any = None
    idle_ns: Any = None


@dataclass(frozen=True, slots=True)
class CommTasks(_Columns):
    """comm_tasks: the HCCL sub-tasks (memcpy, notify, reduce ...) of the collectives."""

    step: Any
    op_name: Any
    name: Any
    start_ns: Any
    dur_ns: Any
    size_bytes: Any
    transport: Any
    link_type: Any
    src_rank: Any
    dst_rank: Any
    bandwidth_gbps: Any


_TABLE = {HostOps: "host_ops", DeviceOps: "device_ops", CommOps: "comm_ops", CommTasks: "comm_tasks"}


def emit(t: RankTables, events: HostOps | DeviceOps | CommOps | CommTasks) -> None:
    """Add the events to their table (one `extend` block)."""
    t.extend(_TABLE[type(events)], events.columns())
