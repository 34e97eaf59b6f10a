"""The MCP tools that are the server's own, not catalog questions: `load_profile` (the profile registry,
with progress reported per rank) and `query` (read-only SQL in the sandbox of `query.py`).

No `from __future__ import annotations`: the SDK reads the tools' annotations at registration time.
"""

import inspect
import threading
from collections.abc import Callable
from typing import Annotated, Any

import anyio
import anyio.from_thread
import anyio.to_thread
from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from ..analysis.ingest.base import table_columns, view_names
from .answer_text import text_loaded
from .answers import catalog_errors, result
from .mcp_tools import ID_HELP, PATH_HELP
from .query import QUERY_DEFAULT_ROWS, QUERY_MAX_ROWS, QueryResult, run_query, text_query
from .query_pool import QueryPool
from .registry import ProfileRegistry
from .results import LoadedProfile

PathArg = Annotated[str | None, Field(description=PATH_HELP)]
IdArg = Annotated[str | None, Field(description=ID_HELP)]


def _adder(server: MCPServer, annotations: ToolAnnotations, output_schemas: bool,
           title: str, description: str | None = None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`server.add_tool` with the docstring dedented: clients show the description verbatim."""

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        text = description or inspect.cleandoc(fn.__doc__ or "")
        server.add_tool(fn, title=title, description=text, annotations=annotations,
                        structured_output=None if output_schemas else False)
        return fn

    return register


def register_load_profile(server: MCPServer, reg: ProfileRegistry, annotations: ToolAnnotations,
                          output_schemas: bool) -> None:
    allowed = reg.roots

    @_adder(server, annotations, output_schemas, "Load a profile")
    async def load_profile(
        path: Annotated[
            str,
            Field(
                description="Profile folder or Kineto trace under the server's roots, e.g. "
                "'/data/run1' (folder of *_ascend_pt ranks) or 'trace.json.gz'."
            ),
        ],
        ctx: Context,
    ) -> Annotated[CallToolResult, LoadedProfile]:
        """Ingest a profile (once; later calls hit the cache) and return its profile_id and a summary.

        Returns the profile_id to pass to the other tools, the format, ranks, steps, world size and the
        ingest warnings. Reports progress per rank while parsing.
        """
        resolved = allowed.resolve(path)
        state = {"p": 0.0}

        def progress(done: int, total: int, what: str) -> None:
            # Called in the ingest thread; progress must increase, and the last unit is "opening".
            state["p"] = max(state["p"], float(done))
            anyio.from_thread.run(ctx.report_progress, state["p"], float(total + 1), f"ingested {what}")

        await ctx.report_progress(0.0, None, f"discovering ranks in {resolved}")
        with catalog_errors():
            pid, prof = await anyio.to_thread.run_sync(
                lambda: reg.load(resolved, progress=progress, reopen=True)
            )
        n = len(prof.info.ranks)
        await ctx.report_progress(
            max(state["p"] + 1.0, float(n + 1)), max(state["p"] + 1.0, float(n + 1)), f"loaded {n} rank(s)"
        )
        out = LoadedProfile(
            profile_id=pid,
            profile=prof.info,
            n_ranks=n,
            n_steps=len(prof.info.steps),
            from_cache=prof.from_cache,
            warnings=prof.warnings[:20],
            warnings_total=len(prof.warnings),
            next_steps=[
                f'list_issues(profile_id="{pid}") — prioritized findings with evidence and fixes',
                f'breakdown(profile_id="{pid}") — compute / communication / free per rank and step',
                f'slow_ranks / slow_links / top_kernels / env_audit(profile_id="{pid}") — details',
            ],
        )
        return result(out, text_loaded(out), "see the structured content for every warning")


def register_query(server: MCPServer, reg: ProfileRegistry, pool: QueryPool, annotations: ToolAnnotations,
                   output_schemas: bool, gone: Callable[[Context], Callable[[], bool]]) -> None:
    """`gone(ctx)`: a test that is true once the caller of this request went away (an HTTP client that
    hung up); a cancelled call (stdio closed, notifications/cancelled) stops the query as well."""

    @_adder(
        server, annotations, output_schemas,
        "Read-only SQL over the profile tables",
        description=(
            "Read-only SQL (DuckDB) over the profile's tables, for what the other tools do not answer. One "
            "SELECT; times integer ns (`*_ns`); prefer aggregates. "
            f"Tables: {', '.join(table_columns())}; views: {', '.join(view_names())}; columns in the resource "
            "stepdoctor://schema."
        ),
    )
    async def query(
        ctx: Context,
        sql: Annotated[
            str,
            Field(
                description="one SELECT (or WITH ... SELECT) over the normalized tables, e.g. "
                '"SELECT rank, count(*) FROM device_ops GROUP BY rank"'
            ),
        ],
        path: PathArg = None,
        profile_id: IdArg = None,
        limit: Annotated[
            int, Field(ge=1, le=QUERY_MAX_ROWS, description="max rows returned")
        ] = QUERY_DEFAULT_ROWS,
    ) -> Annotated[CallToolResult, QueryResult]:
        with catalog_errors():
            prof = await anyio.to_thread.run_sync(lambda: reg.get(path, profile_id))
        cancelled = threading.Event()
        hung_up = gone(ctx)
        try:
            # abandon_on_cancel: a cancelled call returns at once; the event then makes the thread kill the
            # query's worker (a thread cannot be stopped from outside).
            q = await anyio.to_thread.run_sync(
                lambda: run_query(prof, sql, limit, pool=pool, stop=lambda: cancelled.is_set() or hung_up()),
                abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        return result(q, text_query(q), "select fewer columns, aggregate, or lower limit")
