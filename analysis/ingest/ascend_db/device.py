"""Device-side tables: compute tasks with PMU ratios, collectives and their HCCL sub-tasks, other tasks."""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from ..ascend_common import DTYPE_BYTES, collective_of
from ..ascend_events import CommOps, CommTasks, DeviceOps, emit
from .common import PIPE_RATIOS, db_task_category, rank_or_none, to_int
from .db import Db, Steps, assign_steps, clean_text, group_id, i64, mapped, or_empty, steps_or_na
from .rank import DbOut


def compute_tasks(db: Db, out: DbOut) -> pd.DataFrame | None:
    """TASK ⋈ COMPUTE_TASK_INFO, by start, with the PMU pipe ratios."""
    if not db.has("COMPUTE_TASK_INFO"):
        return None
    c = db.col
    bd = c("COMPUTE_TASK_INFO", "blockNum", "blockDim")
    mbd = c("COMPUTE_TASK_INFO", "mixBlockNum", "mixBlockDim")
    fields = {"name": "name", "op_type": "opType", "task_type": "taskType", "block_dim": bd,
              "mix_block_dim": mbd, "op_state": c("COMPUTE_TASK_INFO", "opState"),
              "input_shapes": "inputShapes", "input_dtypes": "inputDataTypes",
              "input_formats": "inputFormats", "output_shapes": "outputShapes",
              "output_dtypes": "outputDataTypes", "hf32": c("COMPUTE_TASK_INFO", "hf32Eligible")}
    present = {k: v for k, v in fields.items() if v and v in db.tables["COMPUTE_TASK_INFO"]}
    tcols = {"start": "startNs", "end": "endNs", "stream": "streamId", "conn": "connectionId",
             "gtid": "globalTaskId", "task_id": "taskId", "ctx": "contextId", "rt_type": "taskType"}
    tpresent = {k: v for k, v in tcols.items() if v in db.tables["TASK"]}
    sel = [f'T."{v}"' for v in tpresent.values()] + [f'C."{v}"' for v in present.values()]
    sql = (f"SELECT {', '.join(sel)} FROM COMPUTE_TASK_INFO C JOIN TASK T ON T.globalTaskId = "
           "C.globalTaskId ORDER BY T.startNs")
    rows = db.con.execute(sql).fetchall()
    if not rows:
        if db.count("COMPUTE_TASK_INFO") == 0:
            out.warn("table COMPUTE_TASK_INFO is empty (no compute kernels)")
        return None
    keys = list(tpresent) + list(present)
    cols = list(zip(*rows, strict=False))
    df = pd.DataFrame({k: pd.Series(list(v), dtype=object) for k, v in zip(keys, cols, strict=False)})
    for k in ("name", "op_type", "task_type", "op_state", "input_shapes", "input_dtypes", "input_formats",
              "output_shapes", "output_dtypes"):
        if k in df:
            df[k] = db.texts(df[k].tolist(), clean_text)
        else:
            df[k] = None
    for k in ("block_dim", "mix_block_dim"):
        if k not in df:
            df[k] = None
    df["name"] = df["name"].fillna("")
    df["category"] = "compute"
    _pmu(db, out, df)
    return df


def _pmu(db: Db, out: DbOut, df: pd.DataFrame) -> None:
    """Pivot TASK_PMU_INFO (globalTaskId, name, value) into the pipe-ratio columns."""
    for r in PIPE_RATIOS:
        df[r] = np.nan
    if not db.has("TASK_PMU_INFO") or "gtid" not in df:
        return
    wanted = {k: v for k, v in db.strings.items() if v and v.strip().lower() in PIPE_RATIOS}
    if not wanted:
        return
    ids = ",".join(str(k) for k in wanted)
    rows = db.con.execute(f"SELECT globalTaskId, name, value FROM TASK_PMU_INFO WHERE name IN ({ids})")
    vals: dict[str, dict[int, float]] = {}
    of_id = {k: vals.setdefault(v.strip().lower(), {}) for k, v in wanted.items()}  # name id -> its column
    for gid, nm, val in rows:
        of_id[nm][gid] = float(val) if val is not None else np.nan
    vals = {r: m for r, m in vals.items() if m}
    for r, m in vals.items():
        df[r] = df["gtid"].map(m).astype(float)
    if vals:
        out.t.has("pipe_ratios")
        out.t.add("metadata", key="kernel_metrics", value_json=json.dumps("PipeUtilization"))


def comm_ops(db: Db) -> pd.DataFrame | None:
    """COMMUNICATION_OP by start, with message size and collective."""
    if not db.has("COMMUNICATION_OP"):
        return None
    d = db.fetch("COMMUNICATION_OP", {"name": ("opName",), "start": ("startNs",), "end": ("endNs",),
                                      "conn": ("connectionId",), "group": ("groupName",), "op_id": ("opId",),
                                      "dtype": ("dataType",), "count": ("count",), "op_type": ("opType",),
                                      "alg": ("algType",)}, order="ORDER BY startNs")
    if not d["start"]:
        return None      # a single-card run has no collectives: nothing to say
    dtypes = db.enum("ENUM_HCCL_DATA_TYPE")
    df = pd.DataFrame({k: pd.Series(v, dtype=object) for k, v in d.items()})
    df["name"] = db.texts(d["name"], or_empty)
    df["op_type_raw"] = db.texts(d["op_type"])
    df["group"] = db.texts(d["group"], group_id)
    df["dtype"] = [dtypes.get(x) if isinstance(x, int) else db.s(x) for x in d["dtype"]]
    df["size"] = [c * DTYPE_BYTES[t] if isinstance(c, int) and t in DTYPE_BYTES else None
                  for c, t in zip(d["count"], df["dtype"], strict=False)]
    df["collective"] = [collective_of(r or n) for r, n in zip(df["op_type_raw"], df["name"], strict=False)]
    df["category"] = "communication"
    return df


def comm_subtasks(db: Db, comm: pd.DataFrame | None) -> pd.DataFrame | None:
    """TASK ⋈ COMMUNICATION_TASK_INFO by start, with the name of their op."""
    if not db.has("COMMUNICATION_TASK_INFO"):
        return None
    ci = db.tables["COMMUNICATION_TASK_INFO"]
    want = {"name": "name", "gtid": "globalTaskId", "op_id": "opId", "size": "size",
            "transport": "transportType", "link": "linkType", "src": "srcRank", "dst": "dstRank",
            "bw": "bandwidth", "task_type": "taskType"}
    present = {k: v for k, v in want.items() if v in ci}
    sel = ["T.startNs", "T.endNs"] + [f'C."{v}"' for v in present.values()]
    rows = db.con.execute(f"SELECT {', '.join(sel)} FROM COMMUNICATION_TASK_INFO C JOIN TASK T ON "
                          "T.globalTaskId = C.globalTaskId ORDER BY T.startNs").fetchall()
    if not rows:
        return None
    keys = ["start", "end", *present]
    cols = list(zip(*rows, strict=False))
    df = pd.DataFrame({k: pd.Series(list(v), dtype=object) for k, v in zip(keys, cols, strict=False)})
    for k in want:
        if k not in df:
            df[k] = None
    tr, lk = db.enum("ENUM_HCCL_TRANSPORT_TYPE"), db.enum("ENUM_HCCL_LINK_TYPE")
    df["name"] = db.texts(df["name"].tolist(), or_empty)
    df["transport"] = mapped(df["transport"].tolist(), lambda x: tr.get(x) if isinstance(x, int) else db.s(x))
    df["link"] = mapped(df["link"].tolist(), lambda x: lk.get(x) if isinstance(x, int) else db.s(x))
    op_names = dict(zip(comm["op_id"], comm["name"], strict=False)) if comm is not None else {}
    df["op_name"] = [op_names.get(o) for o in df["op_id"]]
    return df


def other_tasks(db: Db) -> pd.DataFrame | None:
    """TASK rows that are neither compute kernels nor HCCL sub-tasks: memcpy, event waits, ..."""
    known = ["COMPUTE_TASK_INFO", "COMMUNICATION_TASK_INFO", "COMMUNICATION_SCHEDULE_TASK_INFO"]
    excl = " ".join(f"AND globalTaskId NOT IN (SELECT globalTaskId FROM {k})" for k in known if db.has(k))
    d = db.fetch("TASK", {"start": ("startNs",), "end": ("endNs",), "stream": ("streamId",),
                          "conn": ("connectionId",), "gtid": ("globalTaskId",), "rt_type": ("taskType",)},
                 where=f"WHERE 1=1 {excl}", order="ORDER BY startNs")
    if not d["start"]:
        return None
    df = pd.DataFrame({k: pd.Series(v, dtype=object) for k, v in d.items()})
    df["task_type"] = db.texts(d["rt_type"], or_empty)
    df["name"] = df["task_type"]
    memcpy: dict[int, int] = {}
    if db.has("MEMCPY_INFO") and {"globalTaskId", "size"} <= db.tables["MEMCPY_INFO"]:
        memcpy = {g: s for g, s in db.con.execute("SELECT globalTaskId, size FROM MEMCPY_INFO")}
    df["size"] = [memcpy.get(g) for g in df["gtid"]]
    info = db.has("COMPUTE_TASK_INFO")
    df["category"] = [db_task_category(tt, g in memcpy, info) for tt, g in zip(df["task_type"], df["gtid"],
                                                                              strict=False)]
    return df


def step_of_tasks(df: pd.DataFrame, steps: Steps, conn_start: dict[Any, int]) -> np.ndarray:
    start = df["start"].to_numpy(np.int64)
    if steps.how not in ("STEP_TIME", "MSTX") or not conn_start:
        return assign_steps(start, steps.start, steps.end, steps.ids)
    host = np.array([conn_start.get(c, s) if c is not None else s for c, s in
                     zip(df["conn"], start, strict=False)], dtype=np.int64)
    by_host = assign_steps(host, steps.start, steps.end, steps.ids)
    by_dev = assign_steps(start, steps.start, steps.end, steps.ids)
    return np.where(by_host >= 0, by_host, by_dev)



class CommIndex(NamedTuple):
    """The DB's collectives as comm_ops rows (their analysis.db times still to come), and by (name, group)
    their (start ns, step or -1, row): op names repeat every step, so the analyzer's rows are matched on
    (name, group) and the nearest start."""

    ops: CommOps
    index: dict[tuple[str, str | None], list[tuple[int, int, int]]]


def emit_compute(out: DbOut, df: pd.DataFrame | None) -> None:
    if df is None:
        return
    t = out.t
    start = df["start"].astype("int64")
    out.emit(DeviceOps(
        step=steps_or_na(df["step"].to_numpy()), name=df["name"].tolist(),
        op_type=df["op_type"].tolist(), category=["compute"] * len(df),
        task_type=df["task_type"].tolist(),
        stream_id=i64(df["stream"].tolist() if "stream" in df else [None] * len(df)),
        start_ns=i64(start.tolist()), dur_ns=i64((df["end"].astype("int64") - start).tolist()),
        correlation_id=out.ids(df["conn"].tolist() if "conn" in df else [None] * len(df)),
        block_dim=i64([to_int(x) for x in df["block_dim"]]),
        mix_block_dim=i64([to_int(x) for x in df["mix_block_dim"]]),
        op_state=df["op_state"].tolist(), input_shapes=df["input_shapes"].tolist(),
        input_dtypes=df["input_dtypes"].tolist(), input_formats=df["input_formats"].tolist(),
        output_shapes=df["output_shapes"].tolist(), output_dtypes=df["output_dtypes"].tolist(),
        **{r: df[r].tolist() for r in PIPE_RATIOS},
    ))
    t.has("device_ops", "kernel_details")
    if df["block_dim"].notna().any():
        t.has("block_dim")
    if df["op_state"].notna().any():
        t.has("op_state")
    if df["input_dtypes"].notna().any():
        t.has("dtypes")
    if df["input_shapes"].notna().any():
        t.has("shapes")


def emit_other(out: DbOut, df: pd.DataFrame | None) -> None:
    if df is None:
        return
    start = df["start"].astype("int64")
    out.emit(DeviceOps(
        step=steps_or_na(df["step"].to_numpy()), name=df["name"].tolist(),
        category=df["category"].tolist(), task_type=df["task_type"].tolist(),
        stream_id=i64(df["stream"].tolist()), start_ns=i64(start.tolist()),
        dur_ns=i64((df["end"].astype("int64") - start).tolist()),
        correlation_id=out.ids(df["conn"].tolist()), size_bytes=i64(df["size"].tolist()),
    ))


def emit_comm(out: DbOut, comm: pd.DataFrame | None, sub: pd.DataFrame | None) -> CommIndex | None:
    """The collectives' device_ops and their sub-tasks' comm_tasks; returns the collectives' comm_ops rows
    for `analysis.analysis_db` to complete (None without collectives)."""
    t = out.t
    index = None
    if comm is not None:
        start = comm["start"].astype("int64")
        dur = comm["end"].astype("int64") - start
        steps = steps_or_na(comm["step"].to_numpy())
        out.emit(DeviceOps(
            step=steps, name=comm["name"].tolist(), op_type=comm["op_type_raw"].tolist(),
            category=["communication"] * len(comm), task_type=["HCCL"] * len(comm),
            start_ns=i64(start.tolist()), dur_ns=i64(dur.tolist()),
            correlation_id=out.ids(comm["conn"].tolist()), size_bytes=i64(comm["size"].tolist()),
            collective=comm["collective"].tolist(), group_name=comm["group"].tolist(),
        ))
        by_name: dict[tuple[str, str | None], list[tuple[int, int, int]]] = {}
        for i, (n, g, s0, sp) in enumerate(zip(comm["name"], comm["group"], start, comm["step"].to_numpy(),
                                               strict=False)):
            by_name.setdefault((n, g), []).append((int(s0), int(sp), i))
        index = CommIndex(CommOps(step=steps, name=comm["name"].tolist(), op_type=comm["collective"].tolist(),
                                  group_name=comm["group"].tolist(), start_ns=i64(start.tolist()),
                                  elapse_ns=i64(dur.tolist()), size_bytes=i64(comm["size"].tolist())), by_name)
        t.has("comm_ops")
    if sub is not None:
        start = sub["start"].astype("int64")
        bw = [float(b) / 1e9 if b is not None else None for b in sub["bw"]]  # B/s -> GB/s (= bytes/ns)
        emit(t, CommTasks(
            # without COMMUNICATION_OP (a raw msprof DB) the tasks have no op and so no step
            step=steps_or_na(sub["step"].to_numpy()) if "step" in sub else i64([None] * len(sub)),
            op_name=sub["op_name"].tolist(), name=sub["name"].tolist(),
            start_ns=i64(start.tolist()), dur_ns=i64((sub["end"].astype("int64") - start).tolist()),
            size_bytes=i64(mapped(sub["size"].tolist(), to_int)), transport=sub["transport"].tolist(),
            link_type=sub["link"].tolist(), src_rank=i64(mapped(sub["src"].tolist(), rank_or_none)),
            dst_rank=i64(mapped(sub["dst"].tolist(), rank_or_none)), bandwidth_gbps=bw,
        ))
        t.has("comm_tasks")
    return index
