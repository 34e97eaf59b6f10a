"""exposed-comm-tail: its cases on generated profiles with the problem planted, on the synthetic cluster4 or the
MindSpore guide cases, the rules it is built on, and the golden answer of one case."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from checkrun import Result, assert_golden, ev

from stepdoctor.analysis.thresholds import T

MS = 1e6


def test_cluster4_tail_is_not_on_the_critical_path(cluster4_host: Result) -> None:
    # The 5.2 ms AllReduce block after backward is followed by ~31 ms of device idle: the step waits on the
    # host, not on the collectives, so no exposed-comm-tail (and no host-bound: the gaps follow syncs).
    assert not cluster4_host.of("exposed-comm-tail") and not cluster4_host.of("host-bound")


def test_ascend_exposed_comm_tail(gen: Callable[..., Result]) -> None:
    res = gen("exposed-comm-tail")
    f = res.one("exposed-comm-tail")
    assert (f.ranks, f.steps, f.subject, f.severity) == ([0, 1], [1, 2], "allreduce", "high")
    e = ev(f, f.ranks[0])
    colls = e["collectives"]
    assert len(colls) == 4 and {c["type"] for c in colls} == {"allreduce"}
    assert all(c["size_mb"] == pytest.approx(67.1089, abs=1e-3) for c in colls)
    assert colls[0]["start_after_backward_ms"] == pytest.approx(0.0, abs=0.01)
    # the optimizer waits for the block (no idle after it): the effective tail is the non-overlapped tail,
    # capped by the shortest one of the two ranks (the rank that reaches the collectives last paces them)
    for st in e["by_step"].values():
        assert st["idle_after_ms"] < 0.01
        assert st["effective_ms"] == st["critical_rank_ms"] and st["tail_ms"] - 0.5 < st["effective_ms"] <= st["tail_ms"]
    assert e["tail_pct_of_step"] >= T.exposed_tail_pct.value
    assert e["proposed_bucket_mb"] == pytest.approx(67.1089 / 2, abs=1e-3)   # smaller than every late bucket
    assert "4 allreduce" in f.message


def test_ascend_slow_rank_wait_is_not_a_tail(gen: Callable[..., Result]) -> None:
    # the fast rank waits in the last AllReduce for the slow rank 1, which overlaps it with compute
    res = gen("slow-rank", layers=1)
    assert not res.of("exposed-comm-tail")


def test_kineto_exposed_comm_tail(gen: Callable[..., Result]) -> None:
    res = gen("exposed-comm-tail", vendor="kineto", steps=3)
    f = res.one("exposed-comm-tail")
    assert (f.ranks, f.subject) == ([0, 1], "allreduce")
    colls = ev(f, 0)["collectives"]
    assert colls and all(c["type"] == "allreduce" and c["size_mb"] for c in colls)
    assert not gen("slow-rank", vendor="kineto", steps=3, layers=1).of("exposed-comm-tail")


def test_mindspore_case3_allreduce_tail(ms_case: Callable[..., Result]) -> None:
    res = ms_case("legacy", "comm_tail")
    assert res.checks() == {"exposed-comm-tail"}
    f = res.one("exposed-comm-tail")
    assert (f.ranks, f.steps, f.subject) == (list(range(8)), [1, 2, 3, 4, 5], "allreduce")
    assert f.impact_ms == pytest.approx(6.15, abs=1e-3)
    assert f.impact_pct == pytest.approx(100 * 6.15 / 23.6, abs=0.05)
    assert "6.15 ms" in f.message and "1 allreduce" in f.message


def test_exposed_comm_tail_on_ascend_planted_is_its_golden_answer(gen: Callable[..., Result]) -> None:
    assert_golden("exposed-comm-tail", "ascend-planted", gen("exposed-comm-tail").of("exposed-comm-tail"))
