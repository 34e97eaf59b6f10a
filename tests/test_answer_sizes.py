"""MCP answer sizes: every tool's structured content within its budget of the text answer, measured on a real
profile over stdio with the MCP client (evals/answer_sizes.py), and the lean structure still valid against the
declared output schemas."""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest
from mcp import Client

from conftest import SHARED, need
from stepdoctor.analysis.models import Finding
from stepdoctor.evals import answer_sizes
from stepdoctor.server.answer_text import findings_shown
from stepdoctor.server.answers import TEXT_CAP
from stepdoctor.server.lean import STRUCTURED_FLOOR, lean_evidence, structured_budget

GLOO = "real/gpu-h100/gloo2_straggler"
MSINSIGHT = "real/ascend/msinsight-pt-text-l1"


@pytest.mark.slow
def test_every_tool_answer_within_budget_on_a_real_profile(tmp_path: Path):
    """gloo2_straggler (real H100, 2 ranks), the real server over stdio: every tool answers, its text within
    TEXT_CAP and its structured content within max(2 x text, 8 KB); tools/list without output schemas
    stays under 4k tokens."""
    data = need(SHARED / "real").parent
    sizes, lists = anyio.run(answer_sizes.measure, data, [GLOO], tmp_path)
    tools = {s.tool for s in sizes}
    assert {"load_profile", "list_issues", "breakdown", "slow_ranks", "top_kernels", "compare_runs",
            "explain", "list_fixes", "suggest_edit", "query"} <= tools
    for s in sizes:
        assert not s.error, (s.tool, s.error)
        assert 0 < s.text <= TEXT_CAP + 200, (s.tool, s.text)   # the cut note may follow the cap
        assert s.structured <= structured_budget(s.text), (s.tool, s.text, s.structured)
    by = {s.tool: s for s in sizes}
    assert by["compare_runs"].structured < 10_000 and by["top_kernels"].structured < 8_192
    assert lists["default"] < 16_000 < lists["with output schemas"]


def test_lean_evidence_keeps_numbers_and_names_what_explain_holds():
    ev = {"value_ms": 326.18, "median_ms": 76.13, "dimension": "free", "steps_slow": [2],
          "thresholds": {"robust_z": 3.5}, "impact_method": "excess over the per-step median ...",
          "values_by_rank": {"0": "1", "1": "unset"},
          "per_rank": {"0": {"by_step": {"2": {"tail_ms": 1.0}}}},
          "host_activity": [{"name": "aten::embedding", "ms": 0.01}],
          "trimmed": {"per_rank": "8 of 1024 ranks shown"}}
    out = lean_evidence(ev)
    assert out == {"value_ms": 326.18, "median_ms": 76.13, "dimension": "free", "steps_slow": [2],
                   "values_by_rank": {"0": "1", "1": "unset"},
                   "trimmed": {"per_rank": "8 of 1024 ranks shown", "explain": "per_rank,host_activity"}}
    assert lean_evidence({"a": 1}) == {"a": 1}


def test_findings_shown_counts_whole_entries_of_a_cut_text():
    text = ("3 finding(s) in x\n1. [high] slow-rank (free) — rank 0 — 1.00 ms per step\n   Rank 0 ...\n"
            "2. [low] env-var — rank 0,1 — impact unknown\n   X is unset.\n3. [low] gc-pause — rank 1 — 2 ms\n"
            "… cut at 6000 characters; lower limit.")
    assert findings_shown(text) == 2


def _validate(schema: dict, data: dict) -> None:
    import jsonschema

    jsonschema.validate(data, schema)


@pytest.mark.anyio
async def test_lean_structured_content_matches_the_output_schemas(tmp_path: Path):
    """With output schemas declared, the trimmed structure of the tools that trim most still validates (only
    optional fields at their default are left out), and findings keep their numbers."""
    from stepdoctor.server.app import create_server

    data = need(SHARED / "real").parent
    server = create_server([data], cache_dir=tmp_path / "cache", output_schemas=True)
    async with Client(server, raise_exceptions=True) as c:
        schemas = {t.name: t.output_schema for t in (await c.list_tools()).tools}
        r = await c.call_tool("load_profile", {"path": str(data / MSINSIGHT)})
        pid = r.structured_content["profile_id"]
        calls = {"list_issues": {"profile_id": pid}, "top_kernels": {"profile_id": pid},
                 "slow_ranks": {"profile_id": pid},
                 "compare_runs": {"base": str(data / "real/ascend/msinsight-pt-text-l0"), "target": pid}}
        for tool, args in calls.items():
            r = await c.call_tool(tool, args)
            assert not r.is_error, r.content[0].text
            _validate(schemas[tool], r.structured_content)
            size = len(json.dumps(r.structured_content, separators=(",", ":")).encode())
            assert size <= max(2 * len(r.content[0].text.encode()), STRUCTURED_FLOOR), (tool, size)
            if tool == "list_issues":
                findings = [Finding.model_validate(f) for f in r.structured_content["findings"]]
                # ~19 findings do not fit the text: the structure holds those the text shows, and says so
                assert r.structured_content["total"] > len(findings) and r.structured_content["truncated"] is True
                assert len(findings) == findings_shown(r.content[0].text) >= 10
                # a finding whose tables were left to explain keeps its numbers here
                n, cut = next((i, f) for i, f in enumerate(findings, 1) if f.evidence.get("trimmed", {}).get("explain"))
                left = cut.evidence["trimmed"]["explain"].split(",")
                assert cut.impact_ms is not None and not set(left) & set(cut.evidence)
        r = await c.call_tool("explain", {"id": cut.check, "profile_id": pid, "finding": n})
        assert not r.is_error, r.content[0].text
        assert set(left) <= set(r.structured_content["finding"]["evidence"])   # explain: the whole evidence


def test_comparison_hint_names_the_mcp_tool_not_the_cli():
    from stepdoctor.server.answer_text import text_comparison
    from stepdoctor.server.lean import lean, mcp_hint
    from stepdoctor.tools import api
    from stepdoctor.tools.compare import compare_runs

    assert mcp_hint("stepdoctor explain sdpa-fused-attention") == 'explain(id="sdpa-fused-attention")'
    assert mcp_hint("lower limit") == "lower limit"
    h100 = need(SHARED / "real" / "gpu-h100")
    c = compare_runs(api.load(h100 / "clean"), api.load(h100 / "attn_math"))
    assert c.next_step and c.next_step.startswith("stepdoctor explain ")   # the CLI's hint
    text = text_comparison(c)
    assert "Next: explain(id=" in text and "stepdoctor explain" not in text
    assert lean(c)["next_step"].startswith('explain(id="')
