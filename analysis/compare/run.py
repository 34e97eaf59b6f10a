"""The comparison pipeline: two sides in, the attribution out (step delta, dimensions, op changes, verdict).

`compare_runs` / `compare_ranks` are the whole pipeline: match ranks, build the sides, diff the findings of
`run_checks` (handed in as `findings_of`, so the caller's cached check run with its fixes attached is the
one diffed), diff environment and configuration, attribute. Everything a view shows about a comparison is decided here, so the
JSON answer, the CLI table and the report cannot disagree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from ..errors import UsageError
from ..models import Finding
from ..replay.own import OwnWork, own_work
from ..store import Profile
from . import env as envs
from . import ops
from .sides import Side, make_side, match_ranks, rank_side
from .verdict import (
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

DIMENSIONS = ("compute_ms", "communication_ms", "free_ms", "memory_ms", "host_ms")
_SIDE_ATTR = {"compute_ms": "compute_ms", "communication_ms": "comm_ms", "free_ms": "free_ms",
              "memory_ms": "memory_ms", "host_ms": "host_ms"}


def noise_ms(b: Side) -> float:
    """The per-step op delta below which an op did not move (see OP_NOISE_SHARE)."""
    return max(ZERO_MS, OP_NOISE_SHARE * (b.step_ms or 0.0))


def changes(b: Side, t: Side, cross: bool, noise: float = ZERO_MS) -> pd.DataFrame:
    """Every op that moved between the sides (columns CHANGE_COLUMNS), causes first: moved leaf ops by |delta|,
    then nesting annotations, sync waits and Python frames (effects or containers), then ops that did not move."""
    # (op table, kind label, by family): across vendors device op names never match, so kernels and
    # collectives are compared by family; host framework ops (aten::) and runtime APIs keep their names
    tables = ([("kernel", "family", True), ("comm", "family", True), ("api", "api", False), ("op", "op", False)]
              if cross else [("kernel", "kernel", False), ("comm", "comm", False), ("api", "api", False),
                             ("op", "op", False)])
    # HTA's iteration rule (a GPU op counts only with its launch in the step) is for parity with HTA's
    # same-vendor trace diff; msprof-analyze's NPU-vs-GPU compare counts every device op, so cross-vendor
    # tables do too (NCCL kernels launched before the trace started would otherwise vanish from the GPU side)
    parts = [ops.diff_tables(ops.op_table(b, k, by_family=fam, by_launch=not cross),
                             ops.op_table(t, k, by_family=fam, by_launch=not cross), label)
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
    # sync waits are effects of device time or host code elsewhere (ops.effect_waits), Python frames hold the
    # aten ops they call
    nest |= ops.effect_waits(df) | (df["kind"].isin(("op", "api")) & df["name"].map(
        lambda n: bool(ops.PY_FRAME.search(str(n)))).astype(bool))
    same = (df["delta_ms"].abs() < noise) & (df["count_base"].round(3) == df["count_target"].round(3))
    return pd.concat([df[~nest & ~same], df[nest & ~same], df[same]])


def finding_key(f: Finding, by_rank: bool) -> tuple:
    """What makes two findings the same across runs: check and subject, and the ranks when ranks match."""
    return (f.check, f.subject, tuple(f.ranks)) if by_rank else (f.check, f.subject)


def diff_findings(base: list[Finding], target: list[Finding], by_rank: bool) -> tuple[list[Finding], list[Finding]]:
    """(new in target, gone from base)."""
    bk = {finding_key(f, by_rank) for f in base}
    tk = {finding_key(f, by_rank) for f in target}
    return ([f for f in target if finding_key(f, by_rank) not in bk],
            [f for f in base if finding_key(f, by_rank) not in tk])


@dataclass
class Attribution:
    """Why step time moved from base to target: every number and sentence of a comparison."""

    base: Side
    target: Side
    delta_ms: float | None
    delta_pct: float | None
    breakdown_delta: dict[str, float | None]
    changes: pd.DataFrame
    verdict: str
    fix: str | None
    per_rank: list[tuple[int, int, dict[str, float | None]]]
    bandwidth: tuple[dict[str, float], dict[str, float]]
    notes: list[str] = field(default_factory=list)
    new: list[Finding] = field(default_factory=list)
    gone: list[Finding] = field(default_factory=list)
    env: list[envs.Changed] = field(default_factory=list)
    cfg: list[envs.Changed] = field(default_factory=list)
    cross: bool = False


def attribute(b: Side, t: Side, *, new: list[Finding], env: list[envs.Changed],
              cfg: list[envs.Changed], cross: bool,
              rank_pair: tuple[int, int] | None = None, own: dict[int, OwnWork] | None = None) -> Attribution:
    """The attribution of target against base. `new` are the target's new findings, `env` / `cfg` the
    changed variables and configuration facts; `rank_pair` makes it rank vs rank
    inside one profile (with `own`, the ranks' own work from the replay)."""
    noise = noise_ms(b)
    ch = changes(b, t, cross, noise)
    delta = diff_ms(b.step_ms, t.step_ms)
    pct = round(100.0 * delta / b.step_ms, 2) if delta is not None and b.step_ms else None
    bd = {k: diff_ms(getattr(b, a), getattr(t, a)) for k, a in _SIDE_ATTR.items()}
    dims = dim_deltas(b, t)
    env_t = envs.env_of(t.profile, t.ranks)
    cc, vendor = envs.compute_capability(t.profile, t.ranks), t.profile.info.vendor
    ctx = VerdictContext(ops=None if cross else ops.operator_deltas(ops.operator_table(b), ops.operator_table(t)),
                         base_compute_ms=b.compute_ms, base_step_ms=b.step_ms,
                         fits=lambda fx: envs.fix_fits(fx, vendor, cc, env_t))
    if rank_pair is not None:
        fix = verdict_sentence(delta, pct, dims, ch, env, new, cfg, noise=noise, ctx=ctx)[1]
        verdict = rank_verdict(dims, ch, rank_pair[0], rank_pair[1], new, noise, own, b.step_ms)
    else:
        late = late_rank(b, t)
        late_changes = (changes(rank_side(b, late.base_rank), rank_side(t, late.target_rank), cross, noise)
                        if late is not None else None)
        verdict, fix = verdict_sentence(delta, pct, dims, ch, env, new, cfg, late, late_changes, noise, ctx)
    per_rank = [(br, tr, {k: diff_ms(b.per_rank[br].get(k), t.per_rank[tr].get(k))
                          for k in ("step_ms", "compute_ms", "communication_ms", "free_ms")})
                for br, tr in zip(b.ranks, t.ranks, strict=False)]
    notes = (["different vendors: device ops compared by family (matmul, attention, vector, communication, "
              "memory), names are not matched one to one"] if cross else [])
    return Attribution(b, t, delta, pct, bd, ch, verdict, fix, per_rank,
                       (ops.comm_bandwidth(b), ops.comm_bandwidth(t)), notes, new, [], env, cfg, cross)


FindingsOf = Callable[[Profile], list[Finding]]


def compare_runs(bp: Profile, tp: Profile, findings_of: FindingsOf, *, rank: int | None = None,
                 step: int | None = None, first_step_only: bool = False) -> Attribution:
    """Target run against base run over matched ranks and (one or all) kept steps."""
    br, tr, notes = match_ranks(bp, tp, rank)
    b = make_side(bp, br, step, first_step_only)
    t = make_side(tp, tr, step, first_step_only)
    if step is not None and (not b.steps or not t.steps):
        raise UsageError(f"{bp.path if not b.steps else tp.path}: step {step} not in profile")
    if len(b.steps) != len(t.steps):
        notes.append(f"step counts differ ({len(b.steps)} vs {len(t.steps)}); values are per-step means")
    cross = (bp.info.vendor or "") != (tp.info.vendor or "") and "ascend" in f"{bp.info.vendor}{tp.info.vendor}"
    new, gone = diff_findings(findings_of(bp), findings_of(tp), by_rank=br == tr)
    env = envs.changed(envs.env_of(bp, br), envs.env_of(tp, tr))
    cfg = envs.changed(envs.config_of(bp, br), envs.config_of(tp, tr))
    a = attribute(b, t, new=new, env=env, cfg=cfg, cross=cross)
    a.notes, a.gone = notes + a.notes, gone
    return a


def compare_ranks(prof: Profile, rank_a: int, rank_b: int, findings_of: FindingsOf) -> Attribution:
    """Rank B (usually the slow one) against rank A inside one profile: B's findings that A lacks are new."""
    for r in (rank_a, rank_b):
        if r not in prof.info.ranks:
            raise UsageError(f"{prof.path}: rank {r} not in profile; ranks are {', '.join(map(str, prof.info.ranks))}")
    a, b = make_side(prof, [rank_a]), make_side(prof, [rank_b])
    fs = findings_of(prof)
    new = [f for f in fs if rank_b in f.ranks and rank_a not in f.ranks]
    gone = [f for f in fs if rank_a in f.ranks and rank_b not in f.ranks]
    env = envs.changed(envs.env_of(prof, [rank_a]), envs.env_of(prof, [rank_b]))
    att = attribute(a, b, new=new, env=env, cfg=[], cross=False, rank_pair=(rank_a, rank_b),
                    own=own_work(prof, [rank_a, rank_b]))
    att.notes, att.gone = [f"rank {rank_b} against rank {rank_a} of the same profile", *att.notes], gone
    return att
