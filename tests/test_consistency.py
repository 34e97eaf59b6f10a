"""One truth per number: on every real profile, a number that appears in more than one view is the same number
wherever it has the same name. The views: breakdown (rows and per-rank totals), slow-ranks (each slow rank's
value of the breakdown field its dimension `measures`), issues (the findings, and the slow-rank findings'
evidence), the HTML report (its per-rank table and each finding's impact) and the MCP server's answers (a real
MCP client on the same profiles).

Each comparison reads the views' own outputs; none recomputes a number the way the code does, except the two
identities that define the views: a total is the sum of its rows, a per-step mean is a total over its steps."""

from __future__ import annotations

import html
import re
from pathlib import Path

import numpy as np
import pytest

from conftest import SHARED, need
from stepdoctor.tools import api
from stepdoctor.tools.report import render_report

REAL = SHARED / "real"
CPU = Path(__file__).parent / "data" / "real_cpu"
PROFILES = [
    *(f"gpu-h100/{r}" for r in ("clean", "attn_math", "dataloader_bound", "ddp1", "gloo2_straggler", "host_bound",
                                 "sync_heavy", "gc_pause")),
    *(f"ascend/{r}" for r in ("msinsight-pt-text-l0", "msinsight-pt-text-l1", "msinsight-pt-db-l0",
                               "msinsight-pt-db-l1")),
    *(f"kineto/{r}" for r in ("kineto-tb-resnet50-nw4", "tracelens-bert-small-h100", "tracelens-mi300-xdit-sd35",
                              "param-resnet-1gpu")),
    "cpu/dp4_slowrank", "cpu/pp2_heavy", "cpu/ddp2_ioloader", "cpu/dp8_slowrank_1step",
    "example/cluster4",   # the bundled 4-rank torch_npu sample: rank 3 slower in compute (a dimension finding)
]
FIELDS = ("step_ms", "compute_ms", "communication_ms", "comm_not_overlapped_ms", "free_ms", "idle_ms")


def _path(rel: str) -> Path:
    if rel.startswith("example/"):
        return Path(__file__).resolve().parent.parent / "examples" / rel.removeprefix("example/")
    if rel.startswith("cpu/"):
        return need(CPU / rel.removeprefix("cpu/") / "traces")
    p = need(REAL / rel)
    return p / "traces" if (p / "traces").is_dir() else p


def _key(f) -> tuple:
    return f.check, tuple(f.ranks), f.subject, f.title


@pytest.fixture(scope="module", params=PROFILES)
def views(request):
    prof = api.load(_path(request.param))
    return request.param, prof, api.breakdown(prof), api.slow_ranks(prof), api.issues(prof)


def test_totals_are_the_sums_of_their_rows(views):
    _, _, bd, _, _ = views
    for t in bd.totals:
        mine = [r for r in bd.rows if r.rank == t.rank]
        assert t.steps == len(mine)
        for f in FIELDS:
            xs = [getattr(r, f) for r in mine if getattr(r, f) is not None]
            assert getattr(t, f) == (pytest.approx(sum(xs), abs=1e-3) if xs else None), (t.rank, f)


def test_a_slow_ranks_value_is_its_breakdown_field(views):
    """slow-ranks says which breakdown field each dimension compares (`measures`); a slow rank's value is that
    field's mean over the steps it is slow in, and the finding quoting it says the same numbers."""
    _, _, bd, sr, iss = views
    rows = {(r.rank, r.step): r for r in bd.rows}
    for dim in sr.dimensions:
        assert dim.measures in FIELDS
        for e in [*dim.slow, *dim.late_arrivals]:
            got = [getattr(rows[(e.rank, s)], dim.measures) for s in e.steps]
            assert e.value_ms == pytest.approx(float(np.mean(got)), abs=2e-3), (dim.name, e.rank)
        for e in dim.slow:
            quoted = [f for f in iss.findings if f.check == "slow-rank" and f.ranks == [e.rank]
                      and f.evidence.get("dimension") == dim.name]
            for f in quoted:
                assert (f.evidence["value_ms"], f.evidence["median_ms"]) == (e.value_ms, e.median_ms)


def test_the_slow_ranks_findings_are_the_issues_findings(views):
    _, _, _, sr, iss = views
    by = {_key(f): f for f in iss.findings}
    for f in sr.findings:
        assert _key(f) in by, f.title
        g = by[_key(f)]
        assert (g.impact_ms, g.impact_pct, g.severity, g.steps) == (f.impact_ms, f.impact_pct, f.severity, f.steps)


_ROW = re.compile(r'<tr data-rank="(\d+)">((?:<td class="num">[^<]*</td>)+)</tr>')
_FINDING = re.compile(r'<section class="finding" id="finding-\d+" data-n="\d+" data-check="([^"]+)" '
                      r'data-severity="[^"]+" data-subject="([^"]*)" data-ranks="([^"]*)" data-steps="[^"]*"'
                      r'(?: data-impact-ms="([^"]+)")?')


def _ms(text: str) -> float | None:
    t = text.strip().replace(",", "")
    return None if t in ("", "-", "–", "n/a") else float(t)


def test_the_report_shows_the_same_numbers(views):
    """The report's per-rank table is the breakdown's totals per step; each finding's impact is the issue's."""
    _, prof, bd, _, iss = views
    page = render_report(prof)
    shown = {int(r): [_ms(html.unescape(c)) for c in re.findall(r'<td class="num">([^<]*)</td>', cells)]
             for r, cells in _ROW.findall(page)}
    for t in bd.totals:
        if t.rank not in shown:
            continue
        _rank, steps, step, compute, exposed, free, _other, comm = shown[t.rank]
        assert steps == t.steps
        for got, total in ((step, t.step_ms), (compute, t.compute_ms), (exposed, t.comm_not_overlapped_ms),
                           (free, t.free_ms), (comm, t.communication_ms)):
            if total is not None and got is not None:
                assert got == pytest.approx(total / t.steps, abs=6e-4), t.rank
    impacts = {(c, html.unescape(s), r): float(i) for c, s, r, i in _FINDING.findall(page) if i}
    for f in iss.findings:
        k = (f.check, f.subject, ",".join(map(str, f.ranks)))
        if k in impacts and f.impact_ms is not None:
            assert impacts[k] == pytest.approx(f.impact_ms, abs=6e-4), f.title


@pytest.mark.anyio
async def test_the_mcp_answers_carry_the_same_numbers(tmp_path):
    """Every profile through a real MCP client: breakdown rows, slow-ranks values and finding impacts are the
    numbers of the views above (the server trims lists and evidence, never changes a number)."""
    from mcp import Client

    from stepdoctor.server.app import create_server

    roots = [CPU, Path(__file__).resolve().parent.parent / "examples", *([SHARED] if SHARED.exists() else [])]
    server = create_server(roots, cache_dir=tmp_path / "c")
    async with Client(server, raise_exceptions=True) as c:
        for rel in PROFILES:
            try:
                path = _path(rel)
            except pytest.skip.Exception:
                continue
            prof = api.load(path)
            bd, sr, iss = api.breakdown(prof), api.slow_ranks(prof), api.issues(prof)
            pid = (await c.call_tool("load_profile", {"path": str(path)})).structured_content["profile_id"]
            got = (await c.call_tool("breakdown", {"profile_id": pid, "limit": 2000})).structured_content
            rows = {(r.rank, r.step): r for r in bd.rows}
            for r in got["rows"]:
                mine = rows[(r["rank"], r["step"])]
                for f in FIELDS:
                    assert r.get(f) == getattr(mine, f), (rel, r["rank"], r["step"], f)
            got = (await c.call_tool("slow_ranks", {"profile_id": pid})).structured_content
            want = {d.name: {e.rank: e.value_ms for e in d.slow} for d in sr.dimensions}
            for d in got["dimensions"]:
                assert {e["rank"]: e["value_ms"] for e in d["slow"]}.items() <= want[d["name"]].items(), rel
            got = (await c.call_tool("list_issues", {"profile_id": pid, "limit": 100})).structured_content
            by = {_key(f): f for f in iss.findings}
            for f in got["findings"]:
                k = (f["check"], tuple(f["ranks"]), f["subject"], f["title"])
                assert k in by and f.get("impact_ms") == by[k].impact_ms, (rel, f["title"])
