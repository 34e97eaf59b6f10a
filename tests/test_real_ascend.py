"""Real torch_npu exports (../shared/data/real/ascend, PROVENANCE.md in each folder): the breakdown equals the
profiler's own step table (step_trace_time.csv; analysis.db StepTraceTime), read here independently."""

from __future__ import annotations

import csv
import sqlite3
from pathlib import Path

import pytest

from conftest import SHARED, need
from stepdoctor.tools import api

REAL = SHARED / "real" / "ascend"
# step table column -> breakdown field (µs in the profiler's table, ms in ours)
FIELDS = {"Computing": "compute_ms", "Communication(Not Overlapped)": "comm_not_overlapped_ms",
          "Free": "free_ms", "Stage": "stage_ms", "Preparing": "preparing_ms", "Communication": "communication_ms"}
DB_FIELDS = {"computing": "compute_ms", "communication_not_overlapped": "comm_not_overlapped_ms", "free": "free_ms",
             "stage": "stage_ms", "preparing": "preparing_ms", "communication": "communication_ms"}


def _text_table(rank_dir: Path) -> dict[int, dict[str, float]]:
    with open(rank_dir / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv", newline="") as f:
        return {int(r["Step"]): {FIELDS[k]: float(v) / 1000 for k, v in r.items() if k in FIELDS}
                for r in csv.DictReader(f)}


def _db_table(rank_dir: Path) -> dict[int, dict[str, float]]:
    con = sqlite3.connect(rank_dir / "ASCEND_PROFILER_OUTPUT" / "analysis.db")
    cur = con.execute("SELECT * FROM StepTraceTime")
    cols = [d[0] for d in cur.description]
    out = {}
    for row in cur:
        r = dict(zip(cols, row, strict=True))
        out[int(r["step"])] = {DB_FIELDS[k]: float(v) / 1000 for k, v in r.items() if k in DB_FIELDS}
    return out


@pytest.mark.parametrize("folder,table", [("msinsight-pt-text-l0", _text_table), ("msinsight-pt-text-l1", _text_table),
                                          ("msinsight-pt-db-l0", _db_table), ("msinsight-pt-db-l1", _db_table)])
def test_breakdown_equals_the_profilers_step_table(folder: str, table):
    path = need(REAL / folder)
    b = api.breakdown(str(path))
    assert b.profile.ranks == [0, 1] and b.profile.steps == [50]
    assert not [w for w in b.warnings if "step table" in w], b.warnings
    for row in b.rows:
        want = table(path / f"rank{row.rank}_ascend_pt")[row.step]
        for field, v in want.items():
            assert getattr(row, field) == pytest.approx(v, rel=0.005, abs=1e-3), (folder, row.rank, field)


def test_known_numbers_of_level0_rank0():
    """The values PROVENANCE.md and the README quote, to the µs."""
    b = api.breakdown(str(need(REAL / "msinsight-pt-text-l0")))
    r0 = next(r for r in b.rows if r.rank == 0)
    assert (round(r0.compute_ms, 3), round(r0.comm_not_overlapped_ms, 3)) == (8.827, 81.516)
    assert (round(r0.free_ms, 3), round(r0.stage_ms, 3), round(r0.preparing_ms, 3)) == (25.908, 116.251, 19.358)


@pytest.mark.parametrize("folder", ["msinsight-pt-text-l0", "msinsight-pt-text-l1", "msinsight-pt-db-l0",
                                    "msinsight-pt-db-l1"])
def test_issues_runs_and_counts_the_collectives(folder: str):
    path = need(REAL / folder)
    rep = api.issues(str(path))
    assert rep.profile.ranks == [0, 1]
    prof = api.load(str(path))
    # step 50 runs 187 kernels (COMPUTE_TASK_INFO, kernel_details.csv) and four hcom_allReduce per rank
    assert dict(prof.rows("SELECT rank, count(*) FROM device_ops WHERE category = 'compute' GROUP BY 1")) == \
        {0: 187, 1: 187}
    assert dict(prof.rows("SELECT rank, count(DISTINCT name) FROM device_ops WHERE category = 'communication' "
                          "GROUP BY 1")) == {0: 4, 1: 4}
    if not folder.endswith("text-l0"):   # Level0 writes no communication.json
        assert dict(prof.rows("SELECT rank, count(*) FROM comm_ops GROUP BY rank")) == {0: 4, 1: 4}
