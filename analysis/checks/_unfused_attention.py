"""affinity-api on CUDA / ROCm: attention computed unfused by scaled_dot_product_attention's math backend.

`torch.nn.functional.scaled_dot_product_attention` dispatches to a fused kernel (FlashAttention, memory-efficient,
cuDNN) when the inputs and the enabled backends allow it; otherwise it runs `aten::_scaled_dot_product_attention_math`,
which materializes the score matrix with bmm, scale, mask, softmax and bmm kernels (one launch per step of the
formula, each reading and writing the S x S scores). That op in a Kineto trace is the recorded proof that the math
backend ran (forced by `sdpa_kernel(SDPBackend.MATH)` / `enable_flash=False`, or chosen because the inputs fit no
fused kernel: fp32 on flash, an unsupported mask or head dim).

Measured per rank over its kept steps, through the launch links (runtime call on the op's thread inside the op's
window -> correlation id -> device kernel):
* forward: the kernels launched inside each math op;
* backward: the kernels of the autograd nodes of the ops the math op ran (`aten::bmm` -> `BmmBackward0`,
  `aten::_safe_softmax` -> `SafeSoftmaxBackward0`), counted only for ops that run nowhere else in the rank's
  forward (calls inside autograd nodes are the backward's own; the trace does not say which forward call a node
  belongs to, so an op shared with other code is left out and the backward share is a lower bound).

impact_ms = forward + backward kernel time per step, the rank where it weighs most: an upper bound of what the
fused kernel recovers, since its own time (usually a small fraction for long sequences) is not subtracted.
Severity: the impact rule. subject = `torch.nn.functional.scaled_dot_product_attention` (the fix that removes the
forced backend or gives the inputs a fused kernel).

Attention written by hand (a second finding, same subject: the fix's template replaces it with SDPA): on a thread's
first-level aten ops (not nested in another aten op), `matmul | bmm | baddbmm`, at most HAND_MIDDLE elementwise /
layout ops (scale, mask, bias, casts), `softmax`, at most 3 dropout / cast ops, then `matmul | bmm`: the score
matrix computed, normalised and applied in separate kernels. impact_ms = the forward kernels those ops launched
per step (the backward runs generic MmBackward / BmmBackward nodes shared with other code and is not attributed:
a lower bound).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..models import Finding
from ..units import NS_PER_MS
from ._affinity_rules import first_level, user_frame
from ._common import (
    fmt_ms,
    in_kept_steps,
    n_steps,
    worst_share,
)
from .evidence import Entry

if TYPE_CHECKING:
    from .base import Check, CheckContext

MATH_OP = "aten::_scaled_dot_product_attention_math"
SUBJECT = "torch.nn.functional.scaled_dot_product_attention"

# affinity-api's GPU shapes (AffinityApiCheck.templates): `worst` is the worst rank's MathBackendRank /
# HandWrittenRank; `ms`, `forward_ms`, `backward_ms` its kernel times per step (fmt_ms); `nodes` the backward's
# autograd nodes; `sequence` the commonest hand-written op sequence and `where` its calling code
ATTENTION_TEMPLATES: dict[str, tuple[str, str]] = {
    "math_backend": (
        "attention runs unfused (SDPA math backend): {worst.math_calls_per_step:g} calls and {ms} ms of kernels "
        "per step",
        "On {ranks} ({steps}) scaled_dot_product_attention ran the math backend ({op}) "
        "{worst.math_calls_per_step:g} times per step: {worst.forward_kernels_per_step:g} separate bmm / softmax / "
        "elementwise kernels in the forward ({forward_ms} ms) and {backward_ms} ms in the backward ({nodes}) on "
        "rank {worst_rank}, each writing the full score matrix. Remove the forced math backend "
        "(sdpa_kernel(SDPBackend.MATH), enable_flash/enable_mem_efficient=False) or give the inputs a fused kernel "
        "(fp16 / bf16, a supported mask and head dim).",
    ),
    "hand_written": (
        "attention written by hand ({sequence}): {worst.occurrences_per_step:g} per step, {forward_ms} ms of "
        "forward kernels per step",
        "On {ranks} ({steps}) attention is computed op by op (`{sequence}`{where}) {worst.occurrences_per_step:g} "
        "times per step: the score matrix is written, scaled, masked and normalised in separate kernels "
        "({forward_ms} ms of forward kernels per step on rank {worst_rank}). F.scaled_dot_product_attention "
        "computes it fused (FlashAttention / memory-efficient kernels) when the mask and dtype allow.",
    ),
}
NODE_PREFIX = "autograd::engine::evaluate_function: "
_NODE_RE = re.compile(r"^(?P<base>[A-Za-z0-9]+)Backward\d+$")


class MathBackendRank(Entry):
    """One rank's SDPA calls that ran the math backend: their forward and backward kernels."""

    weighs_by = "impact_ms_per_step"
    math_calls_per_step: float
    forward_kernels_per_step: float
    forward_kernel_ms_per_step: float
    backward_kernel_ms_per_step: float
    backward_nodes_ms_per_step: dict[str, float]  # autograd node -> its kernels' ms per step
    impact_ms_per_step: float
    steps: list[int]


class HandWrittenRank(Entry):
    """One rank's attention written op by op: its occurrences and their forward kernels."""

    weighs_by = "impact_ms_per_step"
    occurrences_per_step: float
    forward_kernel_ms_per_step: float
    impact_ms_per_step: float
    sequences: dict[str, int]  # op sequence -> occurrences (the three commonest)
    code_locations: list[str]
    steps: list[int]


def node_base(op: str) -> str:
    """The autograd node stem of an aten op: `aten::_safe_softmax` -> `SafeSoftmax`, `aten::bmm` -> `Bmm`."""
    return "".join(p[:1].upper() + p[1:] for p in op.removeprefix("aten::").split("_") if p)


def _math_windows(marks: str) -> str:
    return (f"WITH m AS (SELECT rank, step, tid, start_ns AS s, start_ns + dur_ns AS e FROM host_ops "
            f"WHERE name = '{MATH_OP}' AND rank IN ({marks}))")


def _forward(ctx: CheckContext, ranks: list[int]) -> pd.DataFrame:
    """rank, step, calls, kernels, ns: the kernels launched inside the math ops, per (rank, step)."""
    marks = ",".join("?" * len(ranks))
    return ctx.sql(
        _math_windows(marks) + ", k AS (SELECT m.rank, m.step, m.s, d.dur_ns FROM m JOIN kernel_launches d ON "
        "d.rank = m.rank AND d.tid = m.tid AND d.launch_ns >= m.s AND d.launch_ns < m.e) "
        "SELECT m.rank, m.step, count(DISTINCT m.s) AS calls, count(k.dur_ns) AS kernels, "
        "coalesce(sum(k.dur_ns), 0) AS ns FROM m LEFT JOIN k ON k.rank = m.rank AND k.s = m.s "
        "GROUP BY m.rank, m.step ORDER BY m.rank, m.step", ranks)


def _exclusive_ops(ctx: CheckContext, ranks: list[int]) -> dict[int, set[str]]:
    """rank -> autograd node stems of the aten ops that run inside the math ops and nowhere else in the rank's
    forward. Judged per stem, since ops sharing a node (`aten::add`, `aten::add_` -> `AddBackward0`) are one."""
    marks = ",".join("?" * len(ranks))
    inside = ctx.sql(
        _math_windows(marks) + " SELECT c.rank, c.name, count(*) AS n FROM m JOIN host_ops c "
        "ON c.rank = m.rank AND c.tid = m.tid AND c.start_ns >= m.s AND c.start_ns < m.e "
        f"AND c.name LIKE 'aten::%' AND c.name <> '{MATH_OP}' GROUP BY c.rank, c.name", ranks)
    if inside.empty:
        return {}
    stems = {str(n): node_base(str(n)) for n in inside["name"].unique()}
    names = ctx.sql(f"SELECT DISTINCT name FROM host_ops WHERE rank IN ({marks}) AND name LIKE 'aten::%'", ranks)
    related = [str(n) for n in names["name"] if node_base(str(n)) in set(stems.values())]
    nm = ",".join("?" * len(related))
    # forward calls only: a node's backward runs the same aten ops (BmmBackward0 calls aten::bmm)
    total = ctx.sql(
        f"WITH nodes AS (SELECT rank, tid, start_ns AS s, start_ns + dur_ns AS e FROM host_ops WHERE rank IN ({marks}) "
        f"AND name LIKE '{NODE_PREFIX}%'), "
        f"c AS (SELECT rank, tid, name, start_ns FROM host_ops WHERE rank IN ({marks}) AND name IN ({nm})) "
        "SELECT c.rank, c.name, count(*) AS n FROM c WHERE NOT EXISTS (SELECT 1 FROM nodes "
        "WHERE nodes.rank = c.rank AND nodes.tid = c.tid AND c.start_ns >= nodes.s AND c.start_ns < nodes.e) "
        "GROUP BY c.rank, c.name", [*ranks, *ranks, *related])
    count_in: dict[tuple[int, str], int] = {}
    for r, n, k in zip(inside["rank"].tolist(), inside["name"].tolist(), inside["n"].tolist(), strict=True):
        key = (int(r), stems[str(n)])
        count_in[key] = count_in.get(key, 0) + int(k)
    count_all: dict[tuple[int, str], int] = {}
    for r, n, k in zip(total["rank"].tolist(), total["name"].tolist(), total["n"].tolist(), strict=True):
        key = (int(r), node_base(str(n)))
        count_all[key] = count_all.get(key, 0) + int(k)
    out: dict[int, set[str]] = {}
    for (rank, stem), k in count_in.items():
        if k >= count_all.get((rank, stem), 0):
            out.setdefault(rank, set()).add(stem)
    return out


def _backward(ctx: CheckContext, ranks: list[int], stems: dict[int, set[str]]) -> pd.DataFrame:
    """rank, step, node, ns: kernels launched by the autograd nodes of the exclusive ops, per (rank, step)."""
    marks = ",".join("?" * len(ranks))
    df = ctx.sql(
        "WITH n AS (SELECT rank, step, tid, name, start_ns AS s, start_ns + dur_ns AS e FROM host_ops "
        f"WHERE rank IN ({marks}) AND name LIKE '{NODE_PREFIX}%') "
        "SELECT n.rank, n.step, n.name AS node, sum(d.dur_ns) AS ns FROM n JOIN kernel_launches d ON "
        "d.rank = n.rank AND d.tid = n.tid AND d.launch_ns >= n.s AND d.launch_ns < n.e "
        "GROUP BY n.rank, n.step, n.name", ranks)
    if df.empty:
        return df
    node = df["node"].astype(str).str.removeprefix(NODE_PREFIX)
    stem = node.map(lambda s: (m["base"] if (m := _NODE_RE.match(s)) else ""))
    keep = np.fromiter((st in stems.get(int(r), set()) for r, st in zip(df["rank"], stem, strict=True)),
                       dtype=bool, count=len(df))
    out = df[keep].copy()
    out["node"] = node[keep]
    return out


_MATMUL = "(?:matmul|bmm|baddbmm)"
_MIDDLE = ("mul", "mul_", "div", "div_", "add", "add_", "sub", "masked_fill", "masked_fill_", "where", "to",
           "_to_copy", "float", "type_as", "contiguous", "view", "reshape", "expand", "transpose", "clone",
           "scalar_tensor")
_AFTER = ("dropout", "native_dropout", "to", "_to_copy", "type_as", "contiguous")
HAND_MIDDLE = 4
HAND_RE = re.compile(
    rf"(?<![^;]){_MATMUL};(?:(?:{'|'.join(_MIDDLE)});){{0,{HAND_MIDDLE}}}(?:softmax|_softmax|_safe_softmax);"
    rf"(?:(?:{'|'.join(_AFTER)});){{0,3}}{_MATMUL};")
_SOFTMAX = "('aten::softmax', 'aten::_softmax', 'aten::_safe_softmax')"


def _hand_written(ctx: CheckContext, ranks: list[int]) -> pd.DataFrame:
    """rank, step, tid, start_ns, end_ns, sequence, stack of each hand-written attention (module doc)."""
    marks = ",".join("?" * len(ranks))
    # only the threads that ran a softmax outside the math backend can hold one
    ops = ctx.sql(
        f"WITH t AS (SELECT DISTINCT rank, tid FROM host_ops WHERE rank IN ({marks}) AND name IN {_SOFTMAX}) "
        "SELECT h.rank, h.step, h.tid, h.name, h.start_ns, h.dur_ns, h.call_stack FROM host_ops h JOIN t "
        "ON t.rank = h.rank AND t.tid = h.tid WHERE h.name LIKE 'aten::%' "
        "ORDER BY h.rank, h.tid, h.start_ns, h.dur_ns DESC", ranks)
    cols = ["rank", "step", "tid", "start_ns", "end_ns", "sequence", "stack"]
    if ops.empty:
        return pd.DataFrame(columns=cols)
    top = first_level(ops)
    rows: list[tuple] = []
    for (rank, tid), g in top.groupby(["rank", "tid"], sort=True, dropna=False):
        names = [str(n).removeprefix("aten::") for n in g["name"]]
        starts = np.cumsum([0] + [len(n) + 1 for n in names])
        text = "".join(n + ";" for n in names)
        s0, e0 = g["start_ns"].to_numpy(np.int64), g["start_ns"].to_numpy(np.int64) + g["dur_ns"].to_numpy(np.int64)
        for m in HAND_RE.finditer(text):
            i, j = int(np.searchsorted(starts, m.start())), int(np.searchsorted(starts, m.end()))
            rows.append((int(rank), g["step"].iloc[i], tid, int(s0[i]), int(e0[i:j].max()), "-".join(names[i:j]),
                         user_frame(g["call_stack"].iloc[i])))
    return pd.DataFrame(rows, columns=cols)


def _kernel_ns(ctx: CheckContext, found: pd.DataFrame) -> np.ndarray:
    """Device time of the kernels launched on each found window's thread inside it (ns per row)."""
    ranks = sorted({int(r) for r in found["rank"]})
    marks = ",".join("?" * len(ranks))
    k = ctx.sql(
        f"SELECT rank, tid, launch_ns AS start_ns, dur_ns FROM kernel_launches WHERE rank IN ({marks}) "
        "ORDER BY rank, tid, launch_ns", ranks)
    out = np.zeros(len(found), dtype=np.int64)
    groups = {key: g for key, g in k.groupby(["rank", "tid"], sort=False, dropna=False)}
    for n, (rank, tid, a, b) in enumerate(zip(found["rank"], found["tid"], found["start_ns"], found["end_ns"],
                                              strict=True)):
        g = groups.get((rank, tid))
        if g is None:
            continue
        t = g["start_ns"].to_numpy(np.int64)
        cum = np.concatenate(([0], np.cumsum(g["dur_ns"].to_numpy(np.int64))))
        out[n] = cum[np.searchsorted(t, b, side="left")] - cum[np.searchsorted(t, a, side="left")]
    return out


def hand_written_attention(check: Check, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
    """The finding for the GPU ranks that compute attention by hand in their kept steps (or none)."""
    if not ranks:
        return []
    steps = ctx.view.kept_steps
    found = in_kept_steps(_hand_written(ctx, ranks), steps)
    if found.empty:
        return []
    found = found.assign(ns=_kernel_ns(ctx, found))
    per_rank: dict[int, HandWrittenRank] = {}
    for rank, g in found.groupby("rank", sort=True):
        k = n_steps(steps, int(rank))
        seqs = g["sequence"].value_counts()
        per_rank[int(rank)] = HandWrittenRank(
            occurrences_per_step=round(len(g) / k, 2),
            forward_kernel_ms_per_step=round(float(g["ns"].sum()) / NS_PER_MS / k, 4),
            impact_ms_per_step=round(float(g["ns"].sum()) / NS_PER_MS / k, 4),
            sequences={str(a): int(b) for a, b in seqs.head(3).items()},
            code_locations=sorted({str(x) for x in g["stack"].dropna()})[:5],
            steps=sorted({int(s) for s in g["step"].dropna()}),
        )
    rk = sorted(per_rank)
    rank_w, ms_w = worst_share(ctx, {r: v.impact_ms_per_step for r, v in per_rank.items()})
    e = per_rank[rank_w if rank_w is not None else rk[0]]
    st = sorted({s for v in per_rank.values() for s in v.steps})
    return [check.finding(
        ctx, shape="hand_written", subject=SUBJECT, ranks=rk, steps=st, impact_ms=ms_w, impact_rank=rank_w,
        evidence=check.evidence(
            attention="hand_written", pattern=HAND_RE.pattern, per_rank=per_rank,
            impact_method="device time of the kernels the matched ops launched in the forward, per step, worst "
                          "rank (the backward is not attributed: a lower bound)"),
        words={"sequence": next(iter(e.sequences)),
               "where": f" at {e.code_locations[0]}" if e.code_locations else "",
               "forward_ms": fmt_ms(e.forward_kernel_ms_per_step)})]


def unfused_attention(check: Check, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
    """The findings for the GPU ranks in `ranks`: the math SDPA backend, and attention written by hand."""
    return _math_backend(check, ctx, ranks) + hand_written_attention(check, ctx, ranks)


def _math_backend(check: Check, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
    """The finding for the GPU ranks in `ranks` that ran the math SDPA backend in their kept steps (or none)."""
    if not ranks:
        return []
    steps = ctx.view.kept_steps
    fwd = in_kept_steps(_forward(ctx, ranks), steps)
    if fwd.empty:
        return []
    math_ranks = sorted({int(r) for r in fwd["rank"]})
    bwd = in_kept_steps(_backward(ctx, math_ranks, _exclusive_ops(ctx, math_ranks)), steps)
    per_rank: dict[int, MathBackendRank] = {}
    for rank in math_ranks:
        f = fwd[fwd["rank"] == rank]
        b = bwd[bwd["rank"] == rank] if not bwd.empty else bwd
        k = n_steps(steps, rank)
        f_ms = float(f["ns"].sum()) / NS_PER_MS / k
        b_ms = float(b["ns"].sum()) / NS_PER_MS / k if not b.empty else 0.0
        nodes = b.groupby("node")["ns"].sum().sort_values(ascending=False) if not b.empty else pd.Series()
        per_rank[rank] = MathBackendRank(
            math_calls_per_step=round(float(f["calls"].sum()) / k, 2),
            forward_kernels_per_step=round(float(f["kernels"].sum()) / k, 2),
            forward_kernel_ms_per_step=round(f_ms, 4),
            backward_kernel_ms_per_step=round(b_ms, 4),
            backward_nodes_ms_per_step={str(n): round(float(v) / NS_PER_MS / k, 4) for n, v in nodes.items()},
            impact_ms_per_step=round(f_ms + b_ms, 4),
            steps=sorted({int(s) for s in f["step"].dropna()}),
        )
    rank_w, ms_w = worst_share(ctx, {r: v.impact_ms_per_step for r, v in per_rank.items()})
    e = per_rank[rank_w if rank_w is not None else math_ranks[0]]
    st = sorted({s for v in per_rank.values() for s in v.steps})
    return [check.finding(
        ctx, shape="math_backend", subject=SUBJECT, ranks=math_ranks, steps=st, impact_ms=ms_w, impact_rank=rank_w,
        evidence=check.evidence(
            attention="math_backend", op=MATH_OP, per_rank=per_rank,
            impact_method="device time of the kernels the math op launched plus those of the backward nodes of "
                          "ops only it runs (lower bound of the backward), per step, worst rank; an upper bound of "
                          "the saving: the fused kernel's own time is not subtracted"),
        words={"ms": fmt_ms(ms_w or 0), "forward_ms": fmt_ms(e.forward_kernel_ms_per_step),
               "backward_ms": fmt_ms(e.backward_kernel_ms_per_step),
               "nodes": ", ".join(e.backward_nodes_ms_per_step) or "none attributable"})]
