"""stage-imbalance: the heavy pipeline stage (or, where no stage is named, the heavy rank group) is named, the stages
that wait for it are not; generated stores at 8, 64 and 1,024 ranks, the real Ascend pipeline job, and its golden
answer."""

from __future__ import annotations

import csv
import statistics

import pytest
from checkrun import assert_golden, stragglers

from conftest import SHARED, need
from stepdoctor.evals.generate import stragglers as gen
from stepdoctor.tools import api

REAL = SHARED / "real"
PIPE = REAL / "ascend" / "mindinsight-fixtures" / "cluster_propose"


@pytest.mark.parametrize("n", [8, 64, 1024])
def test_generated_stage_imbalance_names_the_last_stage(tmp_path, n):
    prof = gen.open_store(gen.build(tmp_path, n, "stage"))
    findings, secs = stragglers(prof)
    per = n // 4
    assert [(f.check, f.subject) for f in findings] == [("stage-imbalance", "stage 4 of 4")]
    f = findings[0]
    assert f.ranks == list(range(3 * per, n))
    assert f.evidence["gap_ms"] == pytest.approx(gen.COMPUTE_MS * (gen.STAGE_EXTRA - 1), abs=0.2)
    assert "last stage" in f.message and "fewer layers" in f.message
    if n == 1024:
        print(f"\n1024 ranks, stage: {secs:.2f} s")
        assert secs < 30


@pytest.mark.parametrize(("scenario", "source"), [("stage_pg", "process groups carrying send/recv"),
                                                  ("stage_links", "send/receive partners")])
@pytest.mark.parametrize("n", [8, 64, 1024])
def test_generated_stage_from_send_recv_partners(tmp_path, n, scenario, source):
    """Nothing names the pipeline: the stages come from who sends to whom. In stage_links stage 0 holds the
    highest ranks, so the heavy last stage is ranks 0..n/4-1 only if the chains are oriented by the end that
    sends first, not by rank number."""
    prof = gen.open_store(gen.build(tmp_path, n, scenario))
    findings, secs = stragglers(prof)
    per = n // 4
    assert [(f.check, f.subject) for f in findings] == [("stage-imbalance", "stage 4 of 4")]
    f = findings[0]
    heavy = list(range(per)) if scenario == "stage_links" else list(range(3 * per, n))
    assert f.ranks == heavy
    assert f.evidence["stage_source"] == source and f.evidence["stage_count"] == 4
    assert [s["ranks"][0] for s in f.evidence["stages"]] == ([3 * per, 2 * per, per, 0] if scenario == "stage_links"
                                                             else [0, per, 2 * per, 3 * per])
    assert f.evidence["gap_ms"] == pytest.approx(gen.COMPUTE_MS * (gen.STAGE_EXTRA - 1), abs=0.2)
    if n == 1024:
        assert secs < 30


def test_stage_chains_refuse_what_is_not_a_pipeline():
    from stepdoctor.analysis.metrics.stages import p2p_chains

    assert p2p_chains({(0, 2), (2, 4), (1, 3), (3, 5)}) == [[0, 2, 4], [1, 3, 5]]
    assert p2p_chains({(0, 1), (1, 2), (2, 0)}) is None          # a ring (interleaved schedule): no first stage
    assert p2p_chains({(0, 1), (0, 2), (0, 3)}) is None          # a rank with three partners


def _pipeline_csv_compute(rank: int) -> list[float]:
    with (PIPE / f"ascend_cluster_analyse_pipeline-parallel_2_4_{rank}.csv").open() as fh:
        rows = [float(r["computation_time"]) for r in csv.DictReader(fh)]
    # one row per step of step_trace_raw (5 steps); the CSVs hold a 6th row that no step matches
    return rows[:5]


def test_cluster_propose_stage_imbalance_names_second_stage():
    sr = api.slow_ranks(need(PIPE))
    st = [f for f in sr.findings if f.check == "stage-imbalance"]
    assert len(st) == 1
    f = st[0]
    assert f.subject == "stage 2 of 2" and f.ranks == [2, 3]
    # the numbers the files give: median computation_time per rank over its steps, median over a stage's ranks
    stage = [statistics.median([statistics.median(_pipeline_csv_compute(r)) for r in rs]) for rs in ([0, 1], [2, 3])]
    assert f.evidence["stages"][0]["compute_ms"] == pytest.approx(stage[0], abs=0.001)     # 14.667 ms
    assert f.evidence["stages"][1]["compute_ms"] == pytest.approx(stage[1], abs=0.001)     # 123.042 ms
    assert f.evidence["gap_ms"] == pytest.approx(stage[1] - stage[0], abs=0.002)           # 108.375 ms
    # the send/recv pair by the layout (2 stages: rank r with r + 2), every step replays, and the impact is the
    # step time the replay saves with stage 2 balanced: the median of the what-if's per-step gains
    assert f.evidence["impact_method"].startswith("replay") and f.evidence["replay_error_pct"] <= 2.0
    w = api.what_if(need(PIPE), stages_at_median=[2])
    assert f.impact_ms == pytest.approx(-statistics.median(s.delta_ms for s in w.scenarios[0].steps), abs=0.01)
    assert f.severity == "high" and 0.2 * f.evidence["gap_ms"] < f.impact_ms < f.evidence["gap_ms"]
    assert f.fixes[0] == "pipeline-stage-rebalance"
    assert {v.rank: v.verdict for v in sr.ranks} == {0: "ok", 1: "ok", 2: "heavy-stage", 3: "heavy-stage"}
    assert [v.stage for v in sr.ranks] == [1, 1, 2, 2]


def test_unnamed_stages_are_named_as_a_heavy_rank_group_at_equal_step_time(tmp_path):
    """Nothing names or links the stages: the last quarter of the ranks computes 1.5x longer while every rank's
    step takes the same time. A median test sees nothing odd in a quarter of the ranks; the compute split does."""
    n = 16
    prof = gen.open_store(gen.build(tmp_path, n, "stage_none"))
    findings, _ = stragglers(prof)
    st = [f for f in findings if f.check == "stage-imbalance"]
    assert [(f.subject, f.ranks) for f in st] == [("rank group", list(range(3 * n // 4, n)))]
    f = st[0]
    assert f.evidence["gap_ms"] == pytest.approx(gen.COMPUTE_MS * (gen.STAGE_EXTRA - 1), abs=0.2)
    assert f.evidence["light_ranks"] == list(range(3 * n // 4))
    assert "names no pipeline stages" in f.message
    # the same job with its stages named finds the stage, not a rank group
    named, _ = stragglers(gen.open_store(gen.build(tmp_path / "named", n, "stage")))
    assert [f.subject for f in named if f.check == "stage-imbalance"] == ["stage 4 of 4"]


def test_stage_imbalance_on_the_generated_8_rank_pipeline_is_its_golden_answer(tmp_path):
    findings, _ = stragglers(gen.open_store(gen.build(tmp_path, 8, "stage")))
    assert_golden("stage-imbalance", "generated-stage-8", findings)
