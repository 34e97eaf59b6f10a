"""One DB export being read: what is fixed before reading (`DbRank`), and the one mutable context of the
read (`DbOut`: the tables being filled, the earliest start seen, the opaque ids given so far)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..ascend_events import CommOps, CommTasks, DeviceOps, HostOps, emit
from ..base import RankTables
from .common import ANALYSIS_DBS, OUTPUT_DIR, TEXT_DELIVERABLES
from .db import i64


@dataclass(frozen=True, slots=True)
class DbRank:
    """A rank's DB export: the file, its rank folder, the framework it was written by, the source's format and
    which files lie beside it (a profile is read-only: what exists does not change while it is read)."""

    db_path: Path
    rank_dir: Path
    framework: str                 # pytorch | mindspore | msprof (a raw msprof DB: no framework layer)
    format: str
    analysis: Path | None          # analysis.db / communication_analyzer.db beside the DB, the first there
    text_files: tuple[str, ...]    # text deliverables in the rank folder's output folder (not read)

    @property
    def name(self) -> str:
        """The DB file's name, which warnings start with."""
        return self.db_path.name


def describe_db(db_path: Path, rank_dir: Path, framework: str, fmt: str) -> DbRank:
    out = rank_dir / OUTPUT_DIR
    return DbRank(db_path=db_path, rank_dir=rank_dir, framework=framework, format=fmt,
                  analysis=next((db_path.parent / n for n in ANALYSIS_DBS if (db_path.parent / n).is_file()), None),
                  text_files=tuple(n for n in TEXT_DELIVERABLES if (out / n).is_file()))


class DbOut:
    """The tables being filled, and what spans the phases: the earliest start of everything emitted
    (ranks.time_origin_ns) and the dense negative id of each opaque link id (`ids`)."""

    def __init__(self, tables: RankTables, name: str) -> None:
        self.t = tables
        self.name = name
        self.t_min: int | None = None
        self.opaque: dict[str, int] = {}     # opaque id text -> its dense negative BIGINT (see ids)

    def seen(self, starts: Any) -> None:
        """Track the earliest start over everything emitted (ranks.time_origin_ns)."""
        arr = np.asarray(starts, dtype=np.int64)
        if arr.size:
            m = int(arr.min())
            self.t_min = m if self.t_min is None else min(self.t_min, m)

    def emit(self, events: HostOps | DeviceOps | CommOps | CommTasks) -> None:
        """Add the events to their table, their starts counting for the time origin."""
        self.seen(events.start_ns)
        emit(self.t, events)

    def warn(self, msg: str) -> None:
        self.t.warn(f"{self.name}: {msg}")

    def ids(self, values: list[Any]) -> pd.arrays.IntegerArray:
        """Opaque link ids (connection / correlation) as BIGINT: an int in int64 range stays itself, anything
        else (a text id, an int beyond int64) gets a dense negative id of its own, the same one wherever it
        appears on this rank (ids in the DB are >= 0, so the two ranges never meet)."""
        out: list[int | None] = []
        for v in values:
            if v is None or v is pd.NA or (isinstance(v, float) and v != v):
                out.append(None)
            elif isinstance(v, (int, np.integer)) and 0 <= int(v) < 2**63:
                out.append(int(v))
            else:
                out.append(self.opaque.setdefault(str(v), -1 - len(self.opaque)))
        return i64(out)
