"""Opening a profile: discover PATH's ranks, fingerprint their files (store/cache.py), reuse the cache database
or build it, and hand out the read-only `Profile`, memoised per database in this process.

On a miss the database is built in `<place>-<fp>.duckdb.tmp-<pid>-<thread>` and renamed over the cache file
only when complete (os.replace is atomic), so a crash never leaves a cache that gets used.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from pathlib import Path

from ..errors import ProfileError
from ..ingest.discover import discover
from ..store.cache import (
    cache_root,
    fingerprint,
    input_listing,
    keep_one_per_place,
    place_key,
    remove_stale_temporaries,
    touch,
    trim,
)
from ..store.options import IngestOptions
from ..store.profile import Profile, analysis_config, profile_info
from ..text import span_text
from .engine import build_database
from .forks import start_background


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


_OPEN: dict[Path, Profile] = {}


_OPEN_LOCK = threading.Lock()


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
