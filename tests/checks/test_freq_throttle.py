"""freq-throttle: its planted cases (a generated profile with the problem planted, the numbers re-derived from
the tables by a direct query), its cases on the synthetic cluster4 and their golden answer."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from checkrun import Result, assert_golden

from stepdoctor.analysis.checks.freq_throttle import mean_freq
from stepdoctor.evals.generate.problems import Plant

MS = 1e6


def test_freq_throttle_names_only_the_throttled_rank(scenario: Callable[..., Result]) -> None:
    res = scenario("freq-throttle")  # default: the last rank, 1300 MHz of 1800
    f = res.one("freq-throttle")
    assert (f.subject, f.ranks, f.steps, f.severity) == ("AI Core frequency", [1], [1, 2], "high")
    ev = f.evidence["per_rank"]["1"]
    assert (ev["rated_mhz"], ev["mean_mhz_during_kernels"], ev["min_mhz"]) == (1800.0, 1300.0, 1300.0)
    assert ev["mean_drop"] == pytest.approx(500 / 1800, abs=1e-4)
    kernels = res.scalar(
        "SELECT sum(dur_ns) / 2 / 1e6 FROM device_ops WHERE rank = 1 AND task_type IN "
        "('AI_CORE', 'AI_VECTOR_CORE', 'MIX_AIC', 'MIX_AIV')"
    )
    assert f.impact_ms == pytest.approx(kernels * 500 / 1800, abs=1e-3)
    assert f.evidence["ranks_checked"] == [0, 1]


def test_freq_throttle_keeps_steps_apart(scenario: Callable[..., Result]) -> None:
    f = scenario(Plant("freq-throttle", ranks=[0], steps=[2])).one("freq-throttle")
    assert (f.ranks, f.steps) == ([0], [2])
    assert set(f.evidence["per_rank"]["0"]["by_step"]) == {"2"}


def test_cluster4_18_freq_throttle_rank1_only(cluster4_cc: Result) -> None:
    f = cluster4_cc.one("freq-throttle")
    assert (f.ranks, f.steps, f.severity) == ([1], [1, 2], "high")
    assert f.evidence["per_rank"]["1"]["mean_mhz_during_kernels"] == 1300.0
    assert f.evidence["ranks_checked"] == [0, 1, 2, 3]
    assert "rank 1" in f.message and "1300 MHz" in f.message


def test_mean_freq_is_time_weighted() -> None:
    import numpy as np

    ts = np.array([0, 100, 200])
    mhz = np.array([1800.0, 900.0, 1800.0])
    got = mean_freq(ts, mhz, np.array([50, 100, -10, 150]), np.array([150, 100, 10, 250]))
    assert got[0] == pytest.approx(1350.0)  # half at 1800, half at 900
    assert got[1] == 900.0  # empty interval: the value at its start
    assert np.isnan(got[2])  # before the first sample: unknown
    assert got[3] == pytest.approx(1350.0)


def test_freq_throttle_on_cluster4_is_its_golden_answer(cluster4_cc: Result) -> None:
    assert_golden("freq-throttle", "cluster4", cluster4_cc.of("freq-throttle"))
