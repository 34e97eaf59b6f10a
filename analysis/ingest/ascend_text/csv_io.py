"""CSV through DuckDB (or the plain-CSV fast path): every column read as text, cleaned (trailing tabs,
quotes, N/A) and converted in SQL."""

from __future__ import annotations

import csv
import functools
import itertools
import os
import re
import threading
from pathlib import Path
from typing import Any

import duckdb
import numpy as np

from ...files import open_regular, read_bytes
from .numbers import I64_MAX, I64_MIN, ma, plain_numerals, scaled_texts

# --------------------------------------------------------------------------------------------------------
# CSV through DuckDB: every column read as text, cleaned (trailing tabs, quotes, N/A) and converted in SQL

# The characters trimmed from every cell, as literals: binding `chr(9) || ...` cost ~0.3 ms per column per
# query, which on small files (step_trace_time: 2 rows, 9 columns) was most of the read.
_TRIM = " \t\r\n"


# DuckDB's CSV sniffer costs ~25 ms per file, as much as parsing a 600 KB kernel_details.csv, and the reader
# ran it twice per file (DESCRIBE, then SELECT); the header is read here instead (`csv_header`) and every
# column is declared VARCHAR, which is what the sniffer was told to conclude anyway (all_varchar, header,
# delimiter and quoting given). strict_mode=false keeps its handling of ragged rows (null_padding: short
# rows padded, cells past the header dropped).
_CSV = ("read_csv(?, header=true, auto_detect=false, delim=',', quote='\"', escape='\"', null_padding=true, "
        "strict_mode=false, columns={columns})")


# A profiler CSV has tens of columns; DuckDB's reader costs memory per declared column (a header of a
# million cells took it to gigabytes), so a wider header is not read.
MAX_CSV_COLUMNS = 4096


def csv_header(path: Path) -> list[str]:
    """The column names DuckDB gives the header row of `path`: the cells (BOM dropped), an empty one named
    `column<i>`, a repeated one suffixed `_1`, `_2` .... Raises ValueError when there is no header row or
    more than MAX_CSV_COLUMNS cells in it."""
    with open_regular(path, "r", encoding="utf-8-sig", newline="") as f:
        cells = next(csv.reader(f), None)
    if not cells:
        raise ValueError("no header row")
    if len(cells) > MAX_CSV_COLUMNS:
        raise ValueError(f"{len(cells)} columns in the header, over the {MAX_CSV_COLUMNS} a profiler CSV has")
    names: list[str] = []
    seen: set[str] = set()
    for i, cell in enumerate(cells):
        name = cell or f"column{i}"
        base, k = name, 0
        while name in seen:
            k += 1
            name = f"{base}_{k}"
        seen.add(name)
        names.append(name)
    return names


# A CSV up to this size that
# has nothing DuckDB's reader treats specially is split here: the small per-rank files (step_trace_time,
# op_statistic, a short kernel_details) cost DuckDB 1-4 ms a query, ~10 ms of a small rank's ~75 ms, and a
# split 0.05-0.3 ms; above it, one Python str per cell costs more than DuckDB.
PLAIN_CSV_BYTES = 64 * 1024


# A line whose every field is either unquoted without a quote character, or wholly quoted (quotes
# doubled inside, no line break): both DuckDB and the csv module read such a line the same way.
_CSV_FIELD = r'(?:"(?:[^"\r\n]|"")*"|[^",\r\n]*)'


_CSV_LINE = re.compile(rf"{_CSV_FIELD}(?:,{_CSV_FIELD})*")


def plain_csv(path: Path, header: list[str]) -> list[list[str | None]] | None:
    """The columns `read_csv` as `_CSV` configures it gives for `path` (cells as text, an empty cell NULL,
    a quoted empty one too), when the file is small and plain: UTF-8, '\n' or '\r\n' line ends, no empty
    line, every field unquoted or wholly quoted (`_CSV_LINE`), every row as many cells as the header.
    Anything else (None) is left to DuckDB, whose dialect (padding short rows, stray quotes or '\r',
    quoted line breaks) is the reference."""
    try:
        if path.stat().st_size > PLAIN_CSV_BYTES:
            return None
        text = read_bytes(path).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    text = text.removeprefix("\ufeff")
    if "\x00" in text:
        return None
    if "\r" in text:
        text = text.replace("\r\n", "\n")
        if "\r" in text:
            return None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if not lines or "" in lines:
        return None
    if '"' in text:
        if not all(map(_CSV_LINE.fullmatch, lines)):
            return None
        rows = list(csv.reader(lines))
    else:
        rows = [line.split(",") for line in lines]
    width = len(header)
    if any(len(r) != width for r in rows):
        return None
    rows = rows[1:]
    return [[c if c else None for c in col] for col in zip(*rows, strict=True)] if rows else [[] for _ in header]


def csv_source(names: list[str], parallel: bool = True) -> str:
    """The `read_csv` call of a CSV with these header names, every column VARCHAR. `parallel=False` for a
    file with line breaks inside quoted cells (operator_details.csv call stacks): DuckDB's parallel scanner
    refuses those together with null_padding."""
    cols = ", ".join("'" + n.replace("'", "''") + "': 'VARCHAR'" for n in names)
    src = _CSV.format(columns="{" + cols + "}")
    return src if parallel else src[:-1] + ", parallel=false)"


def q(col: str) -> str:
    return '"' + col.replace('"', '""') + '"'


def sql_text(col: str, quotes: bool = False) -> str:
    chars = _TRIM + ('"' if quotes else "")
    return f"NULLIF(NULLIF(trim({q(col)}, '{chars}'), ''), 'N/A')"


def sql_int(col: str) -> str:
    return f"TRY_CAST(round(TRY_CAST({sql_text(col)} AS DOUBLE)) AS BIGINT)"


def _sql_float(col: str) -> str:
    return f"TRY_CAST({sql_text(col)} AS DOUBLE)"


def sql_ns(col: str) -> str:
    """Exact µs text -> ns: DECIMAL(38,3) keeps every digit of an absolute epoch µs value."""
    return f"TRY_CAST(round(TRY_CAST({sql_text(col)} AS DECIMAL(38,3)) * 1000) AS BIGINT)"


def sql_bytes(col: str, unit: int) -> str:
    return f"TRY_CAST(round(TRY_CAST({sql_text(col)} AS DOUBLE) * {unit}) AS BIGINT)"


# A converted CSV column: (alias, CSV column, kind); the kind names its `_sql_*` conversion (`sql_of`), which
# `plain_column` reproduces in Python for plain cells.
TEXT, QTEXT, INT, NS, FLOAT = "text", "qtext", "int", "ns", "float"


Converted = tuple[str, str, str]


def sql_of(alias: str, col: str, kind: str) -> str:
    conv = {TEXT: sql_text, QTEXT: functools.partial(sql_text, quotes=True), INT: sql_int, NS: sql_ns,
            FLOAT: _sql_float}[kind]
    return f"{conv(col)} AS {alias}"


# Lines of plain float numerals: '-', up to 15 integer digits, up to 15 decimals. DuckDB's VARCHAR -> DOUBLE
# cast (fast_float) and Python's float() both round these correctly, to the same nearest double.
_PLAIN_FLOATS = re.compile(r"-?[0-9]{1,15}(?:\.[0-9]{1,15})?(?:\n-?[0-9]{1,15}(?:\.[0-9]{1,15})?)*")


# Lines of µs numerals with exactly 3 decimals (a subset of `plain_numerals(3, 18)`).
_MILLI_NUMERALS = re.compile(r"-?[0-9]{1,18}\.[0-9]{3}(?:\n-?[0-9]{1,18}\.[0-9]{3})*")


def plain_column(cells: list[str | None], kind: str, nulls: bool) -> Any:
    """The `Frame` column DuckDB gives for the `sql_of` conversion `kind` of VARCHAR `cells` (None: NULL),
    or None when a non-NULL cell (after trim and NULLIF) is not a plain numeral that both convert alike.
    `nulls`: whether `cells` may hold None.

    Text: a list. Numbers: int64 / float64 arrays, a masked int64 array when an integer column has NULLs
    (NaN marks them in a float column). int: at most 15 digits, no decimals (exact as DOUBLE, so round()
    keeps it); ns: at most 18 integer digits (absolute epoch µs have 16) and 3 decimals, scaled exactly as
    DECIMAL(38,3) does, when all fit BIGINT (DuckDB's TRY_CAST gives NULL for the others)."""
    plain = None if kind in (TEXT, QTEXT) else \
        {INT: plain_numerals(0, 15), NS: plain_numerals(3, 18), FLOAT: _PLAIN_FLOATS}[kind]
    if plain is not None and not nulls and cells:
        # cells that already are plain numerals (no blank, quote or NULL text to trim): as they are
        text = "\n".join(cells)  # type: ignore[arg-type]
        if text.count("\n") == len(cells) - 1 and plain.fullmatch(text):
            return _numbers(cells, cells, text, kind)  # type: ignore[arg-type]
    chars = _TRIM + '"' if kind == QTEXT else _TRIM
    texts = ([c if c is None else c.strip(chars) for c in cells] if nulls
             else list(map(str.strip, cells, itertools.repeat(chars))))  # type: ignore[arg-type]
    if "" in texts or "N/A" in texts:
        texts = [None if t == "" or t == "N/A" else t for t in texts]
    if plain is None:
        return texts
    present = [t for t in texts if t is not None]
    text = "\n".join(present)
    if present and (text.count("\n") != len(present) - 1 or not plain.fullmatch(text)):
        return None
    return _numbers(texts, present, text, kind)


def _numbers(texts: list[str | None], present: list[str], text: str, kind: str) -> Any:
    """`plain_column`'s numeric column of the trimmed cells `texts` (None: NULL), whose non-NULL ones,
    `present`, are plain numerals, joined by newlines in `text`; None when an ns value is beyond int64."""
    if kind == NS and _MILLI_NUMERALS.fullmatch(text):
        # the usual export: 3 decimals everywhere, so the digits without the dot are the ns
        values: list[Any] = list(map(int, text.replace(".", "").split("\n")))
    else:
        values = (list(map(int, present)) if kind == INT else scaled_texts(present, 3) if kind == NS
                  else list(map(float, present)))
    if kind == NS and values and not (min(values) >= I64_MIN and max(values) <= I64_MAX):
        return None
    dtype = np.float64 if kind == FLOAT else np.int64
    if len(present) == len(texts):
        return np.array(values, dtype=dtype)
    mask = np.array([t is None for t in texts], dtype=bool)
    data = np.full(len(texts), np.nan if kind == FLOAT else 0, dtype=dtype)
    data[~mask] = values
    return data if kind == FLOAT else ma(data, mask)


class Frame:
    """The columns of a CSV read, all of one length (what the reader took from a DataFrame): int64 arrays
    (masked, with a full mask, when a column has NULLs), float64 arrays (NaN: NULL), object arrays of
    str / None."""

    __slots__ = ("cols", "n")

    def __init__(self, cols: dict[str, np.ndarray], n: int) -> None:
        self.cols = cols
        self.n = n

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]

    def __setitem__(self, name: str, col: np.ndarray) -> None:
        self.cols[name] = col

    def __contains__(self, name: str) -> bool:
        return name in self.cols

    def __len__(self) -> int:
        return self.n

    def take(self, rows: np.ndarray) -> Frame:
        return Frame({c: v[rows] for c, v in self.cols.items()}, len(rows))


def isna(col: np.ndarray) -> np.ndarray:
    """NULL mask of a `Frame` column."""
    if isinstance(col, np.ma.MaskedArray):
        return np.ma.getmaskarray(col)
    if col.dtype.kind == "f":
        return np.isnan(col)
    if col.dtype == object:
        return np.equal(col, None)
    return np.zeros(len(col), dtype=bool)


def frame_column(a: np.ndarray) -> np.ndarray:
    """A column of DuckDB's `fetchnumpy()` as a `Frame` column (the values `.df()` gives)."""
    if a.dtype.kind in "iu":
        if isinstance(a, np.ma.MaskedArray):
            mask = np.array(np.ma.getmaskarray(a), dtype=bool)
            return ma(np.array(np.ma.getdata(a), dtype=np.int64), mask) if mask.any() else \
                np.array(np.ma.getdata(a), dtype=np.int64)
        return a.astype(np.int64, copy=False)
    if a.dtype.kind == "f":
        data = np.array(np.ma.getdata(a), dtype=np.float64)
        if isinstance(a, np.ma.MaskedArray):
            data[np.ma.getmaskarray(a)] = np.nan
        return data
    data = np.array(np.ma.getdata(a), dtype=object)
    if isinstance(a, np.ma.MaskedArray):
        data[np.ma.getmaskarray(a)] = None
    return data


# --------------------------------------------------------------------------------------------------------
# the rank reader


_DUCK = threading.local()   # .con, .pid: this thread's in-memory DuckDB (see csv_cursor)


_ABANDONED: list[Any] = []  # databases inherited through fork(): never closed in the child


def csv_cursor() -> duckdb.DuckDBPyConnection:
    """A new cursor on this thread's in-memory DuckDB, which runs the CSV reads of every rank.

    Creating a database costs ~20 ms, about as much as reading a rank's CSVs; a cursor costs nothing. Only
    read_csv queries run on it and nothing is stored in it, so ranks cannot see each other. The database
    lives as long as its thread; a process forked from this one makes its own (one copied by fork is left
    alone: its threads did not come along).
    """
    con = getattr(_DUCK, "con", None)
    if con is None or _DUCK.pid != os.getpid():
        if con is not None:
            _ABANDONED.append(con)
        con = _DUCK.con = duckdb.connect()
        _DUCK.pid = os.getpid()
    return con.cursor()
