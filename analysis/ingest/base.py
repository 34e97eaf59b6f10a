"""What every reader produces, and the error every reader raises.

A reader turns one rank's raw files into rows of the normalized tables of `analysis/schema.sql`.
Readers append rows (or whole columns) to a `RankTables` buffer; the store turns the buffer into
DuckDB tables. Column names and order come from schema.sql itself, so the schema is the one place
where a column is defined.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import pandas as pd


class ProfileError(Exception):
    """Bad input: the message is one line naming the file and what is wrong (CLI exit code 2)."""

    def __init__(self, path: str | Path | None, problem: str) -> None:
        self.path = str(path) if path is not None else None
        self.problem = problem
        super().__init__(f"{self.path}: {problem}" if self.path else problem)


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


_PANDAS_DTYPES = {"INTEGER": "Int64", "BIGINT": "Int64", "DOUBLE": "Float64", "VARCHAR": "string",
                  "BOOLEAN": "boolean"}


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
    reader builds whole columns in one pass). Unknown tables or columns raise KeyError at once so a
    typo in a reader fails its tests instead of silently dropping data.
    """

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self._rows: dict[str, list[dict[str, Any]]] = {}
        self._cols: dict[str, list[dict[str, list[Any]]]] = {}
        self.warnings: list[str] = []
        self.capabilities: set[str] = set()

    def add(self, table: str, **row: Any) -> None:
        cols = table_columns()[table]
        names = {c for c, _ in cols}
        bad = set(row) - names
        if bad:
            raise KeyError(f"{table}: unknown columns {sorted(bad)}")
        row.setdefault("rank", self.rank)
        self._rows.setdefault(table, []).append(row)

    def extend(self, table: str, columns: dict[str, list[Any]]) -> None:
        names = {c for c, _ in table_columns()[table]}
        bad = set(columns) - names
        if bad:
            raise KeyError(f"{table}: unknown columns {sorted(bad)}")
        self._cols.setdefault(table, []).append(columns)

    def warn(self, message: str) -> None:
        self.warnings.append(message)

    def has(self, *caps: str) -> None:
        self.capabilities.update(caps)

    def count(self, table: str) -> int:
        n = len(self._rows.get(table, ()))
        for chunk in self._cols.get(table, ()):
            n += len(next(iter(chunk.values()), ()))
        return n

    def frames(self) -> dict[str, pd.DataFrame]:
        """One DataFrame per non-empty table, columns in schema order with nullable dtypes."""
        out: dict[str, pd.DataFrame] = {}
        for table, cols in table_columns().items():
            parts: list[pd.DataFrame] = []
            if rows := self._rows.get(table):
                parts.append(pd.DataFrame.from_records(rows))
            for chunk in self._cols.get(table, ()):
                parts.append(pd.DataFrame(chunk))
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
                df[c] = df[c].astype(_PANDAS_DTYPES[t]) if t in _PANDAS_DTYPES else df[c]
            out[table] = df[[c for c, _ in cols]]
        return out


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
