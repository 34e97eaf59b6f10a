"""sync-stream: its cases on generated profiles with the problem planted, on the synthetic cluster4 or the
MindSpore guide cases, the rules it is built on, and the golden answer of one case."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from checkrun import HOST, Result, analyse, assert_golden, ev, kineto_sync_trace

from stepdoctor.analysis.thresholds import T

MS = 1e6


def test_cluster4_sync_stream(cluster4_host: Result) -> None:
    f = cluster4_host.one("sync-stream")      # #8: Node@launch immediately followed by aclrtSynchronizeStream 96/96
    assert (f.severity, f.subject) == ("high", "AscendCL@aclrtSynchronizeStream")
    for r in range(4):
        e = ev(f, r)
        assert (e["launches"], e["syncs_right_after_launch"], e["co_occurrence_ratio"]) == (96, 96, 1.0)
        assert e["launch_blocking_env"] == {"ASCEND_LAUNCH_BLOCKING": "1"}
    # impact = host time blocked in those syncs (capped by device idle): 38.29 ms / 2 steps on rank 1
    assert ev(f, 1)["blocked_ms_per_step"] == pytest.approx(38.2852 / 2, abs=0.01)
    assert f.impact_ms == pytest.approx(ev(f, 3)["impact_ms_per_step"], abs=1e-3)
    assert "96 of 96" in f.message and "ASCEND_LAUNCH_BLOCKING=1" in f.message


def test_ascend_sync_stream(gen: Callable[..., Result]) -> None:
    res = gen("sync-stream", layers=1)
    f = res.one("sync-stream")
    assert (f.ranks, f.steps, f.severity) == ([0, 1], [1, 2], "high")
    e = ev(f, 0)
    assert e["co_occurrence_ratio"] == 1.0 and e["launches"] == e["syncs_right_after_launch"] > 0
    # the gaps behind the host's own syncs are sync-stream's, not host-bound's
    assert not res.of("host-bound")


def test_kineto_sync_stream(gen: Callable[..., Result]) -> None:
    res = gen("sync-stream", vendor="kineto", steps=3)
    f = res.one("sync-stream")
    assert (f.ranks, f.steps, f.subject) == ([0, 1], [1, 2], "cudaStreamSynchronize")
    e = ev(f, 0)
    assert e["blocked_ms_per_step"] >= T.sync_call_ms.value
    assert e["impact_ms_per_step"] <= e["blocked_ms_per_step"]
    # GPU: the impact rule, not the advisor's fixed priority; a sync after every launch (many per step) is at
    # least medium
    by_share = "high" if f.impact_pct >= 5 else "medium" if f.impact_pct >= 3 else "low"
    many = e["syncs_leaving_device_idle_per_step"] >= T.sync_idle_count.value
    assert f.severity == (by_share if by_share != "low" or not many else "medium")
    assert not res.of("host-bound")


def test_idle_after_a_sync() -> None:
    from stepdoctor.analysis.metrics.idle import idle_after

    s = np.array([0, 100, 300], dtype=np.int64)
    e = np.array([50, 200, 400], dtype=np.int64)
    got = idle_after(s, e, np.array([60, 150, 250, 450]), np.array([1000, 1000, 280, 1000]))
    # idle to the next start; busy at 150 costs nothing; clipped to the limit; after the last op: to the limit
    assert got.tolist() == [40, 0, 30, 550]


def test_sync_stream_counts_idle_after_syncs_with_their_trigger(tmp_path: Path) -> None:
    res = analyse(kineto_sync_trace(tmp_path / "many", busy=False), tmp_path / "cache", HOST)
    f = res.one("sync-stream")
    e = ev(f, 0)
    assert f.subject == "cudaStreamSynchronize" and e["syncs_leaving_device_idle_per_step"] == 8
    # 8 syncs x (200 µs host work + 10 µs launch latency) of device idle per step
    assert f.impact_ms == pytest.approx(8 * 0.210, abs=0.02)
    top = e["triggers"][0]
    assert (top["trigger"], top["outer_trigger"]) == ("aten::_local_scalar_dense", "aten::is_nonzero")
    assert top["source"] == "train.py(42): forward" and top["calls"] == 8 * len(res.ctx.steps_of(0))
    assert "aten::is_nonzero" in f.message and "train.py(42)" in f.message
    assert "cuda-launch-blocking-off" not in f.fixes                      # nothing set CUDA_LAUNCH_BLOCKING
    assert f.severity != "low"          # 8 per step: a per-layer sync pattern, at least medium


def test_sync_waiting_for_a_busy_device_costs_nothing(tmp_path: Path) -> None:
    res = analyse(kineto_sync_trace(tmp_path / "busy", busy=True), tmp_path / "cache", HOST)
    # loss.item() blocks ~5 ms per step, but the device was busy all that time: no finding
    assert res.scalar("SELECT max(dur_ns) FROM host_ops WHERE name = 'cudaStreamSynchronize'") > 4.9 * MS
    assert not res.of("sync-stream")


def test_sync_stream_on_cluster4_is_its_golden_answer(cluster4_host: Result) -> None:
    assert_golden("sync-stream", "cluster4", cluster4_host.of("sync-stream"))
