"""`compare`: run vs run (BASE TARGET) and rank vs rank (one profile), as a `Comparison`.

The attribution itself is in `analysis/compare.py`; this module matches ranks, diffs the issue lists
and writes the verdict sentence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..analysis import compare as core
from ..analysis.checks.base import registry
from ..analysis.ingest.base import ProfileError
from ..analysis.metrics.names import short_name
from ..analysis.models import SEVERITY_ORDER, Finding
from ..analysis.thresholds import T
from . import api
from .models import BreakdownDelta, Change, Comparison, EnvChange, RankDelta, RunSide

# which change kinds can explain a dimension; device rows are further split by the dimension their time
# counts in (op_table's `dim`, see _candidates)
DIM_KINDS = {"compute": ("kernel", "family"), "communication": ("comm", "family"), "memory": ("kernel", "family"),
             "free": ("api", "op"), "host": ("api", "op")}
_ZERO_MS = 5e-4   # a per-step delta below this (and no count change) is no change at all
# an op whose per-step time moved less than this share of the step (and whose count did not change) did not
# move: a tenth of the step-level noise (core.NOISE_PCT); generated and real runs jitter by ~0.01-0.05%
_OP_NOISE_SHARE = core.NOISE_PCT / 100 / 10
_ALSO_SHARE = 0.25  # a second dimension is named when it moved by at least this share of the first


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def _d(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(b - a, 3)


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


_COLUMNS = ["kind", "name", "base_ms", "target_ms", "delta_ms", "count_base", "count_target", "change", "dim"]


def noise_ms(b: core.Side) -> float:
    """The per-step op delta below which an op did not move (see _OP_NOISE_SHARE)."""
    return max(_ZERO_MS, _OP_NOISE_SHARE * (b.step_ms or 0.0))


def _changes(b: core.Side, t: core.Side, cross: bool, noise: float = _ZERO_MS) -> pd.DataFrame:
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
    df = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=_COLUMNS)
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


_NEST = r"^(ProfilerStep#|## |#)"


def _candidates(changes: pd.DataFrame, dim: str, sign: int, noise: float) -> pd.DataFrame:
    """The changes that can explain `dim` moving in direction `sign` by more than `noise` ms, largest first.

    Ascend kernels are keyed by (op type, input shapes) for msprof-analyze parity; a cause is an op type,
    so the shapes of one type are summed here (a ×1.4 MatMulV2 is one cause, not five shape rows).
    """
    c = changes[changes["kind"].isin(DIM_KINDS[dim])]
    if dim in ("compute", "communication", "memory"):
        c = c[c["dim"].eq(dim)]
    c = c[~(c["kind"].eq("op") & c["name"].str.match(_NEST, na=False))]
    # a sync wait grows because the device work it waits for grew: an effect, never the cause named
    c = c[~c["name"].map(lambda n: core.is_sync_wait(str(n)) or bool(core.PY_FRAME.search(str(n))))]
    if c.empty:
        return c.assign(shapes=[])
    kernel = c["kind"].eq("kernel")
    c = c.assign(name=[core.op_type_of(str(n)) if k else str(n) for n, k in zip(c["name"], kernel, strict=True)],
                 shapes=1)
    c = c.groupby(["kind", "name"], as_index=False, sort=False).agg(
        delta_ms=("delta_ms", "sum"), count_base=("count_base", "sum"), count_target=("count_target", "sum"),
        shapes=("shapes", "sum"))
    c = c[c["delta_ms"] * sign >= noise]
    c = c.reindex((c["delta_ms"] * sign).sort_values(ascending=False).index)
    if dim in ("free", "host") and not c.empty:
        # host ops nest the runtime calls they make: aten::mm grows when a stream sync inside it waits, with
        # the same call count. A call whose count changed (a new sync, compile, malloc) is the cause, so it
        # leads when it explains at least a tenth of the largest growth.
        counted = (c["count_base"].round(2) != c["count_target"].round(2)) & (
            c["delta_ms"] * sign >= 0.1 * sign * c["delta_ms"].iloc[0])
        c = pd.concat([c[counted], c[~counted]])
    return c


def _calls(count_base: float, count_target: float) -> str:
    if round(count_base, 2) == round(count_target, 2):
        return ""
    return f", {count_base:.0f} -> {count_target:.0f} calls/step"


def _top_ops(ops: pd.DataFrame, sign: int, noise: float) -> str:
    """Up to 3 operators whose launched device time moved by `sign`, each at least a tenth of the first,
    with what moved inside each: "aten::scaled_dot_product_attention +20.4 ms (aten::bmm, ...)"."""
    c = ops[ops["delta_ms"] * sign >= noise]
    c = c.reindex((c["delta_ms"] * sign).sort_values(ascending=False).index)
    if c.empty:
        return ""
    c = c[c["delta_ms"] * sign >= 0.1 * sign * c["delta_ms"].iloc[0]]
    parts = [f"{r.op} {r.delta_ms:+.1f} ms" + (f" ({', '.join(r.kernels)})" if r.kernels else "")
             for r in c.head(3).itertuples(index=False)]
    return ": " + ", ".join(parts)


def _top_of(changes: pd.DataFrame, dim: str, sign: int, noise: float, ops: pd.DataFrame | None = None) -> str:
    if dim == "compute" and ops is not None and not ops.empty:
        text = _top_ops(ops, sign, noise)
        if text:
            return text
    cand = _candidates(changes, dim, sign, noise)
    # up to 3 compute causes, each at least a tenth of the first (a 1.2 ms AI-CPU op, not "+0.0 ms" riders)
    cand = cand[(cand["delta_ms"] * sign) >= 0.1 * sign * cand["delta_ms"].iloc[0]] if not cand.empty else cand
    parts = []
    for _, top in cand.head(3 if dim == "compute" else 1).iterrows():
        shapes = f" ({int(top['shapes'])} shapes)" if top["shapes"] > 1 else ""
        parts.append(f"{short_name(str(top['name']), 60)}{shapes} {top['delta_ms']:+.1f} ms"
                     f"{_calls(top['count_base'], top['count_target'])}")
    return ": " + ", ".join(parts) if parts else ""


def _dim_deltas(b: core.Side, t: core.Side) -> dict[str, float]:
    pairs = (("compute", b.compute_ms, t.compute_ms), ("communication", b.comm_ms, t.comm_ms),
             ("free", b.free_ms, t.free_ms), ("memory", b.memory_ms, t.memory_ms), ("host", b.host_ms, t.host_ms))
    return {k: v for k, x, y in pairs if (v := _d(x, y)) is not None}


@dataclass
class _Late:
    """A rank whose own work grew, with the dimension that grew on it and how long its peers wait."""

    base_rank: int
    target_rank: int
    dim: str
    dim_ms: float
    wait_ms: float


def _late_rank(b: core.Side, t: core.Side) -> _Late | None:
    """The rank that makes its peers wait, when waiting for it explains the communication growth.

    Collectives end together on every rank, so a rank whose own work (step minus not-overlapped
    communication) grows arrives late and its peers spend the difference waiting in the collective: their
    communication grows, its own does not. Waiting explains the peers' growth when the late rank's extra
    own work (beyond the peers' median) covers at least half of the peers' median communication growth.
    A slower link instead grows communication on every rank with no rank's own work growing.
    """
    pairs = list(zip(b.ranks, t.ranks, strict=False))
    if len(pairs) < 2:
        return None
    own: dict[tuple[int, int], float] = {}
    comm: dict[tuple[int, int], float] = {}
    for br, tr in pairs:
        ds = _d(b.per_rank[br]["step_ms"], t.per_rank[tr]["step_ms"])
        dc = _d(b.per_rank[br]["communication_ms"], t.per_rank[tr]["communication_ms"])
        if ds is None or dc is None:
            return None
        own[(br, tr)], comm[(br, tr)] = ds - dc, dc
    late = max(own, key=own.__getitem__)
    peers = [p for p in pairs if p != late]
    peer_own = float(np.median([own[p] for p in peers]))
    peer_wait = float(np.median([comm[p] for p in peers]))
    if peer_wait <= 0 or min(own[late] - peer_own, peer_wait) < 0.5 * peer_wait:
        return None
    br, tr = late
    deltas = {k: v for k in ("compute", "free", "memory", "host")
              if (v := _d(b.per_rank[br].get(f"{k}_ms"), t.per_rank[tr].get(f"{k}_ms"))) is not None}
    if not deltas:
        return None
    dim = max(deltas, key=deltas.__getitem__)
    return _Late(br, tr, dim, deltas[dim], peer_wait) if deltas[dim] > 0 else None


def _rank_verdict(dims: dict[str, float], changes: pd.DataFrame, a: int, b: int, new: list[Finding],
                  noise: float) -> str:
    """Rank B against rank A of one job: where B spends more time, then where A does."""
    if not dims:
        return f"rank {b} vs rank {a}: no device data to compare"
    worse = max(dims, key=lambda k: dims[k])
    if dims[worse] <= 0:
        return f"rank {b} spends no more time than rank {a} in any dimension"
    text = f"rank {b} vs rank {a}: {worse} {dims[worse]:+.1f} ms per step{_top_of(changes, worse, 1, noise)}"
    better = min(dims, key=lambda k: dims[k])
    if dims[better] < 0:
        text += f"; rank {a} has {-dims[better]:.1f} ms more {better} per step"
    related = _related(new, worse)
    if related:
        text += f"; finding: {related[0].title}"
    return text


def _finding_text(f: Finding, changes: pd.DataFrame) -> str:
    """A new finding's title, with the dimension and the op change behind it when the subject is an op
    (an API, a host op, or an Ascend op type whose shapes are summed)."""
    rows = changes[changes["name"].map(lambda n: core.op_type_of(str(n))).eq(f.subject)]
    if rows.empty:
        return f.title
    calls = _calls(rows["count_base"].sum(), rows["count_target"].sum()).lstrip(", ")
    return (f"{f.title}, in {_dim_of(f.check)}: {short_name(f.subject, 60)} "
            f"{calls + ', ' if calls else ''}{rows['delta_ms'].sum():+.1f} ms")


@dataclass
class _Context:
    """What the verdict needs beyond the op changes: device time by launching operator (Kineto), the base
    compute time (ms per step) and which fix ids fit the target's hardware and environment."""

    ops: pd.DataFrame | None = None
    base_compute_ms: float | None = None
    base_step_ms: float | None = None
    fits: Callable[[str], bool] = lambda _fix: True


def _fix_of(findings: list[Finding], fits: Callable[[str], bool]) -> str | None:
    """The first fitting fix of the most severe, most costly finding that has one."""
    for f in sorted(findings, key=lambda f: (SEVERITY_ORDER[f.severity], -(f.impact_ms or 0))):
        ok = [x for x in f.fixes if fits(x)]
        if ok:
            return ok[0]
    return None


def _hidden_compute(delta: float, dims: dict[str, float], ctx: _Context, noise: float) -> str | None:
    """Device compute that grew while the step did not grow with it: the host bounds the step (under the
    profiler, often the profiler's own overhead), so the device work hides in what was idle time."""
    grew = dims.get("compute")
    base = ctx.base_compute_ms
    # large against the device's own work and not lost in step-level noise (the same 1% as a step change)
    floor = max(noise, T.compare_hidden_compute_pct.value / 100 * base if base else 0.0,
                core.NOISE_PCT / 100 * (ctx.base_step_ms or 0.0))
    if grew is None or not base or grew < floor or delta >= 0.5 * grew:
        return None
    free = dims.get("free")
    idle = f"; device idle {free:+.1f} ms" if free is not None else ""
    return (f"device compute {grew:+.1f} ms per step ({100 * grew / base:+.0f}%) is hidden because the host bounds "
            f"the step under the profiler{idle}{_top_of(pd.DataFrame(columns=_COLUMNS), 'compute', 1, noise, ctx.ops) or ''}")


def _verdict(delta: float | None, pct: float | None, dims: dict[str, float], changes: pd.DataFrame,
             env: list[EnvChange], new: list[Finding], cfg: list[EnvChange] | None = None,
             late: _Late | None = None, late_changes: pd.DataFrame | None = None,
             noise: float = _ZERO_MS, ctx: _Context | None = None) -> tuple[str, str | None]:
    """One sentence naming the largest cause with numbers, and the next step (a fix of a new finding that
    explains the change and fits the target's hardware)."""
    ctx = ctx or _Context()
    if delta is None:
        return "step time unknown on one side (no ProfilerStep); see top_changes", None
    head = f"step time {delta:+.1f} ms ({pct:+.1f}%)" if pct is not None else f"step time {delta:+.1f} ms"
    hw = [c for c in (cfg or []) if c.name in ("device_name", "world_size", "vendor")]
    setup = "different setup: " + ", ".join(f"{c.name} {c.base} -> {c.target}" for c in hw) if hw else ""
    hidden = _hidden_compute(delta, dims, ctx, noise)
    if hidden:
        return f"{head}, but {hidden}" + (f"; {setup}" if setup else ""), _fix_of(_related(new, "compute"), ctx.fits)
    fix = _fix_of(new, ctx.fits)
    small = pct is not None and abs(pct) < core.NOISE_PCT
    if small or not dims:
        lead = []
        if env:
            lead.append("environment changed: " + ", ".join(f"{e.name} {e.base or 'unset'} -> {e.target or 'unset'}"
                                                            for e in env[:3]))
        if new:
            lead.append("new: " + "; ".join(_finding_text(f, changes) for f in new[:2]))
        if setup:
            lead.append(setup)
        top = changes.iloc[0] if not changes.empty else None
        if top is not None and not lead and (abs(top["delta_ms"]) >= noise or top["count_base"] != top["count_target"]):
            lead.append(f"largest op change {short_name(str(top['name']), 60)} {top['delta_ms']:+.2f} ms")
        elif not lead:
            lead.append("no op changed")
        return f"{head}, within noise" + (f"; {'; '.join(lead)}" if lead else ""), fix
    sign = 1 if delta >= 0 else -1
    dim = max(dims, key=lambda k: sign * dims[k])
    if dim == "communication" and sign > 0 and late is not None and late_changes is not None:
        # the peers wait for one rank: name that rank and what grew on it, not the collective they wait in
        text = (f"{head}, mostly rank {late.target_rank} {late.dim} ({late.dim_ms:+.1f} ms on that rank; "
                f"its peers wait {late.wait_ms:+.1f} ms in communication){_top_of(late_changes, late.dim, 1, noise)}")
        dim = late.dim
    else:
        text = f"{head}, mostly {dim} ({dims[dim]:+.1f} ms){_top_of(changes, dim, sign, noise, ctx.ops)}"
        # a second dimension that moved the same way by a good part of the first is a second cause: name it
        # (e.g. a run that is slower in compute and also copies 250x more, each with its own fix)
        rest = [k for k in dims if k != dim and sign * dims[k] > 0 and sign * dims[k] >= _ALSO_SHARE * abs(dims[dim])]
        if rest:
            also = max(rest, key=lambda k: sign * dims[k])
            text += f"; also {also} ({dims[also]:+.1f} ms){_top_of(changes, also, sign, noise, ctx.ops)}"
    if setup:
        text += "; " + setup
    related = _related(new, dim)
    if related:
        text += f"; new finding: {related[0].title}"
    elif env:
        text += f"; environment changed: {env[0].name} {env[0].base or 'unset'} -> {env[0].target or 'unset'}"
    # "next" only from a finding that explains the dimension named: a fix for something else is not the next step
    return text, _fix_of(related, ctx.fits)


# Until each check class declares `dimension` (analysis/checks/base.py), the dimensions of the checks that
# explain something other than compute; a class's own declaration wins.
_UNDECLARED_DIMENSION = {
    "communication": {"slow-link", "small-packet", "bandwidth-contention", "retransmission", "byte-misalignment",
                      "exposed-comm-tail"},
    "memory": {"h2d-pageable"},
    "free": {"host-bound", "slow-dataloader", "gc-pause", "op-compile", "sync-stream", "memory-ops",
             "env-var", "sync-batchnorm"},
}


def _dim_of(check: str) -> str:
    """The breakdown dimension a finding of `check` explains: the check class's `dimension`, else the table
    above, else compute."""
    cls = registry().get(check)
    declared = getattr(cls, "dimension", None) if cls is not None else None
    if declared:
        return str(declared)
    return next((dim for dim, checks in _UNDECLARED_DIMENSION.items() if check in checks), "compute")


def _related(new: list[Finding], dim: str) -> list[Finding]:
    """New findings that explain `dim`; host-side checks explain both device idle (free) and host time.
    A slow-rank finding explains the dimension it names."""
    want = {"free", "host"} if dim in ("free", "host") else {dim}
    return [f for f in new if (f.subject if f.check == "slow-rank" else _dim_of(f.check)) in want]


def _build(b: core.Side, t: core.Side, *, top: int, notes: list[str], new: list[Finding], gone: list[Finding],
           env: list[EnvChange], cfg: list[EnvChange], cross: bool, warnings: list[str],
           rank_pair: tuple[int, int] | None = None) -> Comparison:
    noise = noise_ms(b)
    changes = _changes(b, t, cross, noise)
    delta = _d(b.step_ms, t.step_ms)
    pct = round(100.0 * delta / b.step_ms, 2) if delta is not None and b.step_ms else None
    bd = BreakdownDelta(compute_ms=_d(b.compute_ms, t.compute_ms), communication_ms=_d(b.comm_ms, t.comm_ms),
                        free_ms=_d(b.free_ms, t.free_ms), memory_ms=_d(b.memory_ms, t.memory_ms),
                        host_ms=_d(b.host_ms, t.host_ms))
    dims = _dim_deltas(b, t)
    env_t = core.env_of(t.profile, t.ranks)
    cc, vendor = core.compute_capability(t.profile, t.ranks), t.profile.info.vendor
    ctx = _Context(ops=None if cross else core.operator_deltas(core.operator_table(b), core.operator_table(t)),
                   base_compute_ms=b.compute_ms, base_step_ms=b.step_ms, fits=lambda fx: core.fix_fits(fx, vendor, cc, env_t))
    if rank_pair is not None:
        fix = _verdict(delta, pct, dims, changes, env, new, cfg, noise=noise, ctx=ctx)[1]
        verdict = _rank_verdict(dims, changes, rank_pair[0], rank_pair[1], new, noise)
    else:
        late = _late_rank(b, t)
        late_changes = (_changes(core.rank_side(b, late.base_rank), core.rank_side(t, late.target_rank), cross,
                                 noise) if late is not None else None)
        verdict, fix = _verdict(delta, pct, dims, changes, env, new, cfg, late, late_changes, noise, ctx)
    per_rank = [RankDelta(base_rank=br, target_rank=tr,
                          **{k: _d(b.per_rank[br].get(k), t.per_rank[tr].get(k))
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
