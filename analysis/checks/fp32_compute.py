"""fp32-compute: matmul / convolution / attention time is dominated by float32 where mixed precision applies.

Rule (stepdoctor; MindSpore perf guide case 2: a VGG16 forward of 82.45 ms dominated by
fp32 MatMul dropped to 16.89 ms with fp16; tb-profiler's "TensorCore-eligible kernels with 0 % TensorCore
use -> AMP"): per rank, over its kept steps, the share of matmul / conv / attention device time
spent in float32 kernels >= T.fp32_share_pct is an issue.

Classifying an op:
* Ascend (kernel_details / COMPUTE_TASK_INFO): the family comes from the op type or name (MatMul*,
  BatchMatMul*, GroupedMatmul, Conv*, *FlashAttention*, *AttentionScore*); the precision from the input data
  types of its operands (the first two inputs): DT_FLOAT / FLOAT / FLOAT32 / NUMBER_TYPE_FLOAT32 = fp32,
  DT_FLOAT16 / DT_BF16 / ... = half. Outputs are ignored (attention kernels write fp32 softmax statistics
  even in bf16 training).
* CUDA / ROCm (Kineto): the family from the kernel name (gemm, gemv, conv, fprop/dgrad/wgrad, fmha, flash,
  attention; cuDNN layout / batch-norm / split-K reduction helpers are not); the precision from the name:
  `tf32` / `tfloat32` and CUTLASS `s1688gemm` (fp32 operands on the m16n8k8 TF32 tensor-core shape) -> tf32
  (already tensor-core, not counted as fp32); bf16 / fp16 / f16 / h884 / s16816gemm (fp16/bf16 MMA shapes) /
  flash_fwd -> half; sgemm / scudnn / f32 / fp32 / `<float` -> fp32; dgemm / f64 -> fp64 (counted with fp32:
  full precision). A kernel the name leaves unknown takes the
  precision of the aten op that launched it (cuda_runtime correlation -> External id -> cpu_op `Input type`:
  `float` = fp32, `c10::Half` / `c10::BFloat16` = half) when record_shapes recorded it.

impact_ms = fp32 family time per step × (1 − 1 / FP32_SPEEDUP), the rank where it weighs most. FP32_SPEEDUP
= 2.0 is a deliberately conservative kernel speedup of bf16/fp16 over fp32: the measured end-to-end gain of
the guide's case 2 was 4.9x on the forward, and tensor/cube unit peaks differ by 8-16x, but memory-bound
kernels gain less. Severity: the impact rule.
"""

from __future__ import annotations

import json
import re
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from ..models import Finding
from ..thresholds import T
from ..units import NS_PER_MS
from ._common import (
    by_rank,
    by_value,
    fmt_ms,
    in_steps_mask,
    map_by_value,
    placeholders,
    rank_batches,
    ranks_and_steps,
    series_sum,
    window_counts,
    worst_share,
)
from .base import Check, CheckContext, register
from .evidence import Entry, Evidence, Record

FP32_SPEEDUP = T.fp32_speedup.value
SPEEDUP_SOURCE = ("stepdoctor conservative estimate (MindSpore perf guide case 2 measured 4.9x on an fp32 "
                  "MatMul-bound forward; tensor-core / cube peaks are 8-16x fp32)")

ASCEND_FAMILY = re.compile(r"matmul|gemm|conv|attention", re.I)
GPU_FAMILY = re.compile(r"gemm|gemv|conv|fprop|dgrad|wgrad|fmha|flash|attention|attn|matmul|hmma|scudnn", re.I)
# cuDNN / cuBLAS helpers that match the family words but are layout changes, norms or reductions
_GPU_NOT_FAMILY = re.compile(r"nchwtonhwc|nhwctonchw|bn_fw|bn_bw|batch_?norm|splitkreduce|reduce_|fbgemm|"
                             r"computeoffsets|transpose|im2col|col2im", re.I)
_GPU_TF32 = re.compile(r"tf32|tfloat32", re.I)
_GPU_HALF = re.compile(r"bf16|fp16|f16|half|bfloat|hgemm|hmma|h\d{3,5}(gemm|fprop|dgrad|wgrad)|"
                       r"s(884|16816)(gemm|fprop|dgrad|wgrad)|i\d{3,5}gemm|flash_fwd|flash_bwd|flash_attn|int8|fp8|"
                       r"e4m3|e5m2", re.I)
# CUTLASS / cuBLAS "s1688" = fp32 operands on the m16n8k8 tensor-core shape, i.e. TF32 (fp16/bf16 use m16n8k16)
_GPU_S1688 = re.compile(r"s1688(gemm|fprop|dgrad|wgrad)", re.I)
_GPU_FP64 = re.compile(r"dgemm|f64|fp64|double", re.I)
_GPU_FP32 = re.compile(r"sgemm|sgemv|scudnn|(?<![a-z])f32|fp32|float32|<float\b|\bfloat\b", re.I)
_FP32_TOKENS = {"FLOAT", "FLOAT32", "DT_FLOAT", "DT_FLOAT32", "NUMBER_TYPE_FLOAT32", "FP32", "TORCH.FLOAT32"}
_FP64_TOKENS = {"DOUBLE", "FLOAT64", "DT_DOUBLE", "NUMBER_TYPE_FLOAT64", "FP64"}
_HALF_TOKENS = {"FLOAT16", "DT_FLOAT16", "BF16", "DT_BF16", "BFLOAT16", "DT_BFLOAT16", "NUMBER_TYPE_FLOAT16",
                "NUMBER_TYPE_BFLOAT16", "FP16", "HALF", "C10::HALF", "C10::BFLOAT16"}
_TOKEN_RE = re.compile(r"[A-Za-z0-9_:.]+")


def ascend_precision(dtypes: Any) -> str:
    """fp32 | half | fp64 | other | unknown from an Ascend input dtype list ('DT_BF16;DT_BF16')."""
    if dtypes is None or (isinstance(dtypes, float) and dtypes != dtypes) or pd.isna(dtypes):
        return "unknown"
    toks = [t.strip().upper() for t in str(dtypes).split(";") if t.strip()][:2]
    if not toks:
        return "unknown"
    if any(t in _FP32_TOKENS for t in toks):
        return "fp32"
    if any(t in _FP64_TOKENS for t in toks):
        return "fp64"
    if any(t in _HALF_TOKENS for t in toks):
        return "half"
    return "other"


def gpu_precision(name: str) -> str:
    """fp32 | half | tf32 | fp64 | unknown from a GPU kernel name."""
    if _GPU_TF32.search(name):
        return "tf32"
    if _GPU_HALF.search(name):
        return "half"
    if _GPU_S1688.search(name):
        return "tf32"
    if _GPU_FP64.search(name):
        return "fp64"
    if _GPU_FP32.search(name):
        return "fp32"
    return "unknown"


def input_types_precision(types: Any) -> str:
    """Precision from a Kineto cpu_op `Input type` list (["float", "float", "Scalar"])."""
    if types is None or pd.isna(types):
        return "unknown"
    toks = {t.upper() for t in _TOKEN_RE.findall(str(types))}
    if toks & {"C10::HALF", "C10::BFLOAT16", "HALF", "BFLOAT16"}:
        return "half"
    if "FLOAT" in toks:
        return "fp32"
    if "DOUBLE" in toks:
        return "fp64"
    return "unknown"


_COLS = ["rank", "step", "name", "label", "dur_ns", "precision", "dtypes"]
_EMPTY = pd.DataFrame(columns=_COLS)


def gpu_family(name: str) -> str:
    low = name.lower()
    if re.search(r"fmha|flash|attention|attn", low):
        return "attention"
    if re.search(r"conv|cudnn|wgrad|dgrad|fprop|implicit", low):
        return "conv"
    return "matmul"


class Fp32Op(Record):
    op: str
    count_per_step: float
    ms_per_step: float


class Fp32Rank(Entry):
    weighs_by = "impact_ms_per_step"
    steps: list[int]
    fp32_share_pct: float
    fp32_ms_per_step: float
    family_ms_per_step: float
    unknown_precision_ms_per_step: float
    impact_ms_per_step: float
    ms_per_step_by_precision: dict[str, float]   # precision (fp32, half, ...) -> ms per step
    top_fp32_ops: list[Fp32Op]                   # the five longest op types / kernel families
    phases_ms: dict[str, float] | None = None    # MindSpore step phase -> mean ms, where recorded
    examples: list[str]
    dtypes: list[str]


class Fp32ComputeEvidence(Evidence):
    threshold_share_pct: float
    assumed_speedup: float = FP32_SPEEDUP
    speedup_source: str = SPEEDUP_SOURCE
    tf32_capable: bool   # TF32 needs compute capability 8.0 (the TF32 fix's `when`)
    per_rank: dict[int, Fp32Rank]
    impact_method: str = ("fp32 matmul/conv/attention time per step x (1 - 1/assumed_speedup), mean over kept steps, "
                          "the rank where it is the largest share of the step")


@register
class Fp32ComputeCheck(Check):
    id = "fp32-compute"
    dimension = "compute"
    title = "Float32 compute where mixed precision applies"
    fires_when = (
        "matmul / convolution / attention time is dominated by float32 kernels where mixed precision "
        "(fp16 / bf16) applies"
    )
    thresholds = ("fp32_share_pct", "fp32_speedup")
    frameworks = ("pytorch", "mindspore")
    vendors = ("ascend", "cuda", "rocm")
    needs_by_vendor: ClassVar[dict[str, tuple[str, ...]]] = {
        "ascend": ("dtypes",),
        "cuda": ("kernels",),
        "rocm": ("kernels",),
    }
    description = (
        'Share of matmul / conv / attention device time in float32 kernels per rank (Ascend input dtypes; GPU '
        "kernel names, else the launching aten op's input types) >= {fp32_share_pct} %. Impact: that time x (1 - "
        '1/{fp32_speedup}), a conservative {fp32_speedup}x bf16/fp16 speedup.'
    )
    evidence = Fp32ComputeEvidence
    title_template = "{worst.fp32_share_pct:.0f} % of matmul/conv/attention time runs in float32 ({subject})"
    message_template = (
        "On {ranks} ({steps}) {worst.fp32_share_pct:.1f} % of the matmul/conv/attention time is float32 (>= "
        "{threshold_share_pct:g} %): {worst.fp32_ms_per_step:.3g} ms per step on rank {worst_rank}, mostly "
        "{subject}{phase}; {fix} would save about {ms} ms per step at an assumed {assumed_speedup:g}x speedup."
    )

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        windows = ctx.view.step_windows(ranks)
        thr = T.fp32_share_pct.value
        n_windows = window_counts(windows)
        # one query per batch of ranks (a query per rank costs seconds at 1,024 ranks; one for all ranks holds
        # every rank's ops and, on GPU, DuckDB's self-join of every rank's host ops at once); between batches
        # only the evidence of the ranks that qualify is kept
        evidence: dict[int, Fp32Rank] = {}
        batches = [(self._ascend_classified, b) for b in
                   rank_batches(ctx, [r for r in ranks if ctx.vendor(r) == "ascend"], "device_ops")]
        batches += [(self._classified, b) for b in
                    rank_batches(ctx, [r for r in ranks if ctx.vendor(r) != "ascend"], "host_ops")]
        for classified, batch in batches:
            for rank, entry in self._judge(classified(ctx, batch), windows, n_windows, thr).items():
                n = max(n_windows.get(int(rank), 0), 1)
                evidence[rank] = self._rank_evidence(ctx, rank, entry, n)
        per_rank = {rank: evidence[rank] for rank in ranks if rank in evidence}
        if not per_rank:
            return []
        rank_w, ms_w = worst_share(ctx, {r: v.impact_ms_per_step for r, v in per_rank.items()})
        rk, steps_seen = ranks_and_steps(per_rank)
        e = per_rank[rank_w] if rank_w is not None else None
        subject = str(e.top_fp32_ops[0].op) if e is not None and e.top_fp32_ops else "matmul"
        ascend = ctx.vendor(rank_w) == "ascend"
        fix, pre_ampere = _fix_text(ctx, rank_w, ascend)
        step = ctx.mean_step_ms(rank_w) if rank_w is not None else None
        of_step = f" of the {step:.4g} ms step" if step else ""
        phase = next((f" (forward{' + backward' if k == 'fp_and_bp' else ''} {v:.4g} ms{of_step})"
                      for k, v in ((e.phases_ms if e else None) or {}).items() if k in ("fp", "fp_and_bp")), "")
        return [self.finding(
            ctx, subject=subject, ranks=rk, steps=steps_seen, impact_ms=ms_w, impact_rank=rank_w,
            evidence=Fp32ComputeEvidence(threshold_share_pct=thr, tf32_capable=not pre_ampere, per_rank=per_rank),
            words={"subject": subject, "phase": phase, "fix": fix, "ms": fmt_ms(ms_w or 0)})]

    def _rank_evidence(self, ctx: CheckContext, rank: int, entry: tuple, n: int) -> Fp32Rank:
        """Evidence of one judged rank (`entry` as `_judge` gives it) over its n kept steps."""
        fam, full, share, total, unknown_ns, fp32_ns = entry
        by_type = full.groupby("label")["dur_ns"].agg(["count", "sum"]).sort_values("sum", ascending=False)
        by_prec = fam.groupby("precision")["dur_ns"].sum()
        fp32_ms = fp32_ns / NS_PER_MS / n
        phases = self._phases(ctx, rank)
        return Fp32Rank(
            steps=sorted({int(s) for s in full["step"].dropna()}),
            fp32_share_pct=round(share, 2),
            fp32_ms_per_step=round(fp32_ms, 4),
            family_ms_per_step=round(total / NS_PER_MS / n, 4),
            unknown_precision_ms_per_step=round(unknown_ns / NS_PER_MS / n, 4),
            impact_ms_per_step=round(fp32_ms * (1.0 - 1.0 / FP32_SPEEDUP), 4),
            ms_per_step_by_precision={str(k): round(float(v) / NS_PER_MS / n, 4) for k, v in by_prec.items()},
            top_fp32_ops=[Fp32Op(op=str(k), count_per_step=round(int(r["count"]) / n, 2),
                                 ms_per_step=round(float(r["sum"]) / NS_PER_MS / n, 4))
                          for k, r in by_type.head(5).iterrows()],
            **({"phases_ms": phases} if phases is not None else {}),   # absent where not recorded
            examples=sorted(set(full["name"].astype(str)))[:3],
            dtypes=sorted(set(full["dtypes"].dropna().astype(str)))[:3],
        )

    @staticmethod
    def _phases(ctx: CheckContext, rank: int) -> dict[str, float] | None:
        """MindSpore step phases (fp / fp_and_bp / iteration_interval / tail), mean ms per step, when recorded."""
        if "step_phases" not in ctx.caps(rank):
            return None
        rows = ctx.profile.rows("SELECT phase, avg(dur_ns) FROM step_phases WHERE rank = ? AND phase IN ('fp', "
                                "'fp_and_bp', 'iteration_interval', 'tail') GROUP BY phase ORDER BY phase", [int(rank)])
        return {str(k): round(float(v) / NS_PER_MS, 4) for k, v in rows} if rows else None

    @staticmethod
    def _judge(ops: pd.DataFrame, windows: pd.DataFrame, n_windows: dict[int, int],
               thr: float) -> dict[int, tuple[pd.DataFrame, pd.DataFrame, float, float, float, float]]:
        """Ranks of `ops` (family ops of one or more ranks, columns _COLS) whose fp32 share reaches `thr`:
        rank -> (its family ops of known precision, the fp32 / fp64 ones, share %, family ns, unknown ns,
        fp32 ns).

        A rank with kept steps and any stepped op keeps only its ops in those steps. The sums run per rank
        over numpy slices (rows sorted by rank, stably, so each rank's rows keep their order and sum as a
        pandas sum over that rank's frame would); frames are only cut for the ranks that qualify."""
        if ops.empty:
            return {}
        rank = ops["rank"].to_numpy(dtype=np.int64)
        step = ops["step"].to_numpy()
        stepped = np.unique(rank[ops["step"].notna().to_numpy()])
        filtered = np.isin(rank, np.intersect1d(stepped, np.fromiter(n_windows, dtype=np.int64)))
        keep = ~filtered | in_steps_mask(rank, step, windows)
        pos = np.flatnonzero(keep)
        order, slices = by_rank(rank[pos])
        pos = pos[order]
        prec = ops["precision"].to_numpy(dtype=object)[pos]
        # a kernel whose precision neither its name nor its launching op tells is left out of the share
        known = prec != "unknown"
        full = known & ((prec == "fp32") | (prec == "fp64"))
        dur = ops["dur_ns"].to_numpy()[pos]
        out: dict[int, tuple[pd.DataFrame, pd.DataFrame, float, float, float, float]] = {}
        for r, i, j in slices:
            d, kn, fu = dur[i:j], known[i:j], full[i:j]
            total = float(series_sum(d[kn]))
            if total <= 0:
                continue
            fp32_ns = float(series_sum(d[fu]))
            share = 100.0 * fp32_ns / total
            if share < thr or fp32_ns <= 0:
                continue
            unknown_ns = float(series_sum(d[~kn]))
            sub = ops.iloc[pos[i:j]]
            out[r] = (sub[kn], sub[fu], share, total, unknown_ns, fp32_ns)
        return out

    @staticmethod
    def _ascend_classified(ctx: CheckContext, ranks: list[int]) -> pd.DataFrame:
        """Family ops of Ascend ranks with columns rank, step, name, label, dur_ns, precision, dtypes.

        One query for the ranks (no ORDER BY: each rank's rows keep their table order, as the query per rank
        had them); family and precision are judged once per distinct op type / name / dtype list."""
        if not ranks:
            return _EMPTY
        marks = placeholders(ranks)
        df = ctx.sql("SELECT rank, step, name, op_type, dur_ns, input_dtypes FROM compute_kernels WHERE rank IN "
                     f"({marks})", [int(r) for r in ranks])
        key = df["op_type"].fillna(df["name"]).astype(str)
        fam = (by_value(key, lambda k: ASCEND_FAMILY.search(k))
               | by_value(df["name"].astype(str), lambda n: ASCEND_FAMILY.search(n)))
        df = df[fam]
        if df.empty:
            return _EMPTY
        prec = map_by_value(df["input_dtypes"], ascend_precision)
        df = df.assign(label=df["op_type"].fillna(df["name"]).astype(str), precision=prec,
                       dtypes=df["input_dtypes"])
        return df[_COLS]

    @staticmethod
    def _classified(ctx: CheckContext, ranks: list[int]) -> pd.DataFrame:
        """Family ops of GPU ranks with columns rank, step, name, label, dur_ns, precision, dtypes.

        A kernel's input types are those of the CPU op sharing its launch's External id; where several ops
        share it, the innermost (deepest) one, ties broken by the smallest text, so the pick is deterministic."""
        cols = _COLS
        if not ranks:
            return pd.DataFrame(columns=cols)
        marks = placeholders(ranks)
        df = ctx.sql("SELECT d.rank, d.step, d.name, d.dur_ns, h.input_types AS types FROM compute_kernels d "
                     "LEFT JOIN (SELECT k.rank, k.correlation_id, "
                     "  arg_max(c.input_types, (coalesce(c.depth, 0), c.input_types)) AS input_types "
                     "  FROM kernel_launches k JOIN host_ops c"
                     "  ON c.rank = k.rank AND c.external_id = k.external_id AND c.category = 'cpu_op' "
                     "  AND c.input_types IS NOT NULL"
                     f"  WHERE k.rank IN ({marks}) GROUP BY k.rank, k.correlation_id) h "
                     "USING (rank, correlation_id) "
                     f"WHERE d.rank IN ({marks})",
                     [*map(int, ranks), *map(int, ranks)])
        names = df["name"].astype(str)
        df = df[by_value(names, lambda n: GPU_FAMILY.search(n) and not _GPU_NOT_FAMILY.search(n))]
        if df.empty:
            return pd.DataFrame(columns=cols)
        prec = map_by_value(df["name"], lambda n: gpu_precision(str(n)))
        types_prec = map_by_value(df["types"], input_types_precision)
        prec = np.where(prec != "unknown", prec, types_prec)
        df = df.assign(label=map_by_value(df["name"], lambda n: gpu_family(str(n))), precision=prec,
                       dtypes=df["types"])
        return df[cols]


def _compute_capability(ctx: CheckContext, rank: int | None) -> tuple[int, int] | None:
    """(major, minor) of the rank's GPU from the trace's deviceProperties (Kineto metadata), or None."""
    if rank is None:
        return None
    rows = ctx.profile.rows("SELECT value_json FROM metadata WHERE rank = ? AND key = 'deviceProperties'",
                            [int(rank)])
    dev = ctx.profile.rows("SELECT device_id FROM ranks WHERE rank = ?", [int(rank)])
    dev_id = dev[0][0] if dev else None
    for (v,) in rows:
        try:
            props = [p for p in json.loads(v) if isinstance(p, dict)]
        except (TypeError, ValueError):
            continue
        p = next((p for p in props if p.get("id") == dev_id), props[0] if props else None)
        if p and isinstance(p.get("computeMajor"), int):
            return int(p["computeMajor"]), int(p.get("computeMinor") or 0)
    return None


def _fix_text(ctx: CheckContext, rank: int | None, ascend: bool) -> tuple[str, bool]:
    """(the mixed-precision fix for the rank's framework and device, whether the GPU predates Ampere)."""
    pre_ampere = False
    if ctx.framework(rank) == "mindspore":
        fix = ("mixed precision (Model(..., amp_level='O2') for training, auto_mixed_precision(net, 'O2') or "
               "to_float(mstype.float16) for inference; check accuracy)")
    elif ascend:
        fix = "mixed precision (torch.autocast('npu', dtype=torch.bfloat16))"
    elif (cc := _compute_capability(ctx, rank)) is not None and cc < (8, 0):
        pre_ampere = True
        # bf16 tensor cores and TF32 arrive with Ampere (compute capability 8.0); Volta/Turing have fp16 ones
        fix = (f"fp16 mixed precision (torch.autocast('cuda', dtype=torch.float16) with torch.amp.GradScaler; "
               f"this GPU is compute capability {cc[0]}.{cc[1]}: no bf16 or TF32 before 8.0)")
    else:
        fix = ("mixed precision (torch.autocast('cuda', dtype=torch.bfloat16)), or at least TF32 "
               "(torch.backends.cuda.matmul.allow_tf32 = True)")
    return fix, pre_ampere
