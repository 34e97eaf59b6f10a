"""Where a profile's database lives: the cache folder, the fingerprint of the input, stale temporaries.

The fingerprint is a SHA-256 over every input file's relative path, size and version stamp (mtime, ctime and
inode: `version_stamp`), the schema text and
the reader version: unchanged input -> same cache file -> no parsing at all. Nothing is written next to the
input: the cache lives under $STEPDOCTOR_CACHE_DIR, else $XDG_CACHE_HOME/stepdoctor, else ~/.cache/stepdoctor.

A cache file is `<place>-<fingerprint>.duckdb`, `place` a digest of the profile's resolved path: one database
per profile (a changed input replaces its older database, `keep_one_per_place`), and the whole cache stays
under $STEPDOCTOR_CACHE_MAX_MB (default CACHE_MAX_MB), the least recently used databases removed first
(`trim`; a cache hit touches its file).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
from pathlib import Path

from ..ingest.base import RankSource, schema_sql
from ..ingest.discover import Discovery
from ..ingest.discover.sidecars import sidecar_files


@functools.cache
def reader_version() -> str:
    """A digest of the code that decides what the cache holds (the readers and this package), so a cache built
    by other code is never reused: an upgrade or a local edit re-parses, unchanged code never does."""
    h = hashlib.sha256()
    here = Path(__file__).resolve().parent.parent  # analysis/
    # (timeline/: the readers and the per-rank summaries computed at parse time use it; build/: the engines
    # that write the database, the step-time side files included)
    code = [*(here / "store").glob("*.py"), *(here / "build").glob("*.py"), *(here / "ingest").rglob("*.py"),
            *(here / "timeline").glob("*.py")]
    for f in sorted(code):
        h.update(f.relative_to(here).as_posix().encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def cache_root() -> Path:
    if d := os.environ.get("STEPDOCTOR_CACHE_DIR"):
        return Path(d)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "stepdoctor"


def version_stamp(st: os.stat_result) -> int:
    """What changes whenever a file's content can have changed without trying to fool the cache: its mtime,
    its inode (a file replaced by another), and its ctime, which no user can set (a rewrite with the same size
    and its mtime put back still moves it)."""
    return hash((st.st_mtime_ns, st.st_ctime_ns, st.st_ino))


def input_stats(src: RankSource) -> list[tuple[str, int, int]]:
    """(path relative to the rank directory, or the file's name; size; `version_stamp`) of every file of a rank,
    in os.walk order (top-down, names sorted, a directory's files before its subdirectories; a symlinked
    directory entered like any other, since the readers follow it, each directory once). One scandir per
    directory and no Path per file: every warm command walks every input file."""
    if src.path.is_file():
        try:
            st = src.path.stat()
        except OSError:
            return []
        return [(src.path.name, st.st_size, version_stamp(st))]
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
            out.append((rel + e.name, st.st_size, version_stamp(st)))
        for d in dirs:
            try:
                st = d.stat()
            except OSError:
                continue
            key = (st.st_dev, st.st_ino)
            if key not in seen:   # a linked folder is read by the readers, so it is walked, once
                seen.add(key)
                walk(d.path, f"{rel}{d.name}/")

    try:
        top = os.stat(src.path)
    except OSError:
        return out
    seen: set[tuple[int, int]] = {(top.st_dev, top.st_ino)}
    walk(str(src.path), "")
    return out


Listing = list[list[tuple[str, int, int]]]  # `input_stats` of each source of a Discovery, in order


def input_listing(disc: Discovery) -> Listing:
    """Every source's files (`input_stats`): listed once per open, for the fingerprint and the ingest."""
    return [input_stats(s) for s in disc.sources]


def fingerprint(disc: Discovery, listing: Listing | None = None) -> str:
    h = hashlib.sha256()
    h.update(schema_sql().encode())
    h.update(reader_version().encode())
    for src, files in zip(disc.sources, listing or input_listing(disc), strict=True):
        # surrogateescape: a file name need not be UTF-8 on Linux; its bytes are what is hashed
        h.update(f"\0{src.rank}\0{src.format}\0{src.path}".encode("utf-8", "surrogateescape"))
        for name, size, stamp in files:
            h.update(f"{name}:{size}:{stamp}".encode("utf-8", "surrogateescape"))
    for _, f in sidecar_files(disc):   # read at build time beside the readers: input all the same
        try:
            st = f.stat()
        except OSError:
            continue
        h.update(f"\0sidecar\0{f}:{st.st_size}:{version_stamp(st)}".encode("utf-8", "surrogateescape"))
    return h.hexdigest()[:32]


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


CACHE_MAX_MB = 20_480
_DB_RE = re.compile(r"^([0-9a-f]{12})-[0-9a-f]{32}\.duckdb$")


def place_key(path: Path) -> str:
    """The digest of a profile's resolved path that prefixes its cache files."""
    return hashlib.sha256(str(path).encode("utf-8", "surrogateescape")).hexdigest()[:12]


def keep_one_per_place(root: Path, current: Path) -> int:
    """Delete the older databases of the profile whose database is `current` (same place prefix). A process
    that still has one open keeps reading it (the file is only unlinked). Returns how many were removed."""
    m = _DB_RE.match(current.name)
    if m is None:
        return 0
    removed = 0
    with contextlib.suppress(OSError):
        for q in root.glob(f"{m.group(1)}-*.duckdb"):
            if q != current and _DB_RE.match(q.name):
                with contextlib.suppress(OSError):
                    q.unlink()
                    removed += 1
                shutil.rmtree(answers_dir(q), ignore_errors=True)
    return removed


def max_cache_bytes() -> int:
    try:
        mb = float(os.environ.get("STEPDOCTOR_CACHE_MAX_MB", CACHE_MAX_MB))
    except ValueError:
        mb = CACHE_MAX_MB
    return int(max(mb, 0) * 2**20)


def trim(root: Path, keep: Path) -> int:
    """Remove the least recently used cache databases until the cache fits `max_cache_bytes`, never `keep`
    (the one just opened, even when it alone is over the cap). Returns how many were removed."""
    cap = max_cache_bytes()
    files = []
    with contextlib.suppress(OSError):
        for q in root.iterdir():
            if _DB_RE.match(q.name):
                with contextlib.suppress(OSError):
                    st = q.stat()
                    files.append((st.st_mtime_ns, st.st_size, q))
    total = sum(size for _, size, _ in files)
    removed = 0
    for _, size, q in sorted(files, key=lambda x: x[0]):
        if total <= cap:
            break
        if q == keep:
            continue
        with contextlib.suppress(OSError):
            q.unlink()
            total -= size
            removed += 1
        shutil.rmtree(answers_dir(q), ignore_errors=True)
    return removed


def answers_dir(db: Path) -> Path:
    """The folder of the answers kept beside `db` (`answers.py`): it goes with its database."""
    return db.with_name(db.name + ".answers")


def touch(db: Path) -> None:
    """Mark a cache database as used now (the least recently used go first in `trim`)."""
    with contextlib.suppress(OSError):
        os.utime(db)
