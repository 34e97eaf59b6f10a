"""Inserting ranks' typed columns into the database being built.

The database is attached with row groups of ROW_GROUP_ROWS rows and each table has its own cursor whose
transaction is committed exactly at a row-group boundary, so every full row group is compressed and written
straight to the file (no WAL copy, no partial row group per rank) and at most about one uncompressed row
group per table is in memory, whatever the number or size of the ranks. Small blocks are pooled per table
and inserted together. A rank id is claimed by the first rank that sends rows; a rank that fails half-way
is removed with `DELETE ... WHERE rank = ?`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..ingest.base import Coded, RankSource, RankTables, schema_sql
from .parse import Parts

if TYPE_CHECKING:
    import duckdb

# Row-group size of the database being built (set when attaching it; DuckDB's default is 122,880): a
# transaction that appends exactly this many rows to a table has them compressed and written to the file
# at once, and the ingest process holds at most about one uncompressed row group per table: a quarter of
# the default keeps it smaller for a slightly larger file and the same query speed (figures in
# evals/bench/).
ROW_GROUP_ROWS = 30_720
DEFAULT_ROW_GROUP_ROWS = 122_880  # DuckDB versions that cannot set it (< 1.2)
CHUNK_ROWS = ROW_GROUP_ROWS // 2
# Parse workers send a table's rows in frames of one row group: they then go in as one INSERT per commit
# where the table's transaction is at a boundary (an INSERT has a fixed cost; see POOL_BELOW_ROWS)
FRAME_ROWS = ROW_GROUP_ROWS
# A block of fewer rows waits in its table's pool, shared by the ranks, and is inserted with the others
# (see Writer.data): an INSERT has a fixed cost of about a millisecond whatever its size, so many small
# ranks' blocks inserted one by one would make the single inserter the bottleneck.
POOL_BELOW_ROWS = CHUNK_ROWS
# A table's pool is also inserted once its blocks hold this many bytes (text counted by its characters):
# rows of long text (the metadata's JSON values) would otherwise keep thousands of ranks' rows waiting.
POOL_MAX_BYTES = 4 << 20
# A table's open transaction is also committed once the blocks inserted in it hold this many bytes: DuckDB
# keeps the Python text values of uncommitted rows alive (it does not copy them), so a small table of long
# text would otherwise hold every rank's values until its row group fills. Such a commit leaves a partial
# row group; only text-heavy tables ever reach it.
TXN_MAX_BYTES = 16 << 20

# The inserting connection: one thread (the parse workers have the cores), a small buffer pool (it caches
# blocks already written; the rows of the open transactions spill past it to the temp directory), and
# jemalloc handing freed memory back: at once from thread caches, and its dirty pages purged by its
# background thread (otherwise they stay resident for seconds). 24 MB is the smallest pool that meets the
# ingest process's memory target without spilling much (figures in evals/bench/).
WRITER_CONFIG = {"threads": 1, "memory_limit": "24MB", "allocator_flush_threshold": "1MB",
                 "allocator_background_threads": True}


_DB_OPENED: list[bool] = []  # not empty once this process has opened a database for writing


def database_opened() -> bool:
    """Whether this process has opened a database for writing: it is never forked from then on (an open
    database has threads and locks a fork would copy mid-use; see build/forks.py `fork_safe`)."""
    return bool(_DB_OPENED)


def connect_for_writing(path: Path) -> tuple[duckdb.DuckDBPyConnection, int]:
    """The database being built, attached as `profile`, and its row-group size (set when attaching)."""
    import duckdb

    _DB_OPENED.append(True)
    try:
        con = duckdb.connect(config={**WRITER_CONFIG, "temp_directory": f"{path}.tmp"})
    except duckdb.Error:  # a DuckDB without the allocator settings
        con = duckdb.connect(config={"threads": 1, "memory_limit": WRITER_CONFIG["memory_limit"],
                                     "temp_directory": f"{path}.tmp"})
    quoted = str(path).replace("'", "''")
    try:
        con.execute(f"ATTACH '{quoted}' AS profile (ROW_GROUP_SIZE {ROW_GROUP_ROWS})")
        rows = ROW_GROUP_ROWS
    except duckdb.Error:  # an older DuckDB without the option
        con.execute(f"ATTACH '{quoted}' AS profile")
        rows = DEFAULT_ROW_GROUP_ROWS
    con.execute("USE profile")
    con.execute(schema_sql())
    return con, rows


def insert(cur: duckdb.DuckDBPyConnection, table: str, cols: dict[str, Any], rank: int) -> None:
    """INSERT one block of typed columns (absent columns: NULL or DEFAULT; absent rank: `rank`)."""
    names = ", ".join(f'"{c}"' for c in cols)
    cols = {c: a.decode() if isinstance(a, Coded) else a for c, a in cols.items()}
    cur.register("_part", cols)
    try:
        if "rank" in cols:
            cur.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM _part")
        else:
            cur.execute(f"INSERT INTO {table} (rank, {names}) SELECT ?, {names} FROM _part", [rank])
    finally:
        cur.unregister("_part")


def insert_file(cur: duckdb.DuckDBPyConnection, table: str, path: str, first: int, count: int, rank: int) -> None:
    """INSERT rows [first, first + count) of a Parquet file (in file order) into `table`."""
    names = [r[0] for r in cur.execute("SELECT name FROM parquet_schema(?) WHERE num_children IS NULL",
                                       [path]).fetchall()]
    cols = ", ".join(f'"{c}"' for c in names)
    rank_col, rank_val = ("", "") if "rank" in names else ("rank, ", "?, ")
    cur.execute(f"INSERT INTO {table} ({rank_col}{cols}) SELECT {rank_val}{cols} FROM read_parquet(?) "
                f"LIMIT {int(count)} OFFSET {int(first)}", ([rank] if rank_val else []) + [path])


# Text arrays longer than this are measured on an even sample of this many values (see block_bytes).
TEXT_SAMPLE = 512


def block_bytes(cols: dict[str, Any]) -> int:
    """About the memory a block holds: its arrays' bytes, plus the characters of its text values.

    A text column longer than TEXT_SAMPLE values is measured on an evenly spaced sample and scaled: the
    figure only decides when a pool or a transaction is flushed, so an estimate serves, and a loop over
    every value would run per row on the single inserting process."""
    total = 0
    for a in cols.values():
        if isinstance(a, Coded):
            total += a.codes.nbytes + _text_chars(a.labels)
        else:
            total += a.nbytes
            if a.dtype == object:
                total += _text_chars(a)
    return total


def _text_chars(values: Any) -> int:
    """Characters in the str values of a sequence (None and other values count 0), sampled past TEXT_SAMPLE."""
    n = len(values)
    step = max(1, n // TEXT_SAMPLE)
    sample = values[::step]
    chars = sum(len(s) for s in sample if isinstance(s, str))
    return chars if step == 1 else chars * n // len(sample)


def row_count(cols: dict[str, Any]) -> int:
    return len(next(iter(cols.values()), ()))


class Writer:
    """Inserts ranks' typed columns into the database being built (see the module docstring).

    Per rank: `claim(rank)` before its first rows (False: the id is taken, send nothing), `data()` for
    each block, then `done()` (its `ranks` row, warnings and capabilities; the rank is complete) or
    `abort()` (its rows are deleted). `finish()` commits everything and checkpoints.

    Small blocks (fewer than POOL_BELOW_ROWS rows: a rank's steps, env vars, metadata, the last rows of
    a table) are pooled per table with their rank and inserted together once CHUNK_ROWS rows wait, or at
    `finish()`; warnings and capabilities are inserted at `finish()`, and so are the `ranks` rows, each
    checked at `done()` to be its rank's one row (the primary key; claim() already refused a second
    source for the rank). On a profile of many small ranks this removes most statements.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, row_group_rows: int = ROW_GROUP_ROWS) -> None:
        self.con = con
        self.row_group_rows = row_group_rows
        self._open: dict[str, list[Any]] = {}  # table -> [cursor, rows and bytes in its open transaction]
        self._claimed: set[int] = set()
        self._touched: dict[int, set[str]] = {}       # rank -> tables it has rows in (for abort)
        self._held: dict[int, list[dict[str, Any]]] = {}  # rank -> its `ranks` rows, inserted by done()
        self._pool: dict[str, list[tuple[int, dict[str, Any]]]] = {}  # table -> (rank, small block)
        self._pooled: dict[str, int] = {}             # table -> rows in its pool
        self._pooled_bytes: dict[str, int] = {}       # table -> bytes in its pool (block_bytes)
        self._notes: list[tuple[int | None, str]] = []  # (rank, warning) of the completed ranks
        self._caps: list[tuple[int, str]] = []          # (rank, capability) of the completed ranks

    def claim(self, rank: int) -> bool:
        if rank in self._claimed:
            return False
        self._claimed.add(rank)
        return True

    def data(self, rank: int, table: str, cols: dict[str, Any]) -> None:
        n = row_count(cols)
        if not n:
            return
        if table == "ranks":  # the primary key: inserted once the rank is complete
            self._held.setdefault(rank, []).append(cols)
            return
        self._touched.setdefault(rank, set()).add(table)
        if n < POOL_BELOW_ROWS:
            self._pool.setdefault(table, []).append((rank, cols))
            self._pooled[table] = self._pooled.get(table, 0) + n
            self._pooled_bytes[table] = self._pooled_bytes.get(table, 0) + block_bytes(cols)
            if self._pooled[table] >= CHUNK_ROWS or self._pooled_bytes[table] >= POOL_MAX_BYTES:
                self._flush(table)
            return
        self._append(table, cols, rank)

    def data_file(self, rank: int, table: str, path: str, rows: int) -> None:
        """A block of `rows` rows of `table` in a Parquet file (its columns named as the table's; a missing
        rank column is `rank`): inserted by DuckDB from the file, in the table's transaction like `data`."""
        if not rows:
            return
        self._touched.setdefault(rank, set()).add(table)
        self._append_rows(table, rows, lambda cur, i, k: insert_file(cur, table, path, i, k, rank))

    def _append(self, table: str, cols: dict[str, Any], rank: int) -> None:
        n = row_count(cols)
        self._append_rows(table, n, lambda cur, i, k: insert(
            cur, table, cols if k == n else {c: a[i:i + k] for c, a in cols.items()}, rank), block_bytes(cols))

    def _append_rows(self, table: str, n: int, insert_rows: Callable[[Any, int, int], None], nbytes: int = 0
                     ) -> None:
        """Insert `n` rows (`nbytes` in memory) through the table's own transaction, committed at each
        row-group boundary and once TXN_MAX_BYTES are held: `insert_rows(cursor, first, count)` inserts a
        run of them."""
        entry = self._open.get(table)
        if entry is None:
            cur = self.con.cursor()
            cur.execute("USE profile")  # a cursor starts in the default (in-memory) catalog
            cur.execute("BEGIN TRANSACTION")
            entry = self._open[table] = [cur, 0, 0]
        cur, have, held = entry
        held += nbytes
        i = 0
        while i < n:
            k = min(n - i, self.row_group_rows - have)
            insert_rows(cur, i, k)
            i += k
            have += k
            if have >= self.row_group_rows:  # a full row group: commit, so DuckDB writes it compressed
                cur.execute("COMMIT")
                cur.execute("BEGIN TRANSACTION")
                have = held = 0
        if held >= TXN_MAX_BYTES:
            cur.execute("COMMIT")
            cur.execute("BEGIN TRANSACTION")
            held = 0
        entry[1], entry[2] = have, held

    def _flush(self, table: str) -> None:
        blocks = self._pool.pop(table, [])
        self._pooled.pop(table, None)
        self._pooled_bytes.pop(table, None)
        for cols in _merged(blocks):
            self._append(table, cols, -1)  # (every merged block has its rank column)

    def done(self, rank: int, warnings: list[str], capabilities: list[str]) -> str | None:
        """Complete a rank; returns why it could not be stored (it is then removed), else None."""
        import numpy as np

        held = self._held.pop(rank, [])
        ids = [int(r) for cols in held for r in (cols["rank"] if "rank" in cols else [rank] * row_count(cols))]
        if ids and ids != [rank]:  # e.g. a reader that gave two rows for its rank
            self.abort(rank, keep_claim=True)
            return f"cannot store the ranks row: {len(ids)} rows for rank {rank} (ranks {sorted(set(ids))})"
        if held:
            self._pool.setdefault("ranks", []).append((rank, {"rank": np.array([rank], dtype=np.int64), **held[0]}))
        self._notes += [(rank, w) for w in warnings]
        self._caps += [(rank, c) for c in capabilities]
        self._touched.pop(rank, None)
        return None

    def abort(self, rank: int, keep_claim: bool = False) -> None:
        """Remove a rank's rows (its id is unique among claimed ranks, so only its own rows go)."""
        self._held.pop(rank, None)
        for table in sorted(self._touched.pop(rank, ())):
            if pool := self._pool.get(table):
                self._pool[table] = [(r, cols) for r, cols in pool if r != rank]
                self._pooled[table] = sum(row_count(cols) for _, cols in self._pool[table])
                self._pooled_bytes[table] = sum(block_bytes(cols) for _, cols in self._pool[table])
            if table in self._open:  # rows already inserted (its own blocks or a flushed pool)
                self._open[table][0].execute(f"DELETE FROM {table} WHERE rank = ?", [rank])
        if not keep_claim:
            self._claimed.discard(rank)

    def finish(self, warnings: list[str]) -> None:
        import numpy as np

        for table in list(self._pool):
            self._flush(table)
        for cur, *_ in self._open.values():
            cur.execute("COMMIT")
            cur.close()
        self._open.clear()
        notes = [*self._notes, *((None, w) for w in warnings)]
        if notes:
            ranks = [r for r, _ in notes]
            insert(self.con, "ingest_warnings",
                    {"rank": np.ma.MaskedArray([r or 0 for r in ranks], mask=[r is None for r in ranks],
                                               dtype=np.int64),
                     "message": np.array([w for _, w in notes], dtype=object)}, -1)
        if self._caps:
            insert(self.con, "capabilities", {"rank": np.array([r for r, _ in self._caps], dtype=np.int64),
                                               "name": np.array([c for _, c in self._caps], dtype=object)}, -1)
        self.con.execute("CHECKPOINT profile")


def _merged(blocks: list[tuple[int, dict[str, Any]]]) -> list[dict[str, Any]]:
    """Pooled blocks of one table as one block per set of columns (readers give a table the same columns,
    so usually one), each with its rows' rank as a column; coded text decoded."""
    import numpy as np

    groups: dict[tuple[str, ...], list[tuple[int, dict[str, Any]]]] = {}
    for rank, cols in blocks:
        groups.setdefault(tuple(cols), []).append((rank, cols))
    out = []
    for names, group in groups.items():
        merged: dict[str, Any] = {}
        if "rank" not in names:
            merged["rank"] = np.concatenate([np.full(row_count(cols), r, dtype=np.int64) for r, cols in group])
        for name in names:
            parts = [cols[name].decode() if isinstance(cols[name], Coded) else cols[name] for _, cols in group]
            if len(parts) == 1:
                merged[name] = parts[0]
            elif any(isinstance(a, np.ma.MaskedArray) for a in parts):
                merged[name] = np.ma.concatenate(parts)
            else:
                merged[name] = np.concatenate(parts)
        out.append(merged)
    return out


def store_parsed(writer: Writer, t: RankTables, parts: Parts, src: RankSource) -> str | None:
    """Serial path: insert one parsed rank; returns the error that made it skipped, else None."""
    if not writer.claim(t.rank):
        return f"{src.path}: rank {t.rank} was already read from another source"
    for table, cols in parts:
        writer.data(t.rank, table, cols)
    err = writer.done(t.rank, list(t.warnings), sorted(t.capabilities))
    return f"{src.path}: {err}" if err else None
