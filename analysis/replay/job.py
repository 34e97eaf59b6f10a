"""The replay of a whole profile: its steps' inputs and null replay (`prepare`), the what-if answers and the
critical path, each from the opened profile."""

from __future__ import annotations

import numpy as np

from ..errors import ProfileError
from ..metrics.metadata import decoded
from ..metrics.stages import of_profile
from ..store import Profile
from ..text import span_text
from .inputs import step_inputs
from .models import CriticalPath, Replay, WhatIf
from .noise import standing_out
from .whatif import (
    Step,
    at_median,
    balanced,
    chain,
    comm_median,
    ideal_of,
    rank_work_ms,
    replay_steps,
    scenario,
    slowdown,
    verdict,
)


def prepare(prof: Profile) -> tuple[list[Step], Replay] | None:
    """Every kept step's replay inputs and the null replay, or None where no collective is matched on two or
    more ranks in a kept step. Computed once per opened profile (the report, what-if, the critical path and the
    checks share it); callers must not change it."""
    return prof.derived("replay.prepare", lambda: _prepare(prof))


def _prepare(prof: Profile) -> tuple[list[Step], Replay] | None:
    st = of_profile(prof)
    inputs, source = step_inputs(lambda q: prof.sql(q), st[0] if st else None)
    inputs = [si for si in inputs if not si.rows.empty]
    if not inputs:
        return None
    steps, rep = replay_steps(inputs)
    rep.source = source
    rep.ranks = sorted({int(r) for si in inputs for r in si.ranks})
    traced = {int(r) for (r,) in prof.rows("SELECT DISTINCT rank FROM steps")}
    rep.coarse_ranks = [r for r in rep.ranks if r not in traced]
    rep.missing_ranks = list(prof.info.missing_ranks)
    return steps, rep


def what_if(prof: Profile, ranks_at_median: list[int] | None = None, stages_at_median: list[int] | None = None,
            comm_at_median: bool = False, stages: dict[int, int] | None = None, no_stalls: list[int] | None = None,
            ops: dict[str, float] | None = None) -> WhatIf:
    """Replay every kept step; answer the scenarios asked, or, with none, the ideal job, its slowdown S and a
    verdict. `stages`: rank -> pipeline stage where known; `no_stalls`: ranks without their host stalls;
    `ops`: op name -> factor on its time (`edits`). Raises ProfileError when nothing can be replayed."""
    path = prof.info.path
    got = prepare(prof)
    if got is None:
        raise ProfileError(path or None, _nothing(prof))
    steps, rep = got
    rep = rep.model_copy(deep=True)   # the answer is the caller's; the memoised replay stays as it is
    bad = rep.abstained_steps
    warnings = []
    clipped = sum(s.p.clipped for s in steps)
    if clipped:
        warnings.append(f"{clipped} measured gap(s) were negative (overlap on one lane, or clocks) and were "
                        "taken as 0")
    if len(bad) == len(steps):
        raise ProfileError(path or None, f"no step can be replayed ({rep.reason}): what-if answers would not be "
                                         "trustworthy")
    scenarios = []
    for r in ranks_at_median or []:
        if r not in rep.ranks:
            raise ProfileError(path or None, f"rank {r} is not in the profile (ranks {rep.ranks})")
        scenarios.append(scenario(steps, bad, f"rank {r} at the median of its peers", at_median(steps, [r])))
    for st in stages_at_median or []:
        members = sorted(r for r, v in (stages or {}).items() if v == st)
        if not members:
            raise ProfileError(path or None, f"stage {st} is not known in this profile "
                                             f"(stages {sorted(set((stages or {}).values()))})")
        scenarios.append(scenario(steps, bad, f"stage {st} (ranks {members}) doing the median work of the other "
                                              "stages", balanced(steps, stages or {}, [st])))
    if comm_at_median:
        scenarios.append(scenario(steps, bad, "communication at the median", comm_median))
    scenarios += _edits(prof, steps, bad, rep.ranks, no_stalls or [], ops or {})
    staged = stages if stages and len(set(stages.values())) >= 2 else None
    sd = slowdown(steps, bad, staged)
    # the ranks that weigh most on the ideal, each moved to its peers' median: the verdict stands on these
    used = [s for s in steps if s.si.step not in bad]
    ranked = standing_out(used, len({int(r) for s in used for r in s.si.ranks}), 0.0, staged)
    out = set(ranked)
    top = ranked[:3] or [r for r in sorted(sd.by_rank, key=lambda r: -sd.by_rank[r])[:1] if not staged]
    tried = {r: scenario(steps, bad, f"rank {r} at the median of its peers", at_median(steps, [r], staged))
             for r in top}
    recovered = {r: -sc.delta_ms for r, sc in tried.items()}
    by_stage = {st: scenario(steps, bad, f"stage {st} (ranks {sorted(r for r, v in staged.items() if v == st)}) "
                                         "doing the median work of the other stages", balanced(steps, staged, [st]))
                for st in sorted(set(staged.values()))} if staged else {}
    if not scenarios:
        scenarios.append(scenario(steps, bad, "the ideal job: every rank at the median, communication at the median"
                                  + (", every stage doing the median stage's work" if staged else ""),
                                  ideal_of(staged)))
        scenarios += [sc for r, sc in tried.items() if r in out]
        scenarios += [sc for sc in by_stage.values() if sc.delta_ms < 0]
    stage_gain = {st: -sc.delta_ms for st, sc in by_stage.items()}
    if rep.abstained_steps:
        warnings.append(f"steps {rep.abstained_steps} not used: {rep.reason}")
    warnings += replay_scope(rep) + shared_hosts(prof)
    return WhatIf(path=path, replay=rep, scenarios=scenarios, slowdown=sd,
                  verdict=verdict(sd, recovered, out, stage_gain, staged or {}, rank_work_ms(used)), warnings=warnings)


def shared_hosts(prof: Profile) -> list[str]:
    """What the replay does not model, in words: ranks without a device that share one host (the traces' host
    name), whose op times move with each other's load on its cores. The replay keeps every other rank's
    durations as measured, so a what-if that takes work off one of them speeds none of the others up."""
    cpu = {int(r) for (r,) in prof.rows("SELECT rank FROM ranks WHERE vendor = 'cpu'")}
    hosts: dict[str, list[int]] = {}
    for rank, name in decoded(lambda q: prof.sql(q), "host_name"):
        if rank in cpu and isinstance(name, str) and name:
            hosts.setdefault(name, []).append(rank)
    return [f"ranks {span_text(sorted(rs))} run without a device on one host ({name}): their op times move with "
            "each other's load on its cores, which the replay does not model; taking work off one of them speeds "
            "none of the others up here, so the gain can be larger than predicted"
            for name, rs in sorted(hosts.items()) if len(rs) >= 2]


def replay_scope(rep: Replay) -> list[str]:
    """What the replay could not see, in words: ranks without trace events, ranks without any profile."""
    out = []
    if rep.coarse_ranks:
        out.append(f"ranks {span_text(rep.coarse_ranks)} have no trace events: their step windows are inferred from "
                   "their step tables (each step ends at its last collective), so what they did after it is unknown")
    if rep.missing_ranks:
        one = len(rep.missing_ranks) == 1
        out.append(f"{'rank' if one else 'ranks'} {span_text(rep.missing_ranks)} of the job {'has' if one else 'have'} "
                   "no profile: collectives are replayed without them (a wait for them reads as transfer time), "
                   f"and {'it' if one else 'none of them'} can be named")
    return out


def _edits(prof: Profile, steps: list[Step], bad: list[int], ranks: list[int], no_stalls: list[int],
           ops: dict[str, float]) -> list:
    from .edits import no_stalls as without_stalls
    from .edits import op_scaled

    path = prof.info.path
    out = []
    cur = prof.cursor()
    try:
        for r in no_stalls:
            if r not in ranks:
                raise ProfileError(path or None, f"rank {r} is not in the profile (ranks {ranks})")
            out.append(scenario(steps, bad, f"rank {r} without host stalls (data loading, untraced gaps)",
                                without_stalls(cur, steps, [r])))
        for name, factor in ops.items():
            if not factor >= 0:
                raise ProfileError(path or None, f"--op {name}: the factor must be 0 or more, got {factor}")
            params, ms = op_scaled(cur, steps, name, factor)
            if ms <= 0:
                raise ProfileError(path or None, f"no op named {name!r} runs in the replayed steps' compute windows")
            out.append(scenario(steps, bad, f"{name} at x{factor:g} ({ms:.2f} ms per step measured)", params))
    finally:
        cur.close()
    return out


def replayed_for(prof: Profile, ranks: list[int]) -> list[Step] | None:
    """The replayed steps where the replay speaks for `ranks`: every step's null replay holds and each rank is
    replayed; else None (as for slow-rank: a model that misses one step speaks for none)."""
    got = prepare(prof)
    if got is None:
        return None
    steps, rep = got
    if rep.abstained_steps or not steps or not all(r in rep.ranks for r in ranks):
        return None
    return steps


def gain_without(prof: Profile, ranks: list[int], parts: tuple[str, ...]) -> float | None:
    """What the job gains per step (ms, mean over the steps) if `ranks` spent no time in `parts` of their compute
    windows (`edits.no_stalls`: data_loading, untraced, ...), by the replay; None where it cannot say (nothing
    replayed, a step whose null replay misses, a rank not replayed)."""
    from .edits import no_stalls as without

    steps = replayed_for(prof, ranks)
    if steps is None:
        return None
    cur = prof.cursor()
    try:
        params = without(cur, steps, ranks, parts)
    finally:
        cur.close()
    gain = [s.measured - p for s, p in zip(steps, chain(steps, params), strict=True)]
    return round(max(float(np.mean(gain)), 0.0), 3)


def _nothing(prof: Profile) -> str:
    p2p = prof.rows("SELECT count(*) FROM comm_ops WHERE lower(op_type) IN ('send', 'receive', 'recv')")[0][0]
    if p2p:
        return ("nothing to replay: the only communication is pipeline send/recv, and their peers are not known or "
                "do not pair (gloo records them only with record_shapes=True; NCCL in record_param_comms)")
    return ("nothing to replay: no collective is matched on two or more ranks in a kept step (one rank, or no "
            "communication recorded)")


def critical_path_of(prof: Profile, step: int | None = None) -> CriticalPath:
    """The critical path of one replayed step (default: the slowest that replays within the limit). Raises
    ProfileError where nothing can be replayed or the step asked is not replayed."""
    got = prepare(prof)
    path = prof.info.path
    if got is None:
        raise ProfileError(path or None, _nothing(prof))
    steps, rep = got
    ok = [s for s in steps if s.si.step not in rep.abstained_steps]
    if step is not None:
        pick = [s for s in steps if s.si.step == step]
        if not pick:
            raise ProfileError(path or None, f"step {step} is not replayed (steps {[s.si.step for s in steps]})")
        if step in rep.abstained_steps:
            raise ProfileError(path or None, f"step {step} replays {pick[0].error_pct:.1f}% away from its measured "
                                             f"time (limit {rep.max_error_pct:g}%): no path is drawn from it")
        s = pick[0]
    elif ok:
        s = max(ok, key=lambda x: x.measured)
    else:
        raise ProfileError(path or None, f"no step replays within {rep.max_error_pct:g}% ({rep.reason})")
    from .critical import critical_path

    return critical_path(s, path, round(s.error_pct, 3))
