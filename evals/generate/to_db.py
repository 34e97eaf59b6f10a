"""Convert a torch_npu text profile into the torch_npu DB export, for testing the DB reader against the text one.

`convert_profile(src, out)` finds every `*_ascend_pt` rank directory under `src` and writes, under `out` (never
in place), the same rank directory with `ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_{rank}.db` and
`analysis.db` instead of the text deliverables (kept too with `keep_text=True`, the `[Text, Db]` export).
Everything outside ASCEND_PROFILER_OUTPUT (profiler_info, profiler_metadata, PROF_*/device_*/info.json.N) is
copied; profiler_info's `_export_type` is rewritten to say what was exported.

Tables and columns are the real ones (mindspore-format-and-db.md §7.2, torch_npu `TableColumnsManager`):
every time is integer ns (from the exact µs strings, never through float), every string is interned into
STRING_IDS, enums go through the ENUM_* tables, bandwidth B/s.

| text source | DB table |
| --- | --- |
| trace_view `ProfilerStep#N` | STEP_TIME(id, startNs, endNs) and PYTORCH_API |
| trace_view Python `cpu_op` / `python_function` events | PYTORCH_API (type 50001 / 50003), CONNECTION_IDS, PYTORCH_CALLCHAINS |
| trace_view events with cat `GC` | GC_RECORD |
| trace_view CANN events (`AscendCL@x`, `Node@x` ...) | CANN_API (type from `level`, name without the prefix) |
| trace_view Ascend Hardware + kernel_details.csv (joined on start ns and name) | TASK, COMPUTE_TASK_INFO, TASK_PMU_INFO |
| trace_view Communication `hcom_*` ops / Plane sub-tasks | COMMUNICATION_OP / TASK + COMMUNICATION_TASK_INFO |
| trace_view `AI Core Freq` counters | AICORE_FREQ |
| profiler_metadata.json | META_DATA (`ENV_VARIABLES` and each other key, JSON text) |
| info.json.N, rank | NPU_INFO, RANK_DEVICE_MAP, SESSION_TIME_INFO |
| memory_record.csv | MEMORY_RECORD (MiB -> bytes) |
| step_trace_time.csv, communication.json, communication_matrix.json | analysis.db StepTraceTime, CommAnalyzerTime, CommAnalyzerBandwidth, CommAnalyzerMatrix |

Links are rebuilt the way torch_npu stores them: the `async_npu` flow id is the connection id of the
launching `Node@launch` CANN API (flow start = API start on the same thread) and of the device task (its
`connection_id` arg); the torch op enclosing the flow start gets a CONNECTION_IDS row for it. HCCL groups:
COMMUNICATION_OP.groupName is the real group name when one of profiler_metadata's `parallel_group_info`
names hashes to the trace's group id, else the id itself.

Usage: `python -m stepdoctor.evals.generate.to_db SRC OUT [--keep-text]`.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from ...analysis.ingest.ascend_common import group_hash
from ...analysis.ingest.ascend_db import (
    ENUM_API_TYPE,
    ENUM_HCCL_DATA_TYPE,
    ENUM_HCCL_LINK_TYPE,
    ENUM_HCCL_RDMA_TYPE,
    ENUM_HCCL_TRANSPORT_TYPE,
    INVALID_ID,
)
from ...analysis.ingest.base import parse_us_to_ns

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
TEXT_FILES = (
    "trace_view.json",
    "kernel_details.csv",
    "step_trace_time.csv",
    "op_statistic.csv",
    "communication.json",
    "communication_matrix.json",
    "api_statistic.csv",
    "operator_details.csv",
    "memory_record.csv",
    "operator_memory.csv",
    "npu_module_mem.csv",
)
SCHEMA_VERSION = "1.1.0"
MIB = 1 << 20
_API_LEVEL = {v: k for k, v in ENUM_API_TYPE.items()} | {"hccl": 5500}
_RT_TASK_TYPE = {
    "AI_CORE": "KERNEL_AICORE",
    "AI_VECTOR_CORE": "KERNEL_AIVEC",
    "MIX_AIC": "KERNEL_MIX_AIC",
    "MIX_AIV": "KERNEL_MIX_AIV",
    "AI_CPU": "KERNEL_AICPU",
}
_COMPUTE_TYPES = ("AI_CORE", "AI_VECTOR", "MIX_", "AI_CPU", "AIV", "AIC")
_GROUP_THREAD_RE = re.compile(r"^Group\s+(\S+)\s+Communication", re.I)
_PLANE_RE = re.compile(r"^Plane\s+(\d+)", re.I)
_HCOM_SUFFIX_RE = re.compile(r"(_\d+)+$")
# kernel_details columns before the PMU block
_KD_FIXED = {
    "Device_id",
    "Step Id",
    "Step ID",
    "Model ID",
    "Task ID",
    "Stream ID",
    "Name",
    "Type",
    "OP State",
    "Accelerator Core",
    "Start Time(us)",
    "Duration(us)",
    "Wait Time(us)",
    "Block Dim",
    "Block Num",
    "Mix Block Dim",
    "Mix Block Num",
    "HF32 Eligible",
    "Input Shapes",
    "Input Data Types",
    "Input Formats",
    "Output Shapes",
    "Output Data Types",
    "Output Formats",
    "Context ID",
}

# (table, [(column, SQL type)]) — torch_npu / msprof column names and types.
DB_TABLES: dict[str, list[tuple[str, str]]] = {
    "STRING_IDS": [("id", "INTEGER PRIMARY KEY"), ("value", "TEXT")],
    "ENUM_API_TYPE": [("id", "INTEGER PRIMARY KEY"), ("name", "TEXT")],
    "ENUM_HCCL_DATA_TYPE": [("id", "INTEGER PRIMARY KEY"), ("name", "TEXT")],
    "ENUM_HCCL_LINK_TYPE": [("id", "INTEGER PRIMARY KEY"), ("name", "TEXT")],
    "ENUM_HCCL_TRANSPORT_TYPE": [("id", "INTEGER PRIMARY KEY"), ("name", "TEXT")],
    "ENUM_HCCL_RDMA_TYPE": [("id", "INTEGER PRIMARY KEY"), ("name", "TEXT")],
    "META_DATA": [("name", "TEXT"), ("value", "TEXT")],
    "STEP_TIME": [("id", "INTEGER"), ("startNs", "INTEGER"), ("endNs", "INTEGER")],
    "PYTORCH_API": [
        ("startNs", "TEXT"),
        ("endNs", "TEXT"),
        ("globalTid", "INTEGER"),
        ("connectionId", "INTEGER"),
        ("name", "INTEGER"),
        ("sequenceNumber", "INTEGER"),
        ("fwdThreadId", "INTEGER"),
        ("inputDtypes", "INTEGER"),
        ("inputShapes", "INTEGER"),
        ("callchainId", "INTEGER"),
        ("type", "INTEGER"),
    ],
    "CONNECTION_IDS": [("id", "INTEGER"), ("connectionId", "INTEGER")],
    "PYTORCH_CALLCHAINS": [("id", "INTEGER"), ("stack", "INTEGER"), ("stackDepth", "INTEGER")],
    "GC_RECORD": [("startNs", "INTEGER"), ("endNs", "INTEGER"), ("globalTid", "INTEGER")],
    "CANN_API": [
        ("startNs", "INTEGER"),
        ("endNs", "INTEGER"),
        ("type", "INTEGER"),
        ("globalTid", "INTEGER"),
        ("connectionId", "INTEGER"),
        ("name", "INTEGER"),
    ],
    "TASK": [
        ("startNs", "INTEGER"),
        ("endNs", "INTEGER"),
        ("deviceId", "INTEGER"),
        ("connectionId", "INTEGER"),
        ("globalTaskId", "INTEGER"),
        ("globalPid", "INTEGER"),
        ("taskType", "INTEGER"),
        ("contextId", "INTEGER"),
        ("streamId", "INTEGER"),
        ("taskId", "INTEGER"),
        ("modelId", "INTEGER"),
    ],
    "COMPUTE_TASK_INFO": [
        ("name", "INTEGER"),
        ("globalTaskId", "INTEGER PRIMARY KEY"),
        ("blockNum", "INTEGER"),
        ("mixBlockNum", "INTEGER"),
        ("taskType", "INTEGER"),
        ("opType", "INTEGER"),
        ("inputFormats", "INTEGER"),
        ("inputDataTypes", "INTEGER"),
        ("inputShapes", "INTEGER"),
        ("outputFormats", "INTEGER"),
        ("outputDataTypes", "INTEGER"),
        ("outputShapes", "INTEGER"),
        ("attrInfo", "INTEGER"),
        ("opState", "INTEGER"),
        ("hf32Eligible", "INTEGER"),
    ],
    "TASK_PMU_INFO": [("globalTaskId", "INTEGER"), ("name", "INTEGER"), ("value", "NUMERIC")],
    "COMMUNICATION_OP": [
        ("opName", "INTEGER"),
        ("startNs", "INTEGER"),
        ("endNs", "INTEGER"),
        ("connectionId", "INTEGER"),
        ("groupName", "INTEGER"),
        ("opId", "INTEGER PRIMARY KEY"),
        ("relay", "INTEGER"),
        ("retry", "INTEGER"),
        ("dataType", "INTEGER"),
        ("algType", "INTEGER"),
        ("count", "NUMERIC"),
        ("opType", "INTEGER"),
        ("deviceId", "INTEGER"),
    ],
    "COMMUNICATION_TASK_INFO": [
        ("name", "INTEGER"),
        ("globalTaskId", "INTEGER"),
        ("taskType", "INTEGER"),
        ("planeId", "INTEGER"),
        ("groupName", "INTEGER"),
        ("notifyId", "INTEGER"),
        ("rdmaType", "INTEGER"),
        ("srcRank", "INTEGER"),
        ("dstRank", "INTEGER"),
        ("transportType", "INTEGER"),
        ("size", "INTEGER"),
        ("dataType", "INTEGER"),
        ("linkType", "INTEGER"),
        ("opId", "INTEGER"),
        ("isMaster", "INTEGER"),
        ("bandwidth", "NUMERIC"),
    ],
    "AICORE_FREQ": [("deviceId", "INTEGER"), ("timestampNs", "INTEGER"), ("freq", "INTEGER")],
    "NPU_INFO": [("id", "INTEGER"), ("name", "TEXT")],
    "RANK_DEVICE_MAP": [("rankId", "INTEGER"), ("deviceId", "INTEGER")],
    "SESSION_TIME_INFO": [("startTimeNs", "INTEGER"), ("endTimeNs", "INTEGER")],
    "MEMORY_RECORD": [
        ("component", "INTEGER"),
        ("timestamp", "INTEGER"),
        ("totalAllocated", "INTEGER"),
        ("totalReserved", "INTEGER"),
        ("totalActive", "INTEGER"),
        ("streamPtr", "INTEGER"),
        ("deviceId", "INTEGER"),
    ],
}
ANALYSIS_TABLES: dict[str, list[tuple[str, str]]] = {
    "StepTraceTime": [
        ("deviceId", "INTEGER"),
        ("step", "TEXT"),
        ("computing", "NUMERIC"),
        ("communication_not_overlapped", "NUMERIC"),
        ("overlapped", "NUMERIC"),
        ("communication", "NUMERIC"),
        ("free", "NUMERIC"),
        ("stage", "NUMERIC"),
        ("bubble", "NUMERIC"),
        ("communication_not_overlapped_and_exclude_receive", "NUMERIC"),
        ("preparing", "NUMERIC"),
    ],
    "CommAnalyzerTime": [
        ("hccl_op_name", "TEXT"),
        ("group_name", "TEXT"),
        ("start_timestamp", "NUMERIC"),
        ("elapse_time", "NUMERIC"),
        ("transit_time", "NUMERIC"),
        ("wait_time", "NUMERIC"),
        ("synchronization_time", "NUMERIC"),
        ("idle_time", "NUMERIC"),
        ("step", "TEXT"),
        ("type", "TEXT"),
    ],
    "CommAnalyzerBandwidth": [
        ("hccl_op_name", "TEXT"),
        ("group_name", "TEXT"),
        ("transport_type", "TEXT"),
        ("transit_size", "NUMERIC"),
        ("transit_time", "NUMERIC"),
        ("bandwidth", "NUMERIC"),
        ("large_packet_ratio", "NUMERIC"),
        ("package_size", "NUMERIC"),
        ("count", "NUMERIC"),
        ("total_duration", "NUMERIC"),
        ("step", "TEXT"),
        ("type", "TEXT"),
    ],
    "CommAnalyzerMatrix": [
        ("hccl_op_name", "TEXT"),
        ("group_name", "TEXT"),
        ("src_rank", "TEXT"),
        ("dst_rank", "TEXT"),
        ("transport_type", "TEXT"),
        ("transit_size", "NUMERIC"),
        ("transit_time", "NUMERIC"),
        ("bandwidth", "NUMERIC"),
        ("step", "TEXT"),
        ("type", "TEXT"),
        ("op_name", "TEXT"),
    ],
}


class Strings:
    """STRING_IDS interning: one id per distinct string, ids from 1."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def __call__(self, value: Any) -> int | None:
        if value is None or value == "":
            return None
        s = str(value)
        if s not in self.ids:
            self.ids[s] = len(self.ids) + 1
        return self.ids[s]


def create_tables(con: sqlite3.Connection, spec: dict[str, list[tuple[str, str]]]) -> None:
    for table, cols in spec.items():
        con.execute(f"CREATE TABLE {table} ({', '.join(f'{c} {t}' for c, t in cols)})")


def insert(con: sqlite3.Connection, table: str, rows: list[tuple[Any, ...]]) -> None:
    if rows:
        con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[0]))})", rows)


def _i(v: Any) -> int | None:
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return None


def _f(v: Any) -> float | None:
    try:
        return float(str(v).strip())
    except (TypeError, ValueError):
        return None


def _unquote(v: str | None) -> str | None:
    """kernel_details cells carry literal quotes around shapes (`"4096,4000"`); the DB stores the bare text."""
    if v is None:
        return None
    s = v.strip().strip('"').strip()
    return s if s and s != "N/A" else None


def _read_csv(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with open(path, newline="", encoding="utf-8-sig") as f:
        return [{(k or "").strip(): v for k, v in r.items()} for r in csv.DictReader(f)]


class RankConverter:
    """Builds the rows of one rank's DB from its text files."""

    def __init__(self, rank_dir: Path, rank: int) -> None:
        self.dir = rank_dir
        self.out = rank_dir / OUTPUT_DIR
        self.rank = rank
        self.s = Strings()
        self.rows: dict[str, list[tuple[Any, ...]]] = {t: [] for t in DB_TABLES}
        self.analysis: dict[str, list[tuple[Any, ...]]] = {t: [] for t in ANALYSIS_TABLES}
        md_path = rank_dir / "profiler_metadata.json"
        self.metadata: dict[str, Any] = json.loads(md_path.read_text()) if md_path.is_file() else {}
        self.device_id, self.device_name = self._device()
        self.next_task = 1
        self.t_min: int | None = None
        self.t_max: int | None = None

    def _device(self) -> tuple[int, str | None]:
        for p in sorted(self.dir.glob("PROF_*/device_*/info.json.*")):
            info = json.loads(p.read_text())
            d0 = (info.get("DeviceInfo") or [{}])[0]
            return int(d0.get("id", self.rank)), info.get("platform_version")
        return self.rank, None

    def _span(self, start: int, end: int) -> None:
        self.t_min = start if self.t_min is None else min(self.t_min, start)
        self.t_max = end if self.t_max is None else max(self.t_max, end)

    def _task_id(self) -> int:
        self.next_task += 1
        return self.next_task - 1

    # -- trace_view ---------------------------------------------------------------------------------------
    def convert(self) -> None:
        trace_path = self.out / "trace_view.json"
        events: list[dict[str, Any]] = json.loads(trace_path.read_text()) if trace_path.is_file() else []
        procs: dict[Any, str] = {}
        threads: dict[tuple[Any, Any], str] = {}
        for e in events:
            if e.get("ph") == "M" and e.get("name") == "process_name":
                procs[e["pid"]] = str(e.get("args", {}).get("name", "")).strip().lower()
            elif e.get("ph") == "M" and e.get("name") == "thread_name":
                threads[(e["pid"], e.get("tid"))] = str(e.get("args", {}).get("name", ""))
        # async_npu flow starts: (tid, ts) -> flow id; the same id is the device task's connection_id
        flow_start: dict[tuple[Any, int], int] = {}
        for e in events:
            if e.get("ph") == "s" and e.get("cat") == "async_npu":
                flow_start[(e.get("tid"), parse_us_to_ns(e["ts"]))] = int(e["id"])
        xs = [e for e in events if e.get("ph") == "X"]
        framework = [
            e
            for e in xs
            if procs.get(e["pid"]) in ("python", "pytorch") and str(e.get("cat", "")).lower() != "gc"
        ]
        gc = [e for e in xs if str(e.get("cat", "")).lower() == "gc"]
        cann = [e for e in xs if procs.get(e["pid"]) == "cann"]
        hw = [e for e in xs if procs.get(e["pid"]) == "ascend hardware"]
        comm = [e for e in xs if procs.get(e["pid"]) in ("communication", "hccl")]
        py_pid = next((p for p, n in procs.items() if n in ("python", "pytorch")), 0)
        # fresh CANN connection ids must not collide with ids the trace already uses (flows, hcom args)
        used = [*flow_start.values(), *(_i(e.get("args", {}).get("connection_id")) or 0 for e in xs)]
        max_flow = max(used, default=0)
        self._cann(cann, flow_start, py_pid, max_flow)
        self._framework(framework, flow_start, py_pid)
        self._gc(gc, py_pid)
        self._compute(hw)
        self._comm(comm, threads)
        for e in events:
            if e.get("ph") == "C" and e.get("name") == "AI Core Freq":
                mhz = e.get("args", {}).get("MHz")
                if mhz is not None:
                    self.rows["AICORE_FREQ"].append(
                        (self.device_id, parse_us_to_ns(e["ts"]), int(float(mhz)))
                    )
        self._meta()
        self._memory()
        self._analysis()

    def _cann(
        self, cann: list[dict[str, Any]], flow_start: dict[tuple[Any, int], int], py_pid: int, max_flow: int
    ) -> None:
        nxt = max_flow + 1
        for e in cann:
            start = parse_us_to_ns(e["ts"])
            end = start + parse_us_to_ns(str(e.get("dur", 0)))
            args = e.get("args", {})
            level = str(args.get("level", "")).lower()
            name = e["name"].split("@", 1)[1] if "@" in e["name"] else e["name"]
            tid = _i(args.get("Thread Id")) or _i(e.get("tid")) or 0
            conn = _i(args.get("connection_id"))
            if conn is None:
                conn = flow_start.get((e.get("tid"), start))
            if conn is None:  # every CANN API has a connection id in the DB; unlinked ones get a fresh one
                conn, nxt = nxt, nxt + 1
            self.rows["CANN_API"].append(
                (start, end, _API_LEVEL.get(level, 20000), (py_pid << 32) | tid, conn, self.s(name))
            )
            self._span(start, end)

    def _framework(
        self, ops: list[dict[str, Any]], flow_start: dict[tuple[Any, int], int], py_pid: int
    ) -> None:
        # flows grouped per thread so the enclosing op of each flow start can be found
        flows_by_tid: dict[Any, list[tuple[int, int]]] = {}
        for (tid, ts), fid in flow_start.items():
            flows_by_tid.setdefault(tid, []).append((ts, fid))
        conn_id = 0
        chain_id = 0
        chains: dict[str, int] = {}
        for e in sorted(ops, key=lambda e: parse_us_to_ns(e["ts"])):
            start = parse_us_to_ns(e["ts"])
            end = start + parse_us_to_ns(str(e.get("dur", 0)))
            args = e.get("args", {})
            name = e["name"]
            if m := re.match(r"^ProfilerStep#(\d+)$", name):
                self.rows["STEP_TIME"].append((int(m.group(1)), start, end))
            # innermost op containing the flow start: ops with no child op holding it (children come later)
            inner = [fid for ts, fid in flows_by_tid.get(e.get("tid"), ()) if start <= ts <= end]
            cid = None
            if inner and not name.startswith("ProfilerStep#"):
                conn_id += 1
                cid = conn_id
                for fid in inner:
                    self.rows["CONNECTION_IDS"].append((cid, fid))
            stack = args.get("Call stack")
            chain = None
            if stack:
                if stack not in chains:
                    chain_id += 1
                    chains[stack] = chain_id
                    frames = [f.strip() for f in str(stack).replace("\r", "").split(";") if f.strip()]
                    for depth, frame in enumerate(frames):
                        self.rows["PYTORCH_CALLCHAINS"].append((chain_id, self.s(frame), depth))
                chain = chains[stack]
            dims = args.get("Input Dims")
            types = args.get("Input type")
            api_type = 50003 if e.get("cat") == "python_function" else 50001
            self.rows["PYTORCH_API"].append(
                (
                    str(start),
                    str(end),
                    (py_pid << 32) | (_i(e.get("tid")) or 0),
                    cid,
                    self.s(name),
                    _i(args.get("Sequence number")),
                    _i(args.get("Fwd thread id")),
                    self.s(json.dumps(types)) if types is not None else None,
                    self.s(json.dumps(dims)) if dims is not None else None,
                    chain,
                    api_type,
                )
            )
            self._span(start, end)
        # a flow start belongs to the innermost op only: drop outer ops' rows for the same flow
        best: dict[int, int] = {}
        for cid, fid in self.rows["CONNECTION_IDS"]:
            best[fid] = max(best.get(fid, 0), cid)  # ops are sorted by start: the later one is nested
        self.rows["CONNECTION_IDS"] = [(c, f) for c, f in self.rows["CONNECTION_IDS"] if best[f] == c]
        used = {c for c, _ in self.rows["CONNECTION_IDS"]}
        self.rows["PYTORCH_API"] = [
            r if r[3] in used else (*r[:3], None, *r[4:]) for r in self.rows["PYTORCH_API"]
        ]

    def _gc(self, gc: list[dict[str, Any]], py_pid: int) -> None:
        for e in gc:
            start = parse_us_to_ns(e["ts"])
            end = start + parse_us_to_ns(str(e.get("dur", 0)))
            self.rows["GC_RECORD"].append((start, end, (py_pid << 32) | (_i(e.get("tid")) or 0)))

    def _compute(self, hw: list[dict[str, Any]]) -> None:
        kd = _read_csv(self.out / "kernel_details.csv")
        by_key: dict[tuple[int, str], dict[str, Any]] = {}
        for e in hw:
            by_key[(parse_us_to_ns(e["ts"]), e["name"])] = e
        done: set[tuple[int, str]] = set()
        pmu_cols = [c for c in (kd[0].keys() if kd else ()) if c not in _KD_FIXED]
        for r in kd:
            start = parse_us_to_ns(r["Start Time(us)"])
            name = r["Name"]
            ev = by_key.get((start, name))
            args = ev.get("args", {}) if ev else {}
            end = start + parse_us_to_ns(r["Duration(us)"])
            core = r.get("Accelerator Core") or args.get("Task Type") or ""
            gid = self._task_id()
            ctx = _i(r.get("Context ID"))
            self.rows["TASK"].append(
                (
                    start,
                    end,
                    self.device_id,
                    _i(args.get("connection_id")),
                    gid,
                    0,
                    self.s(_RT_TASK_TYPE.get(core, core)),
                    INVALID_ID if ctx is None else ctx,
                    _i(r.get("Stream ID")),
                    _i(r.get("Task ID")),
                    _i(r.get("Model ID")),
                )
            )
            self.rows["COMPUTE_TASK_INFO"].append(
                (
                    self.s(name),
                    gid,
                    _i(r.get("Block Dim", r.get("Block Num"))),
                    _i(r.get("Mix Block Dim", r.get("Mix Block Num"))),
                    self.s(core),
                    self.s(r.get("Type")),
                    self.s(_unquote(r.get("Input Formats"))),
                    self.s(_unquote(r.get("Input Data Types"))),
                    self.s(_unquote(r.get("Input Shapes"))),
                    self.s(_unquote(r.get("Output Formats"))),
                    self.s(_unquote(r.get("Output Data Types"))),
                    self.s(_unquote(r.get("Output Shapes"))),
                    None,
                    self.s(r.get("OP State")),
                    self.s(r.get("HF32 Eligible")),
                )
            )
            for c in pmu_cols:
                v = _f(r.get(c))
                if v is not None:
                    self.rows["TASK_PMU_INFO"].append((gid, self.s(c), v))
            done.add((start, name))
            self._span(start, end)
        for (start, name), e in by_key.items():
            if (start, name) in done:
                continue
            args = e.get("args", {})
            end = start + parse_us_to_ns(str(e.get("dur", 0)))
            tt = str(args.get("Task Type", ""))
            gid = self._task_id()
            stream = _i(args.get("Stream Id", args.get("Physic Stream Id")))
            self.rows["TASK"].append(
                (
                    start,
                    end,
                    self.device_id,
                    _i(args.get("connection_id")),
                    gid,
                    0,
                    self.s(_RT_TASK_TYPE.get(tt, tt)),
                    INVALID_ID,
                    stream,
                    _i(args.get("Task Id")),
                    _i(args.get("Model Id")),
                )
            )
            if tt.startswith(_COMPUTE_TYPES):
                self.rows["COMPUTE_TASK_INFO"].append(
                    (
                        self.s(name),
                        gid,
                        None,
                        None,
                        self.s(tt),
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                        None,
                    )
                )
            self._span(start, end)

    def _comm(self, comm: list[dict[str, Any]], threads: dict[tuple[Any, Any], str]) -> None:
        groups = {group_hash(g): g for g in (self.metadata.get("parallel_group_info") or {})}
        dtypes = {v: k for k, v in ENUM_HCCL_DATA_TYPE.items()}
        transports = {v: k for k, v in ENUM_HCCL_TRANSPORT_TYPE.items()}
        links = {v: k for k, v in ENUM_HCCL_LINK_TYPE.items()}
        ops: list[tuple[int, int, Any, int, str]] = []  # (start, end, pid, opId, group name)
        op_id = 0
        subs = []
        for e in sorted(comm, key=lambda e: parse_us_to_ns(e["ts"])):
            tname = threads.get((e["pid"], e.get("tid")), "")
            start = parse_us_to_ns(e["ts"])
            end = start + parse_us_to_ns(str(e.get("dur", 0)))
            if not e["name"].startswith("hcom_"):
                subs.append((e, start, end, tname))
                continue
            args = e.get("args", {})
            m = _GROUP_THREAD_RE.match(tname)
            gid = m.group(1) if m else ""
            gname = groups.get(gid, gid) or None
            op_id += 1
            ops.append((start, end, e["pid"], op_id, gname or ""))
            self.rows["COMMUNICATION_OP"].append(
                (
                    self.s(e["name"]),
                    start,
                    end,
                    _i(args.get("connection_id")),
                    self.s(gname),
                    op_id,
                    0,
                    0,
                    dtypes.get(str(args.get("data_type", "")), 65535),
                    self.s(args.get("alg_type")),
                    _i(args.get("count")),
                    self.s(_HCOM_SUFFIX_RE.sub("", e["name"])),
                    self.device_id,
                )
            )
            self._span(start, end)
        for e, start, end, tname in subs:
            args = e.get("args", {})
            parent = next((o for o in ops if o[2] == e["pid"] and o[0] <= start <= o[1]), None)
            gid = self._task_id()
            plane = _PLANE_RE.match(tname)
            bw = _f(args.get("bandwidth(GB/s)"))
            ctx = _i(args.get("context id"))
            self.rows["TASK"].append(
                (
                    start,
                    end,
                    self.device_id,
                    None,
                    gid,
                    0,
                    self.s(args.get("task type")),
                    INVALID_ID if ctx is None else ctx,
                    _i(args.get("stream id")),
                    _i(args.get("task id")),
                    INVALID_ID,
                )
            )
            self.rows["COMMUNICATION_TASK_INFO"].append(
                (
                    self.s(e["name"]),
                    gid,
                    self.s(args.get("task type")),
                    int(plane.group(1)) if plane else 0,
                    self.s(parent[4]) if parent else None,
                    _i(args.get("notify id")),
                    65535,
                    _i(args.get("src rank")),
                    _i(args.get("dst rank")),
                    transports.get(str(args.get("transport type", ""))),
                    _i(args.get("size(Byte)")),
                    dtypes.get(str(args.get("data type", "")), 65535),
                    links.get(str(args.get("link type", ""))),
                    parent[3] if parent else None,
                    0,
                    None if bw is None else bw * 1e9,
                )
            )
            self._span(start, end)

    # -- other files ----------------------------------------------------------------------------------------
    def _meta(self) -> None:
        rows = self.rows["META_DATA"]
        rows.append(("SCHEMA_VERSION", SCHEMA_VERSION))
        for k, v in self.metadata.items():
            rows.append((str(k), json.dumps(v)))
        self.rows["NPU_INFO"].append((self.device_id, self.device_name))
        self.rows["RANK_DEVICE_MAP"].append((self.rank, self.device_id))
        if self.t_min is not None:
            self.rows["SESSION_TIME_INFO"].append((self.t_min, self.t_max))

    def _memory(self) -> None:
        for r in _read_csv(self.out / "memory_record.csv"):
            ts = r.get("Timestamp(us)")
            if not ts:
                continue

            def b(col: str, r: dict[str, str] = r) -> int | None:
                v = _f(r.get(col))
                return None if v is None else round(v * MIB)

            self.rows["MEMORY_RECORD"].append(
                (
                    self.s(r.get("Component")),
                    parse_us_to_ns(ts),
                    b("Total Allocated(MB)"),
                    b("Total Reserved(MB)"),
                    b("Total Active(MB)"),
                    _i(r.get("Stream Ptr")),
                    self.device_id,
                )
            )

    def _analysis(self) -> None:
        a = self.analysis
        for r in _read_csv(self.out / "step_trace_time.csv"):
            a["StepTraceTime"].append(
                (
                    _i(r.get("Device_id")) if r.get("Device_id") else self.device_id,
                    r.get("Step") or "",
                    *(
                        _f(r.get(c))
                        for c in (
                            "Computing",
                            "Communication(Not Overlapped)",
                            "Overlapped",
                            "Communication",
                            "Free",
                            "Stage",
                            "Bubble",
                            "Communication(Not Overlapped and Exclude Receive)",
                            "Preparing",
                        )
                    ),
                )
            )
        cj = self.out / "communication.json"
        if cj.is_file():
            for step, by_type in json.loads(cj.read_text()).items():
                for typ, ops in (by_type or {}).items():
                    for key, info in (ops or {}).items():
                        if key == "Total Op Info":
                            continue
                        op, _, grp = key.partition("@")
                        t = info.get("Communication Time Info", {})
                        a["CommAnalyzerTime"].append(
                            (
                                op,
                                grp,
                                t.get("Start Timestamp(us)"),
                                t.get("Elapse Time(ms)"),
                                t.get("Transit Time(ms)"),
                                t.get("Wait Time(ms)"),
                                t.get("Synchronization Time(ms)"),
                                t.get("Idle Time(ms)"),
                                step,
                                typ,
                            )
                        )
                        for tr, bw in (info.get("Communication Bandwidth Info") or {}).items():
                            base = (
                                op,
                                grp,
                                tr,
                                bw.get("Transit Size(MB)"),
                                bw.get("Transit Time(ms)"),
                                bw.get("Bandwidth(GB/s)"),
                                bw.get("Large Packet Ratio"),
                            )
                            dist = bw.get("Size Distribution") or {}
                            if not dist:
                                a["CommAnalyzerBandwidth"].append((*base, None, None, None, step, typ))
                            for pkt, (count, total) in dist.items():
                                a["CommAnalyzerBandwidth"].append(
                                    (*base, float(pkt), count, total, step, typ)
                                )
        cm = self.out / "communication_matrix.json"
        if cm.is_file():
            for step, by_type in json.loads(cm.read_text()).items():
                for typ, ops in (by_type or {}).items():
                    for key, lk in (ops or {}).items():
                        op, _, grp = key.partition("@")
                        for link, info in (lk or {}).items():
                            src, _, dst = link.partition("-")
                            a["CommAnalyzerMatrix"].append(
                                (
                                    op,
                                    grp,
                                    src,
                                    dst,
                                    info.get("Transport Type"),
                                    info.get("Transit Size(MB)"),
                                    info.get("Transit Time(ms)"),
                                    info.get("Bandwidth(GB/s)"),
                                    step,
                                    typ,
                                    info.get("Op Name"),
                                )
                            )

    def write(self, db_path: Path, analysis_path: Path) -> None:
        """Write both SQLite files (replacing earlier output of this converter)."""
        for p in (db_path, analysis_path):
            p.unlink(missing_ok=True)
        con = sqlite3.connect(db_path)
        try:
            create_tables(con, DB_TABLES)
            for table, enum in (
                ("ENUM_API_TYPE", ENUM_API_TYPE),
                ("ENUM_HCCL_DATA_TYPE", ENUM_HCCL_DATA_TYPE),
                ("ENUM_HCCL_LINK_TYPE", ENUM_HCCL_LINK_TYPE),
                ("ENUM_HCCL_TRANSPORT_TYPE", ENUM_HCCL_TRANSPORT_TYPE),
                ("ENUM_HCCL_RDMA_TYPE", ENUM_HCCL_RDMA_TYPE),
            ):
                insert(con, table, sorted(enum.items()))
            for table, rows in self.rows.items():
                insert(con, table, rows)
            insert(con, "STRING_IDS", [(i, s) for s, i in self.s.ids.items()])
            con.commit()
        finally:
            con.close()
        if any(self.analysis.values()):
            con = sqlite3.connect(analysis_path)
            try:
                create_tables(con, ANALYSIS_TABLES)
                for table, rows in self.analysis.items():
                    insert(con, table, rows)
                con.commit()
            finally:
                con.close()


def _rank_of(rank_dir: Path) -> int:
    for p in rank_dir.glob("profiler_info_*.json"):
        if m := re.match(r"profiler_info_(\d+)\.json$", p.name):
            return int(m.group(1))
    return 0


def convert_rank(src_dir: Path, dst_dir: Path, *, keep_text: bool = False) -> Path:
    """Copy one `*_ascend_pt` dir to `dst_dir` with its DB export; returns the DB path."""
    src_dir, dst_dir = Path(src_dir), Path(dst_dir)
    if dst_dir.resolve() == src_dir.resolve() or src_dir.resolve() in dst_dir.resolve().parents:
        raise ValueError(f"output {dst_dir} must be outside the input {src_dir}")
    for p in sorted(src_dir.rglob("*")):
        rel = p.relative_to(src_dir)
        if p.is_dir():
            (dst_dir / rel).mkdir(parents=True, exist_ok=True)
        elif rel.parts[0] != OUTPUT_DIR or keep_text:
            (dst_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, dst_dir / rel)  # copyfile: the input may be read-only, the output must not be
    rank = _rank_of(src_dir)
    info_p = dst_dir / f"profiler_info_{rank}.json"
    if info_p.is_file():
        info = json.loads(info_p.read_text())
        exp = info.setdefault("config", {}).setdefault("experimental_config", {})
        exp["_export_type"] = ["text", "db"] if keep_text else ["db"]
        info_p.write_text(json.dumps(info, indent=1))
    conv = RankConverter(src_dir, rank)
    conv.convert()
    out = dst_dir / OUTPUT_DIR
    out.mkdir(parents=True, exist_ok=True)
    db = out / f"ascend_pytorch_profiler_{rank}.db"
    conv.write(db, out / "analysis.db")
    return db


def convert_profile(src: Path, out: Path, *, keep_text: bool = False) -> list[Path]:
    """Convert every `*_ascend_pt` rank dir under `src` (or `src` itself) into `out`; returns the DB paths."""
    src, out = Path(src), Path(out)
    dirs = (
        [src]
        if src.name.endswith("_ascend_pt")
        else sorted(p for p in src.rglob("*_ascend_pt") if p.is_dir())
    )
    if not dirs:
        raise ValueError(f"no *_ascend_pt directory under {src}")
    dbs = []
    for d in dirs:
        rel = d.relative_to(src) if d != src else Path(d.name)
        dbs.append(convert_rank(d, out / rel, keep_text=keep_text))
    return dbs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--keep-text", action="store_true", help="keep the text files too ([Text, Db] export)")
    args = ap.parse_args(argv)
    for db in convert_profile(args.src, args.out, keep_text=args.keep_text):
        print(db)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
