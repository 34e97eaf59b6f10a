"""misaligned-shape: matmul and flash-attention kernels whose shapes miss the alignment the AI Core wants.

Rules (msprof-analyze 26.2.0 ai_core_performance_analysis, "unaffine operators"):
- cube: AI Core matmul kernels (op type contains "matmul") moving at least CUBE_MIN_MIB per step; in ND
  format the inner (last, contiguous) axis of both operands must be a multiple of T.cube_align (256
  elements), otherwise every tile load of the cube unit is partial;
- flash attention (FlashAttentionScore / FlashAttentionScoreGrad): the head dim D and the sequence length S
  must be multiples of T.fa_align (128).

How D and S are read (the advisor takes D = H / dim 1 and S = dim 2 of the first *output*, which is right
only when that output is the softmax statistics tensor; on the sample it divides 3000 by 2048):
- D: the last dim of a 4-D query (BNSD / BSND layouts) or of a 3-D query of a `varlen` kernel (TND);
  for a 3-D BSH / SBH query, H = N·D, so D = H / N when the head count N is known from the softmax
  statistics tensor [B, N, S, 8]; without it, H % 128 != 0 already proves D % 128 != 0;
- S: only from the softmax statistics tensor [B, N, S, 8] (an output of the forward kernel, an input of the
  grad kernel); a 3-D query does not say whether it is BSH or SBH, so S is not guessed.
- NZ (FRACTAL_NZ) operands are padded to 16×16 fractals by construction and are not judged.

impact_ms = Σ time of the misaligned kernels × optimization space, per step, worst rank. The optimization
space is the advisor's bound headroom: 1 − max(pipe ratio / bound threshold) over the pipes that bind
that kernel kind (cube: mac 0.8, mte2 0.95; FA forward: cube mte2 0.8, vector vec 0.75; FA grad: cube mte2
0.8, fixpipe 0.75), i.e. the time saved if the kernel became bound on its busiest pipe. Without pipe
ratios the impact is not estimated. Every rank is checked. Severity: the advisor's fixed LOW.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..models import Finding
from ..thresholds import T
from ._common import (
    in_kept_steps,
    n_steps,
    per_rank_ms,
    placeholders,
    step_list,
    worst_rank,
)
from .base import Check, CheckContext, register
from .evidence import Evidence, Record

CUBE_MIN_MIB = T.cube_min_mib.value
CUBE_BOUND = {"aic_mac_ratio": T.cube_bound_mac.value, "aic_mte2_ratio": T.cube_bound_mte2.value}
FA_FWD_BOUND = {"aic_mte2_ratio": T.fa_bound_mte2.value, "aiv_vec_ratio": T.fa_bound_vec.value}
FA_GRAD_BOUND = {"aic_mte2_ratio": T.fa_bound_mte2.value, "aic_fixpipe_ratio": T.fa_grad_bound_fixpipe.value}

_BOUNDS = {"cube": CUBE_BOUND, "fa_fwd": FA_FWD_BOUND, "fa_grad": FA_GRAD_BOUND}

FA_TYPES = ("FlashAttentionScore", "FlashAttentionScoreGrad")
# kernels with the same name, shapes, dtypes and formats are judged together
_KERNEL_KEY = (
    "rank",
    "op_type",
    "name",
    "input_shapes",
    "input_dtypes",
    "input_formats",
    "output_shapes",
    "output_dtypes",
)
_DTYPE_BYTES = {
    "bf16": 2,
    "bfloat16": 2,
    "float16": 2,
    "fp16": 2,
    "half": 2,
    "float": 4,
    "float32": 4,
    "fp32": 4,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "double": 8,
    "float64": 8,
    "hifloat8": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


def parse_shapes(text: object) -> list[list[int]]:
    """'"4096,1000;1000,4000"' -> [[4096, 1000], [1000, 4000]]; an empty or unparsable tensor -> []."""
    if not isinstance(text, str):
        return []
    out = []
    for part in text.strip().strip('"').split(";"):
        dims = [d.strip() for d in part.strip().strip('"').split(",") if d.strip()]
        try:
            out.append([int(d) for d in dims])
        except ValueError:
            out.append([])
    return out


def dtype_bytes(name: str) -> int:
    key = name.strip().lower().removeprefix("dt_")
    return _DTYPE_BYTES.get(key, 2)  # unknown: 2 bytes, the advisor's assumption


def tensor_bytes(shapes: object, dtypes: object) -> float:
    ts = parse_shapes(shapes)
    ds = dtypes.split(";") if isinstance(dtypes, str) else []
    total = 0.0
    for i, t in enumerate(ts):
        if t:
            total += float(np.prod(t, dtype="float64")) * dtype_bytes(ds[i] if i < len(ds) else "")
    return total


@dataclass
class Misalignment:
    kind: str  # cube | fa
    reasons: list[str]  # human-readable, with the numbers
    dims: dict[str, int]  # the axes judged


def cube_misalignment(in_shapes: object, in_formats: object) -> Misalignment | None:
    """None when aligned or not judgeable; the inner axes of both operands otherwise."""
    ts = parse_shapes(in_shapes)
    fmts = in_formats.split(";") if isinstance(in_formats, str) else []
    if len(ts) < 2 or not ts[0] or not ts[1] or any("NZ" in f.upper() for f in fmts[:2]):
        return None
    align = int(T.cube_align.value)
    a, b = ts[0][-1], ts[1][-1]
    bad = [f"{name} inner axis {v} % {align} = {v % align}" for name, v in (("A", a), ("B", b)) if v % align]
    return Misalignment("cube", bad, {"a_inner": a, "b_inner": b}) if bad else None


def _softmax_stats(tensors: list[list[int]]) -> list[int] | None:
    """The [B, N, S, 8] softmax max/sum tensor of flash attention, when present."""
    return next((t for t in tensors if len(t) == 4 and t[-1] == 8), None)


def fa_misalignment(name: str, in_shapes: object, out_shapes: object) -> Misalignment | None:
    ins, outs = parse_shapes(in_shapes), parse_shapes(out_shapes)
    if not ins or not ins[0]:
        return None
    align = int(T.fa_align.value)
    q = ins[0]
    stats = _softmax_stats(outs) or _softmax_stats(ins[1:])
    heads, seq = (stats[1], stats[2]) if stats else (None, None)
    reasons: list[str] = []
    dims: dict[str, int] = {}
    if len(q) == 4 or ("varlen" in name.lower() and len(q) == 3):
        dims["head_dim"] = q[-1]
        if q[-1] % align:
            reasons.append(f"head dim D = {q[-1]} % {align} = {q[-1] % align}")
    elif len(q) == 3:
        hidden = q[2]
        dims["hidden"] = hidden
        if heads and hidden % heads == 0:
            d = hidden // heads
            dims["head_dim"] = d
            if d % align:
                reasons.append(f"head dim D = {hidden}/{heads} = {d} % {align} = {d % align}")
        elif hidden % align:
            reasons.append(
                f"hidden size H = {hidden} is not a multiple of {align}, so neither is the head dim "
                "(H = heads × D)"
            )
    if seq:
        dims["seq_len"] = seq
        if seq % align:
            reasons.append(f"sequence length S = {seq} % {align} = {seq % align}")
    return Misalignment("fa", reasons, dims) if reasons else None


def _gain_text(estimated: bool, ms: float | None) -> str:
    if not estimated:
        return "the gain is not estimated (no pipe ratios)"
    if not ms or ms < 0.005:
        return "its pipes already reach their bound thresholds, so aligning the shapes should gain little"
    return f"up to {ms:.2f} ms per step could be saved by padding or reshaping to aligned sizes"


def optimization_space(ratios: dict[str, np.ndarray], bounds: dict[str, float]) -> np.ndarray:
    """Per task: 1 − max(ratio / threshold) over `bounds`, clipped to [0, 1]; NaN without ratios.

    `ratios` holds the pipe-ratio columns (any that are missing are skipped) of the same tasks."""
    parts = [np.asarray(ratios[c], dtype="float64") / thr for c, thr in bounds.items() if c in ratios]
    n = len(next(iter(ratios.values()))) if ratios else 0
    if not parts:
        return np.full(n, np.nan)
    load = np.fmax.reduce(np.vstack(parts), axis=0)  # NaN only where every ratio is NaN, as skipna does
    load = np.where(load > 0, load, np.nan)
    return np.clip(1.0 - load, 0.0, 1.0)


class MisalignedShapeRow(Record):
    input_shapes: str
    dtypes: str
    why: str
    axes: dict[str, int]  # the axes judged (a_inner / b_inner, head_dim / hidden / seq_len)
    tasks_per_step: float
    optimization_space: float | None


class MisalignedShapeEvidence(Evidence):
    primary = "lost_ms_per_step_by_rank"
    alignment_elements: int
    shapes: list[MisalignedShapeRow]
    bound_thresholds: dict[str, float]  # pipe ratio column -> its bound threshold
    cube_min_mib_per_step: float | None
    kernel_ms_per_step_by_rank: dict[int, float]
    lost_ms_per_step_by_rank: dict[int, float] | None  # None without pipe ratios
    impact_method: str


@register
class MisalignedShapeCheck(Check):
    id = "misaligned-shape"
    dimension = "compute"
    title = "Misaligned matmul / attention shapes"
    fires_when = "matmul / attention shapes miss the alignment the hardware wants"
    thresholds = (
        "cube_align", "cube_bound_mac", "cube_bound_mte2", "cube_min_mib", "fa_align", "fa_bound_mte2",
        "fa_bound_vec", "fa_grad_bound_fixpipe",
    )
    needs = ("kernel_details", "shapes")
    vendors = ("ascend",)
    description = (
        'Large matmul kernels whose inner axes are not multiples of {cube_align} and flash-attention kernels '
        'whose head dim or sequence length is not a multiple of {fa_align}, per op type on every rank.'
    )
    evidence = MisalignedShapeEvidence
    title_template = "{op_type} shapes are not {alignment_elements}-aligned ({shapes[0].input_shapes})"
    message_template = (
        "{op_type} on {ranks} in {steps} runs with input shapes {shapes[0].input_shapes}: {shapes[0].why}. It "
        "takes {time_ms:.2f} ms per step on rank {rank_w}; {gain}."
    )

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        steps = ctx.view.kept_steps
        ops = in_kept_steps(_candidate_ops(ctx, ranks), steps)
        if ops.empty:
            return []
        sel, kinds, found = _flag_kernels(ops, steps)
        if not sel:
            return []
        bad = _flagged_tasks(ops, sel, kinds, found)
        return [self._finding(ctx, op_type, g, steps) for op_type, g in bad.groupby("op_type", sort=True)]

    def _finding(self, ctx: CheckContext, op_type: str, g: pd.DataFrame, steps: dict[int, list[int]]) -> Finding:
        """One finding per op type: its worst rank (by lost time, or by kernel time without pipe ratios)."""
        estimated = bool(g["lost_ns"].notna().any())
        per_rank_loss, per_rank_time = per_rank_ms(g, "lost_ns", steps), per_rank_ms(g, "dur_ns", steps)
        rank_w, ms_w = worst_rank(per_rank_loss if estimated else per_rank_time)
        gw = g[g["rank"] == rank_w]
        shapes = _shape_rows(gw, n_steps(steps, int(rank_w)))
        st = step_list(g["step"])
        evidence = MisalignedShapeEvidence(
            alignment_elements=int(T.fa_align.value if op_type in FA_TYPES else T.cube_align.value),
            shapes=shapes[:5],
            bound_thresholds=gw["bounds"].iloc[0],
            cube_min_mib_per_step=CUBE_MIN_MIB if op_type not in FA_TYPES else None,
            kernel_ms_per_step_by_rank={r: round(v, 4) for r, v in sorted(per_rank_time.items())},
            lost_ms_per_step_by_rank=(
                {r: round(v, 4) for r, v in sorted(per_rank_loss.items())} if estimated else None
            ),
            impact_method=(
                "Σ kernel time × (1 − max(pipe ratio / bound threshold)) per step, worst rank; upper bound (time "
                "saved if the kernel became bound)" if estimated else "not estimated: no pipe ratios"
            ),
        )
        return self.finding(
            ctx, subject=str(op_type), ranks=sorted(per_rank_loss), steps=st,
            impact_ms=ms_w if estimated else None, impact_rank=rank_w, severity="low", evidence=evidence,
            words={"op_type": op_type, "time_ms": per_rank_time.get(rank_w, 0), "rank_w": rank_w,
                   "gain": _gain_text(estimated, ms_w)},
        )


def _candidate_ops(ctx: CheckContext, ranks: list[int]) -> pd.DataFrame:
    """AI Core matmul and flash-attention tasks with shapes on `ranks`, with their pipe ratios."""
    marks = placeholders(ranks)
    fa_marks = placeholders(FA_TYPES)
    return ctx.sql(
        "SELECT rank, step, coalesce(op_type, name) AS op_type, name, task_type, dur_ns, input_shapes, "
        "input_dtypes, input_formats, output_shapes, output_dtypes, aic_mac_ratio, aic_mte2_ratio, "
        f"aic_fixpipe_ratio, aiv_vec_ratio FROM device_ops WHERE rank IN ({marks}) "
        "AND input_shapes IS NOT NULL AND ((task_type IN ('AI_CORE', 'MIX_AIC') "
        f"AND lower(op_type) LIKE '%matmul%') OR op_type IN ({fa_marks}))",
        [*ranks, *FA_TYPES],
    )


def _flag_kernels(ops: pd.DataFrame, steps: dict[int, list[int]]) -> tuple[list[np.ndarray], list[str],
                                                                           list[Misalignment]]:
    """The misaligned kernels (rows with the same _KERNEL_KEY) in key order: per kernel its row positions
    in `ops` (table order), its bound kind and its misalignment. Cube kernels moving under CUBE_MIN_MIB per
    step are not judged, as the advisor judges only large ones."""
    gid = ops.groupby(list(_KERNEL_KEY), dropna=False, sort=True).ngroup().to_numpy()
    order = np.argsort(gid, kind="stable")
    starts = np.concatenate(([0], np.flatnonzero(np.diff(gid[order])) + 1))
    ends = np.append(starts[1:], order.size)
    first = order[starts]
    # one Python value per kernel (its first row) instead of indexing object arrays per kernel
    keycols = {k: ops[k].to_numpy(dtype=object)[first].tolist() for k in _KERNEL_KEY}
    # every rank runs the same kernels: the shape verdicts depend on the kernel key without its rank, so
    # they are parsed once per distinct kernel, not once per rank; the op type stays in the keys so two
    # findings never share one `axes` dict
    fa_memo: dict[tuple, Misalignment | None] = {}
    bytes_memo: dict[tuple, float] = {}
    cube_memo: dict[tuple, Misalignment | None] = {}
    steps_of: dict[int, int] = {}
    sel: list[np.ndarray] = []
    kinds: list[str] = []
    found: list[Misalignment] = []
    for gi, (rank, op_type, name, shp, dts, fmts, oshp, odts) in enumerate(zip(
            *(keycols[k] for k in _KERNEL_KEY), strict=True)):
        if op_type in FA_TYPES:
            key = (op_type, name, shp, oshp)
            if key not in fa_memo:
                fa_memo[key] = fa_misalignment(str(name), shp, oshp)
            mis = fa_memo[key]
            kind = "fa_grad" if op_type.endswith("Grad") else "fa_fwd"
        else:
            key = (shp, dts, oshp, odts)
            if key not in bytes_memo:
                bytes_memo[key] = tensor_bytes(shp, dts) + tensor_bytes(oshp, odts)
            if rank not in steps_of:
                steps_of[rank] = n_steps(steps, int(rank))
            per_step = int(ends[gi] - starts[gi]) / steps_of[rank]
            if bytes_memo[key] * per_step / 2**20 < CUBE_MIN_MIB:
                continue
            key = (op_type, shp, fmts)
            if key not in cube_memo:
                cube_memo[key] = cube_misalignment(shp, fmts)
            mis = cube_memo[key]
            kind = "cube"
        if mis is None:
            continue
        sel.append(order[starts[gi]:ends[gi]])
        kinds.append(kind)
        found.append(mis)
    return sel, kinds, found


def _flagged_tasks(ops: pd.DataFrame, sel: list[np.ndarray], kinds: list[str],
                   found: list[Misalignment]) -> pd.DataFrame:
    """The tasks of the flagged kernels with their optimization space, lost ns, reasons, axes and bounds."""
    idx = np.concatenate(sel)
    lengths = np.fromiter((len(r) for r in sel), dtype=np.int64, count=len(sel))

    def per_task(values: list) -> np.ndarray:
        """One value per flagged kernel, repeated over its tasks (the same objects, no copies)."""
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        return np.repeat(arr, lengths)

    bad = ops.iloc[idx].reset_index(drop=True)
    # the pipe headroom is per task: worked out per bound set on the flagged tasks of that kind only
    ratios = {c: ops[c].astype("float64").to_numpy()[idx]
              for c in dict.fromkeys(c for b in _BOUNDS.values() for c in b) if c in ops}
    kind_of = per_task(kinds)
    space = np.full(idx.size, np.nan)
    for kind, bounds in _BOUNDS.items():
        at = np.flatnonzero(kind_of == kind)
        if at.size:
            space[at] = optimization_space({c: v[at] for c, v in ratios.items()}, bounds)
    bad["space"] = space
    bad["lost_ns"] = bad["dur_ns"].astype("float64") * bad["space"]
    bad["reasons"] = per_task(["; ".join(m.reasons) for m in found])
    bad["dims"] = per_task([m.dims for m in found])
    bad["bounds"] = per_task([_BOUNDS[k] for k in kinds])
    return bad


def _shape_rows(gw: pd.DataFrame, n: int) -> list[MisalignedShapeRow]:
    """The worst rank's flagged shapes (`n` kept steps): input shapes, dtypes, why, axes, tasks per step."""
    shapes = []
    for (shp, reasons), gs in gw.groupby(["input_shapes", "reasons"], sort=True):
        space = gs["space"].mean()
        shapes.append(MisalignedShapeRow(
            input_shapes=str(shp).strip('"'),
            dtypes=str(gs["input_dtypes"].iloc[0]),
            why=reasons,
            axes=gs["dims"].iloc[0],
            tasks_per_step=round(len(gs) / n, 2),
            optimization_space=None if pd.isna(space) else round(float(space), 4),
        ))
    return shapes
