"""kernel_details.csv, and device_ops: the CSV's rows joined with the trace's device tasks."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

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
from ..ascend_events import DeviceOps, HostOps, emit
from .common import task_category
from .csv_io import FLOAT, INT, NS, QTEXT, TEXT, Converted, Frame, isna
from .frames import (
    Steps,
    concat,
    first_matches,
    first_rows,
    int64s,
    jdump,
    na_steps,
    nulls,
    objects,
    put,
    short_names,
)
from .numbers import i64, int32
from .rank import RankDesc
from .rank_files import RankFiles
from .trace_tasks import TraceDeviceTasks


class KernelDetails(NamedTuple):
    """kernel_details.csv (or msprof's op_summary) as a frame: every column of KERNEL_DETAILS the reader
    uses, absent ones all NULL; rows without a name, start or duration dropped."""

    frame: Frame
    device_id: int | None        # the first row's Device_id (the device index without info.json)


class DeviceSteps(NamedTuple):
    """The device ops' step (-1 = none) and start, row by row: what the steps and ranks rows read."""

    step: np.ndarray
    start_ns: np.ndarray


def kernel_details(desc: RankDesc, io: RankFiles) -> KernelDetails | None:
    """kernel_details.csv; a damaged file costs only itself when the trace or the step table can still give
    the rank its device data (ProfileError otherwise)."""
    try:
        return _kernel_details(desc, io)
    except ProfileError as e:
        others = [n for n in ("trace_view.json", "step_trace_time.csv") if desc.has(n)]
        if not others:
            raise
        io.warn(desc.path("kernel_details.csv"), f"{e.problem}; skipped (kernel types, shapes and pipe ratios "
                                                 f"unknown; the rank keeps {' and '.join(others)})")
        return None


def _kernel_details(desc: RankDesc, io: RankFiles) -> KernelDetails | None:
    path = desc.path("kernel_details.csv")
    if not desc.has("kernel_details.csv"):
        # msprof's op_summary carries the same columns under other names (ascend_columns.KERNEL_DETAILS)
        alt = sorted(desc.root.glob("PROF_*/mindstudio_profiler_output/op_summary_*.csv"))
        if not alt:
            io.warn(path, "missing: kernel types, block dims, op state, shapes and pipe ratios unknown")
            return None
        io.warn(path, f"missing; using {io.rel(alt[0])} instead")
        path = alt[0]
    res = io.resolve_csv(path, KERNEL_DETAILS, required=True)
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
    df = io.query_converted(path, sel, required=True)
    if df is None or not len(df):
        io.warn(path, "no rows (no kernels recorded)")
        return None
    bad = isna(df["name"]) | isna(df["start_ns"]) | isna(df["dur_ns"])
    if bad.any():
        io.warn(path, f"{int(bad.sum())} of {len(df)} rows without a name, start or duration skipped")
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
    io.t.has("kernel_details")
    _kernel_capabilities(io, path, res, df, ratios)
    dev_id = ~isna(df["device_id"])
    return KernelDetails(df, int(np.ma.getdata(df["device_id"])[np.argmax(dev_id)]) if dev_id.any() else None)


def _kernel_capabilities(io: RankFiles, path: Path, res: Resolved, df: Frame, ratios: list[str]) -> None:
    f = res.found

    def any_value(c: str) -> bool:
        return not isna(df[c]).all()

    if "op_state" in f and any_value("op_state"):
        io.t.has("op_state")
    elif "op_state" not in f:
        io.warn(path, "no OP State column (older CANN): operator state unknown, the dynamic-shape check is not "
                      "applicable")
    if "block_dim" in f and any_value("block_dim"):
        io.t.has("block_dim")
    elif "block_dim" not in f:
        io.warn(path, "no Block Dim / Block Num column: the block-dim check is not applicable")
    if "input_shapes" in f and any_value("input_shapes"):
        io.t.has("shapes")
    if "input_dtypes" in f and any_value("input_dtypes"):
        io.t.has("dtypes")
    if "input_shapes" not in f or "input_dtypes" not in f:
        io.warn(path, "no Input Shapes / Input Data Types columns (Level0 or record_shapes off): shape and dtype "
                      "checks are not applicable")
    if ratios and any(map(any_value, ratios)):
        io.t.has("pipe_ratios")
        io.t.add("metadata", key="kernel_metrics", value_json=jdump("PipeUtilization"))
    else:
        arith = {normalize_header(c) for c in res.unknown} & set(ARITHMETIC_COLUMNS)
        if arith:
            io.warn(path, "PMU metrics are ArithmeticUtilization (aic_metrics), not PipeUtilization: pipe ratios "
                          "unknown, the no-bound check is not applicable")
            io.t.add("metadata", key="kernel_metrics", value_json=jdump("ArithmeticUtilization"))
        else:
            io.warn(path, "no PMU pipe-ratio columns (Level0 or aic_metrics off): the no-bound check is not "
                          "applicable")


# -- device ops -------------------------------------------------------------------------------------------


def device_ops(desc: RankDesc, io: RankFiles, kd: KernelDetails | None, cand: TraceDeviceTasks | None,
               host: HostOps | None, steps: Steps) -> tuple[DeviceOps | None, DeviceSteps]:
    """device_ops rows: kernel_details joined with the trace's device task candidates.

    The rows are the kernel_details rows (with the correlation id, group and missing stream of their
    trace task), then the trace tasks no row matched. Built as columns (numpy / lists): a few thousand
    rows per rank, where DataFrame copies, `.loc` writes and a concat cost more than the values.
    """
    frame = kd.frame if kd is not None else None
    n_cand = len(cand) if cand is not None else 0
    if frame is None and not n_cand:
        return None, DeviceSteps(np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))
    if frame is not None and n_cand:
        ki, ti = _join(frame, cand)  # type: ignore[arg-type]
        if len(ki) < len(frame):
            io.warn(desc.path("kernel_details.csv"),
                    f"{len(frame) - len(ki)} of {len(frame)} rows have no matching device task in trace_view.json "
                    "(start time + name or stream/task id); they are kept without launch links")
    else:
        ki = ti = np.empty(0, dtype=np.int64)
    rest = np.ones(n_cand, dtype=bool)    # the trace tasks no kernel_details row matched
    rest[ti] = False
    rest = np.flatnonzero(rest)
    n_rest = len(rest)
    cols = _kernel_rows(frame, cand, ki, ti) if frame is not None else {}
    if n_rest:
        r_cols = _trace_rows(cand, rest)  # type: ignore[arg-type]
        cols = {c: concat(v, r_cols[c]) for c, v in cols.items()} if cols else r_cols
    # kernel_details Step Id: the kd rows' own, none for the trace's
    source = concat(i64(frame["step"]), nulls(n_rest)) if frame is not None else nulls(n_rest)
    step = _device_steps(desc, io, cols["start_ns"], cols["correlation_id"], source, host, steps)
    collective = [collective_of(str(n)) if c == "communication" else None
                  for n, c in zip(cols["name"].tolist(), cols["category"].tolist(), strict=True)]
    if frame is not None:
        for c in ("block_dim", "mix_block_dim"):
            cols[c] = int32(concat(i64(frame[c]), nulls(n_rest)))
        for c in ("op_state", "input_shapes", "input_dtypes", "input_formats", "output_shapes", "output_dtypes"):
            cols[c] = concat(frame[c], np.full(n_rest, None, dtype=object))
        for c in PIPE_RATIO_COLUMNS:
            cols[c] = concat(np.array(frame[c], dtype=np.float64), np.full(n_rest, np.nan))
    return DeviceOps(step=na_steps(step), collective=collective, **cols), DeviceSteps(step, cols["start_ns"])


def _kernel_rows(kd: Frame, cand: TraceDeviceTasks | None, ki: np.ndarray, ti: np.ndarray) -> dict[str, Any]:
    """The device_ops columns of the kernel_details rows; `ki` of them matched the trace tasks `ti`."""
    n_kd = len(kd)
    k_stream = i64(kd["stream_id"])
    k_corr = nulls(n_kd)
    k_group = np.full(n_kd, None, dtype=object)
    if len(ki):
        assert cand is not None  # (a match needs a candidate)
        k_corr = put(k_corr, ki, cand.corr[ti])
        k_group[ki] = cand.group_name[ti]
        fill = k_stream._mask[ki]
        k_stream = put(k_stream, ki[fill], cand.stream_id[ti[fill]])
    k_name, k_type = kd["name"], kd["task_type"]
    return {"name": k_name, "op_type": kd["op_type"], "task_type": k_type,
            "category": _categories(k_type, k_name, "compute"), "stream_id": k_stream,
            "start_ns": int64s(kd["start_ns"]), "dur_ns": int64s(kd["dur_ns"]),
            "correlation_id": k_corr, "group_name": k_group, "size_bytes": nulls(n_kd)}


def _trace_rows(cand: TraceDeviceTasks, rest: np.ndarray) -> dict[str, Any]:
    """The device_ops columns of the trace tasks `rest` (the ones no kernel_details row matched)."""
    r_name, r_type = cand.name[rest], cand.task_type[rest]
    return {"name": r_name, "op_type": cand.op_type[rest], "task_type": r_type,
            "category": _categories(r_type, r_name, "other"), "stream_id": cand.stream_id[rest],
            "start_ns": cand.start_ns[rest], "dur_ns": cand.dur_ns[rest], "correlation_id": cand.corr[rest],
            "group_name": cand.group_name[rest], "size_bytes": cand.size_bytes[rest]}


def _join(kd: Frame, cand: TraceDeviceTasks) -> tuple[np.ndarray, np.ndarray]:
    """(kernel_details row, trace candidate) index pairs of the same task, one-to-one: the first row of
    each key on either side, in kernel_details order (what merging the deduplicated sides gives)."""
    # first: same start and short name. kernel_details names are never null here (rows without one are
    # dropped), so a null key of the trace never matches.
    t_start, k_start = cand.start_ns, int64s(kd["start_ns"])
    first = first_rows(zip(t_start.tolist(), short_names(cand.name.tolist()), strict=True))
    ki, ti = first_matches(zip(k_start.tolist(), short_names(kd["name"].tolist()), strict=True),
                           first, range(len(kd)))
    # second chance: same start on the same stream with the same task id (names differ), among the rows
    # left with both ids
    if len(ki) < len(kd) and len(ti) < len(t_start):
        t_stream, t_task = cand.stream_id, cand.task_id
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


def _categories(task_type: Sequence[Any], name: Sequence[Any], default: str) -> np.ndarray:
    """`task_category` of each row, computed once per distinct (task type, hcom_ name) pair; tasks typed
    "Other" (older CANN) per name, which is all that tells them apart."""
    types = [tt if isinstance(tt, str) else None for tt in task_type]
    keys = list(zip(types, [str(n) if tt is not None and tt.upper() == "OTHER" else str(n).startswith("hcom_")
                            for tt, n in zip(types, name, strict=True)], strict=True))
    table = {key: task_category(key[0], key[1] if isinstance(key[1], str) else "hcom_" if key[1] else "",
                                default) for key in set(keys)}
    return objects(list(map(table.__getitem__, keys)))


def _device_steps(desc: RankDesc, io: RankFiles, start: np.ndarray, corr: np.ma.MaskedArray,
                  source: np.ma.MaskedArray, host: HostOps | None, steps: Steps) -> np.ndarray:
    """Step of each device op (-1 = none): kernel_details Step Id (`source`), else the step of the host
    op that launched it (`corr`), else the step its start falls in (see `Steps.of_device`)."""
    out = steps.of_device(start)
    if host is not None and len(host.name):
        h_corr, h_step = host.correlation_id, host.step
        ok = np.flatnonzero(~(h_corr._mask | h_step._mask)).tolist()
        by_corr: dict[int, tuple[int, int]] = {}
        if ok:
            for c, s, t in zip(h_corr._data[ok].tolist(), h_step._data[ok].tolist(),
                               host.start_ns[ok].tolist(), strict=True):
                by_corr.setdefault(c, (s, t))
        if by_corr:
            linked = np.flatnonzero(~corr._mask)
            via = np.full(len(start), -1, dtype=np.int64)
            for i, c, t in zip(linked.tolist(), corr._data[linked].tolist(), start[linked].tolist(), strict=True):
                hit = by_corr.get(c)
                # a task cannot start before its launch: a link that says so is not trusted
                if hit is not None and hit[1] <= t:
                    via[i] = hit[0]
            out = np.where(via >= 0, via, out)
    if not source._mask.all():
        known = set(steps.ids.tolist())
        vals = set(source._data[~source._mask].tolist())
        if known and not vals <= known:
            io.warn(desc.path("kernel_details.csv"),
                    f"Step Id values {sorted(vals - known)[:5]} are not ProfilerStep numbers of the trace; "
                    "steps are taken from the trace instead")
        else:
            sv = np.where(source._mask, -1, source._data)
            out = np.where(sv >= 0, sv, out)
    return out.astype(np.int64)


def emit_device_ops(io: RankFiles, ops: DeviceOps | None) -> None:
    if ops is not None:
        emit(io.t, ops)
        io.t.has("device_ops")


def emit_steps(io: RankFiles, steps: Steps, dev: DeviceSteps) -> None:
    """steps rows; the device window starts at the step's first device op."""
    if steps.empty:
        return
    first: dict[int, int] = {}
    mine = dev.step >= 0
    if mine.any():
        ids, of_id = np.unique(dev.step[mine], return_inverse=True)
        lo = np.full(len(ids), np.iinfo(np.int64).max, dtype=np.int64)
        np.minimum.at(lo, of_id, dev.start_ns[mine])
        first = dict(zip(ids.tolist(), lo.tolist(), strict=True))
    for sid, s0, s1 in zip(steps.ids.tolist(), steps.start.tolist(), steps.end.tolist(), strict=True):
        d0 = first.get(sid)
        io.t.add("steps", step=sid, start_ns=s0, end_ns=s1, device_start_ns=d0,
                 device_end_ns=s1 if d0 is not None else None, kept=True)
    io.t.has("steps")
