"""A profile is one DuckDB database, built once per distinct input and cached.

Algorithm:
1. discover(PATH) lists the ranks and their formats;
2. the fingerprint is a SHA-256 over every input file's relative path, size and mtime (ns), the schema
   text and the reader version: unchanged input -> same cache file -> no parsing at all;
3. on a miss, each rank is parsed by its format's reader (in a process pool when there are several
   ranks and enough bytes to pay for the workers), each worker writing its rows to a part database;
4. the parts are merged into `<fp>.duckdb.tmp-<pid>`, which is renamed over the cache file only when
   complete (os.replace is atomic), so a crash never leaves a cache that gets used.

Nothing is written next to the input: the cache lives under $STEPDOCTOR_CACHE_DIR, else
$XDG_CACHE_HOME/stepdoctor, else ~/.cache/stepdoctor.
"""

from __future__ import annotations

import hashlib
import importlib
import multiprocessing as mp
import os
import shutil
import tempfile
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from .ingest.base import ProfileError, RankSource, RankTables, schema_sql, table_columns
from .ingest.discover import Discovery, discover
from .models import ProfileInfo

READER_VERSION = "1"

# format -> "module:function" of the reader; imported lazily so a broken optional reader cannot break others.
READERS: dict[str, str] = {
    "kineto": "stepdoctor.analysis.ingest.kineto:read_rank",
    "ascend_pt_text": "stepdoctor.analysis.ingest.ascend_text:read_rank",
    "ascend_ms_text": "stepdoctor.analysis.ingest.ascend_text:read_rank",
    "ascend_pt_db": "stepdoctor.analysis.ingest.ascend_db:read_rank",
    "ascend_ms_db": "stepdoctor.analysis.ingest.ascend_db:read_rank",
    "mindspore_legacy": "stepdoctor.analysis.ingest.mindspore_legacy:read_rank",
}

# Below this many input bytes in total, worker start-up costs more than it saves.
PARALLEL_MIN_BYTES = 16 << 20

ProgressFn = Callable[[int, int, str], None]


def cache_root() -> Path:
    if d := os.environ.get("STEPDOCTOR_CACHE_DIR"):
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "stepdoctor"


def _input_files(src: RankSource) -> list[Path]:
    if src.path.is_file():
        return [src.path]
    out = []
    for root, dirs, files in os.walk(src.path):
        dirs.sort()
        out.extend(Path(root) / f for f in sorted(files))
    return out


def fingerprint(disc: Discovery) -> str:
    h = hashlib.sha256()
    h.update(schema_sql().encode())
    h.update(READER_VERSION.encode())
    for src in disc.sources:
        h.update(f"\0{src.rank}\0{src.format}\0{src.path}".encode())
        for f in _input_files(src):
            try:
                st = f.stat()
            except OSError:
                continue
            h.update(f"{f.relative_to(src.path) if src.path.is_dir() else f.name}:{st.st_size}:{st.st_mtime_ns}"
                     .encode())
    return h.hexdigest()[:32]


def _reader(fmt: str) -> Callable[[RankSource], RankTables]:
    mod_name, func = READERS[fmt].split(":")
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        raise ProfileError(None, f"no reader for format {fmt} in this build ({e.name})") from None
    return getattr(mod, func)


def read_source(src: RankSource) -> RankTables:
    """Parse one rank; every failure becomes a ProfileError naming the file."""
    try:
        return _reader(src.format)(src)
    except ProfileError:
        raise
    except MemoryError:
        raise ProfileError(src.path, "out of memory while parsing") from None
    except Exception as e:  # a reader bug must still give the one-line error, not a traceback
        raise ProfileError(src.path, f"cannot parse: {type(e).__name__}: {e}") from None


def _write_part(tables: RankTables, db_path: Path) -> None:
    """Write one rank's frames into a part database (one table per schema table)."""
    con = duckdb.connect(str(db_path))
    try:
        con.execute(schema_sql())
        for name, df in tables.frames().items():
            con.register("_df", df)
            con.execute(f"INSERT INTO {name} SELECT * FROM _df")
            con.unregister("_df")
        for w in tables.warnings:
            con.execute("INSERT INTO ingest_warnings VALUES (?, NULL, ?)", [tables.rank, w])
        for c in sorted(tables.capabilities):
            con.execute("INSERT INTO capabilities VALUES (?, ?)", [tables.rank, c])
    finally:
        con.close()


def _ingest_worker(src: RankSource, part: str) -> tuple[int, str | None, str | None]:
    """Process-pool entry: returns (rank, part path or None, error or None)."""
    try:
        tables = read_source(src)
        _write_part(tables, Path(part))
        return src.rank or 0, part, None
    except ProfileError as e:
        return src.rank or 0, None, str(e)


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
        self.con.close()


def _merge(parts: list[Path], out: Path) -> None:
    con = duckdb.connect(str(out))
    try:
        con.execute(schema_sql())
        for i, part in enumerate(parts):
            alias = f"p{i}"
            con.execute(f"ATTACH '{part}' AS {alias} (READ_ONLY)")
            for name in table_columns():
                con.execute(f"INSERT INTO {name} SELECT * FROM {alias}.{name}")
            con.execute(f"DETACH {alias}")
        con.execute("CHECKPOINT")
    finally:
        con.close()


def build_database(disc: Discovery, out: Path, *, workers: int | None = None,
                   progress: ProgressFn | None = None) -> list[str]:
    """Parse every rank of `disc` into a new database at `out`; returns ingest warnings.

    A rank that fails is skipped with a warning when other ranks parse; if none parses, the first
    error is raised.
    """
    warnings = list(disc.warnings)
    n = len(disc.sources)
    total_bytes = sum(f.stat().st_size for s in disc.sources for f in _input_files(s))
    workers = workers if workers is not None else min(n, os.cpu_count() or 1)
    tmpdir = Path(tempfile.mkdtemp(prefix=".parts-", dir=out.parent))
    parts: list[Path] = []
    errors: list[str] = []
    try:
        if n == 1 or workers <= 1 or total_bytes < PARALLEL_MIN_BYTES:
            for i, src in enumerate(disc.sources):
                part = tmpdir / f"rank{i}.duckdb"
                _, ok, err = _ingest_worker(src, str(part))
                (parts.append(Path(ok)) if ok else errors.append(err or "unknown error"))
                if progress:
                    progress(i + 1, n, f"rank {src.rank}")
        else:
            ctx = mp.get_context("forkserver")
            with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
                futs = [pool.submit(_ingest_worker, src, str(tmpdir / f"rank{i}.duckdb"))
                        for i, src in enumerate(disc.sources)]
                for done, fut in enumerate(as_completed(futs), 1):
                    rank, ok, err = fut.result()
                    (parts.append(Path(ok)) if ok else errors.append(err or "unknown error"))
                    if progress:
                        progress(done, n, f"rank {rank}")
        if not parts:
            raise ProfileError(None, errors[0] if errors else "no rank could be read")
        warnings.extend(f"rank skipped: {e}" for e in errors)
        _merge(sorted(parts), out)
        if errors or disc.warnings:
            con = duckdb.connect(str(out))
            try:
                for w in [*disc.warnings, *(f"rank skipped: {e}" for e in errors)]:
                    con.execute("INSERT INTO ingest_warnings VALUES (NULL, NULL, ?)", [w])
            finally:
                con.close()
        return warnings
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)


def _profile_info(con: duckdb.DuckDBPyConnection, path: Path) -> ProfileInfo:
    ranks = [r[0] for r in con.execute("SELECT rank FROM ranks ORDER BY rank").fetchall()]
    fmts = sorted({r[0] for r in con.execute("SELECT DISTINCT format FROM ranks").fetchall()})
    steps = [r[0] for r in con.execute("SELECT DISTINCT step FROM steps WHERE kept ORDER BY step").fetchall()]
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


def open_profile(path: str | Path, *, cache_dir: Path | None = None, workers: int | None = None,
                 progress: ProgressFn | None = None, refresh: bool = False) -> Profile:
    """Discover, ingest (or reuse the cache) and open PATH read-only.

    Profiles opened in this process are memoised by database path, so concurrent tool calls share one
    read-only connection and take a cursor each.
    """
    p = Path(path).expanduser().resolve()
    disc = discover(p)
    fp = fingerprint(disc)
    root = Path(cache_dir) if cache_dir else cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ProfileError(root, f"cannot create the cache directory ({e.strerror})") from None
    db = root / f"{fp}.duckdb"
    with _OPEN_LOCK:
        if not refresh and db in _OPEN:
            return _OPEN[db]
        from_cache = db.exists() and not refresh
        if not from_cache:
            tmp = root / f"{fp}.duckdb.tmp-{os.getpid()}-{threading.get_ident()}"
            tmp.unlink(missing_ok=True)
            try:
                build_database(disc, tmp, workers=workers, progress=progress)
                os.replace(tmp, db)
            finally:
                tmp.unlink(missing_ok=True)
                Path(str(tmp) + ".wal").unlink(missing_ok=True)
        con = duckdb.connect(str(db), read_only=True)
        warnings = [r[0] for r in con.execute(
            "SELECT DISTINCT CASE WHEN rank IS NULL THEN message ELSE 'rank ' || rank || ': ' || message END "
            "FROM ingest_warnings ORDER BY 1").fetchall()]
        prof = Profile(path=p, db_path=db, info=_profile_info(con, p), warnings=warnings, con=con,
                       from_cache=from_cache)
        _OPEN[db] = prof
        return prof
