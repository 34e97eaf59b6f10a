"""`compare`: run vs run (BASE TARGET) and rank vs rank (one profile), as a `Comparison`.

A thin front end over the pipeline of `analysis/compare/run.py`: this module loads the runs, hands in the
catalog's cached check run as each side's findings, and maps the `Attribution` onto the contract's
`Comparison`.
"""

from __future__ import annotations

from ..analysis.compare import env as envs
from ..analysis.compare import run
from ..analysis.compare.sides import Side
from ..analysis.models import Finding
from ..analysis.store import Profile
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


def _findings(prof: Profile) -> list[Finding]:
    return api.checks_run(prof).findings


def _model(a: run.Attribution, top: int, warnings: list[str]) -> Comparison:
    return Comparison(
        base=_side_model(a.base), target=_side_model(a.target), delta_ms=a.delta_ms, delta_pct=a.delta_pct,
        breakdown_delta=BreakdownDelta(**a.breakdown_delta),
        top_changes=[_to_change(r, a.bandwidth) for r in a.changes.head(top).itertuples(index=False)],
        env_changes=_env(a.env), config_changes=_env(a.cfg), findings=a.new, gone_findings=a.gone,
        per_rank=[RankDelta(base_rank=br, target_rank=tr, **d) for br, tr, d in a.per_rank],
        verdict=a.verdict, next_step=(f"stepdoctor explain {a.fix}" if a.fix else None), cross_vendor=a.cross,
        notes=a.notes, warnings=warnings, total_changes=len(a.changes), truncated=len(a.changes) > top)


def compare_runs(base: api.ProfileRef, target: api.ProfileRef, *, rank: int | None = None, step: int | None = None,
                 top: int = 15, first_step_only: bool = False) -> Comparison:
    """BASE vs TARGET: step delta, attribution, op/env/config changes, findings diff, verdict."""
    bp, tp = api.load(base), api.load(target)
    a = run.compare_runs(bp, tp, _findings, rank=rank, step=step, first_step_only=first_step_only)
    return _model(a, top, [f"base: {w}" for w in bp.warnings] + [f"target: {w}" for w in tp.warnings])


def compare_ranks(ref: api.ProfileRef, rank_a: int, rank_b: int, *, top: int = 15) -> Comparison:
    """Rank B (usually the slow one) against rank A inside one profile."""
    prof = api.load(ref)
    return _model(run.compare_ranks(prof, rank_a, rank_b, _findings), top, list(prof.warnings))
