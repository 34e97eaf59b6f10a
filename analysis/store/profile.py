"""An opened profile: its read-only DuckDB connection and header, memoised per database in this process.

`open_profile`: discover PATH's ranks, fingerprint their files (cache.py); on a miss build the database in
`<place>-<fp>.duckdb.tmp-<pid>-<thread>` and rename it over the cache file only when complete (os.replace is
atomic), so a crash never leaves a cache that gets used.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ProfileError
from ..ingest.discover import discover
from ..text import span_text
from .build import build_database
from .cache import (
    cache_root,
    fingerprint,
    input_listing,
    keep_one_per_place,
    place_key,
    remove_stale_temporaries,
    touch,
    trim,
)
from .forks import start_background
from .options import IngestOptions

if TYPE_CHECKING:
    import duckdb

    from ..models import ProfileInfo


@dataclass
class Profile:
    """An opened, ingested profile: a read-only DuckDB connection plus its header."""

    path: Path
    db_path: Path
    info: ProfileInfo
    warnings: list[str]
    con: duckdb.DuckDBPyConnection
    from_cache: bool = False
    memory_mb: int | None = None   # the analysis connection's memory limit (`IngestOptions.memory_mb`)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # views derived from the (read-only) database, computed once per opened profile: `derived`
    _derived: dict[str, Any] = field(default_factory=dict, repr=False)
    _derived_lock: threading.RLock = field(default_factory=threading.RLock, repr=False)

    def derived(self, key: str, compute: Callable[[], Any]) -> Any:
        """The value of a view derived from this profile's database (its data never changes once opened),
        computed on first ask; callers must not mutate it."""
        with self._derived_lock:
            if key not in self._derived:
                self._derived[key] = compute()
            return self._derived[key]

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
            self.con = duckdb.connect(str(self.db_path), read_only=True,
                                      config=analysis_config(self.db_path, self.memory_mb))


def profile_info(con: duckdb.DuckDBPyConnection, path: Path) -> ProfileInfo:
    from ..models import ProfileInfo

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
    ws_source = "metadata" if ws is not None else None
    if ws is None:
        # no rank records its world size (torch_npu text exports often do not): a collective group's members,
        # named in the communication matrix ("0-1" .. "0-7"), are ranks of the job whatever their numbering, so
        # the largest group is a lower bound of the world
        ws = con.execute("SELECT max(n) FROM (SELECT count(DISTINCT m) AS n FROM (SELECT rank, op_name, src_rank AS m "
                         "FROM links UNION ALL SELECT rank, op_name, dst_rank FROM links) GROUP BY rank, op_name)"
                         ).fetchone()[0]
        ws = ws if ws is not None and ws > len(ranks) else None
        ws_source = "communication groups" if ws is not None else None
    vendors = sorted({r[0] for r in con.execute("SELECT DISTINCT vendor FROM ranks").fetchall()})
    fws = sorted({r[0] for r in con.execute("SELECT DISTINCT framework FROM ranks WHERE framework IS NOT NULL")
                  .fetchall()})
    return ProfileInfo(path=str(path), format="+".join(fmts), ranks=ranks, steps=steps,
                       world_size=int(ws) if ws is not None else None, world_size_source=ws_source,
                       vendor="+".join(vendors) or None, framework="+".join(fws) or None,
                       dropped_steps=dropped, missing_ranks=missing_ranks(ranks, ws))


MAX_LISTED_WORLD = 1 << 20   # a world size beyond this is not taken at its word (a damaged header)


def missing_ranks(ranks: list[int], world: int | None) -> list[int]:
    """The ranks 0..world-1 that have no profile."""
    if not world or world > MAX_LISTED_WORLD:
        return []
    have = set(ranks)
    return [r for r in range(int(world)) if r not in have]


def usable_cache(asked: Path | None) -> tuple[Path, str]:
    """The cache folder and a note for the user. A folder asked for (the caller's, or $STEPDOCTOR_CACHE_DIR)
    that cannot be created or written is an error naming it; the default one (under a read-only home, say)
    falls back to a folder of this user under the system's temporary directory, with a note."""
    import tempfile

    explicit = asked is not None or bool(os.environ.get("STEPDOCTOR_CACHE_DIR"))
    root = asked if asked is not None else cache_root()
    try:
        root.mkdir(parents=True, exist_ok=True)
        if os.access(root, os.W_OK | os.X_OK):
            return root, ""
        why = "not writable"
    except OSError as e:
        why = e.strerror or str(e)
    if explicit:
        raise ProfileError(root, f"cannot use the cache directory ({why}): set STEPDOCTOR_CACHE_DIR to a writable "
                                 "folder")
    tmp = Path(tempfile.gettempdir()) / f"stepdoctor-cache-{os.getuid() if hasattr(os, 'getuid') else 'user'}"
    try:
        tmp.mkdir(mode=0o700, exist_ok=True)
    except OSError as e:
        raise ProfileError(root, f"cannot use the cache directory ({why}), nor {tmp} ({e.strerror}): set "
                                 "STEPDOCTOR_CACHE_DIR to a writable folder") from None
    return tmp, (f"the cache folder {root} cannot be used ({why}): this run caches in {tmp}; set "
                 "STEPDOCTOR_CACHE_DIR to keep the cache elsewhere")


def _open_cached(db: Path, memory_mb: int | None):
    """The cache database opened read-only, or None where it cannot be trusted: not a DuckDB file (zeroed,
    overwritten), shorter than the blocks its header counts (cut short), or its tables do not read back (a
    damaged block fails DuckDB's checksum)."""
    import duckdb

    con = None
    try:
        con = duckdb.connect(str(db), read_only=True, config=analysis_config(db, memory_mb))
        con.execute("SELECT count(*) FROM ranks").fetchone()
        con.execute("SELECT count(*) FROM ingest_warnings").fetchone()
        con.execute("SELECT count(*), max(start_ns) FROM steps").fetchone()
        profile_info(con, db)   # what every command reads first: a damaged block there fails here
        # a file cut short still opens; its header says how many blocks it must hold
        block, total = con.execute("SELECT block_size, total_blocks FROM pragma_database_size()").fetchone()
        if db.stat().st_size < int(block) * int(total):
            raise OSError("the cache database is shorter than its blocks")
        return con
    except (duckdb.Error, OSError):
        if con is not None:
            with contextlib.suppress(duckdb.Error):
                con.close()
        return None


def analysis_config(db: Path, memory_mb: int | None = None) -> dict[str, str]:
    """The read-only connection's settings: a spill folder of this process's own (DuckDB's default, `<db>.tmp`,
    would be shared by the processes that open one cached store), named like a build's temporaries so
    `remove_stale_temporaries` deletes it once this process is gone; and, with `memory_mb` (the options'
    `memory_mb`, from STEPDOCTOR_ANALYSIS_MEMORY_MB), DuckDB's memory limit in MB. Without it DuckDB may use 80 % of RAM; it is not set by default
    because a query whose operators cannot spill then fails instead of using more memory (figures in
    evals/bench/results-2026-11-27-summaries.md)."""
    config = {"temp_directory": f"{db}.tmp-{os.getpid()}-0.tmp"}
    if memory_mb is not None:
        config["memory_limit"] = f"{max(16, memory_mb)}MB"
    return config


_OPEN: dict[Path, Profile] = {}
_OPEN_LOCK = threading.Lock()


def is_damaged_cache(e: BaseException) -> bool:
    """Whether `e` is DuckDB finding a cache database's block damaged while a command reads it (its checksum
    fails): the database is then discarded and the profile read again, never trusted."""
    import duckdb

    text = str(e)
    return isinstance(e, duckdb.Error) and ("Corrupt database file" in text or "checksum" in text)


def discard_opened() -> list[Path]:
    """Close and delete the cache databases of the profiles opened in this process (after
    `is_damaged_cache`): the next `open_profile` of their paths builds them again. Returns their paths."""
    with _OPEN_LOCK:
        opened = list(_OPEN.values())
    return [prof.db_path for prof in opened if discard(prof)]


def discard(prof: Profile) -> bool:
    """Close and delete one profile's cache database (after `is_damaged_cache`); the next `open_profile` of its
    path builds it again. Other profiles opened in this process are untouched. False if it was already gone."""
    import duckdb

    with _OPEN_LOCK:
        if _OPEN.get(prof.db_path) is prof:
            del _OPEN[prof.db_path]
    with contextlib.suppress(duckdb.Error):
        prof.close()
    try:
        prof.db_path.unlink()
    except OSError:
        return False
    return True


def forget_opened() -> None:
    """Forget the profiles opened in this process (their connections stay open for their holders), so the
    next `open_profile` of a path opens its database again, from the cache when it is there."""
    with _OPEN_LOCK:
        _OPEN.clear()


def _database_for(path: str | Path, cache_dir: Path | None):
    """PATH resolved, its discovery and file listing, the cache database it has or will have, and the cache's
    note for the user."""
    p = Path(path).expanduser().resolve()
    disc = discover(p)
    listing = input_listing(disc)
    fp = fingerprint(disc, listing)
    root, cache_note = usable_cache(Path(cache_dir) if cache_dir else None)
    return p, disc, listing, root / f"{place_key(p)}-{fp}.duckdb", cache_note


def cached_database(path: str | Path, cache_dir: Path | None = None) -> Path | None:
    """The cache database PATH's current files have, without opening it; None where there is none yet (or
    PATH cannot be read: opening it says why)."""
    try:
        db = _database_for(path, cache_dir)[3]
    except Exception:   # any failure here is reported by the open that follows
        return None
    return db if db.is_file() else None


def open_profile(path: str | Path, options: IngestOptions | None = None, *, refresh: bool = False) -> Profile:
    """Discover, ingest (or reuse the cache) and open PATH read-only.

    Profiles opened in this process are memoised by database path, so concurrent tool calls share one
    read-only connection and take a cursor each.

    `options.fork` lets a program that controls its whole state (the CLI) have this process forked for the
    ingest process when it runs one thread and has no database open; any other caller gets a new
    interpreter (a fork copies whatever a host holds: locks, threads' state, open connections).
    `options.background` is work to run in a thread beside the ingest (the CLI's imports): started once no
    fork can come any more, or at once when the cache has the profile. `options.engine`: who parses the
    ranks on a cache miss (`build_database`); every engine builds the same database, so the cache key does
    not depend on it.
    """
    o = options or IngestOptions()
    background = o.background
    p, disc, listing, db, cache_note = _database_for(path, o.cache_dir)
    root = db.parent
    with _OPEN_LOCK:
        if not refresh and db in _OPEN:
            start_background(background)
            return _OPEN[db]
        from_cache = db.exists() and not refresh
        con = _open_cached(db, o.memory_mb) if from_cache else None
        if con is None and from_cache:   # a damaged cache database is discarded and rebuilt, never trusted
            from_cache = False
            with contextlib.suppress(OSError):
                db.unlink()
        if from_cache:
            touch(db)
            start_background(background)
        else:
            remove_stale_temporaries(root)
            tmp = root / f"{db.name}.tmp-{os.getpid()}-{threading.get_ident()}"
            tmp.unlink(missing_ok=True)
            try:
                build_database(disc, tmp, o, listing=listing)
                os.replace(tmp, db)
                keep_one_per_place(root, db)
                trim(root, db)
            finally:
                tmp.unlink(missing_ok=True)
                Path(str(tmp) + ".wal").unlink(missing_ok=True)
                shutil.rmtree(str(tmp) + ".tmp", ignore_errors=True)  # DuckDB's spill directory
        import duckdb

        if con is None:
            con = duckdb.connect(str(db), read_only=True, config=analysis_config(db, o.memory_mb))
        warnings = [r[0] for r in con.execute(
            "SELECT DISTINCT CASE WHEN rank IS NULL THEN message ELSE 'rank ' || rank || ': ' || message END "
            "FROM ingest_warnings ORDER BY 1").fetchall()]
        info = profile_info(con, p)
        if info.missing_ranks:
            miss = info.missing_ranks
            listed = span_text(miss)
            of = (f"the job's {info.world_size} ranks" if info.world_size_source != "communication groups" else
                  f"the {info.world_size} ranks its collective groups name")
            warnings.append(f"{len(miss)} of {of} have no profile here (ranks {listed}): "
                            "slow-rank, stage-imbalance and the what-if cover the ranks present only")
        if cache_note:
            warnings.append(cache_note)
        prof = Profile(path=p, db_path=db, info=info, warnings=warnings, con=con, from_cache=from_cache,
                       memory_mb=o.memory_mb)
        _OPEN[db] = prof
        return prof
