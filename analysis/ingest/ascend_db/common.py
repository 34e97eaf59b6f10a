"""Constants, enumerations and small converters of the Ascend DB reader; the rank metadata (`read_rank_meta`)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base import RankTables

DB_RE = re.compile(r"^ascend_(pytorch|mindspore)_profiler(?:_(\d+))?\.db$")


OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"


# Comm-analyzer twins of communication.json / step_trace_time.csv written beside the main DB.
ANALYSIS_DBS = ("analysis.db", "communication_analyzer.db")


TEXT_DELIVERABLES = ("trace_view.json", "kernel_details.csv", "step_trace_time.csv", "op_statistic.csv",
                     "communication.json", "communication_matrix.json", "operator_details.csv")


# Largest start gap between an analysis.db CommAnalyzerTime row and its COMMUNICATION_OP (measured 13.4 µs on
# msinsight-pt-db-l1; the ops of one step are >= 2 ms apart there).
COMM_MATCH_NS = 100_000.0


REQUIRED_TABLES = ("STRING_IDS", "TASK")


# Tables a default capture has (torch_npu system-test list); their absence is worth a warning.
EXPECTED_TABLES = {
    "pytorch": ("COMPUTE_TASK_INFO", "CANN_API", "PYTORCH_API", "STEP_TIME", "META_DATA", "AICORE_FREQ"),
    "mindspore": ("COMPUTE_TASK_INFO", "CANN_API"),
    # a raw msprof DB (msprof_*.db) has no framework layer: no PYTORCH_API, STEP_TIME or META_DATA
    "msprof": ("COMPUTE_TASK_INFO", "CANN_API"),
}


COMM_MB = 1_000_000          # communication.json / analysis.db "MB" are 10^6 bytes


INVALID_ID = 4294967295      # msprof's "no value" for 32-bit ids (Context ID, Model ID ...)


# Fallbacks for the ENUM_* tables (docs/formats.md §2.2), used when a DB lacks the table.
ENUM_API_TYPE = {20000: "acl", 15000: "model", 10000: "node", 5500: "communication", 5000: "runtime",
                 50001: "op", 50002: "queue", 50003: "trace", 50004: "mstx"}


ENUM_HCCL_DATA_TYPE = {0: "INT8", 1: "INT16", 2: "INT32", 3: "FP16", 4: "FP32", 5: "INT64", 6: "UINT64",
                       7: "UINT8", 8: "UINT16", 9: "UINT32", 10: "FP64", 11: "BFP16", 12: "INT128",
                       65534: "N/A", 65535: "INVALID_TYPE"}


ENUM_HCCL_LINK_TYPE = {0: "ON_CHIP", 1: "HCCS", 2: "PCIE", 3: "ROCE", 4: "SIO", 5: "HCCS_SW",
                       6: "STANDARD_ROCE", 7: "RESERVED"}


ENUM_HCCL_TRANSPORT_TYPE = {0: "SDMA", 1: "RDMA", 2: "LOCAL"}


ENUM_HCCL_RDMA_TYPE = {0: "RDMA_SEND_NOTIFY", 1: "RDMA_SEND_PAYLOAD", 2: "RDMA_PAYLOAD_PREPARE",
                       3: "RDMA_PAYLOAD_CHECK", 4: "RDMA_PAYLOAD_ACK", 5: "RDMA_SEND_OP"}


ENUM_DEFAULTS = {"ENUM_API_TYPE": ENUM_API_TYPE, "ENUM_HCCL_DATA_TYPE": ENUM_HCCL_DATA_TYPE,
                 "ENUM_HCCL_LINK_TYPE": ENUM_HCCL_LINK_TYPE, "ENUM_HCCL_TRANSPORT_TYPE": ENUM_HCCL_TRANSPORT_TYPE,
                 "ENUM_HCCL_RDMA_TYPE": ENUM_HCCL_RDMA_TYPE}


# CANN API level -> the prefix the text export (trace_view "CANN" process) and msprof-analyze give the name.
API_PREFIX = {"acl": "AscendCL@", "runtime": "Runtime@", "node": "Node@", "model": "Model@"}


PIPE_RATIOS = ("aic_mac_ratio", "aic_scalar_ratio", "aic_mte1_ratio", "aic_mte2_ratio", "aic_fixpipe_ratio",
               "aiv_vec_ratio", "aiv_scalar_ratio", "aiv_mte2_ratio", "aiv_mte3_ratio")


DATA_WAIT_RE = re.compile(r"getnext|dequeue", re.I)


INIT_DATA_RE = re.compile(r"initdata", re.I)


_DIGITS_RE = re.compile(r"(\d+)")


INT_OR_NONE = frozenset({int, type(None)})


STR_OR_NONE = frozenset({str, type(None)})


STEP_MSG_RE = re.compile(r"(?:ProfilerStep#|\bstep[\s_#:=-]*)(\d+)", re.I)


# --------------------------------------------------------------------------------------------------------
# Rank-directory metadata shared by the DB and text layouts (profiler_info, profiler_metadata, info.json)


@dataclass(frozen=True)
class RankMeta:
    """What the rank directory says about itself, outside ASCEND_PROFILER_OUTPUT."""

    framework_version: str | None = None
    profiler_level: str | None = None
    with_stack: bool | None = None
    world_size: int | None = None
    device_name: str | None = None
    device_id: int | None = None
    ai_core_num: int | None = None
    aiv_num: int | None = None
    rated_freq_mhz: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)     # profiler_metadata.json
    info: dict[str, Any] = field(default_factory=dict)         # profiler_info_{rank}.json


def to_int(v: Any) -> int | None:
    if type(v) is int:  # INTEGER cells, most of them
        return v
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return None


# "No rank" as the DB export writes it: UINT32_MAX in COMMUNICATION_TASK_INFO.srcRank / dstRank (a task
# with no peer, e.g. a local reduce), and -1 / UINT64_MAX elsewhere.
_RANK_SENTINELS = frozenset({-1, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})


def rank_or_none(v: Any) -> int | None:
    r = to_int(v)
    return None if r is None or r in _RANK_SENTINELS else r


def to_float(v: Any) -> float | None:
    if type(v) is float:  # REAL cells
        return v
    if type(v) is int:  # NUMERIC cells holding a whole number (float(str(v)) is the same float)
        return float(v)
    try:
        return float(str(v).strip())
    except (TypeError, ValueError):
        return None


def floats(values: list[Any]) -> list[float | None]:
    """`to_float` of each value."""
    return [v if type(v) is float else float(v) if type(v) is int else to_float(v) for v in values]


def ms_ns(v: Any) -> int | None:
    """Milliseconds (REAL or text) -> integer ns."""
    f = to_float(v)
    return None if f is None else round(f * 1_000_000)


def ms_ns_column(values: list[Any]) -> list[int | None]:
    """`ms_ns` of each value, a column at a time (`floats`)."""
    return [None if f is None else round(f * 1_000_000) for f in floats(values)]


def step_number(s: Any) -> int | None:
    """The step number in a step text ("step3", "3", 3), None when it has no digits."""
    m = _DIGITS_RE.search(str(s or ""))
    return int(m.group(1)) if m else None


def _enum_tail(v: Any) -> str | None:
    """'ProfilerLevel.Level1' -> 'Level1' (MindSpore writes enum reprs into profiler_info)."""
    return None if v in (None, "") else str(v).rsplit(".", 1)[-1]


def read_rank_meta(rank_dir: Path, tables: RankTables) -> RankMeta:
    """profiler_info_{rank}.json, profiler_metadata.json and PROF_*/device_*/info.json.* of one rank dir."""
    if not rank_dir.is_dir():
        return RankMeta()
    got: dict[str, Any] = {}
    infos = sorted(rank_dir.glob("profiler_info*.json"))
    if infos and isinstance(info := tables.read_json(infos[0]), dict):
        cfg = info.get("config") or {}
        exp = cfg.get("experimental_config") or {}
        common = cfg.get("common_config") or {}
        params = info.get("profiler_parameters") or {}          # MindSpore ≥ 2.5
        ws = common.get("with_stack", params.get("with_stack"))
        got.update(info=info, framework_version=info.get("torch_npu_version") or info.get("ms_version"),
                   profiler_level=_enum_tail(exp.get("_profiler_level") or params.get("profiler_level")),
                   with_stack=bool(ws) if ws is not None else None, world_size=to_int(info.get("rank_size")))
    md_path = rank_dir / "profiler_metadata.json"
    if md_path.is_file() and isinstance(md := tables.read_json(md_path), dict):
        got["metadata"] = md
    for dev_info in sorted(rank_dir.glob("PROF_*/device_*/info.json.*")):
        if dev_info.name.endswith(".done"):
            continue
        if isinstance(di := tables.read_json(dev_info), dict):
            devs = di.get("DeviceInfo") or [{}]
            d0 = devs[0] if devs else {}
            device_id = to_int(d0.get("id"))
            if device_id is None and (m := re.search(r"device_(\d+)", str(dev_info.parent.name))):
                device_id = int(m.group(1))
            got.update(device_name=di.get("platform_version") or None, ai_core_num=to_int(d0.get("ai_core_num")),
                       aiv_num=to_int(d0.get("aiv_num")), rated_freq_mhz=to_float(d0.get("aic_frequency")),
                       device_id=device_id)
            break
    return RankMeta(**got)


def framework_category(name: str, api_type: str) -> str:
    """host_ops.category of a PYTORCH_API row (by ENUM_API_TYPE level, then by name)."""
    if api_type == "trace":
        return "python_function"
    if api_type == "mstx":
        return "user_annotation"
    if api_type == "queue":
        return "other"
    if name.startswith("ProfilerStep#"):
        return "user_annotation"
    if "dataloader" in name.lower():
        return "dataloader"
    return "cpu_op"


def db_task_category(task_type: str, is_memcpy: bool, compute_info: bool) -> str:
    """device_ops.category of a TASK row that is neither a kernel nor an HCCL sub-task. `compute_info`:
    the export has COMPUTE_TASK_INFO."""
    tt = task_type.upper()
    if tt.startswith(("KERNEL_AI", "KERNEL_MIX", "AI_CORE", "AI_VECTOR", "AI_CPU", "MIX_", "FFTS")):
        # torch_npu's Computing is the COMPUTE_TASK_INFO tasks alone: an AI_CORE task without a row there
        # is HCCL's own kernel (it spans a COMMUNICATION_OP exactly) or a runtime helper, and as compute it
        # would count a collective as computing. Without the table, the task type is all there is.
        return "other" if compute_info else "compute"
    if is_memcpy or "MEMCPY" in tt or "MEMSET" in tt or "DMA" in tt:
        return "memory"
    if "EVENT" in tt or "NOTIFY" in tt or "WAIT" in tt or "RECORD" in tt or "BARRIER" in tt:
        return "sync"
    return "other"
