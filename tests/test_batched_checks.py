"""The checks that read event rows a batch of ranks at a time (`rank_batches`: fp32-compute, gc-pause,
memory-ops, exposed-comm-tail, sync-stream, host-bound): with one rank per batch they give exactly the findings
and warnings of the default batch (all ranks of these profiles in one), on real multi-rank profiles where each
check fires."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from conftest import CLUSTER4, SHARED, need
from stepdoctor.analysis.checks import gc_pause
from stepdoctor.analysis.checks._common import rank_batches
from stepdoctor.analysis.metrics import breakdown
from stepdoctor.analysis.thresholds import T
from stepdoctor.tools import api

ASCEND = SHARED / "real" / "ascend"
H100 = SHARED / "real" / "gpu-h100"


def _run(path: Path, check: str) -> tuple[list[dict], list[str]]:
    ctx = api.context(api.load(path))
    run = api.run_checks(ctx, only=[check])
    return [f.model_dump() for f in run.findings], run.warnings


def _same_in_batches_of_one(monkeypatch: pytest.MonkeyPatch, path: Path, check: str, table: str,
                            warnings: list[str] | None = None) -> list[dict]:
    """The check's findings with the default batch, after asserting that one rank per batch gives the same
    findings and warnings (`warnings`: filled with them)."""
    default = _run(path, check)
    monkeypatch.setattr(breakdown, "BATCH_OPS", 1)
    ctx = api.context(api.load(path))
    ranks = list(ctx.all_ranks)
    assert len(ranks) > 1 and rank_batches(ctx, ranks, table) == [[r] for r in ranks]
    assert _run(path, check) == default
    if warnings is not None:
        warnings.extend(default[1])
    return default[0]


@pytest.mark.parametrize(("name", "share", "impact"), [("msinsight-pt-db-l1", 96, 1.44),
                                                       ("msinsight-pt-text-l1", 100, 1.419)])
def test_fp32_compute_batches_of_one_rank(monkeypatch: pytest.MonkeyPatch, name: str, share: int,
                                          impact: float) -> None:
    fs = _same_in_batches_of_one(monkeypatch, need(ASCEND / name), "fp32-compute", "device_ops")
    assert len(fs) == 1 and fs[0]["ranks"] == [0, 1] and fs[0]["subject"] == "MatMulV2"
    assert fs[0]["title"].startswith(f"{share} % of matmul/conv/attention time runs in float32")
    assert fs[0]["impact_ms"] == pytest.approx(impact, abs=1e-3)
    assert sorted(fs[0]["evidence"]["per_rank"]) == ["0", "1"]


def test_gc_pause_recorded_batches_of_one_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    fs = _same_in_batches_of_one(monkeypatch, need(CLUSTER4), "gc-pause", "host_ops")
    assert len(fs) == 1 and fs[0]["subject"] == "GC" and fs[0]["ranks"] == [0, 1, 2, 3]
    assert fs[0]["impact_ms"] == pytest.approx(4.5, abs=1e-3)


def test_gc_pause_gpu_host_silences_batches_of_one_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU conjecture reads every host op of each rank: rank 1 of the 2-rank gloo run sleeps 50 ms per step
    (a fixed stall, a warning); with 0.05 ms silences both ranks have conjectured gaps."""
    path = need(H100 / "gloo2_straggler")
    warnings: list[str] = []
    assert _same_in_batches_of_one(monkeypatch, path, "gc-pause", "host_ops", warnings) == []
    assert len(warnings) == 1 and warnings[0].startswith("rank 1: the host stops 50.2 ms in every step")
    monkeypatch.undo()
    monkeypatch.setattr(gc_pause, "GPU_SILENCE_MS", 0.05)
    monkeypatch.setattr(gc_pause, "GPU_SILENCE_DEVICE_IDLE", 0.0)
    fs = _same_in_batches_of_one(monkeypatch, path, "gc-pause", "host_ops")
    assert len(fs) == 1 and fs[0]["subject"] == "conjectured GC" and fs[0]["ranks"] == [0, 1]
    assert {r: v["gaps"] for r, v in fs[0]["evidence"]["per_rank"].items()} == {"0": 82, "1": 69}
    assert fs[0]["impact_ms"] == pytest.approx(3.026, abs=1e-3)


def test_gc_pause_ascend_acl_gaps_batches_of_one_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """The Ascend conjecture reads each rank's AscendCL calls; with the gap and call thresholds out of the way
    every device-idle gap of both ranks counts."""
    loose = {"conjectured_gc_free_ms": 0.001, "conjectured_gc_acl_time_ratio": 1.1,
             "conjectured_gc_acl_count_per_us": 1e9}
    monkeypatch.setattr(gc_pause, "T", dataclasses.replace(T, **{k: dataclasses.replace(getattr(T, k), value=v)
                                                              for k, v in loose.items()}))
    fs = _same_in_batches_of_one(monkeypatch, need(ASCEND / "msinsight-pt-db-l0"), "gc-pause", "host_ops")
    assert len(fs) == 1 and fs[0]["subject"] == "conjectured GC" and fs[0]["ranks"] == [0, 1]
    assert {r: v["gaps"] for r, v in fs[0]["evidence"]["per_rank"].items()} == {"0": 88, "1": 89}
    assert fs[0]["impact_ms"] == pytest.approx(30.506, abs=1e-3)


def test_memory_ops_batches_of_one_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    fs = _same_in_batches_of_one(monkeypatch, need(CLUSTER4), "memory-ops", "host_ops")
    assert len(fs) == 1 and fs[0]["subject"] == "AscendCL@aclMallocMemInner" and fs[0]["ranks"] == [0, 1, 2, 3]
    assert fs[0]["title"] == "aclMallocMemInner inside steps (6 calls, 15.0 ms per step)"
    assert fs[0]["impact_ms"] == pytest.approx(15.0, abs=1e-3)


def test_exposed_comm_tail_batches_of_one_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    path = need(ASCEND / "msinsight-pt-db-l0")
    fs = _same_in_batches_of_one(monkeypatch, path, "exposed-comm-tail", "device_ops")
    assert len(fs) == 1 and fs[0]["ranks"] == [0, 1]
    assert fs[0]["impact_ms"] == pytest.approx(9.949, abs=1e-3)
    assert fs[0]["evidence"]["per_rank"]["0"]["collectives"]   # the block's collectives are kept per step


def test_sync_stream_batches_of_one_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    fs = _same_in_batches_of_one(monkeypatch, need(CLUSTER4), "sync-stream", "host_ops")
    assert len(fs) == 1 and fs[0]["ranks"] == [0, 1, 2, 3]
    assert fs[0]["impact_ms"] == pytest.approx(26.588, abs=1e-3)


def test_host_bound_batches_of_one_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    path = need(ASCEND / "msinsight-pt-db-l0")
    fs = _same_in_batches_of_one(monkeypatch, path, "host-bound", "host_ops")
    assert len(fs) == 1 and fs[0]["ranks"] == [0, 1]
    assert fs[0]["impact_ms"] == pytest.approx(17.968, abs=1e-3)
