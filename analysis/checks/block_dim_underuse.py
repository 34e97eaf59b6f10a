"""block-dim-underuse: kernels whose block dim leaves AI cores idle, per op type, on every rank.

Rule (msprof-analyze 26.2.0 block_dim_analysis): an AI Core task is an issue when its block
dim (kernel_details `Block Dim`, or `Block Num` in newer torch_npu: the reader maps both) is not a multiple of
the core count of the device (info.json `ai_core_num` / `aiv_num`). A block dim that is not a multiple
leaves cores idle in the last wave: 20 blocks on 24 cores use 20/24 of the device for the whole kernel.

Core count per task type: AI_CORE and MIX_AIC tasks count cube cores (`ai_core_num`), AI_VECTOR_CORE and
MIX_AIV tasks count vector cores (`aiv_num`). A mixed task is also fine when its mix block dim is a multiple
of the other core kind. (The advisor compares MIX_AIC with `aiv_num`, which flags a flash attention kernel
that uses all 24 cube cores; here a MIX_AIC block dim counts cube cores.)

Algorithm, per rank (every rank, unlike the advisor's one selected rank), kept steps only:
1. unused share of a task = 1 − b / (ceil(b / c) · c) for block dim b on c cores (idle share of the waves);
2. per op type: Σ task time × unused share per step = impact_ms, an upper bound (it assumes the kernel
   would scale perfectly to the idle cores);
3. one finding per op type (subject), worst rank's impact, the top 10 op types by impact (the advisor lists
   its top 10); the rest are counted in a context note.

One query serves all ranks; the rule runs on whole columns and the per (op type, rank) sums come from one
stable sort by op type and rank, so the cost does not grow by a Python pass per row or a pandas filter per
(op type, rank). Each sum still adds a rank's rows in query order, so the floats match the pandas version's.

Severity: the advisor's fixed LOW.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..models import Finding
from ..units import NS_PER_MS
from ._common import (
    by_value,
    in_kept_steps,
    map_by_value,
    n_steps,
    placeholders,
    series_sum,
    step_list,
    worst_rank,
)
from .base import Check, CheckContext, register
from .evidence import Evidence, Record

MAX_OP_TYPES = 10  # the advisor reports the top 10 op types ("Top-10 operator of task duration")
_CUBE_TYPES = ("AI_CORE", "MIX_AIC")
_VECTOR_TYPES = ("AI_VECTOR_CORE", "MIX_AIV")


def unused_share(block_dim: int, cores: int) -> float:
    """Idle share of the cores over the waves a kernel of `block_dim` blocks needs on `cores` cores."""
    if block_dim <= 0 or cores <= 0:
        return 0.0
    waves = math.ceil(block_dim / cores)
    return 1.0 - block_dim / (waves * cores)


def _cores(task_type: str, ai_core: int | None, aiv: int | None) -> tuple[int | None, int | None]:
    """(cores the block dim counts, cores the mix block dim counts) for a task type."""
    if task_type in _CUBE_TYPES:
        return ai_core, aiv
    return (aiv or ai_core), ai_core


class BlockDims(Record):
    task_type: str
    block_dim: int
    cores: int
    tasks: int
    idle_share: float


class BlockDimEvidence(Evidence):
    primary = "lost_ms_per_step_by_rank"
    rule: str = "block_dim % core_count != 0 (msprof-analyze block_dim_analysis)"
    task_type: str
    core_count: int
    block_dims: list[BlockDims]
    tasks_per_step: float
    kernel_ms_per_step: float
    lost_ms_per_step_by_rank: dict[int, float]
    impact_method: str = ("Σ kernel time × (1 − block_dim / (waves × cores)) per step, worst rank; upper bound "
                          "(assumes the kernel scales to the idle cores)")


@register
class BlockDimCheck(Check):
    id = "block-dim-underuse"
    dimension = "compute"
    title = "Kernels use too few cores"
    fires_when = "kernels use fewer cores than the device has"
    needs = ("kernel_details", "block_dim", "core_counts")
    vendors = ("ascend",)
    description = (
        "AI Core kernels whose block dim is not a multiple of the device's AI core / vector core count "
        "(info.json), per op type on every rank; impact = kernel time × idle core share."
    )
    evidence = BlockDimEvidence
    title_template = "{op_type} uses {top_dim}/{core_count} {kind} ({share:.0%} idle)"
    message_template = (
        "{op_type} runs with block dim {top_dim} on {core_count} {kind} on {ranks} in {steps}: {share:.0%} of the "
        "cores idle during {time_ms:.2f} ms of kernel time per step on rank {worst_rank} (up to {ms:.2f} ms per "
        "step). Tune the tiling (AOE op tuning) so the block dim is a multiple of the core count."
    )

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        marks = placeholders(ranks)
        info = ctx.sql(f"SELECT rank, ai_core_num, aiv_num FROM ranks WHERE rank IN ({marks})", ranks)
        cores = {int(r.rank): (_int(r.ai_core_num), _int(r.aiv_num)) for r in info.itertuples(index=False)}
        types = (*_CUBE_TYPES, *_VECTOR_TYPES)
        ops = ctx.sql(
            "SELECT rank, step, coalesce(op_type, name) AS op_type, task_type, block_dim, mix_block_dim, "
            "count(*) AS n, sum(dur_ns) AS dur_ns FROM device_ops "
            f"WHERE rank IN ({marks}) AND task_type IN ({placeholders(types)}) AND block_dim > 0 GROUP BY ALL",
            [*ranks, *types],
        )
        steps = ctx.view.kept_steps
        ops = in_kept_steps(ops, steps)
        if ops.empty:
            return []
        bad = _bad_rows(ops, cores)
        if bad is None:
            return []
        results = _worst_op_types(
            ctx, bad, steps, MAX_OP_TYPES,
            "block-dim-underuse: {more} more op types with a block dim that is not a multiple of the core "
            "count are not listed (top {limit} shown)")
        return [self._op_finding(ctx, bad, steps, r) for r in results]

    def _op_finding(self, ctx: CheckContext, bad: _Bad, steps: dict[int, list[int]], result: tuple) -> Finding:
        """The finding of one op type: `result` is one entry of `_worst_op_types`."""
        op_type, op_rows, per_rank_ms, (rank_w, ms_w) = result
        assert rank_w is not None  # every op type has rows, so a worst rank
        gw = op_rows.of_rank(rank_w)
        k = n_steps(steps, int(rank_w))
        dims = _dims(bad, gw)
        top_type, top_dim, top_cores, _ = dims[0]
        kind = "AI cores" if top_type in _CUBE_TYPES else "vector cores"
        st = step_list(bad.step[op_rows.rows])
        time_ms = float(series_sum(bad.dur_ns[gw])) / NS_PER_MS / k
        return self.finding(
            ctx, subject=str(op_type), ranks=sorted(per_rank_ms), steps=st, impact_ms=ms_w, impact_rank=rank_w,
            severity="low",
            evidence=BlockDimEvidence(
                task_type=top_type,
                core_count=top_cores,
                block_dims=[BlockDims(task_type=t, block_dim=b, cores=c, tasks=n,
                                      idle_share=round(unused_share(b, c), 4)) for t, b, c, n in dims],
                tasks_per_step=round(float(bad.n[gw].sum()) / k, 2),
                kernel_ms_per_step=round(time_ms, 4),
                lost_ms_per_step_by_rank={r: round(v, 4) for r, v in sorted(per_rank_ms.items())},
            ),
            words={"op_type": op_type, "top_dim": top_dim, "kind": kind, "share": unused_share(top_dim, top_cores),
                   "time_ms": time_ms, "ms": ms_w},
        )


def _int(v: object) -> int | None:
    try:
        f = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
    return None if f != f else int(f)


def _ints(values: Any) -> tuple[np.ndarray, np.ndarray]:
    """(int64 values, known) of a column, as `_int` reads each value (0 where unknown)."""
    a = values.to_numpy() if isinstance(values, pd.Series) else np.asarray(values)
    if a.dtype.kind in "iub":
        return a.astype(np.int64), np.ones(a.size, dtype=bool)
    if a.dtype.kind == "f":
        known = ~np.isnan(a)
        return np.where(known, a, 0).astype(np.int64), known
    got = [_int(v) for v in a]
    return (np.fromiter((0 if v is None else v for v in got), dtype=np.int64, count=a.size),
            np.fromiter((v is not None for v in got), dtype=bool, count=a.size))


@dataclass
class _Bad:
    """The task rows with a block dim that is not a multiple of their core count, in query order."""

    rank: np.ndarray
    step: np.ndarray
    op_type: np.ndarray
    task_type: np.ndarray
    block_dim: np.ndarray
    cores: np.ndarray
    n: np.ndarray
    dur_ns: np.ndarray
    lost_ns: np.ndarray


def _bad_rows(ops: pd.DataFrame, cores: dict[int, tuple[int | None, int | None]]) -> _Bad | None:
    """The rows of `ops` that leave cores idle, or None. The per-row rule of `_cores` and the mix exemption,
    as whole-column operations: a Python pass over the rows cost most of the check on many ranks."""
    rank = ops["rank"].to_numpy().astype(np.int64)
    task = map_by_value(ops["task_type"].to_numpy(dtype=object), str)
    b, _ = _ints(ops["block_dim"])
    mix, mix_known = _ints(ops["mix_block_dim"])
    uniq, inv = np.unique(rank, return_inverse=True)
    per_rank = [cores.get(int(r), (None, None)) for r in uniq]
    inv = inv.reshape(-1)
    ai = np.array([0 if a is None else a for a, _ in per_rank], dtype=np.int64)[inv]
    ai_ok = np.array([a is not None for a, _ in per_rank], dtype=bool)[inv]
    aiv = np.array([0 if v is None else v for _, v in per_rank], dtype=np.int64)[inv]
    aiv_ok = np.array([v is not None for _, v in per_rank], dtype=bool)[inv]
    cube = by_value(task, lambda t: t in _CUBE_TYPES)
    aiv_set = aiv_ok & (aiv != 0)   # `aiv or ai_core`: a zero or unknown vector count falls back
    c = np.where(cube | ~aiv_set, ai, aiv)
    c_ok = np.where(cube | ~aiv_set, ai_ok, True) & (c != 0)
    c_mix = np.where(cube, aiv, ai)
    c_mix_ok = np.where(cube, aiv_ok, ai_ok) & (c_mix != 0)
    keep = c_ok & (b % np.where(c_ok, c, 1) != 0)
    is_mix = by_value(task, lambda t: t.startswith("MIX"))
    keep &= ~(is_mix & mix_known & (mix != 0) & c_mix_ok & (mix % np.where(c_mix_ok, c_mix, 1) == 0))
    if not keep.any():
        return None
    b, c = b[keep], c[keep]
    pairs, pair_of = np.unique(np.stack([b, c], axis=1), axis=0, return_inverse=True)
    share = np.array([unused_share(int(x), int(y)) for x, y in pairs.tolist()], dtype=np.float64)
    dur = ops["dur_ns"].to_numpy(dtype=np.float64, na_value=np.nan)[keep]
    return _Bad(
        rank=rank[keep],
        step=ops["step"].to_numpy()[keep],
        op_type=map_by_value(ops["op_type"].to_numpy(dtype=object)[keep], str),
        task_type=task[keep],
        block_dim=b,
        cores=c,
        n=ops["n"].to_numpy().astype(np.int64)[keep],
        dur_ns=dur,
        lost_ns=dur * share[pair_of.reshape(-1)],
    )


@dataclass
class _OpRows:
    """One op type's rows of a `_Bad` (indices in query order) and where each rank's run starts in the
    (op type, rank)-sorted order."""

    rows: np.ndarray
    sorted_rows: np.ndarray
    rank_runs: dict[int, tuple[int, int]]

    def of_rank(self, rank: int) -> np.ndarray:
        """Indices of the rank's rows, in query order (the sort is stable)."""
        i, j = self.rank_runs[int(rank)]
        return self.sorted_rows[i:j]


def _run_sums(values: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """series_sum of values[start:end] for each run, bit for bit. numpy sums fewer than 8 values left to
    right (its pairwise summation starts at 8), so short runs are folded in a few whole-array steps and only
    longer ones are summed one by one."""
    v = np.where(np.isnan(values), 0.0, values)
    lens = ends - starts
    out = v[starts].copy()
    for p in range(1, 7):
        more = lens > p
        if not more.any():
            break
        out[more] += v[starts[more] + p]
    for i in np.flatnonzero(lens >= 8):
        out[i] = series_sum(v[starts[i]:ends[i]])
    return out


def _worst_op_types(ctx: CheckContext, bad: _Bad, steps: dict[int, list[int]], limit: int, note: str
                    ) -> list[tuple[str, _OpRows, dict[int, float], tuple[int | None, float | None]]]:
    """_common.worst_op_types on `_Bad` columns: one stable sort by (op type, rank) and sums over the runs
    instead of a frame per op type and a mask per (op type, rank)."""
    codes, uniques = pd.factorize(bad.op_type)
    names = sorted(uniques.tolist())          # groupby(sort=True) order: plain string comparison
    pos = {name: i for i, name in enumerate(names)}
    code = np.array([pos[u] for u in uniques.tolist()], dtype=np.int64)[codes]
    order = np.lexsort((bad.rank, code))
    sc, sr = code[order], bad.rank[order]
    cut = np.flatnonzero((sc[1:] != sc[:-1]) | (sr[1:] != sr[:-1])) + 1
    starts = np.concatenate(([0], cut))
    ends = np.concatenate((cut, [sc.size]))
    run_rank = sr[starts]
    rank_ids, rank_of_run = np.unique(run_rank, return_inverse=True)
    k = np.array([n_steps(steps, r) for r in rank_ids.tolist()], dtype=np.float64)[rank_of_run.reshape(-1)]
    ms = (_run_sums(bad.lost_ns[order], starts, ends) / NS_PER_MS / k).tolist()
    op_cut = np.flatnonzero(sc[starts][1:] != sc[starts][:-1]) + 1
    op_first = np.concatenate(([0], op_cut)).tolist()
    op_end = np.concatenate((op_cut, [starts.size])).tolist()
    ranks, first, end = run_rank.tolist(), starts.tolist(), ends.tolist()
    results = []
    for o, (i, j) in enumerate(zip(op_first, op_end, strict=True)):
        by_rank = dict(zip(ranks[i:j], ms[i:j], strict=True))
        results.append((o, by_rank, worst_rank(by_rank)))
    results.sort(key=lambda x: (-(x[2][1] or 0.0), names[x[0]]))
    if len(results) > limit:
        ctx.notes.append(note.format(more=len(results) - limit, limit=limit))
    out = []
    for o, by_rank, worst in results[:limit]:
        i, j = op_first[o], op_end[o]
        runs = {r: (a, b) for r, a, b in zip(ranks[i:j], first[i:j], end[i:j], strict=True)}
        op = _OpRows(rows=np.flatnonzero(code == o), sorted_rows=order, rank_runs=runs)
        out.append((str(names[o]), op, by_rank, worst))
    return out


def _dims(bad: _Bad, rows: np.ndarray) -> list[tuple[str, int, int, int]]:
    """(task type, block dim, cores, tasks) of `rows` by the first three, most tasks first: the order of
    the groupby sum sorted by tasks (pandas' descending quicksort) that this replaces."""
    tasks: dict[tuple[str, int, int], int] = {}
    for t, b, c, n in zip(bad.task_type[rows].tolist(), bad.block_dim[rows].tolist(),
                          bad.cores[rows].tolist(), bad.n[rows].tolist(), strict=True):
        tasks[(t, b, c)] = tasks.get((t, b, c), 0) + n
    keys = sorted(tasks)
    n = np.array([tasks[key] for key in keys], dtype=np.int64)
    idx = np.arange(n.size)[::-1][n[::-1].argsort(kind="quicksort")][::-1]
    return [(*keys[i], tasks[keys[i]]) for i in idx.tolist()]

