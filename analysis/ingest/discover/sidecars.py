"""Files beside a profile that its analysis reads but no reader ingests: the unprofiled step times a training
script writes next to its traces (`meta/step_times_rank<N>.json`: `step_ms` of every iteration and the
`profiled_steps`), which judge an impact against the step the user runs without the profiler.

They are part of the input: the cache's fingerprint covers them (`store/cache.py`), so a changed, added or
removed file makes a new database, and the answers kept beside the old one are not used.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from . import Discovery


def step_times_file(path: str | Path, rank: int) -> Path | None:
    """meta/step_times_rank<rank>.json (or step_times_rank<rank>.json) in the profile's folder or the one above
    it (a run folder holding traces/ and meta/), or None."""
    p = Path(path)
    base = p if p.is_dir() else p.parent
    for d in (base, base.parent):
        for cand in (d / "meta" / f"step_times_rank{rank}.json", d / f"step_times_rank{rank}.json"):
            if cand.is_file():
                return cand
    return None


def sidecar_stats(disc: Discovery) -> list[tuple[str, int, int]]:
    """(path, size, mtime ns) of every sidecar file of the discovered ranks, sorted."""
    out = []
    for rank in sorted({s.rank for s in disc.sources}):
        f = step_times_file(disc.path, rank)
        if f is not None:
            try:
                st = os.stat(f)
            except OSError:
                continue
            out.append((str(f), st.st_size, st.st_mtime_ns))
    return sorted(out)
