"""memory-ops: the allocator mallocs / frees device memory inside training steps, on every rank.

Rule (msprof-analyze 26.2.0 memory analyzer, memory.yaml): per allocator API, the total
time of its host calls inside a step >= T.memory_api_total_ms (10 ms) is an issue. The advisor sums over the
whole profile; here it is per step of every rank, one finding per API.
* Ascend: `AscendCL@aclMallocMemInner` (the caching allocator grows: fragmentation or empty_cache ->
  `PYTORCH_NPU_ALLOC_CONF=expandable_segments:True`), `AscendCL@aclrtFree` / `AscendCL@aclrtFreePhysical`
  (memory handed back: HBM nearly full, or torch.npu.empty_cache() in the loop).
* CUDA / ROCm (stepdoctor, same threshold and meaning): `cudaMalloc` / `cudaFree` (`hipMalloc` / `hipFree`,
  driver `cuMemAlloc` / `cuMemFree`) runtime calls inside steps. In steady state PyTorch's caching allocator
  never calls them; cudaFree also synchronizes the device.

impact_ms = Σ time of that API per step (mean over the rank's kept steps), the rank where it weighs most;
the host is blocked for that time. On GPU a step also fires when one API takes >= T.memory_api_gpu_step_pct
of the step (steady-state PyTorch never calls the allocator). Severity: the advisor's time-ratio rule (API
time / step: >= 5 % high, >= 3 % medium), i.e. the impact rule. The device idle time during the calls is in
the evidence.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from ..models import Finding
from ..thresholds import T
from ..timeline.intervals import merge
from ..units import NS_PER_MS
from ._common import (
    by_value,
    fmt_ms,
    in_steps_mask,
    placeholders,
    rank_batches,
    ranks_and_steps,
    window_counts,
    worst_share,
)
from .base import Check, CheckContext, register
from .evidence import Entry, Evidence, Record

if TYPE_CHECKING:
    import pandas as pd

API_RE = re.compile(r"^(AscendCL@(aclMallocMemInner|aclrtFreePhysical|aclrtFree)|cudaMalloc|cudaFree|"
                    r"hipMalloc|hipFree|cuMemAlloc(_v2)?|cuMemFree(_v2)?)$")
_ADVICE = {
    "malloc": "the caching allocator keeps growing: set expandable_segments:True in PYTORCH_NPU_ALLOC_CONF / "
              "PYTORCH_CUDA_ALLOC_CONF and remove empty_cache() calls from the loop",
    "free": "memory is returned to the device inside steps: check device memory headroom (npu-smi / "
            "nvidia-smi), reduce the (micro)batch, and remove empty_cache() calls from the loop",
}


class AllocatorStep(Record):
    calls: int
    ms: float


class AllocatorRank(Entry):
    weighs_by = "ms_per_step"
    steps: list[int]
    calls_per_affected_step: float
    ms_per_affected_step: float
    steps_analysed: int
    ms_per_step: float
    mean_call_ms: float
    device_idle_during_calls_ms_per_step: float | None   # None without device data
    by_step: dict[str, AllocatorStep]                   # every step with a call, fired or not


class MemoryOpsEvidence(Evidence):
    threshold_ms_per_step: float
    threshold_gpu_step_pct: float
    per_rank: dict[int, AllocatorRank]
    advice: str
    rule: str = "msprof-analyze memory analyzer (per-API total), time-ratio priority"
    impact_method: str   # names the API


def _kind(api: str) -> str:
    return "malloc" if "alloc" in api.lower() else "free"


Group = tuple[int, np.ndarray, np.ndarray, np.ndarray, np.ndarray]


def _groups(names: np.ndarray, rank: np.ndarray, step: np.ndarray,
            dur: np.ndarray) -> list[tuple[str, list[Group]]]:
    """Per API (sorted), per rank (ascending): (rank, its row indices in their original order, its steps
    ascending, calls per step, Σ dur_ns per step). One sort of all rows instead of a groupby per API and
    rank, whose per-rank pandas overhead would outweigh the data on many ranks."""
    api, ac = np.unique(names, return_inverse=True)
    rk, rc = np.unique(rank, return_inverse=True)
    key = ac.astype(np.int64) * rk.size + rc
    order = np.argsort(key, kind="stable")
    ks = key[order]
    first = np.flatnonzero(np.concatenate(([True], ks[1:] != ks[:-1])))
    ends = np.append(first[1:], ks.size)
    o3 = np.lexsort((step, key))
    k3, s3 = key[o3], step[o3]
    run0 = np.flatnonzero(np.concatenate(([True], (k3[1:] != k3[:-1]) | (s3[1:] != s3[:-1]))))
    cnt = np.diff(np.append(run0, k3.size))
    tot = np.add.reduceat(dur[o3], run0)
    run_key, run_step = k3[run0], s3[run0]
    gkeys = ks[first]
    r0 = np.searchsorted(run_key, gkeys, side="left")
    r1 = np.searchsorted(run_key, gkeys, side="right")
    out: list[tuple[str, list[Group]]] = []
    for g, kk in enumerate(gkeys.tolist()):
        a, r = divmod(kk, rk.size)
        if not out or out[-1][0] != api[a]:
            out.append((api[a], []))
        i, j = r0[g], r1[g]
        out[-1][1].append((int(rk[r]), order[first[g]:ends[g]], run_step[i:j], cnt[i:j], tot[i:j]))
    return out


def _api_calls(ctx: CheckContext, ranks: list[int], windows: pd.DataFrame) -> tuple[np.ndarray, ...]:
    """(name, rank, step, start_ns, dur_ns) of the allocator calls of `ranks` inside their kept steps, in the
    table's row order: one query for the ranks, whose runtime / CANN calls (every kernel launch among them)
    are dropped here, so a check over many ranks holds only the allocator calls of all but one batch."""
    a = ctx.profile.arrays(f"SELECT rank, step, name, start_ns, dur_ns FROM host_api_calls WHERE rank IN "
                           f"({placeholders(ranks)}) AND (name LIKE 'AscendCL@acl%' OR name LIKE 'cu%' OR "
                           "name LIKE 'hip%')", ranks)
    names = np.asarray(a["name"], dtype=object)
    idx = np.flatnonzero(by_value(names, lambda n: API_RE.match(str(n)))) if names.size else np.empty(0, np.int64)
    rank = np.asarray(np.ma.getdata(a["rank"]), dtype=np.int64)[idx]
    kept = in_steps_mask(rank, a["step"][idx], windows) if idx.size else np.zeros(0, dtype=bool)
    idx, rank = idx[kept], rank[kept]
    return (names[idx], rank, *(np.asarray(np.ma.getdata(a[k]), dtype=np.int64)[idx]
                                for k in ("step", "start_ns", "dur_ns")))


@register
class MemoryOpsCheck(Check):
    id = "memory-ops"
    dimension = "free"
    title = "Allocator calls inside steps"
    fires_when = "the allocator frees / mallocs device memory inside steps"
    thresholds = ("memory_api_gpu_step_pct", "memory_api_total_ms")
    vendors = ("ascend", "cuda", "rocm")
    needs_by_vendor: ClassVar[dict[str, tuple[str, ...]]] = {
        "ascend": ("cann_api",),
        "cuda": ("kernels",),
        "rocm": ("kernels",),
    }
    description = (
        'Total time per step of each allocator API (aclMallocMemInner, aclrtFree, aclrtFreePhysical; cudaMalloc /'
        ' cudaFree) on every rank; >= {memory_api_total_ms} ms per step is an issue (msprof-analyze memory '
        'analyzer), on GPU also >= {memory_api_gpu_step_pct} % of the step (steady-state PyTorch never calls the '
        'allocator). Impact: that time per step.'
    )
    evidence = MemoryOpsEvidence
    title_template = "{short} inside steps ({worst.calls_per_affected_step:g} calls, {affected_ms} ms per step)"
    message_template = (
        "On {ranks} ({steps}) {short} is called {worst.calls_per_affected_step:g} times per step for "
        "{affected_ms} ms per step on rank {worst_rank} (threshold {threshold_ms_per_step:g} ms, mean call "
        "{worst.mean_call_ms:.3g} ms): {advice}."
    )

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        windows = ctx.view.step_windows(ranks)
        calls = [_api_calls(ctx, batch, windows) for batch in rank_batches(ctx, ranks, "host_ops")]
        if not calls:
            return []
        names, rank, step, start, dur = (np.concatenate([c[k] for c in calls]) for k in range(5))
        if names.size == 0:
            return []
        thr_ms = T.memory_api_total_ms.value
        thr_pct = T.memory_api_gpu_step_pct.value
        steps_of = window_counts(windows)
        step_ms = ctx.view.step_ms
        out: list[Finding] = []
        for api, groups in _groups(names, rank, step, dur):
            per_rank: dict[int, AllocatorRank] = {}
            for r, rows, st, cnt, tot in groups:
                hit = tot / NS_PER_MS >= thr_ms
                if ctx.vendor(r) != "ascend":
                    # GPU: any allocator call in steady state is churn (empty_cache, fragmentation), so a
                    # share of the step counts too, not only the advisor's absolute total
                    ms = np.array([step_ms.get((r, int(x))) or np.inf for x in st.tolist()])
                    hit |= 100.0 * tot / NS_PER_MS / ms >= thr_pct
                if not hit.any():
                    continue
                fired = st[hit].tolist()
                n = max(steps_of.get(r, 0), 1)
                # durations are integer ns: every sum and mean below is exact, so it equals pandas' in any order
                d = dur[rows]
                s = start[rows]
                ms, me = merge(s, s + d)
                timeline = ctx.view.device_timeline(r)
                idle = float(timeline.idle(ms, me).sum()) if not timeline.empty else None
                per_rank[r] = AllocatorRank(
                    steps=fired,
                    calls_per_affected_step=round(float(cnt[hit].sum()) / len(fired), 2),
                    ms_per_affected_step=round(float(tot[hit].sum()) / len(fired) / NS_PER_MS, 4),
                    steps_analysed=n,
                    ms_per_step=round(float(d.sum()) / NS_PER_MS / n, 4),
                    mean_call_ms=round(float(d.sum()) / d.size / NS_PER_MS, 4),
                    device_idle_during_calls_ms_per_step=None if idle is None else round(idle / NS_PER_MS / n, 4),
                    by_step={str(k): AllocatorStep(calls=c, ms=round(float(v) / NS_PER_MS, 4))
                             for k, c, v in zip(st.tolist(), cnt.tolist(), tot.tolist(), strict=True)},
                )
            if not per_rank:
                continue
            out.append(self._finding(ctx, str(api), per_rank, thr_ms, thr_pct))
        return out

    def _finding(self, ctx: CheckContext, api: str, per_rank: dict[int, AllocatorRank], thr_ms: float,
                 thr_pct: float) -> Finding:
        rank_w, ms_w = worst_share(ctx, {r: v.ms_per_step for r, v in per_rank.items()})
        rk, steps_seen = ranks_and_steps(per_rank)
        e = per_rank[rank_w] if rank_w is not None else None
        short = str(api).split("@")[-1]
        advice = _ADVICE[_kind(str(api))]
        return self.finding(
            ctx, subject=str(api), ranks=rk, steps=steps_seen, impact_ms=ms_w, impact_rank=rank_w,
            evidence=MemoryOpsEvidence(
                threshold_ms_per_step=thr_ms, threshold_gpu_step_pct=thr_pct, per_rank=per_rank, advice=advice,
                impact_method=f"Σ {short} time per step, mean over the rank's kept steps, the rank where it is the "
                              "largest share of the step"),
            words={"short": short, "affected_ms": fmt_ms(e.ms_per_affected_step if e else 0)})
