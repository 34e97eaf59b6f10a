"""profiler_info / profiler_metadata / device info, memory_record.csv, the statistics CSVs and the ranks row."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..ascend_columns import (
    API_STATISTIC,
    MEMORY_RECORD,
    OP_STATISTIC,
    OPERATOR_DETAILS,
    OPERATOR_MEMORY,
)
from ..ascend_common import group_hash
from ..ascend_events import HostOps
from .common import MEM_KB_BYTES, MEM_MB_BYTES
from .csv_io import INT, TEXT, isna, sql_bytes, sql_int, sql_ns, sql_text
from .frames import jdump, level
from .numbers import i64
from .rank import RankDesc
from .rank_files import RankFiles
from .trace_events import as_float, as_int, text_or_none


@dataclass(frozen=True, slots=True)
class ProfilerInfo:
    """profiler_info_{rank}.json: the framework and the profiler's configuration (None: not said)."""

    framework: str
    framework_version: str | None = None
    profiler_level: str | None = None
    with_stack: bool | None = None
    profile_memory: bool | None = None
    # torch_npu records GC only when experimental_config._gc_detect_threshold is set: then "no GC event" is
    # a measurement, otherwise it is unknown.
    gc_detect: bool = False
    world_size: int | None = None          # rank_size


@dataclass(frozen=True, slots=True)
class ProfilerMetadata:
    """profiler_metadata.json: the job's world size and its communication groups."""

    world_size: int | None                 # distributed_args.world_size, else profiler_info's rank_size
    groups: dict[str, dict[str, Any]] = field(default_factory=dict)  # group hash -> group_name, pg_name, ranks


@dataclass(frozen=True, slots=True)
class DeviceInfo:
    """PROF_*/device_*/info.json.N: the device (None: unknown)."""

    device_name: str | None = None
    device_id: int | None = None
    ai_core_num: int | None = None
    aiv_num: int | None = None
    rated_freq_mhz: float | None = None


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def profiler_info(desc: RankDesc, io: RankFiles) -> ProfilerInfo:
    path = desc.profiler_info
    if path is None:
        io.warn(desc.root, "no profiler_info_{rank}.json: framework version, profiler level and with_stack unknown")
        return ProfilerInfo(desc.framework)
    info = io.load_json(path)
    if not isinstance(info, dict):
        return ProfilerInfo(desc.framework)
    framework = "mindspore" if "ms_version" in info else "pytorch" if "torch_npu_version" in info else desc.framework
    cfg = _dict(info.get("config"))
    exp, common, params = _dict(cfg.get("experimental_config")), _dict(cfg.get("common_config")), \
        _dict(info.get("profiler_parameters"))
    ws = common.get("with_stack", params.get("with_stack"))
    pm = common.get("profile_memory", params.get("profile_memory"))
    if cfg:
        io.t.add("metadata", key="config", value_json=jdump(cfg))
    if params:
        io.t.add("metadata", key="profiler_parameters", value_json=jdump(params))
    for k in ("cann_version", "jit_level", "rank_size"):
        if info.get(k) is not None:
            io.t.add("metadata", key=k, value_json=jdump(info[k]))
    return ProfilerInfo(
        framework=framework, framework_version=text_or_none(info.get("torch_npu_version") or info.get("ms_version")),
        profiler_level=level(exp.get("_profiler_level") or params.get("profiler_level")),
        with_stack=bool(ws) if ws is not None else None, profile_memory=bool(pm) if pm is not None else None,
        gc_detect=exp.get("_gc_detect_threshold") is not None, world_size=as_int(info.get("rank_size")))


def profiler_metadata(desc: RankDesc, io: RankFiles, info: ProfilerInfo) -> ProfilerMetadata:
    path = desc.root / "profiler_metadata.json"
    if not path.is_file():
        io.warn(desc.root, "no profiler_metadata.json: environment variables, distributed args and parallel "
                           "groups unknown")
        return ProfilerMetadata(info.world_size)
    md = io.load_json(path)
    if not isinstance(md, dict):
        return ProfilerMetadata(info.world_size)
    env = md.get("ENV_VARIABLES")
    if isinstance(env, dict):
        for name, value in env.items():
            # '' is how torch_npu records "unset"; keep it, never turn it into NULL
            io.t.add("env_vars", name=str(name), value="" if value is None else str(value))
        io.t.has("env")
    elif env is not None:
        io.warn(path, "ENV_VARIABLES is not an object; environment variables unknown")
    for k, v in md.items():
        if k != "ENV_VARIABLES":
            io.t.add("metadata", key=str(k), value_json=jdump(v))
    world_size = info.world_size
    da = md.get("distributed_args")
    if isinstance(da, dict) and as_int(da.get("world_size")) is not None:
        world_size = as_int(da.get("world_size"))
    groups: dict[str, dict[str, Any]] = {}
    pgi = md.get("parallel_group_info")
    if isinstance(pgi, dict):
        for gname, g in pgi.items():
            if not isinstance(g, dict):
                continue
            ranks = [r for r in (as_int(x) for x in g.get("global_ranks") or []) if r is not None]
            groups[group_hash(str(gname))] = {"group_name": str(gname), "pg_name": g.get("group_name"),
                                              "global_ranks": ranks}
        if groups:
            io.t.add("metadata", key="comm_groups", value_json=jdump(groups))
    return ProfilerMetadata(world_size, groups)


def device_info(desc: RankDesc, io: RankFiles) -> DeviceInfo:
    """The first readable info.json of the rank's PROF_* folders."""
    if not desc.device_infos:
        io.warn(desc.root, "no PROF_*/device_*/info.json.*: AI core counts and rated frequency unknown (block-dim "
                           "and frequency checks not applicable)")
        return DeviceInfo()
    for f in desc.device_infos:
        di = io.load_json(f)
        if not isinstance(di, dict):
            continue
        devs = di.get("DeviceInfo") or [{}]
        d0 = devs[0] if isinstance(devs, list) and devs and isinstance(devs[0], dict) else {}
        dev_id = as_int(d0.get("id"))
        if dev_id is None and (m := re.search(r"device_(\d+)", f.parent.name)):
            dev_id = int(m.group(1))
        device = DeviceInfo(device_name=text_or_none(di.get("platform_version")), device_id=dev_id,
                            ai_core_num=as_int(d0.get("ai_core_num")), aiv_num=as_int(d0.get("aiv_num")),
                            rated_freq_mhz=as_float(d0.get("aic_frequency")))
        if device.ai_core_num is not None:
            io.t.has("core_counts")
        if device.rated_freq_mhz:
            io.t.has("rated_freq")
        return device
    return DeviceInfo()


def memory_record(desc: RankDesc, io: RankFiles, info: ProfilerInfo) -> None:
    path = desc.path("memory_record.csv")
    if not desc.has("memory_record.csv"):
        if info.profile_memory:
            io.warn(path, "missing although profile_memory was on: memory checks not applicable")
        return
    res = io.resolve_csv(path, MEMORY_RECORD, required=False)
    if res is None:
        return
    f = res.found
    sel = [f"{sql_ns(f['ts'])} AS ts_ns"]
    sel.append(f"{sql_text(f['component'])} AS component" if "component" in f else "NULL AS component")
    for kind in ("allocated", "reserved", "active"):
        if f"{kind}_mb" in f:
            sel.append(f"{sql_bytes(f[f'{kind}_mb'], MEM_MB_BYTES)} AS {kind}_bytes")
        elif f"{kind}_kb" in f:
            sel.append(f"{sql_bytes(f[f'{kind}_kb'], MEM_KB_BYTES)} AS {kind}_bytes")
        else:
            sel.append(f"CAST(NULL AS BIGINT) AS {kind}_bytes")
    df = io.query_csv(path, sel)
    if df is None:
        return
    rows = np.flatnonzero(~isna(df["ts_ns"]))
    if not len(rows):
        io.warn(path, "no rows")
        return
    rows = rows[np.argsort(np.ma.getdata(df["ts_ns"])[rows], kind="stable")]
    df = df.take(rows)
    io.t.extend("memory_records", {"ts_ns": i64(df["ts_ns"]), "component": df["component"],
                                   "allocated_bytes": i64(df["allocated_bytes"]),
                                   "reserved_bytes": i64(df["reserved_bytes"]),
                                   "active_bytes": i64(df["active_bytes"])})
    io.t.has("memory_record", "memory")


def op_statistic(desc: RankDesc, io: RankFiles, op_type: np.ndarray | None) -> None:
    """Cross-check kernel_details' op types (`op_type`, None without kernel_details) against op_statistic.csv
    (same counts per OP Type): a cheap way to notice a truncated or filtered kernel_details.csv."""
    path = desc.path("op_statistic.csv")
    if not desc.has("op_statistic.csv") or op_type is None:
        return
    res = io.resolve_csv(path, OP_STATISTIC, required=False)
    if res is None or isna(op_type).all():
        return
    f = res.found
    st = io.query_converted(path, [("op_type", f["op_type"], TEXT), ("count", f["count"], INT)])
    if st is None:
        return
    # per op type (sorted) the sum of its counts, wrapping at int64 as pandas' groupby sum does
    want: dict[str, int] = {}
    full = ~(isna(st["op_type"]) | isna(st["count"]))
    for t, c in zip(st["op_type"][full].tolist(), np.ma.getdata(st["count"])[full].tolist(), strict=True):
        want[t] = want.get(t, 0) + c
    want = {t: (want[t] + 2 ** 63) % 2 ** 64 - 2 ** 63 for t in sorted(want)}
    have: dict[str, int] = {}
    for t in op_type.tolist():
        if t is not None:
            have[t] = have.get(t, 0) + 1
    diff = [t for t in want if int(want[t]) != int(have.get(t, 0))]
    if diff:
        io.warn(path, f"op counts differ from kernel_details.csv for {len(diff)} op types (e.g. {diff[0]}: "
                      f"{int(want[diff[0]])} vs {int(have.get(diff[0], 0))}); kernel_details.csv may be incomplete")


def api_statistic(desc: RankDesc, io: RankFiles) -> None:
    path = desc.path("api_statistic.csv")
    if not desc.has("api_statistic.csv"):
        return
    res = io.resolve_csv(path, API_STATISTIC, required=False)
    if res is None:
        return
    f = res.found
    sel = [f"{sql_text(f['api_name'])} AS api", f"{sql_ns(f['time_us'])} AS time_ns", f"{sql_int(f['count'])} AS count"]
    if "level" in f:
        sel.append(f"{sql_text(f['level'])} AS level")
    df = io.query_csv(path, sel)
    if df is None:
        return
    values = {k: np.ma.getdata(v).tolist() for k, v in df.cols.items()}
    nulls = {k: isna(v).tolist() for k, v in df.cols.items()}
    rows = [{k: (None if nulls[k][i] else (int(values[k][i]) if k in ("time_ns", "count") else values[k][i]))
             for k in values} for i in range(len(df))]
    io.t.add("metadata", key="api_statistic", value_json=jdump(rows))
    io.t.has("api_statistic")


def operator_details(desc: RankDesc, io: RankFiles, host: HostOps) -> HostOps:
    """The host ops with operator_details.csv's `Call Stack` for the ops that have none, only where the op
    name has exactly one distinct stack (the file is aggregated, so an ambiguous name is left alone)."""
    path = desc.path("operator_details.csv")
    if not desc.has("operator_details.csv"):
        return host
    res = io.resolve_csv(path, OPERATOR_DETAILS, required=False)
    if res is None:
        return host
    io.t.has("operator_details")
    if "call_stack" not in res.found:
        return host
    df = io.query_csv(path, [f"{sql_text(res.found['name'])} AS name",
                             f"{sql_text(res.found['call_stack'], quotes=True)} AS stack"])
    if df is None:
        return host
    # the names with one distinct stack (rows with both), and that stack
    first: dict[str, str] = {}
    distinct: dict[str, set[str]] = {}
    for name, stack in zip(df["name"].tolist(), df["stack"].tolist(), strict=True):
        if name is not None and stack is not None:
            first.setdefault(name, stack)
            distinct.setdefault(name, set()).add(stack)
    if not first:
        return host
    one = {name: first[name] for name, s in distinct.items() if len(s) == 1}
    filled: list[str | None] | None = None   # (a copy of the column, made at the first stack filled in)
    for i, (stack, name) in enumerate(zip(host.call_stack, host.name, strict=True)):
        if stack is None and name in one:
            if filled is None:
                filled = list(host.call_stack)
            filled[i] = one[name]
    if filled is None:
        return host
    io.t.has("call_stack")
    return replace(host, call_stack=filled)


def operator_memory(desc: RankDesc, io: RankFiles) -> None:
    path = desc.path("operator_memory.csv")
    if desc.has("operator_memory.csv") and io.resolve_csv(path, OPERATOR_MEMORY, required=False) is not None:
        io.t.has("operator_memory")


def ranks_row(desc: RankDesc, io: RankFiles, info: ProfilerInfo, meta: ProfilerMetadata, device: DeviceInfo,
              time_origin: int | None) -> None:
    """The ranks row; `time_origin`: the trace's earliest start, else the first device op's."""
    stacks = "call_stack" in io.t.capabilities
    with_stack = (bool(info.with_stack) or stacks) if info.with_stack is not None else (stacks or None)
    io.t.add("ranks", source_path=str(desc.root), format=desc.format, vendor="ascend",
             framework=info.framework, framework_version=info.framework_version,
             device_name=device.device_name, device_id=device.device_id, world_size=meta.world_size,
             ai_core_num=device.ai_core_num, aiv_num=device.aiv_num, rated_freq_mhz=device.rated_freq_mhz,
             profiler_level=info.profiler_level, with_stack=with_stack, time_origin_ns=time_origin)
    if with_stack:
        io.t.has("with_stack")
