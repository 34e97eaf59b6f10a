"""`compare`: run vs run (BASE TARGET) and rank vs rank (one profile), as a `Comparison`.

A thin front end: the attribution is in `analysis/compare.py`, the verdict sentence in
`analysis/compare_verdict.py`; this module loads the runs, matches ranks, diffs the issue lists and builds
the contract's `Comparison`.
"""

from __future__ import annotations

import pandas as pd

from ..analysis import compare as core
from ..analysis.compare_verdict import (
    CHANGE_COLUMNS,
    OP_NOISE_SHARE,
    ZERO_MS,
    VerdictContext,
    diff_ms,
    dim_deltas,
    late_rank,
    rank_verdict,
    verdict_sentence,
)
from ..analysis.errors import UsageError
from ..analysis.models import Finding
from ..analysis.replay.own import OwnWork, own_work
from . import api
from .models import BreakdownDelta, Change, Comparison, EnvChange, RankDelta, RunSide


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _side_model(side: core.Side) -> RunSide:
    return RunSide(path=str(side.profile.path), step_ms=_r(side.step_ms), compute_ms=_r(side.compute_ms),
                   communication_ms=_r(side.comm_ms), free_ms=_r(side.free_ms), memory_ms=_r(side.memory_ms),
                   host_ms=_r(side.host_ms), ranks=side.ranks, steps=side.steps, format=side.profile.info.format)


def _match_ranks(bp, tp, rank: int | None) -> tuple[list[int], list[int], list[str]]:
    notes: list[str] = []
    br, tr = bp.info.ranks, tp.info.ranks
    if rank is not None:
        for p, rs in ((bp, br), (tp, tr)):
            if rank not in rs:
                raise UsageError(f"{p.path}: rank {rank} not in profile; ranks are {', '.join(map(str, rs))}")
        return [rank], [rank], notes
    common = sorted(set(br) & set(tr))
    if common:
        if set(br) != set(tr):
            notes.append(f"ranks differ (base {br}, target {tr}); compared the {len(common)} common rank(s)")
        return common, common, notes
    if len(br) == 1 and len(tr) == 1:
        notes.append(f"single-rank traces with different rank ids: base rank {br[0]} against target rank {tr[0]}")
        return br, tr, notes
    n = min(len(br), len(tr))
    notes.append(f"no common rank ids; compared the first {n} ranks of each run in order")
    return br[:n], tr[:n], notes


def _finding_key(f: Finding, by_rank: bool) -> tuple:
    return (f.check, f.subject, tuple(f.ranks)) if by_rank else (f.check, f.subject)



def noise_ms(b: core.Side) -> float:
    """The per-step op delta below which an op did not move (see OP_NOISE_SHARE)."""
    return max(ZERO_MS, OP_NOISE_SHARE * (b.step_ms or 0.0))


def _changes(b: core.Side, t: core.Side, cross: bool, noise: float = ZERO_MS) -> pd.DataFrame:
    # (op table, kind label, by family): across vendors device op names never match, so kernels and
    # collectives are compared by family; host framework ops (aten::) and runtime APIs keep their names
    tables = ([("kernel", "family", True), ("comm", "family", True), ("api", "api", False), ("op", "op", False)]
              if cross else [("kernel", "kernel", False), ("comm", "comm", False), ("api", "api", False),
                             ("op", "op", False)])
    # HTA's iteration rule (a GPU op counts only with its launch in the step) is for parity with HTA's
    # same-vendor trace diff; msprof-analyze's NPU-vs-GPU compare counts every device op, so cross-vendor
    # tables do too (NCCL kernels launched before the trace started would otherwise vanish from the GPU side)
    parts = [core.diff_tables(core.op_table(b, k, by_family=fam, by_launch=not cross),
                              core.op_table(t, k, by_family=fam, by_launch=not cross), label)
             for k, label, fam in tables]
    parts = [p for p in parts if not p.empty]
    df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=CHANGE_COLUMNS)
    if cross and not df.empty:
        # kernel and communication families come from two tables: one ranking for the family rows
        fam = df[df["kind"].eq("family")]
        fam = fam.reindex(fam["delta_ms"].abs().sort_values(ascending=False, kind="stable").index)
        df = pd.concat([fam, df[~df["kind"].eq("family")]], ignore_index=True)
    # host annotations nest (ProfilerStep, ## forward ##) so they would "explain" everything: rank them last,
    # but before rows that did not move (jitter, or ops that only exist on both sides)
    nest = df["kind"].eq("op") & df["name"].str.match(r"^(ProfilerStep#|## |#)", na=False)
    # sync waits are effects of device time elsewhere, Python frames hold the aten ops they call
    nest |= df["kind"].isin(("op", "api")) & df["name"].map(
        lambda n: core.is_sync_wait(str(n)) or bool(core.PY_FRAME.search(str(n))))
    same = (df["delta_ms"].abs() < noise) & (df["count_base"].round(3) == df["count_target"].round(3))
    return pd.concat([df[~nest & ~same], df[nest & ~same], df[same]])


def _to_change(r, bw: tuple[dict[str, float], dict[str, float]] | None = None) -> Change:
    bb = bt = None
    if bw is not None and r.kind == "comm":
        bb, bt = bw[0].get(str(r.name)), bw[1].get(str(r.name))
    return Change(kind=r.kind, name=str(r.name), base_ms=round(float(r.base_ms), 4), target_ms=round(float(r.target_ms), 4),
                  delta_ms=round(float(r.delta_ms), 4), count_base=round(float(r.count_base), 3),
                  count_target=round(float(r.count_target), 3), change=r.change,
                  bandwidth_base_gbps=None if bb is None else round(bb, 3),
                  bandwidth_target_gbps=None if bt is None else round(bt, 3))




def _build(b: core.Side, t: core.Side, *, top: int, notes: list[str], new: list[Finding], gone: list[Finding],
           env: list[EnvChange], cfg: list[EnvChange], cross: bool, warnings: list[str],
           rank_pair: tuple[int, int] | None = None, own: dict[int, OwnWork] | None = None) -> Comparison:
    noise = noise_ms(b)
    changes = _changes(b, t, cross, noise)
    delta = diff_ms(b.step_ms, t.step_ms)
    pct = round(100.0 * delta / b.step_ms, 2) if delta is not None and b.step_ms else None
    bd = BreakdownDelta(compute_ms=diff_ms(b.compute_ms, t.compute_ms),
                        communication_ms=diff_ms(b.comm_ms, t.comm_ms),
                        free_ms=diff_ms(b.free_ms, t.free_ms), memory_ms=diff_ms(b.memory_ms, t.memory_ms),
                        host_ms=diff_ms(b.host_ms, t.host_ms))
    dims = dim_deltas(b, t)
    env_t = core.env_of(t.profile, t.ranks)
    cc, vendor = core.compute_capability(t.profile, t.ranks), t.profile.info.vendor
    ctx = VerdictContext(ops=None if cross else core.operator_deltas(core.operator_table(b), core.operator_table(t)),
                   base_compute_ms=b.compute_ms, base_step_ms=b.step_ms, fits=lambda fx: core.fix_fits(fx, vendor, cc, env_t))
    if rank_pair is not None:
        fix = verdict_sentence(delta, pct, dims, changes, env, new, cfg, noise=noise, ctx=ctx)[1]
        verdict = rank_verdict(dims, changes, rank_pair[0], rank_pair[1], new, noise, own, b.step_ms)
    else:
        late = late_rank(b, t)
        late_changes = (_changes(core.rank_side(b, late.base_rank), core.rank_side(t, late.target_rank), cross,
                                 noise) if late is not None else None)
        verdict, fix = verdict_sentence(delta, pct, dims, changes, env, new, cfg, late, late_changes, noise, ctx)
    per_rank = [RankDelta(base_rank=br, target_rank=tr,
                          **{k: diff_ms(b.per_rank[br].get(k), t.per_rank[tr].get(k))
                             for k in ("step_ms", "compute_ms", "communication_ms", "free_ms")})
                for br, tr in zip(b.ranks, t.ranks, strict=False)]
    if cross:
        notes.append("different vendors: device ops compared by family (matmul, attention, vector, communication, "
                     "memory), names are not matched one to one")
    bw = (core.comm_bandwidth(b), core.comm_bandwidth(t))
    return Comparison(base=_side_model(b), target=_side_model(t), delta_ms=delta, delta_pct=pct, breakdown_delta=bd,
                      top_changes=[_to_change(r, bw) for r in changes.head(top).itertuples(index=False)],
                      env_changes=env, config_changes=cfg, findings=new, gone_findings=gone, per_rank=per_rank,
                      verdict=verdict, next_step=(f"stepdoctor explain {fix}" if fix else None), cross_vendor=cross,
                      notes=notes, warnings=warnings, total_changes=len(changes), truncated=len(changes) > top)


def compare_runs(base: api.ProfileRef, target: api.ProfileRef, *, rank: int | None = None, step: int | None = None,
                 top: int = 15, first_step_only: bool = False) -> Comparison:
    """BASE vs TARGET: step delta, attribution, op/env/config changes, findings diff, verdict."""
    bp, tp = api.load(base), api.load(target)
    br, tr, notes = _match_ranks(bp, tp, rank)
    b = core.make_side(bp, br, step, first_step_only)
    t = core.make_side(tp, tr, step, first_step_only)
    warnings = [f"base: {w}" for w in bp.warnings] + [f"target: {w}" for w in tp.warnings]
    if step is not None and (not b.steps or not t.steps):
        raise UsageError(f"{bp.path if not b.steps else tp.path}: step {step} not in profile")
    if len(b.steps) != len(t.steps):
        notes.append(f"step counts differ ({len(b.steps)} vs {len(t.steps)}); values are per-step means")
    cross = (bp.info.vendor or "") != (tp.info.vendor or "") and "ascend" in f"{bp.info.vendor}{tp.info.vendor}"
    bi, ti = api.issues(bp), api.issues(tp)
    by_rank = br == tr
    bk = {_finding_key(f, by_rank) for f in bi.findings}
    tk = {_finding_key(f, by_rank) for f in ti.findings}
    new = [f for f in ti.findings if _finding_key(f, by_rank) not in bk]
    gone = [f for f in bi.findings if _finding_key(f, by_rank) not in tk]
    env = [EnvChange(name=k, base=a, target=c) for k, a, c in core.dict_changes(core.env_of(bp, br), core.env_of(tp, tr))]
    cfg = [EnvChange(name=k, base=a, target=c)
           for k, a, c in core.dict_changes(core.config_of(bp, br), core.config_of(tp, tr))]
    return _build(b, t, top=top, notes=notes, new=new, gone=gone, env=env, cfg=cfg, cross=cross, warnings=warnings)


def compare_ranks(ref: api.ProfileRef, rank_a: int, rank_b: int, *, top: int = 15) -> Comparison:
    """Rank B (usually the slow one) against rank A inside one profile."""
    prof = api.load(ref)
    for r in (rank_a, rank_b):
        if r not in prof.info.ranks:
            raise UsageError(f"{prof.path}: rank {r} not in profile; ranks are {', '.join(map(str, prof.info.ranks))}")
    a = core.make_side(prof, [rank_a])
    b = core.make_side(prof, [rank_b])
    rep = api.issues(prof)
    new = [f for f in rep.findings if rank_b in f.ranks and rank_a not in f.ranks]
    gone = [f for f in rep.findings if rank_a in f.ranks and rank_b not in f.ranks]
    env = [EnvChange(name=k, base=x, target=y)
           for k, x, y in core.dict_changes(core.env_of(prof, [rank_a]), core.env_of(prof, [rank_b]))]
    return _build(a, b, top=top, notes=[f"rank {rank_b} against rank {rank_a} of the same profile"], new=new,
                  gone=gone, env=env, cfg=[], cross=False, warnings=list(prof.warnings), rank_pair=(rank_a, rank_b),
                  own=own_work(prof, [rank_a, rank_b]))
