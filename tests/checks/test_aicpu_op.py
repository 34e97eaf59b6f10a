"""aicpu-op: its planted cases (a generated profile with the problem planted, the numbers re-derived from
the tables by a direct query), its cases on the synthetic cluster4 and their golden answer."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from checkrun import Result, analyse, assert_golden

from stepdoctor.analysis.thresholds import T
from stepdoctor.evals.generate import mindspore

MS = 1e6


def test_aicpu_op_fires_with_double_and_ai_cpu_time(scenario: Callable[..., Result]) -> None:
    res = scenario("aicpu-op")
    f = res.one("aicpu-op")
    assert (f.subject, f.ranks, f.steps) == ("IndexPut", [0, 1], [1, 2])
    assert f.evidence["double_inputs"] is True and f.evidence["threshold_task_us"] == 20.0
    # impact = Σ AI_CPU time per step of the worst rank, re-derived from the table
    per_rank = [
        res.scalar(
            "SELECT sum(dur_ns) / 2 / 1e6 FROM device_ops WHERE task_type = 'AI_CPU' AND rank = ?", [r]
        )
        for r in (0, 1)
    ]
    assert f.impact_ms == pytest.approx(max(per_rank), abs=1e-3)
    assert 1.1 < f.impact_ms < 1.3  # 3 layers x 1 IndexPut of ~400 µs
    assert f.evidence["per_rank"]["0"]["tasks_per_step"] == 3
    assert f.severity == "low" and f.impact_pct < T.priority_medium_pct.value  # the impact rule
    assert "rank" in f.message and "DOUBLE" in f.message


def test_cluster4_14_aicpu_indexput_double(cluster4_cc: Result) -> None:
    f = cluster4_cc.one("aicpu-op")
    assert (f.subject, f.ranks, f.steps, f.severity) == ("IndexPut", [0, 1, 2, 3], [1, 2], "medium")
    assert f.evidence["double_inputs"] and "DOUBLE" in f.evidence["dtypes"]
    assert f.impact_ms == pytest.approx(4.472, abs=0.01)  # rank 3 (compute x 1.4): 8 x ~559 µs per step
    assert f.evidence["per_rank"]["3"]["tasks_per_step"] == 8


def test_sink_mode_getnext_is_not_an_aicpu_op(tmp_path: Path) -> None:
    # MindSpore dataset sink mode: the device waits for data in GetNext AI CPU tasks (slow-dataloader's
    # business); they must not be reported as operators to move to the AI Core
    res = analyse(mindspore.db_profile(tmp_path / "p", case="slow_dataloader", n_steps=3), tmp_path / "c")
    assert res.scalar("SELECT sum(dur_ns) / 1e6 FROM device_ops WHERE op_type = 'GetNext'") > 200
    assert res.of("aicpu-op") == []
    assert "aicpu-op" not in res.run.not_applicable


def test_aicpu_op_on_cluster4_is_its_golden_answer(cluster4_cc: Result) -> None:
    assert_golden("aicpu-op", "cluster4", cluster4_cc.of("aicpu-op"))
