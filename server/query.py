"""The read-only SQL tool: one SELECT over a profile's normalized tables, in a locked-down DuckDB connection
with a time limit (QUERY_TIMEOUT_S), a memory limit (QUERY_MEMORY_MB), a row limit and a byte limit on
the answer (QUERY_MAX_JSON_BYTES)."""

from __future__ import annotations

import json
import math
import os
import threading
from typing import Annotated, Any

import duckdb
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field, WithJsonSchema

from ..analysis.ingest.base import table_columns
from ..analysis.store import Profile

QUERY_DEFAULT_ROWS = 100
QUERY_MAX_ROWS = 1000
QUERY_CELL_CHARS = 1000
QUERY_MAX_JSON_BYTES = 512 * 1024
QUERY_TIMEOUT_S = 30.0
# DuckDB's memory for one query (its own limit, spilling off): a string_agg over a big table otherwise takes
# gigabytes, and tool calls run in parallel. STEPDOCTOR_QUERY_MEMORY_MB overrides it.
QUERY_MEMORY_MB = 512
QUERY_THREADS = 1


def query_memory_mb() -> int:
    try:
        return max(16, int(os.environ.get("STEPDOCTOR_QUERY_MEMORY_MB", QUERY_MEMORY_MB)))
    except ValueError:
        return QUERY_MEMORY_MB


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


def _json_cell(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | str):
        return v if not isinstance(v, str) or len(v) <= QUERY_CELL_CHARS else v[:QUERY_CELL_CHARS] + "…"
    if isinstance(v, float):
        return None if math.isnan(v) or math.isinf(v) else v
    if isinstance(v, list | tuple):
        return [_json_cell(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _json_cell(x) for k, x in v.items()}
    return _json_cell(str(v))


def run_query(prof: Profile, sql: str, limit: int, timeout_s: float = QUERY_TIMEOUT_S) -> QueryResult:
    """Run one SELECT over `prof`'s database, read-only, with no file or network access.

    DuckDB refuses a second connection to a file already open in this process with a different
    configuration, so the locked-down connection is an in-memory database that ATTACHes the profile file
    READ_ONLY, then turns external access off and locks the configuration: from then on `read_csv`,
    `COPY ... TO`, `ATTACH`, `INSTALL/LOAD` and settings changes all fail. The query runs wrapped as
    `SELECT * FROM (<q>) LIMIT n+1`, so the database never computes more than one row past the limit.
    """
    inner = _check_select(sql)
    wrapped = f"SELECT * FROM (\n{inner}\n) AS q LIMIT {int(limit) + 1}"
    # The wrapper must still be one SELECT: a comment or quote trick in `inner` must not open a second one.
    _check_select(wrapped)
    con = duckdb.connect(
        ":memory:", config={"autoinstall_known_extensions": False, "autoload_known_extensions": False}
    )
    timer = threading.Timer(timeout_s, con.interrupt)
    try:
        db = str(prof.db_path).replace("'", "''")
        con.execute(f"ATTACH '{db}' AS profile (READ_ONLY)")
        con.execute("USE profile")
        con.execute("SET temp_directory = ''")  # never spill into the working directory
        con.execute(f"SET memory_limit = '{query_memory_mb()}MB'")
        con.execute(f"SET threads = {QUERY_THREADS}")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
        timer.start()
        try:
            cur = con.execute(wrapped)
            rows = cur.fetchall()
            desc = cur.description or []
        except duckdb.InterruptException:
            raise ToolError(
                f"query stopped after {timeout_s:.0f} s; aggregate (GROUP BY) or filter more"
            ) from None
        except duckdb.OutOfMemoryException:
            raise ToolError(
                f"query needs more than the {query_memory_mb()} MB a query may use; aggregate, filter or select "
                "fewer columns"
            ) from None
        except duckdb.PermissionException as e:
            raise ToolError(
                f"{str(e).splitlines()[0]}: query reads only the profile's tables (no files, network "
                "or extensions)"
            ) from None
        except duckdb.Error as e:
            tables = ", ".join(table_columns())
            raise ToolError(
                f"{type(e).__name__}: {str(e).splitlines()[0]} — tables: {tables}; read the resource "
                "stepdoctor://schema for the columns"
            ) from None
    finally:
        timer.cancel()
        con.close()
    truncated = len(rows) > limit
    rows = rows[:limit]
    notes: list[str] = []
    out = [[_json_cell(v) for v in r] for r in rows]
    # Bound the bytes too: 1000 rows of call stacks would otherwise be megabytes.
    size = len(json.dumps(out, default=str))
    while out and size > QUERY_MAX_JSON_BYTES:
        keep = max(1, int(len(out) * QUERY_MAX_JSON_BYTES / size * 0.9))
        out = out[:keep] if keep < len(out) else out[:-1]
        size = len(json.dumps(out, default=str))
        truncated = True
        notes = [
            f"result cut to {len(out)} rows to stay under {QUERY_MAX_JSON_BYTES // 1024} KB; select fewer "
            "columns or aggregate"
        ]
    return QueryResult(
        columns=[d[0] for d in desc],
        types=[str(d[1]) for d in desc],
        rows=out,
        row_count=len(out),
        limit=limit,
        truncated=truncated,
        notes=notes,
    )


