"""Op tables of a side and their diff: kernels, host ops, runtime APIs and collectives, per step."""

from __future__ import annotations

import re

import pandas as pd

from ..ingest.formats import has_kineto
from ..timeline.names import DRAINED_RE, kernel_label, operator_label, strip_address
from .sides import Side, in_list

HOST_OP_CATS = ("cpu_op", "user_annotation", "python_function", "dataloader", "gc", "other")

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
    p, where = side.profile, f"{in_list('rank', side.ranks)} AND {in_list('step', side.steps)}"
    dwhere = where
    if by_launch and has_kineto(p.info.format):
        # HTA's rule: a GPU op belongs to the iteration of its correlated launch; ops whose launch is not
        # in the step (CUDA-graph replays, launches outside the trace) belong to no iteration
        dwhere = (f"{where} AND d.correlation_id IN (SELECT k.correlation_id FROM kernel_launches k "
                  "WHERE k.rank = d.rank AND k.launch_step = d.step)")
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
        df = p.sql(f"SELECT name AS key, dur_ns FROM host_ops WHERE {where} AND category IN "
                   f"({','.join(repr(c) for c in HOST_OP_CATS)})") if kind == "op" else p.sql(
            f"SELECT name AS key, dur_ns FROM host_api_calls WHERE {where}")
        # Python names carry object addresses that differ per process: without them they match across runs
        df["key"] = df["key"].map(strip_address)
    elif kind == "comm":
        # Ascend: HCCL ops by type and group; GPU: the NCCL kernels themselves (HTA's op set)
        df = pd.DataFrame() if has_kineto(p.info.format) else p.sql(
            f"SELECT coalesce(op_type, name) || coalesce(' @' || group_name, '') AS key, elapse_ns AS dur_ns "
            f"FROM comm_ops WHERE {where}")
        if df.empty:
            df = p.sql(f"SELECT name AS key, dur_ns FROM comm_kernels d WHERE {dwhere}")
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
    if has_kineto(p.info.format):
        return {}
    df = p.sql(
        "SELECT coalesce(o.op_type, o.name) || coalesce(' @' || o.group_name, '') AS key, "
        "sum(b.size_bytes) / nullif(sum(b.transit_ns), 0) AS gbps FROM comm_bandwidth b JOIN comm_ops o "
        "ON o.rank = b.rank AND o.name = b.op_name AND o.step IS NOT DISTINCT FROM b.step "
        f"WHERE {in_list('o.rank', side.ranks)} AND {in_list('o.step', side.steps)} AND b.size_bytes > 0 "
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


# Host calls that wait for the device: their time grows because something earlier on the device grew, so
# they are effects. The calls after which the device has drained (synchronize calls of every runtime,
# blocking copies), device-to-host copies, and `.item()` / `_local_scalar_dense`, which copy a scalar.
SYNC_WAIT = re.compile(f"{DRAINED_RE.pattern}|^(cuda|hip)MemcpyDtoH|^aten::(item|_local_scalar_dense|is_nonzero)$")
# Python-level frames and Module annotations contain the aten ops they call, like ProfilerStep: not causes
# of their own on the host side.
PY_FRAME = re.compile(r"^<built-in |^\S+\.py\(\d+\): |^nn\.Module: |^torch/|^<listcomp>")


def is_sync_wait(name: str) -> bool:
    return bool(SYNC_WAIT.search(name))


def effect_waits(changes: pd.DataFrame) -> pd.Series:
    """The host sync waits among `changes` (CHANGE_COLUMNS rows) that are effects, not causes. A wait grows
    because the device work it waits for grew, or because new host code issues it (an `.item()` in a new
    check): what is named is that work or that code. Only calls of a wait that came or went while no host op
    gained or lost a call (a bare synchronize added, or forced by the environment) are a cause of their own."""
    if changes.empty:
        return pd.Series(False, index=changes.index)
    waits = changes["kind"].isin(("op", "api")) & changes["name"].map(lambda n: is_sync_wait(str(n))).astype(bool)
    counted = (changes["count_target"] - changes["count_base"]).abs() >= 1
    issuer = (changes["kind"].eq("op") & ~waits & counted).any()
    return waits & ~(counted & ~issuer)


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
    if not has_kineto(p.info.format):
        return pd.DataFrame(columns=cols)
    where = f"{in_list('d.rank', side.ranks)} AND {in_list('d.step', side.steps)}"
    df = p.sql(
        "WITH k AS (SELECT d.rank, d.name, d.dur_ns, d.tid, d.launch_ns AS ls, d.launch_ns + d.launch_dur_ns AS le, "
        f"row_number() OVER () AS kid FROM kernel_launches d WHERE d.category = 'compute' AND {where}) "
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
