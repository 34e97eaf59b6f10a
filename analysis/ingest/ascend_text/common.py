"""Constants shared by the Ascend text reader's modules, and the task category of a device task."""

from __future__ import annotations

import re

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"


COMM_MB_BYTES = 1_000_000       # communication.json / communication_matrix.json "MB" (see module docstring)


MEM_MB_BYTES = 1 << 20          # allocator "MB" (memory_record.csv) are MiB


MEM_KB_BYTES = 1 << 10


INT32_MAX = 2**31 - 1           # INTEGER columns; msprof writes 4294967295 for "no value"


ANALYSE_HINT = "re-run torch_npu.profiler.profiler.analyse() (or the MindSpore offline analyse) on the profile"


# The 9 variables torch_npu records (profiler_metadata.json ENV_VARIABLES); '' means unset.
ENV_VARIABLES = ("ASCEND_GLOBAL_LOG_LEVEL", "HCCL_RDMA_TC", "HCCL_RDMA_SL", "ACLNN_CACHE_LIMIT",
                 "HOST_CACHE_CAPACITY", "ASCEND_ENHANCE_ENABLE", "PYTORCH_NPU_ALLOC_CONF",
                 "ASCEND_LAUNCH_BLOCKING", "HCCL_ALGO")


AGGREGATE_KEY_RE = re.compile(r"-(top\d+|middle|bottom|total)$", re.I)


LINK_RE = re.compile(r"^\s*(\d+)\s*-\s*(\d+)\s*$")


STEP_KEY_RE = re.compile(r"(\d+)\s*$")


GROUP_THREAD_RE = re.compile(r"^Group\s+(\S+)\s+Communication", re.I)


HCOM_SUFFIX_RE = re.compile(r"(_\d+)+$")


HCOM_SUFFIX_LINES_RE = re.compile(r"(_\d+)+$", re.M)


LEVEL_RE = re.compile(r"(Level\w+)", re.I)


def task_category(task_type: str | None, name: str, default: str) -> str:
    """device_ops.category of an Ascend task from its Task Type / Accelerator Core (name for hcom_ ops)."""
    if name.startswith("hcom_"):
        return "communication"
    tt = (task_type or "").upper()
    if not tt or tt == "N/A":
        return default
    if tt in ("HCCL", "COMMUNICATION") or tt.startswith("HCCL"):
        return "communication"
    if tt.startswith(("AI_CORE", "AI_VECTOR", "MIX_", "AI_CPU", "AIV", "AIC", "FFTS", "DSA", "C_CORE")):
        return "compute"
    if "DMA" in tt or "MEMCPY" in tt or "MEMSET" in tt:
        return "memory"
    if any(k in tt for k in ("EVENT", "NOTIFY", "WAIT", "WRITE_VALUE", "BARRIER", "SYNC")):
        return "sync"
    if tt == "OTHER":
        # Older CANN types every hardware task "Other" (mstt-fixtures/timeline_advice: aclnn*, trans_*,
        # Conv2D* kernels and MEMCPY): the name tells copies and waits from kernels.
        up = name.upper()
        if up.startswith(("MEMCPY", "MEMSET")) or "DMA" in up:
            return "memory"
        if up.startswith(("EVENT", "NOTIFY", "WAIT")):
            return "sync"
        return "compute"
    return default
