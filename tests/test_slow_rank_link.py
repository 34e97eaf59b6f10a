"""slow-rank and slow-link on real data: the rank, the step and the cause are named."""

from __future__ import annotations

import pytest

from conftest import CLUSTER4, KINETO, need
from stepdoctor.analysis import build
from stepdoctor.tools import api


@pytest.fixture(scope="module")
def cluster4():
    return api.load(need(CLUSTER4))


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


def test_cluster4_slow_link_names_rank2(cluster4):
    sl = api.slow_links(cluster4)
    assert sl.links[0].src == 2 or sl.links[0].dst == 2
    assert sl.links[0].bandwidth_gbps < 0.8 * sl.links[0].median_gbps
    assert [f.ranks for f in sl.findings] == [[2]]
    f = sl.findings[0]
    assert f.evidence["links"] and all(2 in (lk["src"], lk["dst"]) for lk in f.evidence["links"])


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


# ---------------------------------------------------------------------------------------------------------
# Numbers that explain themselves (absolute ms with their baseline; no % over a small base; no empty table)
# ---------------------------------------------------------------------------------------------------------


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


def test_no_empty_table_is_printed(tmp_path):
    """gloo2_straggler has no link-level data and no environment: one line each says so, no header over no
    rows (issue 24: empty tables with "no slow rank" under them)."""
    import os
    import subprocess
    import sys

    from conftest import SHARED

    prof = str(need(SHARED / "real" / "gpu-h100" / "gloo2_straggler"))
    env = {**os.environ, "STEPDOCTOR_CACHE_DIR": str(tmp_path)}
    outs = {cmd: subprocess.run([sys.executable, "-m", "stepdoctor", cmd, prof], capture_output=True,
                                text=True, env=env, timeout=300).stdout for cmd in ("slow-links", "env")}
    assert "┏" not in outs["slow-links"] and "┏" not in outs["env"]
    assert "no link-level communication data in this" in outs["slow-links"]
    assert "0 finding(s): no check fired" in outs["slow-links"]
    assert "Environment audit: no environment variables recorded" in outs["env"]


def test_slow_ranks_dimensions_name_the_breakdown_field_they_compare():
    """slow-ranks' "free" is the breakdown's idle_ms (free + lead-in + tail), not its free_ms: the answer says
    so, and its median is the breakdown's idle_ms median (one definition, two views)."""
    import statistics

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
