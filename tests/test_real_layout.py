"""Layouts recognised by content on the real profiles (../shared/data/real): rank folders whatever they are
called, ASCEND_PROFILER_OUTPUT given directly, a bare trace_view.json, a rank with only its step table, and
folders holding unrelated runs refused with one line that lists them."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SHARED, need
from stepdoctor.analysis.ingest.discover import discover
from stepdoctor.tools import api

REAL = SHARED / "real"
FIX = REAL / "ascend" / "msinsight-server-fixtures"


@pytest.mark.parametrize("rel,kind,ranks", [
    ("ascend/msinsight-server-fixtures/test_rank_0", "ascend", [0]),          # not named *_ascend_pt
    ("ascend/msinsight-server-fixtures/test_rank_0/ASCEND_PROFILER_OUTPUT", "ascend", [0]),
    ("ascend/msinsight-server-fixtures/heatMap/trace_view.json", "ascend", [0]),   # a bare trace, by content
    ("ascend/mstt-fixtures/timeline_advice", "ascend", [0]),
    ("ascend/msinsight-pt-text-l1", "ascend", [0, 1]),
    ("ascend/mindinsight-fixtures/cluster_propose", "mindspore_legacy", [0, 1, 2, 3]),
    ("kineto/param-resnet-1gpu", "kineto", [0]),
    ("gpu-h100/gloo2_straggler/traces", "kineto", [0, 1]),
])
def test_layout_by_content(rel: str, kind: str, ranks: list[int]):
    d = discover(need(REAL / rel))
    assert d.kind == kind and [s.rank for s in d.sources] == ranks


@pytest.mark.parametrize("rel,says", [
    ("ascend", "separate runs, not one job"),
    ("ascend/mindinsight-fixtures", "holds 4 separate runs"),
    ("ascend/mstt-fixtures", "advisor_backend_compute_advice (Ascend); compute_advice_data (Ascend)"),
    ("ascend/msinsight-server-fixtures/cluster_analysis_output", "msprof-analyze's cluster_analysis_output"),
    ("ascend/msinsight-server-fixtures/metadata", "no recognizable profile"),
    ("ascend/msinsight-server-fixtures/msprof", "no recognizable profile"),
])
def test_not_one_job_is_one_line_exit_2(rel: str, says: str):
    r = subprocess.run([sys.executable, "-m", "stepdoctor.tools.cli", "issues", str(need(REAL / rel))],
                       capture_output=True, text=True)
    assert r.returncode == 2 and says in r.stderr and r.stderr.count("\n") == 1, r.stderr


def test_ranks_with_only_their_step_table_keep_their_breakdown(tmp_path: Path):
    """test_rank_0/1: profiler_info, kernel_details, communication*.json and step_trace_time.csv, no trace."""
    for r in (0, 1):
        shutil.copytree(need(FIX / f"test_rank_{r}"), tmp_path / f"test_rank_{r}")
    b = api.breakdown(str(tmp_path))
    assert b.profile.ranks == [0, 1] and b.profile.steps == [2]
    got = {r.rank: (round(r.compute_ms, 3), round(r.free_ms, 3), round(r.stage_ms, 3)) for r in b.rows}
    assert got == {0: (75.175, 69.91, 291.698), 1: (75.422, 67.861, 294.587)}   # step_trace_time.csv, µs -> ms
    rep = api.issues(str(tmp_path))
    assert rep.profile.ranks == [0, 1]
