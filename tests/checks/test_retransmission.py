"""retransmission: its planted cases (a generated profile with the problem planted, the numbers
re-derived from the tables by a direct query) and the golden answer of one of them."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from checkrun import Result, assert_golden

MS = 1e6


def test_retransmission_names_rank_and_step(scenario: Callable[..., Result]) -> None:
    res = scenario("retransmission")  # default: last rank, first step, 4200 ms RDMA transit
    f = res.one("retransmission")
    assert (f.subject, f.ranks, f.steps, f.severity) == ("RDMA", [1], [1], "high")
    inst = f.evidence["instances"][0]
    assert inst["rdma_transit_ms"] == {"1": pytest.approx(4200, abs=1)} and inst["min_elapse_ms"] >= 4000
    assert f.impact_ms == pytest.approx(inst["min_elapse_ms"] / 2, abs=1e-3)


def test_retransmission_planted_is_its_golden_answer(scenario: Callable[..., Result]) -> None:
    assert_golden("retransmission", "planted", scenario("retransmission").of("retransmission"))
