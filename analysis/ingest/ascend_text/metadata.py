"""profiler_info / profiler_metadata / device info, memory_record.csv and the statistics CSVs."""

from __future__ import annotations

import re
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
from .common import MEM_KB_BYTES, MEM_MB_BYTES
from .csv_io import INT, TEXT, Frame, isna, sql_bytes, sql_int, sql_ns, sql_text
from .frames import jdump, level
from .numbers import i64
from .reader_base import ReaderBase
from .trace_events import as_float, as_int, text_or_none


class MetadataFiles(ReaderBase):
    """Reads the metadata, memory and statistics files of a rank."""

    # -- rank directory metadata ----------------------------------------------------------------------

    def profiler_info(self) -> None:
        named = self.root / f"profiler_info_{self.rank}.json"
        files = [named] if named.is_file() else sorted(self.root.glob("profiler_info*.json"))
        if not files:
            self.warn(self.root, "no profiler_info_{rank}.json: framework version, profiler level and "
                                 "with_stack unknown")
            return
        info = self.load_json(files[0])
        if not isinstance(info, dict):
            return
        if "ms_version" in info:
            self.framework = "mindspore"
        elif "torch_npu_version" in info:
            self.framework = "pytorch"
        self.framework_version = text_or_none(info.get("torch_npu_version") or info.get("ms_version"))
        cfg = info.get("config") if isinstance(info.get("config"), dict) else {}
        exp = cfg.get("experimental_config") if isinstance(cfg.get("experimental_config"), dict) else {}
        common = cfg.get("common_config") if isinstance(cfg.get("common_config"), dict) else {}
        params = info.get("profiler_parameters") if isinstance(info.get("profiler_parameters"), dict) else {}
        self.profiler_level = level(exp.get("_profiler_level") or params.get("profiler_level"))
        ws = common.get("with_stack", params.get("with_stack"))
        self.with_stack = bool(ws) if ws is not None else None
        pm = common.get("profile_memory", params.get("profile_memory"))
        self.profile_memory = bool(pm) if pm is not None else None
        # torch_npu records GC only when experimental_config._gc_detect_threshold is set: then "no GC
        # event" is a measurement, otherwise it is unknown.
        self.gc_detect = exp.get("_gc_detect_threshold") is not None
        self.aic_metrics = text_or_none(exp.get("_aic_metrics") or params.get("aic_metrics"))
        if cfg:
            self.t.add("metadata", key="config", value_json=jdump(cfg))
        if params:
            self.t.add("metadata", key="profiler_parameters", value_json=jdump(params))
        for k in ("cann_version", "jit_level", "rank_size"):
            if info.get(k) is not None:
                self.t.add("metadata", key=k, value_json=jdump(info[k]))
        if self.world_size is None:
            self.world_size = as_int(info.get("rank_size"))

    def profiler_metadata(self) -> None:
        path = self.root / "profiler_metadata.json"
        if not path.is_file():
            self.warn(self.root, "no profiler_metadata.json: environment variables, distributed args and "
                                 "parallel groups unknown")
            return
        md = self.load_json(path)
        if not isinstance(md, dict):
            return
        env = md.get("ENV_VARIABLES")
        if isinstance(env, dict):
            for name, value in env.items():
                # '' is how torch_npu records "unset"; keep it, never turn it into NULL
                self.t.add("env_vars", name=str(name), value="" if value is None else str(value))
            self.t.has("env")
        elif env is not None:
            self.warn(path, "ENV_VARIABLES is not an object; environment variables unknown")
        for k, v in md.items():
            if k != "ENV_VARIABLES":
                self.t.add("metadata", key=str(k), value_json=jdump(v))
        da = md.get("distributed_args")
        if isinstance(da, dict) and as_int(da.get("world_size")) is not None:
            self.world_size = as_int(da.get("world_size"))
        pgi = md.get("parallel_group_info")
        if isinstance(pgi, dict):
            for gname, g in pgi.items():
                if not isinstance(g, dict):
                    continue
                ranks = [r for r in (as_int(x) for x in g.get("global_ranks") or []) if r is not None]
                self.groups[group_hash(str(gname))] = {"group_name": str(gname), "pg_name": g.get("group_name"),
                                                       "global_ranks": ranks}
            if self.groups:
                self.t.add("metadata", key="comm_groups", value_json=jdump(self.groups))

    def device_info(self) -> None:
        files = sorted(p for p in self.root.glob("PROF_*/device_*/info.json*") if not p.name.endswith(".done"))
        if not files:
            self.warn(self.root, "no PROF_*/device_*/info.json.*: AI core counts and rated frequency unknown "
                                 "(block-dim and frequency checks not applicable)")
            return
        for f in files:
            di = self.load_json(f)
            if not isinstance(di, dict):
                continue
            devs = di.get("DeviceInfo") or [{}]
            d0 = devs[0] if isinstance(devs, list) and devs and isinstance(devs[0], dict) else {}
            dev_id = as_int(d0.get("id"))
            if dev_id is None and (m := re.search(r"device_(\d+)", f.parent.name)):
                dev_id = int(m.group(1))
            self.device = {"device_name": text_or_none(di.get("platform_version")), "device_id": dev_id,
                           "ai_core_num": as_int(d0.get("ai_core_num")), "aiv_num": as_int(d0.get("aiv_num")),
                           "rated_freq_mhz": as_float(d0.get("aic_frequency"))}
            if self.device["ai_core_num"] is not None:
                self.t.has("core_counts")
            if self.device["rated_freq_mhz"]:
                self.t.has("rated_freq")
            return

    def memory_record(self) -> None:
        path = self.out / "memory_record.csv"
        if not path.is_file():
            if self.profile_memory:
                self.warn(path, "missing although profile_memory was on: memory checks not applicable")
            return
        res = self.resolve_csv(path, MEMORY_RECORD, required=False)
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
        df = self.query_csv(path, sel)
        if df is None:
            return
        rows = np.flatnonzero(~isna(df["ts_ns"]))
        if not len(rows):
            self.warn(path, "no rows")
            return
        rows = rows[np.argsort(np.ma.getdata(df["ts_ns"])[rows], kind="stable")]
        df = df.take(rows)
        self.t.extend("memory_records", {"ts_ns": i64(df["ts_ns"]), "component": df["component"],
                                         "allocated_bytes": i64(df["allocated_bytes"]),
                                         "reserved_bytes": i64(df["reserved_bytes"]),
                                         "active_bytes": i64(df["active_bytes"])})
        self.t.has("memory_record", "memory")

    def op_statistic(self, kd: Frame | None) -> None:
        """Cross-check kernel_details against op_statistic.csv (same counts per OP Type) - a cheap way to
        notice a truncated or filtered kernel_details.csv."""
        path = self.out / "op_statistic.csv"
        if not path.is_file() or kd is None:
            return
        res = self.resolve_csv(path, OP_STATISTIC, required=False)
        if res is None or isna(kd["op_type"]).all():
            return
        f = res.found
        st = self.query_converted(path, [("op_type", f["op_type"], TEXT), ("count", f["count"], INT)])
        if st is None:
            return
        # per op type (sorted) the sum of its counts, wrapping at int64 as pandas' groupby sum does
        want: dict[str, int] = {}
        full = ~(isna(st["op_type"]) | isna(st["count"]))
        for t, c in zip(st["op_type"][full].tolist(), np.ma.getdata(st["count"])[full].tolist(), strict=True):
            want[t] = want.get(t, 0) + c
        want = {t: (want[t] + 2 ** 63) % 2 ** 64 - 2 ** 63 for t in sorted(want)}
        have: dict[str, int] = {}
        for t in kd["op_type"].tolist():
            if t is not None:
                have[t] = have.get(t, 0) + 1
        diff = [t for t in want if int(want[t]) != int(have.get(t, 0))]
        if diff:
            self.warn(path, f"op counts differ from kernel_details.csv for {len(diff)} op types "
                            f"(e.g. {diff[0]}: {int(want[diff[0]])} vs {int(have.get(diff[0], 0))}); "
                            "kernel_details.csv may be incomplete")

    def api_statistic(self) -> None:
        path = self.out / "api_statistic.csv"
        if not path.is_file():
            return
        res = self.resolve_csv(path, API_STATISTIC, required=False)
        if res is None:
            return
        f = res.found
        sel = [f"{sql_text(f['api_name'])} AS api", f"{sql_ns(f['time_us'])} AS time_ns",
               f"{sql_int(f['count'])} AS count"]
        if "level" in f:
            sel.append(f"{sql_text(f['level'])} AS level")
        df = self.query_csv(path, sel)
        if df is None:
            return
        values = {k: np.ma.getdata(v).tolist() for k, v in df.cols.items()}
        nulls = {k: isna(v).tolist() for k, v in df.cols.items()}
        rows = [{k: (None if nulls[k][i] else (int(values[k][i]) if k in ("time_ns", "count") else values[k][i]))
                 for k in values} for i in range(len(df))]
        self.t.add("metadata", key="api_statistic", value_json=jdump(rows))
        self.t.has("api_statistic")

    def operator_details(self, host: dict[str, Any]) -> None:
        """operator_details.csv `Call Stack` -> host_ops.call_stack for ops that have none, only where the op
        name has exactly one distinct stack (the file is aggregated, so an ambiguous name is left alone)."""
        path = self.out / "operator_details.csv"
        if not path.is_file():
            return
        res = self.resolve_csv(path, OPERATOR_DETAILS, required=False)
        if res is None:
            return
        self.t.has("operator_details")
        if "call_stack" not in res.found:
            return
        df = self.query_csv(path, [f"{sql_text(res.found['name'])} AS name",
                                   f"{sql_text(res.found['call_stack'], quotes=True)} AS stack"])
        if df is None:
            return
        # the names with one distinct stack (rows with both), and that stack
        first: dict[str, str] = {}
        distinct: dict[str, set[str]] = {}
        for name, stack in zip(df["name"].tolist(), df["stack"].tolist(), strict=True):
            if name is not None and stack is not None:
                first.setdefault(name, stack)
                distinct.setdefault(name, set()).add(stack)
        if not first:
            return
        one = {name: first[name] for name, s in distinct.items() if len(s) == 1}
        filled = False
        call_stack = host["call_stack"]
        for i, (stack, name) in enumerate(zip(call_stack, host["name"], strict=True)):
            if stack is None and name in one:
                call_stack[i] = one[name]
                filled = True
        if filled:
            self.t.has("call_stack")

    def operator_memory(self) -> None:
        path = self.out / "operator_memory.csv"
        if path.is_file() and self.resolve_csv(path, OPERATOR_MEMORY, required=False) is not None:
            self.t.has("operator_memory")

    def emit_host(self, host: dict[str, Any]) -> None:
        if len(host["name"]):
            self.t.extend("host_ops", host)

    def ranks_row(self, dev: dict[str, np.ndarray]) -> None:
        origin = self.time_origin
        if origin is None and len(dev["start_ns"]):
            origin = int(dev["start_ns"].min())
        stacks = "call_stack" in self.t.capabilities
        with_stack = (bool(self.with_stack) or stacks) if self.with_stack is not None else (stacks or None)
        d = self.device
        self.t.add("ranks", source_path=str(self.root), format=self.src.format, vendor="ascend",
                   framework=self.framework, framework_version=self.framework_version,
                   device_name=d.get("device_name"), device_id=d.get("device_id"), world_size=self.world_size,
                   ai_core_num=d.get("ai_core_num"), aiv_num=d.get("aiv_num"),
                   rated_freq_mhz=d.get("rated_freq_mhz"), profiler_level=self.profiler_level,
                   with_stack=with_stack, time_origin_ns=origin)
        if with_stack:
            self.t.has("with_stack")
