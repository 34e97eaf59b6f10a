"""Real MindSpore legacy profiler folders (../shared/data/real/ascend/mindinsight-fixtures, PROVENANCE.md):
steps, per-step phases and MindSpore's own per-step table, recomputed here from the files."""

from __future__ import annotations

import csv
from decimal import Decimal
from pathlib import Path

import pytest

from conftest import SHARED, need
from stepdoctor.tools import api

MI = SHARED / "real" / "ascend" / "mindinsight-fixtures"
CLUSTER = MI / "cluster_propose"
NS_PER_MS = 1_000_000


def _cluster_file(rank: int) -> list[dict[str, int]]:
    """The step rows (the last row is the average) of ascend_cluster_analyse_pipeline-parallel_2_4_{rank}.csv,
    ms -> ns."""
    with open(CLUSTER / f"ascend_cluster_analyse_pipeline-parallel_2_4_{rank}.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return [{k.strip(): int(Decimal(v) * NS_PER_MS) for k, v in r.items()} for r in rows[:-1]]


def _trace_steps(path: Path) -> list[int]:
    with open(path, newline="") as f:
        return [int(r["step_num"]) for r in csv.DictReader(f) if r["step_num"].isdigit() and int(r["total"])]


def test_cluster_propose_steps_and_vendor_table():
    prof = api.load(str(need(CLUSTER)))
    assert [r[0] for r in prof.rows("SELECT rank FROM ranks ORDER BY rank")] == [0, 1, 2, 3]
    for rank in range(4):
        steps = _trace_steps(CLUSTER / f"step_trace_raw_{rank}_detail_time.csv")
        assert steps == [1, 2, 3, 4, 5]
        assert [r[0] for r in prof.rows("SELECT step FROM steps WHERE rank = ? ORDER BY step", [rank])] == steps
        want = _cluster_file(rank)
        got = prof.rows("SELECT step, computing_ns, comm_not_overlapped_ns, stage_ns, bubble_ns, free_ns "
                        "FROM vendor_step_trace WHERE rank = ? ORDER BY step", [rank])
        assert got == [(s, w["computation_time"], w["communication_alone_time"], w["stage_time"],
                        w["receive_alone_time"], None) for s, w in zip(steps, want, strict=True)]


def test_cluster_propose_stage_compute():
    """Pipeline stage 1 (ranks 2, 3) computes ~123 ms a step, stage 0 (ranks 0, 1) ~14.6 ms; the exact
    values of step 2 (after warm-up) as the cluster files give them."""
    prof = api.load(str(need(CLUSTER)))
    got = dict(((r, s), (c, n)) for r, s, c, n in prof.rows(
        "SELECT rank, step, computing_ns, comm_not_overlapped_ns FROM vendor_step_trace"))
    assert [got[(r, 2)] for r in range(4)] == [(14_580_600, 165_836_300), (14_574_200, 165_736_200),
                                              (123_271_400, 56_018_900), (123_273_000, 56_049_700)]
    # step 1 of the second stage waits ~2 s for its first Receive (compile + first forward upstream)
    assert got[(2, 1)][1] == 2_041_207_500 and got[(3, 1)][1] == 2_254_331_700


def test_data_parallel_cluster_file_is_not_read_as_ms():
    """run_2's data-parallel cluster file repeats the step trace columns in 10 ns ticks: the step phases are the
    step trace's, once, in ns."""
    prof = api.load(str(need(MI / "run_2" / "normal_run" / "profiler")))
    assert prof.rows("SELECT step, phase, dur_ns FROM step_phases ORDER BY phase") == [
        (1, "fp_and_bp", 2366808 * 10), (1, "iteration_interval", 0), (1, "tail", 4097 * 10)]
    assert prof.rows("SELECT count(*) FROM vendor_step_trace")[0][0] == 0


@pytest.mark.parametrize("folder,rank,n", [("profiler", 0, 20), ("profiler", 10, 40),
                                           ("run_1/normal_run/profiler", 1, 322)])
def test_step_counts_follow_the_step_trace(folder: str, rank: int, n: int):
    path = need(MI / folder)
    assert len(_trace_steps(path / f"step_trace_raw_{rank}_detail_time.csv")) == n
    prof = api.load(str(path))
    assert prof.rows("SELECT count(*) FROM steps WHERE rank = ?", [rank])[0][0] == n
