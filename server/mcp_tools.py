"""The MCP face of the tool catalog: one adapter registers every `tools.catalog.TOOLS` entry; the row's budget
keeps its answer small (top-k, evidence trimmed to the ranks that weigh most), its text is capped.

The adapter's signature is built from the entry's argument model, so the input schema a client sees is the
model's (types, defaults, bounds, descriptions), plus `path` / `profile_id` for tools that read a profile.
"""

from __future__ import annotations

import inspect
import threading
from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import Field

from ..analysis.store import Profile, is_damaged_cache
from ..tools import catalog
from ..tools.arguments import Cli
from . import answers as a
from .answer_text import text_of
from .registry import ProfileRegistry, profile_id_of
from .roots import Roots

PATH_HELP = ("Profile under the server's roots: a rank folder, a folder of ranks, or a Kineto trace (.json / "
             ".json.gz) or folder of traces. Give path or profile_id.")
ID_HELP = "profile_id returned by load_profile (faster than path)."

# Catalog calls computing at once (each holds what its question derives from a loaded profile: a what-if's
# copy of the replay, a comparison's second profile); further calls wait up to CATALOG_WAIT_S, then are
# refused in one line.
CATALOG_IN_FLIGHT = 4
CATALOG_WAIT_S = 120.0

def _parameters(tool: catalog.Tool) -> list[inspect.Parameter]:
    """The adapter's parameters: the argument model's fields (annotation, bounds, description, default)
    after path / profile_id for tools that read a profile."""
    kw = inspect.Parameter.KEYWORD_ONLY
    params = []
    if tool.profile != "none":
        params += [
            inspect.Parameter("path", kw, default=None, annotation=Annotated[str | None, Field(description=PATH_HELP)]),
            inspect.Parameter("profile_id", kw, default=None,
                              annotation=Annotated[str | None, Field(description=ID_HELP)]),
        ]
    for name, info in tool.args.model_fields.items():
        bounds = [x for x in info.metadata if not isinstance(x, Cli)]   # how the CLI spells it is not the schema's
        ann = Annotated[(info.annotation, *bounds, Field(description=info.description))]  # type: ignore[valid-type]
        default = inspect.Parameter.empty if info.is_required() else info.default
        params.append(inspect.Parameter(name, kw, default=default, annotation=ann))
    # required arguments first, so the generated docs and schemas list them first
    return sorted(params, key=lambda p: p.default is not inspect.Parameter.empty)


def register_catalog(server: MCPServer, reg: ProfileRegistry, roots: Roots, annotations: ToolAnnotations,
                     output_schemas: bool) -> None:
    """Register every catalog entry served over MCP; all of them share one bound on calls in flight."""
    in_flight = threading.BoundedSemaphore(CATALOG_IN_FLIGHT)
    for tool in catalog.MCP_TOOLS:
        _register(server, tool, reg, roots, annotations, output_schemas, in_flight)


def _register(server: MCPServer, tool: catalog.Tool, reg: ProfileRegistry, roots: Roots,
              annotations: ToolAnnotations, output_schemas: bool, in_flight: threading.BoundedSemaphore) -> None:
    def call(**kw: Any) -> CallToolResult:
        if not in_flight.acquire(timeout=CATALOG_WAIT_S):
            raise ToolError(f"server busy: {CATALOG_IN_FLIGHT} tool calls computing for over {CATALOG_WAIT_S:g} s; "
                            "try again")
        try:
            used: list[Profile] = []
            try:
                return answer(used, **kw)
            except Exception as e:   # a damaged cache database found while answering: read the profiles again
                if not is_damaged_cache(e) or not used:
                    raise
                for prof in used:
                    reg.drop(prof)
                return answer([], **kw)
        finally:
            in_flight.release()

    def answer(used: list[Profile], **kw: Any) -> CallToolResult:
        path, pid = (kw.pop("path", None), kw.pop("profile_id", None)) if tool.profile != "none" else (None, None)
        for field in tool.paths:
            kw[field] = str(roots.resolve(kw[field], "code file"))
        for field in tool.folders:
            folder = roots.resolve(kw[field], "dump folder")
            roots.check_tree(folder)
            kw[field] = str(folder)
        args = tool.args(**kw)
        with a.catalog_errors():
            prof: Profile | None = None
            if tool.profile == "required" or (tool.profile == "optional" and (path or pid)):
                prof = reg.get(path, pid)
                used.append(prof)

            def ref(value: str) -> Profile:
                other = reg.ref(value)
                used.append(other)
                return other

            # a question answered before on these files (by this server, another, or the CLI) is a lookup
            out = catalog.kept_answer(tool, prof.db_path, args) if prof is not None else None
            if out is None:
                out = tool.answer(prof, args, ref)
                if prof is not None:
                    catalog.keep_answer(tool, prof.db_path, args, out)
            shaped = tool.budget(out, args) if tool.budget is not None else out
            text = text_of(shaped, profile_id_of(prof) if prof is not None else "")
        return a.result(shaped, text, tool.narrow)

    params = _parameters(tool)
    ret = Annotated[CallToolResult, tool.output]
    call.__signature__ = inspect.Signature(params, return_annotation=ret)  # type: ignore[attr-defined]
    call.__annotations__ = {p.name: p.annotation for p in params} | {"return": ret}
    call.__name__ = call.__qualname__ = tool.name
    server.add_tool(call, name=tool.name, title=tool.title, description=tool.description,
                    annotations=annotations, structured_output=None if output_schemas else False)
    if isinstance(names := getattr(server, "arg_names", None), dict):
        names[tool.name] = [p.name for p in params]


