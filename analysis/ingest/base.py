"""What every reader produces, and the error every reader raises.

A reader turns one rank's raw files into rows of the normalized tables of `analysis/schema.sql`.
Readers append rows (or whole columns) to a `RankTables` buffer; the store turns the buffer into
DuckDB tables. Column names and order come from schema.sql itself, so the schema is the one place
where a column is defined.

The store takes the buffer as typed numpy columns (`RankTables.parts()`: int64 / float64 / bool, with a
mask where there are NULLs, and object arrays of str for text), which DuckDB scans directly and which
pickle compactly between processes (`typed_columns.py` types one column); pandas is not needed for that,
so a parse worker never imports it.
`frames()` gives the same rows as pandas DataFrames (tests, readers' own checks).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..files import display, read_text
from .typed_columns import MAX_TEXT_CHARS, PANDAS_DTYPES, cut_long_text, has_null, pandas_values, typed_column
from .typed_columns import Coded as Coded  # re-exported: readers and the store import it from here

if TYPE_CHECKING:
    import pandas as pd


@cache
def schema_sql() -> str:
    return resources.files("stepdoctor.analysis").joinpath("schema.sql").read_text(encoding="utf-8")


_CREATE_RE = re.compile(r"CREATE TABLE (\w+) \((.*?)\n\);", re.S)
_COL_RE = re.compile(r"^\s+(\w+)\s+([A-Z]+)", re.M)


@cache
def table_columns() -> dict[str, tuple[tuple[str, str], ...]]:
    """Table name -> ((column, duckdb type), ...) in schema order, parsed from schema.sql."""
    out: dict[str, tuple[tuple[str, str], ...]] = {}
    for name, body in _CREATE_RE.findall(schema_sql()):
        out[name] = tuple((c, t) for c, t in _COL_RE.findall(body) if c.upper() != "PRIMARY")
    return out


_VIEW_RE = re.compile(r"^CREATE VIEW (\w+) AS", re.M)


@cache
def view_names() -> tuple[str, ...]:
    """The store's named views (CREATE VIEW in schema.sql), in schema order."""
    return tuple(_VIEW_RE.findall(schema_sql()))


_COL_LINE_RE = re.compile(r"^\s+(\w+)\s+([A-Z]+)([^\n]*)", re.M)


@cache
def required_columns() -> dict[str, frozenset[str]]:
    """Table name -> the columns that must not be NULL (NOT NULL / PRIMARY KEY without a DEFAULT)."""
    out: dict[str, frozenset[str]] = {}
    for name, body in _CREATE_RE.findall(schema_sql()):
        req = set()
        for c, _, rest in _COL_LINE_RE.findall(body):
            rest = rest.split("--")[0].upper()
            if c.upper() != "PRIMARY" and ("NOT NULL" in rest or "PRIMARY KEY" in rest) and "DEFAULT" not in rest:
                req.add(c)
        out[name] = frozenset(req)
    return out


_INT32 = (-(2**31), 2**31 - 1)


@dataclass
class RankSource:
    """One rank's input as discovery found it."""

    path: Path                      # rank directory or trace file
    format: str                     # see ranks.format in schema.sql
    rank: int | None = None         # global rank when discovery could tell
    rank_how: str = ""              # how the rank id was found (file name, distributedInfo, ...)
    extra: dict[str, Any] = field(default_factory=dict)


class RankTables:
    """Row/column buffer for one rank, keyed by schema table name.

    `add(table, **row)` for sparse tables; `extend(table, columns)` for bulk columnar data (the Kineto
    reader builds whole columns in one pass): a column is a list, a numpy array (`np.ma.MaskedArray`
    for NULLs), a pandas array or Series, or for text a `Coded` column. Unknown tables or columns raise
    KeyError at once so a typo in a reader fails its tests instead of silently dropping data.
    """

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self._rows: dict[str, list[dict[str, Any]]] = {}
        self._cols: dict[str, list[dict[str, list[Any]]]] = {}
        self.warnings: list[str] = []
        self.capabilities: set[str] = set()
        self._sink: Callable[[int, str, dict[str, np.ndarray]], None] | None = None
        self._streamed: dict[str, int] = {}  # table -> rows given to the sink
        self._settle: Callable[[], None] | None = None

    def stream(self, sink: Callable[[int, str, dict[str, np.ndarray]], None], tables: Iterable[str],
               settle: Callable[[], None] | None = None) -> None:
        """From now on, each `extend()` block of `tables` is typed at once (as `parts()` types it) and given
        to `sink(rank, table, columns)` instead of being kept: a reader's finished tables leave while it reads the
        next file. The reader names tables it only extends: `parts()` gives a table's `add()` rows before its
        extend blocks, so an `add()` to a streamed table raises. A block the schema cannot take raises
        `StoreError`. `settle()`: called by `settled()`, when the reader has dropped a phase's transients (the
        parse workers give the freed heap back then)."""
        self._sink = sink
        self._streamed = dict.fromkeys(tables, 0)
        self._settle = settle

    def settled(self) -> None:
        """The reader has just freed a big phase's transient columns (see `stream`)."""
        if self._settle is not None:
            self._settle()

    def add(self, table: str, **row: Any) -> None:
        cols = table_columns()[table]
        names = {c for c, _ in cols}
        bad = set(row) - names
        if bad:
            raise KeyError(f"{table}: unknown columns {sorted(bad)}")
        if table in self._streamed:
            raise RuntimeError(f"{table}: add() to a streamed table")
        row.setdefault("rank", self.rank)
        # a scalar row holds names of files (source_path): text a file name gives need not be UTF-8
        self._rows.setdefault(table, []).append({k: display(v) if isinstance(v, str) else v for k, v in row.items()})

    def extend(self, table: str, columns: dict[str, list[Any]]) -> None:
        names = {c for c, _ in table_columns()[table]}
        bad = set(columns) - names
        if bad:
            raise KeyError(f"{table}: unknown columns {sorted(bad)}")
        if self._sink is not None and table in self._streamed:
            try:
                typed = self._typed(table, columns)
            except ValueError as e:
                raise StoreError(str(e)) from None
            if typed is not None:
                self._streamed[table] += _length(typed)
                self._sink(self.rank, table, typed)
            return
        self._cols.setdefault(table, []).append(columns)

    def warn(self, message: str) -> None:
        self.warnings.append(display(message))   # messages name files, whose names need not be UTF-8

    def read_json(self, path: Path) -> Any:
        """A JSON file's value, or None with a warning naming the file when it cannot be read or decoded
        (a damaged side file costs only what it held)."""
        try:
            return json.loads(read_text(path))
        except (OSError, ValueError) as e:
            self.warn(f"{path.name}: unreadable JSON ({e}); ignored")
            return None

    def has(self, *caps: str) -> None:
        self.capabilities.update(caps)

    def count(self, table: str) -> int:
        n = len(self._rows.get(table, ())) + self._streamed.get(table, 0)
        for chunk in self._cols.get(table, ()):
            n += len(next(iter(chunk.values()), ()))
        return n

    def frames(self) -> dict[str, pd.DataFrame]:
        """One DataFrame per non-empty table, columns in schema order with nullable dtypes."""
        import pandas as pd

        out: dict[str, pd.DataFrame] = {}
        for table, cols in table_columns().items():
            parts: list[pd.DataFrame] = []
            if rows := self._rows.get(table):
                parts.append(pd.DataFrame.from_records(rows))
            for chunk in self._cols.get(table, ()):
                parts.append(pd.DataFrame({k: pandas_values(v) for k, v in chunk.items()}))
            if not parts:
                continue
            df = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
            if "rank" in df.columns:
                df["rank"] = df["rank"].fillna(self.rank)
            else:
                df["rank"] = self.rank
            for c, t in cols:
                if c not in df.columns:
                    df[c] = None
                df[c] = df[c].astype(PANDAS_DTYPES[t]) if t in PANDAS_DTYPES else df[c]
            out[table] = df[[c for c, _ in cols]]
        return out

    def parts(self) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
        """The buffer as typed numpy columns: one (table, columns) per block a reader added (a table's
        `add()` rows form one block, each `extend()` another), tables in schema order, the rows frames()
        gives in the same order.

        A column is int64 (INTEGER, BIGINT), float64 (DOUBLE) or bool (BOOLEAN), an `np.ma.MaskedArray`
        when it has NULLs (float NaN is NULL, as in frames()), or for VARCHAR an object array of str / None
        or the reader's `Coded` column (checked, not decoded).
        Only the columns the reader gave are there: an absent column is NULL (or its schema DEFAULT), an
        absent `rank` is this buffer's rank. Raises ValueError, naming the table and column, when a
        value cannot be stored: NULL in a NOT NULL column, an INTEGER beyond 32 bits, an unconvertible
        value.
        """
        for table, cols in table_columns().items():
            blocks: list[dict[str, Any]] = []
            if rows := self._rows.get(table):
                present = {k for r in rows for k in r}
                blocks.append({c: [r.get(c) for r in rows] for c, _ in cols if c in present})
            blocks.extend(self._cols.get(table, ()))
            for block in blocks:
                if (out := self._typed(table, block)) is not None:
                    yield table, out

    def _typed(self, table: str, block: dict[str, Any]) -> dict[str, np.ndarray] | None:
        """One block as `parts()` gives it (None: no rows)."""
        n = len(next(iter(block.values()), ()))
        if not n:
            return None
        required = required_columns()[table]
        out: dict[str, np.ndarray] = {}
        for c, t in table_columns()[table]:
            if c not in block:
                if c in required and c != "rank":
                    raise ValueError(f"{table}.{c}: no value (the column is NOT NULL)")
                continue
            try:
                a = typed_column(block[c], t)
            except (TypeError, ValueError, OverflowError) as e:
                raise ValueError(f"{table}.{c}: {e}") from None
            if len(a) != n:
                raise ValueError(f"{table}.{c}: {len(a)} values for {n} rows")
            if t == "VARCHAR":
                a, cut = cut_long_text(a)
                if cut:
                    self.warn(f"{table}.{c}: {cut} value(s) longer than {MAX_TEXT_CHARS:,} characters cut there")
            if c == "rank":
                if isinstance(a, np.ma.MaskedArray):
                    a = np.where(np.ma.getmaskarray(a), self.rank, np.ma.getdata(a))
            elif c in required and has_null(a):
                raise ValueError(f"{table}.{c}: NULL in a NOT NULL column")
            if t == "INTEGER" and a.size:
                v = np.ma.compressed(a) if isinstance(a, np.ma.MaskedArray) else a
                if v.size and (v.min() < _INT32[0] or v.max() > _INT32[1]):
                    raise ValueError(f"{table}.{c}: value out of the INTEGER range")
            out[c] = a
        return out


class StoreError(ValueError):
    """A streamed block (`RankTables.stream`) the schema cannot take: the rank cannot be stored."""


def _length(cols: dict[str, Any]) -> int:
    return len(next(iter(cols.values()), ()))


def parse_us_to_ns(text: str | float | int) -> int:
    """Exact decimal microseconds (e.g. the string "1700000000015250.125") -> integer nanoseconds.

    Ascend writes absolute epoch µs as strings with 3 decimals; at ~1.7e15 a float64 round trip loses
    the sub-µs digits (Ascend/pytorch #133), so strings are split at the decimal point instead.
    Floats (Kineto) are rounded to the nearest ns.
    """
    if isinstance(text, str):
        s = text.strip().strip('"').strip()
        neg = s.startswith("-")
        if neg:
            s = s[1:]
        if "e" in s or "E" in s:
            return round(float(text) * 1000)
        whole, _, frac = s.partition(".")
        frac = (frac + "000")[:3] if len(frac) <= 3 else frac
        ns = int(whole or "0") * 1000 + (int(frac[:3]) if frac else 0)
        if len(frac) > 3 and frac[3] >= "5":  # round half up beyond ns precision
            ns += 1
        return -ns if neg else ns
    if isinstance(text, int):
        return text * 1000
    return round(text * 1000)
