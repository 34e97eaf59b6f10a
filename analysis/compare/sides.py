"""The two sides of a comparison: which ranks of each run are matched, and their per-step means."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import UsageError
from ..metrics.breakdown import BreakdownRow, compute_breakdown
from ..store import Profile

NOISE_PCT = 1.0   # a step-time change below this share is treated as no change


def in_list(col: str, vals: list[int]) -> str:
    """A SQL `col IN (...)` over integer ids (FALSE for none)."""
    return f"{col} IN ({','.join(str(int(v)) for v in vals)})" if vals else "FALSE"


@dataclass
class Side:
    """One side of a comparison: a profile, its ranks and steps, and per-step means."""

    profile: Profile
    ranks: list[int]
    steps: list[int]
    step_ms: float | None = None
    compute_ms: float | None = None
    comm_ms: float | None = None
    free_ms: float | None = None
    memory_ms: float | None = None      # device busy with neither compute nor communication (copies, syncs)
    host_ms: float | None = None        # step time outside the device window
    per_rank: dict[int, dict[str, float | None]] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """rank-steps compared (the per-step normaliser)."""
        return max(len(self.ranks) * len(self.steps), 1)


def _mean(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return sum(v) / len(v) if v else None


def _memory(r: BreakdownRow) -> float | None:
    # non_compute = busy - compute = communication alone + everything else alone (copies, memsets)
    if r.non_compute_ms is None or r.comm_not_overlapped_ms is None:
        return None
    return r.non_compute_ms - r.comm_not_overlapped_ms


def _host(r: BreakdownRow) -> float | None:
    return None if r.step_ms is None or r.device_ms is None else r.step_ms - r.device_ms


def _dims(rows: list[BreakdownRow]) -> dict[str, float | None]:
    return {"step_ms": _mean([r.step_ms for r in rows]), "compute_ms": _mean([r.compute_ms for r in rows]),
            "communication_ms": _mean([r.comm_not_overlapped_ms for r in rows]),
            "free_ms": _mean([r.free_ms for r in rows]), "memory_ms": _mean([_memory(r) for r in rows]),
            "host_ms": _mean([_host(r) for r in rows])}


def make_side(prof: Profile, ranks: list[int], step: int | None = None, first_step_only: bool = False) -> Side:
    rows = compute_breakdown(prof, ranks=ranks)
    steps = sorted({r.step for r in rows if r.step is not None})
    if step is not None:
        steps = [s for s in steps if s == step]
    elif first_step_only and steps:
        steps = steps[:1]
    rows = [r for r in rows if r.step in steps]
    d = _dims(rows)
    side = Side(prof, ranks, steps, d["step_ms"], d["compute_ms"], d["communication_ms"], d["free_ms"],
                d["memory_ms"], d["host_ms"])
    of_rank: dict[int, list[BreakdownRow]] = {rank: [] for rank in ranks}
    for r in rows:  # one pass, not a scan of every row per rank
        if r.rank in of_rank:
            of_rank[r.rank].append(r)
    for rank in ranks:
        side.per_rank[rank] = _dims(of_rank[rank])
    return side


def rank_side(side: Side, rank: int) -> Side:
    """One rank of a side, over the same steps (for op tables of that rank alone)."""
    return Side(side.profile, [rank], side.steps, per_rank={rank: side.per_rank.get(rank, {})})


def match_ranks(base: Profile, target: Profile, rank: int | None) -> tuple[list[int], list[int], list[str]]:
    """The ranks of base and target compared pairwise, with notes on how they were matched: one chosen
    rank, else the common rank ids, else one rank against one, else the first n of each in order."""
    notes: list[str] = []
    br, tr = base.info.ranks, target.info.ranks
    if rank is not None:
        for p, rs in ((base, br), (target, tr)):
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
