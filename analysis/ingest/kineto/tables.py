"""The device_ops / comm_ops, host_ops, metadata and memory_records rows of one Kineto rank."""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from ..base import Coded, RankTables
from .columns import Trace
from .folder import NONE, Comm, Folder
from .names import (
    D_KERNEL,
    DEVICE_TASKS,
    HOST_CATEGORIES,
    classify_device_op,
    collective_op_type,
)
from .steps import comm_by_launcher_and_stream, ints, launcher_ops, nesting_depth, sparse_text


def _comm_info(tr: Trace, f: Folder) -> dict[int, Comm]:
    """Collective info per device op: on the kernel, else on the cpu op that launched it (same External id)."""
    h_comm_by_ext: dict[int, Comm] = {}
    for i, c in f.h_comm.items():
        if tr.h_ext[i] >= 0 and c.collective:
            h_comm_by_ext.setdefault(int(tr.h_ext[i]), c)
    comm_info: dict[int, Comm] = dict(f.d_comm)
    if h_comm_by_ext:
        for i in np.flatnonzero((tr.d_task == D_KERNEL) & (tr.d_ext >= 0)).tolist():
            if i not in comm_info and (c := h_comm_by_ext.get(int(tr.d_ext[i]))) is not None:
                comm_info[i] = c
    return comm_info


def _categories(tr: Trace, comm_info: dict[int, Comm]) -> tuple[np.ndarray, np.ndarray]:
    """(labels, inverse): each device op's category, classified once per distinct (name, task type, has a
    collective arg), then by the CPU op that launched it and its stream."""
    has_coll = np.zeros(tr.nd, dtype=bool)
    for i, c in comm_info.items():
        has_coll[i] = bool(c.collective) and tr.d_task[i] == D_KERNEL
    n_tasks = len(DEVICE_TASKS)
    key = (tr.d_nid.astype(np.int64) * n_tasks + tr.d_task) * 2 + has_coll
    uniq, inverse = np.unique(key, return_inverse=True)
    labels = np.array([classify_device_op(str(tr.names[k // 2 // n_tasks]), DEVICE_TASKS[(k // 2) % n_tasks],
                                          bool(k % 2)) for k in uniq.tolist()], dtype=object)
    assert tr.launch is not None
    return comm_by_launcher_and_stream(
        labels, inverse, tr.launch, tr.d_task == D_KERNEL, tr.d_stream,
        launcher_ops(tr.names, tr.h_nid, tr.h_cat, tr.h_tid, tr.h_start, tr.h_dur))


def add_device_ops(t: RankTables, tr: Trace, f: Folder, has_mtia: bool, hta_kept: np.ndarray) -> None:
    """device_ops, and comm_ops for the communication ones (op type from the collective arg, else the name);
    `hta_kept`: per op, whether HTA 0.5.0's breakdown counts it (the `hta_kept` column)."""
    if not tr.nd:
        return
    assert tr.d_step is not None
    comm_info = _comm_info(tr, f)
    labels, inverse = _categories(tr, comm_info)
    category = labels[inverse]
    collective = np.full(tr.nd, None, dtype=object)
    group = np.full(tr.nd, None, dtype=object)
    peer = np.full(tr.nd, None, dtype=object)
    size = tr.d_bytes.copy()
    comm_rows = np.flatnonzero(category == "communication")
    for i in comm_rows.tolist():
        c = comm_info.get(i)
        collective[i] = collective_op_type(c.collective if c else None, tr.names[tr.d_nid[i]])
        if c is not None:
            group[i] = c.group
            peer[i] = c.peer
            if size[i] == NONE and (b := c.size_bytes()) is not None:
                size[i] = b
    t.extend("device_ops", {
        "step": ints(tr.d_step), "name": Coded(tr.d_nid, tr.names), "category": Coded(inverse, labels),
        "task_type": Coded(tr.d_task, DEVICE_TASKS), "stream_id": ints(tr.d_stream),
        "start_ns": ints(tr.d_start), "dur_ns": ints(tr.d_dur), "correlation_id": ints(tr.d_corr, tr.d_corr < 0),
        "block_dim": ints(tr.d_grid), "size_bytes": ints(size), "collective": collective, "group_name": group,
        "hta_kept": hta_kept,
    })
    if comm_rows.size:
        t.extend("comm_ops", {
            "step": ints(tr.d_step[comm_rows]), "name": Coded(tr.d_nid[comm_rows], tr.names),
            "op_type": collective[comm_rows],
            "group_name": group[comm_rows], "start_ns": ints(tr.d_start[comm_rows]),
            "elapse_ns": ints(tr.d_dur[comm_rows]), "size_bytes": ints(size[comm_rows]),
            "peer_rank": peer[comm_rows].tolist(),
        })
        t.has("comm_ops")
        if (size[comm_rows] != NONE).any():
            t.has("nccl_msg_sizes")
    if (tr.d_task == D_KERNEL).any() or has_mtia:
        t.has("kernels")
    if tr.has_launch.any():
        t.has("correlation")
    if (tr.d_grid != NONE).any():
        t.has("block_dim")


def add_host_ops(t: RankTables, tr: Trace, f: Folder) -> None:
    """host_ops with their nesting depth; shapes, call stacks and collective args only when the trace has them."""
    nh = tr.nh
    if not nh:
        return
    assert tr.h_step is not None
    depth = nesting_depth(tr.h_tid, tr.h_start, tr.h_start + tr.h_dur)
    host: dict[str, Any] = {
        "step": ints(tr.h_step), "name": Coded(tr.h_nid, tr.names), "category": Coded(tr.h_cat, HOST_CATEGORIES),
        "tid": ints(tr.h_tid), "start_ns": ints(tr.h_start), "dur_ns": ints(tr.h_dur),
        "correlation_id": ints(tr.h_corr, tr.h_corr < 0), "external_id": ints(tr.h_ext, tr.h_ext < 0),
        "depth": ints(depth),
    }
    # sparse columns only when the trace has them (an absent column is NULL; a column of NULLs still costs
    # the insert a pass over every row)
    if f.has_shapes:
        host["input_dims"] = Coded(f.host.column("dims", np.int32), f.texts)
        host["input_types"] = Coded(f.host.column("types", np.int32), f.texts)
    if f.stack_ids:
        host["call_stack"] = Coded(f.host.column("stack", np.int32), list(f.stack_ids))
    if f.h_comm:
        msg = np.full(nh, NONE, dtype=np.int64)
        for i, c in f.h_comm.items():
            if (b := c.in_bytes()) is not None and -(2**62) < b < 2**63:
                msg[i] = b
        host["collective"] = sparse_text(nh, {i: c.collective for i, c in f.h_comm.items()})
        host["msg_bytes"] = ints(msg)
    t.extend("host_ops", host)
    if f.has_shapes:
        t.has("record_shapes")


def add_metadata(t: RankTables, meta: dict[str, Any], f: Folder) -> None:
    """Every top-level key of the trace as JSON, and the allocator's memory records."""
    for k, v in meta.items():
        t.add("metadata", key=k, value_json=msgspec.json.encode(v).decode())
    if f.memory:
        t.extend("memory_records", {
            "ts_ns": [m[0] for m in f.memory], "component": [m[1] for m in f.memory],
            "allocated_bytes": [m[2] for m in f.memory], "reserved_bytes": [m[3] for m in f.memory],
        })
        t.has("memory")

