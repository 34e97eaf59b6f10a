"""trace_view.json -> host ops, steps, launch flows, HCCL tasks, frequency and overlap tables."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ...errors import ProfileError
from .common import INT32_MAX
from .frames import Launches, Steps, code_groups, jdump, na_steps, objects, pair_codes
from .numbers import i64, int32, ma
from .reader_base import ReaderBase
from .trace_columns import TraceColumns
from .trace_events import DEVICE_KINDS, HARDWARE, HOST_KINDS, INT64_MAX, INT64_MIN, as_int, sentinel_id
from .trace_parser import TraceParser


class TraceView(ReaderBase):
    """Reads trace_view.json into the host-side and HCCL tables."""

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

    def steps(self, tr: TraceColumns | None) -> Steps:
        if tr is None:
            return Steps()
        if not tr.steps:
            if tr.n_events:
                self.warn(self.out / "trace_view.json", "no ProfilerStep#N events (no profiler schedule): "
                                                        "per-step tables (steps, breakdown) are empty")
            return Steps()
        seen: dict[int, tuple[int, int]] = {}
        for n, start, dur in tr.steps:
            if n in seen:
                self.warn(self.out / "trace_view.json", f"ProfilerStep#{n} appears twice; the first is kept")
                continue
            seen[n] = (start, start + dur)
        items = sorted(seen.items(), key=lambda kv: kv[1][0])
        return Steps(np.array([k for k, _ in items], dtype=np.int64),
                      np.array([v[0] for _, v in items], dtype=np.int64),
                      np.array([v[1] for _, v in items], dtype=np.int64))

    def launch_flows(self, tr: TraceColumns) -> Launches:
        """Host -> device flow pairs (async_npu, HostToDevice, ...), one per flow (cat, id) in the order of
        their first start event (the first start and the first end of a flow are paired).

        A flow is a launch link when its start is on a host process and its end on a device one; host-only
        flows (async_task_queue enqueue -> dequeue, fwdbwd) are left out. A few thousand flows per rank: one
        pass with dicts (a DataFrame, two drop_duplicates and a merge cost ~5x more).
        """
        pairs = Launches()
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
            elif ph == "f" and key not in ends and kinds.get(pid) in DEVICE_KINDS:
                ends[key] = j
        # A sentinel id (UINT32_MAX, -1, UINT64_MAX) names no flow: pairing on it would join unrelated events.
        matched = [(key, s, ends[key]) for key, s in starts.items() if key in ends and not sentinel_id(key[1])]
        if not matched:
            return pairs
        # Flow ids are opaque (HCCL's exceed int64: "55426082093320372223", as text or a number). An int64 id
        # is kept: it is the CANN connection id the DB export joins on, shared by a task's async_npu and
        # HostToDevice flows. Any other (cat, id) is interned after the largest, by first appearance.
        ids = [i if i is not None and INT64_MIN <= i <= INT64_MAX else None
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

    def host_frame(self, tr: TraceColumns, steps: Steps, pairs: Launches) -> dict[str, Any]:
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
        track, tracks = pair_codes(tr.h_pid, tr.h_tid)   # track = (pid, tid)
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
            "tid": i64(tid_ints)[track],
            "start_ns": start, "dur_ns": dur, "correlation_id": i64(corr), "depth": int32(depth),
            "input_dims": list(tr.h_dims), "input_types": list(tr.h_types), "call_stack": list(tr.h_stack),
            "step": na_steps(steps.of(start)),
        }
        self._host_capabilities(tr)
        return host

    def _host_capabilities(self, tr: TraceColumns) -> None:
        """The capabilities the host ops give, from their categories and the export's with_stack flag."""
        cats = set(tr.h_cat)
        if len(tr.h_name):
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

    def comm_tasks(self, ops: dict[str, Any], steps: Steps) -> None:
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
            o_name, o_group = objects(ops["name"]), objects(ops["group_name"])
            of_thread: dict[tuple[Any, Any], list[int]] = {}   # op thread (pid, tid) -> its ops
            for j, key in enumerate(zip(ops["pid"], ops["tid"], strict=True)):
                of_thread.setdefault(key, []).append(j)
            threads: dict[Any, list[Any]] = {}
            for pid, tid in of_thread:
                threads.setdefault(pid, []).append(tid)
            # op thread -> its ops by start; quicksort, what pandas' sort_values ran, so that ops of equal start
            # come in the same order (the last of them encloses a task)
            by_start: dict[tuple[Any, Any], np.ndarray] = {}
            for code, rows in code_groups(tasks["thread"]):
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
            "step": na_steps(step), "op_name": op_name.tolist(), "name": tasks["name"],
            "start_ns": start, "dur_ns": tasks["dur_ns"], "size_bytes": tasks["size"],
            "transport": tasks["transport"], "link_type": tasks["link"],
            "src_rank": self._global_ranks(op_group, tasks["src"]),
            "dst_rank": self._global_ranks(op_group, tasks["dst"]),
            "bandwidth_gbps": tasks["bw"],
        })
        self.t.has("comm_tasks")

    def _global_ranks(self, groups: np.ndarray, local: np.ma.MaskedArray) -> np.ma.MaskedArray:
        """`map_rank(group, local)` of every row as an INTEGER column (`int32` of it), a group at a time."""
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
                return int32([self.map_rank(g, x)
                               for g, x in zip(groups.tolist(), local.tolist(), strict=True)])
            sel = (groups == g) & ~mask & (data < len(table))
            data[sel] = table[data[sel]]
        mask |= (data < -INT32_MAX) | (data > INT32_MAX)
        data[mask] = 1
        return ma(data, mask)

    def freq(self, tr: TraceColumns) -> None:
        if not tr.f_ts:
            return
        order = np.argsort(np.array(tr.f_ts, dtype=np.int64), kind="stable")
        self.t.extend("freq_samples", {"ts_ns": i64(np.array(tr.f_ts, dtype=np.int64)[order]),
                                       "freq_mhz": np.array(tr.f_mhz, dtype=float)[order]})
        self.t.has("freq")

    def overlap(self, tr: TraceColumns, steps: Steps) -> None:
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
        self.t.add("metadata", key="overlap_analysis", value_json=jdump(rows))
