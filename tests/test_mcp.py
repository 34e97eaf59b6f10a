"""The MCP server: every tool in process on the cluster4 profile, the roots and SQL guards, concurrency,
and the real transports (stdio and streamable HTTP subprocesses, the MCP Inspector CLI).

cluster4 is the synthetic 4-rank torch_npu profile with planted problems (ascend-format-and-advisor-rules.md
§8.3): rank 3 computes ~1.4x slower, rank 0 idles ~250 ms at the end of step 2, one link of rank 2 is slow,
ASCEND_LAUNCH_BLOCKING=1 and friends are set. The assertions check those numbers, not just shapes.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import duckdb
import httpx
import pytest
from mcp import Client, ClientSession, StdioServerParameters, stdio_client
from mcp.server.mcpserver.exceptions import ToolError

from conftest import CLUSTER4, REPO, SHARED, need
from stepdoctor.analysis import build
from stepdoctor.analysis.errors import ProfileError
from stepdoctor.analysis.store import IngestOptions
from stepdoctor.server.answers import TEXT_CAP, cap_text
from stepdoctor.server.app import create_server
from stepdoctor.server.query import run_query
from stepdoctor.tools.budgets import trim_evidence

pytestmark = pytest.mark.anyio

RANK0 = CLUSTER4 / "node0_40000_20250101120000100_ascend_pt"
RANK3 = CLUSTER4 / "node0_40003_20250101120000103_ascend_pt"
TOOLS = {
    "load_profile",
    "list_issues",
    "breakdown",
    "what_if",
    "critical_path",
    "slow_ranks",
    "slow_links",
    "top_kernels",
    "env_audit",
    "query",
    "compare_runs",
    "explain",
    "list_fixes",
    "suggest_edit",
    "diagnose_hang",
}
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-cache")


@pytest.fixture(scope="module")
def code_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A second allowed root holding a training launch script for suggest_edit."""
    d = tmp_path_factory.mktemp("code")
    (d / "run.sh").write_text("#!/bin/bash\ntorchrun --nproc_per_node=8 train.py\n")
    return d


@pytest.fixture(scope="module")
def server(cache: Path, code_root: Path):
    need(CLUSTER4)
    return create_server([SHARED, code_root], cache_dir=cache)


async def call(server, name: str, args: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """Call a tool in process; fail on a tool error; return (structured content, text)."""
    async with Client(server, raise_exceptions=True) as c:
        r = await c.call_tool(name, args)
    assert not r.is_error, r.content[0].text
    return r.structured_content, r.content[0].text


async def call_error(server, name: str, args: dict[str, Any]) -> str:
    async with Client(server, raise_exceptions=True) as c:
        r = await c.call_tool(name, args)
    assert r.is_error, f"{name} should have failed: {r.content[0].text[:300]}"
    return r.content[0].text


async def load(server, path: Path = CLUSTER4) -> str:
    data, _ = await call(server, "load_profile", {"path": str(path)})
    return data["profile_id"]


# ---------------------------------------------------------------------------------------------------------
# Catalog shape
# ---------------------------------------------------------------------------------------------------------


async def test_tool_list_schemas_and_annotations(cache: Path, code_root: Path):
    server = create_server([REPO / "examples", code_root], cache_dir=cache, output_schemas=True)
    async with Client(server, raise_exceptions=True) as c:
        tools = {t.name: t for t in (await c.list_tools()).tools}
    assert set(tools) == TOOLS
    for t in tools.values():
        a = t.annotations
        assert a is not None and a.read_only_hint and a.idempotent_hint and a.open_world_hint is False, t.name
        assert t.output_schema and t.output_schema["type"] == "object", t.name
        assert t.description and not t.description.startswith(" ") and "\n        " not in t.description
        for pname, p in t.input_schema["properties"].items():
            assert p.get("description"), f"{t.name}.{pname} has no description"
        assert "ctx" not in t.input_schema["properties"]
    assert tools["list_issues"].output_schema["title"] == "IssueReport"
    # one model per answer: the CLI's JSON and the MCP structure (cut to `limit`, `total` / `truncated` set)
    for name, title in (("breakdown", "Breakdown"), ("slow_ranks", "SlowRanks"), ("env_audit", "EnvAudit")):
        assert tools[name].output_schema["title"] == title
        assert {"total", "truncated"} <= set(tools[name].output_schema["properties"])
    assert tools["query"].input_schema["properties"]["limit"]["maximum"] == 1000
    assert "apply" not in tools["suggest_edit"].input_schema["properties"]  # never writes over MCP


# ---------------------------------------------------------------------------------------------------------
# Every tool on cluster4
# ---------------------------------------------------------------------------------------------------------


async def test_load_profile_reports_progress_and_summary(tmp_path: Path):
    need(CLUSTER4)  # its roots are the shared data
    srv = create_server([SHARED], cache_dir=tmp_path / "cache")  # empty cache: a real ingest
    progress: list[tuple[float, float | None, str | None]] = []

    async def on_progress(p: float, total: float | None, msg: str | None) -> None:
        progress.append((p, total, msg))

    async with Client(srv, raise_exceptions=True) as c:
        r = await c.call_tool("load_profile", {"path": str(need(CLUSTER4))}, progress_callback=on_progress)
    assert not r.is_error, r.content[0].text
    d = r.structured_content
    assert d["profile"]["ranks"] == [0, 1, 2, 3]
    assert d["profile"]["steps"] == [1, 2]
    assert d["profile"]["world_size"] == 4
    assert d["profile"]["format"] == "ascend_pt_text"
    assert (d["n_ranks"], d["n_steps"], d["from_cache"]) == (4, 2, False)
    assert len(d["profile_id"]) == 12
    assert f"profile_id {d['profile_id']}" in r.content[0].text
    values = [p for p, _, _ in progress]
    assert values == sorted(values) and len(values) >= 6, progress  # start, 4 ranks, done
    assert any(m and "rank 3" in m for _, _, m in progress)
    assert progress[-1][0] == progress[-1][1]  # the last notification completes the bar


async def test_list_issues(server):
    pid = await load(server)
    d, text = await call(server, "list_issues", {"profile_id": pid, "limit": 100})
    by = {(f["check"], f["subject"]): f for f in d["findings"]}
    free = by[("slow-rank", "free")]
    assert free["severity"] == "high" and free["ranks"] == [0] and free["steps"] == [2]
    assert 240 <= free["evidence"]["excess_ms"] <= 260  # the planted +250 ms idle tail
    compute = by[("slow-rank", "compute")]
    assert compute["ranks"] == [3] and 6.0 <= compute["impact_ms"] <= 9.0
    blocking = by[("env-var", "ASCEND_LAUNCH_BLOCKING")]
    assert blocking["ranks"] == [0, 1, 2, 3] and "ascend-launch-blocking-off" in blocking["fixes"]
    # 31 findings do not fit the text: the structure holds the findings the text shows (answers.result)
    assert d["total"] == 31 and d["truncated"] is True and 10 <= len(d["findings"]) < 31
    assert "[high] slow-rank (free)" in text and len(text) <= TEXT_CAP

    default, _ = await call(server, "list_issues", {"profile_id": pid})
    assert len(default["findings"]) == len(d["findings"]) and default["total"] == d["total"]
    assert default["findings"] == d["findings"][:20]
    # filtered lists number the findings as the unfiltered report does: the N that explain(finding=N) takes
    _, ctext = await call(server, "list_issues", {"profile_id": pid, "checks": ["env-var"], "limit": 100})
    n = 1 + next(i for i, f in enumerate(d["findings"]) if f["check"] == "env-var")
    assert ctext.splitlines()[1].startswith(f"{n}. [high] env-var") and n > 1
    assert f"finding={n})" in ctext
    d5, _ = await call(server, "list_issues", {"profile_id": pid, "limit": 3, "min_severity": "high"})
    assert len(d5["findings"]) == 3 and d5["truncated"] is True
    assert d5["total"] == sum(f["severity"] == "high" for f in d["findings"]) > 3


async def test_breakdown(server):
    d, text = await call(server, "breakdown", {"path": str(CLUSTER4)})
    rows = {(r["rank"], r["step"]): r for r in d["rows"]}
    assert d["total"] == 8 and len(rows) == 8 and d["truncated"] is False
    assert rows[(0, 2)]["step_ms"] == pytest.approx(350.0, abs=1.0)  # 100 ms + the planted idle tail
    assert rows[(1, 1)]["step_ms"] == pytest.approx(100.0, abs=1.0)
    assert rows[(3, 1)]["compute_ms"] / rows[(0, 1)]["compute_ms"] == pytest.approx(1.4, abs=0.05)
    # the tail after the last kernel is outside torch_npu's device window: idle in the step, not Free
    assert rows[(0, 2)]["idle_ms"] - rows[(1, 2)]["idle_ms"] == pytest.approx(250.0, abs=10.0)
    assert [t["rank"] for t in d["totals"]] == [0, 1, 2, 3] and d["totals"][0]["steps"] == 2
    assert "rank | steps | step | compute" in text

    cut, _ = await call(server, "breakdown", {"path": str(CLUSTER4), "limit": 3})
    assert len(cut["rows"]) == 3 and cut["total"] == 8 and cut["truncated"] is True
    # the per-rank totals stay within the limit too: the ranks that stand out (0 idles, 3 computes slower)
    kept = [t["rank"] for t in cut["totals"]]
    assert len(kept) == 3 and {0, 3} <= set(kept) and kept == sorted(kept)
    assert any(w.startswith("totals: the 3 of 4 ranks that stand out") for w in cut["warnings"])
    one, _ = await call(server, "breakdown", {"path": str(CLUSTER4), "ranks": [3], "steps": [2]})
    assert [(r["rank"], r["step"]) for r in one["rows"]] == [(3, 2)]


async def test_slow_ranks(server):
    pid = await load(server)
    d, text = await call(server, "slow_ranks", {"profile_id": pid})
    dims = {x["name"]: x for x in d["dimensions"]}
    [slow_compute] = dims["compute"]["slow"]
    assert slow_compute["rank"] == 3 and slow_compute["steps"] == [1, 2]
    assert slow_compute["excess_ms"] == pytest.approx(7.4, abs=1.0)
    [slow_free] = dims["free"]["slow"]
    assert (slow_free["rank"], slow_free["steps"]) == (0, [2])
    assert slow_free["excess_ms"] == pytest.approx(250.0, abs=10.0)
    assert d["truncated"] is False and d["total"] == 3  # 2 slow ranks + rank 3 arriving last at collectives
    assert "rank 3 steps 1,2: 26.1" in text and "rank 0 steps 2: " in text


async def test_slow_links(server):
    pid = await load(server)
    d, text = await call(server, "slow_links", {"profile_id": pid, "limit": 3})
    first = d["links"][0]
    assert first["src"] == 2  # the planted slow link of rank 2
    assert first["bandwidth_gbps"] < 0.5 * first["median_gbps"]
    assert first["median_gbps"] == pytest.approx(16.67, abs=0.1)
    assert len(d["links"]) == 3 and d["total"] == 12 and d["truncated"] is True
    assert any(f["check"] == "slow-link" and f["ranks"] == [2] for f in d["findings"])
    assert text.splitlines()[2].startswith("2->")


async def test_top_kernels(server):
    pid = await load(server)
    d, text = await call(server, "top_kernels", {"profile_id": pid, "by": "type", "limit": 3})
    top = d["kernels"][0]
    # MatMulV2: 8 launches per rank and step, 4 ranks x 2 steps; 63.5 ms in all (kernel_details.csv)
    assert (top["name"], top["count"]) == ("MatMulV2", 64)
    assert top["total_ms"] == pytest.approx(63.5035, abs=0.01)
    assert top["ranks"] == [0, 1, 2, 3]
    assert len(d["kernels"]) == 3 and d["truncated"] is True and d["total"] > 3
    r3, _ = await call(
        server, "top_kernels", {"profile_id": pid, "by": "type", "rank": 3, "step": 2, "limit": 1}
    )
    assert r3["kernels"][0]["name"] == "MatMulV2" and r3["kernels"][0]["count"] == 8
    assert "MatMulV2" in text


async def test_env_audit(server):
    pid = await load(server)
    d, text = await call(server, "env_audit", {"profile_id": pid})
    v = {x["name"]: x for x in d["variables"]}
    assert v["ASCEND_LAUNCH_BLOCKING"]["status"] == "bad"
    assert v["ASCEND_LAUNCH_BLOCKING"]["values_by_rank"] == {"0": "1", "1": "1", "2": "1", "3": "1"}
    assert v["ASCEND_GLOBAL_LOG_LEVEL"]["status"] == "bad"
    assert v["HCCL_ALGO"]["values_by_rank"]["2"] == "level0:NA;level1:ring"
    statuses = [x["status"] for x in d["variables"]]
    assert statuses == sorted(statuses, key={"bad": 0, "unknown": 1, "ok": 2}.get)  # bad first
    bad, _ = await call(server, "env_audit", {"profile_id": pid, "status": "bad", "limit": 2})
    assert len(bad["variables"]) == 2 and bad["truncated"] is True
    assert bad["total"] == sum(s == "bad" for s in statuses) >= 6
    assert "ASCEND_LAUNCH_BLOCKING = 1: bad" in text
    assert not any("values_by_rank" in w for w in d["warnings"])


async def test_env_audit_on_many_ranks_keeps_the_odd_ranks(server, monkeypatch):
    """With more ranks than EVIDENCE_RANKS a variable shows the ranks of its rarest values (a rank whose
    value differs stays) and the answer says so."""
    from stepdoctor.tools import budgets as answers
    from stepdoctor.tools.models import EnvVariable

    monkeypatch.setattr(answers, "EVIDENCE_RANKS", 1)
    pid = await load(server)
    d, _ = await call(server, "env_audit", {"profile_id": pid})
    v = {x["name"]: x for x in d["variables"]}
    assert v["HCCL_ALGO"]["values_by_rank"] == {"0": "level0:NA;level1:ring"}  # one value on all 4 ranks
    assert all(len(x["values_by_rank"]) <= 1 for x in d["variables"])
    assert any(w.startswith("values_by_rank: at most 1 ranks per variable") for w in d["warnings"])
    odd = EnvVariable(name="HCCL_ALGO", status="unknown",
                      values_by_rank={r: ("level0:NA;level1:ring" if r != 700 else "level0:NA;level1:H-D_R")
                                      for r in range(1024)})
    monkeypatch.setattr(answers, "EVIDENCE_RANKS", 3)
    assert answers.trimmed_variable(odd).values_by_rank == {0: "level0:NA;level1:ring", 1: "level0:NA;level1:ring",
                                                             700: "level0:NA;level1:H-D_R"}


async def test_query(server):
    pid = await load(server)
    d, text = await call(
        server,
        "query",
        {"profile_id": pid, "sql": "SELECT rank, count(*) AS n FROM device_ops GROUP BY rank ORDER BY rank"},
    )
    assert d["columns"] == ["rank", "n"] and d["rows"] == [[0, 104], [1, 104], [2, 104], [3, 104]]
    assert d["truncated"] is False and d["row_count"] == 4
    assert "rank\tn" in text
    d, _ = await call(
        server,
        "query",
        {"profile_id": pid, "sql": "WITH s AS (SELECT * FROM steps) SELECT rank, step FROM s ORDER BY 1, 2;"},
    )
    assert d["rows"][:2] == [[0, 1], [0, 2]] and d["row_count"] == 8
    d, _ = await call(server, "query", {"profile_id": pid, "sql": "SELECT * FROM device_ops", "limit": 5})
    assert d["row_count"] == 5 and d["truncated"] is True and d["limit"] == 5
    # a trailing comment must not swallow the wrapper's closing parenthesis
    d, _ = await call(server, "query", {"profile_id": pid, "sql": "SELECT 41 + 1 AS x -- the answer"})
    assert d["rows"] == [[42]]


async def test_query_answers_stay_small(server):
    pid = await load(server)
    d, text = await call(
        server, "query", {"profile_id": pid, "sql": "SELECT repeat('x', 5000) AS s FROM range(3)"}
    )
    assert [len(r[0]) for r in d["rows"]] == [1001, 1001, 1001]  # cells cut at 1000 characters + "…"
    # 1000 rows x 1000 characters would be ~1 MB of JSON: cut to stay under 512 KB, and said so
    d, text = await call(
        server,
        "query",
        {"profile_id": pid, "sql": "SELECT i, repeat('y', 1000) FROM range(1000) t(i)", "limit": 1000},
    )
    assert d["truncated"] is True and 300 < d["row_count"] < 520 and "512 KB" in d["notes"][0]
    assert len(text) <= TEXT_CAP and "cut at 6000 characters; select fewer columns" in text
    assert d["rows"][0][0] == 0 and d["rows"][-1][0] == d["row_count"] - 1


@pytest.mark.parametrize(
    "sql, needle",
    [
        ("SELECT * FROM read_csv('/etc/passwd')", "Permission"),
        ("SELECT * FROM read_text('/etc/hostname')", "Permission"),
        ("SELECT * FROM '/etc/passwd'", "does not exist"),  # replacement scans are off: just a table name
        ("SELECT * FROM glob('/etc/*')", "Permission"),
        ("CREATE TABLE pwn AS SELECT 1", "only SELECT"),
        ("INSERT INTO ranks SELECT * FROM ranks", "only SELECT"),
        ("COPY ranks TO '/tmp/stepdoctor-pwn.csv'", "only SELECT"),
        ("COPY (SELECT 1) TO '/tmp/stepdoctor-pwn.csv'", "only SELECT"),
        ("ATTACH '/tmp/stepdoctor-pwn.duckdb' AS x", "only SELECT"),
        ("SET enable_external_access = true", "only SELECT"),
        ("SELECT 1; DROP TABLE ranks", "exactly one"),
        ("SELECT 1; SELECT 2", "exactly one"),
        ("SELECT 1) UNION ALL (SELECT 2", "SELECT"),
        ("SELECT * FROM no_such_table", "tables: ranks"),
    ],
)
async def test_query_cannot_read_files_or_write(server, sql, needle):
    pid = await load(server)
    prof = server.registry.by_id(pid)
    before = (prof.db_path.stat().st_size, prof.db_path.stat().st_mtime_ns)
    text = await call_error(server, "query", {"profile_id": pid, "sql": sql})
    assert needle in text, text
    assert "root:" not in text  # nothing of /etc/passwd leaks into the error
    assert not Path("/tmp/stepdoctor-pwn.csv").exists() and not Path("/tmp/stepdoctor-pwn.duckdb").exists()
    assert (prof.db_path.stat().st_size, prof.db_path.stat().st_mtime_ns) == before


def test_query_connection_is_locked_down(server, tmp_path: Path):
    """Below the statement filter: the worker's connection itself refuses files, settings and writes."""
    from stepdoctor.server import query_worker

    prof = server.registry.load(CLUSTER4.resolve())[1]
    con, own = query_worker._connect({"db": str(prof.db_path), "memory_mb": 64})
    assert con.execute("SELECT current_setting('enable_external_access'), current_setting('lock_configuration'), "
                       "current_setting('memory_limit'), current_setting('threads')").fetchall() == [
        (False, True, "61.0 MiB", 1)]   # 64 MB as DuckDB shows it (MiB), one thread
    assert {"device_ops", "host_ops", "ranks"} <= own
    with pytest.raises(duckdb.PermissionException):
        con.execute(f"SELECT * FROM read_csv('{tmp_path}/x.csv')")
    with pytest.raises(duckdb.Error):
        con.execute("SET enable_external_access = true")
    with pytest.raises(ToolError, match="Permission"):
        run_query(prof, f"SELECT * FROM read_csv('{tmp_path}/x.csv')", 10)


async def test_explain(server):
    pid = await load(server)
    issues, _ = await call(server, "list_issues", {"profile_id": pid, "limit": 100})
    n = next(
        i for i, f in enumerate(issues["findings"], 1) if (f["check"], f["subject"]) == ("slow-rank", "free")
    )
    d, text = await call(server, "explain", {"id": "slow-rank", "profile_id": pid, "finding": n})
    assert d["kind"] == "check" and d["finding"]["ranks"] == [0] and d["finding"]["steps"] == [2]
    assert d["finding"]["evidence"]["excess_ms"] == pytest.approx(250.0, abs=10.0)
    assert d["fixes"] and "slow-rank" in text
    fix, text = await call(server, "explain", {"id": "aclnn-cache-limit"})
    assert fix["kind"] == "fix" and "ACLNN_CACHE_LIMIT" in fix["title"] and fix["steps"]
    err = await call_error(server, "explain", {"id": "slow-rank", "profile_id": pid, "finding": 999})
    assert f"has {issues['total']} findings" in err
    err = await call_error(server, "explain", {"id": "slow-rank", "finding": 1})
    assert "over MCP path or profile_id" in err


async def test_evidence_keyed_by_rank_is_trimmed_to_the_ranks_that_weigh(server, cache, monkeypatch):
    """Answers stay small on big clusters: a map keyed by rank keeps EVIDENCE_RANKS ranks (EXPLAIN_RANKS in
    explain), the heaviest, and says so; the CLI's JSON keeps every rank."""
    from stepdoctor.tools import api
    from stepdoctor.tools import budgets as answers

    monkeypatch.setattr(answers, "EVIDENCE_RANKS", 2)
    monkeypatch.setattr(answers, "EXPLAIN_RANKS", 3)
    pid = await load(server)
    d, _ = await call(server, "list_issues", {"profile_id": pid, "limit": 100})
    full = {(f.check, f.subject): f for f in api.issues(api.load(CLUSTER4, IngestOptions(cache_dir=cache))).findings}
    checked = 0
    for f in d["findings"]:
        whole = full[(f["check"], f["subject"])].evidence
        for key, value in whole.items():
            if isinstance(value, dict) and len(value) > 2 and all(k.isdigit() for k in value):
                # a per-rank table is left to explain in a list answer (lean.lean_evidence); a map of numbers stays
                assert key in f["evidence"]["trimmed"].get("explain", "").split(",") or (
                    len(f["evidence"][key]) == 2 and set(f["evidence"][key]) <= set(value))
                assert f["evidence"]["trimmed"][key].startswith(f"2 of {len(value)} ranks shown")
                checked += 1
    assert checked >= 3
    blocking = next(f for f in d["findings"] if f["subject"] == "ASCEND_LAUNCH_BLOCKING")
    assert blocking["ranks"] == [0, 1, 2, 3]  # the finding still names every rank
    n = 1 + next(i for i, f in enumerate(d["findings"]) if "trimmed" in f["evidence"])
    e, _ = await call(server, "explain", {"id": d["findings"][n - 1]["check"], "profile_id": pid, "finding": n})
    assert all(len(e["finding"]["evidence"][k]) == 3 for k in e["finding"]["evidence"]["trimmed"])


def test_trim_evidence_keeps_the_heaviest_ranks_and_the_odd_values():
    from typing import ClassVar

    from stepdoctor.analysis.checks.evidence import Entry, Evidence
    from stepdoctor.analysis.models import Finding

    class Rank(Entry):
        weighs_by: ClassVar[str | None] = "impact_ms_per_step"
        steps: list[int]
        impact_ms_per_step: float
        by_step: dict[str, int]

    class Pipeline(Entry):
        weighs_by: ClassVar[str | None] = "interval_ms"
        interval_ms: float

    class Ev(Evidence):
        per_rank: dict[int, Rank]
        pipelines: dict[int, Rank] | dict[int, Pipeline] | None = None   # entries of either shape
        lost_ms_by_rank: dict[int, float]
        values_by_rank: dict[int, str | None]
        small: dict[int, int]
        by_size: dict[str, int]   # keyed by sizes that look like ranks: never cut
        threshold: int

    per_rank = {str(r): {"steps": [1], "impact_ms_per_step": float(r % 7), "by_step": {"1": r}} for r in range(20)}
    lost = {str(r): 1.0 for r in range(20)} | {"13": 9.0}
    env = {str(r): "1" for r in range(20)} | {"17": "0"}
    sizes = {str(512 * k + 100): k for k in range(20)}
    f = Finding(check="x", severity="low", title="t", ranks=list(range(20)),
                evidence={"per_rank": per_rank, "lost_ms_by_rank": lost, "values_by_rank": env, "small": {"0": 1},
                          "by_size": sizes, "threshold": 3})
    t = trim_evidence(f, 3, Ev)
    pipes = {str(r): {"interval_ms": float(r % 5)} for r in range(20)}
    p = trim_evidence(f.model_copy(update={"evidence": {**f.evidence, "pipelines": pipes}}), 3, Ev)
    assert list(p.evidence["pipelines"]) == ["4", "9", "14"]   # weighed by the shape's own field
    # weights r % 7: 6 on ranks 6 and 13, then 5 on ranks 5, 12, 19 (ties in rank order); kept in rank order
    assert list(t.evidence["per_rank"]) == ["5", "6", "13"]
    assert list(t.evidence["lost_ms_by_rank"]) == ["0", "1", "13"]
    assert list(t.evidence["values_by_rank"]) == ["0", "1", "17"]  # the one rank with another value stays
    assert t.evidence["small"] == {"0": 1} and t.evidence["threshold"] == 3 and t.evidence["by_size"] == sizes
    assert set(t.evidence["trimmed"]) == {"per_rank", "lost_ms_by_rank", "values_by_rank"}
    assert f.evidence["per_rank"] is per_rank and len(per_rank) == 20  # the finding itself is unchanged
    assert trim_evidence(f, 20, Ev) is f
    assert trim_evidence(f, 3) is f  # no check "x": no model says which maps are keyed by rank


async def test_list_fixes(server):
    d, text = await call(server, "list_fixes", {"check": "env-var"})
    ids = [f["id"] for f in d["fixes"]]
    assert "aclnn-cache-limit" in ids and "ascend-launch-blocking-off" in ids
    assert all("env-var" in f["checks"] for f in d["fixes"]) and d["total"] == len(ids) >= 6
    cut, _ = await call(server, "list_fixes", {"vendor": "ascend", "limit": 2})
    assert len(cut["fixes"]) == 2 and cut["truncated"] is True and cut["total"] > 2
    assert all("ascend" in f["vendors"] or "any" in f["vendors"] for f in cut["fixes"])
    assert "aclnn-cache-limit:" in text


async def test_suggest_edit_returns_a_diff_and_never_writes(server, code_root: Path):
    script = code_root / "run.sh"
    before = (script.read_bytes(), script.stat().st_mtime_ns)
    d, text = await call(server, "suggest_edit", {"code_path": str(script), "fix": "aclnn-cache-limit"})
    assert "+export ACLNN_CACHE_LIMIT=100000" in d["diff"] and d["changed"] is True
    assert d["applied"] is False and "+export ACLNN_CACHE_LIMIT=100000" in text
    assert (script.read_bytes(), script.stat().st_mtime_ns) == before
    assert not list(code_root.glob("*.bak"))
    err = await call_error(server, "suggest_edit", {"code_path": "/etc/hostname", "fix": "aclnn-cache-limit"})
    assert "outside the allowed roots" in err


async def test_compare_runs(server):
    d, text = await call(server, "compare_runs", {"base": str(RANK0), "target": str(RANK3)})
    assert d["breakdown_delta"]["compute_ms"] == pytest.approx(7.5, abs=1.0)  # rank 3 computes slower
    assert d["delta_ms"] == pytest.approx(-125.0, abs=2.0)  # rank 0's 250 ms tail, averaged over 2 steps
    assert d["verdict"] and text.startswith("Verdict: ")
    pid = await load(server)
    r, _ = await call(server, "compare_runs", {"base": pid, "rank_a": 0, "rank_b": 3, "limit": 3})
    assert r["breakdown_delta"]["compute_ms"] == pytest.approx(7.5, abs=1.0)
    assert len(r["top_changes"]) == 3 and r["truncated"] is True
    assert r["top_changes"][0]["name"].startswith("MatMulV2")
    err = await call_error(server, "compare_runs", {"base": pid})
    assert "rank_a and rank_b" in err


# ---------------------------------------------------------------------------------------------------------
# Errors the model can fix, roots, resources, prompts
# ---------------------------------------------------------------------------------------------------------


async def test_errors_name_the_next_step(server):
    pid = await load(server)
    err = await call_error(server, "top_kernels", {"profile_id": pid, "rank": 9})
    assert "rank 9 not in profile; ranks are 0-3" in err
    err = await call_error(server, "breakdown", {})
    assert "profile_id (from load_profile)" in err
    err = await call_error(server, "breakdown", {"profile_id": "nope"})
    assert "unknown profile_id 'nope'" in err and pid in err and "load_profile" in err
    err = await call_error(server, "breakdown", {"path": str(CLUSTER4), "profile_id": pid})
    assert "not both" in err
    err = await call_error(server, "load_profile", {"path": str(SHARED / "no-such-run")})
    assert "no profile at" in err and str(SHARED) in err


async def test_paths_outside_the_roots_are_refused(tmp_path: Path):
    root = tmp_path / "root"
    root.mkdir()
    (root / "link").symlink_to(need(CLUSTER4))  # a symlink out of the root
    inner = root / "run"
    inner.mkdir()
    (inner / "rank0").symlink_to(RANK0)  # a profile folder whose rank links out of the root
    srv = create_server([root], cache_dir=tmp_path / "cache")
    for path in ["/etc/passwd", str(CLUSTER4), str(root / "link"), "../../etc", str(root / ".." / "..")]:
        err = await call_error(srv, "load_profile", {"path": path})
        assert "outside the allowed roots" in err and str(root.resolve()) in err, err
    err = await call_error(srv, "load_profile", {"path": str(inner)})
    assert "links outside the allowed roots" in err and str(RANK0) not in err
    err = await call_error(srv, "query", {"path": "/etc", "sql": "SELECT 1"})
    assert "outside the allowed roots" in err


def test_default_root_is_the_working_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    srv = create_server(cache_dir=tmp_path / "cache")
    assert srv.registry.roots.dirs == [tmp_path.resolve()]
    with pytest.raises(ProfileError, match="existing directory"):
        create_server([tmp_path / "missing"])


async def test_resources_and_prompts(server):
    pid = await load(server)
    async with Client(server, raise_exceptions=True) as c:
        templates = {t.uri_template for t in (await c.list_resource_templates()).resource_templates}
        assert templates == {
            "stepdoctor://fixes/{fix_id}",
            "stepdoctor://checks/{check_id}",
            "stepdoctor://profiles/{profile_id}/issues",
        }
        fix = (await c.read_resource("stepdoctor://fixes/aclnn-cache-limit")).contents[0]
        assert fix.mime_type == "text/markdown" and "ACLNN_CACHE_LIMIT" in fix.text
        check = (await c.read_resource("stepdoctor://checks/slow-rank")).contents[0].text
        assert "slow-rank" in check and "slow-rank-load-imbalance" in check
        report = (await c.read_resource(f"stepdoctor://profiles/{pid}/issues")).contents[0].text
        assert "slow-rank" in report and "ASCEND_LAUNCH_BLOCKING" in report
        schema = (await c.read_resource("stepdoctor://schema")).contents[0].text
        assert "CREATE TABLE device_ops" in schema
        prompts = {p.name for p in (await c.list_prompts()).prompts}
        assert prompts == {"diagnose_profile", "why_regressed"}
        p = await c.get_prompt("diagnose_profile", {"path": str(CLUSTER4)})
        assert str(CLUSTER4) in p.messages[0].content.text and "list_issues" in p.messages[0].content.text
        p = await c.get_prompt("why_regressed", {"base": "/a", "target": "/b"})
        assert "compare_runs" in p.messages[0].content.text
        with pytest.raises(Exception, match="unknown fix"):
            await c.read_resource("stepdoctor://fixes/no-such-fix")


def test_text_cap_cuts_at_a_line_and_says_how_to_narrow():
    text = "\n".join(f"row {i} " + "x" * 50 for i in range(1000))
    out = cap_text(text, "lower limit")
    assert len(out) <= TEXT_CAP and out.endswith("lower limit.") and "cut at 6000 characters" in out
    assert out.splitlines()[-2].startswith("row ")  # whole lines only
    assert cap_text("short", "x") == "short"


# ---------------------------------------------------------------------------------------------------------
# Concurrency
# ---------------------------------------------------------------------------------------------------------


async def test_twenty_concurrent_calls_agree(server):
    pid = await load(server)
    results: list[Any] = [None] * 20
    calls = [
        ("list_issues", {"profile_id": pid}),
        ("breakdown", {"path": str(CLUSTER4)}),
        ("slow_ranks", {"profile_id": pid}),
        ("query", {"profile_id": pid, "sql": "SELECT count(*) FROM host_ops"}),
    ]

    async with Client(server, raise_exceptions=True) as c:

        async def one(i: int) -> None:
            name, args = calls[i % len(calls)]
            r = await c.call_tool(name, args)
            assert not r.is_error, r.content[0].text
            results[i] = (name, json.dumps(r.structured_content, sort_keys=True))

        async with anyio.create_task_group() as tg:
            for i in range(20):
                tg.start_soon(one, i)
    for name, _ in calls:
        answers = {res for n, res in results if n == name}
        assert len(answers) == 1, f"{name} answered differently under concurrency"


async def test_concurrent_loads_ingest_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    need(CLUSTER4)  # its roots are the shared data
    calls: list[Path] = []
    real = build.build_database

    def counting(disc, out, *a, **kw):
        calls.append(out)
        time.sleep(0.3)  # widen the window in which a second load could start its own ingest
        return real(disc, out, *a, **kw)

    # the profile module builds on a cache miss: count the builds there
    monkeypatch.setattr(sys.modules["stepdoctor.analysis.build.open"], "build_database", counting)
    srv = create_server([SHARED], cache_dir=tmp_path / "cache")
    ids: list[str] = []
    async with Client(srv, raise_exceptions=True) as c:

        async def one() -> None:
            r = await c.call_tool("load_profile", {"path": str(need(CLUSTER4))})
            assert not r.is_error, r.content[0].text
            ids.append(r.structured_content["profile_id"])

        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(one)
    assert len(calls) == 1 and len(set(ids)) == 1 and len(ids) == 5


# ---------------------------------------------------------------------------------------------------------
# Docs
# ---------------------------------------------------------------------------------------------------------


def test_tools_doc_is_fresh():
    from stepdoctor.server.gendocs import tools_markdown

    page = REPO / "docs" / "tools.md"
    assert page.exists(), "run: python -m stepdoctor.server.gendocs > docs/tools.md"
    assert page.read_text(encoding="utf-8") == tools_markdown(), (
        "docs/tools.md is stale; run: python -m stepdoctor.server.gendocs > docs/tools.md"
    )


# ---------------------------------------------------------------------------------------------------------
# Real transports
# ---------------------------------------------------------------------------------------------------------


def _child_env(cache: Path) -> dict[str, str]:
    env = {k: os.environ[k] for k in ("HOME", "PATH", "LANG", "TMPDIR") if k in os.environ}
    env["STEPDOCTOR_CACHE_DIR"] = str(cache)
    return env


def _mcp_command() -> list[str]:
    """The venv's `stepdoctor` console script (beside sys.executable), else the module."""
    script = Path(sys.executable).parent / "stepdoctor"
    return [str(script)] if script.exists() else [sys.executable, "-m", "stepdoctor"]


async def test_stdio_subprocess(cache: Path):
    need(CLUSTER4)  # its roots are the shared data
    cmd = _mcp_command()
    params = StdioServerParameters(
        command=cmd[0], args=[*cmd[1:], "mcp", "--root", str(SHARED)], env=_child_env(cache), cwd=str(REPO)
    )
    async with Client(params, raise_exceptions=True, read_timeout_seconds=120) as c:
        names = {t.name for t in (await c.list_tools()).tools}
        assert names == TOOLS
        r = await c.call_tool("load_profile", {"path": str(need(CLUSTER4))})
        pid = r.structured_content["profile_id"]
        r = await c.call_tool("slow_ranks", {"profile_id": pid})
        dims = {d["name"]: d for d in r.structured_content["dimensions"]}
        assert dims["compute"]["slow"][0]["rank"] == 3
        r = await c.call_tool("load_profile", {"path": "/etc"})
        assert r.is_error and "outside the allowed roots" in r.content[0].text


async def test_stdio_subprocess_legacy_session(cache: Path):
    """The handshake-era client (2025-11-25 initialize) that older hosts use."""
    need(CLUSTER4)  # its roots are the shared data
    cmd = _mcp_command()
    params = StdioServerParameters(
        command=cmd[0], args=[*cmd[1:], "mcp", "--root", str(SHARED)], env=_child_env(cache), cwd=str(REPO)
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
        init = await s.initialize()
        assert init.server_info.name == "stepdoctor"
        r = await s.call_tool("breakdown", {"path": str(need(CLUSTER4)), "ranks": [0], "steps": [2]})
        assert r.structured_content["rows"][0]["step_ms"] == pytest.approx(350.0, abs=1.0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class HttpServer:
    """`stepdoctor mcp --transport http` in a subprocess, stopped (by its own pid) on exit."""

    def __init__(self, cache: Path, *extra: str) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.proc = subprocess.Popen(
            [
                *_mcp_command(),
                "mcp",
                "--transport",
                "http",
                "--port",
                str(self.port),
                "--root",
                str(SHARED),
                *extra,
            ],
            env=_child_env(cache),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited: {self.proc.stderr.read()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise AssertionError("HTTP server did not start within 60 s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def http_server(cache: Path):
    need(CLUSTER4)  # its roots are the shared data
    srv = HttpServer(cache)
    yield srv
    srv.stop()


@pytest.fixture
def http_server_with_token(cache: Path):
    need(CLUSTER4)  # its roots are the shared data
    srv = HttpServer(cache, "--token", "s3cret-token")
    yield srv
    srv.stop()


async def test_streamable_http(http_server: HttpServer):
    async with Client(http_server.url, raise_exceptions=True, read_timeout_seconds=120) as c:
        assert {t.name for t in (await c.list_tools()).tools} == TOOLS
        r = await c.call_tool("breakdown", {"path": str(need(CLUSTER4)), "ranks": [3]})
        assert not r.is_error, r.content[0].text
        rows = r.structured_content["rows"]
        assert [x["step"] for x in rows] == [1, 2] and rows[0]["compute_ms"] == pytest.approx(26.0, abs=1.0)


async def test_streamable_http_token(http_server_with_token: HttpServer):
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    url = http_server_with_token.url
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    async with httpx.AsyncClient(timeout=30) as h:
        r = await h.post(url, json=body, headers=headers)
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        r = await h.post(url, json=body, headers={**headers, "Authorization": "Bearer wrong"})
        assert r.status_code == 401
    auth = httpx2.AsyncClient(headers={"Authorization": "Bearer s3cret-token"}, timeout=120)
    async with auth, Client(streamable_http_client(url, http_client=auth), raise_exceptions=True) as c:
        assert "query" in {t.name for t in (await c.list_tools()).tools}


def test_non_loopback_host_needs_a_token(cache: Path):
    res = subprocess.run(
        [*_mcp_command(), "mcp", "--transport", "http", "--host", "0.0.0.0", "--port", str(_free_port())],
        env=_child_env(cache),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2
    assert "refusing to listen on 0.0.0.0 without a token" in res.stderr


@pytest.mark.slow
def test_inspector_cli(cache: Path):
    """The MCP Inspector CLI (node) lists the tools and calls one against the stdio server."""
    npx = shutil.which("npx")
    if npx is None:
        pytest.skip("npx not installed: the Inspector CLI check needs node")
    server_cmd = [*_mcp_command(), "mcp", "--root", str(need(CLUSTER4))]
    env = {**os.environ, "STEPDOCTOR_CACHE_DIR": str(cache)}
    base = [npx, "-y", INSPECTOR, "--cli", "--format", "json", "-e", f"STEPDOCTOR_CACHE_DIR={cache}"]
    try:
        listed = subprocess.run(
            [*base, "--method", "tools/list", "--", *server_cmd],
            capture_output=True,
            text=True,
            timeout=600,
            env=env,
        )
    except subprocess.TimeoutExpired:
        pytest.skip(f"{INSPECTOR} could not be fetched or started within 600 s")
    if listed.returncode != 0 and ("npm error" in listed.stderr or "ERR!" in listed.stderr):
        pytest.skip(f"{INSPECTOR} could not be fetched: {listed.stderr.strip().splitlines()[-1]}")
    assert listed.returncode == 0, listed.stderr[-2000:]
    names = {t["name"] for t in json.loads(listed.stdout)["result"]["tools"]}
    assert names == TOOLS
    called = subprocess.run(
        [
            *base,
            "--method",
            "tools/call",
            "--tool-name",
            "slow_ranks",
            "--tool-args-json",
            json.dumps({"path": str(CLUSTER4)}),
            "--",
            *server_cmd,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert called.returncode == 0, called.stderr[-2000:]
    out = json.loads(called.stdout)
    result = out.get("result", out)
    dims = {d["name"]: d for d in result["structuredContent"]["dimensions"]}
    assert dims["free"]["slow"][0]["rank"] == 0


async def test_the_tool_list_is_lean_by_default(cache: Path):
    """Descriptions and input schemas together stay under 4k tokens (16 KB); output schemas on request."""
    server = create_server([REPO / "examples"], cache_dir=cache)
    async with Client(server, raise_exceptions=True) as c:
        tools = (await c.list_tools()).tools
    sent = json.dumps([t.model_dump(by_alias=True, mode="json", exclude_none=True) for t in tools])
    assert len(sent) < 16_000, len(sent)
    assert all(t.output_schema is None for t in tools)
    async with Client(server, raise_exceptions=True) as c:
        r = await c.call_tool("list_fixes", {"check": "gc-pause"})
    assert r.structured_content["total"] >= 1   # the structured answer is still there


def test_an_unknown_argument_is_refused_naming_the_valid_ones(tmp_path):
    """A misspelt filter ("rnak") was dropped by the SDK, so the call answered another question."""
    import anyio
    from mcp.client import Client

    from stepdoctor.server.app import create_server

    run = need(Path(__file__).parent / "data" / "real_cpu" / "dp2_late" / "traces")

    async def ask():
        srv = create_server([run.parent], cache_dir=tmp_path)
        async with Client(srv, raise_exceptions=False) as c:
            bad = await c.call_tool("breakdown", {"path": str(run), "rnak": [1]})
            good = await c.call_tool("breakdown", {"path": str(run), "ranks": [1]})
            return bad, good

    bad, good = anyio.run(ask)
    assert bad.is_error and not good.is_error
    text = bad.content[0].text
    assert "takes no argument 'rnak'" in text and "ranks" in text and text.count("\n") == 0
