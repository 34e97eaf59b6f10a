"""Cross-rank replay of each step from its collectives, and the what-if answers built on it."""

from __future__ import annotations

from ..errors import ProfileError
from ..store import Profile
from .inputs import step_inputs
from .models import WhatIf
from .whatif import at_median, comm_median, ideal, replay_steps, scenario, slowdown, verdict

__all__ = ["WhatIf", "what_if"]


def what_if(prof: Profile, ranks_at_median: list[int] | None = None, stages_at_median: list[int] | None = None,
            comm_at_median: bool = False, stages: dict[int, int] | None = None) -> WhatIf:
    """Replay every kept step; answer the scenarios asked, or, with none, the ideal job, its slowdown S and a
    verdict. `stages`: rank -> pipeline stage where known. Raises ProfileError when nothing can be replayed."""
    inputs, source = step_inputs(lambda q: prof.sql(q))
    path = prof.info.path
    if not inputs or all(si.rows.empty for si in inputs):
        raise ProfileError(path or None, "nothing to replay: no collective is matched on two or more ranks in a "
                                         "kept step (one rank, or no communication recorded)")
    steps, rep = replay_steps([si for si in inputs if not si.rows.empty])
    rep.source = source
    rep.ranks = sorted({int(r) for si in inputs for r in si.ranks})
    warnings = []
    clipped = sum(s.p.clipped for s in steps)
    if clipped:
        warnings.append(f"{clipped} measured gap(s) were negative (overlap on one lane, or clocks) and were "
                        "taken as 0")
    if not steps:
        raise ProfileError(path or None, f"no step can be replayed within {rep.max_error_pct:g}% of its measured "
                                         f"time ({rep.reason}): what-if answers would not be trustworthy")
    scenarios = []
    for r in ranks_at_median or []:
        if r not in rep.ranks:
            raise ProfileError(path or None, f"rank {r} is not in the profile (ranks {rep.ranks})")
        scenarios.append(scenario(steps, f"rank {r} at the median of its peers", lambda s, r=r: at_median(s, [r])))
    for st in stages_at_median or []:
        members = sorted(r for r, v in (stages or {}).items() if v == st)
        if not members:
            raise ProfileError(path or None, f"stage {st} is not known in this profile "
                                             f"(stages {sorted(set((stages or {}).values()))})")
        scenarios.append(scenario(steps, f"stage {st} (ranks {members}) at the median of the other ranks",
                                  lambda s, m=members: at_median(s, m)))
    if comm_at_median:
        scenarios.append(scenario(steps, "communication at the median", comm_median))
    sd = slowdown(steps, stages)
    if not scenarios:
        scenarios.append(scenario(steps, "the ideal job: every rank at the median, communication at the median",
                                  ideal))
        for r in sorted(sd.by_rank, key=lambda r: -sd.by_rank[r])[:3]:
            if sd.by_rank[r] >= 1.0 + (sd.S - 1) * 0.25 and sd.S > 1:
                scenarios.append(scenario(steps, f"rank {r} at the median of its peers",
                                          lambda s, r=r: at_median(s, [r])))
    if rep.abstained_steps:
        warnings.append(f"steps {rep.abstained_steps} not used: {rep.reason}")
    return WhatIf(path=path, replay=rep, scenarios=scenarios, slowdown=sd, verdict=verdict(sd), warnings=warnings)
