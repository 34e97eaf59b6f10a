"""bandwidth-contention: its planted cases (a generated profile with the problem planted, the numbers
re-derived from the tables by a direct query) and the golden answer of one of them."""

from __future__ import annotations

from collections.abc import Callable

from checkrun import Result, assert_golden

MS = 1e6


def test_bandwidth_contention_needs_overlap_and_low_bandwidth(scenario: Callable[..., Result]) -> None:
    f = scenario("bandwidth-contention").one("bandwidth-contention")
    assert (f.subject, f.ranks, f.steps, f.severity) == ("SDMA", [0, 1], [1, 2], "low")
    ev = f.evidence["per_rank"]["0"]
    assert 8.5 < ev["mean_gbps_contended"] < 9.5 < 14.4  # the plant: 9 GB/s
    assert f.evidence["threshold_gbps"] == 14.4 and f.impact_ms > 0


def test_slow_link_alone_is_not_contention(scenario: Callable[..., Result]) -> None:
    # a slow SDMA link with no overlap (the sample's rank 2) belongs to slow-link, not here
    assert scenario("slow-link").of("bandwidth-contention") == []


def test_bandwidth_contention_planted_is_its_golden_answer(scenario: Callable[..., Result]) -> None:
    assert_golden("bandwidth-contention", "planted", scenario("bandwidth-contention").of("bandwidth-contention"))
