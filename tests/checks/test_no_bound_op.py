"""no-bound-op: its planted cases (a generated profile with the problem planted, the numbers re-derived from
the tables by a direct query), its cases on the synthetic cluster4 and their golden answer."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from checkrun import Result, assert_golden

from stepdoctor.analysis.thresholds import T

MS = 1e6


def test_no_bound_op_numbers(scenario: Callable[..., Result]) -> None:
    res = scenario("no-bound-op")
    f = res.one("no-bound-op", "MatMulV2")
    assert (f.ranks, f.steps, f.severity) == ([0, 1], [1, 2], "low")
    top = f.evidence["pipe_ratios_time_weighted"][f.evidence["busiest_pipe"]]
    assert top <= 0.6 + 1e-6 < T.no_bound_ratio.value
    # impact = Σ dur × (1 − busiest ratio / 0.8), per step, worst rank
    q = (
        "SELECT sum(dur_ns * (1 - greatest(coalesce(aic_mac_ratio, 0), coalesce(aic_scalar_ratio, 0), "
        "coalesce(aic_mte1_ratio, 0), coalesce(aic_mte2_ratio, 0), coalesce(aic_fixpipe_ratio, 0), "
        "coalesce(aiv_vec_ratio, 0), coalesce(aiv_scalar_ratio, 0), coalesce(aiv_mte2_ratio, 0), "
        "coalesce(aiv_mte3_ratio, 0)) / 0.8)) / 2 / 1e6 FROM device_ops "
        "WHERE op_type = 'MatMulV2' AND rank = ?"
    )
    assert f.impact_ms == pytest.approx(max(res.scalar(q, [r]) for r in (0, 1)), abs=1e-3)
    # AI CPU / communication tasks have no AI Core pipes and are never judged
    assert all(
        f.evidence["task_type"] in ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV")
        for f in res.of("no-bound-op")
    )


def test_cluster4_16_no_bound(cluster4_cc: Result) -> None:
    fs = {f.subject: f for f in cluster4_cc.of("no-bound-op")}
    assert set(fs) == {"MatMulV2", "FlashAttentionScore", "Add", "Gelu", "Cast"}  # not the AI CPU IndexPut
    assert fs["MatMulV2"].evidence["busiest_pipe"] == "aic_mte2_ratio"
    assert fs["MatMulV2"].evidence["pipe_ratios_time_weighted"]["aic_mte2_ratio"] == pytest.approx(0.55)


def test_no_bound_op_on_cluster4_is_its_golden_answer(cluster4_cc: Result) -> None:
    assert_golden("no-bound-op", "cluster4", cluster4_cc.of("no-bound-op"))
