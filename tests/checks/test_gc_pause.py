"""gc-pause: its cases on generated profiles with the problem planted, on the synthetic cluster4 or the
MindSpore guide cases, the rules it is built on, and the golden answer of one case."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from checkrun import HOST, Result, analyse, assert_golden, ev, kineto_sync_trace

from conftest import CLUSTER4, need
from stepdoctor.analysis.thresholds import T

MS = 1e6


def test_cluster4_gc(cluster4_host: Result) -> None:
    f = cluster4_host.one("gc-pause")         # #12: 3 x 1.5 ms GC per step
    assert (f.severity, f.subject) == ("medium", "GC")
    for r in range(4):
        e = ev(f, r)
        assert (e["events_per_affected_step"], e["max_event_ms"], e["gc_ms_per_step"]) == (3, 1.5, 4.5)
    assert f.impact_ms == pytest.approx(4.5)


def test_cluster4_conjectured_gc_without_gc_events(tmp_path: Path) -> None:
    # rules doc §8.4: msprof-analyze reports "Conjectured Gc (280,856 µs free with no host activity)" on rank 0
    # once its GC events are removed; the same gap is found here when GC recording is also off
    src = sorted(need(CLUSTER4).glob("*_ascend_pt"))[0]
    dst = tmp_path / "p" / src.name
    shutil.copytree(src, dst)
    trace = dst / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    trace.write_text(json.dumps([e for e in json.loads(trace.read_text()) if str(e.get("cat", "")).lower() != "gc"]))
    info_path = dst / "profiler_info_0.json"
    info = json.loads(info_path.read_text())
    info["config"]["experimental_config"].pop("_gc_detect_threshold")
    info_path.write_text(json.dumps(info))
    res = analyse(tmp_path / "p", tmp_path / "cache", HOST)
    f = res.one("gc-pause")
    assert (f.subject, f.ranks, f.steps, f.severity) == ("conjectured GC", [0], [2], "medium")
    gap = ev(f, 0)["top_gaps"][0]
    assert (gap["gap_ms"], gap["acl_calls"], gap["acl_time_ratio"]) == (280.856, 0, 0.0)
    assert f.impact_ms == pytest.approx(280.856 / 2, abs=1e-3)      # one such gap in two steps
    assert f.evidence["threshold_free_ms"] == T.conjectured_gc_free_ms.value


def test_gc_conjecture_skips_waits_in_a_collective(tmp_path: Path) -> None:
    res = analyse(kineto_sync_trace(tmp_path / "coll", busy=True, collective=True), tmp_path / "cache", HOST)
    assert not res.of("gc-pause")       # 30 ms silences, but gloo:all_reduce is open: a wait for peers
    plain = analyse(kineto_sync_trace(tmp_path / "plain", busy=True, collective=True, wait="my_region"),
                     tmp_path / "cache", HOST)
    f = plain.one("gc-pause")           # the same silences under a plain annotation: GC or untraced work
    assert f.subject == "conjectured GC" and ev(f, 0)["max_gap_ms"] >= 30
    assert "untraced" in f.title and "torch_npu" not in f.message


def test_gc_fixed_stall_rule() -> None:
    """A silence of the same length in every kept step (>= 3) is a fixed stall (a timed sleep), not GC; lengths
    that vary (CPython's collections) or a step without the silence keep the GC conjecture."""
    from stepdoctor.analysis.checks.gc_pause import fixed_stall_of

    def gaps(ms: list[float]) -> list[dict[str, Any]]:
        return [{"step": i, "gap_ms": m, "device_idle_ns": int(m * 1e6)} for i, m in enumerate(ms)]

    sleep = gaps([50.211, 50.197, 50.186])
    fixed = fixed_stall_of(sleep, 3)
    assert fixed is not None and fixed["median_ms"] == 50.197 and fixed["spread"] == pytest.approx(0.0005, abs=1e-5)
    assert all(g["fixed"] for g in sleep)
    assert fixed_stall_of(gaps([372.8, 341.9, 51.3]), 3) is None          # gc_pause's real pauses
    assert fixed_stall_of(gaps([50.2, 50.2]), 2) is None                   # too few steps to call it fixed
    assert fixed_stall_of(gaps([50.2, 50.2, 50.2]), 4) is None             # one kept step without the silence
    spread = T.conjectured_gc_fixed_stall_spread.value
    assert fixed_stall_of(gaps([100.0, 100.0 * (1 + spread) + 0.1, 100.0]), 3) is None


def test_gc_pause_on_cluster4_is_its_golden_answer(cluster4_host: Result) -> None:
    assert_golden("gc-pause", "cluster4", cluster4_host.of("gc-pause"))
