"""An opened profile: its read-only DuckDB connection and header (`Profile`), read by every analysis.

Opening one (discovering PATH, building or reusing its cache database) is `analysis/build/open.py`.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
        "SELECT DISTINCT step FROM (SELECT step FROM kept_step_windows UNION SELECT step FROM vendor_step_trace "
        "WHERE step IS NOT NULL AND rank NOT IN (SELECT rank FROM steps)) ORDER BY step").fetchall()]
    dropped = [r[0] for r in con.execute(
        "SELECT DISTINCT step FROM steps WHERE NOT kept AND step NOT IN (SELECT step FROM kept_step_windows) "
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


def is_damaged_cache(e: BaseException) -> bool:
    """Whether `e` is DuckDB finding a cache database's block damaged while a command reads it (its checksum
    fails): the database is then discarded and the profile read again, never trusted."""
    import duckdb

    text = str(e)
    return isinstance(e, duckdb.Error) and ("Corrupt database file" in text or "checksum" in text)


