"""exposed-comm-tail: gradient communication after the end of backward is not overlapped, on every rank.

Rule (stepdoctor; MindSpore perf guide case 3: "tail 6.15 ms of AllReduce after
backward", fixed by splitting the fusion into two buckets; DDP's bucketed overlap): per (rank, step), the
communication that runs after the last compute op preceding the step's final block of collectives, and that
no compute hides, delays the step by up to its length. It is an issue when that delay is
>= T.exposed_tail_pct of the step.

Only gradient collectives count (AllReduce, ReduceScatter, AllGather, Reduce): p2p sends and all-to-all are
not bucketed gradients and bucket splitting does not help them.

Algorithm, per rank and kept step, inside the step's device window:
1. the final communication block = the last communication op and every earlier one with no compute op
   starting between it and the block (the gradient AllReduces issued after backward, back to back);
2. backward end B = the latest end of a compute op that starts before the block;
3. tail = |communication ∩ [B, block end]| − the part of it overlapped by compute (exposed tail);
4. idle after = device idle from the block end until the next device op (or the window end). If the device
   then sits idle, what follows was waiting for the host, not for the collectives, and overlapping them
   would not have moved it: effective tail = max(0, tail − idle after);
5. critical path: the collectives end together on every rank of their group, so the step is paced by the
   rank that reaches them last, whose tail is the shortest; every rank's effective tail is capped by the
   smallest one of its step and group. On the other ranks the rest of the "tail" is waiting for that rank
   (a slow rank, which the slow-rank check reports and buckets do not fix).
MindSpore profiles without a device timeline of collectives (old `profiler/` folder, CANN step trace) give the
tail phase (`step_phases` tail = Iteration Refresh / bp end -> iteration end); it also holds the optimizer
update, so the charged tail is min(tail, the step's collective time), and a rank without collectives has none.

impact_ms = effective tail per step (mean over the rank's kept steps), the rank where it weighs most.
Severity: the impact rule. Evidence names the tail's collectives, their sizes and the bucket proposal: with
k buckets, the first k-1 can overlap the end of backward, so k = 4 hides about 3/4 of the tail; the
proposed bucket size is min(the tail's bytes / 4, half the largest collective of the tail), so it is smaller
than every bucket that ran late (DDP `bucket_cap_mb`; MindSpore `all_reduce_fusion_config` split points /
`comm_fusion` size in MB).
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..models import Finding
from ..thresholds import T
from ..units import BYTES_PER_MB, NS_PER_MS
from ._comm_tail import TailCollective, cap_by_critical_path, collectives_text, exposed_ns
from ._common import (
    by_value,
    fmt_ms,
    placeholders,
    rank_batches,
    rank_ordered,
    rank_slices,
    ranks_and_steps,
    worst_share,
)
from .base import Check, CheckContext, register
from .evidence import Entry, Evidence, Record

PROPOSED_BUCKETS = int(T.tail_proposed_buckets.value)
# Collectives that synchronise gradients (DDP / MindSpore AllReduce, ZeRO / FSDP reduce-scatter + all-gather).
GRADIENT_RE = r"(?i)all_?reduce|reduce_?scatter|all_?gather|^reduce$|hcom_reduce"
_GRADIENT = re.compile(GRADIENT_RE)


class StepTail(Record):
    """One kept step's tail: a device timeline writes idle_after / critical_rank, step phases communication /
    step."""

    tail_ms: float
    idle_after_ms: float | None = None
    critical_rank_ms: float | None = None
    communication_ms: float | None = None
    effective_ms: float
    step_ms: float | None = None


class ExposedTailRank(Entry):
    weighs_by = "impact_ms_per_step"
    steps: list[int]
    impact_ms_per_step: float
    tail_pct_of_step: float | None
    by_step: dict[str, StepTail]   # step -> its tail
    collectives: list[TailCollective]   # the first firing step's, the first 20
    collective_type: str | None
    tail_bytes_mb: float | None
    largest_collective_mb: float | None
    proposed_bucket_mb: float | None
    source: str | None = None   # set where the tail comes from step phases


class ExposedTailEvidence(Evidence):
    threshold_pct_of_step: float
    per_rank: dict[int, ExposedTailRank]
    proposed_buckets: int
    impact_method: str = (
        "per step: non-overlapped gradient communication between the end of the last compute op before the final "
        "block of collectives and the block's end, minus the device idle right after it (the step waited on "
        "something else), capped by the smallest such tail among the ranks of the step and group (the rank that "
        "paces the collectives); mean over kept steps. MindSpore without a device timeline: min(tail phase, "
        "collective time).")
    source: str = "MindSpore performance guide case 3 (all_reduce_fusion_config); PyTorch DDP buckets"


@dataclass
class _RankOps:
    """One rank's compute ops and gradient collectives as numpy columns, sorted by start (so a step's ops
    are one contiguous slice). The text and size columns are None / NaN for compute ops."""

    name: np.ndarray         # object
    is_comm: np.ndarray      # bool: a collective (else a compute op)
    start: np.ndarray        # int64 ns
    end: np.ndarray          # int64 ns
    size: np.ndarray         # bytes, NaN / None when unknown
    collective: np.ndarray   # object, None when unknown
    group: np.ndarray        # object, None when unknown


@register
class ExposedCommTailCheck(Check):
    id = "exposed-comm-tail"
    dimension = "communication"
    title = "Exposed gradient communication tail"
    fires_when = "gradient communication after backward is not overlapped (fusion / bucket split helps)"
    thresholds = ("exposed_tail_pct", "tail_proposed_buckets")
    frameworks = ("pytorch", "mindspore")
    vendors = ("ascend", "cuda", "rocm")
    description = (
        "Per rank and step: communication after the last compute op before the step's final block of collectives,"
        ' not hidden by compute and not followed by device idle, >= {exposed_tail_pct} % of the step (the '
        "MindSpore performance guide's exposed AllReduce tail). Evidence names the collectives, their sizes and a"
        ' split into {tail_proposed_buckets} buckets.'
    )
    evidence = ExposedTailEvidence
    title_template = "Gradient communication after backward is exposed ({ms} ms per step)"
    message_template = (
        "On {ranks} ({steps}) {ms} ms per step of gradient communication runs after backward with no compute to "
        "hide it on rank {worst_rank} ({worst.tail_pct_of_step:.1f} % of the step, threshold {exposed_tail_pct:g} %)"
        "{names}{fix}."
    )

    def applicable_ranks(self, ctx: CheckContext) -> list[int]:
        ok = []
        for r in ctx.all_ranks:
            if (ctx.vendor(r) or "") not in self.vendors:
                continue
            caps = ctx.caps(r)
            if ({"device_ops", "kernels"} & caps and "steps" in caps) or "step_phases" in caps:
                ok.append(r)
        self.needs = () if ok else ("steps", "device_ops")  # type: ignore[misc]  # message when nothing applies
        return ok

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        windows = ctx.view.step_windows(ranks)
        steps_ms = ctx.view.step_ms
        thr = T.exposed_tail_pct.value
        per_rank: dict[int, ExposedTailRank] = {}
        tails: dict[int, dict[int, dict[str, Any]]] = {}
        # windows are sorted by rank: plain column slices per rank, not a DataFrame per rank
        w_rank = windows["rank"].to_numpy(dtype=np.int64)
        w_cols = (windows["step"].to_numpy(), windows["w0"].to_numpy(dtype=np.int64),
                  windows["w1"].to_numpy(dtype=np.int64))
        no_w = tuple(c[:0] for c in w_cols)
        w_of = {r: tuple(c[i:j] for c in w_cols) for r, i, j in rank_slices(w_rank)}
        # device ops are read a batch of ranks at a time (one query per batch); between batches only the
        # per-step tails are kept, each with its final block's few collectives (the critical-path cap is
        # cross-rank, so the firing steps are known only once every rank's tails are)
        for batch in rank_batches(ctx, ranks, "device_ops"):
            devs = self._device(ctx, batch)
            for rank in batch:
                w = w_of.get(rank, no_w)
                dev = devs.pop(rank, None)
                if w[0].size and dev is not None and dev.is_comm.any():
                    tails[rank] = self._device_tails(ctx, rank, w, dev)
                elif "step_phases" in ctx.caps(rank):
                    st = self._phase_rank(ctx, rank, w[0], steps_ms, thr)
                    if st:
                        per_rank[rank] = st
        cap_by_critical_path(tails)
        for rank, by_step in tails.items():
            st = self._device_stats(ctx, rank, w_of.get(rank, no_w)[0].size, by_step, steps_ms, thr)
            if st:
                per_rank[rank] = st
        if not per_rank:
            return []
        rank_w, ms_w = worst_share(ctx, {r: v.impact_ms_per_step for r, v in per_rank.items()})
        rk, steps_seen = ranks_and_steps(per_rank)
        e = per_rank[rank_w] if rank_w is not None else None
        colls = e.collectives if e is not None else []
        names = collectives_text(colls)
        subject = ((e.collective_type if e is not None else None) or "allreduce") if colls else "tail"
        bucket = e.proposed_bucket_mb if e is not None else None
        fix = (f"; use gradient buckets of ~{bucket:.3g} MB (DDP bucket_cap_mb; MindSpore all_reduce_fusion_config "
               f"split points / comm_fusion size) so most of them start during backward"
               if bucket else "; split the gradient fusion into several buckets so they start during backward")
        return [self.finding(
            ctx, subject=subject, ranks=rk, steps=steps_seen, impact_ms=ms_w, impact_rank=rank_w,
            evidence=ExposedTailEvidence(threshold_pct_of_step=thr, per_rank=per_rank,
                                         proposed_buckets=PROPOSED_BUCKETS),
            words={"ms": fmt_ms(ms_w or 0), "names": f": {names}" if names else "", "fix": fix})]

    # ---- device timeline ----------------------------------------------------------------------------
    @staticmethod
    def _device(ctx: CheckContext, ranks: list[int]) -> dict[int, _RankOps]:
        """Per rank: compute ops and gradient collectives, by start (p2p sends and all-to-all are not
        bucketed gradients and are left out). Plain numpy columns; the gradient test runs once per distinct
        collective / name (there are few) over all ranks' ops at once, not once per op or per rank. One query
        for all ranks; a rank with ops that start together gets its own query, whose row order decides their
        order (it shows in the evidence, see `rank_ordered`)."""
        out: dict[int, _RankOps] = {}
        marks = placeholders(ranks)
        # a compute op is only an interval: its text columns are never read, so they come back NULL (no
        # Python string per compute op; those were most of this check's memory)
        comm = "category = 'communication'"
        cols = (f"CASE WHEN {comm} THEN name END AS name, {comm} AS is_comm, start_ns, dur_ns, "
                f"CASE WHEN {comm} THEN size_bytes END AS size_bytes, CASE WHEN {comm} THEN collective END AS "
                f"collective, CASE WHEN {comm} THEN group_name END AS group_name")
        by_rank = rank_ordered(
            ctx, ranks, f"SELECT {cols} FROM device_ops WHERE rank = ? AND category IN ('compute', "
                        "'communication') ORDER BY start_ns",
            f"SELECT rank, {cols} FROM device_ops WHERE rank IN ({marks}) AND category IN ('compute', "
            "'communication') ORDER BY rank, start_ns", ("start_ns",))
        present = [int(r) for r in ranks if by_rank[int(r)]["name"].size]
        if not present:
            return out
        name, coll = (np.concatenate([by_rank[r][k] for r in present]).astype(object)
                      for k in ("name", "collective"))
        comm_all = np.concatenate([by_rank[r]["is_comm"] for r in present]).astype(bool)
        label = np.where(pd.isna(coll), name, coll)
        grad_all = np.zeros(comm_all.size, dtype=bool)
        grad_all[comm_all] = by_value(label[comm_all], lambda v: _GRADIENT.search(str(v)))
        keep_all = ~comm_all | grad_all
        i = 0
        for rank in present:
            a = by_rank[rank]
            j = i + a["name"].size
            keep, comm = keep_all[i:j], comm_all[i:j]
            i = j
            s_all = a["start_ns"][keep].astype(np.int64)
            e_all = s_all + a["dur_ns"][keep].astype(np.int64)
            ops = _RankOps(a["name"][keep], comm[keep], s_all, e_all, a["size_bytes"][keep],
                           a["collective"][keep], a["group_name"][keep])
            if s_all.size > 1 and (s_all[1:] < s_all[:-1]).any():
                # the query orders by start; should it not, a stable sort keeps equal starts in row order
                o = np.argsort(s_all, kind="stable")
                ops = _RankOps(*(getattr(ops, f)[o] for f in ("name", "is_comm", "start", "end", "size",
                                                              "collective", "group")))
            out[rank] = ops
        return out

    def _device_tails(self, ctx: CheckContext, rank: int, w: tuple[np.ndarray, np.ndarray, np.ndarray],
                      dev: _RankOps) -> dict[int, dict[str, Any]]:
        """Per kept step (w: steps, device window starts and ends): the exposed tail, the idle after it, the
        effective tail (ns) and its final block of collectives ((name, bytes, collective, start, end) in start
        order: kept past the rank's ops, `_colls` describes them when a step fires)."""
        s_all, e_all, is_comm = dev.start, dev.end, dev.is_comm
        timeline = ctx.view.device_timeline(rank)
        out: dict[int, dict[str, Any]] = {}
        steps, w0s, w1s = w
        # ops are sorted by start: a step's ops (start in [w0, w1)) are the slice [lo, hi)
        los = np.searchsorted(s_all, w0s, side="left").tolist()
        his = np.searchsorted(s_all, w1s, side="left").tolist()
        for step, w1, lo, hi in zip(steps.tolist(), w1s.tolist(), los, his, strict=True):
            cm = is_comm[lo:hi]
            comm_i = lo + np.flatnonzero(cm)
            comp_i = lo + np.flatnonzero(~cm)
            if comm_i.size == 0 or comp_i.size == 0:
                continue
            comp_s = s_all[comp_i]   # ascending, as are the collectives' starts
            # final block: walk back from the last collective while no compute op starts in between, i.e. cut
            # after the last pair of consecutive collectives with a compute start in [start, next start).
            # That pair holds the latest compute start before the last collective: the block is every
            # collective that starts after it
            ord_s = s_all[comm_i]
            n_c = int(np.searchsorted(comp_s, ord_s[-1], side="left"))
            first = int(np.searchsorted(ord_s, comp_s[n_c - 1], side="right")) if n_c else 0
            block = comm_i[first:][::-1].tolist()   # latest first, as the walk collects them
            b_start = int(s_all[block[-1]])
            n_before = int(np.searchsorted(comp_s, b_start, side="left"))
            if n_before == 0:
                continue   # no compute before the collectives: not a gradient tail
            bwd_end = int(e_all[comp_i[:n_before]].max())
            blk_end = int(min(int(e_all[block].max()), w1))
            tail = exposed_ns(s_all[lo:hi], e_all[lo:hi], cm, bwd_end, blk_end)
            idle_after, _ = timeline.idle_run_after(blk_end, w1)
            groups = {str(g) for g in dev.group[block] if g is not None}   # NULL is None in `columns`
            # the block's ops in start order (stable: equal starts stay latest first, as collected)
            ops = [(dev.name[j], dev.size[j], dev.collective[j], int(s_all[j]), int(e_all[j]))
                   for j in sorted(block, key=lambda j: s_all[j])]
            out[int(step)] = {
                "tail_ns": tail, "idle_after_ns": float(idle_after), "eff_ns": max(0.0, tail - idle_after),
                "groups": frozenset(groups), "block": ops, "bwd_end": bwd_end,
            }
        return out

    def _colls(self, ctx: CheckContext, rank: int, block: list[tuple[Any, Any, Any, int, int]], bwd_end: int
               ) -> list[TailCollective]:
        """The collectives of a final block ((name, bytes, collective, start ns, end ns) in start order), with
        their sizes and types."""
        comm_sizes = self._comm_sizes(ctx, rank)
        return [self._coll(name, size, coll, s, e, bwd_end, comm_sizes) for name, size, coll, s, e in block]

    def _device_stats(self, ctx: CheckContext, rank: int, n_kept: int, tails: dict[int, dict[str, Any]],
                      steps_ms: dict[tuple[int, int], float], thr: float) -> ExposedTailRank | None:
        impact: list[float] = []
        fired: list[int] = []
        by_step: dict[str, StepTail] = {}
        colls: list[TailCollective] = []
        for step, t in sorted(tails.items()):
            eff = t["eff_ns"]
            impact.append(eff)
            by_step[str(step)] = StepTail(tail_ms=round(t["tail_ns"] / NS_PER_MS, 4),
                                          idle_after_ms=round(t["idle_after_ns"] / NS_PER_MS, 4),
                                          critical_rank_ms=round(t.get("critical_ns", eff) / NS_PER_MS, 4),
                                          effective_ms=round(eff / NS_PER_MS, 4))
            sm = steps_ms.get((rank, step))
            if sm and eff > 0 and eff / NS_PER_MS >= thr / 100.0 * sm:
                fired.append(step)
                # only the first firing step's collectives are described: build them for that step alone
                colls = colls or self._colls(ctx, rank, t["block"], t["bwd_end"])
        if not fired:
            return None
        return self._stats(ctx, rank, n_kept, fired, impact, by_step, colls)

    def _phase_rank(self, ctx: CheckContext, rank: int, kept_steps: np.ndarray, steps_ms: dict[tuple[int, int], float],
                    thr: float) -> ExposedTailRank | None:
        ph = ctx.sql("SELECT step, phase, dur_ns FROM step_phases WHERE rank = ? AND phase IN ('tail', "
                     "'iteration_interval', 'fp_and_bp')", [int(rank)])
        if ph.empty or not (ph["phase"] == "tail").any():
            return None
        piv = ph.pivot_table(index="step", columns="phase", values="dur_ns", aggfunc="sum") / NS_PER_MS
        kept = set(kept_steps.astype(int).tolist())
        if kept and piv.index.isin(kept).any():
            piv = piv[piv.index.isin(kept)]
        # the tail phase (bp end -> iteration end) also holds the optimizer update: only the collectives'
        # time in it is charged, and a rank without any collective (one card) has no communication tail
        comm_all = ctx.sql("SELECT step, name, op_type, start_ns, elapse_ns, size_bytes FROM comm_ops WHERE rank = ? "
                           "ORDER BY start_ns", [int(rank)])
        comm_all = comm_all[comm_all["op_type"].fillna(comm_all["name"]).astype(str).str.contains(GRADIENT_RE)]
        if comm_all.empty:
            return None
        comm_by_step = comm_all.groupby("step")["elapse_ns"].sum() / NS_PER_MS
        impact: list[float] = []
        fired: list[int] = []
        by_step: dict[str, StepTail] = {}
        for step, row in piv.iterrows():
            tail = min(float(row.get("tail", 0.0) or 0.0), float(comm_by_step.get(step, 0.0)))
            sm = steps_ms.get((rank, int(step))) or float(np.nansum([row.get(c, np.nan) for c in
                                                                       ("iteration_interval", "fp_and_bp", "tail")]))
            impact.append(tail * NS_PER_MS)
            by_step[str(int(step))] = StepTail(tail_ms=round(float(row.get("tail", 0.0) or 0.0), 4),
                                               communication_ms=round(float(comm_by_step.get(step, 0.0)), 4),
                                               effective_ms=round(tail, 4), step_ms=round(sm, 4))
            if sm and tail > 0 and tail >= thr / 100.0 * sm:
                fired.append(int(step))
        if not fired:
            return None
        comm = comm_all[comm_all["step"] == fired[0]]
        colls = [TailCollective(name=str(r["name"]), type=None if pd.isna(r["op_type"]) else str(r["op_type"]),
                                dur_ms=round(float(r["elapse_ns"]) / NS_PER_MS, 4),
                                size_mb=None if pd.isna(r["size_bytes"])
                                else round(float(r["size_bytes"]) / BYTES_PER_MB, 4))
                 for _, r in comm.iterrows()]
        st = self._stats(ctx, rank, kept_steps.size, fired, impact, by_step, colls, n_steps=len(piv))
        st.source = "step_phases tail (bp end -> iteration end)"
        return st

    # ---- helpers ----------------------------------------------------------------------------------------
    @staticmethod
    def _stats(ctx: CheckContext, rank: int, n_kept: int, fired: list[int], impact: list[float],
               by_step: dict[str, StepTail], colls: list[TailCollective], n_steps: int | None = None
               ) -> ExposedTailRank:
        n = max(n_steps or n_kept, 1)
        ms = float(np.sum(impact)) / NS_PER_MS / n
        step = ctx.mean_step_ms(rank)
        if not step:
            vals = [v.step_ms for v in by_step.values() if v.step_ms]
            step = float(np.mean(vals)) if vals else None
        sizes = [c.size_mb for c in colls if c.size_mb]
        total_mb = sum(sizes) or None
        # smaller than every current bucket (they all ran after backward) and a quarter of the tail at most
        bucket_mb = min(total_mb / PROPOSED_BUCKETS, max(sizes) / 2) if total_mb else None
        types = [c.type for c in colls if c.type]
        return ExposedTailRank(
            steps=fired,
            impact_ms_per_step=round(ms, 4),
            tail_pct_of_step=round(100.0 * ms / step, 2) if step else None,
            by_step=by_step,
            collectives=colls[:20],
            collective_type=max(set(types), key=types.count) if types else None,
            tail_bytes_mb=None if total_mb is None else round(total_mb, 4),
            largest_collective_mb=max(sizes) if sizes else None,
            proposed_bucket_mb=None if bucket_mb is None else round(bucket_mb, 4),
        )

    @staticmethod
    def _comm_sizes(ctx: CheckContext, rank: int) -> dict[tuple[str, int], tuple[int | None, str | None]]:
        """(name, start ns) -> (bytes, op type) from comm_ops (communication.json / NCCL args)."""
        rows = ctx.profile.rows("SELECT name, start_ns, size_bytes, op_type FROM comm_ops WHERE rank = ?",
                                [int(rank)])
        out: dict = {(str(n), int(s)): (None if b is None else int(b), None if t is None else str(t))
                     for n, s, b, t in rows}
        by_name: dict[str, list[tuple[int, tuple[int | None, str | None]]]] = {}
        for (n, st), v in out.items():
            by_name.setdefault(n, []).append((st, v))
        for n, items in by_name.items():
            items.sort(key=lambda x: x[0])
            out[("\0by_name", n)] = ([x[0] for x in items], [x[1] for x in items])
        return out

    @staticmethod
    def _coll(name: Any, size_bytes: Any, collective: Any, s: int, e: int, bwd_end: int,
              sizes: dict[tuple[str, int], tuple[int | None, str | None]]) -> TailCollective:
        name = str(name)
        size = None if pd.isna(size_bytes) else int(size_bytes)
        typ = None if pd.isna(collective) else str(collective)
        hit = sizes.get((name, s))
        if hit is None:   # communication.json starts are µs: match within 1 µs (index by name, not a scan)
            near = sizes.get(("\0by_name", name))
            if near:
                starts, vals = near  # type: ignore[misc]
                i = bisect.bisect_left(starts, s - 1000)
                if i < len(starts) and abs(starts[i] - s) <= 1000:
                    hit = vals[i]
        if hit is not None:
            size = size if size is not None else hit[0]
            typ = typ or hit[1]
        return TailCollective(name=name, type=typ, start_after_backward_ms=round((s - bwd_end) / NS_PER_MS, 4),
                              dur_ms=round((e - s) / NS_PER_MS, 4),
                              size_mb=None if size is None else round(size / BYTES_PER_MB, 4))

