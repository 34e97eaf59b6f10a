"""The compare verdict: which dimension moved, what inside it explains the move, and the next step.

Input is the op change table of `compare/run.py` (columns CHANGE_COLUMNS, per-step ms), the per-dimension
step deltas and the target's new findings; output is one sentence and a fix id. The operator view
(`ops.operator_deltas`) names what a person calls (aten::scaled_dot_product_attention) in place of
kernel signatures; sync waits and Python frames are never named as causes; a compute growth that a
host-bound profiled step hides is said as such.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from ..checks.base import registry
from ..models import SEVERITY_ORDER, Finding
from ..replay.own import OwnWork
from ..text import PART_TEXT, ms_text
from ..thresholds import T
from ..timeline.names import short_name
from . import ops, sides


class _NamedChange(Protocol):
    """An environment / configuration change (tools.models.EnvChange)."""

    name: str
    base: str | None
    target: str | None


# which change kinds can explain a dimension; device rows are further split by the dimension their time
# counts in (op_table's `dim`, see _candidates)
DIM_KINDS = {"compute": ("kernel", "family"), "communication": ("comm", "family"), "memory": ("kernel", "family"),
             "free": ("api", "op"), "host": ("api", "op")}
ZERO_MS = 5e-4   # a per-step delta below this (and no count change) is no change at all
# an op whose per-step time moved less than this share of the step (and whose count did not change) did not
# move: a tenth of the step-level noise (sides.NOISE_PCT); generated and real runs jitter by ~0.01-0.05%
OP_NOISE_SHARE = sides.NOISE_PCT / 100 / 10
_ALSO_SHARE = 0.25  # a second dimension is named when it moved by at least this share of the first

CHANGE_COLUMNS = ["kind", "name", "base_ms", "target_ms", "delta_ms", "count_base", "count_target", "change", "dim"]


def diff_ms(a: float | None, b: float | None) -> float | None:
    """b − a rounded to the µs (ms units), None when either is unknown."""
    return None if a is None or b is None else round(b - a, 3)


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
    frames = c["name"].map(lambda n: bool(ops.PY_FRAME.search(str(n)))).astype(bool)
    c = c[~(frames | ops.effect_waits(c))]
    if c.empty:
        return c.assign(shapes=[])
    kernel = c["kind"].eq("kernel")
    c = c.assign(name=[ops.op_type_of(str(n)) if k else str(n) for n, k in zip(c["name"], kernel, strict=True)],
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
    # two decimals under 1 ms, so a small change does not read "+0.0 ms"
    parts = [f"{r.op} {r.delta_ms:+.{1 if abs(r.delta_ms) >= 1 else 2}f} ms"
             + (f" ({', '.join(r.kernels)})" if r.kernels else "")
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


def dim_deltas(b: sides.Side, t: sides.Side) -> dict[str, float]:
    pairs = (("compute", b.compute_ms, t.compute_ms), ("communication", b.comm_ms, t.comm_ms),
             ("free", b.free_ms, t.free_ms), ("memory", b.memory_ms, t.memory_ms), ("host", b.host_ms, t.host_ms))
    return {k: v for k, x, y in pairs if (v := diff_ms(x, y)) is not None}


@dataclass
class LateRank:
    """A rank whose own work grew, with the dimension that grew on it and how long its peers wait."""

    base_rank: int
    target_rank: int
    dim: str
    dim_ms: float
    wait_ms: float


def late_rank(b: sides.Side, t: sides.Side) -> LateRank | None:
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
        ds = diff_ms(b.per_rank[br]["step_ms"], t.per_rank[tr]["step_ms"])
        dc = diff_ms(b.per_rank[br]["communication_ms"], t.per_rank[tr]["communication_ms"])
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
              if (v := diff_ms(b.per_rank[br].get(f"{k}_ms"), t.per_rank[tr].get(f"{k}_ms"))) is not None}
    if not deltas:
        return None
    dim = max(deltas, key=deltas.__getitem__)
    return LateRank(br, tr, dim, deltas[dim], peer_wait) if deltas[dim] > 0 else None


def rank_verdict(dims: dict[str, float], changes: pd.DataFrame, a: int, b: int, new: list[Finding],
                  noise: float, own: dict[int, OwnWork] | None = None, step_ms: float | None = None) -> str:
    """Rank B against rank A of one job. Where the replay holds (`own`), the ranks of one job end their steps
    together, so their step-level dimensions barely differ: the verdict leads with which of the two does more
    of its own work (and in which part) and how long the other waits for it. Otherwise: where B spends more
    time, then where A does."""
    lead = _own_text(own, a, b, step_ms)
    if lead:
        related = _related(new, "free") + _related(new, "compute")
        return lead + (f"; finding: {related[0].title}" if related else "")
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


def _own_text(own: dict[int, OwnWork] | None, a: int, b: int, step_ms: float | None) -> str:
    """"rank 1 vs rank 0: rank 1 does 53.3 ms more of its own work per step, most of it nothing traced (...):
    +47.2 ms; rank 0 waits 53.3 ms more per step in collectives for it (replay of 3 steps)", or "" where the two
    differ by
    less than a rank must to be named (T.slow_rank_min_excess_pct of the step, at least
    T.straggler_min_wait_ms)."""
    if not own or a not in own or b not in own:
        return ""
    d = own[b].own_ms - own[a].own_ms
    floor = max(T.straggler_min_wait_ms.value, T.slow_rank_min_excess_pct.value / 100 * (step_ms or 0.0))
    if abs(d) < floor:
        return ""
    slow, fast = (b, a) if d > 0 else (a, b)
    parts = {k: own[slow].parts_ms[k] - own[fast].parts_ms[k] for k in own[slow].parts_ms}
    part = max(parts, key=lambda k: parts[k])
    waits = own[fast].wait_ms - own[slow].wait_ms
    text = (f"rank {b} vs rank {a}: rank {slow} does {ms_text(abs(d))} more of its own work per step, most of "
            f"it {PART_TEXT[part]}: {parts[part]:+.1f} ms")
    if waits > 0:
        text += f"; rank {fast} waits {ms_text(waits)} more per step in collectives for it"
    return text + f" (replay of {own[slow].steps} steps)"


def _finding_text(f: Finding, changes: pd.DataFrame) -> str:
    """A new finding's title, with the dimension and the op change behind it when the subject is an op
    (an API, a host op, or an Ascend op type whose shapes are summed)."""
    rows = changes[changes["name"].map(lambda n: ops.op_type_of(str(n))).eq(f.subject)]
    if rows.empty:
        return f.title
    calls = _calls(rows["count_base"].sum(), rows["count_target"].sum()).lstrip(", ")
    return (f"{f.title}, in {_dim_of(f.check)}: {short_name(f.subject, 60)} "
            f"{calls + ', ' if calls else ''}{rows['delta_ms'].sum():+.1f} ms")


@dataclass
class VerdictContext:
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


def _hidden_compute(delta: float, dims: dict[str, float], ctx: VerdictContext, noise: float) -> str | None:
    """Device compute that grew while the step did not grow with it: the host bounds the step (under the
    profiler, often the profiler's own overhead), so the device work hides in what was idle time."""
    grew = dims.get("compute")
    base = ctx.base_compute_ms
    # large against the device's own work and not lost in step-level noise (the same 1% as a step change)
    floor = max(noise, T.compare_hidden_compute_pct.value / 100 * base if base else 0.0,
                sides.NOISE_PCT / 100 * (ctx.base_step_ms or 0.0))
    if grew is None or not base or grew < floor or delta >= 0.5 * grew:
        return None
    free = dims.get("free")
    idle = f"; device idle {free:+.1f} ms" if free is not None else ""
    return (f"device compute {grew:+.1f} ms per step ({100 * grew / base:+.0f}%) is hidden because the host bounds "
            f"the step under the profiler{idle}{_top_of(pd.DataFrame(columns=CHANGE_COLUMNS), 'compute', 1, noise, ctx.ops) or ''}")


def verdict_sentence(delta: float | None, pct: float | None, dims: dict[str, float], changes: pd.DataFrame,
             env: list[_NamedChange], new: list[Finding], cfg: list[_NamedChange] | None = None,
             late: LateRank | None = None, late_changes: pd.DataFrame | None = None,
             noise: float = ZERO_MS, ctx: VerdictContext | None = None) -> tuple[str, str | None]:
    """One sentence naming the largest cause with numbers, and the next step (a fix of a new finding that
    explains the change and fits the target's hardware)."""
    ctx = ctx or VerdictContext()
    if delta is None:
        return "step time unknown on one side (no ProfilerStep); see top_changes", None
    head = f"step time {delta:+.1f} ms ({pct:+.1f}%)" if pct is not None else f"step time {delta:+.1f} ms"
    hw = [c for c in (cfg or []) if c.name in ("device_name", "world_size", "vendor")]
    setup = "different setup: " + ", ".join(f"{c.name} {c.base} -> {c.target}" for c in hw) if hw else ""
    hidden = _hidden_compute(delta, dims, ctx, noise)
    if hidden:
        return f"{head}, but {hidden}" + (f"; {setup}" if setup else ""), _fix_of(_related(new, "compute"), ctx.fits)
    fix = _fix_of(new, ctx.fits)
    small = pct is not None and abs(pct) < sides.NOISE_PCT
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
def _dim_of(check: str) -> str:
    """The breakdown dimension a finding of `check` explains: the check class's `dimension` (compute for a
    check this build does not know)."""
    cls = registry().get(check)
    return (cls.dimension if cls is not None else None) or "compute"


def _related(new: list[Finding], dim: str) -> list[Finding]:
    """New findings that explain `dim`; host-side checks explain both device idle (free) and host time.
    A slow-rank finding explains the dimension it names."""
    want = {"free", "host"} if dim in ("free", "host") else {dim}
    return [f for f in new if (f.subject if f.check == "slow-rank" else _dim_of(f.check)) in want]
