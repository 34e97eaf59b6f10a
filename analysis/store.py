"""A profile is one DuckDB database, built once per distinct input and cached.

Algorithm:
1. discover(PATH) lists the ranks and their formats;
2. the fingerprint is a SHA-256 over every input file's relative path, size and mtime (ns), the schema
   text and the reader version: unchanged input -> same cache file -> no parsing at all;
3. on a miss, each rank is parsed by its format's reader (in a process pool when there are several
   ranks and enough bytes to pay for the workers), each worker sending its rows back as DataFrames;
4. this process inserts each parsed rank into `<fp>.duckdb.tmp-<pid>` as it arrives, and renames it over
   the cache file only when complete (os.replace is atomic), so a crash never leaves a cache that gets
   used.

Nothing is written next to the input: the cache lives under $STEPDOCTOR_CACHE_DIR, else
$XDG_CACHE_HOME/stepdoctor, else ~/.cache/stepdoctor.
"""

from __future__ import annotations

import hashlib
import importlib
import itertools
import multiprocessing as mp
import os
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from .ingest.base import ProfileError, RankSource, RankTables, schema_sql
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


@dataclass
class ParsedRank:
    """One rank's rows as DataFrames, ready to insert (what a worker sends back)."""

    rank: int
    frames: dict
    warnings: list[str]
    capabilities: list[str]


def _parse_worker(src: RankSource) -> tuple[int, ParsedRank | None, str | None]:
    """Process-pool entry: parse one rank; errors come back as text so one bad rank cannot kill the pool."""
    try:
        t = read_source(src)
        return src.rank or 0, ParsedRank(t.rank, t.frames(), list(t.warnings), sorted(t.capabilities)), None
    except ProfileError as e:
        return src.rank or 0, None, str(e)


def _insert(con: duckdb.DuckDBPyConnection, parsed: ParsedRank) -> None:
    for name, df in parsed.frames.items():
        con.register("_df", df)
        con.execute(f"INSERT INTO {name} SELECT * FROM _df")
        con.unregister("_df")
    for w in parsed.warnings:
        con.execute("INSERT INTO ingest_warnings VALUES (?, NULL, ?)", [parsed.rank, w])
    for c in parsed.capabilities:
        con.execute("INSERT INTO capabilities VALUES (?, ?)", [parsed.rank, c])


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


def _mp_context():
    """fork when this process is single-threaded and holds no DuckDB connection, else forkserver.

    forkserver (and spawn) re-run an unguarded `__main__` in every worker, which breaks user scripts that
    call open_profile at top level; fork does not, and is safe when no other thread can hold a lock at fork
    time. A threaded host (the MCP server) gets forkserver, whose entry points are guarded.
    """
    if threading.active_count() == 1 and not _OPEN and "fork" in mp.get_all_start_methods():
        return mp.get_context("fork")
    return mp.get_context("forkserver")


def build_database(disc: Discovery, out: Path, *, workers: int | None = None,
                   progress: ProgressFn | None = None) -> list[str]:
    """Parse every rank of `disc` into a new database at `out`; returns ingest warnings.

    Ranks are parsed in a process pool and inserted by this process as they arrive, each row written
    once; at most `workers + 2` parsed ranks wait in memory, so a cluster of any size ingests in bounded
    memory. A rank that fails is skipped with a warning when other ranks parse; if none parses, the first
    error is raised.
    """
    warnings = list(disc.warnings)
    n = len(disc.sources)
    total_bytes = sum(f.stat().st_size for s in disc.sources for f in _input_files(s))
    workers = workers if workers is not None else min(n, os.cpu_count() or 1)
    errors: list[str] = []
    done = 0
    con = duckdb.connect(str(out))
    try:
        con.execute(schema_sql())

        def take(rank: int, parsed: ParsedRank | None, err: str | None) -> None:
            nonlocal done
            if parsed is not None:
                _insert(con, parsed)
            else:
                errors.append(err or "unknown error")
            done += 1
            if progress:
                progress(done, n, f"rank {rank}")

        if n == 1 or workers <= 1 or total_bytes < PARALLEL_MIN_BYTES:
            for src in disc.sources:
                take(*_parse_worker(src))
        else:
            with ProcessPoolExecutor(max_workers=workers, mp_context=_mp_context()) as pool:
                todo = iter(disc.sources)
                pending = {pool.submit(_parse_worker, s) for s in itertools.islice(todo, workers + 2)}
                while pending:
                    finished, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for fut in finished:
                        take(*fut.result())
                        if (nxt := next(todo, None)) is not None:
                            pending.add(pool.submit(_parse_worker, nxt))
        if done - len(errors) == 0:
            raise ProfileError(None, errors[0] if errors else "no rank could be read")
        skipped = [f"rank skipped: {e}" for e in errors]
        warnings.extend(skipped)
        for w in [*disc.warnings, *skipped]:
            con.execute("INSERT INTO ingest_warnings VALUES (NULL, NULL, ?)", [w])
        con.execute("CHECKPOINT")
        return warnings
    finally:
        con.close()


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
