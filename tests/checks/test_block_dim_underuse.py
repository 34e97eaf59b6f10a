"""block-dim-underuse: its planted cases (a generated profile with the problem planted, the numbers re-derived from
the tables by a direct query), its cases on the synthetic cluster4 and their golden answer."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from checkrun import Result, assert_golden

from stepdoctor.analysis.checks.block_dim_underuse import unused_share

MS = 1e6


def test_block_dim_underuse_numbers(scenario: Callable[..., Result]) -> None:
    res = scenario("block-dim-underuse")
    mm = res.one("block-dim-underuse", "MatMulV2")
    assert (mm.ranks, mm.steps, mm.severity) == ([0, 1], [1, 2], "low")
    assert mm.evidence["block_dims"][0] | {"tasks": 0} == {
        "task_type": "AI_CORE",
        "block_dim": 20,
        "cores": 24,
        "tasks": 0,
        "idle_share": round(1 / 6, 4),
    }
    per_rank = [
        res.scalar(
            "SELECT sum(dur_ns) / 2 / 1e6 FROM device_ops WHERE op_type = 'MatMulV2' AND rank = ?", [r]
        )
        / 6
        for r in (0, 1)
    ]
    assert mm.impact_ms == pytest.approx(max(per_rank), abs=1e-3)
    vec = [f for f in res.of("block-dim-underuse") if f.evidence["task_type"] == "AI_VECTOR_CORE"]
    assert vec and all(
        f.evidence["block_dims"][0]["block_dim"] == 40 and f.evidence["core_count"] == 48 for f in vec
    )
    # the clean MIX_AIC flash attention (block dim 24 on 24 cube cores) is not underuse
    assert not any(f.subject.startswith("FlashAttention") for f in res.of("block-dim-underuse"))


def test_block_dim_reads_block_num_header(scenario: Callable[..., Result]) -> None:
    # newer torch_npu writes `Block Num`: the advisor silently skips the check (rules doc §9 bug 2)
    f = scenario("block-dim-underuse", block_num_header=True).one("block-dim-underuse", "MatMulV2")
    assert f.evidence["block_dims"][0]["block_dim"] == 20


def test_cluster4_15_block_dim(cluster4_cc: Result) -> None:
    fs = {f.subject: f for f in cluster4_cc.of("block-dim-underuse")}
    assert set(fs) == {"MatMulV2", "Add"}
    assert (
        fs["MatMulV2"].evidence["block_dims"][0]["block_dim"] == 20
        and fs["MatMulV2"].evidence["core_count"] == 24
    )
    assert fs["Add"].evidence["block_dims"][0]["block_dim"] == 40 and fs["Add"].evidence["core_count"] == 48
    assert all(f.ranks == [0, 1, 2, 3] and f.severity == "low" for f in fs.values())


def test_unused_share() -> None:
    assert unused_share(20, 24) == pytest.approx(1 / 6)
    assert unused_share(30, 24) == pytest.approx(1 - 30 / 48)  # second wave runs 6 of 24 cores
    assert unused_share(48, 24) == 0.0


def test_block_dim_underuse_on_cluster4_is_its_golden_answer(cluster4_cc: Result) -> None:
    assert_golden("block-dim-underuse", "cluster4", cluster4_cc.of("block-dim-underuse"))
