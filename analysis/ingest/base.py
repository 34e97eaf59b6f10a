"""What every reader produces, and the error every reader raises.

A reader turns one rank's raw files into rows of the normalized tables of `analysis/schema.sql`.
Readers append rows (or whole columns) to a `RankTables` buffer; the store turns the buffer into
DuckDB tables. Column names and order come from schema.sql itself, so the schema is the one place
where a column is defined.

The store takes the buffer as typed numpy columns (`RankTables.parts()`: int64 / float64 / bool, with a
mask where there are NULLs, and object arrays of str for text), which DuckDB scans directly and which
pickle compactly between processes; pandas is not needed for that, so a parse worker never imports it.
`frames()` gives the same rows as pandas DataFrames (tests, readers' own checks).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

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


_PANDAS_DTYPES = {"INTEGER": "Int64", "BIGINT": "Int64", "DOUBLE": "Float64", "VARCHAR": "string",
                  "BOOLEAN": "boolean"}
_NP_DTYPES = {"INTEGER": np.int64, "BIGINT": np.int64, "DOUBLE": np.float64, "BOOLEAN": np.bool_}
# numpy kinds taken as they are for a column type (anything else goes through pandas' own conversion)
_NP_KINDS = {"INTEGER": "iub", "BIGINT": "iub", "DOUBLE": "fiub", "BOOLEAN": "b"}
_INT32 = (-(2**31), 2**31 - 1)
_INT64_MAX = 2**63 - 1


class Coded:
    """A text column as codes into labels: row i is `labels[codes[i]]`, NULL where `codes[i]` is -1.

    A reader that interns its strings (names repeat: a few thousand distinct in millions of rows) gives
    this to `extend()` instead of one str per row, so nothing per row is checked or pickled; the store
    turns it into text at the insert.
    """

    __slots__ = ("codes", "labels")

    def __init__(self, codes: Any, labels: Any) -> None:
        self.codes = np.asarray(codes)
        self.labels = labels

    def __len__(self) -> int:
        return len(self.codes)

    def __getitem__(self, key: Any) -> Coded:
        return Coded(self.codes[key], self.labels)

    def __getstate__(self) -> tuple[Any, Any]:
        return self.codes, self.labels

    def __setstate__(self, state: tuple[Any, Any]) -> None:
        self.codes, self.labels = state

    def decode(self) -> np.ndarray:
        """Object array of str / None."""
        table = np.empty(len(self.labels) + 1, dtype=object)
        table[:-1] = self.labels
        return table[self.codes]  # -1 -> the None at the end

    def compact(self) -> Coded:
        """The same rows with only the labels they use (before sending a slice of a long column)."""
        used, codes = np.unique(self.codes, return_inverse=True)
        labels = [self.labels[i] for i in used.tolist() if i >= 0]
        if used.size and used[0] < 0:
            codes = codes - 1  # the -1 code sorted first: it stays -1, the others shift down
        return Coded(codes.astype(np.int32), labels)


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
        self._rows.setdefault(table, []).append(row)

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
        self.warnings.append(message)

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
                parts.append(pd.DataFrame({k: _pandas_values(v) for k, v in chunk.items()}))
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
            if c == "rank":
                if isinstance(a, np.ma.MaskedArray):
                    a = np.where(np.ma.getmaskarray(a), self.rank, np.ma.getdata(a))
            elif c in required and _has_null(a):
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


def _has_null(a: Any) -> bool:
    if isinstance(a, Coded):
        return bool(a.codes.size) and bool((a.codes < 0).any())
    if isinstance(a, np.ma.MaskedArray):
        return True  # parts() keeps a mask only where there are NULLs
    return a.dtype == object and bool(np.equal(a, None).any())


def _masked(data: np.ndarray, mask: Any) -> np.ndarray:
    """`data` as is when nothing is masked, else a MaskedArray (what DuckDB reads as NULLs)."""
    if mask is np.ma.nomask or not mask.any():
        return data
    return np.ma.MaskedArray(data, mask=mask)


def typed_column(values: Any, duck_type: str) -> np.ndarray:
    """One column as a reader gave it (list, numpy or masked array, pandas array or Series) -> the typed
    numpy column `RankTables.parts()` describes, with the values frames() gets from pandas' nullable
    dtypes. The common cases (numpy columns, lists of ints / floats / bools / str and None) are converted
    here; anything else goes through pandas (imported only then)."""
    if duck_type == "VARCHAR":
        return _text_column(values)
    dtype, kinds = _NP_DTYPES[duck_type], _NP_KINDS[duck_type]
    data: Any = None
    mask: Any = np.ma.nomask
    if isinstance(values, np.ndarray):
        data, mask = np.ma.getdata(values), np.ma.getmask(values)
        nan_is_null = True
    elif type(values).__module__.startswith("pandas"):
        if hasattr(values, "_data") and hasattr(values, "_mask"):  # IntegerArray & co.: zero copy
            data, mask = np.asarray(values._data), np.asarray(values._mask)
            nan_is_null = False
        elif isinstance(getattr(values, "dtype", None), np.dtype):  # a Series or Index of a numpy dtype
            data, nan_is_null = np.asarray(values), True
    elif isinstance(values, (list, tuple)):
        if not values:
            return np.empty(0, dtype=dtype)
        nulls = [v is None for v in values]
        if any(nulls):
            fill = False if duck_type == "BOOLEAN" else 0
            values = [fill if v is None else v for v in values]
            mask = np.array(nulls, dtype=bool)
        try:
            data = np.array(values)
        except (TypeError, ValueError, OverflowError):
            data = None
        nan_is_null = True
    if data is None or data.ndim != 1 or data.dtype.kind not in kinds or \
            (data.dtype.kind == "u" and data.size and data.max() > _INT64_MAX):
        return _via_pandas(values, duck_type)
    out = data.astype(dtype, copy=False)
    if duck_type == "DOUBLE" and nan_is_null:
        nan = np.isnan(out)
        if nan.any():
            mask = nan if mask is np.ma.nomask else (nan | mask)
    return _masked(out, mask)


def _text_column(values: Any) -> Any:
    if isinstance(values, Coded):
        codes = values.codes
        if codes.ndim != 1 or (codes.size and codes.dtype.kind not in "iu"):
            raise ValueError("codes of a coded text column must be integers")
        if codes.size and (codes.min() < -1 or codes.max() >= len(values.labels)):
            raise ValueError("a code of a coded text column is out of its labels' range")
        if not set(map(type, values.labels)) <= {str}:
            raise ValueError("labels of a coded text column must be str")
        return values
    plain = isinstance(values, (list, tuple)) or (
        isinstance(values, np.ndarray) and values.dtype == object and values.ndim == 1
        and not isinstance(values, np.ma.MaskedArray))
    if plain and _all_text(values):
        if isinstance(values, np.ndarray):
            return values
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    return _via_pandas(values, "VARCHAR")


def _all_text(values: Any) -> bool:
    """Every value a str or None (exactly str: a subclass goes through pandas)."""
    return set(map(type, values)) <= {str, type(None)}


def _via_pandas(values: Any, duck_type: str) -> np.ndarray:
    """pandas' own conversion to the column's nullable dtype (what frames() does), then numpy."""
    import pandas as pd

    s = values if isinstance(values, pd.Series) else pd.Series(_pandas_values(values), dtype=None)
    s = s.astype(_PANDAS_DTYPES[duck_type])
    if duck_type == "VARCHAR":
        return s.to_numpy(dtype=object, na_value=None)
    mask = s.isna().to_numpy(dtype=bool)
    fill = False if duck_type == "BOOLEAN" else 0
    return _masked(s.to_numpy(dtype=_NP_DTYPES[duck_type], na_value=fill), mask)


def _pandas_values(v: Any) -> Any:
    """numpy masked arrays -> pandas' nullable arrays (pandas would turn masked ints into floats); coded
    text -> its text."""
    if isinstance(v, Coded):
        return v.decode()
    if not isinstance(v, np.ma.MaskedArray):
        return v
    import pandas as pd

    data, mask = np.ma.getdata(v), np.ma.getmaskarray(v)
    if data.dtype.kind in "iu":
        return pd.arrays.IntegerArray(data.astype(np.int64, copy=False), mask)
    if data.dtype.kind == "f":
        return pd.arrays.FloatingArray(data.astype(np.float64, copy=False), mask)
    if data.dtype.kind == "b":
        return pd.arrays.BooleanArray(data, mask)
    return v.astype(object).filled(None)


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
