"""kernel_details.csv, and device_ops: the CSV's rows joined with the trace's device tasks."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ProfileError
from ..ascend_columns import (
    ARITHMETIC_COLUMNS,
    KERNEL_DETAILS,
    PIPE_RATIO_COLUMNS,
    Resolved,
    normalize_header,
)
from ..ascend_common import collective_of
from .common import task_category
from .csv_io import FLOAT, INT, NS, QTEXT, TEXT, Converted, Frame, isna
from .frames import (
    Launches,
    Steps,
    comm_lane,
    concat,
    first_matches,
    first_rows,
    int64s,
    jdump,
    na_steps,
    nulls,
    objects,
    op_types,
    pair_codes,
    put,
    short_names,
)
from .numbers import i64, i64_rows, int32
from .reader_base import ReaderBase
from .trace_columns import TraceColumns


class DeviceOps(ReaderBase):
    """Reads kernel_details.csv and builds device_ops and the device steps."""

    # -- kernel_details.csv ---------------------------------------------------------------------------

    def kernel_details(self) -> Frame | None:
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

    def _kernel_details(self) -> Frame | None:
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
        sel: list[Converted] = [("name", f["name"], TEXT), ("start_ns", f["start"], NS), ("dur_ns", f["dur"], NS)]
        sel += [(c, f[c], INT) for c in ("step", "stream_id", "task_id", "block_dim", "mix_block_dim", "device_id")
                if c in f]
        sel += [(c, f[c], TEXT) for c in ("op_type", "op_state", "task_type") if c in f]
        sel += [(c, f[c], QTEXT) for c in ("input_shapes", "input_dtypes", "input_formats", "output_shapes",
                                              "output_dtypes") if c in f]
        ratios = [c for c in PIPE_RATIO_COLUMNS if c in f]
        sel += [(c, f[c], FLOAT) for c in ratios]
        df = self.query_converted(path, sel, required=True)
        if df is None or not len(df):
            self.warn(path, "no rows (no kernels recorded)")
            return None
        bad = isna(df["name"]) | isna(df["start_ns"]) | isna(df["dur_ns"])
        if bad.any():
            self.warn(path, f"{int(bad.sum())} of {len(df)} rows without a name, start or duration skipped")
            df = df.take(np.flatnonzero(~bad))
            if not len(df):
                return None
        n = len(df)
        # absent columns: all NULL
        for c in ("step", "stream_id", "task_id", "block_dim", "mix_block_dim", "device_id"):
            if c not in df:
                df[c] = nulls(n)
        for c in ("op_type", "op_state", "task_type", "input_shapes", "input_dtypes", "input_formats",
                  "output_shapes", "output_dtypes"):
            if c not in df:
                df[c] = np.full(n, None, dtype=object)
        for c in PIPE_RATIO_COLUMNS:
            if c not in df:
                df[c] = np.full(n, np.nan)
        self.t.has("kernel_details")
        self._kernel_capabilities(path, res, df, ratios)
        dev_id = ~isna(df["device_id"])
        if dev_id.any() and self.device.get("device_id") is None:
            self.device["device_id"] = int(np.ma.getdata(df["device_id"])[np.argmax(dev_id)])
        return df

    def _kernel_capabilities(self, path: Path, res: Resolved, df: Frame, ratios: list[str]) -> None:
        f = res.found

        def any_value(c: str) -> bool:
            return not isna(df[c]).all()

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
            self.t.add("metadata", key="kernel_metrics", value_json=jdump("PipeUtilization"))
        else:
            arith = {normalize_header(c) for c in res.unknown} & set(ARITHMETIC_COLUMNS)
            if arith:
                self.warn(path, "PMU metrics are ArithmeticUtilization (aic_metrics), not PipeUtilization: "
                                "pipe ratios unknown, the no-bound check is not applicable")
                self.t.add("metadata", key="kernel_metrics", value_json=jdump("ArithmeticUtilization"))
            else:
                self.warn(path, "no PMU pipe-ratio columns (Level0 or aic_metrics off): the no-bound check is "
                                "not applicable")

    # -- device ops -----------------------------------------------------------------------------------

    def device_ops(self, kd: Frame | None, host: dict[str, Any] | None, steps: Steps) -> dict[str, np.ndarray]:
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
            k_stream = i64(kd["stream_id"])
            k_corr = nulls(n_kd)
            k_group = np.full(n_kd, None, dtype=object)
            if len(ki):
                k_corr = put(k_corr, ki, cand["corr"][ti])
                k_group[ki] = cand["group_name"][ti]
                fill = k_stream._mask[ki]
                k_stream = put(k_stream, ki[fill], cand["stream_id"][ti[fill]])
            k_name, k_type = kd["name"], kd["task_type"]
            cols = {"name": k_name, "op_type": kd["op_type"], "task_type": k_type,
                    "category": self._categories(k_type, k_name, "compute"), "stream_id": k_stream,
                    "start_ns": int64s(kd["start_ns"]), "dur_ns": int64s(kd["dur_ns"]),
                    "correlation_id": k_corr, "group_name": k_group, "size_bytes": nulls(n_kd)}
        if n_rest:
            r_name, r_type = cand["name"][rest], cand["task_type"][rest]
            r_cols = {"name": r_name, "op_type": cand["op_type"][rest], "task_type": r_type,
                      "category": self._categories(r_type, r_name, "other"), "stream_id": cand["stream_id"][rest],
                      "start_ns": cand["start_ns"][rest], "dur_ns": cand["dur_ns"][rest],
                      "correlation_id": cand["corr"][rest], "group_name": cand["group_name"][rest],
                      "size_bytes": cand["size_bytes"][rest]}
            cols = {c: concat(v, r_cols[c]) for c, v in cols.items()} if cols else r_cols
        category = cols["category"]
        # kernel_details Step Id: the kd rows' own, none for the trace's
        source = concat(i64(kd["step"]), nulls(n_rest)) if kd is not None else nulls(n_rest)
        step = self._device_steps(cols["start_ns"], cols["correlation_id"], source, host, steps)
        collective = [collective_of(str(n)) if c == "communication" else None
                      for n, c in zip(cols["name"].tolist(), category.tolist(), strict=True)]
        out = {"step": na_steps(step), **cols, "collective": collective}
        if kd is not None:
            for c in ("block_dim", "mix_block_dim"):
                out[c] = int32(concat(i64(kd[c]), nulls(n_rest)))
            for c in ("op_state", "input_shapes", "input_dtypes", "input_formats", "output_shapes",
                      "output_dtypes"):
                out[c] = concat(kd[c], np.full(n_rest, None, dtype=object))
            for c in PIPE_RATIO_COLUMNS:
                out[c] = concat(np.array(kd[c], dtype=np.float64), np.full(n_rest, np.nan))
            kd.keep("op_type")  # (op_statistic's; the rest is in `out` now, not twice while it is typed)
        cand = r_cols = None  # (their columns are in `out`)
        self.t.extend("device_ops", out)
        self.t.has("device_ops")
        return {"step": step, "start_ns": cols["start_ns"]}

    def _trace_device_tasks(self, tr: TraceColumns | None,
                            pairs: Launches | None) -> tuple[dict[str, Any], dict[str, Any]]:
        """Device task candidates from the trace (hcom ops, then Ascend Hardware tasks; a task with the name
        and start of an earlier one is dropped) and the hcom ops alone, as columns (object / int64 arrays,
        masked int64 arrays); the HCCL sub-tasks (Plane threads) go to `comm_task_cols`."""
        if tr is None:
            return {}, {}
        # (converted first, as the frame-based reader did: a value beyond int64 raises before any other)
        hw_stream, hw_task, hw_conn = i64(tr.d_stream), i64(tr.d_task_id), i64(tr.d_conn)
        # Which Communication threads carry the ops: "Group <hash> Communication"; the others are "Plane N".
        # Decided once per thread (None: no thread name, then by the event name).
        thread, threads = pair_codes(tr.c_pid, tr.c_tid)
        lanes = [comm_lane(tr.thread_names.get(key)) for key in threads]
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
               "dur_ns": c_dur[op_mask], "conn": i64_rows(tr.c_conn, op_mask),
               "size_bytes": i64_rows(tr.c_msg_bytes, op_mask),
               "group_name": objects([group for _, group in lanes])[thread[op_mask]].tolist()}
        self.comm_task_cols = {
            "pid": of_tasks(tr.c_pid), "tid": of_tasks(tr.c_tid), "name": of_tasks(tr.c_name),
            "start_ns": c_start[task_mask], "dur_ns": c_dur[task_mask], "size": i64_rows(tr.c_size, task_mask),
            "transport": of_tasks(tr.c_transport), "link": of_tasks(tr.c_link),
            "src": i64_rows(tr.c_src, task_mask), "dst": i64_rows(tr.c_dst, task_mask),
            "bw": tr.c_bw[task_mask], "thread": thread[task_mask], "threads": threads,
        }
        cand = {"pid": objects(ops["pid"] + list(tr.d_pid)), "tid": objects(ops["tid"] + list(tr.d_tid)),
                "name": objects(op_names + list(tr.d_name)),
                "start_ns": np.concatenate([ops["start_ns"], np.asarray(tr.d_start, dtype=np.int64)]),
                "dur_ns": np.concatenate([ops["dur_ns"], np.asarray(tr.d_dur, dtype=np.int64)]),
                "task_type": objects(["HCCL"] * n_ops + list(tr.d_task_type)),
                "stream_id": concat(nulls(n_ops), hw_stream), "task_id": concat(nulls(n_ops), hw_task),
                "conn": concat(ops["conn"], hw_conn), "group_name": objects(ops["group_name"] + [None] * n_hw),
                "op_type": objects(op_types(op_names) + [None] * n_hw),
                "size_bytes": concat(ops["size_bytes"], nulls(n_hw))}
        # an op present both as a Communication op and an Ascend Hardware task is one op (keep the former)
        starts = cand["start_ns"].tolist()
        keys = list(zip(cand["name"].tolist(), starts, strict=True))
        if len(set(keys)) < len(keys):
            first = first_rows(keys)
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
            cand["corr"] = i64([corr_at.get(key) for key in zip(cand["pid"].tolist(), cand["tid"].tolist(),
                                                                  starts, strict=True)])
        return cand, ops

    @staticmethod
    def _join(kd: Frame, cand: dict[str, Any]) -> tuple[np.ndarray, np.ndarray]:
        """(kernel_details row, trace candidate) index pairs of the same task, one-to-one: the first row of
        each key on either side, in kernel_details order (what merging the deduplicated sides gives)."""
        # first: same start and short name. kernel_details names are never null here (rows without one are
        # dropped), so a null key of the trace never matches.
        t_start, k_start = cand["start_ns"], int64s(kd["start_ns"])
        first = first_rows(zip(t_start.tolist(), short_names(cand["name"].tolist()), strict=True))
        ki, ti = first_matches(zip(k_start.tolist(), short_names(kd["name"].tolist()), strict=True),
                                first, range(len(kd)))
        # second chance: same start on the same stream with the same task id (names differ), among the rows
        # left with both ids
        if len(ki) < len(kd) and len(ti) < len(t_start):
            t_stream, t_task = cand["stream_id"], cand["task_id"]
            t_rows = ~(t_stream._mask | t_task._mask)
            t_rows[ti] = False
            t_rows = np.flatnonzero(t_rows)
            k_stream, k_task = i64(kd["stream_id"]), i64(kd["task_id"])
            k_rows = ~(k_stream._mask | k_task._mask)
            k_rows[ki] = False
            k_rows = np.flatnonzero(k_rows)
            if len(k_rows) and len(t_rows):
                second = first_rows(zip(t_start[t_rows].tolist(), t_stream._data[t_rows].tolist(),
                                         t_task._data[t_rows].tolist(), strict=True), t_rows.tolist())
                ki2, ti2 = first_matches(zip(k_start[k_rows].tolist(), k_stream._data[k_rows].tolist(),
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
        return objects(list(map(table.__getitem__, keys)))

    def _device_steps(self, start: np.ndarray, corr: np.ma.MaskedArray, source: np.ma.MaskedArray,
                      host: dict[str, Any] | None, steps: Steps) -> np.ndarray:
        """Step of each device op (-1 = none): kernel_details Step Id (`source`), else the step of the host
        op that launched it (`corr`), else the step its start falls in (see `Steps.of_device`)."""
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

    def emit_steps(self, steps: Steps, dev: dict[str, np.ndarray]) -> None:
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
