"""host-bound: its cases on generated profiles with the problem planted, on the synthetic cluster4 or the
MindSpore guide cases, the rules it is built on, and the golden answer of one case."""

from __future__ import annotations

from collections.abc import Callable

from checkrun import Result, assert_golden, ev

from stepdoctor.analysis.thresholds import T

MS = 1e6


def test_ascend_host_bound(gen: Callable[..., Result]) -> None:
    res = gen("host-bound", layers=1)
    f = res.one("host-bound")
    assert (f.ranks, f.steps, f.subject) == ([0, 1], [1, 2], "launch")
    for r in (0, 1):
        e = ev(f, r)
        assert e["free_pct"] >= T.host_bound_free_pct.value
        assert e["late_launch_share_pct"] >= T.host_bound_late_launch_pct.value
        assert e["many_tiny_kernels"] and e["median_kernel_us"] < e["median_launch_interval_us"]
    assert f.impact_ms in [v["late_launch_idle_ms_per_step"] for v in f.evidence["per_rank"].values()]
    assert f.severity == "high" and "late host launch" in f.message


def test_kineto_host_bound(gen: Callable[..., Result]) -> None:
    res = gen("host-bound", vendor="kineto", steps=3)
    f = res.one("host-bound")
    assert f.ranks == [0, 1] and f.steps == [1, 2]
    e = ev(f, 0)
    assert e["late_launch_share_pct"] >= 90 and e["many_tiny_kernels"]


def test_host_bound_on_ascend_planted_is_its_golden_answer(gen: Callable[..., Result]) -> None:
    assert_golden("host-bound", "ascend-planted", gen("host-bound", layers=1).of("host-bound"))
