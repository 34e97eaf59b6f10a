"""Raw msprof output (CANN's own profiler, no torch_npu / MindSpore layer on top).

Layouts read (one RankSource each; `src.path` is the file or folder named below):

* a standalone msprof DB: `msprof_<N>.db` (same SQLite schema as torch_npu's DB export, minus the framework
  tables) -> read by the DB-export reader with framework "msprof";
* a `PROF_*` job folder (or one of its `device_<id>/` folders): per-iteration trace-event files
  `device_<id>/timeline/{msprof,task_time,hccl,step_trace}_<dev>_<model>_<iter>.json` -> msprof.timeline;
* `mindstudio_profiler_output/` (msprof's export folder): `msprof_*.json` / `msprof_slice_<k>_*.json`
  (one timeline, possibly split in slices) -> msprof.timeline. 0-byte files are counted in a warning.

A layout with nothing readable raises ProfileError (exit 2); a damaged file costs only what it held.
"""

from __future__ import annotations

import re
from pathlib import Path

from ...errors import ProfileError
from ..ascend_db import Db, describe_db, open_ro, run
from ..base import RankSource, RankTables
from .timeline import read_timeline_dir

MSPROF_DB_RE = re.compile(r"^msprof(?:_[\w.-]*)?\.db$")


def read_rank(src: RankSource) -> RankTables:
    """Read one rank's raw msprof output into normalized tables (layouts: see the module docstring)."""
    p = src.path
    if p.is_file() or (p.is_dir() and list(p.glob("msprof*.db"))):
        return read_msprof_db(src)
    timelines = timeline_dirs(p)
    if not timelines:
        raise ProfileError(p, "no msprof_*.db, PROF_*/device_*/timeline/ or mindstudio_profiler_output/ "
                              "with msprof*.json here")
    tables = RankTables(src.rank if src.rank is not None else 0)
    read_timeline_dir(timelines[0], tables, src)
    if len(timelines) > 1:
        tables.warn(f"{p.name}: {len(timelines)} device timelines in one source; read {timelines[0]}")
    return tables


def timeline_dirs(p: Path) -> list[Path]:
    """Folders holding trace-event JSON for one device, in path order: `p` itself when it holds
    msprof*.json, else PROF_*/device_*/timeline and */mindstudio_profiler_output below `p` (2 levels)."""
    if p.is_dir() and any(p.glob("msprof*.json")):
        return [p]
    found = [d for pat in ("timeline", "device_*/timeline", "PROF_*/device_*/timeline",
                           "mindstudio_profiler_output", "PROF_*/mindstudio_profiler_output")
             for d in p.glob(pat) if d.is_dir() and any(d.glob("*.json"))]
    return sorted(set(found))


def read_msprof_db(src: RankSource) -> RankTables:
    """A standalone msprof DB through the DB-export reader (framework "msprof": no framework tables
    expected, no STEP_TIME -> one window with a warning, see ascend_db.steps)."""
    p = src.path
    if p.is_dir():
        cands = sorted(c for c in p.glob("msprof*.db") if MSPROF_DB_RE.match(c.name))
        if not cands:
            raise ProfileError(p, "no msprof_<N>.db here")
        p = cands[0]
    if p.stat().st_size == 0:
        raise ProfileError(p, "the msprof DB is an empty file: nothing to read")
    tables = RankTables(src.rank if src.rank is not None else 0)
    with open_ro(p) as con:
        db = Db(con, p)
        missing = [t for t in ("STRING_IDS", "TASK") if not db.has(t)]
        if missing:
            raise ProfileError(p, f"missing required table(s) {', '.join(missing)}: not an msprof DB")
        run(describe_db(p, p.parent, "msprof", src.format), db, tables)
    return tables
