"""memory-ops: its cases on generated profiles with the problem planted, on the synthetic cluster4 or the
MindSpore guide cases, the rules it is built on, and the golden answer of one case."""

from __future__ import annotations

from checkrun import Result, assert_golden, ev

MS = 1e6


def test_cluster4_memory_ops(cluster4_host: Result) -> None:
    f = cluster4_host.one("memory-ops")       # #13: aclMallocMemInner 6 x 2.5 ms per step
    assert (f.severity, f.subject) == ("high", "AscendCL@aclMallocMemInner")
    for r in range(4):
        e = ev(f, r)
        assert (e["calls_per_affected_step"], e["ms_per_step"], e["mean_call_ms"]) == (6, 15.0, 2.5)
    assert f.impact_pct == 15.0


def test_memory_ops_on_cluster4_is_its_golden_answer(cluster4_host: Result) -> None:
    assert_golden("memory-ops", "cluster4", cluster4_host.of("memory-ops"))
