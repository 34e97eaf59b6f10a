"""One rank's files as the phases read them (`RankFiles`): warnings naming them, JSON and CSV loading."""

from __future__ import annotations

import csv
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import duckdb
import msgspec
import numpy as np

from ...errors import ProfileError
from ...files import by_descriptor, open_regular, read_bytes
from ..ascend_columns import (
    FileColumns,
    Resolved,
)
from ..base import RankTables
from .common import ANALYSE_HINT
from .csv_io import (
    Converted,
    Frame,
    csv_cursor,
    csv_header,
    csv_source,
    frame_column,
    plain_column,
    plain_csv,
    q,
    sql_of,
)
from .frames import interned, objects
from .rank import RankDesc


class RankFiles:
    """The one mutable context of a rank's read: the tables being filled (their warnings and capabilities),
    and the caches of the file helpers (the CSV database cursor, each CSV's header between `resolve_csv` and
    the queries that follow it)."""

    def __init__(self, desc: RankDesc) -> None:
        self.root = desc.root
        self.t = RankTables(desc.rank)
        self._con: duckdb.DuckDBPyConnection | None = None  # (see `con`)
        self._csv_columns: dict[Path, list[str]] = {}      # CSV -> its column names (resolve_csv)

    @property
    def con(self) -> duckdb.DuckDBPyConnection:
        """A cursor on this thread's CSV database (`csv_cursor`), made when a CSV first needs DuckDB: the C
        scanner reads the plain ones, and a database costs a process ~24 MB (a parse worker's own)."""
        if self._con is None:
            self._con = csv_cursor()
        return self._con

    def close(self) -> None:
        if self._con is not None:
            self._con.close()

    # -- helpers --------------------------------------------------------------------------------------

    def rel(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.root))
        except ValueError:
            return str(path)

    def warn(self, path: Path, message: str) -> None:
        self.t.warn(f"{self.rel(path)}: {message}")

    def load_json(self, path: Path, *, numbers: Callable[[str], Any] | None = None) -> Any:
        """Decoded JSON, or None with a warning naming the file (empty / unreadable / invalid).

        `numbers` gets the text of every non-integer JSON number (msgspec float_hook: `Decimal` for exact
        values, `str` to convert them later); by default they are floats.
        """
        data = self.json_bytes(path)
        return None if data is None else self.decode_json(path, data, numbers)

    def json_bytes(self, path: Path) -> bytes | None:
        """The bytes of a JSON file, or None with a warning (unreadable / empty)."""
        try:
            data = read_bytes(path)
        except OSError as e:
            self.warn(path, f"unreadable ({e.strerror}); skipped")
            return None
        if not data or data.isspace():
            self.warn(path, "empty file; skipped")
            return None
        return data

    def decode_json(self, path: Path, data: bytes, numbers: Callable[[str], Any] | None) -> Any:
        """`load_json`'s decoding of the bytes of `path`."""
        try:
            if numbers is not None:
                return msgspec.json.Decoder(float_hook=numbers).decode(data)
            return msgspec.json.decode(data)
        except msgspec.DecodeError as e:
            self.warn(path, f"invalid JSON ({e}); skipped")
            return None
        except UnicodeDecodeError as e:  # msgspec's own error for a key that is not UTF-8
            self.warn(path, f"invalid JSON (not UTF-8 at byte {e.start}); skipped")
            return None

    def resolve_csv(self, path: Path, table: FileColumns, *, required: bool) -> Resolved | None:
        """Match a CSV header against its column table.

        A required file that is empty, unreadable or lacks required columns raises ProfileError; an optional
        one is skipped with a warning (None).
        """
        def fail(problem: str) -> None:
            if required:
                raise ProfileError(path, problem)
            self.warn(path, f"{problem}; skipped")

        if path.stat().st_size == 0:
            fail(f"empty file (0 bytes); {ANALYSE_HINT}")
            return None
        try:
            cols = csv_header(path)
        except (OSError, ValueError, csv.Error) as e:  # UnicodeDecodeError is a ValueError
            fail(f"not a readable CSV ({str(e).splitlines()[0] if str(e) else type(e).__name__})")
            return None
        self._csv_columns[path] = cols
        res = table.resolve(cols)
        if res.missing_required:
            # the file's own header is never echoed: a file may be a link to one the user cannot read
            fail(f"missing required columns: {', '.join(res.missing_required)} (the header has {len(cols)} "
                 f"columns, none of them {'that one' if len(res.missing_required) == 1 else 'these'})")
            return None
        return res

    def query_csv(self, path: Path, select: list[str], *, required: bool = False) -> Frame | None:
        """Run the converting SELECT over a CSV; a parse failure raises (required file) or warns (None)."""
        error = ""
        for parallel in (True, False):
            try:
                source = csv_source(self._csv_columns[path], parallel)
                # DuckDB opens the file by name: the name of the descriptor checked here (see files.py)
                with open_regular(path) as f:
                    got = self.con.execute(f"SELECT {', '.join(select)} FROM {source}",
                                           [by_descriptor(f, path)]).fetchnumpy()
                cols = {name: frame_column(a) for name, a in got.items()}
                return Frame(cols, len(next(iter(cols.values()))) if cols else 0)
            except OSError as e:
                error = str(e)
                break
            except duckdb.Error as e:
                error = str(e)
                if "parallel=false" not in error:  # the one failure the serial scanner does not have
                    break
        problem = f"cannot parse CSV: {_without_cells(error.splitlines()[0]) if error else 'unknown error'}"
        if required:
            raise ProfileError(path, problem) from None
        self.warn(path, f"{problem}; skipped")
        return None

    def query_converted(self, path: Path, cols: list[Converted], *, required: bool = False) -> Frame | None:
        """`query_csv` of the `sql_of` conversions `cols`, converted in Python (`plain_column`) when every
        cell allows it: DuckDB evaluating the ~25 conversions of a 1,600-row kernel_details.csv costs ~3x
        the plain read of its columns (~23 vs ~7 ms). Any other file (no rows, a cell that is not plain, a
        DuckDB error) goes through `query_csv`, which decides."""
        frame = None
        names = list(dict.fromkeys(col for _, col, _ in cols))
        header = self._csv_columns[path]
        plain = plain_csv(path, header)
        if plain is not None:  # what DuckDB reads from it, without DuckDB's ~1-4 ms per query
            cells = {name: plain[header.index(name)] for name in names}
            nulls = {name: None in c for name, c in cells.items()}
        else:
            try:
                got = self.con.execute(f"SELECT {', '.join(map(q, names))} FROM {csv_source(header)}",
                                       [str(path)]).fetchnumpy()
            except duckdb.Error:
                got = {}
            # by position: DuckDB may rename result columns (its names are case-insensitive)
            arrays = dict(zip(names, got.values(), strict=True)) if len(got) == len(names) else {}
            cells = {name: a.tolist() for name, a in arrays.items()}  # masked (NULL) -> None
            nulls = {name: isinstance(a, np.ma.MaskedArray) for name, a in arrays.items()}
        if cells and len(cells[names[0]]):
            out = {}
            for alias, col, kind in cols:
                out[alias] = plain_column(cells[col], kind, nulls[col])
                if out[alias] is None:
                    break
                if type(out[alias]) is list:  # text: one str per distinct value (names repeat every step)
                    out[alias] = objects(interned(out[alias]))
            else:
                frame = Frame(out, len(out[cols[0][0]]))
        if frame is None:
            return self.query_csv(path, [sql_of(*c) for c in cols], required=required)
        return frame


_QUOTED_RE = re.compile(r"\"[^\"]*\"|'[^']*'")


def _without_cells(message: str) -> str:
    """A DuckDB CSV error with its quoted parts (cell values, file text) replaced by `…`: messages name
    the file and the line, never echo what the file holds."""
    return _QUOTED_RE.sub("…", message)
