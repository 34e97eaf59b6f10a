"""The process one read-only SQL query runs in (started by `query_pool.QueryPool`, never by hand).

A query runs outside the server so that what it costs is bounded from outside DuckDB too: the pool kills
the process when its resident memory passes its cap, and its writable mappings are capped (`RLIMIT_DATA`,
a backstop), so a result that DuckDB builds but Python would turn into gigabytes of objects ends this
process instead of growing the server; a query past its time is interrupted here and, if that does not end
it, the pool kills the process. The process reads one JSON request per line on stdin and writes one JSON
reply per line on stdout, and exits when its parent does.

Invariants of a reply: at most `limit` rows, every string cut at `cell_chars`, every list at `cell_items`,
nothing nested deeper than `max_depth` (deeper values arrive as their text), and at most `max_bytes` of JSON
rows. The statement may read only the profile's own tables and views (and its CTEs and the information
schema), through no table function but the generators, and may call no function that shows the server's
settings, paths or environment.

Imports only the standard library and duckdb: it starts in a fraction of a second.
"""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import threading
import time
from typing import Any

import duckdb

# Table functions a query may use: generators over values it gives (everything else reads the catalog,
# settings, files, or runs SQL text that this check never sees: query(), query_table()).
TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest", "json_each", "json_tree"})
# Scalar functions that show the server's settings or environment.
SCALAR_DENIED = frozenset({"current_setting", "getenv", "getvariable", "which_secret"})
DENIED_PREFIXES = ("duckdb_", "pragma_")


class Refused(Exception):
    """A statement the sandbox does not run; the message is one line for the caller."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _walk(node: Any, tables: list[tuple[str, str, str]], funcs: list[tuple[str, bool]], ctes: set[str]) -> None:
    """Collect the base tables, functions (name, is a table function) and CTE names of a serialized AST."""
    if isinstance(node, list):
        for x in node:
            _walk(x, tables, funcs, ctes)
        return
    if not isinstance(node, dict):
        return
    kind = node.get("type")
    if kind == "BASE_TABLE":
        tables.append((node.get("catalog_name", ""), node.get("schema_name", ""), node.get("table_name", "")))
    elif kind == "TABLE_FUNCTION":
        fn = node.get("function") or {}
        funcs.append((str(fn.get("function_name", "")), True))
        _walk(fn.get("children") or fn.get("arguments"), tables, funcs, ctes)
    elif kind == "SHOW_REF" and node.get("table_name"):
        tables.append(("", "", str(node["table_name"])))
    if "function_name" in node and kind != "TABLE_FUNCTION":
        funcs.append((str(node["function_name"]), False))
    cte_map = node.get("cte_map")
    if isinstance(cte_map, dict):
        ctes.update(str(e.get("key")) for e in cte_map.get("map", []) if isinstance(e, dict))
    for k, v in node.items():
        if isinstance(v, dict | list) and not (kind == "TABLE_FUNCTION" and k == "function"):
            _walk(v, tables, funcs, ctes)


def guard(con: duckdb.DuckDBPyConnection, sql: str, own: set[str]) -> None:
    """Refuse `sql` unless every table it names is one of `own` (the profile's), a CTE or the information
    schema, every table function a generator, and no function reveals settings or paths."""
    text = con.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()[0]
    ast = json.loads(text)
    if ast.get("error"):
        raise Refused("parse", f"SQL does not parse: {ast.get('error_message', 'not a SELECT')}")
    tables: list[tuple[str, str, str]] = []
    funcs: list[tuple[str, bool]] = []
    ctes: set[str] = set()
    _walk(ast.get("statements"), tables, funcs, ctes)
    for name, is_table in funcs:
        low = name.lower()
        if (is_table and low not in TABLE_FUNCTIONS) or low.startswith(DENIED_PREFIXES) or low in SCALAR_DENIED:
            what = "table function" if is_table else "function"
            raise Refused("permission", f"Permission Error: {what} {name}() is not available: query reads "
                          "only the profile's tables (no files, settings, catalog or network)")
    for catalog, schema, table in tables:
        low = table.lower()
        if schema.lower() == "information_schema" and catalog.lower() in ("", "profile"):
            continue
        if catalog.lower() in ("", "profile") and schema.lower() in ("", "main") and (low in own or low in ctes):
            continue
        name = ".".join(x for x in (catalog, schema, table) if x)
        raise Refused("catalog", f"Catalog Error: Table with name {name} does not exist")


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def bounded_select(con: duckdb.DuckDBPyConnection, inner: str, limit: int, req: dict[str, Any]) -> str:
    """`inner` wrapped so that DuckDB itself cuts what would be too big before Python sees it: at most
    limit + 1 rows, strings to cell_chars + 1 characters, top-level lists to cell_items + 1 items."""
    wrapped = f"SELECT * FROM (\n{inner}\n) AS q LIMIT {int(limit) + 1}"
    cols = con.execute(f"DESCRIBE {wrapped}").fetchall()
    chars, items = int(req["cell_chars"]) + 1, int(req["cell_items"]) + 1
    proj = []
    for i, (name, typ, *_) in enumerate(cols, 1):
        ref = f"#{i}"
        if typ == "VARCHAR":
            proj.append(f"left({ref}, {chars}) AS {_quoted(name)}")
        elif typ.endswith("[]"):
            proj.append(f"list_slice({ref}, 1, {items}) AS {_quoted(name)}")
        else:
            proj.append(f"{ref} AS {_quoted(name)}")
    return f"SELECT {', '.join(proj) or '*'} FROM ({wrapped}) AS b"


class Cells:
    """JSON cells within the reply's bounds; `cut` names each bound that cut something."""

    def __init__(self, req: dict[str, Any]) -> None:
        self.chars, self.items, self.depth = int(req["cell_chars"]), int(req["cell_items"]), int(req["max_depth"])
        self.row_bytes = int(req["max_bytes"])
        self.left = self.row_bytes  # what the row being converted may still take (one huge cell cannot pass)
        self.cut: set[str] = set()

    def row(self, values: tuple[Any, ...]) -> list[Any]:
        self.left = self.row_bytes
        return [self(v) for v in values]

    def __call__(self, v: Any, depth: int = 0) -> Any:
        if self.left <= 0:
            self.cut.add("bytes")
            return None
        if v is None or isinstance(v, bool | int):
            self.left -= 8
            return v
        if isinstance(v, float):
            self.left -= 8
            return None if math.isnan(v) or math.isinf(v) else v
        if isinstance(v, str):
            self.left -= min(len(v), self.chars) + 2
            if len(v) <= self.chars:
                return v
            self.cut.add("chars")
            return v[: self.chars] + "…"
        if isinstance(v, list | tuple | dict):
            if depth >= self.depth:
                self.cut.add("depth")
                return self(str(v), depth)
            if len(v) > self.items:
                self.cut.add("items")
            if isinstance(v, dict):
                return {str(k): self(x, depth + 1) for k, x in list(v.items())[: self.items]}
            return [self(x, depth + 1) for x in list(v[: self.items])]
        return self(str(v), depth)


def fetch(cur: duckdb.DuckDBPyConnection, limit: int, max_bytes: int, cells: Cells) -> tuple[list, bool, bool]:
    """Rows converted as they arrive (a batch at a time), stopping at `limit` rows or `max_bytes` of JSON:
    (rows, more rows than the limit, cut for bytes)."""
    out: list[list[Any]] = []
    size = 2
    while True:
        batch = cur.fetchmany(64)
        if not batch:
            return out, False, False
        for row in batch:
            if len(out) == limit:
                return out, True, False
            conv = cells.row(row)
            size += len(json.dumps(conv, default=str)) + 1
            if size > max_bytes and out:
                return out, True, True
            out.append(conv)


def _connect(req: dict[str, Any]) -> tuple[duckdb.DuckDBPyConnection, set[str]]:
    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False,
                                             "autoload_known_extensions": False})
    con.execute("LOAD json")
    db = str(req["db"]).replace("'", "''")
    con.execute(f"ATTACH '{db}' AS profile (READ_ONLY)")
    con.execute("USE profile")
    own = {r[0].lower() for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = 'profile' UNION ALL "
        "SELECT view_name FROM duckdb_views() WHERE database_name = 'profile' AND NOT internal").fetchall()}
    con.execute("SET temp_directory = ''")  # never spill into the working directory
    con.execute(f"SET memory_limit = '{int(req['memory_mb'])}MB'")
    con.execute("SET threads = 1")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con, own


def answer(req: dict[str, Any]) -> dict[str, Any]:
    """One request -> one reply: {"columns", "types", "rows", "truncated", "cut"} or {"error", "message"}."""
    con = None
    timer = None
    try:
        con, own = _connect(req)
        guard(con, req["sql"], own)
        timer = threading.Timer(float(req["timeout_s"]), con.interrupt)
        timer.start()
        cur = con.execute(bounded_select(con, req["sql"], int(req["limit"]), req))
        desc = cur.description or []
        cells = Cells(req)
        rows, more, by_bytes = fetch(cur, int(req["limit"]), int(req["max_bytes"]), cells)
        if by_bytes:
            cells.cut.add("bytes")
        return {"columns": [d[0] for d in desc], "types": [str(d[1]) for d in desc], "rows": rows,
                "truncated": more, "cut": sorted(cells.cut)}
    except Refused as e:
        return {"error": e.kind, "message": str(e)}
    except duckdb.InterruptException:
        return {"error": "timeout", "message": ""}
    except (duckdb.OutOfMemoryException, MemoryError):
        return {"error": "memory", "message": ""}
    except duckdb.PermissionException as e:
        return {"error": "permission", "message": str(e).splitlines()[0]}
    except duckdb.Error as e:
        first = str(e).splitlines()[0] if str(e) else ""
        if "alloc" in first.lower():
            return {"error": "memory", "message": ""}
        return {"error": "sql", "message": f"{type(e).__name__}: {first}"}
    finally:
        if timer is not None:
            timer.cancel()
        if con is not None:
            con.close()


def _exit_with_parent(parent: int) -> None:
    """The worker never outlives the server: a killed server's worker would go on computing."""
    while True:
        if os.getppid() != parent:
            os._exit(0)
        time.sleep(0.2)


def main(argv: list[str]) -> int:
    cap = int(argv[0]) * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
    threading.Thread(target=_exit_with_parent, args=(os.getppid(),), daemon=True).start()
    for line in sys.stdin:
        try:
            reply = answer(json.loads(line))
        except MemoryError:
            reply = {"error": "memory", "message": ""}
        sys.stdout.write(json.dumps(reply, default=str) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
