"""op-compile: its cases on generated profiles with the problem planted, on the synthetic cluster4 or the
MindSpore guide cases, the rules it is built on, and the golden answer of one case."""

from __future__ import annotations

import pytest
from checkrun import Result, assert_golden, ev

MS = 1e6


def test_cluster4_op_compile(cluster4_host: Result) -> None:
    f = cluster4_host.one("op-compile")       # #9: 25 aclopCompileAndExecute (300 µs) per step
    assert (f.severity, f.subject) == ("high", "AscendCL@aclopCompileAndExecute")
    for r in range(4):
        e = ev(f, r)
        assert e["by_step"] == {"1": {"calls": 25, "ms": 7.5}, "2": {"calls": 25, "ms": 7.5}}
        assert e["compile_ms_per_step"] == pytest.approx(7.5)
    # time-ratio priority: 7.5 ms of a 100 ms step (rank 0 has a 350 ms step 2, so ranks 1-3 weigh most)
    assert (f.impact_ms, f.impact_pct) == (7.5, 7.5)


def test_op_compile_on_cluster4_is_its_golden_answer(cluster4_host: Result) -> None:
    assert_golden("op-compile", "cluster4", cluster4_host.of("op-compile"))
