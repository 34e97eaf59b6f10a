"""One SQLite export opened read-only (`Db`: tables, columns, STRING_IDS, enums), and array helpers of the reader."""

from __future__ import annotations

import contextlib
import sqlite3
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ...errors import ProfileError
from ...files import by_descriptor, open_regular
from ..ascend_common import group_hash
from ..base import RankSource
from .common import DB_RE, ENUM_DEFAULTS, INT_OR_NONE, OUTPUT_DIR, STR_OR_NONE

# --------------------------------------------------------------------------------------------------------
# SQLite access


def _ro_uri(path: Path | str, immutable: bool = False) -> str:
    uri = "file:" + urllib.parse.quote(str(path)) + "?mode=ro"
    return uri + "&immutable=1" if immutable else uri


@contextlib.contextmanager
def open_ro(path: Path) -> Iterator[sqlite3.Connection]:
    """Open an SQLite file read-only without writing anything beside it; ProfileError (one line) when it is
    not an SQLite database.

    Even `mode=ro` creates `-shm` (and may touch `-wal`) beside a database left in WAL mode, which changes the
    profile folder (and so its cache key). So the file is opened `immutable=1` (no locks, no side files). A
    non-empty `-wal` beside it holds committed pages the main file does not have yet: then the database and its
    `-wal` are copied into a private temporary folder and that copy is opened, where SQLite may write its side
    files.
    """
    wal = path.with_name(path.name + "-wal")
    con: sqlite3.Connection | None = None
    with contextlib.ExitStack() as stack:
        try:
            # opened by its checked descriptor (files.py): the file read is the one checked
            src = stack.enter_context(open_regular(path))
            target, immutable = by_descriptor(src, path), True
            if wal.is_file() and wal.stat().st_size > 0:
                import shutil
                import tempfile

                tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="stepdoctor-sqlite-")))
                for f, name in ((src, path.name), (stack.enter_context(open_regular(wal)), wal.name)):
                    with open(tmp / name, "wb") as out:
                        shutil.copyfileobj(f, out)
                target, immutable = str(tmp / path.name), False
            con = sqlite3.connect(_ro_uri(target, immutable), uri=True)
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except sqlite3.DatabaseError as e:  # OperationalError is a subclass
            if con is not None:
                con.close()
            raise ProfileError(path, f"not a readable SQLite database ({e})") from None
        except OSError as e:
            raise ProfileError(path, f"cannot read: {e.strerror or e}") from None
        try:
            yield con
        finally:
            con.close()


class Db:
    """One open export: table/column lookup, STRING_IDS decoding, enums, exact-int fetches."""

    def __init__(self, con: sqlite3.Connection, path: Path) -> None:
        self.con = con
        self.path = path
        self.tables: dict[str, set[str]] = {}
        # Tables only: an export writes tables, and a view or a virtual table can compute without end (a view
        # over a recursive CTE); such names are skipped, and run() says so.
        self.not_tables: list[str] = []
        for name, kind, sql in con.execute("SELECT name, type, sql FROM sqlite_master WHERE type IN ('table', 'view')"):
            if kind != "table" or str(sql or "").lstrip().upper().startswith("CREATE VIRTUAL"):
                self.not_tables.append(str(name))
                continue
            cols = {r[1] for r in con.execute(f'PRAGMA table_info("{name}")')}
            self.tables[name] = cols
        self._strings: dict[int, str] | None = None
        self._enums: dict[str, dict[int, str]] = {}
        self.damaged: set[str] = set()      # tables whose rows could not be read

    def losses(self) -> list[str]:
        """What of this file was not read, one warning each: views and virtual tables, damaged tables."""
        out = []
        if self.not_tables:
            out.append(f"{self.path.name}: {len(self.not_tables)} view(s) or virtual table(s) not read (an export "
                       f"writes tables; a view can compute without end): {', '.join(sorted(self.not_tables)[:8])}")
        if self.damaged:
            out.append(f"{self.path.name}: {len(self.damaged)} table(s) unreadable (damaged file), their rows lost: "
                       f"{', '.join(sorted(self.damaged))}")
        return out

    def has(self, table: str) -> bool:
        return table in self.tables

    def count(self, table: str) -> int:
        if not self.has(table):
            return 0
        try:
            return int(self.con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
        except sqlite3.DatabaseError:
            self.damaged.add(table)
            return 0

    def col(self, table: str, *names: str) -> str | None:
        """First of `names` the table has (schema drift: blockNum | blockDim ...)."""
        cols = self.tables.get(table, set())
        return next((n for n in names if n in cols), None)

    @property
    def strings(self) -> dict[int, str]:
        if self._strings is None:
            self._strings = dict(self.con.execute("SELECT id, value FROM STRING_IDS")) if self.has(
                "STRING_IDS") else {}
        return self._strings

    def s(self, v: Any) -> str | None:
        """Decode one STRING_IDS reference (ints); text already stored as text passes through."""
        if v is None:
            return None
        if isinstance(v, int):
            return self.strings.get(v)
        return str(v)

    def texts(self, values: list[Any], post: Any = None) -> list[Any]:
        """`s` of each value (then `post` of it), once per distinct value: string ids repeat on every row."""
        return mapped(values, self.s if post is None else lambda v: post(self.s(v)))

    def enum(self, table: str) -> dict[int, str]:
        if table not in self._enums:
            out = dict(ENUM_DEFAULTS.get(table, {}))
            if self.has(table) and {"id", "name"} <= self.tables[table]:
                out.update({int(i): str(n) for i, n in self.con.execute(f'SELECT id, name FROM "{table}"')})
            self._enums[table] = out
        return self._enums[table]

    def fetch(self, table: str, wanted: dict[str, tuple[str, ...]], where: str = "",
              order: str = "") -> dict[str, list[Any]]:
        """Columns of a table as Python lists (exact ints), keyed by our alias; absent columns -> all None."""
        present = {alias: self.col(table, *names) for alias, names in wanted.items()}
        sel = [f'"{c}"' for c in present.values() if c]
        if not self.has(table) or not sel:
            return {a: [] for a in wanted}
        sql = f'SELECT {", ".join(sel)} FROM "{table}" {where} {order}'
        try:
            rows = self.con.execute(sql).fetchall()
        except sqlite3.DatabaseError:
            # a damaged table (malformed pages) costs only its own rows; run() warns once with the count
            self.damaged.add(table)
            return {a: [] for a in wanted}
        cols = list(zip(*rows, strict=False)) if rows else [() for _ in sel]
        out: dict[str, list[Any]] = {}
        i = 0
        for alias, c in present.items():
            if c:
                out[alias] = list(cols[i])
                i += 1
            else:
                out[alias] = [None] * len(rows)
        return out


def find_db(src: RankSource) -> tuple[Path, Path, str]:
    """(db file, rank dir, framework) for a discovered source (a rank dir, or the .db file itself)."""
    p = src.path
    if p.is_file():
        m = DB_RE.match(p.name)
        rank_dir = p.parent.parent if p.parent.name == OUTPUT_DIR else p.parent
        return p, rank_dir, (m.group(1) if m else "pytorch")
    out = p / OUTPUT_DIR
    cands = sorted(out.glob("ascend_*_profiler*.db")) if out.is_dir() else []
    cands = [c for c in cands if DB_RE.match(c.name)]
    if not cands:
        raise ProfileError(p, f"no ascend_{{pytorch,mindspore}}_profiler_{{rank}}.db in {OUTPUT_DIR}/")
    # several exports in one dir: the one named for this rank, else the first
    pick = next((c for c in cands if (m := DB_RE.match(c.name)) and m.group(2) is not None
                 and src.rank is not None and int(m.group(2)) == src.rank), cands[0])
    return pick, p, DB_RE.match(pick.name).group(1)  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------------------------
# Helpers over arrays


def i64(values: list[Any]) -> pd.arrays.IntegerArray:
    return pd.array(values, dtype="Int64")


def assign_steps(t: np.ndarray, w0: np.ndarray, w1: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Step id of each time t: the window [w0, w1) containing it (windows sorted, disjoint), else -1."""
    if w0.size == 0 or t.size == 0:
        return np.full(t.shape, -1, dtype=np.int64)
    i = np.searchsorted(w0, t, side="right") - 1
    ic = np.clip(i, 0, None)
    ok = (i >= 0) & (t < w1[ic])
    return np.where(ok, ids[ic], -1)


def steps_or_na(a: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.array([None if x < 0 else int(x) for x in a], dtype="Int64")


def nesting_depth(tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Depth of each interval among the intervals of its thread (0 = outermost).

    Algorithm: per thread, sort by (start, -end) and keep a stack of open ends; pop ends ≤ the next start;
    the stack height is the depth. O(n log n).
    """
    n = tid.size
    depth = np.zeros(n, dtype=np.int64)
    order = np.lexsort((-end, start, tid))
    stack: list[int] = []
    cur_tid = None
    for k in order:
        if tid[k] != cur_tid:
            stack.clear()
            cur_tid = tid[k]
        s = start[k]
        while stack and stack[-1] <= s:
            stack.pop()
        depth[k] = len(stack)
        stack.append(end[k])
    return depth


def mapped(values: list[Any], fn: Any) -> list[Any]:
    """fn of each value, computed once per distinct value when they are all int / None or all str / None
    (mixed kinds are mapped one by one: 1 == 1.0 == True would share an entry)."""
    kinds = set(map(type, values))
    if kinds <= INT_OR_NONE or kinds <= STR_OR_NONE:
        table = {v: fn(v) for v in set(values)}
        return list(map(table.__getitem__, values))
    return [fn(v) for v in values]


def group_id(g: Any) -> str | None:
    """The group id of a group name cell as communication*.json keys it (`group_hash`); None when empty."""
    return group_hash(str(g)) if g else None


def or_empty(v: str | None) -> str:
    return v or ""


def clean_text(v: str | None) -> str | None:
    """Shapes/dtypes as torch_npu stores them ('4096,4000;\\r\\n1000'): one line, no CSV quotes."""
    if v is None:
        return None
    return v.replace("\r", "").replace("\n", "").strip().strip('"')


# --------------------------------------------------------------------------------------------------------
# The reader


@dataclass(frozen=True)
class Steps:
    """Step windows (host), sorted by start; `first` = device start per step for derived steps."""

    ids: np.ndarray
    start: np.ndarray
    end: np.ndarray
    how: str                               # STEP_TIME | MSTX | repetition | getnext | whole | ""
    first: np.ndarray | None = None

    @property
    def empty(self) -> bool:
        return self.ids.size == 0
