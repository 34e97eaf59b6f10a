"""affinity-api: host op sequences that torch_npu replaces with one fused / NPU-affine API.

Rules (msprof-analyze 26.2.0 timeline_fusion_ops, `timeline_fusion_ops.yaml`, docs/rules.md §5), restated below
as data with the CANN / torch version each appeared in:
- aten rules: a regex over the sequence of *first-level* `aten::` / `npu::` host ops of a thread, op names
  without the `aten::` prefix joined by `-` (e.g. `add-layer_norm` -> torch_npu.npu_add_layer_norm);
  `(a|b){m,n}` elements are alternatives with a repeat count;
- optimizer rules: a host op `Optimizer.step#<Name>.step` -> torch_npu.optim.NpuFused<Name>.

First-level = not nested inside another `aten::` / `npu::` op of the same thread (an op's own aten
children are its implementation, not user code); wrappers such as ProfilerStep#N, python_function or
module events do not count as parents, so this is "depth 0 within the step" whatever the nesting depth
of the step annotation is. Matching runs per (rank, thread) over the whole timeline in start order; a match
belongs to the step of its first op. Versions: the rule set is the lineage the advisor applies by default
(CANN 8.0.0, torch 2.1.0: rule sets 6.3.RC2 -> 7.0.RC1 -> 7.0.0 -> 8.0.RC1/8.0.0); the MindSpeed rules of
8.0.RC3 need MindSpeed installed and are listed but off by default.

Every rank is checked (T.affinity_min_occurrences: one occurrence is enough, as in the advisor).
impact_ms is not estimated: what a fused API saves depends on the fused kernel, which the profile does not
contain; the host and device time of the matched ops is in the evidence. These rules run on Ascend (the
replacements are torch_npu APIs). Severity: the advisor's fixed LOW. On CUDA / ROCm ranks the check finds attention
run by scaled_dot_product_attention's unfused math backend, or written by hand, instead, with its measured kernel
time (_unfused_attention.py).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pandas as pd

from ..models import Finding
from ..thresholds import T
from ..units import NS_PER_MS
from ._affinity_rules import (  # noqa: F401  (the tests and _unfused_attention import the matcher from here)
    RULESET,
    aten_hits,
    compile_pattern,
    first_level,
    match_sequences,
    optimizer_hits,
    user_frame,
)
from ._common import by_rank, in_kept_steps, n_steps, step_list
from ._unfused_attention import ATTENTION_TEMPLATES, HandWrittenRank, MathBackendRank, unfused_attention
from .base import Check, CheckContext, register
from .evidence import Entry, Evidence


class AscendApiRank(Entry):
    """One rank's matches of an Ascend replacement API (no impact is estimated: an entry weighs by the host
    time of its matched ops)."""

    weighs_by = "matched_host_ms_per_step"
    occurrences_per_step: float
    matched_host_ms_per_step: float
    by_step: dict[str, int]  # step -> occurrences


class AffinityApiEvidence(Evidence):
    """The evidence of the three finding kinds: each sets its own fields (see AffinityRank)."""

    # one entry shape per finding kind: Ascend API; the GPU SDPA math backend; attention written by hand
    per_rank: dict[int, AscendApiRank] | dict[int, MathBackendRank] | dict[int, HandWrittenRank]
    # Ascend replacement API
    patterns: list[str] | None = None
    matched_sequences: dict[str, int] | None = None  # op sequence -> occurrences (the three commonest)
    since_cann: str | None = None
    torch_versions: list[str] | None = None
    ruleset: str | None = None
    min_occurrences: int | None = None
    code_locations: list[str] | None = None
    with_stack: bool | None = None
    # CUDA / ROCm (_unfused_attention.py): "math_backend" with `op`, or "hand_written" with `pattern`
    attention: str | None = None
    op: str | None = None
    pattern: str | None = None
    impact_method: str


def _per_rank(g: pd.DataFrame, steps: dict[int, list[int]]) -> dict[int, AscendApiRank]:
    """Rank -> occurrences and matched host time per step and occurrences by step, for one API's hits.

    numpy over sorted ranks rather than a pandas groupby per rank, whose fixed cost dominated on many-rank
    profiles; sums are taken over each rank's rows in their order, as `Series.sum` does, so the rounded
    values do not move."""
    rank = g["rank"].to_numpy(dtype="int64")
    host = g["host_ns"].to_numpy(dtype="float64")
    step = pd.to_numeric(g["step"], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    order, slices = by_rank(rank)
    out: dict[int, AscendApiRank] = {}
    for r, a, b in slices:
        idx = order[a:b]
        k = n_steps(steps, r)
        st = step[idx]
        # groupby("step") leaves out rows without a step
        vals, counts = np.unique(st[~np.isnan(st)], return_counts=True)
        out[r] = AscendApiRank(
            occurrences_per_step=round((b - a) / k, 2),
            matched_host_ms_per_step=round(float(np.nansum(host[idx])) / NS_PER_MS / k, 4),
            by_step={str(int(s)): int(n) for s, n in zip(vals.tolist(), counts.tolist(), strict=True)},
        )
    return out


@register
class AffinityApiCheck(Check):
    id = "affinity-api"
    dimension = "compute"
    title = "Fusible op sequence (affinity API)"
    fires_when = "an op sequence has a fused / vendor-optimized replacement; `subject` = the replacement API"
    thresholds = ("affinity_min_occurrences",)
    subject_keyed = True
    needs = ("framework_ops",)
    # CUDA / ROCm: the math SDPA backend's kernels, through the launch links (_unfused_attention.py)
    needs_by_vendor: ClassVar[dict[str, tuple[str, ...]]] = {
        "cuda": ("steps", "kernels", "correlation"), "rocm": ("steps", "kernels", "correlation")}
    vendors = ("ascend", "cuda", "rocm")
    description = (
        "First-level aten op sequences and optimizers that torch_npu replaces with a fused API "
        "(msprof-analyze timeline_fusion_ops rules, CANN 8.0.0 set), on every rank; subject = the API. "
        "CUDA / ROCm: scaled_dot_product_attention run by the unfused math backend, or attention written by hand "
        "(matmul-softmax-matmul); impact = the kernels' time."
    )
    evidence = AffinityApiEvidence
    # the Ascend replacement API here; the GPU's SDPA math backend and attention by hand in _unfused_attention.py.
    # `occurrences` counts on the first rank; `where` names the calling code, `locate` asks for it (LOCATE)
    templates: ClassVar[dict[str, tuple[str, str]]] = {
        "ascend_api": (
            "use {api} ({sequence}, {occurrences:g} per step)",
            "{Ranks} {run} `{sequence}`{where} {occurrences:g} times per step in {steps}; {api} (CANN >= "
            "{since_cann}) does the same in one NPU-affine call.{locate}",
        ),
        **ATTENTION_TEMPLATES,
    }

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        gpu = [r for r in ranks if ctx.vendor(r) != "ascend"]
        ranks = [r for r in ranks if ctx.vendor(r) == "ascend"]
        out = unfused_attention(self, ctx, gpu)
        return out + self._ascend(ctx, ranks) if ranks else out

    def _ascend(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        marks = ",".join("?" * len(ranks))
        host = ctx.sql(
            "SELECT rank, step, tid, name, start_ns, dur_ns, call_stack FROM host_ops "
            f"WHERE rank IN ({marks}) AND (name LIKE 'aten::%' OR name LIKE 'npu::%' "
            "OR name LIKE 'Optimizer.step#%') ORDER BY rank, tid, start_ns, dur_ns DESC",
            ranks,
        )
        if host.empty:
            return []
        steps = ctx.view.kept_steps
        is_opt = host["name"].str.startswith("Optimizer.step#")
        hits = optimizer_hits(host[is_opt]) + aten_hits(host[~is_opt])
        if not hits:
            return []
        df = in_kept_steps(pd.DataFrame(hits), steps)
        if df.empty:
            return []
        min_n = T.affinity_min_occurrences.value
        with_stack = bool(df["stack"].notna().any())
        return [self._api_finding(ctx, str(api), g, steps, with_stack)
                for api, g in df.groupby("api", sort=True) if len(g) >= min_n]

    def _api_finding(
        self, ctx: CheckContext, api: str, g: pd.DataFrame, steps: dict[int, list[int]], with_stack: bool
    ) -> Finding:
        """One finding for one replacement API from its hits `g` (rows of `aten_hits` / `optimizer_hits`)."""
        rk = sorted(int(r) for r in g["rank"].unique())
        st = step_list(g["step"])
        per_rank = _per_rank(g, steps)
        frames = sorted({f for f in (user_frame(s) for s in g["stack"]) if f})[:5]
        seqs = g["sequence"].value_counts().head(3)
        first = g.iloc[0]
        return self.finding(
            ctx,
            shape="ascend_api",
            subject=api,
            ranks=rk,
            steps=st,
            impact_ms=None,
            severity="low",
            evidence=AffinityApiEvidence(
                patterns=sorted(set(g["pattern"])),
                matched_sequences={str(k): int(v) for k, v in seqs.items()},
                since_cann=first["since"],
                torch_versions=list(first["torch"]),
                ruleset=RULESET,
                min_occurrences=T.affinity_min_occurrences.value,
                per_rank=per_rank,
                code_locations=frames,
                with_stack=with_stack,
                impact_method="not estimated: the saving depends on the fused kernel",
            ),
            words={"api": api, "sequence": seqs.index[0], "occurrences": per_rank[rk[0]].occurrences_per_step,
                   "run": "runs" if len(rk) == 1 else "run", "where": f" at {frames[0]}" if frames else "",
                   "locate": "" if with_stack else LOCATE},
        )


# a profile recorded without call stacks cannot name the code that runs the sequence
LOCATE = " Profile with with_stack=True to locate the calling code."
