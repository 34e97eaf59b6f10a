"""Answers that add up and filters that say what is valid (the bundled example: no ../shared needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = str(Path(__file__).resolve().parent.parent / "examples" / "cluster4")


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "stepdoctor", *args], capture_output=True, text=True)


@pytest.mark.parametrize("args,says", [
    (["issues", EXAMPLE, "--check", "nosuch"], "unknown check 'nosuch'; the checks are affinity-api"),
    (["fixes", "--check", "nosuch"], "unknown check 'nosuch'; the checks are"),
    (["breakdown", EXAMPLE, "--step", "7"], "step 7 not in profile; steps are 1, 2"),
    (["kernels", EXAMPLE, "--top", "-3"], "--top must be at least 1, not -3"),
    (["kernels", EXAMPLE, "--top", "0"], "--top must be at least 1, not 0"),
])
def test_bad_filters_are_one_line_errors_naming_the_valid_values(args: list[str], says: str):
    r = cli(*args)
    assert r.returncode == 2, r.stdout
    assert says in r.stderr and r.stderr.count("\n") == 1


def test_breakdown_table_columns_add_up_to_step_time():
    r = cli("breakdown", EXAMPLE, "--format", "markdown")
    assert r.returncode == 0, r.stderr
    lines = [x for x in r.stdout.splitlines() if x.startswith("| 0 | 1 |")]
    cells = [c.strip() for c in lines[0].strip("|").split("|")]
    step, compute, cno, free, other = (float(c) for c in cells[2:7])
    assert step == 100.0 and other > 0
    assert compute + cno + free + other == pytest.approx(step, abs=0.02)


def test_explain_reads_as_text_with_runnable_verify_commands():
    from stepdoctor.tools import knowledge_tools as kt

    for fix_id in ("gc-freeze-before-training", "dataloader-workers-pin-memory", "remove-empty-cache-in-loop"):
        text = kt.explanation_markdown(kt.explain(fix_id), profile="/runs/a")
        assert "{'" not in text and "['" not in text, text
        block = text.split("## Verify", 1)[1].split("```")[1]
        cmds = [x for x in block.splitlines() if x.strip()]
        assert cmds and all(c.startswith("stepdoctor ") and "/runs/a" in c for c in cmds), cmds
    check = kt.explain("gc-pause")
    assert "(stepdoctor explain gc-freeze-before-training)" in kt.explanation_markdown(check)
    assert "(explain(id='gc-freeze-before-training'))" in kt.explanation_markdown(check, mcp=True)


@pytest.mark.parametrize("args,says", [
    (["report", EXAMPLE, "--format", "json", "-o", "/tmp/r.json"], "unrecognized arguments: --format json"),
    (["demo", "--format", "json"], "unrecognized arguments: --format json"),
    (["report", EXAMPLE, "-o", "/nonexistent-folder/r.html"], "no such folder for the report"),
    (["suggest-edit", EXAMPLE, "--fix", "gc-freeze-before-training"], "is a folder: pass the training script"),
])
def test_meaningless_options_and_wrong_targets_are_refused(args: list[str], says: str):
    r = cli(*args)
    assert r.returncode == 2 and says in r.stderr, r.stderr


def test_every_positional_and_option_has_help():
    from stepdoctor.tools.cli import build_parser

    p = build_parser()
    sub = next(a for a in p._actions if a.dest == "command")
    for name, sp in sub.choices.items():
        for action in sp._actions:
            if action.dest in ("help", "mcp_args"):
                continue
            assert action.help, f"stepdoctor {name}: {action.dest} has no help"


def test_a_rank_filter_says_where_else_a_check_fired():
    """`--check slow-rank --rank 0` on a job whose slow rank is 1: no finding on rank 0, and one line saying the
    check fired on rank 1 (so 'nothing on rank 0' is not read as 'the job is fine')."""
    from pathlib import Path

    from conftest import need
    from stepdoctor.tools import api

    run = need(Path(__file__).parent / "data" / "real_cpu" / "dp2_slowrank" / "traces")
    rep = api.issues(run, checks=["slow-rank"], ranks=[0])
    assert rep.findings == []
    assert [w for w in rep.warnings if "outside the ranks asked" in w] == \
        ["slow-rank fired on rank 1, outside the ranks asked (0)"]
    assert not [w for w in api.issues(run, checks=["slow-rank"], ranks=[1]).warnings if "outside" in w]


def test_a_finding_keeps_its_number_under_every_filter():
    """The number a listing shows is the finding's place in the unfiltered report, the N `explain --finding`
    takes: a filtered listing never renumbers (1, 2, ... of what it kept would name other findings)."""
    from stepdoctor.tools import api
    from stepdoctor.tools import knowledge_tools as kt
    from stepdoctor.tools.render import tables_for

    prof = api.load(EXAMPLE)
    full = api.issues(prof)
    assert full.numbers == list(range(1, len(full.findings) + 1)) and len(full.findings) > 20
    for rep in (api.issues(prof, min_severity="medium"), api.issues(prof, checks=["gc-pause", "env-var"]),
                api.issues(prof, ranks=[1]), api.issues(prof, checks=["env-var"], limit=2)):
        assert len(rep.numbers) == len(rep.findings) and None not in rep.numbers
        for n, f in rep.numbered():
            same = full.findings[n - 1]
            assert (same.check, same.subject) == (f.check, f.subject) and set(f.ranks) <= set(same.ranks)
    gc = api.issues(prof, checks=["gc-pause"])
    (n, f), = gc.numbered()
    assert n > 1 and kt.explain("gc-pause", profile=prof, finding=n).finding == full.findings[n - 1]
    assert tables_for(gc)[0].rows[0][0] == n
    r = cli("issues", EXAMPLE, "--check", "gc-pause", "--format", "markdown")
    assert r.returncode == 0 and f"| {n} | medium | gc-pause |" in r.stdout, r.stdout


_IMPORTED = """
import sys
from stepdoctor.tools import cli
try:
    cli.main(sys.argv[1:])
except SystemExit:
    pass
print(",".join(sorted(sys.modules)), file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["--help"], ["issues", "--help"], ["env", EXAMPLE, "--format", "json"]])
def test_a_command_imports_only_what_it_needs(args: list[str], tmp_path: Path):
    """The CLI's commands are made from the catalog, which names the hang and replay models without importing
    them: `stepdoctor --help` and `env` load neither the hang diagnosis, nor the report (jinja2), nor the MCP
    SDK; `--help` not even the analysis."""
    import os

    env = {**os.environ, "STEPDOCTOR_CACHE_DIR": str(tmp_path)}
    r = subprocess.run([sys.executable, "-c", _IMPORTED, *args], capture_output=True, text=True, env=env)
    mods = set(r.stderr.strip().splitlines()[-1].split(","))
    assert "stepdoctor.tools.cli" in mods and "stepdoctor.tools.catalog" in mods, r.stderr[-500:]
    unwanted = {m for m in mods if m.startswith(("stepdoctor.analysis.hang", "stepdoctor.tools.live", "mcp",
                                                 "stepdoctor.tools.report", "jinja2", "stepdoctor.server"))}
    assert unwanted == set()
    if args[-1] == "--help":
        assert not {m for m in mods if m.startswith(("stepdoctor.analysis.store", "duckdb", "pandas", "numpy"))}


def test_env_status_filters_the_whole_audit():
    """`env` lists every recorded variable; `--status bad` (MCP `status`) only the bad ones of that list."""
    import json

    every = json.loads(cli("env", EXAMPLE, "--format", "json").stdout)
    bad = json.loads(cli("env", EXAMPLE, "--status", "bad", "--format", "json").stdout)
    statuses = {v["status"] for v in every["variables"]}
    assert {"bad", "ok"} <= statuses and every["total"] == len(every["variables"])
    assert bad["variables"] == [v for v in every["variables"] if v["status"] == "bad"] and bad["total"] < every["total"]
