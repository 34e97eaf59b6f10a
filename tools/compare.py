"""`compare`: run vs run (BASE TARGET) and rank vs rank (one profile), as a `Comparison`.

A thin front end over `analysis/compare/` (sides, op tables, environment, verdict, and the pipeline in
`run.py`): this module loads the runs, asks the catalog's `issues` for each side's findings (cached with
the profile) and maps the attribution onto the contract's `Comparison`.
"""

from __future__ import annotations

from ..analysis.compare import env as envs
from ..analysis.compare.run import Attribution, attribute, diff_findings
from ..analysis.compare.sides import Side, make_side, match_ranks
from ..analysis.errors import UsageError
from ..analysis.replay.own import own_work
from . import api
from .models import BreakdownDelta, Change, Comparison, EnvChange, RankDelta, RunSide


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _side_model(side: Side) -> RunSide:
    return RunSide(path=str(side.profile.path), step_ms=_r(side.step_ms), compute_ms=_r(side.compute_ms),
                   communication_ms=_r(side.comm_ms), free_ms=_r(side.free_ms), memory_ms=_r(side.memory_ms),
                   host_ms=_r(side.host_ms), ranks=side.ranks, steps=side.steps, format=side.profile.info.format)


def _to_change(r, bw: tuple[dict[str, float], dict[str, float]]) -> Change:
    bb = bt = None
    if r.kind == "comm":
        bb, bt = bw[0].get(str(r.name)), bw[1].get(str(r.name))
    return Change(kind=r.kind, name=str(r.name), base_ms=round(float(r.base_ms), 4),
                  target_ms=round(float(r.target_ms), 4), delta_ms=round(float(r.delta_ms), 4),
                  count_base=round(float(r.count_base), 3), count_target=round(float(r.count_target), 3),
                  change=r.change, bandwidth_base_gbps=None if bb is None else round(bb, 3),
                  bandwidth_target_gbps=None if bt is None else round(bt, 3))


def _env(cs: list[envs.Changed]) -> list[EnvChange]:
    return [EnvChange(name=c.name, base=c.base, target=c.target) for c in cs]


def _model(a: Attribution, *, top: int, notes: list[str], new, gone, env: list[envs.Changed],
           cfg: list[envs.Changed], cross: bool, warnings: list[str]) -> Comparison:
    return Comparison(
        base=_side_model(a.base), target=_side_model(a.target), delta_ms=a.delta_ms, delta_pct=a.delta_pct,
        breakdown_delta=BreakdownDelta(**a.breakdown_delta),
        top_changes=[_to_change(r, a.bandwidth) for r in a.changes.head(top).itertuples(index=False)],
        env_changes=_env(env), config_changes=_env(cfg), findings=new, gone_findings=gone,
        per_rank=[RankDelta(base_rank=br, target_rank=tr, **d) for br, tr, d in a.per_rank],
        verdict=a.verdict, next_step=(f"stepdoctor explain {a.fix}" if a.fix else None), cross_vendor=cross,
        notes=notes + a.notes, warnings=warnings, total_changes=len(a.changes), truncated=len(a.changes) > top)


def compare_runs(base: api.ProfileRef, target: api.ProfileRef, *, rank: int | None = None, step: int | None = None,
                 top: int = 15, first_step_only: bool = False) -> Comparison:
    """BASE vs TARGET: step delta, attribution, op/env/config changes, findings diff, verdict."""
    bp, tp = api.load(base), api.load(target)
    br, tr, notes = match_ranks(bp, tp, rank)
    b = make_side(bp, br, step, first_step_only)
    t = make_side(tp, tr, step, first_step_only)
    warnings = [f"base: {w}" for w in bp.warnings] + [f"target: {w}" for w in tp.warnings]
    if step is not None and (not b.steps or not t.steps):
        raise UsageError(f"{bp.path if not b.steps else tp.path}: step {step} not in profile")
    if len(b.steps) != len(t.steps):
        notes.append(f"step counts differ ({len(b.steps)} vs {len(t.steps)}); values are per-step means")
    cross = (bp.info.vendor or "") != (tp.info.vendor or "") and "ascend" in f"{bp.info.vendor}{tp.info.vendor}"
    new, gone = diff_findings(api.issues(bp).findings, api.issues(tp).findings, by_rank=br == tr)
    env = envs.changed(envs.env_of(bp, br), envs.env_of(tp, tr))
    cfg = envs.changed(envs.config_of(bp, br), envs.config_of(tp, tr))
    a = attribute(b, t, new=new, env=env, cfg=cfg, cross=cross)
    return _model(a, top=top, notes=notes, new=new, gone=gone, env=env, cfg=cfg, cross=cross, warnings=warnings)


def compare_ranks(ref: api.ProfileRef, rank_a: int, rank_b: int, *, top: int = 15) -> Comparison:
    """Rank B (usually the slow one) against rank A inside one profile."""
    prof = api.load(ref)
    for r in (rank_a, rank_b):
        if r not in prof.info.ranks:
            raise UsageError(f"{prof.path}: rank {r} not in profile; ranks are {', '.join(map(str, prof.info.ranks))}")
    a, b = make_side(prof, [rank_a]), make_side(prof, [rank_b])
    rep = api.issues(prof)
    new = [f for f in rep.findings if rank_b in f.ranks and rank_a not in f.ranks]
    gone = [f for f in rep.findings if rank_a in f.ranks and rank_b not in f.ranks]
    env = envs.changed(envs.env_of(prof, [rank_a]), envs.env_of(prof, [rank_b]))
    att = attribute(a, b, new=new, env=env, cfg=[], cross=False, rank_pair=(rank_a, rank_b),
                    own=own_work(prof, [rank_a, rank_b]))
    return _model(att, top=top, notes=[f"rank {rank_b} against rank {rank_a} of the same profile"], new=new,
                  gone=gone, env=env, cfg=[], cross=False, warnings=list(prof.warnings))
