"""MCP tools for a job that hangs: `diagnose_hang` over Flight Recorder dumps and stack snapshots under
the roots. (No `from __future__ import annotations`: the SDK reads the annotations at registration.)"""

import inspect
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from ..analysis.hang import HangReport, diagnose_hang
from ..tools.live import render_hang
from .roots import Roots


def register_live_tools(server: MCPServer, roots: Roots, result: Callable[..., CallToolResult],
                        errors: Callable[[], Any], annotations: ToolAnnotations, output_schemas: bool) -> None:
    def diagnose_hang_tool(
        path: Annotated[str, Field(description="folder under the server's roots holding the Flight Recorder "
                                               "dumps (<prefix><rank>, e.g. nccl_trace_rank_0) and/or "
                                               "`py-spy dump --json` files, one per rank")],
    ) -> Annotated[CallToolResult, HangReport]:
        """Where the ranks of a hung job diverge: the process group, the first collective some ranks never
        issued (or issued differently, or never completed), those ranks with their stacks, and the ranks
        whose stack differs from the majority."""
        folder = roots.resolve(path, "dump folder")
        roots.check_tree(folder)
        with errors():
            rep = diagnose_hang(folder)
        return result(rep, render_hang(rep), "see divergences[] and stacks in the structured content")

    server.add_tool(diagnose_hang_tool, name="diagnose_hang", title="Diagnose a hung job",
                    description=inspect.cleandoc(diagnose_hang_tool.__doc__ or ""),
                    annotations=annotations, structured_output=None if output_schemas else False)
