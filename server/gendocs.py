"""Generate docs/tools.md from the MCP server's own tool, resource and prompt lists.

    python -m stepdoctor.server.gendocs > docs/tools.md

The page is what an MCP client sees (`tools/list`): names, descriptions, annotations, the input
parameters and a summary of each output schema. `tests/test_mcp.py` fails when the file is stale.
"""

from __future__ import annotations

import sys
from typing import Any

import anyio

from ..tools import catalog
from ..tools.gendocs import replace_block
from .app import create_server

HEADER = """# MCP tools

Generated from the server's `tools/list` by `python -m stepdoctor.server.gendocs > docs/tools.md`;
do not edit by hand (`tests/test_mcp.py` fails when this page is stale). How to connect a client:
[mcp.md](mcp.md). Each tool with a CLI command is one entry of the tool catalog (`tools/catalog.py`):
the same arguments and the same answering function; the MCP answer adds limits and a short text.

Every tool that reads a profile takes `path` (a profile folder or Kineto trace under the server's
`--root` folders) or `profile_id` (returned by `load_profile`). Every tool answers with a short text for
the model plus structured content that follows the output schema. Read-only tools are annotated
`readOnlyHint`, `idempotentHint` and not `openWorldHint`.
"""


def _type(schema: dict[str, Any], defs: dict[str, Any]) -> str:
    """A short type string for a JSON schema: `int`, `list[str]`, `Finding | null`, `"a" | "b"`."""
    if "$ref" in schema:
        return schema["$ref"].rsplit("/", 1)[-1]
    if "enum" in schema:
        return " | ".join(f'"{v}"' if isinstance(v, str) else str(v) for v in schema["enum"])
    if "const" in schema:
        return f'"{schema["const"]}"'
    if "anyOf" in schema:
        return " | ".join(_type(s, defs) for s in schema["anyOf"])
    t = schema.get("type")
    if t == "array":
        return f"list[{_type(schema.get('items', {}), defs)}]" if schema.get("items") else "list"
    if t == "object":
        extra = schema.get("additionalProperties")
        return f"dict[str, {_type(extra, defs)}]" if isinstance(extra, dict) and extra else "object"
    names = {"integer": "int", "number": "float", "string": "str", "boolean": "bool", "null": "null"}
    if isinstance(t, list):
        return " | ".join(names.get(x, x) for x in t)
    return names.get(t, t or "any")


def _first_sentence(text: str) -> str:
    para = " ".join(text.strip().split("\n\n")[0].split())
    head, dot, _ = para.partition(". ")
    return head + "." if dot else para


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def _default(p: dict[str, Any]) -> str:
    if "default" not in p:
        return ""
    d = p["default"]
    return "null" if d is None else f"`{d!r}`" if isinstance(d, str) else f"`{d}`"


def tools_markdown() -> str:
    """The whole page, deterministic (no paths, no times)."""
    server = create_server(output_schemas=True)

    async def collect() -> tuple[list[Any], list[Any], list[Any], list[Any]]:
        return (
            await server.list_tools(),
            await server.list_resources(),
            await server.list_resource_templates(),
            await server.list_prompts(),
        )

    tools, resources, templates, prompts = anyio.run(collect)
    lines = [HEADER, "| tool | CLI command (same catalog entry) | what it does |", "|---|---|---|"]
    for t in tools:
        entry = catalog.BY_NAME.get(t.name)
        cli = f"`stepdoctor {entry.cli}`" if entry is not None and entry.cli else "-"
        lines.append(f"| [`{t.name}`](#{t.name}) | {cli} | {_cell(_first_sentence(t.description or ''))} |")
    for t in tools:
        lines += ["", f"## {t.name}", ""]
        if t.title:
            lines += [f"**{t.title}**", ""]
        lines += [" ".join((t.description or "").split()), ""]
        a = t.annotations
        if a is not None:
            hints = [
                name
                for name, on in (
                    ("read-only", a.read_only_hint),
                    ("idempotent", a.idempotent_hint),
                    ("destructive", a.destructive_hint),
                    ("open world", a.open_world_hint),
                )
                if on
            ]
            lines += [f"Annotations: {', '.join(hints) or 'none'}.", ""]
        props = t.input_schema.get("properties", {})
        required = set(t.input_schema.get("required", []))
        defs = t.input_schema.get("$defs", {})
        lines += ["| parameter | type | required | default | description |", "|---|---|---|---|---|"]
        for name, p in props.items():
            lines.append(
                f"| `{name}` | {_cell(_type(p, defs))} | {'yes' if name in required else ''} | "
                f"{_cell(_default(p))} | {_cell(p.get('description', ''))} |"
            )
        out = t.output_schema or {}
        if out:
            odefs = out.get("$defs", {})
            lines += [
                "",
                f"Output: `{out.get('title', 'object')}`",
                "",
                "| field | type | description |",
                "|---|---|---|",
            ]
            for name, p in out.get("properties", {}).items():
                lines.append(f"| `{name}` | {_cell(_type(p, odefs))} | {_cell(p.get('description', ''))} |")
    lines += ["", "## Resources", "", "| URI | type | what |", "|---|---|---|"]
    for r in resources:
        lines.append(f"| `{r.uri}` | {r.mime_type or ''} | {_cell(r.description or r.title or '')} |")
    for r in templates:
        lines.append(
            f"| `{r.uri_template}` | {r.mime_type or ''} | {_cell(r.description or r.title or '')} |"
        )
    lines += ["", "## Prompts", "", "| prompt | arguments | what |", "|---|---|---|"]
    for p in prompts:
        args = ", ".join(f"`{a.name}`" for a in (p.arguments or []))
        lines.append(f"| `{p.name}` | {args} | {_cell(p.description or p.title or '')} |")
    return "\n".join(lines) + "\n"


MCP_BEGIN = "<!-- mcp tools: generated from the server's tools/list by `make docs`; do not edit by hand -->"
MCP_END = "<!-- end of the generated mcp tools -->"


def tool_names() -> list[str]:
    server = create_server()
    return [t.name for t in anyio.run(server.list_tools)]


def readme_with_tools(text: str) -> str:
    """README's MCP tool list (the names a client sees in tools/list) between its markers."""
    names = ", ".join(f"`{n}`" for n in tool_names())
    return replace_block(text, MCP_BEGIN, MCP_END, f"{MCP_BEGIN}\n{names}.\n{MCP_END}", "README.md")


def main() -> int:
    from pathlib import Path

    if sys.argv[1:] == ["--readme"]:
        readme = Path(__file__).resolve().parent.parent / "README.md"
        readme.write_text(readme_with_tools(readme.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    sys.stdout.write(tools_markdown())
    return 0


if __name__ == "__main__":
    sys.exit(main())
