"""Files beside a profile that its analysis reads but no reader ingests: the unprofiled step times a training
script writes next to its traces (`meta/step_times_rank<N>.json`: `step_ms` of every iteration and the
`profiled_steps`), which judge an impact against the step the user runs without the profiler.

They are part of the input: the build stores them in the `step_times` table (`build/engine.py`), and the cache's
fingerprint covers them (`store/cache.py`), so a changed, added or removed file makes a new database, and the
answers kept beside the old one are not used.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from ...files import read_text

MAX_STEP_TIMES_BYTES = 64 << 20   # a step-times file past this is not a script's list of iterations

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


def sidecar_files(disc: Discovery) -> list[tuple[int, Path]]:
    """(rank, file) of every discovered rank that has a step-times file, by rank."""
    found = ((rank, step_times_file(disc.path, rank)) for rank in sorted({s.rank for s in disc.sources}))
    return [(rank, f) for rank, f in found if f is not None]


def step_times(disc: Discovery) -> tuple[list[tuple[int, int, float, bool, str]], list[str]]:
    """Rows (rank, step, step_ms, profiled, source) of the `step_times` table from every rank's sidecar, and a
    warning per file that could not be read (it loses only its own rows)."""
    rows: list[tuple[int, int, float, bool, str]] = []
    warnings: list[str] = []
    for rank, f in sidecar_files(disc):
        try:
            if os.stat(f).st_size > MAX_STEP_TIMES_BYTES:
                raise ValueError(f"over {MAX_STEP_TIMES_BYTES >> 20} MiB")
            d = json.loads(read_text(f))
            ms = [float(x) for x in d["step_ms"]]
            profiled = {int(x) for x in d.get("profiled_steps", [])}
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            warnings.append(f"{f}: not read as step times (a JSON object with a step_ms list): this rank's "
                            "unprofiled step is unknown")
            continue
        rows += [(int(rank), i, x, i in profiled, str(f)) for i, x in enumerate(ms)]
    return rows, warnings
