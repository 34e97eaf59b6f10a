"""Environment and configuration of a run, their changes, and whether a fix can apply to its hardware."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pandas as pd

from ..store import Profile
from .sides import in_list


def env_of(prof: Profile, ranks: list[int]) -> dict[str, str | None]:
    df = prof.sql(f"SELECT name, any_value(value) AS value FROM env_vars WHERE {in_list('rank', ranks)} GROUP BY name")
    return {str(n): (None if v is None or v != v else str(v)) for n, v in zip(df["name"], df["value"], strict=True)}


def config_of(prof: Profile, ranks: list[int]) -> dict[str, str | None]:
    """Configuration facts worth diffing: world size, device, framework, versions, profiler level, parallel sizes."""
    df = prof.sql(f"SELECT * FROM ranks WHERE {in_list('rank', ranks)} ORDER BY rank LIMIT 1")
    out: dict[str, str | None] = {}
    if not df.empty:
        r = df.iloc[0]
        for k in ("world_size", "device_name", "vendor", "framework", "framework_version", "profiler_level",
                  "ai_core_num", "rated_freq_mhz"):
            v = r.get(k)
            # pd.isna: nullable integer columns hold pd.NA, whose truth value raises (`v != v` does not work)
            out[k] = None if v is None or pd.isna(v) else str(v)
    md = prof.sql(f"SELECT key, any_value(value_json) AS v FROM metadata WHERE {in_list('rank', ranks)} "
                  "AND key = 'distributed_args' GROUP BY key")
    if not md.empty:
        import json

        try:
            for k, v in (json.loads(md.iloc[0]["v"]) or {}).items():
                out[f"distributed_args.{k}"] = str(v)
        except (ValueError, TypeError, AttributeError):
            pass
    return out


def dict_changes(a: dict[str, str | None], b: dict[str, str | None]) -> list[tuple[str, str | None, str | None]]:
    def norm(v: str | None) -> str | None:
        return None if v is None or v == "" else v

    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if norm(a.get(k)) != norm(b.get(k))]


@dataclass(frozen=True)
class Changed:
    """One variable or configuration fact that differs between the runs (None: unset on that side)."""

    name: str
    base: str | None
    target: str | None


def changed(a: dict[str, str | None], b: dict[str, str | None]) -> list[Changed]:
    return [Changed(k, x, y) for k, x, y in dict_changes(a, b)]


# Fixes that need hardware: bf16 / TF32 need compute capability 8.0 (Ampere); NPU fixes are for Ascend only,
# CUDA fixes for NVIDIA only.
_NEEDS_AMPERE = re.compile(r"tf32|bf16", re.I)
_NPU_FIX = re.compile(r"^(npu|ascend|hccl|aclnn|aicpu|aoe|mindspore|mindspeed)-")
_CUDA_FIX = re.compile(r"^(cuda|nccl)-")


# pre-Ampere NVIDIA parts by name (NVIDIA's CUDA GPUs table); Ampere and later carry deviceProperties
_CC_BY_NAME = ((re.compile(r"V100|Titan V", re.I), (7, 0)), (re.compile(r"T4\b|RTX 20|Quadro RTX|TITAN RTX", re.I), (7, 5)),
               (re.compile(r"P100", re.I), (6, 0)), (re.compile(r"P4\b|P40|GTX 10|TITAN X", re.I), (6, 1)))


def compute_capability(prof: Profile, ranks: list[int]) -> tuple[int, int] | None:
    """(major, minor) from the trace's deviceProperties (Kineto metadata) of the first rank, else from a
    known pre-Ampere device name, else None (unknown: no fix is held back for it)."""
    import json

    df = prof.sql(f"SELECT value_json FROM metadata WHERE {in_list('rank', ranks)} AND key = 'deviceProperties' LIMIT 1")
    try:
        props = json.loads(df.iloc[0]["value_json"]) if not df.empty else []
    except (ValueError, TypeError):
        props = []
    for p in props if isinstance(props, list) else [props]:
        if isinstance(p, dict) and isinstance(p.get("computeMajor"), int):
            return int(p["computeMajor"]), int(p.get("computeMinor") or 0)
    # traces before deviceProperties (PyTorch 1.8): the device name, where one is recorded
    name = config_of(prof, ranks).get("device_name") or ""
    return next((cc for rx, cc in _CC_BY_NAME if rx.search(name)), None)


def fix_fits(fix: str, vendor: str | None, cc: tuple[int, int] | None, env: dict[str, str | None]) -> bool:
    """Whether a fix id can apply to this run: its hardware (vendor, compute capability) and, for fixes that
    unset a variable, whether the run set it."""
    v = (vendor or "").lower()
    if _NPU_FIX.match(fix) and v and v != "ascend" and "huawei" not in v:
        return False
    if _CUDA_FIX.match(fix) and ("ascend" in v or "huawei" in v):
        return False
    if _NEEDS_AMPERE.search(fix) and cc is not None and cc < (8, 0):
        return False
    var = {"cuda-launch-blocking-off": "CUDA_LAUNCH_BLOCKING", "ascend-launch-blocking-off": "ASCEND_LAUNCH_BLOCKING"}
    return fix not in var or (env.get(var[fix]) or "0") not in ("0", "")
