"""Host-side tables: metadata, CANN_API, PYTORCH_API, GC_RECORD, memory, frequency and the ranks row."""

from __future__ import annotations

import json
from dataclasses import dataclass, fields, replace
from typing import Any

import numpy as np

from ..ascend_common import group_hash
from ..ascend_events import HostOps
from .common import API_PREFIX, RankMeta, framework_category, to_int
from .db import Db, Steps, assign_steps, clean_text, i64, nesting_depth, or_empty, steps_or_na
from .rank import DbOut, DbRank


@dataclass(frozen=True, slots=True)
class CannApi:
    """CANN_API rows as fetched (exact ints), names with the text export's level prefix (`AscendCL@` ...)."""

    start: list[Any]
    end: list[Any]
    type: list[Any]
    tid: list[Any]
    conn: list[Any]
    name: list[str]


@dataclass(frozen=True, slots=True)
class _HostRows:
    """PYTORCH_API or GC_RECORD rows before their depth and steps (None: a column the table has not)."""

    start: list[Any]
    end: list[Any]
    gtid: list[int]
    name: list[str]
    category: list[str]
    correlation_id: list[Any] | None = None
    input_dims: list[Any] | None = None
    input_types: list[Any] | None = None
    call_stack: list[Any] | None = None


# ---- metadata ------------------------------------------------------------------------------------------
def meta_tables(db: Db, out: DbOut, meta: RankMeta) -> RankMeta:
    """metadata and env_vars from META_DATA, completed by the rank folder's files; returns `meta` with the
    world size of META_DATA's distributed_args where the folder has none."""
    t = out.t
    md: dict[str, Any] = {}
    env: dict[str, Any] = {}
    if db.has("META_DATA") and {"name", "value"} <= db.tables["META_DATA"]:
        for name, value in db.con.execute("SELECT name, value FROM META_DATA"):
            name = str(db.s(name))
            value = db.s(value)
            try:
                parsed = json.loads(value) if value is not None else None
            except ValueError:
                parsed = value
            if name == "ENV_VARIABLES" and isinstance(parsed, dict):
                env.update(parsed)  # torch_npu writes it twice (process env + profiler_metadata): merge
            else:
                md[name] = parsed
    # profiler_metadata.json in the rank dir fills what META_DATA lacks (older exports, MindSpore)
    for k, v in meta.metadata.items():
        if k == "ENV_VARIABLES" and isinstance(v, dict):
            for ek, ev in v.items():
                env.setdefault(ek, ev)
        else:
            md.setdefault(k, v)
    for name, value in env.items():
        t.add("env_vars", name=str(name), value="" if value is None else str(value))
    if env:
        t.has("env")
    # the profiler's configuration, as the text reader records it
    info = meta.info
    for key, val in (("config", info.get("config")), ("profiler_parameters", info.get("profiler_parameters")),
                     *((k, info.get(k)) for k in ("cann_version", "jit_level", "rank_size"))):
        if val not in (None, {}, ""):
            md.setdefault(key, val)
    pgi = md.get("parallel_group_info")
    if isinstance(pgi, dict):
        groups = {group_hash(str(name)): {"group_name": str(name), "pg_name": g.get("group_name"),
                                          "global_ranks": [r for r in (to_int(x) for x in
                                                                       g.get("global_ranks") or [])
                                                           if r is not None]}
                  for name, g in pgi.items() if isinstance(g, dict)}
        if groups:
            md.setdefault("comm_groups", groups)
    for k, v in md.items():
        t.add("metadata", key=str(k), value_json=json.dumps(v, sort_keys=True, default=str))
    if meta.world_size is None:
        da = md.get("distributed_args")
        if isinstance(da, dict):
            return replace(meta, world_size=to_int(da.get("world_size")))
    return meta


# ---- CANN API ------------------------------------------------------------------------------------------
def cann_api(db: Db) -> CannApi | None:
    if not db.has("CANN_API"):
        return None
    d = db.fetch("CANN_API", {"start": ("startNs",), "end": ("endNs",), "type": ("type",),
                              "tid": ("globalTid",), "conn": ("connectionId",), "name": ("name",)})
    if not d["start"]:
        return None
    types = db.enum("ENUM_API_TYPE")
    names = []
    for ty, nm in zip(d["type"], d["name"], strict=False):
        level = types.get(ty, "") if ty is not None else ""
        names.append(API_PREFIX.get(level, "") + (db.s(nm) or ""))
    return CannApi(start=d["start"], end=d["end"], type=d["type"], tid=d["tid"], conn=d["conn"], name=names)


def device_connections(db: Db) -> set[int]:
    """Connection ids that reach device work (TASK, COMMUNICATION_OP): the launch links.

    Every CANN API has a connectionId in the DB, but only a launch's id reappears on a device task; the
    others would be links to nothing (the text export has none for them either).
    """
    out: set[int] = set()
    for table in ("TASK", "COMMUNICATION_OP"):
        if db.col(table, "connectionId"):
            out.update(r[0] for r in db.con.execute(
                f"SELECT DISTINCT connectionId FROM {table} WHERE connectionId IS NOT NULL"))
    return out


def emit_cann(out: DbOut, d: CannApi, steps: Steps, dev_conns: set[int]) -> None:
    start = np.array(d.start, dtype=np.int64)
    end = np.array(d.end, dtype=np.int64)
    gtid = np.array([x or 0 for x in d.tid], dtype=np.int64)
    tid = gtid & 0xFFFFFFFF
    out.emit(HostOps(
        step=steps_or_na(assign_steps(start, steps.start, steps.end, steps.ids)),
        name=d.name, category=["cann"] * start.size, tid=i64(tid.tolist()),
        start_ns=i64(start.tolist()), dur_ns=i64((end - start).tolist()),
        correlation_id=out.ids([c if c in dev_conns else None for c in d.conn]),
        depth=i64(nesting_depth(gtid, start, end).tolist()),
    ))
    out.t.has("host_ops", "cann_api")
    if any(c in dev_conns for c in d.conn):
        out.t.has("correlation")


def framework_and_gc(db: Db, out: DbOut, steps: Steps, dev_conns: set[int]) -> None:
    """PYTORCH_API and GC_RECORD -> host_ops; depth over both (one Python thread, as in the trace)."""
    parts = [p for p in (_pytorch_api(db, out, dev_conns), _gc(db, out)) if p is not None]
    if not parts:
        return
    cols = {f.name: [x for p in parts for x in (getattr(p, f.name) or [None] * len(p.name))]
            for f in fields(_HostRows)}
    start = np.array(cols.pop("start"), dtype=np.int64)
    end = np.array(cols.pop("end"), dtype=np.int64)
    gtid = np.array(cols.pop("gtid"), dtype=np.int64)
    out.emit(HostOps(
        name=cols["name"], category=cols["category"], input_dims=cols["input_dims"],
        input_types=cols["input_types"], call_stack=cols["call_stack"],
        step=steps_or_na(assign_steps(start, steps.start, steps.end, steps.ids)),
        tid=i64((gtid & 0xFFFFFFFF).tolist()), start_ns=i64(start.tolist()),
        dur_ns=i64((end - start).tolist()), correlation_id=out.ids(cols["correlation_id"]),
        depth=i64(nesting_depth(gtid, start, end).tolist()),
    ))


def _pytorch_api(db: Db, out: DbOut, dev_conns: set[int]) -> _HostRows | None:
    t = out.t
    if not db.has("PYTORCH_API"):
        return None
    d = db.fetch("PYTORCH_API", {"start": ("startNs",), "end": ("endNs",), "tid": ("globalTid",),
                                 "conn": ("connectionId",), "name": ("name",), "dtypes": ("inputDtypes",),
                                 "shapes": ("inputShapes",), "chain": ("callchainId",), "type": ("type",)})
    if not d["start"]:
        out.warn("table PYTORCH_API is empty (no framework ops)")
        return None
    keep = [i for i, (s0, e0) in enumerate(zip(d["start"], d["end"], strict=False))
            if s0 is not None and e0 is not None]
    if len(keep) < len(d["start"]):
        out.warn(f"PYTORCH_API: {len(d['start']) - len(keep)} rows without start/end skipped")
        d = {k: [v[i] for i in keep] for k, v in d.items()}
    types = db.enum("ENUM_API_TYPE")
    names = db.texts(d["name"], or_empty)
    cats = [framework_category(nm, types.get(ty, "") if ty is not None else "")
            for nm, ty in zip(names, d["type"], strict=False)]
    # connectionId -> CONNECTION_IDS rows; the first one that reaches a device task is the launch link
    # (ProfilerStep annotations never take one, as in the text export)
    corr: list[int | None] = [None] * len(names)
    if db.has("CONNECTION_IDS") and any(c is not None for c in d["conn"]):
        links: dict[int, list[int]] = {}
        for cid, conn in db.con.execute("SELECT id, connectionId FROM CONNECTION_IDS"):
            links.setdefault(cid, []).append(conn)
        for i, c in enumerate(d["conn"]):
            cands = sorted(x for x in links.get(c, ()) if x in dev_conns)
            corr[i] = cands[0] if cands and cats[i] != "user_annotation" else None
    stacks: dict[int, str] = {}
    if db.has("PYTORCH_CALLCHAINS") and any(c is not None for c in d["chain"]):
        frames: dict[int, list[tuple[int, str]]] = {}
        for cid, stack, depth in db.con.execute("SELECT id, stack, stackDepth FROM PYTORCH_CALLCHAINS"):
            frames.setdefault(cid, []).append((depth or 0, db.s(stack) or ""))
        stacks = {k: ";".join(f for _, f in sorted(v)) for k, v in frames.items()}
        t.has("with_stack", "call_stack")
    t.has("host_ops", "framework_ops")
    if "dataloader" in cats:
        t.has("dataloader")
    return _HostRows(
        # PYTORCH_API times are TEXT columns in torch_npu's schema: int() keeps them exact
        start=[int(x) for x in d["start"]], end=[int(x) for x in d["end"]],
        gtid=[x or 0 for x in d["tid"]], name=names, category=cats, correlation_id=corr,
        input_dims=db.texts(d["shapes"], clean_text), input_types=db.texts(d["dtypes"], clean_text),
        call_stack=[stacks.get(c) if c is not None else None for c in d["chain"]],
    )


def _gc(db: Db, out: DbOut) -> _HostRows | None:
    if not db.has("GC_RECORD"):
        return None
    d = db.fetch("GC_RECORD", {"start": ("startNs",), "end": ("endNs",), "tid": ("globalTid",)})
    out.t.has("gc")   # the table exists only with gc_detect_threshold: no row = no GC, not unknown
    if not d["start"]:
        return None
    n = len(d["start"])
    return _HostRows(start=d["start"], end=d["end"], gtid=[x or 0 for x in d["tid"]], name=["GC"] * n,
                     category=["gc"] * n)


# ---- counters, memory, ranks ---------------------------------------------------------------------------
def freq(db: Db, out: DbOut) -> None:
    d = db.fetch("AICORE_FREQ", {"ts": ("timestampNs",), "freq": ("freq",)}, order="ORDER BY 1")
    if d["ts"]:
        out.t.extend("freq_samples", {"ts_ns": i64(d["ts"]), "freq_mhz": [float(f) for f in d["freq"]]})
        out.t.has("freq")


def memory(db: Db, out: DbOut) -> None:
    d = db.fetch("MEMORY_RECORD", {"component": ("component",), "ts": ("timestamp", "timestampNs"),
                                   "alloc": ("totalAllocated",), "res": ("totalReserved",),
                                   "act": ("totalActive",)}, order="ORDER BY 2")
    if d["ts"]:
        out.t.extend("memory_records", {
            "ts_ns": i64(d["ts"]), "component": [db.s(c) for c in d["component"]],
            "allocated_bytes": i64(d["alloc"]), "reserved_bytes": i64(d["res"]),
            "active_bytes": i64(d["act"])})
        out.t.has("memory")


def ranks_row(desc: DbRank, db: Db, out: DbOut, meta: RankMeta) -> None:
    device_id = meta.device_id
    if db.has("RANK_DEVICE_MAP"):
        row = db.con.execute("SELECT deviceId FROM RANK_DEVICE_MAP LIMIT 1").fetchone()
        if row and row[0] is not None and int(row[0]) >= 0:
            device_id = int(row[0])
    if device_id is None and db.col("TASK", "deviceId"):
        row = db.con.execute("SELECT min(deviceId) FROM TASK").fetchone()
        device_id = int(row[0]) if row and row[0] is not None else None
    device_name = meta.device_name
    if device_name is None and db.has("NPU_INFO") and db.col("NPU_INFO", "name"):
        row = db.con.execute("SELECT name FROM NPU_INFO LIMIT 1").fetchone()
        device_name = db.s(row[0]) if row else None
    t = out.t
    if meta.ai_core_num is not None:
        t.has("core_counts")
    if meta.rated_freq_mhz:
        t.has("rated_freq")
    if out.t_min is not None:
        t.has("trace")      # a host/device timeline, the DB twin of trace_view.json
    t.add("ranks", source_path=str(desc.rank_dir), format=desc.format, vendor="ascend",
          framework=None if desc.framework == "msprof" else desc.framework,
          framework_version=meta.framework_version, device_name=device_name, device_id=device_id,
          world_size=meta.world_size, ai_core_num=meta.ai_core_num, aiv_num=meta.aiv_num,
          rated_freq_mhz=meta.rated_freq_mhz, profiler_level=meta.profiler_level, with_stack=meta.with_stack,
          time_origin_ns=out.t_min)
