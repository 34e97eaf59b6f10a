"""slow-rank and slow-link on real data: the rank, the step and the cause are named."""

from __future__ import annotations

import pytest

from conftest import CLUSTER4, KINETO, need
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
