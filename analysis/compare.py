"""Run-vs-run and rank-vs-rank attribution: why did step time change?

Algorithm:
1. Match ranks: the same rank ids when both runs have them; a single rank against a single rank
   otherwise (with a note); for rank-vs-rank, rank A of a profile against rank B of the same profile.
2. Step time and breakdown: per-step means over the matched ranks' kept steps (or one chosen step),
   so runs with different step counts compare fairly; delta = target − base. Besides compute,
   communication (not overlapped) and free, two remainders are kept so that the dimensions add up to
   the step: memory (device busy with neither: copies, memsets, syncs) and host (step time outside the
   device window: host-only lead-in and tail).
3. Op deltas, per step and per matched rank:
     kernel — device ops grouped by name, or by (op type, input shapes) on Ascend (msprof-analyze's
              KernelCompare key), falling back to op type when the names do not match one to one;
     op     — framework ops on the host (aten::, npu::, annotations);
     api    — runtime / CANN API calls (the dispatch side);
     comm   — communication ops by type and group, with bandwidth where recorded;
   ops present on one side only appear with 0 on the other. Counts and times are per step.
4. Environment, configuration and findings: variables that differ, world size / device / versions,
   and the findings new in the target or gone from it.
5. Verdict: the dimension (compute / communication / free / memory / host) whose per-step delta is
   largest, and the change of that dimension's kind that explains most of it, with a fix id when a new
   finding maps to one. Collectives synchronise ranks: when one rank's own work (step minus
   communication) grows, its peers wait for it inside the next collective, so the mean communication
   time grows although no link got slower; the verdict then names that rank and its own dimension.
   When the step time barely moved, configuration changes and new findings lead instead.

Cross-vendor (Kineto GPU vs Ascend): names differ, so device ops are compared by family (matmul,
attention, vector, communication, memory, other) and the result says so. Every device op of a step
counts there, as in msprof-analyze's NPU-vs-GPU compare, not only those whose launch is in the step
(HTA's rule, kept for same-vendor Kineto diffs).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pandas as pd

from .metrics.breakdown import BreakdownRow, compute_breakdown
from .store import Profile
from .timeline.names import kernel_label, operator_label, strip_address

HOST_OP_CATS = ("cpu_op", "user_annotation", "python_function", "dataloader", "gc", "other")
HOST_API_CATS = ("runtime", "driver", "cann")
NOISE_PCT = 1.0   # a step-time change below this share is treated as no change

_CATEGORY_RULES = (
    ("communication", re.compile(r"^(nccl|rccl|hcom|hccl|allreduce|allgather|reducescatter|broadcast)", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|fusion_attention|sdpa", re.I)),
    ("matmul", re.compile(r"gemm|matmul|mm_|cutlass|cublas|conv|cudnn|batchmatmul|\bmm\b|hgemm|sgemm|wgrad|dgrad",
                          re.I)),
    ("memory", re.compile(r"memcpy|memset|tensormove|transdata|dma|copy", re.I)),
)


def op_family(name: str, op_type: str | None, category: str | None) -> str:
    """Vendor-neutral op family for cross-vendor comparison."""
    if category == "communication":
        return "communication"
    if category == "memory":
        return "memory"
    text = f"{op_type or ''} {name}"
    for fam, rx in _CATEGORY_RULES:
        if rx.search(text):
            return fam
    return "vector" if category == "compute" else "other"


@dataclass
class Side:
    """One side of a comparison: a profile, its ranks and steps, and per-step means."""

    profile: Profile
    ranks: list[int]
    steps: list[int]
    step_ms: float | None = None
    compute_ms: float | None = None
    comm_ms: float | None = None
    free_ms: float | None = None
    memory_ms: float | None = None      # device busy with neither compute nor communication (copies, syncs)
    host_ms: float | None = None        # step time outside the device window
    per_rank: dict[int, dict[str, float | None]] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """rank-steps compared (the per-step normaliser)."""
        return max(len(self.ranks) * len(self.steps), 1)


def _mean(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return sum(v) / len(v) if v else None


def _memory(r: BreakdownRow) -> float | None:
    # non_compute = busy - compute = communication alone + everything else alone (copies, memsets)
    if r.non_compute_ms is None or r.comm_not_overlapped_ms is None:
        return None
    return r.non_compute_ms - r.comm_not_overlapped_ms


def _host(r: BreakdownRow) -> float | None:
    return None if r.step_ms is None or r.device_ms is None else r.step_ms - r.device_ms


def _dims(rows: list[BreakdownRow]) -> dict[str, float | None]:
    return {"step_ms": _mean([r.step_ms for r in rows]), "compute_ms": _mean([r.compute_ms for r in rows]),
            "communication_ms": _mean([r.comm_not_overlapped_ms for r in rows]),
            "free_ms": _mean([r.free_ms for r in rows]), "memory_ms": _mean([_memory(r) for r in rows]),
            "host_ms": _mean([_host(r) for r in rows])}


def make_side(prof: Profile, ranks: list[int], step: int | None = None, first_step_only: bool = False) -> Side:
    rows = compute_breakdown(prof, ranks=ranks)
    steps = sorted({r.step for r in rows if r.step is not None})
    if step is not None:
        steps = [s for s in steps if s == step]
    elif first_step_only and steps:
        steps = steps[:1]
    rows = [r for r in rows if r.step in steps]
    d = _dims(rows)
    side = Side(prof, ranks, steps, d["step_ms"], d["compute_ms"], d["communication_ms"], d["free_ms"],
                d["memory_ms"], d["host_ms"])
    of_rank: dict[int, list[BreakdownRow]] = {rank: [] for rank in ranks}
    for r in rows:  # one pass, not a scan of every row per rank
        if r.rank in of_rank:
            of_rank[r.rank].append(r)
    for rank in ranks:
        side.per_rank[rank] = _dims(of_rank[rank])
    return side


def rank_side(side: Side, rank: int) -> Side:
    """One rank of a side, over the same steps (for op tables of that rank alone)."""
    return Side(side.profile, [rank], side.steps, per_rank={rank: side.per_rank.get(rank, {})})


def _in(col: str, vals: list[int]) -> str:
    return f"{col} IN ({','.join(str(int(v)) for v in vals)})" if vals else "FALSE"


def op_type_of(key: str) -> str:
    """The op type of an Ascend kernel key "OpType [shapes]" (the name itself for other keys)."""
    return key.split(" [", 1)[0]


def op_table(side: Side, kind: str, *, by_family: bool = False, by_launch: bool = True) -> pd.DataFrame:
    """Per-step counts and times (ms) of one kind of op on one side: columns key, count, total_ms, and for
    device ops `dim`, the breakdown dimension their time counts in (compute / communication / memory), so
    a verdict about one dimension names only ops of that dimension.

    `by_family` keys device ops by family: kernels by matmul / attention / vector / memory / other, and
    communication as the one family "communication" (vendors name collectives differently).
    `by_launch` (Kineto) applies HTA's iteration rule below; without it a GPU op belongs to the step the
    store assigned it (by launch, else by time), which is what msprof-analyze's NPU-vs-GPU compare counts.
    """
    p, where = side.profile, f"{_in('rank', side.ranks)} AND {_in('step', side.steps)}"
    dwhere = where
    if by_launch and "kineto" in p.info.format:
        # HTA's rule: a GPU op belongs to the iteration of its correlated launch; ops whose launch is not
        # in the step (CUDA-graph replays, launches outside the trace) belong to no iteration
        dwhere = (f"{where} AND EXISTS (SELECT 1 FROM host_ops h WHERE h.rank = d.rank AND h.step = d.step "
                  "AND h.correlation_id = d.correlation_id)")
    if kind == "kernel":
        df = p.sql(f"SELECT name, op_type, category, input_shapes, dur_ns FROM device_ops d WHERE {dwhere} "
                   "AND category <> 'communication'")
        if df.empty:
            return pd.DataFrame(columns=["key", "count", "total_ms"])
        # the breakdown counts only category compute as compute; copies, memsets, syncs are busy-not-compute
        df["dim"] = df["category"].map(lambda c: c if c in ("compute", "communication") else "memory")
        if by_family:
            df["key"] = [op_family(n, t, c) for n, t, c in zip(df["name"], df["op_type"], df["category"], strict=True)]
        else:
            ascend = df["op_type"].notna().any()
            df["key"] = (df["op_type"].fillna(df["name"]) + df["input_shapes"].fillna("").map(
                lambda s: f" [{s}]" if s else "")) if ascend else df["name"]
    elif kind in ("op", "api"):
        cats = HOST_OP_CATS if kind == "op" else HOST_API_CATS
        df = p.sql(f"SELECT name AS key, dur_ns FROM host_ops WHERE {where} AND category IN "
                   f"({','.join(repr(c) for c in cats)})")
        # Python names carry object addresses that differ per process: without them they match across runs
        df["key"] = df["key"].map(strip_address)
    elif kind == "comm":
        # Ascend: HCCL ops by type and group; GPU: the NCCL kernels themselves (HTA's op set)
        df = pd.DataFrame() if "kineto" in p.info.format else p.sql(
            f"SELECT coalesce(op_type, name) || coalesce(' @' || group_name, '') AS key, elapse_ns AS dur_ns "
            f"FROM comm_ops WHERE {where}")
        if df.empty:
            df = p.sql(f"SELECT name AS key, dur_ns FROM device_ops d WHERE {dwhere} "
                       "AND category = 'communication'")
        df["dim"] = "communication"
        if by_family and not df.empty:
            df["key"] = "communication"
    else:
        raise ValueError(kind)
    cols = ["key", "count", "total_ms"] + (["dim"] if "dim" in df.columns else [])
    if df.empty:
        return pd.DataFrame(columns=cols)
    agg = {"count": ("dur_ns", "size"), "total_ns": ("dur_ns", "sum")}
    if "dim" in df.columns:
        agg["dim"] = ("dim", "first")
    g = df.groupby("key", as_index=False).agg(**agg)
    g["count"] = g["count"] / side.n
    g["total_ms"] = g["total_ns"] / 1e6 / side.n
    return g[cols]


def comm_bandwidth(side: Side) -> dict[str, float]:
    """Achieved bandwidth (GB/s = bytes/ns) per comm key (op type @ group) over the side's ranks and steps:
    Σ bytes / Σ transit time of the non-local transports in communication.json (the advisor's definition)."""
    p = side.profile
    if "kineto" in p.info.format:
        return {}
    df = p.sql(
        "SELECT coalesce(o.op_type, o.name) || coalesce(' @' || o.group_name, '') AS key, "
        "sum(b.size_bytes) / nullif(sum(b.transit_ns), 0) AS gbps FROM comm_bandwidth b JOIN comm_ops o "
        "ON o.rank = b.rank AND o.name = b.op_name AND o.step IS NOT DISTINCT FROM b.step "
        f"WHERE {_in('o.rank', side.ranks)} AND {_in('o.step', side.steps)} AND b.size_bytes > 0 "
        "AND upper(b.transport) NOT IN ('LOCAL', 'ON_CHIP') AND upper(b.transport) IN ('SDMA', 'RDMA') GROUP BY 1")
    return {str(k): float(v) for k, v in zip(df["key"], df["gbps"], strict=True) if v == v and v is not None}


def diff_tables(base: pd.DataFrame, target: pd.DataFrame, kind: str) -> pd.DataFrame:
    """Outer join of two op tables with deltas; sorted by |delta_ms| descending."""
    # host tables carry no dim; give both sides the column so the merge always suffixes it
    base, target = (t if "dim" in t.columns else t.assign(dim=None) for t in (base, target))
    m = base.merge(target, on="key", how="outer", suffixes=("_base", "_target"))
    dim = m.pop("dim_target").combine_first(m.pop("dim_base"))
    m = m.fillna(0.0)
    m["dim"] = dim
    m["delta_ms"] = m["total_ms_target"] - m["total_ms_base"]
    m["kind"] = kind
    m = m.rename(columns={"key": "name", "total_ms_base": "base_ms", "total_ms_target": "target_ms",
                          "count_base": "count_base", "count_target": "count_target"})
    m["change"] = ["added" if b == 0 and t > 0 else "removed" if t == 0 and b > 0 else "changed"
                   for b, t in zip(m["count_base"], m["count_target"], strict=True)]
    return m.reindex(m["delta_ms"].abs().sort_values(ascending=False).index)[
        ["kind", "name", "base_ms", "target_ms", "delta_ms", "count_base", "count_target", "change", "dim"]]


def env_of(prof: Profile, ranks: list[int]) -> dict[str, str | None]:
    df = prof.sql(f"SELECT name, any_value(value) AS value FROM env_vars WHERE {_in('rank', ranks)} GROUP BY name")
    return {str(n): (None if v is None or v != v else str(v)) for n, v in zip(df["name"], df["value"], strict=True)}


def config_of(prof: Profile, ranks: list[int]) -> dict[str, str | None]:
    """Configuration facts worth diffing: world size, device, framework, versions, profiler level, parallel sizes."""
    df = prof.sql(f"SELECT * FROM ranks WHERE {_in('rank', ranks)} ORDER BY rank LIMIT 1")
    out: dict[str, str | None] = {}
    if not df.empty:
        r = df.iloc[0]
        for k in ("world_size", "device_name", "vendor", "framework", "framework_version", "profiler_level",
                  "ai_core_num", "rated_freq_mhz"):
            v = r.get(k)
            # pd.isna: nullable integer columns hold pd.NA, whose truth value raises (`v != v` does not work)
            out[k] = None if v is None or pd.isna(v) else str(v)
    md = prof.sql(f"SELECT key, any_value(value_json) AS v FROM metadata WHERE {_in('rank', ranks)} "
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


# Host calls that wait for the device: their time grows because something earlier on the device grew, so
# they are effects. `.item()` / `_local_scalar_dense` copy a scalar device-to-host; a plain cudaMemcpy is
# synchronous.
SYNC_WAIT = re.compile(r"^(cuda|hip)(Stream|Device|Event)Synchronize$|^(cuda|hip)Memcpy$|^(cuda|hip)MemcpyDtoH|"
                       r"^aten::(item|_local_scalar_dense|is_nonzero)$|^aclrtSynchronize(Stream|Device)", re.I)
# Python-level frames and Module annotations contain the aten ops they call, like ProfilerStep: not causes
# of their own on the host side.
PY_FRAME = re.compile(r"^<built-in |^\S+\.py\(\d+\): |^nn\.Module: |^torch/|^<listcomp>")


def is_sync_wait(name: str) -> bool:
    return bool(SYNC_WAIT.search(name))


def operator_table(side: Side) -> pd.DataFrame:
    """Device time (ms per step) by the operator that launched it: columns op, inner, kernel, count, total_ms.

    A kernel is tied to its launch through the correlation id (device_ops -> runtime/driver host_ops); the
    operator is the outermost cpu_op on the launching thread whose interval holds the launch (the aten op a
    person calls, or autograd's `evaluate_function: XBackward0` on the backward thread), `inner` the innermost
    one (the aten op the launch belongs to, e.g. aten::bmm inside aten::scaled_dot_product_attention). Kernels whose launch
    is not in the trace or has no enclosing cpu_op are left out (they stay in the kernel table). Kineto only;
    empty elsewhere."""
    p = side.profile
    cols = ["op", "inner", "kernel", "count", "total_ms"]
    if "kineto" not in p.info.format:
        return pd.DataFrame(columns=cols)
    where = f"{_in('d.rank', side.ranks)} AND {_in('d.step', side.steps)}"
    df = p.sql(
        "WITH k AS (SELECT d.rank, d.name, d.dur_ns, r.tid, r.start_ns AS ls, r.start_ns + r.dur_ns AS le, "
        "row_number() OVER () AS kid FROM device_ops d JOIN host_ops r ON r.rank = d.rank "
        "AND r.correlation_id = d.correlation_id AND r.category IN ('runtime', 'driver') "
        f"WHERE {where} AND d.category = 'compute') "
        "SELECT arg_min(c.name, c.depth) AS op, arg_max(c.name, c.depth) AS inner, any_value(k.name) AS kernel, any_value(k.dur_ns) AS dur_ns "
        "FROM k JOIN host_ops c ON c.rank = k.rank AND c.tid = k.tid AND c.category = 'cpu_op' "
        "AND c.start_ns <= k.ls AND c.start_ns + c.dur_ns >= k.le GROUP BY k.kid")
    if df.empty:
        return pd.DataFrame(columns=cols)
    df["op"] = df["op"].map(operator_label)
    df["inner"] = df["inner"].map(operator_label)
    df["kernel"] = df["kernel"].map(kernel_label)
    g = df.groupby(["op", "inner", "kernel"], as_index=False).agg(count=("dur_ns", "size"), total_ns=("dur_ns", "sum"))
    g["count"] = g["count"] / side.n
    g["total_ms"] = g["total_ns"] / 1e6 / side.n
    return g[cols]


def operator_deltas(base: pd.DataFrame, target: pd.DataFrame) -> pd.DataFrame:
    """Per operator: delta_ms (target − base device time per step) and `kernels`, what moved most inside it
    in the direction of the operator's change (at most three): the inner aten ops where they differ from the
    operator, else the kernel labels. Largest |delta| first."""
    m = base.merge(target, on=["op", "inner", "kernel"], how="outer", suffixes=("_b", "_t")).fillna(
        {"total_ms_b": 0.0, "total_ms_t": 0.0, "count_b": 0.0, "count_t": 0.0})
    if m.empty:
        return pd.DataFrame(columns=["op", "delta_ms", "base_ms", "target_ms", "kernels"])
    m["d"] = m["total_ms_t"] - m["total_ms_b"]
    rows = []
    for op, g in m.groupby("op"):
        d = float(g["d"].sum())
        sign = 1 if d >= 0 else -1
        moved = g[g["d"] * sign > 0]
        by = "inner" if (moved["inner"] != op).any() else "kernel"
        ks = moved.groupby(by)["d"].sum().sort_values(key=lambda s: -s * sign).index
        rows.append({"op": str(op), "delta_ms": d, "base_ms": float(g["total_ms_b"].sum()),
                     "target_ms": float(g["total_ms_t"].sum()), "kernels": list(dict.fromkeys(ks))[:3]})
    out = pd.DataFrame(rows)
    return out.reindex(out["delta_ms"].abs().sort_values(ascending=False).index)


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

    df = prof.sql(f"SELECT value_json FROM metadata WHERE {_in('rank', ranks)} AND key = 'deviceProperties' LIMIT 1")
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
