"""Stragglers by arrival and pipeline stage imbalance: the late rank / heavy stage is named, the ranks that
wait for it are not; generated stores at 8, 64 and 1,024 ranks, and the real runs that showed the gaps."""

from __future__ import annotations

import csv
import statistics
import time

import numpy as np
import pandas as pd
import pytest

from conftest import SHARED, need
from stepdoctor.analysis.checks.base import CheckContext, run_checks
from stepdoctor.analysis.metrics import collectives
from stepdoctor.evals.generate import stragglers as gen
from stepdoctor.tools import api

REAL = SHARED / "real"
GLOO2 = REAL / "gpu-h100" / "gloo2_straggler" / "traces"
PIPE = REAL / "ascend" / "mindinsight-fixtures" / "cluster_propose"
MEDIUM_UP = ("medium", "high", "critical")


def _run(prof):
    t = time.perf_counter()
    run = run_checks(CheckContext(prof), only=["slow-rank", "stage-imbalance"])
    return run.findings, time.perf_counter() - t


@pytest.mark.parametrize("n", [8, 64, 1024])
@pytest.mark.parametrize(("scenario", "excess_ms", "cause"), [("late", gen.LATE_MS, "untraced"),
                                                             ("host", gen.HOST_MS, "data_loading")])
def test_generated_straggler_named_and_waiters_not(tmp_path, n, scenario, excess_ms, cause):
    prof = gen.open_store(gen.build(tmp_path, n, scenario))
    findings, secs = _run(prof)
    culprit = n // 2
    assert [f.ranks for f in findings if f.check == "slow-rank"] == [[culprit]]
    f = findings[0]
    assert f.severity == "high"
    arr = f.evidence["arrival"]
    assert arr["last"] == arr["matched"] == 3                       # last at every step's allreduce
    # the others wait the culprit's delay (plus the jitter of their own compute, 0.05 ms sd)
    assert arr["wait_caused_per_step_ms"] == pytest.approx(excess_ms, abs=0.2)
    assert arr["before_arrival"]["cause"] == cause
    assert "arrives last at 3 of 3 collectives" in f.message
    if n == 1024:
        print(f"\n1024 ranks, {scenario}: slow-rank + stage-imbalance in {secs:.2f} s")
        assert secs < 30                                            # generous: 2-3 s on 2 loaded cores


def test_late_at_5_of_8_collectives_names_the_late_rank_not_the_waiters(tmp_path):
    # the 8-rank V100 case: one rank starts its step 7.5 ms late and arrives last at 5 of 8 collectives;
    # slow-ranks used to name the two ranks that waited longest as "slower in compute (+0.18 ms)"
    prof = gen.open_store(gen.build(tmp_path, 8, "late", culprit=5, steps=8, late_steps=5))
    findings, _ = _run(prof)
    assert [f.ranks for f in findings] == [[5]]
    f = findings[0]
    arr = f.evidence.get("arrival") or f.evidence
    assert (arr["last"], arr["matched"]) == (5, 8)
    # 7.5 ms in 5 of 8 steps: 4.69 ms per step over the 8; per late arrival 7.5 ms more untraced than its peers
    assert arr["wait_caused_per_step_ms"] == pytest.approx(gen.LATE_MS * 5 / 8, abs=0.15)
    assert arr["before_arrival"]["excess_ms"]["untraced"] == pytest.approx(gen.LATE_MS, abs=0.2)
    sr = api.slow_ranks(prof)
    assert sr.stragglers == [5]
    assert {v.verdict for v in sr.ranks if v.rank != 5} == {"waits"}


@pytest.mark.parametrize("n", [8, 64, 1024])
def test_generated_stage_imbalance_names_the_last_stage(tmp_path, n):
    prof = gen.open_store(gen.build(tmp_path, n, "stage"))
    findings, secs = _run(prof)
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
    findings, secs = _run(prof)
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


def test_per_instance_tests_dixon_and_sigma():
    # 5 ranks: rank 4 arrives last by 3 ms (shortest wait), the others within 0.1 ms: Dixon Q = 0.97 > 0.710
    durs = [10.0, 10.05, 10.1, 9.95, 7.0]
    df = pd.DataFrame({"inst": 1, "rank": range(5), "step": 1, "start_ns": 0,
                       "dur_ns": (np.array(durs) * 1e6).astype(np.int64)})
    pi = collectives.per_instance(df)
    assert pi.loc[0, "rank"] == 4 and bool(pi.loc[0, "significant"])
    assert pi.loc[0, "wait_ms"] == pytest.approx(10.025 - 7.0, abs=1e-6)
    # the same spread without an outlier: Q = 0.05 / 0.15 below the critical value, nobody is late
    df["dur_ns"] = (np.array([10.0, 10.05, 10.1, 9.95, 9.9]) * 1e6).astype(np.int64)
    assert not bool(collectives.per_instance(df).loc[0, "significant"])
    # 40 ranks: 3-sigma on the other ranks' durations
    rng = np.random.default_rng(1)
    d = 10 + rng.normal(0, 0.05, 40)
    d[7] = 8.0
    df = pd.DataFrame({"inst": 1, "rank": range(40), "step": 1, "start_ns": 0, "dur_ns": (d * 1e6).astype(np.int64)})
    pi = collectives.per_instance(df)
    assert pi.loc[0, "rank"] == 7 and bool(pi.loc[0, "significant"])


def test_gloo2_straggler_names_rank1_not_rank0():
    sr = api.slow_ranks(need(GLOO2))
    named = {(f.check, tuple(f.ranks)): f for f in sr.findings}
    assert ("slow-rank", (1,)) in named
    assert not [f for f in sr.findings if f.check == "slow-rank" and 0 in f.ranks and f.severity in MEDIUM_UP]
    f = named[("slow-rank", (1,))]
    ev = f.evidence.get("arrival") or f.evidence
    # 3 gloo allreduces per step over the kept steps 4-6 (step 7, the profiler's partial last, is left out as
    # in every other view), rank 1 last at all 9; its 50 ms sleep is untraced
    assert (ev["matched"], ev["last"]) == (9, 9)
    b = ev["before_arrival"]
    assert b["cause"] == "untraced"
    # the 50 ms time.sleep per step, nothing traced in it: on the replay it is rank 1's tail (after its last
    # collective of the step); by arrival it shows in the lead-up windows that follow it (2 of the 3 kept steps'
    # sleeps: the last one's window is in the partial step left out)
    assert f.evidence["before"]["window"] == "tail"
    assert f.evidence["before"]["excess_ms"]["untraced"] == pytest.approx(50, abs=2)
    assert 80 <= b["excess_ms"]["untraced"] * b["instances"] <= 105
    assert b["excess_ms"]["untraced"] > 10 * max(b["excess_ms"]["compute_kernels"], b["excess_ms"]["host_ops"])
    verdicts = {v.rank: v for v in sr.ranks}
    assert verdicts[1].verdict == "straggler" and verdicts[0].verdict == "waits" and verdicts[0].waits_for == [1]
    assert sr.stragglers == [1]


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
    findings, _ = _run(prof)
    st = [f for f in findings if f.check == "stage-imbalance"]
    assert [(f.subject, f.ranks) for f in st] == [("rank group", list(range(3 * n // 4, n)))]
    f = st[0]
    assert f.evidence["gap_ms"] == pytest.approx(gen.COMPUTE_MS * (gen.STAGE_EXTRA - 1), abs=0.2)
    assert f.evidence["light_ranks"] == list(range(3 * n // 4))
    assert "names no pipeline stages" in f.message
    # the same job with its stages named finds the stage, not a rank group
    named, _ = _run(gen.open_store(gen.build(tmp_path / "named", n, "stage")))
    assert [f.subject for f in named if f.check == "stage-imbalance"] == ["stage 4 of 4"]


def test_old_sendrecv_all_to_all_is_matched_and_the_late_rank_named_on_the_replay(tmp_path):
    """2021-2023 traces show an all-to-all as NCCL's grouped ncclKernel_SendRecv with no collective args: the 8-rank
    DLRM shape (rank 5 starts 7.5 ms late in 5 of 8 steps). Matched in order, every instance keeps the invariant
    (no member ends before the last starts), so the replay runs and names rank 5, never a rank that waits."""
    import duckdb

    prof = gen.open_store(gen.build(tmp_path, 8, "late", culprit=5, steps=8, late_steps=5, kind="sendrecv"))
    df, _ = collectives.instances(lambda q: prof.sql(q))
    assert set(df["coll"]) == {"sendrecv"} and df.groupby("inst")["rank"].nunique().eq(8).all()
    findings, _ = _run(prof)
    assert [(f.ranks, f.evidence.get("dimension")) for f in findings] == [([5], "replay")]
    assert api.what_if(prof).verdict.startswith("one slow worker: rank 5")
    # the same kernels between pipeline neighbours (each rank talks to one other): matched in order they would
    # end before they begin, so they stay point-to-point of unknown peers
    db = gen.build(tmp_path / "pp", 8, "stage_pg")
    con = duckdb.connect(str(db))
    con.execute("UPDATE comm_ops SET op_type = 'sendrecv' WHERE op_type IN ('send', 'receive')")
    con.close()
    pp = gen.open_store(db)
    df, _ = collectives.instances(lambda q: pp.sql(q))
    assert "sendrecv" not in set(df["coll"]) and len(df)
