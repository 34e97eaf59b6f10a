"""The read-only SQL tool: one SELECT over a profile's normalized tables, run in a worker process of the
server-wide query pool (`query_pool.py`), read-only, with no file, settings or network access.

Bounds, all applied while the answer is produced: the SQL text (QUERY_MAX_SQL_CHARS, before anything parses
it), the wall-clock time of the whole call (QUERY_TIMEOUT_S, queueing included), DuckDB's memory for one
query (QUERY_MEMORY_MB) inside a process held to its resident share, the memory of all queries in
flight together (QUERY_BUDGET_MB: the number of worker processes), and the answer: rows (the `limit`),
characters per string (QUERY_CELL_CHARS), items per list (QUERY_CELL_ITEMS), nesting (QUERY_MAX_DEPTH) and
bytes (QUERY_MAX_JSON_BYTES).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Annotated, Any

import duckdb
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field, WithJsonSchema

from ..analysis.ingest.base import table_columns
from ..analysis.store import Profile
from .query_pool import WORKER_BASE_MB, QueryFailed, QueryPool

QUERY_DEFAULT_ROWS = 100
QUERY_MAX_ROWS = 1000
QUERY_CELL_CHARS = 1000
QUERY_CELL_ITEMS = 1000
# Deeper values arrive as text: a result nested hundreds of levels deep wedges JSON clients.
QUERY_MAX_DEPTH = 8
QUERY_MAX_JSON_BYTES = 512 * 1024
# A few KB: DuckDB's parser takes hundreds of MB per MB of SQL text.
QUERY_MAX_SQL_CHARS = 8192
QUERY_TIMEOUT_S = 30.0
# DuckDB's memory for one query (its own limit, spilling off). STEPDOCTOR_QUERY_MEMORY_MB overrides it.
QUERY_MEMORY_MB = 512
# All queries in flight together (their worker processes, each QUERY_MEMORY_MB + WORKER_BASE_MB);
# STEPDOCTOR_QUERY_BUDGET_MB overrides it.
QUERY_BUDGET_MB = 2 * (QUERY_MEMORY_MB + WORKER_BASE_MB)


def env_mb(name: str, default: int, floor: int) -> int:
    """A size in MB from the environment (a bad value falls back to the default)."""
    try:
        return max(floor, int(os.environ.get(name, default)))
    except ValueError:
        return default


def query_memory_mb() -> int:
    return env_mb("STEPDOCTOR_QUERY_MEMORY_MB", QUERY_MEMORY_MB, 16)


def query_budget_mb() -> int:
    return env_mb("STEPDOCTOR_QUERY_BUDGET_MB", QUERY_BUDGET_MB, 16)


_default: QueryPool | None = None
_default_lock = threading.Lock()


def default_pool() -> QueryPool:
    """The process's pool, sized from the environment when first used."""
    global _default
    with _default_lock:
        if _default is None:
            _default = QueryPool(query_memory_mb(), query_budget_mb(), QUERY_TIMEOUT_S)
        return _default


# A result cell: a JSON value (DuckDB lists and structs arrive as arrays and objects).
Cell = Annotated[Any, WithJsonSchema({"anyOf": [{"type": t} for t in
                                                  ("string", "number", "boolean", "null", "array", "object")]})]


class QueryResult(BaseModel):
    """Rows of one read-only SQL query over the normalized tables."""

    columns: list[str]
    types: list[str] = Field(description="DuckDB type of each column")
    rows: list[list[Cell]]
    row_count: int
    limit: int
    truncated: bool = Field(
        description="True if the query produced more rows than `limit` (or too many bytes)"
    )
    notes: list[str] = Field(default_factory=list)




def text_query(q: QueryResult) -> str:
    def cell(v: Any) -> str:
        s = "NULL" if v is None else str(v)
        return s if len(s) <= 60 else s[:57] + "…"

    lines = ["\t".join(q.columns)]
    lines += ["\t".join(cell(v) for v in row) for row in q.rows]
    lines.append(f"({q.row_count} row(s){'; truncated at limit ' + str(q.limit) if q.truncated else ''})")
    lines += [f"Note: {n}" for n in q.notes]
    return "\n".join(lines)




def _check_select(sql: str) -> str:
    """The single SELECT / WITH statement of `sql`, without its trailing semicolon, or a ToolError."""
    try:
        stmts = duckdb.extract_statements(sql)
    except duckdb.Error as e:
        raise ToolError(f"SQL does not parse: {e}") from None
    if len(stmts) != 1:
        raise ToolError(f"give exactly one SELECT statement (got {len(stmts)})")
    st = stmts[0]
    if st.type != duckdb.StatementType.SELECT:
        raise ToolError(
            f"only SELECT / WITH queries are allowed (got {st.type.name}); the tables are read-only"
        )
    return st.query.strip().rstrip(";").strip()


_NOTES = {
    "items": f"lists cut at {QUERY_CELL_ITEMS} items",
    "depth": f"values nested deeper than {QUERY_MAX_DEPTH} levels are given as their text",
}


def _failure(e: QueryFailed, pool: QueryPool, timeout_s: float) -> ToolError:
    """The one line that says why a query gave no rows."""
    if e.kind == "timeout":
        return ToolError(f"query stopped after {timeout_s:.0f} s; aggregate (GROUP BY) or filter more")
    if e.kind == "memory":
        return ToolError(f"query needs more than the {pool.memory_mb} MB a query may use; aggregate, filter or "
                         "select fewer columns")
    if e.kind == "busy":
        return ToolError(f"server busy: {pool.slots} queries in flight hold the query budget of {pool.budget_mb} "
                         f"MB for over {timeout_s:.0f} s; try again")
    if e.kind == "gone":
        return ToolError("query stopped: the client went away")
    if e.kind == "permission" and "query reads only" not in e.message:
        return ToolError(f"{e.message}: query reads only the profile's tables (no files, network or extensions)")
    if e.kind in ("sql", "catalog"):
        return ToolError(f"{e.message} — tables: {', '.join(table_columns())}; read the resource "
                         "stepdoctor://schema for the columns")
    return ToolError(e.message or e.kind)


def run_query(prof: Profile, sql: str, limit: int, timeout_s: float | None = None, *,
              pool: QueryPool | None = None, stop: Callable[[], bool] | None = None) -> QueryResult:
    """Run one SELECT over `prof`'s database in a worker of `pool` (the process's by default).

    The worker's connection is an in-memory database that ATTACHes the profile file READ_ONLY, then turns
    external access off and locks the configuration: from then on `read_csv`, `COPY ... TO`, `ATTACH`,
    `INSTALL/LOAD` and settings changes all fail; the statement may name only the profile's tables and no
    function that shows settings or paths. The query runs wrapped as `SELECT * FROM (<q>) LIMIT n+1`, so the
    database never computes more than one row past the limit. `stop()` true: the caller went away.
    """
    if len(sql) > QUERY_MAX_SQL_CHARS:
        raise ToolError(f"SQL text of {len(sql)} characters is over the {QUERY_MAX_SQL_CHARS} a query may have; "
                        "ask a smaller question")
    inner = _check_select(sql)
    # The wrapper must still be one SELECT: a comment or quote trick in `inner` must not open a second one.
    _check_select(f"SELECT * FROM (\n{inner}\n) AS q LIMIT {int(limit) + 1}")
    pool = pool or default_pool()
    timeout_s = timeout_s or pool.timeout_s
    request = {"db": str(prof.db_path), "sql": inner, "limit": int(limit), "memory_mb": pool.memory_mb,
               "cell_chars": QUERY_CELL_CHARS, "cell_items": QUERY_CELL_ITEMS, "max_depth": QUERY_MAX_DEPTH,
               "max_bytes": QUERY_MAX_JSON_BYTES}
    try:
        reply = pool.run(request, timeout_s, stop)
    except QueryFailed as e:
        raise _failure(e, pool, timeout_s) from None
    rows: list[list[Any]] = reply["rows"]
    notes = [_NOTES[c] for c in reply["cut"] if c in _NOTES]
    if "bytes" in reply["cut"]:
        notes.insert(0, f"result cut to {len(rows)} rows to stay under {QUERY_MAX_JSON_BYTES // 1024} KB; select "
                     "fewer columns or aggregate")
    return QueryResult(columns=reply["columns"], types=reply["types"], rows=rows, row_count=len(rows),
                       limit=limit, truncated=bool(reply["truncated"]) or "bytes" in reply["cut"], notes=notes)
