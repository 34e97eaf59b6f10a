"""The trace's device side: device task candidates (hcom ops, Ascend Hardware tasks), the hcom ops alone,
their HCCL sub-tasks (Plane threads) and the comm_tasks table, with group-local ranks mapped to global ones."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np

from ..ascend_events import CommTasks, emit
from ..base import RankTables
from .common import INT32_MAX
from .frames import (
    Launches,
    Steps,
    code_groups,
    comm_lane,
    concat,
    first_rows,
    na_steps,
    nulls,
    objects,
    op_types,
    pair_codes,
)
from .numbers import i64, i64_rows, int32, ma
from .trace_events import as_int
from .trace_groups import TraceColumns

# group hash -> {group_name, pg_name, global_ranks} (profiler_metadata.json parallel_group_info)
Groups = Mapping[str, Mapping[str, Any]]


@dataclass(frozen=True, slots=True)
class TraceDeviceTasks:
    """The trace's device task candidates for device_ops: hcom ops, then Ascend Hardware tasks (a task with the
    name and start of an earlier one dropped); object / int64 arrays, masked int64 arrays for the ids."""

    pid: np.ndarray
    tid: np.ndarray
    name: np.ndarray
    start_ns: np.ndarray
    dur_ns: np.ndarray
    task_type: np.ndarray
    stream_id: np.ma.MaskedArray
    task_id: np.ma.MaskedArray
    conn: np.ma.MaskedArray
    group_name: np.ndarray
    op_type: np.ndarray
    size_bytes: np.ma.MaskedArray
    corr: np.ma.MaskedArray                # the launch link (see `trace_device_tasks`)

    def __len__(self) -> int:
        return len(self.name)


@dataclass(frozen=True, slots=True)
class HcomOps:
    """The hcom ops of the Communication process (its "Group <hash> Communication" threads)."""

    pid: list[Any]
    tid: list[Any]
    name: list[str]
    start_ns: np.ndarray
    dur_ns: np.ndarray
    conn: np.ma.MaskedArray
    size_bytes: np.ma.MaskedArray
    group_name: list[str | None]


@dataclass(frozen=True, slots=True)
class PlaneTasks:
    """The HCCL sub-tasks of the Communication process (its "Plane N" threads); `thread` codes into `threads`,
    the distinct (pid, tid)."""

    name: list[str]
    start_ns: np.ndarray
    dur_ns: np.ndarray
    size: np.ma.MaskedArray
    transport: list[str | None]
    link: list[str | None]
    src: np.ma.MaskedArray
    dst: np.ma.MaskedArray
    bw: np.ndarray
    thread: np.ndarray
    threads: list[tuple[Any, Any]]


class TraceTasks(NamedTuple):
    candidates: TraceDeviceTasks
    hcom: HcomOps
    plane: PlaneTasks


def trace_device_tasks(tr: TraceColumns, pairs: Launches) -> TraceTasks:
    """The trace's device task candidates, its hcom ops and its HCCL sub-tasks (from `tr.hardware`, `tr.comm`)."""
    hw, cm = tr.hardware, tr.comm
    # (converted first: a value beyond int64 raises before any other conversion can)
    hw_stream, hw_task, hw_conn = i64(hw.stream), i64(hw.task_id), i64(hw.conn)
    # Which Communication threads carry the ops: "Group <hash> Communication"; the others are "Plane N".
    # Decided once per thread (None: no thread name, then by the event name).
    thread, threads = pair_codes(cm.pid, cm.tid)
    lanes = [comm_lane(tr.thread_names.get(key)) for key in threads]
    lane_op = [op for op, _ in lanes]
    if None in lane_op:
        is_op = [name.startswith("hcom_") if op is None else op
                 for op, name in zip(map(lane_op.__getitem__, thread.tolist()), cm.name, strict=True)]
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

    c_start, c_dur = np.asarray(cm.start, dtype=np.int64), np.asarray(cm.dur, dtype=np.int64)
    hcom = HcomOps(pid=of_ops(cm.pid), tid=of_ops(cm.tid), name=of_ops(cm.name), start_ns=c_start[op_mask],
                   dur_ns=c_dur[op_mask], conn=i64_rows(cm.conn, op_mask), size_bytes=i64_rows(cm.msg_bytes, op_mask),
                   group_name=objects([group for _, group in lanes])[thread[op_mask]].tolist())
    plane = PlaneTasks(name=of_tasks(cm.name), start_ns=c_start[task_mask], dur_ns=c_dur[task_mask],
                       size=i64_rows(cm.size, task_mask), transport=of_tasks(cm.transport), link=of_tasks(cm.link),
                       src=i64_rows(cm.src, task_mask), dst=i64_rows(cm.dst, task_mask), bw=cm.bw[task_mask],
                       thread=thread[task_mask], threads=threads)
    return TraceTasks(_candidates(hcom, hw, hw_stream, hw_task, hw_conn, pairs), hcom, plane)


def _candidates(ops: HcomOps, hw: Any, hw_stream: np.ma.MaskedArray, hw_task: np.ma.MaskedArray,
                hw_conn: np.ma.MaskedArray, pairs: Launches) -> TraceDeviceTasks:
    """The hcom ops then the hardware tasks as device task candidates, with their launch links."""
    n_ops, n_hw = len(ops.name), len(hw.name)
    cand = {"pid": objects(ops.pid + list(hw.pid)), "tid": objects(ops.tid + list(hw.tid)),
            "name": objects(ops.name + list(hw.name)),
            "start_ns": np.concatenate([ops.start_ns, np.asarray(hw.start, dtype=np.int64)]),
            "dur_ns": np.concatenate([ops.dur_ns, np.asarray(hw.dur, dtype=np.int64)]),
            "task_type": objects(["HCCL"] * n_ops + list(hw.task_type)),
            "stream_id": concat(nulls(n_ops), hw_stream), "task_id": concat(nulls(n_ops), hw_task),
            "conn": concat(ops.conn, hw_conn), "group_name": objects(ops.group_name + [None] * n_hw),
            "op_type": objects(op_types(ops.name) + [None] * n_hw),
            "size_bytes": concat(ops.size_bytes, nulls(n_hw))}
    # an op present both as a Communication op and an Ascend Hardware task is one op (keep the former)
    starts = cand["start_ns"].tolist()
    keys = list(zip(cand["name"].tolist(), starts, strict=True))
    if len(set(keys)) < len(keys):
        first = first_rows(keys)
        keep = np.fromiter(first.values(), dtype=np.int64, count=len(first))
        cand = {c: v[keep] for c, v in cand.items()}
        starts = cand["start_ns"].tolist()
    # launch links come from the flows; args.connection_id only when the export has no flows (see host_frame)
    if not len(pairs):
        corr = cand["conn"]
    else:
        # the task a flow ends on: same pid, tid and start (the first flow of a place wins)
        corr_at: dict[tuple[Any, Any, int], int] = {}
        for place, c in zip(zip(pairs.f_pid, pairs.f_tid, pairs.f_ts, strict=True), pairs.corr, strict=True):
            corr_at.setdefault(place, c)
        corr = i64([corr_at.get(key) for key in zip(cand["pid"].tolist(), cand["tid"].tolist(), starts,
                                                     strict=True)])
    return TraceDeviceTasks(**cand, corr=corr)


def map_rank(groups: Groups, group: str | None, local: Any) -> int | None:
    """Group-local rank -> global rank through parallel_group_info (unchanged when the group is unknown)."""
    r = as_int(local)
    if r is None or r < 0 or r > INT32_MAX:
        return None
    g = groups.get(group) if group else None
    if g and 0 <= r < len(g["global_ranks"]):
        return g["global_ranks"][r]
    return r


def comm_tasks(t: RankTables, groups: Groups, ops: HcomOps, tasks: PlaneTasks, steps: Steps) -> None:
    """comm_tasks: the HCCL sub-tasks with the hcom op that encloses them on their group's op thread."""
    start = tasks.start_ns
    n = len(start)
    if not n:
        return
    op_name = np.full(n, None, dtype=object)
    op_group = np.full(n, None, dtype=object)
    op_step = np.full(n, -1, dtype=np.int64)   # step of the enclosing op, -1 = none
    if len(ops.name):
        o_start = ops.start_ns
        o_end = o_start + ops.dur_ns
        o_steps = steps.of_device(o_start)     # as their device_ops rows
        o_name, o_group = objects(ops.name), objects(ops.group_name)
        of_thread: dict[tuple[Any, Any], list[int]] = {}   # op thread (pid, tid) -> its ops
        for j, key in enumerate(zip(ops.pid, ops.tid, strict=True)):
            of_thread.setdefault(key, []).append(j)
        threads: dict[Any, list[Any]] = {}
        for pid, tid in of_thread:
            threads.setdefault(pid, []).append(tid)
        # op thread -> its ops by start; quicksort, what pandas' sort_values ran, so that ops of equal start
        # come in the same order (the last of them encloses a task)
        by_start: dict[tuple[Any, Any], np.ndarray] = {}
        for code, rows in code_groups(tasks.thread):
            pid, tid = tasks.threads[code]
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
    emit(t, CommTasks(step=na_steps(step), op_name=op_name.tolist(), name=tasks.name, start_ns=start,
                      dur_ns=tasks.dur_ns, size_bytes=tasks.size, transport=tasks.transport, link_type=tasks.link,
                      src_rank=_global_ranks(groups, op_group, tasks.src),
                      dst_rank=_global_ranks(groups, op_group, tasks.dst), bandwidth_gbps=tasks.bw))
    t.has("comm_tasks")


def _global_ranks(groups: Groups, of_row: np.ndarray, local: np.ma.MaskedArray) -> np.ma.MaskedArray:
    """`map_rank(group, local)` of every row as an INTEGER column (`int32` of it), a group at a time."""
    data = np.array(local._data, dtype=np.int64)
    mask = np.array(local._mask, dtype=bool) | (data < 0) | (data > INT32_MAX)
    for g in set(of_row.tolist()):
        info = groups.get(g) if g else None
        ranks = info["global_ranks"] if info else None
        if not ranks:
            continue
        try:
            table = np.array(ranks, dtype=np.int64)
        except OverflowError:  # a global rank beyond int64: one row at a time
            return int32([map_rank(groups, g, x) for g, x in zip(of_row.tolist(), local.tolist(), strict=True)])
        sel = (of_row == g) & ~mask & (data < len(table))
        data[sel] = table[data[sel]]
    mask |= (data < -INT32_MAX) | (data > INT32_MAX)
    data[mask] = 1
    return ma(data, mask)
