"""One tool catalog for both front ends: every MCP tool but the server's own is a catalog entry, every CLI
question dispatches through its entry, and on real profiles the CLI's JSON and the MCP structured content
carry the same numbers (the MCP answer only cuts lists to its limits and trims evidence)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client

from conftest import SHARED, need
from stepdoctor.server.app import create_server
from stepdoctor.tools import catalog
from stepdoctor.tools.cli import build_parser

REAL = SHARED / "real"
PROFILES = [REAL / "gpu-h100" / "gloo2_straggler", REAL / "ascend" / "msinsight-pt-text-l0"]
SERVER_OWN = {"load_profile", "query"}   # the profile registry and the SQL sandbox


def test_every_mcp_tool_is_a_catalog_entry_or_the_servers_own():
    tools = anyio.run(lambda: create_server().list_tools())
    names = {t.name for t in tools}
    assert names - SERVER_OWN == {t.name for t in catalog.MCP_TOOLS}
    assert {t.name for t in catalog.TOOLS if not t.mcp} == {"trigger", "snapshot"}   # they act on local jobs
    schemas = {t.name: t.input_schema for t in tools}
    for entry in catalog.MCP_TOOLS:   # the input schema is the entry's argument model (+ the profile reference)
        props = set(schemas[entry.name]["properties"])
        extra = {"path", "profile_id"} if entry.profile != "none" else set()
        assert props == set(entry.args.model_fields) | extra, entry.name


def test_every_cli_question_is_a_catalog_entry():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    assert set(catalog.BY_CLI) <= set(sub.choices)


def _cli(cache: Path, *args: str) -> Any:
    env = {**os.environ, "STEPDOCTOR_CACHE_DIR": str(cache)}
    r = subprocess.run([sys.executable, "-m", "stepdoctor", *args, "--format", "json"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _mcp(server, name: str, args: dict[str, Any]) -> dict[str, Any]:
    async def go() -> dict[str, Any]:
        async with Client(server, raise_exceptions=True) as c:
            r = await c.call_tool(name, args)
        assert not r.is_error, r.content[0].text
        return r.structured_content

    return anyio.run(go)


def _same(cli: Any, mcp: Any) -> bool:
    """The MCP structure says what the CLI's JSON says: fields left out there are empty here, long names
    may end early with '…', everything else is equal."""
    if isinstance(cli, dict) and isinstance(mcp, dict):
        return set(mcp) <= set(cli) and all(
            _same(v, mcp[k]) if k in mcp else v in (None, [], {}, "") for k, v in cli.items())
    if isinstance(cli, list) and isinstance(mcp, list):
        return len(cli) == len(mcp) and all(_same(a, b) for a, b in zip(cli, mcp, strict=True))
    if isinstance(cli, str) and isinstance(mcp, str) and mcp.endswith("…"):
        return cli.startswith(mcp[:-1])
    return cli == mcp


def _finding_key(f: dict[str, Any]) -> tuple:
    return (f["check"], f.get("subject", ""), tuple(f.get("ranks", [])), tuple(f.get("steps", [])),
            f.get("impact_ms"), tuple(f.get("fixes", [])))


@pytest.mark.parametrize("profile", PROFILES, ids=lambda p: p.name)
def test_cli_and_mcp_give_the_same_answers_on_real_profiles(profile: Path, tmp_path: Path):
    need(profile)
    cache = tmp_path / "cache"
    server = create_server([SHARED], cache_dir=cache)
    p = str(profile)

    issues_cli = _cli(cache, "issues", p)
    issues_mcp = _mcp(server, "list_issues", {"path": p, "limit": 100})
    shown = [_finding_key(f) for f in issues_mcp["findings"]]   # the text's budget may cut the list
    assert shown and shown == [_finding_key(f) for f in issues_cli["findings"]][: len(shown)]
    assert issues_cli["total"] == issues_mcp["total"]

    b_cli = _cli(cache, "breakdown", p)
    b_mcp = _mcp(server, "breakdown", {"path": p, "limit": 2000})
    assert _same(b_cli["rows"], b_mcp["rows"]) and _same(b_cli["totals"], b_mcp["totals"])

    k_cli = _cli(cache, "kernels", p, "--top", "10")
    k_mcp = _mcp(server, "top_kernels", {"path": p, "limit": 10})
    assert _same(k_cli["kernels"], k_mcp["kernels"]) and k_cli["total"] == k_mcp["total"]

    s_cli = _cli(cache, "slow-ranks", p)
    s_mcp = _mcp(server, "slow_ranks", {"path": p, "limit": 200})
    assert _same(s_cli["dimensions"], s_mcp["dimensions"])
    assert [_finding_key(f) for f in s_cli["findings"]] == [_finding_key(f) for f in s_mcp["findings"]]

    e_cli = _cli(cache, "env", p)
    e_mcp = _mcp(server, "env_audit", {"path": p, "limit": 500})
    assert sorted(v["name"] for v in e_cli["variables"]) == sorted(v["name"] for v in e_mcp["variables"])

    first = issues_cli["findings"][0]["check"] if issues_cli["findings"] else "slow-rank"
    x_cli = _cli(cache, "explain", first)
    x_mcp = _mcp(server, "explain", {"id": first})
    assert _same(x_cli, x_mcp)


def test_filtered_list_issues_runs_the_checks_once(monkeypatch, tmp_path: Path):
    profile = need(REAL / "gpu-h100" / "gloo2_straggler")
    from stepdoctor.tools import api

    runs: list[Any] = []
    real = api.run_checks

    def counting(ctx, only=None, **kw):
        runs.append(only)
        return real(ctx, only, **kw)

    monkeypatch.setattr(api, "run_checks", counting)
    server = create_server([SHARED], cache_dir=tmp_path / "cache")
    full = _mcp(server, "list_issues", {"path": str(profile), "limit": 100})
    high = _mcp(server, "list_issues", {"path": str(profile), "min_severity": "high", "ranks": [1]})
    assert runs == [None]   # one run of every check for both questions: the second is answered from it
    numbered = [i for i, f in enumerate(full["findings"], 1) if f["severity"] == "high" and 1 in f["ranks"]]
    assert [_finding_key(f) for f in high["findings"]] == [_finding_key(full["findings"][i - 1]) for i in numbered]
    assert high["total"] == len(numbered)


_KEYWORDS = {"type", "$ref", "anyOf", "oneOf", "allOf", "enum", "const", "properties"}


def _untyped(schema: Any, path: str) -> list[str]:
    """Schema nodes that accept anything (no validation keyword: what MCP Inspector --strict warns about)
    or spell several types in one `type` array."""
    if not isinstance(schema, dict):
        return []
    bad = [] if _KEYWORDS & set(schema) else [path]
    if isinstance(schema.get("type"), list):
        bad.append(f"{path} (type array)")
    for key in ("properties", "$defs"):
        for name, sub in (schema.get(key) or {}).items():
            bad += _untyped(sub, f"{path}.{key}.{name}")
    for key in ("anyOf", "oneOf", "allOf"):
        for i, sub in enumerate(schema.get(key) or []):
            bad += _untyped(sub, f"{path}.{key}[{i}]")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            bad += _untyped(schema[key], f"{path}.{key}")
    return bad


def test_tool_schemas_are_typed_everywhere():
    tools = anyio.run(lambda: create_server(output_schemas=True).list_tools())
    bad = []
    for t in tools:
        bad += _untyped(t.input_schema, f"{t.name}.input")
        bad += _untyped(t.output_schema or {"type": "object"}, f"{t.name}.output")
    assert not bad, bad


def test_list_issues_filters_name_the_valid_values(tmp_path: Path):
    profile = need(REAL / "gpu-h100" / "gloo2_straggler")
    server = create_server([SHARED], cache_dir=tmp_path / "cache")

    async def error(args: dict[str, Any]) -> str:
        async with Client(server, raise_exceptions=True) as c:
            r = await c.call_tool("list_issues", {"path": str(profile), **args})
        assert r.is_error
        return r.content[0].text

    assert "unknown check 'nosuch'; the checks are affinity-api" in anyio.run(error, {"checks": ["nosuch"]})
    assert "rank 7 not in profile; ranks are 0, 1" in anyio.run(error, {"ranks": [7]})


def test_a_new_tool_is_one_model_one_function_one_row(monkeypatch, tmp_path: Path, capsys):
    """Adding a tool: its arguments model, its function and its catalog row, nothing else. The CLI command
    (options from the model, read as their types say), its table, the MCP tool (schema from the same model)
    and its text all come from the row."""
    from typing import Annotated

    from pydantic import BaseModel, Field

    from stepdoctor.tools import cli
    from stepdoctor.tools.arguments import Args, Cli

    class StepListArgs(Args):
        ranks: Annotated[list[int] | None, Cli(flags=("--rank",))] = Field(None, description="only these ranks")
        longest: bool = Field(False, description="only the longest step")

    class Step(BaseModel):
        rank: int
        step: int
        step_ms: float

    class StepList(BaseModel):
        steps: list[Step]
        total: int

    def step_list(prof, a: StepListArgs, resolve) -> StepList:
        from stepdoctor.tools import api

        rows = api.breakdown(prof, ranks=a.ranks).rows
        steps = [Step(rank=r.rank, step=r.step, step_ms=r.step_ms) for r in rows]
        if a.longest:
            steps = [max(steps, key=lambda s: s.step_ms)]
        return StepList(steps=steps, total=len(rows))

    row = catalog.Tool("step_list", "steps", "Steps", "Every (rank, step) with its step time.", StepListArgs,
                       StepList, "required", step_list, cli_help="every step with its time")
    monkeypatch.setattr(catalog, "TOOLS", (*catalog.TOOLS, row))
    monkeypatch.setattr(catalog, "MCP_TOOLS", (*catalog.MCP_TOOLS, row))
    monkeypatch.setitem(catalog.BY_NAME, "step_list", row)
    monkeypatch.setitem(catalog.BY_CLI, "steps", row)
    example = str(Path(__file__).resolve().parent.parent / "examples" / "cluster4")
    monkeypatch.setenv("STEPDOCTOR_CACHE_DIR", str(tmp_path / "cache"))

    assert cli.main(["steps", example, "--rank", "1,2", "--longest", "--format", "json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["total"] == 4 and len(got["steps"]) == 1 and got["steps"][0]["rank"] in (1, 2)
    assert cli.main(["steps", example]) == 0
    table = capsys.readouterr().out
    assert "total" in table   # the generic tables: the plain fields, then a row per (rank, step)
    assert all(f"│    {r} │    {st} │" in table for r in range(4) for st in (1, 2)), table

    server = create_server([Path(example).parent], cache_dir=tmp_path / "cache")

    async def ask() -> tuple[dict, str, dict]:
        async with Client(server, raise_exceptions=True) as c:
            schema = next(t for t in (await c.list_tools()).tools if t.name == "step_list").input_schema
            r = await c.call_tool("step_list", {"path": example, "ranks": [3]})
        return r.structured_content, r.content[0].text, schema

    data, text, schema = anyio.run(ask)
    assert set(schema["properties"]) == {"path", "profile_id", "ranks", "longest"}
    assert [s["rank"] for s in data["steps"]] == [3, 3] and data["total"] == 2
    assert "step_ms" in text
