"""`compare`: run vs run (BASE TARGET) and rank vs rank (one profile), as a `Comparison`.

The attribution itself is in `analysis/compare.py`; this module matches ranks, diffs the issue lists
and writes the verdict sentence.
"""

from __future__ import annotations

import pandas as pd

from ..analysis import compare as core
from ..analysis.ingest.base import ProfileError
from ..analysis.metrics.names import short_name
from ..analysis.models import SEVERITY_ORDER, Finding
from . import api
from .models import BreakdownDelta, Change, Comparison, EnvChange, RankDelta, RunSide

DIM_KINDS = {"compute": ("kernel", "family"), "communication": ("comm",), "free": ("api", "op")}


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _d(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 3)


def _side_model(side: core.Side) -> RunSide:
    return RunSide(path=str(side.profile.path), step_ms=_r(side.step_ms), compute_ms=_r(side.compute_ms),
                   communication_ms=_r(side.comm_ms), free_ms=_r(side.free_ms), ranks=side.ranks, steps=side.steps,
                   format=side.profile.info.format)


def _match_ranks(bp, tp, rank: int | None) -> tuple[list[int], list[int], list[str]]:
    notes: list[str] = []
    br, tr = bp.info.ranks, tp.info.ranks
    if rank is not None:
        for p, rs in ((bp, br), (tp, tr)):
            if rank not in rs:
                raise ProfileError(p.path, f"rank {rank} not in profile; ranks are {', '.join(map(str, rs))}")
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


def _changes(b: core.Side, t: core.Side, cross: bool) -> pd.DataFrame:
    parts = []
    kinds = ["family", "comm", "api", "op"] if cross else ["kernel", "comm", "api", "op"]
    for kind in kinds:
        k = "kernel" if kind == "family" else kind
        parts.append(core.diff_tables(core.op_table(b, k, by_family=kind == "family"),
                                      core.op_table(t, k, by_family=kind == "family"), kind))
    df = pd.concat([p for p in parts if not p.empty], ignore_index=True) if any(not p.empty for p in parts) else \
        pd.DataFrame(columns=["kind", "name", "base_ms", "target_ms", "delta_ms", "count_base", "count_target",
                              "change"])
    # host annotations nest (ProfilerStep, ## forward ##) so they would "explain" everything: rank them last
    nest = df["kind"].eq("op") & df["name"].str.match(r"^(ProfilerStep#|## |#)", na=False)
    df = pd.concat([df[~nest], df[nest]])
    return df.reindex(df.index)


def _to_change(r) -> Change:
    return Change(kind=r.kind, name=str(r.name), base_ms=round(float(r.base_ms), 4), target_ms=round(float(r.target_ms), 4),
                  delta_ms=round(float(r.delta_ms), 4), count_base=round(float(r.count_base), 3),
                  count_target=round(float(r.count_target), 3), change=r.change)


_NEST = r"^(ProfilerStep#|## |#|enumerate\(DataLoader\))"


def _top_of(changes: pd.DataFrame, dim: str, sign: int) -> str:
    cand = changes[changes["kind"].isin(DIM_KINDS[dim])]
    cand = cand[(cand["delta_ms"] * sign > 0) & ~(cand["kind"].eq("op") & cand["name"].str.match(_NEST, na=False))]
    if cand.empty:
        return ""
    parts = []
    for _, top in cand.head(3 if dim == "compute" else 1).iterrows():
        calls = ""
        if round(top["count_base"], 2) != round(top["count_target"], 2):
            calls = f", {top['count_base']:.0f} -> {top['count_target']:.0f} calls/step"
        parts.append(f"{short_name(str(top['name']), 60)} {top['delta_ms']:+.1f} ms{calls}")
    return ": " + ", ".join(parts)


def _rank_verdict(bd: BreakdownDelta, changes: pd.DataFrame, a: int, b: int, new: list[Finding]) -> str:
    """Rank B against rank A of one job: where B spends more time, then where A does."""
    dims = {k: v for k, v in (("compute", bd.compute_ms), ("communication", bd.communication_ms),
                              ("free", bd.free_ms)) if v is not None}
    if not dims:
        return f"rank {b} vs rank {a}: no device data to compare"
    worse = max(dims, key=lambda k: dims[k])
    if dims[worse] <= 0:
        return f"rank {b} spends no more time than rank {a} in any dimension"
    text = f"rank {b} vs rank {a}: {worse} {dims[worse]:+.1f} ms per step{_top_of(changes, worse, 1)}"
    better = min(dims, key=lambda k: dims[k])
    if dims[better] < 0:
        text += f"; rank {a} has {-dims[better]:.1f} ms more {better} per step"
    related = [f for f in new if _dim_of(f.check) == worse]
    if related:
        text += f"; finding: {related[0].title}"
    return text


def _verdict(delta: float | None, pct: float | None, bd: BreakdownDelta, changes: pd.DataFrame,
             env: list[EnvChange], new: list[Finding], cfg: list[EnvChange] | None = None) -> tuple[str, str | None]:
    """One sentence naming the largest cause with numbers, and the next step."""
    if delta is None:
        return "step time unknown on one side (no ProfilerStep); see top_changes", None
    head = f"step time {delta:+.1f} ms ({pct:+.1f}%)" if pct is not None else f"step time {delta:+.1f} ms"
    dims = {k: v for k, v in (("compute", bd.compute_ms), ("communication", bd.communication_ms),
                              ("free", bd.free_ms)) if v is not None}
    fix = next((f.fixes[0] for f in sorted(new, key=lambda f: (SEVERITY_ORDER[f.severity], -(f.impact_ms or 0)))
                if f.fixes), None)
    small = pct is not None and abs(pct) < core.NOISE_PCT
    if small or not dims:
        lead = []
        if env:
            lead.append("environment changed: " + ", ".join(f"{e.name} {e.base or 'unset'} -> {e.target or 'unset'}"
                                                            for e in env[:3]))
        if new:
            lead.append("new: " + "; ".join(f.title for f in new[:2]))
        top = changes.iloc[0] if not changes.empty else None
        if top is not None and not lead:
            lead.append(f"largest op change {short_name(str(top['name']), 60)} {top['delta_ms']:+.2f} ms")
        return f"{head}, within noise" + (f"; {'; '.join(lead)}" if lead else ""), fix
    sign = 1 if delta >= 0 else -1
    dim = max(dims, key=lambda k: sign * dims[k])
    text = f"{head}, mostly {dim} ({dims[dim]:+.1f} ms){_top_of(changes, dim, sign)}"
    hw = [c for c in (cfg or []) if c.name in ("device_name", "world_size", "vendor")]
    if hw:
        text += "; different setup: " + ", ".join(f"{c.name} {c.base} -> {c.target}" for c in hw)
    related = [f for f in new if _dim_of(f.check) == dim]
    if related:
        text += f"; new finding: {related[0].title}"
    elif env:
        text += f"; environment changed: {env[0].name} {env[0].base or 'unset'} -> {env[0].target or 'unset'}"
    return text, fix


_DIM_OF_CHECK = {
    "communication": {"slow-link", "small-packet", "bandwidth-contention", "retransmission", "byte-misalignment",
                      "exposed-comm-tail"},
    "free": {"host-bound", "slow-dataloader", "gc-pause", "op-compile", "sync-stream", "memory-ops", "h2d-pageable",
             "env-var", "sync-batchnorm"},
}


def _dim_of(check: str) -> str:
    for dim, checks in _DIM_OF_CHECK.items():
        if check in checks:
            return dim
    return "compute"


def _build(b: core.Side, t: core.Side, *, top: int, notes: list[str], new: list[Finding], gone: list[Finding],
           env: list[EnvChange], cfg: list[EnvChange], cross: bool, warnings: list[str],
           rank_pair: tuple[int, int] | None = None) -> Comparison:
    changes = _changes(b, t, cross)
    delta = _d(b.step_ms, t.step_ms)
    pct = round(100.0 * delta / b.step_ms, 2) if delta is not None and b.step_ms else None
    bd = BreakdownDelta(compute_ms=_d(b.compute_ms, t.compute_ms), communication_ms=_d(b.comm_ms, t.comm_ms),
                        free_ms=_d(b.free_ms, t.free_ms))
    verdict, fix = _verdict(delta, pct, bd, changes, env, new, cfg)
    if rank_pair is not None:
        verdict = _rank_verdict(bd, changes, rank_pair[0], rank_pair[1], new)
    per_rank = [RankDelta(base_rank=br, target_rank=tr,
                          **{k: _d(b.per_rank[br].get(k), t.per_rank[tr].get(k))
                             for k in ("step_ms", "compute_ms", "communication_ms", "free_ms")})
                for br, tr in zip(b.ranks, t.ranks, strict=False)]
    if cross:
        notes.append("different vendors: device ops compared by family (matmul, attention, vector, communication, "
                     "memory), names are not matched one to one")
    return Comparison(base=_side_model(b), target=_side_model(t), delta_ms=delta, delta_pct=pct, breakdown_delta=bd,
                      top_changes=[_to_change(r) for r in changes.head(top).itertuples(index=False)],
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
        raise ProfileError(bp.path if not b.steps else tp.path, f"step {step} not in profile")
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
            raise ProfileError(prof.path, f"rank {r} not in profile; ranks are {', '.join(map(str, prof.info.ranks))}")
    a = core.make_side(prof, [rank_a])
    b = core.make_side(prof, [rank_b])
    rep = api.issues(prof)
    new = [f for f in rep.findings if rank_b in f.ranks and rank_a not in f.ranks]
    gone = [f for f in rep.findings if rank_a in f.ranks and rank_b not in f.ranks]
    env = [EnvChange(name=k, base=x, target=y)
           for k, x, y in core.dict_changes(core.env_of(prof, [rank_a]), core.env_of(prof, [rank_b]))]
    return _build(a, b, top=top, notes=[f"rank {rank_b} against rank {rank_a} of the same profile"], new=new,
                  gone=gone, env=env, cfg=[], cross=False, warnings=list(prof.warnings), rank_pair=(rank_a, rank_b))
