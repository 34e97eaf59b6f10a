"""dynamic-shape: its planted cases (a generated profile with the problem planted, the numbers
re-derived from the tables by a direct query) and the golden answer of one of them."""

from __future__ import annotations

from collections.abc import Callable

from checkrun import Result, assert_golden

MS = 1e6


def test_dynamic_shape_fires_only_when_every_op_is_dynamic(scenario: Callable[..., Result]) -> None:
    f = scenario("dynamic-shape").one("dynamic-shape")
    assert (f.ranks, f.steps, f.severity, f.impact_ms) == ([0, 1], [1, 2], "low", None)
    counts = f.evidence["ops_by_rank_step"]
    assert set(counts) == {"0:1", "0:2", "1:1", "1:2"}
    assert all(c["static"] == 0 and c["dynamic"] > 0 for c in counts.values())


def test_dynamic_shape_not_applicable_without_op_state_column(scenario: Callable[..., Result]) -> None:
    # older CANN: no `OP State` column; the advisor reports "all operators dynamic" here (rules doc §9 bug 1)
    res = scenario("block-dim-underuse", drop_op_state=True)
    assert res.of("dynamic-shape") == []
    assert res.run.not_applicable["dynamic-shape"] == "needs op_state"
    # and, unlike the advisor, block dim is still checked
    assert res.one("block-dim-underuse", "MatMulV2").evidence["core_count"] == 24


def test_dynamic_shape_planted_is_its_golden_answer(scenario: Callable[..., Result]) -> None:
    assert_golden("dynamic-shape", "planted", scenario("dynamic-shape").of("dynamic-shape"))
