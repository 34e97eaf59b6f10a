"""slow-rank: the late rank is named, with its step and its cause, never a rank that only waits for it; generated
stores at 8, 64 and 1,024 ranks, cluster4 and the real runs that showed the gaps, and its golden answer."""

from __future__ import annotations

import statistics

import numpy as np
import pandas as pd
import pytest
from checkrun import assert_golden, stragglers

from conftest import KINETO, SHARED, need
from stepdoctor.analysis import build
from stepdoctor.analysis.metrics import collectives
from stepdoctor.evals.generate import stragglers as gen
from stepdoctor.tools import api

REAL = SHARED / "real"
GLOO2 = REAL / "gpu-h100" / "gloo2_straggler" / "traces"
PIPE = REAL / "ascend" / "mindinsight-fixtures" / "cluster_propose"
MEDIUM_UP = ("medium", "high", "critical")


@pytest.mark.parametrize("n", [8, 64, 1024])
@pytest.mark.parametrize(("scenario", "excess_ms", "cause"), [("late", gen.LATE_MS, "untraced"),
                                                             ("host", gen.HOST_MS, "data_loading")])
def test_generated_straggler_named_and_waiters_not(tmp_path, n, scenario, excess_ms, cause):
    prof = gen.open_store(gen.build(tmp_path, n, scenario))
    findings, secs = stragglers(prof)
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
    findings, _ = stragglers(prof)
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


def test_old_sendrecv_all_to_all_is_matched_and_the_late_rank_named_on_the_replay(tmp_path):
    """2021-2023 traces show an all-to-all as NCCL's grouped ncclKernel_SendRecv with no collective args: the 8-rank
    DLRM shape (rank 5 starts 7.5 ms late in 5 of 8 steps). Matched in order, every instance keeps the invariant
    (no member ends before the last starts), so the replay runs and names rank 5, never a rank that waits."""
    import duckdb

    prof = gen.open_store(gen.build(tmp_path, 8, "late", culprit=5, steps=8, late_steps=5, kind="sendrecv"))
    df, _ = collectives.instances(lambda q: prof.sql(q))
    assert set(df["coll"]) == {"sendrecv"} and df.groupby("inst")["rank"].nunique().eq(8).all()
    findings, _ = stragglers(prof)
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


def test_cluster4_slow_ranks_named_with_step_and_cause(cluster4):
    sr = api.slow_ranks(cluster4)
    dims = {d.name: d for d in sr.dimensions}
    comp = dims["compute"].slow
    assert [e.rank for e in comp] == [3] and comp[0].steps == [1, 2]
    assert comp[0].excess_ms == pytest.approx(7.43, abs=0.05)          # 26.11 vs 18.68 ms median
    assert "MatMulV2" in comp[0].cause and "arrives last" in comp[0].cause
    free = dims["free"].slow
    assert [e.rank for e in free] == [0] and free[0].steps == [2]
    assert free[0].excess_ms == pytest.approx(250.05, abs=0.1)
    assert "end of step 2" in free[0].cause and "no host activity" in free[0].cause
    assert dims["communication"].slow == []
    assert [e.rank for e in dims["communication"].late_arrivals] == [3]
    checks = {(f.subject, tuple(f.ranks)): f for f in sr.findings}
    assert set(checks) == {("compute", (3,)), ("free", (0,))}
    assert checks[("compute", (3,))].severity == "high" and checks[("free", (0,))].severity == "high"


def test_trace_filter_rank1_slower_in_compute_like_hta():
    sr = api.slow_ranks(need(KINETO / "trace_filter"))
    comp = {d.name: d for d in sr.dimensions}["compute"].slow
    assert [e.rank for e in comp] == [1]
    assert comp[0].value_ms == pytest.approx(135.548, abs=0.01)        # HTA compute_time 135548 us
    assert comp[0].median_ms == pytest.approx((135.548 + 106.252) / 2, abs=0.01)
    assert "split_embedding" in comp[0].cause and "<" not in comp[0].cause   # short kernel names
    # rank 0 only waits for rank 1: it is not named slow in communication
    assert not any(f.subject == "communication" for f in sr.findings)
    assert [f.ranks for f in sr.findings if f.subject == "compute"] == [[1]]


def test_cluster4_rank3_arrives_last_and_the_others_only_wait(cluster4):
    sr = api.slow_ranks(cluster4)
    assert sr.stragglers == [3]
    v = {x.rank: x for x in sr.ranks}
    # 8 HCCL allreduces (4 per step): rank 3's take 0.95 ms, the others' 1.3 ms: it arrives 0.35 ms late at each
    assert (v[3].verdict, v[3].arrived_last, v[3].matched_collectives) == ("straggler", 8, 8)
    assert v[3].wait_caused_per_step_ms == pytest.approx(4 * 0.35, abs=0.01)
    assert [v[r].verdict for r in (1, 2)] == ["waits", "waits"] and v[1].waits_for == [3]
    assert v[0].verdict == "slow"                                      # its own 250 ms idle at the end of step 2
    comp = next(f for f in sr.findings if f.subject == "compute")
    assert comp.evidence["arrival"]["last"] == 8 and "arrives last at 8 of 8" in comp.message


def test_cluster4_finding_numbers_say_their_baseline(cluster4):
    """The free finding: 250.05 ms more in 1 of 2 steps is 125.03 ms per step (the impact); the title gives the
    value and its median, not "+328%"."""
    rep = api.issues(cluster4, checks=["slow-rank"])
    free = next(f for f in rep.findings if f.subject == "free")
    # subject "free" (the contract's name) compares idle_ms: the words say what the number is
    assert free.title == "rank 0 is slower in device idle: 326.18 ms against a median of 76.13 ms in step 2"
    assert free.message.startswith("Rank 0 spends 326.18 ms in device idle (free time plus the step's lead-in and "
                                   "tail) in step 2")
    assert free.impact_ms == pytest.approx(125.03, abs=0.01)
    assert "250.05 ms more (slow in 1 of its 2 steps: 125.03 ms per step over all of them, the impact)" \
        in free.message
    assert "%" not in free.title and "%" not in free.message
    comp = next(f for f in rep.findings if f.subject == "compute")
    assert comp.title.endswith("in steps 1 and 2") and "per step over all" not in comp.message
    assert comp.evidence["excess_pct"] == pytest.approx(39.8, abs=0.1)   # over an 18.68 ms median: kept


def test_cluster4_late_arrival_has_a_cause_and_no_percent_column(cluster4):
    from stepdoctor.tools.render import tables_for

    sr = api.slow_ranks(cluster4)
    late = {d.name: d for d in sr.dimensions}["communication"].late_arrivals[0]
    assert late.cause.startswith("it arrives last at collectives: its communication takes 1.40 ms less")
    tables = tables_for(sr)
    assert [t.title.split(":")[0].split(",")[0] for t in tables] == [
        "Dimensions", "Ranks beyond the median", "Ranks by verdict"]
    beyond = tables[1]
    assert "excess_%" not in beyond.header and "median_ms" in beyond.header
    row = next(r for r in beyond.rows if r[0] == "communication")
    assert row[1:6] == [3, "1-2", "3.80", "5.20", "-1.40"] and row[6] == late.cause
    assert all(r[-1] for r in beyond.rows)   # every row says why


def test_gloo_straggler_slow_ranks_names_the_straggler_without_empty_tables():
    """Real H100 run, 2 ranks over gloo: no dimension differs (synchronous steps), the straggler is found by
    arrival; the answer is a table of dimensions with "none" cells and the verdicts, never an empty table."""
    from conftest import SHARED
    from stepdoctor.tools.render import markdown_tables, tables_for

    sr = api.slow_ranks(need(SHARED / "real" / "gpu-h100" / "gloo2_straggler"))
    tables = tables_for(sr)
    assert all(t.rows for t in tables) and not any("no slow rank" in t.note for t in tables)
    dims = tables[0]
    assert [r[-1] for r in dims.rows] == ["none", "none", "none"]
    verdicts = next(t for t in tables if t.title == "Ranks by verdict")
    # arrivals count the kept steps' collectives only (3 per step in steps 4-6), as every other view counts steps
    assert [r[:4] for r in verdicts.rows] == [[0, "waits for 1", "-", "-"], [1, "straggler", "9 of 9", "63.55"]]
    md = "\n".join(markdown_tables(tables))
    assert "no slow rank" not in md and "| 1 | straggler | 9 of 9 | 63.55 |" in md
    # the finding names the kept steps only: step 7 is the partial step the profile drops; it stands on the
    # replay (rank 1 at the median recovers its 50 ms stall), with its arrival record as evidence
    f = next(f for f in sr.findings if f.check == "slow-rank")
    assert f.ranks == [1] and f.steps == [4, 5, 6] and f.evidence["dimension"] == "replay"
    assert f.evidence["arrival"]["last"] == 9


def test_a_fixed_host_stall_on_the_straggler_leads_with_locating_it():
    """gloo2_straggler: rank 1 sleeps 50 ms every step. The stall has the same length in every step, so it is not
    GC: the fix that finds the untraced code on that rank leads, and the message gives the per-step sum."""
    from conftest import SHARED

    rep = api.issues(need(SHARED / "real" / "gpu-h100" / "gloo2_straggler"), checks=["slow-rank"])
    f = next(f for f in rep.findings if f.check == "slow-rank")
    assert f.ranks == [1] and f.fixes[0] == "straggler-host-stall-locate"
    assert not any(x.startswith("gc-") for x in f.fixes)
    # the replay's cause: 50 ms more untraced after its last collective than rank 0, every step
    assert f.evidence["before"]["cause"] == "untraced" and f.evidence["window"] == "tail"
    assert f.evidence["before"]["excess_ms"]["untraced"] == pytest.approx(50.2, abs=1.0)
    assert 44 <= f.impact_ms <= 52   # the step without its 50 ms stall, as the replay predicts it
    per_arrival = f.evidence["arrival"]["before_arrival"]["excess_ms"]["untraced"]
    assert 9 <= per_arrival <= 14
    # 3 arrivals in each of the kept steps 4-6: the finding counts the steps every other view counts (step 7,
    # cut short in the trace, is left out everywhere)
    assert f"{per_arrival * 3:.1f} ms per step over its 9 late arrivals in 3 steps" in f.message
    assert f.steps == [4, 5, 6]


@pytest.fixture
def chance_rule_off(monkeypatch):
    """msinsight's 2-rank job has no straggler: rank 1 is last at 1 of 4 all-reduces, below the half that chance
    gives one of two ranks (test_two_ranks_last_by_chance_are_not_named). The wording tests below need its
    arrival record as a finding, so they switch the chance rule off, and the replay (which speaks first where
    every step replays) too: the arrival finding is what slow-rank says without it."""
    from dataclasses import replace

    from stepdoctor.analysis.checks import slow_rank
    from stepdoctor.analysis.metrics import collectives

    monkeypatch.setattr(slow_rank, "replay_ranks", lambda ctx: None)

    t = collectives.T
    monkeypatch.setattr(collectives, "T", replace(t, straggler_chance_factor=replace(t.straggler_chance_factor,
                                                                                     value=0.0)))
    # answers are kept per opened profile (its data never changes, the thresholds do only here): open anew
    build.forget_opened()
    yield
    build.forget_opened()


@pytest.mark.parametrize("export", ["msinsight-pt-text-l1", "msinsight-pt-db-l1"])
def test_two_ranks_last_by_chance_are_not_named(export):
    """With two ranks one of them is last at every collective; rank 1 last at 1 of 4 is chance, not a straggler
    (it was named at medium before the chance rule)."""
    from conftest import SHARED

    sr = api.slow_ranks(need(SHARED / "real" / "ascend" / export))
    assert not [f for f in sr.findings if f.evidence.get("dimension") == "arrival"]
    assert all(f.severity == "low" for f in api.issues(need(SHARED / "real" / "ascend" / export),
                                                       checks=["slow-rank"]).findings)


def test_arrival_without_a_measurable_cause_says_so(chance_rule_off):
    """msinsight DB Level1 (real Atlas A2, 2 ranks): rank 1 is last at 1 of 4 all-reduces, but its compute
    before the late arrival differs by 0.009 ms: the message must not read "0.0 ms more ... (2.6 vs 2.6 ms)"."""
    from conftest import SHARED

    rep = api.issues(need(SHARED / "real" / "ascend" / "msinsight-pt-db-l1"), checks=["slow-rank"])
    f = next(f for f in rep.findings if f.evidence.get("dimension") == "arrival")
    assert f.evidence["before_arrival"]["excess_ms"]["compute_kernels"] < 0.05
    assert " 0.0 ms" not in f.message and " 0.00 ms" not in f.message
    assert "matches the other ranks'" in f.message


def test_host_ops_listed_in_a_cause_are_never_0_ms(chance_rule_off):
    """msinsight text Level1: the late rank's host ops are listed with their time; none under 0.05 ms."""
    import re

    from conftest import SHARED

    rep = api.issues(need(SHARED / "real" / "ascend" / "msinsight-pt-text-l1"), checks=["slow-rank"])
    f = next(f for f in rep.findings if f.evidence.get("dimension") == "arrival")
    listed = f.message.split("its host ops: ")[1]
    times = [float(x) for x in re.findall(r" (\d+\.\d+) ms", listed)]
    assert times and min(times) >= 0.05
    assert "5.65 ms more than the other ranks on host work (74.9 ms against a median of 69.2 ms)" in f.message


def test_slow_ranks_dimensions_name_the_breakdown_field_they_compare():
    """slow-ranks' "free" is the breakdown's idle_ms (free + lead-in + tail), not its free_ms: the answer says
    so, and its median is the breakdown's idle_ms median (one definition, two views)."""

    from conftest import SHARED
    from stepdoctor.tools import render

    p = need(SHARED / "real" / "ascend" / "msinsight-pt-text-l1")
    sr, bd = api.slow_ranks(p), api.breakdown(p)
    free = next(d for d in sr.dimensions if d.name == "free")
    assert free.measures == "idle_ms"
    per_step = [statistics.median(r.idle_ms for r in bd.rows if r.step == s) for s in sorted({r.step for r in bd.rows})]
    assert free.median_ms == pytest.approx(statistics.mean(per_step), abs=0.01)
    assert free.median_ms != pytest.approx(statistics.median(r.free_ms for r in bd.rows), abs=1.0)
    dims = render.tables_for(sr)[0]
    assert [r[0] for r in dims.rows] == ["compute", "communication (= comm not overlapped)", "free (= idle)"]


def test_slow_rank_on_cluster4_is_its_golden_answer(cluster4):
    assert_golden("slow-rank", "cluster4", api.issues(cluster4, checks=["slow-rank"]).findings)


def test_slow_rank_on_the_generated_late_rank_is_its_golden_answer(tmp_path):
    findings, _ = stragglers(gen.open_store(gen.build(tmp_path, 8, "late", culprit=5, steps=8, late_steps=5)))
    assert_golden("slow-rank", "generated-late-5-of-8", findings)
