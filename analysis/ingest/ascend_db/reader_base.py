"""The DB reader's state and the helpers every table's reader uses."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..base import RankSource, RankTables
from .db import Db, i64


class ReaderBase:
    """One rank's export being read: the open Db, its tables and steps, and helpers."""

    def __init__(self, db: Db, tables: RankTables, rank_dir: Path, framework: str, src: RankSource) -> None:
        self.db = db
        self.t = tables
        self.rank_dir = rank_dir
        self.framework = framework
        self.src = src
        self.name = db.path.name
        self.t_min: int | None = None
        self.opaque: dict[str, int] = {}     # opaque id text -> its dense negative BIGINT (see _ids)

    def seen(self, starts: Any) -> None:
        """Track the earliest start over everything emitted (ranks.time_origin_ns)."""
        arr = np.asarray(starts, dtype=np.int64)
        if arr.size:
            m = int(arr.min())
            self.t_min = m if self.t_min is None else min(self.t_min, m)

    def _extend(self, table: str, cols: dict[str, Any]) -> None:
        self.seen(cols["start_ns"])
        self.t.extend(table, cols)

    def warn(self, msg: str) -> None:
        self.t.warn(f"{self.name}: {msg}")

    def _ids(self, values: list[Any]) -> pd.arrays.IntegerArray:
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
