"""sync-batchnorm: its cases on generated profiles with the problem planted, on the synthetic cluster4 or the
MindSpore guide cases, the rules it is built on, and the golden answer of one case."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from checkrun import HOST, Result, analyse, assert_golden, ev

MS = 1e6


def _kineto_syncbn_trace(path: Path, calls: int) -> Path:
    """A minimal CUDA Kineto trace: 3 steps, `calls` nn.Module SyncBatchNorm ops per step, each wrapping the
    aten::batch_norm_gather_stats_with_counts op and an NCCL all_gather launched from it."""
    ev: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}},
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0, "args": {"name": "GPU 0"}},
    ]
    t, corr = 1000.0, 1
    for step in (1, 2, 3):
        t0 = t
        for _ in range(calls):
            ev += [
                {"ph": "X", "cat": "python_function", "name": "nn.Module: SyncBatchNorm_0", "pid": 1, "tid": 1,
                 "ts": t, "dur": 80.0},
                {"ph": "X", "cat": "cpu_op", "name": "aten::batch_norm_gather_stats_with_counts", "pid": 1,
                 "tid": 1, "ts": t + 5, "dur": 60.0, "args": {"External id": corr}},
                {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": t + 10,
                 "dur": 5.0, "args": {"correlation": corr, "External id": corr}},
                {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllGather_RING_LL", "pid": 0, "tid": 7,
                 "ts": t + 20, "dur": 40.0, "args": {"correlation": corr, "stream": 7, "device": 0}},
            ]
            t += 100.0
            corr += 1
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                   "ts": t0 - 1, "dur": t - t0 + 2})
        t += 10.0
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-40GB", "numSms": 108}],
           "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 2}, "traceEvents": ev}
    path.mkdir(parents=True, exist_ok=True)
    (path / "rank0.pt.trace.json").write_text(json.dumps(doc))
    return path


def test_cluster4_sync_batchnorm(cluster4_host: Result) -> None:
    f = cluster4_host.one("sync-batchnorm")   # #10: 25 SyncBatchNorm per step
    assert (f.severity, f.subject) == ("high", "SyncBatchNorm")
    for r in range(4):
        assert ev(f, r)["by_step"] == {"1": 25, "2": 25}
    assert f.impact_ms == pytest.approx(25 * 0.030)   # 30 µs each, no collective launched from them
    assert "25 times per step" in f.message


def test_kineto_sync_batchnorm_counts_nested_markers_once(tmp_path: Path) -> None:
    res = analyse(_kineto_syncbn_trace(tmp_path / "bn", 25), tmp_path / "cache", HOST)
    f = res.one("sync-batchnorm")
    e = ev(f, 0)
    assert (f.ranks, f.severity, e["calls_per_affected_step"]) == ([0], "high", 25)   # not 50 (nested markers)
    assert e["host_ms_per_step"] == pytest.approx(25 * 0.080)
    assert e["collective_ms_per_step"] == pytest.approx(25 * 0.040)      # the all_gathers launched inside
    few = analyse(_kineto_syncbn_trace(tmp_path / "few", 19), tmp_path / "cache", HOST)
    assert not few.of("sync-batchnorm")                                  # 19 < 20


def test_sync_batchnorm_on_cluster4_is_its_golden_answer(cluster4_host: Result) -> None:
    assert_golden("sync-batchnorm", "cluster4", cluster4_host.of("sync-batchnorm"))
