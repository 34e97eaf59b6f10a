"""A profile is one DuckDB database, built once per distinct input and cached.

Algorithm:
1. discover(PATH) lists the ranks and their formats;
2. the fingerprint is a SHA-256 over every input file's relative path, size and mtime (ns), the schema
   text and the reader version: unchanged input -> same cache file -> no parsing at all;
3. on a miss the database is built in `<fp>.duckdb.tmp-<pid>-<thread>` and renamed over the cache file
   only when complete (os.replace is atomic), so a crash never leaves a cache that gets used;
4. small inputs (one rank, or less than PARALLEL_MIN_BYTES) are parsed and inserted in this process.
   Larger ones go to child processes so that no process holds much. The ingest process is a fresh
   interpreter (`python -c`: no fork of a threaded host, no re-run of an unguarded `__main__`), except
   for a caller that controls its whole state and asks for `fork=True` (the CLI): while it runs one
   thread and has no database open it is forked, so the ingest process starts at once with what the
   caller has loaded, and the caller's own imports run beside the ingest process's:
   * one ingest process owns the database: it starts the parse workers (as many as the usable CPUs and
     the available memory allow for the largest rank: `machine.plan_workers`), hands each one rank at a time,
     and inserts what comes back as it arrives, a frame at a time from whichever worker is ready;
   * a parse worker is forked from the ingest process after it has imported the readers the input needs
     (Kineto: numpy + msgspec; Ascend: also pandas and DuckDB) and before it opens the database, so it
     starts in milliseconds with them loaded; it parses its rank into `RankTables` and sends the typed
     numpy columns (`RankTables.parts()`) in chunks of half a row group, each a framed pickle whose
     arrays follow as raw out-of-band buffers on its stdout. A reader in STREAMING (the Ascend text
     export) hands its big tables over as it finishes each (`RankTables.stream`), and they are sent
     while it reads the next file, the heap it frees after its big phases given back (`_trim`): a rank's
     tables are never all in the worker (a 400k-event rank: worker peak 272 -> 131-154 MB);
   * this process only waits, passing progress on, and meanwhile imports what it needs to open the
     database. Children whose results are in are not waited for: they exit on their own and are reaped
     later (a process with ~150 MB mapped takes ~0.1 s to exit here).
5. inserting (`_Writer`): the database is attached with row groups of ROW_GROUP_ROWS rows and each
   table has its own cursor whose transaction is committed exactly at a row-group boundary, so every
   full row group is compressed and written straight to the file (DuckDB's optimistic write: no WAL
   copy, no partial row group per rank) and at most about one uncompressed row group per table is in
   memory, whatever the number or size of the ranks. Blocks of fewer than POOL_BELOW_ROWS rows (a
   rank's steps, env vars, metadata, the tail of a table) wait in a pool per table and are inserted
   together, warnings and capabilities at the end: an INSERT costs ~1 ms whatever its size, which on
   many small ranks made the single inserter the bottleneck. Rows of several ranks may share a row group; a
   rank id is claimed by the first rank that sends rows, so a rank that fails half-way (its worker died,
   or its reader failed after it streamed tables) is removed with `DELETE ... WHERE rank = ?` and a
   duplicate rank id is refused before any of its rows are written. A rank that fails is skipped with a warning when other ranks are stored; if none is, the
   first error is raised.

Nothing is written next to the input: the cache lives under $STEPDOCTOR_CACHE_DIR, else
$XDG_CACHE_HOME/stepdoctor, else ~/.cache/stepdoctor.

This module imports neither duckdb nor pydantic at the top, so a parse worker that imports it stays
small; they are imported where they are used.
"""

from __future__ import annotations

import collections
import contextlib
import copyreg
import ctypes
import functools
import gc
import hashlib
import importlib
import io
import os
import pickle
import re
import select
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, BinaryIO

from . import machine, one_blas_thread
from .ingest.base import Coded, ProfileError, RankSource, RankTables, StoreError, schema_sql
from .ingest.discover import Discovery, discover

if TYPE_CHECKING:
    import duckdb
    import numpy as np

    from .models import ProfileInfo

@functools.cache
def reader_version() -> str:
    """A digest of the code that decides what the cache holds (the readers and this module), so a cache built
    by other code is never reused: an upgrade or a local edit re-parses, unchanged code never does."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent
    for f in sorted([here / "store.py", *(here / "ingest").rglob("*.py")]):
        h.update(f.relative_to(here).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


# format -> the reader's module, imported when a rank of that format is read (a reader's dependencies load only
# when needed, and a broken optional reader cannot break the others); each module has `read_rank(src)`.
def _kineto() -> ModuleType:
    from .ingest import kineto
    return kineto


def _ascend_text() -> ModuleType:
    from .ingest import ascend_text
    return ascend_text


def _ascend_db() -> ModuleType:
    from .ingest import ascend_db
    return ascend_db


def _mindspore_legacy() -> ModuleType:
    from .ingest import mindspore_legacy
    return mindspore_legacy


def _msprof() -> ModuleType:
    from .ingest import msprof
    return msprof


READERS: dict[str, Callable[[], ModuleType]] = {
    "kineto": _kineto,
    "ascend_pt_text": _ascend_text,
    "ascend_ms_text": _ascend_text,
    "ascend_pt_db": _ascend_db,
    "ascend_ms_db": _ascend_db,
    "mindspore_legacy": _mindspore_legacy,
    "ascend_msprof": _msprof,
}

# Below this many input bytes in total, ingest runs in this process: starting the child processes (~0.1 s)
# and inserting the last ranks after they are parsed cost more than parsing in parallel saves (measured on
# 2 cores with Kineto ranks: 4 × 23 MB 1.0 s here vs 1.2 s in children, 2 × 93 MB 1.8 s either way,
# 8 × 93 MB 5.3-7.0 s vs 3.8-4.2 s at load 2). Above it, the children also keep the host process small.
PARALLEL_MIN_BYTES = 128 << 20

# Row-group size of the database being built (set when attaching it; DuckDB's default is 122,880): a
# transaction that appends exactly this many rows to a table has them compressed and written to the file
# at once, and the ingest process holds at most about one uncompressed row group per table. 30,720 rows
# keep that process ~20 MB smaller than the default for ~15 % more file and the same query speed
# (evals/bench/README.md). Parse workers send chunks of half a row group.
ROW_GROUP_ROWS = 30_720
DEFAULT_ROW_GROUP_ROWS = 122_880  # DuckDB versions that cannot set it (< 1.2)
CHUNK_ROWS = ROW_GROUP_ROWS // 2
# A block of fewer rows waits in its table's pool, shared by the ranks, and is inserted with the others
# (see _Writer.data): an INSERT costs ~1 ms whatever its size, as much as ~15,000 rows of a column. Every
# block but a full chunk: a 256-rank profile of 5k-event ranks sends 2-3k rows of comm_tasks and links
# per rank, 1 ms more each when inserted alone.
POOL_BELOW_ROWS = CHUNK_ROWS

# The inserting connection: one thread (the parse workers have the cores), a small buffer pool (it caches
# blocks already written; the rows of the open transactions spill past it to the temp directory), and
# jemalloc handing freed memory back: at once from thread caches, and its dirty pages purged by its
# background thread (without it they stayed resident for seconds). Ingest process peak on 2 x 400k-event
# Ascend ranks, and its CPU on 8 x 93 MB of Kineto: 32 MB 156 MB / 1.36 s; 32 MB + purge 149 MB;
# 24 MB + purge 144-146 MB / 1.40 s; 16 MB + purge 135-140 MB / 1.51 s (2 MB spilled). 24 MB: the
# Ascend memory target with the least insert CPU.
WRITER_CONFIG = {"threads": 1, "memory_limit": "24MB", "allocator_flush_threshold": "1MB",
                 "allocator_background_threads": True}

ProgressFn = Callable[[int, int, str], None]


def cache_root() -> Path:
    if d := os.environ.get("STEPDOCTOR_CACHE_DIR"):
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "stepdoctor"


def _input_stats(src: RankSource) -> list[tuple[str, int, int]]:
    """(path relative to the rank directory, or the file's name; size; mtime in ns) of every file of a rank,
    in os.walk order (top-down, names sorted, a directory's files before its subdirectories; symlinked
    directories listed, not entered). One scandir per directory and no Path per file: on 256 ranks the
    pathlib walk took 0.17 s of every warm command."""
    if src.path.is_file():
        try:
            st = src.path.stat()
        except OSError:
            return []
        return [(src.path.name, st.st_size, st.st_mtime_ns)]
    out: list[tuple[str, int, int]] = []

    def walk(top: str, rel: str) -> None:
        try:
            with os.scandir(top) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            return
        dirs = []
        for e in entries:
            try:
                is_dir = e.is_dir()
            except OSError:
                is_dir = False
            if is_dir:
                dirs.append(e)
                continue
            try:
                st = e.stat()
            except OSError:
                continue
            out.append((rel + e.name, st.st_size, st.st_mtime_ns))
        for d in dirs:
            if not d.is_symlink():
                walk(d.path, f"{rel}{d.name}/")

    walk(str(src.path), "")
    return out


Listing = list[list[tuple[str, int, int]]]  # `_input_stats` of each source of a Discovery, in order


def input_listing(disc: Discovery) -> Listing:
    """Every source's files (`_input_stats`): listed once per open, for the fingerprint and the ingest."""
    return [_input_stats(s) for s in disc.sources]


def fingerprint(disc: Discovery, listing: Listing | None = None) -> str:
    h = hashlib.sha256()
    h.update(schema_sql().encode())
    h.update(reader_version().encode())
    for src, files in zip(disc.sources, listing or input_listing(disc), strict=True):
        h.update(f"\0{src.rank}\0{src.format}\0{src.path}".encode())
        for name, size, mtime_ns in files:
            h.update(f"{name}:{size}:{mtime_ns}".encode())
    return h.hexdigest()[:32]


def _reader(fmt: str) -> Callable[[RankSource], RankTables]:
    if fmt not in READERS:
        raise ProfileError(None, f"no reader for format {fmt}")
    try:
        return READERS[fmt]().read_rank
    except ModuleNotFoundError as e:
        raise ProfileError(None, f"no reader for format {fmt} in this build ({e.name})") from None


# The readers that can hand a rank's finished tables on while they read (`RankTables.stream`)
STREAMING = {"ascend_pt_text", "ascend_ms_text"}

Sink = Callable[[int, str, "dict[str, np.ndarray]"], None]


def read_source(src: RankSource, sink: Sink | None = None) -> RankTables:
    """Parse one rank; every failure becomes a ProfileError naming the file. `sink`: see `parse_rank`."""
    try:
        if sink is not None and src.format in STREAMING:
            return _reader(src.format)(src, sink, _trim)
        return _reader(src.format)(src)
    except (ProfileError, StoreError):
        raise
    except MemoryError:
        raise ProfileError(src.path, "out of memory while parsing") from None
    except Exception as e:  # a reader bug must still give the one-line error, not a traceback
        raise ProfileError(src.path, f"cannot parse: {type(e).__name__}: {e}") from None


Parts = list[tuple[str, "dict[str, np.ndarray]"]]


def parse_rank(src: RankSource, sink: Sink | None = None) -> tuple[RankTables, Parts]:
    """Parse one rank and type its columns for the insert; every failure is a ProfileError naming the file.

    `sink(rank, table, columns)`, for a reader in STREAMING: its big tables' typed blocks as the reader
    finishes them (they are then not in the parts returned); the rank may fail after some were given."""
    try:
        t = read_source(src, sink)
        return t, list(t.parts())
    except MemoryError:
        raise ProfileError(src.path, "out of memory while parsing") from None
    except ProfileError:
        raise
    except Exception as e:  # a value the schema cannot take: the rank is skipped
        raise ProfileError(src.path, f"cannot store the parsed rows: {e}") from None


# --------------------------------------------------------------------------------------------------
# Inserting
# --------------------------------------------------------------------------------------------------

def _connect_for_writing(path: Path) -> tuple[duckdb.DuckDBPyConnection, int]:
    """The database being built, attached as `profile`, and its row-group size (set when attaching)."""
    import duckdb

    global _DB_OPENED
    _DB_OPENED = True
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


def _insert(cur: duckdb.DuckDBPyConnection, table: str, cols: dict[str, Any], rank: int) -> None:
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


def _rows(cols: dict[str, Any]) -> int:
    return len(next(iter(cols.values()), ()))


class _Writer:
    """Inserts ranks' typed columns into the database being built (see the module docstring, step 5).

    Per rank: `claim(rank)` before its first rows (False: the id is taken, send nothing), `data()` for
    each block, then `done()` (its `ranks` row, warnings and capabilities; the rank is complete) or
    `abort()` (its rows are deleted). `finish()` commits everything and checkpoints.

    Small blocks (fewer than POOL_BELOW_ROWS rows: a rank's steps, env vars, metadata, the last rows of
    a table) are pooled per table with their rank and inserted together once CHUNK_ROWS rows wait, or at
    `finish()`; warnings and capabilities are inserted at `finish()`, and so are the `ranks` rows, each
    checked at `done()` to be its rank's one row (the primary key; claim() already refused a second
    source for the rank). On a profile of many small ranks this removes most statements: 16 ranks of 5k
    events took 0.82 s to insert, 13.6 ms per rank of it in the warnings' and capabilities'
    `executemany` alone, and each `ranks` row cost 2.2-2.7 ms as its own INSERT.
    """

    def __init__(self, con: duckdb.DuckDBPyConnection, row_group_rows: int = ROW_GROUP_ROWS) -> None:
        self.con = con
        self.row_group_rows = row_group_rows
        self._open: dict[str, list[Any]] = {}         # table -> [cursor, rows in its open transaction]
        self._claimed: set[int] = set()
        self._touched: dict[int, set[str]] = {}       # rank -> tables it has rows in (for abort)
        self._held: dict[int, list[dict[str, Any]]] = {}  # rank -> its `ranks` rows, inserted by done()
        self._pool: dict[str, list[tuple[int, dict[str, Any]]]] = {}  # table -> (rank, small block)
        self._pooled: dict[str, int] = {}             # table -> rows in its pool
        self._notes: list[tuple[int | None, str]] = []  # (rank, warning) of the completed ranks
        self._caps: list[tuple[int, str]] = []          # (rank, capability) of the completed ranks

    def claim(self, rank: int) -> bool:
        if rank in self._claimed:
            return False
        self._claimed.add(rank)
        return True

    def data(self, rank: int, table: str, cols: dict[str, Any]) -> None:
        n = _rows(cols)
        if not n:
            return
        if table == "ranks":  # the primary key: inserted once the rank is complete
            self._held.setdefault(rank, []).append(cols)
            return
        self._touched.setdefault(rank, set()).add(table)
        if n < POOL_BELOW_ROWS:
            self._pool.setdefault(table, []).append((rank, cols))
            self._pooled[table] = self._pooled.get(table, 0) + n
            if self._pooled[table] >= CHUNK_ROWS:
                self._flush(table)
            return
        self._append(table, cols, rank)

    def _append(self, table: str, cols: dict[str, Any], rank: int) -> None:
        """Insert a block through the table's own transaction, committed at each row-group boundary."""
        n = _rows(cols)
        entry = self._open.get(table)
        if entry is None:
            cur = self.con.cursor()
            cur.execute("USE profile")  # a cursor starts in the default (in-memory) catalog
            cur.execute("BEGIN TRANSACTION")
            entry = self._open[table] = [cur, 0]
        cur, have = entry
        i = 0
        while i < n:
            k = min(n - i, self.row_group_rows - have)
            _insert(cur, table, cols if k == n else {c: a[i:i + k] for c, a in cols.items()}, rank)
            i += k
            have += k
            if have >= self.row_group_rows:  # a full row group: commit, so DuckDB writes it compressed
                cur.execute("COMMIT")
                cur.execute("BEGIN TRANSACTION")
                have = 0
        entry[1] = have

    def _flush(self, table: str) -> None:
        blocks = self._pool.pop(table, [])
        self._pooled.pop(table, None)
        for cols in _merged(blocks):
            self._append(table, cols, -1)  # (every merged block has its rank column)

    def done(self, rank: int, warnings: list[str], capabilities: list[str]) -> str | None:
        """Complete a rank; returns why it could not be stored (it is then removed), else None."""
        import numpy as np

        held = self._held.pop(rank, [])
        ids = [int(r) for cols in held for r in (cols["rank"] if "rank" in cols else [rank] * _rows(cols))]
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
                self._pooled[table] = sum(_rows(cols) for _, cols in self._pool[table])
            if table in self._open:  # rows already inserted (its own blocks or a flushed pool)
                self._open[table][0].execute(f"DELETE FROM {table} WHERE rank = ?", [rank])
        if not keep_claim:
            self._claimed.discard(rank)

    def finish(self, warnings: list[str]) -> None:
        import numpy as np

        for table in list(self._pool):
            self._flush(table)
        for cur, _ in self._open.values():
            cur.execute("COMMIT")
            cur.close()
        self._open.clear()
        notes = [*self._notes, *((None, w) for w in warnings)]
        if notes:
            ranks = [r for r, _ in notes]
            _insert(self.con, "ingest_warnings",
                    {"rank": np.ma.MaskedArray([r or 0 for r in ranks], mask=[r is None for r in ranks],
                                               dtype=np.int64),
                     "message": np.array([w for _, w in notes], dtype=object)}, -1)
        if self._caps:
            _insert(self.con, "capabilities", {"rank": np.array([r for r, _ in self._caps], dtype=np.int64),
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
            merged["rank"] = np.concatenate([np.full(_rows(cols), r, dtype=np.int64) for r, cols in group])
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


def _store_parsed(writer: _Writer, t: RankTables, parts: Parts, src: RankSource) -> str | None:
    """Serial path: insert one parsed rank; returns the error that made it skipped, else None."""
    if not writer.claim(t.rank):
        return f"{src.path}: rank {t.rank} was already read from another source"
    for table, cols in parts:
        writer.data(t.rank, table, cols)
    err = writer.done(t.rank, list(t.warnings), sorted(t.capabilities))
    return f"{src.path}: {err}" if err else None


# --------------------------------------------------------------------------------------------------
# Child processes: framed pickles over pipes
# --------------------------------------------------------------------------------------------------

_HDR = struct.Struct("<cQI")  # kind, length of the pickle, number of out-of-band buffers after it
_LEN = struct.Struct("<Q")


def _send(f: BinaryIO, kind: bytes, obj: Any) -> None:
    """One frame: the pickle, then each contiguous array's bytes as they are in memory (pickle protocol 5
    out-of-band buffers), so neither side copies column data into or out of a pickle."""
    bufs: list[pickle.PickleBuffer] = []
    out = io.BytesIO()
    p = pickle.Pickler(out, protocol=5, buffer_callback=bufs.append)
    p.dispatch_table = _DISPATCH
    p.dump(obj)
    data = out.getbuffer()
    _write_all(f, _HDR.pack(kind, len(data), len(bufs)))
    _write_all(f, data)
    for b in bufs:
        raw = b.raw()
        _write_all(f, _LEN.pack(raw.nbytes))
        _write_all(f, raw)
    f.flush()


def _masked(data: np.ndarray, mask: np.ndarray) -> np.ma.MaskedArray:
    import numpy as np

    return np.ma.MaskedArray(data, mask=mask)


def _reduce_masked(a: np.ma.MaskedArray) -> tuple[Any, tuple[Any, Any]]:
    """A masked array as its data and mask arrays: numpy's own reduce copies both into the pickle."""
    import numpy as np

    return _masked, (np.ascontiguousarray(a.data), np.ascontiguousarray(np.ma.getmaskarray(a)))


class _Dispatch(dict):
    """The pickler's dispatch table: copyreg's, plus masked arrays (without importing numpy here)."""

    def __missing__(self, cls: type) -> Any:
        if cls.__name__ == "MaskedArray" and cls.__module__.startswith("numpy"):
            return _reduce_masked
        return copyreg.dispatch_table[cls]


_DISPATCH = _Dispatch()


def _write_all(f: BinaryIO, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:  # a raw pipe may take part of a write
        n = f.write(view)
        view = view[n:]


def _recv(f: BinaryIO) -> tuple[bytes, Any] | None:
    """One frame, or None at end of file (also mid-frame: the sender died). Arrays sent out of band come
    back as views of the buffers they were read into."""
    hdr = _read_exact(f, _HDR.size)
    if hdr is None:
        return None
    kind, n, nbufs = _HDR.unpack(hdr)
    data = _read_exact(f, n)
    bufs: list[bytearray] = []
    for _ in range(nbufs if data is not None else 0):
        size = _read_exact(f, _LEN.size)
        buf = None if size is None else _read_exact(f, _LEN.unpack(size)[0])
        if buf is None:
            return None
        bufs.append(buf)
    return None if data is None else (kind, pickle.loads(data, buffers=bufs))


def _readable(f: BinaryIO) -> bool:
    """Whether a read of `f` would not block now (a frame, or its end, is there)."""
    return bool(select.select([f], [], [], 0)[0])


def _widen_pipe(fd: int) -> None:
    """Ask for a 1 MiB pipe buffer (Linux; the default is 64 KiB): a rank's columns then cross in far
    fewer reads and writes, each of which may switch processes. Not possible elsewhere: nothing changes."""
    with contextlib.suppress(AttributeError, OSError):
        import fcntl

        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)  # type: ignore[attr-defined]


def _read_exact(f: BinaryIO, n: int) -> bytearray | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        k = f.readinto(view[got:])  # type: ignore[attr-defined]
        if not k:
            return None
        got += k
    return buf


def _child_env() -> dict[str, str]:
    return dict(one_blas_thread(dict(os.environ)))


class _ForkedProcess:
    """What _Child uses of subprocess.Popen, for a child made with os.fork()."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(0.005)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


# Children whose work is done and whose results are in, left to exit on their own: a process with
# ~150 MB mapped takes ~0.1 s to exit on these machines, and nothing waits for that any more (the ingest
# process reaps its workers after it has reported; a host reaps the ingest process in a thread, or, when
# it asked for fork=True, in `settle()` or not at all: a zombie until a short-lived program exits).
_EXITING: list[Any] = []


def _reap_exiting(timeout: float = 30.0) -> None:
    """Wait for the released children; one still alive after `timeout` seconds is killed (it can only be
    stuck: its input is closed and its results were received)."""
    while _EXITING:
        proc = _EXITING.pop()
        with contextlib.suppress(ChildProcessError, OSError):
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


# File descriptors a forked parse worker must not keep: the ingest process's pipe to its parent and the
# other workers' pipes (a worker holding another's stdin would keep it from ever seeing its end).
_NOT_FOR_FORKS: set[int] = set()


_DB_OPENED = False  # set once this process opens a DuckDB database (see _may_fork)


def _single_threaded() -> bool:
    """One OS thread in this process (C threads included, where /proc tells), else one Python thread."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return threading.active_count() == 1


def fork_safe() -> bool:
    """One thread and no database written here: nothing a fork could break (DuckDB may be imported: the
    Ascend reader needs it; an open database has threads and locks that a fork would copy mid-use, and a
    read-only one opened by `open_profile` must be closed first: see `Profile.reopen`)."""
    return hasattr(os, "fork") and not _DB_OPENED and _single_threaded()


def _host_may_fork() -> bool:
    """In a process whose whole state its program controls (the CLI asks with `fork=True`), not itself an
    ingest process: it may be forked for the ingest process, which then starts with everything this
    process has imported instead of importing it again in a new interpreter."""
    return not _NOT_FOR_FORKS and fork_safe()


def _may_fork() -> bool:
    """In an ingest process (it holds pipes kept out of forks) that has not opened its database yet: its
    parse workers are forked. A forked worker starts in milliseconds with the readers loaded, where a new
    interpreter takes ~0.15 s (Kineto) to ~0.45 s (Ascend: pandas and DuckDB); later workers (replacing
    one that died) are new interpreters."""
    return bool(_NOT_FOR_FORKS) and fork_safe()


class _Child:
    """A child running `_child_main(role)`: stdin/stdout carry frames, stderr goes to a file. A new
    interpreter (`python -c`), or with fork=True a fork of this process (see _may_fork)."""

    def __init__(self, role: str, fork: bool = False) -> None:
        self.err = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self.proc: Any
        if fork:
            self._fork(role)
        else:
            # os._exit: all output is flushed and every file closed by then; the interpreter's teardown
            # (~50 ms with pandas and DuckDB loaded) would only compete with the host for a core
            code = (f"import sys; sys.path[:] = {sys.path!r}; "
                    f"from {__name__} import _child_main; _child_main({role!r}); import os; os._exit(0)")
            self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self.err, bufsize=0,
                                         env=_child_env(), close_fds=True)
            self.inp: BinaryIO = self.proc.stdin
            self.out: BinaryIO = self.proc.stdout
            _widen_pipe(self.out.fileno())
        self.task: RankSource | None = None  # the rank it is parsing or sending
        self.finished = 0                     # tasks completed
        self.rank: int | None = None          # the rank id its task's first rows came with
        self.refused = False                  # that id was taken by another source: its rows are dropped
        self.released = False                 # see release()

    def _fork(self, role: str) -> None:
        task_r, task_w = os.pipe()
        out_r, out_w = os.pipe()
        _widen_pipe(out_w)
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the ingest process's code
            code = 1
            try:
                os.dup2(task_r, 0)
                os.dup2(out_w, 1)
                os.dup2(self.err.fileno(), 2)
                for fd in {task_r, task_w, out_r, out_w, *_NOT_FOR_FORKS}:
                    if fd > 2:
                        with contextlib.suppress(OSError):
                            os.close(fd)
                _child_main(role, os.fdopen(0, "rb", buffering=0, closefd=False))
                code = 0
            except BaseException:  # reported on stderr, like a dying interpreter
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(task_r)
        os.close(out_w)
        self.proc = _ForkedProcess(pid)
        self.inp = os.fdopen(task_w, "wb", buffering=0)
        self.out = os.fdopen(out_r, "rb", buffering=0)
        _NOT_FOR_FORKS.update((task_w, out_r, self.err.fileno()))

    def send(self, kind: bytes, obj: Any) -> bool:
        try:
            _send(self.inp, kind, obj)
            return True
        except (BrokenPipeError, OSError):
            return False

    def close_input(self) -> None:
        with contextlib.suppress(OSError):
            self.inp.close()

    def death(self) -> str:
        """Why the child ended: exit status and the last line it wrote to stderr."""
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.err.seek(0)
        lines = [ln for ln in self.err.read()[-4000:].decode("utf-8", "replace").splitlines() if ln.strip()]
        how = f"killed by signal {-rc}" if rc < 0 else f"exit code {rc}"
        if rc == -9:
            how += ", out of memory?"
        return how + (f": {lines[-1].strip()}" if lines else "")

    def close(self) -> None:
        self.close_input()
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_files()

    def _close_files(self) -> None:
        """Our ends of its output and error files (no longer kept out of later forks)."""
        for f in (self.out, self.err):
            with contextlib.suppress(OSError, ValueError):
                _NOT_FOR_FORKS.discard(f.fileno())
            with contextlib.suppress(OSError):
                f.close()

    def kill(self) -> None:
        if self.released:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.close()

    def release(self) -> None:
        """Its work is done and received: close our ends and let it exit without waiting (_EXITING)."""
        if self.released:
            return
        self.released = True
        self.close_input()
        self._close_files()
        _EXITING.append(self.proc)


def _child_main(role: str, inp: BinaryIO | None = None) -> None:
    """Entry point of a child (see _Child)."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a stray print goes to stderr, never into the frames
    sys.stdout = sys.stderr
    gc.freeze()  # the imported modules never need collecting
    if role == "parse":
        _parse_main(inp or sys.stdin.buffer, out)
    elif role == "ingest":
        _NOT_FOR_FORKS.add(out.fileno())  # its parse workers are forked from it: they must not hold this
        _ingest_main(inp or sys.stdin.buffer, out)
    else:
        raise SystemExit(f"unknown role {role}")


def _parse_main(inp: BinaryIO, out: BinaryIO) -> None:
    """Parse worker: for each task (a RankSource), D frames (rank, table, columns) then one R frame
    (rank, (warnings, capabilities) | None, error | None); D frames of a streaming reader's tables go as
    it reads, so an R frame with an error may follow some. Sending blocks until the ingest process has
    taken the frames in; a thread sending one rank while the next is parsed was measured no faster on
    two cores (the cores are busy either way) and holds one more rank."""

    def sink(rank: int, table: str, cols: dict[str, Any]) -> None:
        _send_table(out, rank, table, cols)

    while (frame := _recv(inp)) is not None:
        src: RankSource = frame[1]
        try:
            t, parts = parse_rank(src, sink)
        except ProfileError as e:
            _send_rank(out, src.rank, [], None, str(e))  # (the ingest process removes rows sent before)
            continue
        _send_rank(out, t.rank, parts, (list(t.warnings), sorted(t.capabilities)), None)
        del t, parts


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]


_GLIBC: list[Any] = []
TRIM_MIN_FREE = 32 << 20


def _trim() -> None:
    """Give the heap's free pages back to the system when at least TRIM_MIN_FREE bytes of it are free
    (glibc `mallinfo2` / `malloc_trim`; elsewhere nothing). A parse worker calls it when a streaming reader
    has dropped a big phase's columns (`RankTables.settled`): the freed blocks sit among live ones, and
    glibc only returns the top of its heap by itself. On a rank of 400k trace events 45 MB are free after
    the trace is joined, and the worker's peak fell from 160 to 142 MB; at 100k, 15 MB, where giving them
    back cost more than it saved (each page given back faults again when reused: trimming after every
    table sent, and after each rank, took ~10 % more worker CPU for the same peak)."""
    if not _GLIBC:
        try:
            libc = ctypes.CDLL(None)
            libc.mallinfo2.restype = _MallInfo2
            _GLIBC.append((libc.mallinfo2, libc.malloc_trim))
        except (OSError, AttributeError):
            _GLIBC.append(None)
    if _GLIBC[0] is not None:
        info, trim = _GLIBC[0]
        if info().fordblks >= TRIM_MIN_FREE:
            trim(0)


def _send_rank(out: BinaryIO, rank: int, parts: Parts, info: Any, err: str | None) -> None:
    for table, cols in parts:
        _send_table(out, rank, table, cols)
    _send(out, b"R", (rank, info, err))


def _send_table(out: BinaryIO, rank: int, table: str, cols: dict[str, Any]) -> None:
    """One block of a table as D frames of at most CHUNK_ROWS rows."""
    for chunk in _chunks(cols):
        _send(out, b"D", (rank, table, chunk))


def _chunks(cols: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A block of columns in slices of CHUNK_ROWS rows; a slice of a coded column carries only its labels."""
    n = _rows(cols)
    if n <= CHUNK_ROWS:
        yield cols
        return
    for i in range(0, n, CHUNK_ROWS):
        chunk = {c: a[i:i + CHUNK_ROWS] for c, a in cols.items()}
        yield {c: a.compact() if isinstance(a, Coded) and len(a.labels) > CHUNK_ROWS // 8 else a
               for c, a in chunk.items()}


def _ingest_main(inp: BinaryIO, out: BinaryIO) -> None:
    """Ingest process: build the database described by the J frame. It answers H (started), then P
    frames (progress), and last S (ranks stored, errors) or E (why the build failed)."""
    frame = _recv(inp)
    if frame is None:
        return
    job = frame[1]
    _send(out, b"H", None)
    cons: list[duckdb.DuckDBPyConnection] = []

    def open_writer() -> _Writer:
        con, rows = _connect_for_writing(Path(job["db"]))
        cons.append(con)
        return _Writer(con, rows)

    # The readers are imported once here, before the workers are forked, so each worker starts with them
    # loaded (the Ascend reader pulls in pandas and DuckDB: ~0.3 s CPU per worker otherwise). A reader that
    # cannot be imported is left to fail in the worker, where it becomes that rank's one-line error.
    for fmt in sorted({s.format for s in job["sources"]}):
        with contextlib.suppress(ProfileError):
            _reader(fmt)
    try:
        try:
            writer, stored, errors = _run_workers(job["sources"], job["workers"], open_writer,
                                                  lambda d, n, label: _send(out, b"P", (d, n, label)))
            writer.finish([*job["warnings"], *(f"rank skipped: {e}" for e in errors)])
        finally:
            for con in cons:
                con.close()
    except Exception as e:  # reported to the parent, which raises it
        _send(out, b"E", f"{type(e).__name__}: {e}")
        raise SystemExit(1) from None
    _send(out, b"S", (stored, errors))
    _reap_exiting()  # the parse workers, after the parent has its answer


def _run_workers(sources: list[RankSource], workers: int, open_writer: Callable[[], _Writer],
                 progress: Callable[[int, int, str], None]) -> tuple[_Writer, int, list[str]]:
    """Hand the ranks to `workers` parse workers, one at a time each; insert each block of rows as it
    arrives: from a worker, the frames it has ready, then from whichever worker is ready. A worker that
    sends a parsed rank has its frames ready one after the other and is read to its rank's end while
    the others parse (reading frames from all senders in turn kept every worker waiting on this one
    process: 8 x 93 MB of Kineto took 1.2x the parse floor instead of 0.95x); a worker that streams a
    rank's tables as it reads them (`RankTables.stream`) sends a frame now and then, and waiting for its
    next one would stall the others (2 x 400k Ascend events: 2.3x the floor instead of 1.7x). A rank's
    blocks arrive in order, each a run of rows. The database is opened (`open_writer`) once the
    workers are started, while they parse their first ranks. A worker that dies, or whose rank fails
    after it sent rows, fails its rank (the rows it sent are removed); a dead one is replaced.
    """
    n = len(sources)
    todo = collections.deque(sources)
    stored = done = 0
    errors: list[str] = []
    startup_failures = 0
    sel = selectors.DefaultSelector()
    children: list[_Child] = []

    def start() -> None:
        w = _Child("parse", fork=_may_fork())
        children.append(w)
        sel.register(w.out, selectors.EVENT_READ, w)
        assign(w)

    def assign(w: _Child) -> None:
        w.task = todo.popleft() if todo else None
        w.rank, w.refused = None, False
        if w.task is None or not w.send(b"T", w.task):
            w.close_input()  # no more work (or it is gone): it exits, its EOF is handled below

    def finished(label: Any, err: str | None) -> None:
        nonlocal stored, done
        if err:
            errors.append(err)
        else:
            stored += 1
        done += 1
        progress(done, n, f"rank {label}")

    def receive(w: _Child, task: RankSource) -> bool | None:
        """Handle one frame of `w`'s task: None when more follow (D: rows), True when the task is over (R),
        False when `w` died first."""
        frame = _recv(w.out)
        if frame is None:
            if w.rank is not None and not w.refused:
                writer.abort(w.rank)  # the rows it had sent
            return False
        kind, obj = frame
        if kind == b"D":
            r, table, cols = obj
            if w.rank is None:
                w.rank, w.refused = r, not writer.claim(r)
            if not w.refused:
                writer.data(r, table, cols)
            return None
        r, info, err = obj  # R: the task is over
        if err is None:
            if w.rank is None:
                w.rank, w.refused = r, not writer.claim(r)
            if w.refused:
                err = f"{task.path}: rank {r} was already read from another source"
            elif (why := writer.done(r, *info)) is not None:
                err = f"{task.path}: {why}"
        elif w.rank is not None and not w.refused:
            writer.abort(w.rank)  # it failed after sending tables it had finished
        finished(r, err)
        w.finished += 1
        return True

    try:
        for _ in range(max(1, min(workers, n))):
            start()
        writer = open_writer()
        while sel.get_map():
            for key, _ in sel.select():
                w: _Child = key.data
                got = receive(w, w.task) if w.task is not None else False
                while got is None and _readable(w.out):  # (see the docstring)
                    got = receive(w, w.task)
                if got is None:
                    continue
                if got:
                    assign(w)
                    if w.task is None:  # nothing left for it: its exit is not waited for
                        sel.unregister(w.out)
                        w.release()
                    continue
                sel.unregister(w.out)  # EOF: done with its tasks, or died
                if w.task is None:
                    w.close()
                    continue
                why = w.death()
                w.close()
                finished(w.task.rank, f"{w.task.path}: cannot parse: the parse worker died ({why})")
                startup_failures += not w.finished
                if startup_failures >= 3 and not stored:  # workers cannot even start: give up
                    while todo:
                        src = todo.popleft()
                        finished(src.rank, f"{src.path}: cannot parse: the parse worker died ({why})")
                elif todo:
                    start()
    finally:
        for w in children:
            w.kill()
    return writer, stored, errors


def build_database(disc: Discovery, out: Path, *, workers: int | None = None,
                   progress: ProgressFn | None = None, fork: bool = False,
                   background: Callable[[], None] | None = None, listing: Listing | None = None) -> list[str]:
    """Parse every rank of `disc` into a new database at `out`; returns ingest warnings.

    Small inputs are parsed and inserted here; larger ones by child processes (module docstring), in
    memory bounded per process whatever the number of ranks, with as many parse workers as the usable
    CPUs and the available memory allow (`machine.plan_workers`; `workers` overrides it). A rank that fails is skipped with a
    warning when other ranks are stored; if none is, the first error is raised. `fork` and `background`:
    see `open_profile`; `listing`: `input_listing(disc)` when the caller has it.
    """
    n = len(disc.sources)
    listing = listing or input_listing(disc)
    total_bytes = sum(size for files in listing for _, size, _ in files)
    if workers is None and n > 1 and total_bytes >= PARALLEL_MIN_BYTES:
        workers = machine.plan_workers([
            (s.format, machine.rank_input_bytes(s.path, [(name, size) for name, size, _ in files]))
            for s, files in zip(disc.sources, listing, strict=True)]).workers
    if n == 1 or (workers or 1) <= 1 or total_bytes < PARALLEL_MIN_BYTES or os.name != "posix":
        _start(background)
        stored, errors = _build_here(disc, out, progress)
    else:
        stored, errors = _build_in_children(disc, out, workers or 1, progress, fork, background)
    if stored == 0:
        raise ProfileError(None, errors[0] if errors else "no rank could be read")
    return [*disc.warnings, *(f"rank skipped: {e}" for e in errors)]


def _build_here(disc: Discovery, out: Path, progress: ProgressFn | None) -> tuple[int, list[str]]:
    n = len(disc.sources)
    stored = 0
    errors: list[str] = []
    con, rows = _connect_for_writing(out)
    try:
        writer = _Writer(con, rows)
        for i, src in enumerate(disc.sources):
            try:
                t, parts = parse_rank(src)
                err = _store_parsed(writer, t, parts, src)
                del t, parts
            except ProfileError as e:
                err = str(e)
            if err:
                errors.append(err)
            else:
                stored += 1
            if progress:
                progress(i + 1, n, f"rank {src.rank}")
        writer.finish([*disc.warnings, *(f"rank skipped: {e}" for e in errors)])
    finally:
        con.close()
    return stored, errors


_THREADS: list[threading.Thread] = []  # started by _start / _background: joined by settle()


def _start(work: Callable[[], None] | None) -> None:
    if work is not None:
        _background(work, "background")


def _background(work: Callable[[], None], name: str) -> None:
    t = threading.Thread(target=work, name=name, daemon=True)
    _THREADS.append(t)
    t.start()


def settle() -> None:
    """Wait for the threads `open_profile` started here (the caller's `background` work, imports) and reap
    the children released since that have exited, without waiting for the others. A host that asked for
    `fork=True` calls it before forking again (the checks' helper: analysis/checks/_split.py); the work
    joined is what it needs next anyway."""
    while _THREADS:
        _THREADS.pop().join()
    for proc in list(_EXITING):
        with contextlib.suppress(ChildProcessError, OSError):
            if proc.poll() is None:
                continue
        _EXITING.remove(proc)


def release_forked(pid: int) -> None:
    """A forked child whose results are in: reaped by `settle()` or `_reap_exiting()` once it has exited."""
    _EXITING.append(_ForkedProcess(pid))


def _preload() -> None:
    with contextlib.suppress(Exception):  # a failing import fails again where it is used, with its message
        importlib.import_module("duckdb")
        importlib.import_module(f"{__package__}.models")


def _build_in_children(disc: Discovery, out: Path, workers: int, progress: ProgressFn | None,
                       fork: bool = False, background: Callable[[], None] | None = None
                       ) -> tuple[int, list[str]]:
    # Forked, the ingest process starts at once with what this process has loaded; it imports the readers
    # itself while `background` (the CLI: pandas, the checks, the models) runs here on the other core.
    # Importing the readers here first and forking after saved their second import (~0.15 s CPU) but left
    # a core idle meanwhile: 0.1 s slower in 18 interleaved cold runs.
    child = _Child("ingest", fork=fork and _host_may_fork())
    _start(background)
    # this process opens the database next, with DuckDB and the pydantic header model (~0.2 s of imports):
    # load them while it only waits for the child
    _background(_preload, "preload")
    started = False
    result = failure = None
    try:
        if child.send(b"J", {"db": str(out), "sources": disc.sources, "workers": workers,
                             "warnings": list(disc.warnings)}):
            child.close_input()
            while (frame := _recv(child.out)) is not None:
                kind, obj = frame
                if kind == b"H":
                    started = True
                elif kind == b"P":
                    if progress:
                        progress(*obj)
                elif kind == b"S":
                    result = obj
                    break  # the database is complete and closed: the child's exit is not waited for
                elif kind == b"E":
                    failure = obj
        if result is None:
            why = failure or f"the ingest process died ({child.death()})"
            if not started:  # no child interpreter could run here (embedded Python, odd sys.executable...)
                child.kill()
                for p in (out, Path(f"{out}.wal")):
                    p.unlink(missing_ok=True)
                return _build_here(disc, out, progress)
            raise RuntimeError(f"ingest failed: {why}")
        child.release()
        if not fork:  # a host that asked for fork=True may fork again (settle() reaps then)
            threading.Thread(target=_reap_exiting, daemon=True).start()
    finally:
        child.kill()
    return result


@dataclass
class Profile:
    """An opened, ingested profile: a read-only DuckDB connection plus its header."""

    path: Path
    db_path: Path
    info: ProfileInfo
    warnings: list[str]
    con: duckdb.DuckDBPyConnection
    from_cache: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor for the calling thread (DuckDB connections are not shared across threads)."""
        with self._lock:
            return self.con.cursor()

    def sql(self, query: str, params: list | None = None):
        """Run a query on a fresh cursor and return a pandas DataFrame."""
        cur = self.cursor()
        try:
            return cur.execute(query, params or []).df()
        finally:
            cur.close()

    def arrays(self, query: str, params: list | None = None) -> dict[str, Any]:
        """Run a query and return its columns as numpy arrays (masked where NULL); no pandas involved."""
        cur = self.cursor()
        try:
            return cur.execute(query, params or []).fetchnumpy()
        finally:
            cur.close()

    def rows(self, query: str, params: list | None = None) -> list[tuple]:
        cur = self.cursor()
        try:
            return cur.execute(query, params or []).fetchall()
        finally:
            cur.close()

    def has_table_rows(self, table: str) -> bool:
        return bool(self.rows(f"SELECT 1 FROM {table} LIMIT 1"))

    def capabilities(self, rank: int | None = None) -> set[str]:
        q = "SELECT DISTINCT name FROM capabilities" + (" WHERE rank = ?" if rank is not None else "")
        return {r[0] for r in self.rows(q, [rank] if rank is not None else [])}

    def close(self) -> None:
        with self._lock:
            self.con.close()

    def reopen(self) -> None:
        """Close this connection and open a new one on the same database (read-only). Closing the last
        connection ends the database instance and DuckDB's threads with it, so a single-threaded host
        may fork in between (`fork_safe()`) and both processes reopen, each with its own instance;
        cursors taken from the old connection are closed with it."""
        import duckdb

        with self._lock:
            self.con.close()
            self.con = duckdb.connect(str(self.db_path), read_only=True)


def _profile_info(con: duckdb.DuckDBPyConnection, path: Path) -> ProfileInfo:
    from .models import ProfileInfo

    ranks = [r[0] for r in con.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()]
    fmts = sorted({r[0] for r in con.execute("SELECT DISTINCT format FROM ranks").fetchall()})
    # a rank with only its step table (no trace: step boundaries unknown) still has its steps
    steps = [r[0] for r in con.execute(
        "SELECT DISTINCT step FROM (SELECT step FROM steps WHERE kept UNION SELECT step FROM vendor_step_trace "
        "WHERE step IS NOT NULL AND rank NOT IN (SELECT rank FROM steps)) ORDER BY step").fetchall()]
    dropped = [r[0] for r in con.execute(
        "SELECT DISTINCT step FROM steps WHERE NOT kept AND step NOT IN (SELECT step FROM steps WHERE kept) "
        "ORDER BY step").fetchall()]
    ws = con.execute("SELECT max(world_size) FROM ranks").fetchone()[0]
    vendors = sorted({r[0] for r in con.execute("SELECT DISTINCT vendor FROM ranks").fetchall()})
    fws = sorted({r[0] for r in con.execute("SELECT DISTINCT framework FROM ranks WHERE framework IS NOT NULL")
                  .fetchall()})
    return ProfileInfo(path=str(path), format="+".join(fmts), ranks=ranks, steps=steps,
                       world_size=int(ws) if ws is not None else None,
                       vendor="+".join(vendors) or None, framework="+".join(fws) or None,
                       dropped_steps=dropped)


_OPEN: dict[Path, Profile] = {}
_OPEN_LOCK = threading.Lock()


_TMP_RE = re.compile(r"\.duckdb\.tmp-(\d+)-\d+(?:\.wal|\.tmp)?$")


def remove_stale_temporaries(root: Path) -> int:
    """Delete the half-built databases (`*.duckdb.tmp-PID-TID`, its .wal and spill folder) whose process is
    gone: a killed ingest leaves them, and they are never used. Returns how many paths were removed."""
    removed = 0
    with contextlib.suppress(OSError):
        for q in root.iterdir():
            m = _TMP_RE.search(q.name)
            if m is None or _pid_alive(int(m.group(1))):
                continue
            with contextlib.suppress(OSError):
                shutil.rmtree(q) if q.is_dir() else q.unlink()
                removed += 1
    return removed


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # alive, another user's
        return True
    return True


def open_profile(path: str | Path, *, cache_dir: Path | None = None, workers: int | None = None,
                 progress: ProgressFn | None = None, refresh: bool = False, fork: bool = False,
                 background: Callable[[], None] | None = None) -> Profile:
    """Discover, ingest (or reuse the cache) and open PATH read-only.

    Profiles opened in this process are memoised by database path, so concurrent tool calls share one
    read-only connection and take a cursor each.

    `fork=True` lets a program that controls its whole state (the CLI) have this process forked for the
    ingest process when it runs one thread and has no database open; any other caller gets a new
    interpreter (a fork copies whatever a host holds: locks, threads' state, open connections).
    `background` is work to run in a thread beside the ingest (the CLI's imports): started once no fork
    can come any more, or at once when the cache has the profile.
    """
    p = Path(path).expanduser().resolve()
    disc = discover(p)
    listing = input_listing(disc)
    fp = fingerprint(disc, listing)
    root = Path(cache_dir) if cache_dir else cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ProfileError(root, f"cannot create the cache directory ({e.strerror})") from None
    db = root / f"{fp}.duckdb"
    with _OPEN_LOCK:
        if not refresh and db in _OPEN:
            _start(background)
            return _OPEN[db]
        from_cache = db.exists() and not refresh
        if from_cache:
            _start(background)
        else:
            remove_stale_temporaries(root)
            tmp = root / f"{fp}.duckdb.tmp-{os.getpid()}-{threading.get_ident()}"
            tmp.unlink(missing_ok=True)
            try:
                build_database(disc, tmp, workers=workers, progress=progress, fork=fork, background=background,
                               listing=listing)
                os.replace(tmp, db)
            finally:
                tmp.unlink(missing_ok=True)
                Path(str(tmp) + ".wal").unlink(missing_ok=True)
                shutil.rmtree(str(tmp) + ".tmp", ignore_errors=True)  # DuckDB's spill directory
        import duckdb

        con = duckdb.connect(str(db), read_only=True)
        warnings = [r[0] for r in con.execute(
            "SELECT DISTINCT CASE WHEN rank IS NULL THEN message ELSE 'rank ' || rank || ': ' || message END "
            "FROM ingest_warnings ORDER BY 1").fetchall()]
        prof = Profile(path=p, db_path=db, info=_profile_info(con, p), warnings=warnings, con=con,
                       from_cache=from_cache)
        _OPEN[db] = prof
        return prof
