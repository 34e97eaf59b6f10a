"""small-packet: its planted cases (a generated profile with the problem planted, the numbers re-derived from
the tables by a direct query), its cases on the synthetic cluster4 and their golden answer."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from checkrun import Result, assert_golden

MS = 1e6


def test_small_packet_ascend_sdma(scenario: Callable[..., Result]) -> None:
    res = scenario("small-packet")
    f = res.one("small-packet")
    assert (f.subject, f.ranks, f.steps, f.severity) == ("SDMA", [0, 1], [1, 2], "low")
    ev = f.evidence["per_rank"]["0"]
    assert ev["small_ratio"] == 1.0 and ev["median_small_size_mb"] < 16
    assert f.evidence["threshold_bytes"] == 16e6 and f.evidence["threshold_ratio"] == 0.2
    small = [
        res.scalar(
            "SELECT sum(transit_ns) / 2 / 1e6 FROM comm_bandwidth WHERE rank = ? AND transport = 'SDMA' "
            "AND size_bytes > 0 AND size_bytes < 16e6",
            [r],
        )
        for r in (0, 1)
    ]
    assert f.impact_ms == pytest.approx(max(small), abs=1e-3)


def test_small_packet_kineto_nccl(scenario: Callable[..., Result]) -> None:
    res = scenario("small-packet", vendor="kineto", steps=3)
    f = res.one("small-packet")
    assert (f.subject, f.ranks, f.severity) == ("NCCL", [0, 1], "low")
    assert f.steps == [1, 2]  # step 3 is the partial last step Kineto keeps out
    assert f.evidence["per_rank"]["0"]["median_small_size_mib"] == 1.0


def test_cluster4_20_small_sdma_packets(cluster4_cc: Result) -> None:
    f = cluster4_cc.one("small-packet")
    assert (f.subject, f.ranks, f.severity) == ("SDMA", [0, 1, 2, 3], "low")
    assert f.evidence["per_rank"]["1"] | {"by_step": None} == {
        "ops": 8,
        "small_ops": 8,
        "small_ratio": 1.0,
        "median_small_size_mb": 3.0003,
        "small_ms_per_step": 0.72,
        "steps": [1, 2],
        "by_step": None,
    }
    assert f.impact_ms == pytest.approx(1.8)  # rank 2's slow link: 4 x 0.45 ms per step


def test_small_packet_on_cluster4_is_its_golden_answer(cluster4_cc: Result) -> None:
    assert_golden("small-packet", "cluster4", cluster4_cc.of("small-packet"))
