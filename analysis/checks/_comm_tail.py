"""Interval arithmetic and texts of exposed-comm-tail: the exposed communication of a window, the
critical-path cap across the ranks of a step, the collectives named in a finding."""

from __future__ import annotations

from typing import Any

import numpy as np

from .evidence import Record


class TailCollective(Record):
    """One collective of a firing step's final block (its `start_after_backward_ms` only from a device
    timeline, not from MindSpore's step phases)."""

    name: str
    type: str | None
    start_after_backward_ms: float | None = None
    dur_ms: float
    size_mb: float | None


def exposed_ns(s: np.ndarray, e: np.ndarray, is_comm: np.ndarray, t0: int, t1: int) -> float:
    """Communication time in [t0, t1) not covered by compute, from ops sorted by start:
    |comm ∪ compute| − |compute| (integer ns, so exactly |comm| − |comm ∩ compute|)."""
    if t1 <= t0:
        return 0.0
    cs, ce = np.minimum(np.maximum(s, t0), t1), np.minimum(np.maximum(e, t0), t1)
    comp = ~is_comm
    return float(covered_ns(cs, ce) - covered_ns(cs[comp], ce[comp]))


def covered_ns(s: np.ndarray, e: np.ndarray) -> int:
    """Length of the union of intervals [s, e) sorted by start: each adds what it reaches beyond the
    furthest earlier end (called per step, so no sort and no merged intervals are built)."""
    if s.size == 0:
        return 0
    lo = s.copy()
    lo[1:] = np.maximum(s[1:], np.maximum.accumulate(e)[:-1])
    return int(np.maximum(e - lo, 0).sum())


def collectives_text(colls: list[TailCollective]) -> str:
    """'4 allreduce (268 MB, up to 67.1 MB each)' per collective type, in order of appearance."""
    parts: list[str] = []
    for typ in dict.fromkeys(c.type or c.name for c in colls):
        group = [c for c in colls if (c.type or c.name) == typ]
        sizes = [c.size_mb for c in group if c.size_mb]
        size = f" ({sum(sizes):.3g} MB, up to {max(sizes):.3g} MB each)" if sizes else ""
        parts.append(f"{len(group)} {typ}{size}")
    return ", ".join(parts)


def cap_by_critical_path(tails: dict[int, dict[int, dict[str, Any]]]) -> None:
    """Cap each rank's effective tail by the smallest one among the ranks sharing its step and group.

    The collectives of a step end together on every rank of the group, so the step is paced by the rank
    that reaches them last, whose tail is the shortest (the others wait in the collective: a slow rank, not
    a bucketing problem). With one rank, or ranks that never share a step, nothing changes."""
    by_key: dict[tuple[int, frozenset[str]], list[float]] = {}
    for steps in tails.values():
        for step, t in steps.items():
            by_key.setdefault((step, t["groups"]), []).append(t["eff_ns"])
    for steps in tails.values():
        for step, t in steps.items():
            crit = min(by_key[(step, t["groups"])])
            t["critical_ns"] = crit
            t["eff_ns"] = min(t["eff_ns"], crit)
