"""The host-side checks: sync-stream, op-compile, sync-batchnorm, gc-pause, slow-dataloader, host-bound,
memory-ops, h2d-pageable, exposed-comm-tail and fp32-compute.

Each check fires on a generated profile with its problem planted (right ranks, steps, subject, severity and
numbers), stays silent on a clean profile (Ascend and Kineto), finds the planted problems #8-#13 of the
synthetic sample cluster4 (rules doc §8.3) on every rank without any other medium/high finding of its own,
and finds the three MindSpore guide cases with their numbers. Profiles are small (2 ranks, 1-3 layers); each
is generated and ingested once per module. Plants that do not interact share one profile, on different
ranks, so the tests also check that each finding names only the planted ranks.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from checkrun import HOST, Result, ev

from conftest import CLUSTER4, need
from stepdoctor.analysis.build import open_profile
from stepdoctor.analysis.checks._minddata import queue_gap_op, saturated_op
from stepdoctor.analysis.checks.base import CheckContext
from stepdoctor.analysis.checks.fp32_compute import FP32_SPEEDUP
from stepdoctor.analysis.checks.slow_dataloader import iterator_kind
from stepdoctor.analysis.checks.sync_batchnorm import marker_kind
from stepdoctor.analysis.store import IngestOptions
from stepdoctor.evals.generate.problems import Plant

MINE = HOST
MS = 1e6


# ---------------------------------------------------------------------------------------------------------
# cluster4: planted problems #8-#13, on all four ranks


def test_cluster4_finds_8_to_13_on_every_rank_and_nothing_else(cluster4_host: Result) -> None:
    assert cluster4_host.checks(("high", "medium")) == {"sync-stream", "op-compile", "sync-batchnorm", "slow-dataloader",
                                                   "gc-pause", "memory-ops"}
    assert not cluster4_host.run.warnings
    for f in cluster4_host.run.findings:
        assert f.ranks == [0, 1, 2, 3] and f.steps == [1, 2], f
    assert "h2d-pageable" in cluster4_host.run.not_applicable   # Ascend does not record pageable copies


def test_cluster4_slow_dataloader(cluster4_host: Result) -> None:
    f = cluster4_host.one("slow-dataloader")  # #11: dataloader 15 ms, single-process iterator
    assert f.severity == "high"
    assert f.subject == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    assert f.evidence["iterator_kind"] == "single-process"
    for r in range(4):
        assert ev(f, r)["max_call_ms"] == 15.0
    assert f.impact_ms == pytest.approx(15.0)        # the device is idle the whole fetch (step start)
    assert "num_workers" in f.message


# ---------------------------------------------------------------------------------------------------------
# generated Ascend profiles

def test_ascend_clean_profile_is_silent(gen: Callable[..., Result]) -> None:
    res = gen()
    assert res.run.findings == [] and not res.run.warnings


def test_ascend_plants_on_their_ranks(gen: Callable[..., Result]) -> None:
    res = gen(Plant("op-compile", ranks=[0]), Plant("sync-batchnorm", ranks=[1]), Plant("gc-pause", ranks=[0], steps=[2]),
              Plant("slow-dataloader", ranks=[1]), Plant("memory-ops", ranks=[1]), Plant("fp32-compute", ranks=[0]),
              layers=1)
    # no host-bound: the device waits for launches held back by mallocs, compiles, GC and data loading,
    # which are those checks' findings
    assert res.checks() == {"op-compile", "sync-batchnorm", "gc-pause", "slow-dataloader", "memory-ops",
                            "fp32-compute"}
    f = res.one("op-compile")
    assert (f.ranks, f.steps, f.severity) == ([0], [1, 2], "high")
    assert ev(f, 0)["by_step"]["1"] == {"calls": 25, "ms": 7.5}
    f = res.one("sync-batchnorm")
    assert (f.ranks, f.severity, ev(f, 1)["calls_per_affected_step"]) == ([1], "high", 25)
    f = res.one("gc-pause")
    assert (f.ranks, f.steps, f.severity, f.subject) == ([0], [2], "medium", "GC")
    assert ev(f, 0)["by_step"] == {"2": {"events": 3, "ms": 4.5}}
    f = res.one("slow-dataloader")
    assert (f.ranks, f.severity, f.evidence["iterator_kind"]) == ([1], "high", "single-process")
    assert f.impact_ms == pytest.approx(15.0)
    f = res.one("memory-ops")
    assert (f.ranks, f.subject, ev(f, 1)["ms_per_step"]) == ([1], "AscendCL@aclMallocMemInner", 15.0)
    assert f.severity == "high" and f.impact_pct == pytest.approx(100 * 15.0 / res.ctx.mean_step_ms(1), abs=0.01)
    f = res.one("fp32-compute")
    e = ev(f, 0)
    assert (f.ranks, f.subject, e["fp32_share_pct"]) == ([0], "MatMulV2", 100.0)
    fp32 = res.scalar("SELECT sum(dur_ns) FROM device_ops WHERE rank = 0 AND input_dtypes LIKE 'FLOAT;%' AND "
                      "(op_type LIKE '%MatMul%' OR op_type LIKE '%Attention%')") / MS / 2
    assert e["fp32_ms_per_step"] == pytest.approx(fp32, abs=1e-3)
    assert f.impact_ms == pytest.approx(fp32 * (1 - 1 / FP32_SPEEDUP), abs=1e-3)
    assert f.evidence["assumed_speedup"] == FP32_SPEEDUP and f.evidence["speedup_source"]


# ---------------------------------------------------------------------------------------------------------
# generated Kineto profiles (3 steps: the last one is dropped like HTA does, steps 1-2 are analysed)

def test_kineto_clean_profile_is_silent(gen: Callable[..., Result]) -> None:
    res = gen(vendor="kineto", steps=3)
    assert res.run.findings == [] and not res.run.warnings
    assert "op-compile" in res.run.not_applicable


def test_kineto_plants_on_their_ranks(gen: Callable[..., Result]) -> None:
    res = gen(Plant("gc-pause", ranks=[0]), Plant("slow-dataloader", ranks=[1]), Plant("memory-ops", ranks=[1]),
              Plant("h2d-pageable", ranks=[0]), Plant("fp32-compute", ranks=[1]), vendor="kineto", steps=3)
    assert res.checks() == {"gc-pause", "slow-dataloader", "memory-ops", "h2d-pageable", "fp32-compute"}
    f = res.one("gc-pause")        # Kineto records no GC: 3 host silences of 25 ms per step, device idle
    assert (f.ranks, f.steps, f.subject, f.severity) == ([0], [1, 2], "conjectured GC", "medium")
    e = ev(f, 0)
    assert e["gaps"] == 6 and e["max_gap_ms"] == pytest.approx(25.0, abs=0.01)
    assert all(g["gap_ms"] == pytest.approx(25.0, abs=0.01) for g in e["top_gaps"])
    f = res.one("slow-dataloader")
    assert (f.ranks, f.evidence["iterator_kind"], ev(f, 1)["max_call_ms"]) == ([1], "single-process", 15.0)
    f = res.one("memory-ops")
    e = ev(f, 1)
    assert (f.ranks, f.subject, e["calls_per_affected_step"]) == ([1], "cudaMalloc", 6)
    assert e["ms_per_step"] == pytest.approx(15.0, abs=0.05)
    f = res.one("fp32-compute")
    assert (f.ranks, f.subject, ev(f, 1)["fp32_share_pct"]) == ([1], "matmul", 100.0)


# ---------------------------------------------------------------------------------------------------------
# MindSpore guide cases (mindspore doc §9)


@pytest.mark.parametrize("layout", ["legacy", "db", "text"])
def test_mindspore_case1_map_op_with_one_worker(ms_case: Callable[..., Result], layout: str) -> None:
    res = ms_case(layout, "slow_dataloader")
    assert res.checks() == {"slow-dataloader"}
    f = res.one("slow-dataloader")
    assert (f.ranks, f.severity, f.subject) == ([0], "high", "Map(id=3)")
    e = ev(f, 0)
    if layout == "text":
        # >= 2.5 non-sink text export: no interval recorded; the device's free time per step with the host
        # queue running empty stands in for it (it also holds the small gaps between kernels)
        assert e["measured_as"] == "device free"
        assert e["iteration_interval_ms"] == pytest.approx(72.8, abs=1.0)
    else:
        assert e["measured_as"] == "iteration interval"
        assert e["iteration_interval_ms"] == pytest.approx(72.8)
        assert e["interval_share_pct"] == pytest.approx(100 * 72.8 / 90.0, abs=0.05)
    assert e["stage"] == "data processing" and e["host_queue_empty_ratio"] == 0.9
    assert (f.evidence["dataset_op"], f.evidence["num_parallel_workers"]) == ("Map(id=3)", 1)
    # ceil(1 worker x 90 / (90 - 72.8) x 1.25) = 7
    assert f.evidence["proposed_num_parallel_workers"] == 7
    assert "num_parallel_workers=7" in f.message and f.impact_ms == e["iteration_interval_ms"]
    if layout == "legacy":   # the guide's fix, 12 workers: interval 0.25 ms
        assert not ms_case(layout, "slow_dataloader", fixed=True).of("slow-dataloader")


def test_mindspore_without_cann_api_is_not_applicable(ms_case: Callable[..., Result]) -> None:
    na = ms_case("legacy", "slow_dataloader").run.not_applicable
    assert na["sync-stream"] == "needs cann_api" and na["op-compile"] == "needs cann_api"


# ---------------------------------------------------------------------------------------------------------
# rules on their own


def test_markers_and_iterators() -> None:
    assert marker_kind("SyncBatchNorm") == marker_kind("syncbatchnorm") == "SyncBatchNorm"
    assert marker_kind("nn.Module: SyncBatchNorm_3") == "nn.Module: SyncBatchNorm"
    assert marker_kind("aten::batch_norm") is None
    assert iterator_kind("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__") == "multi-process"
    assert iterator_kind("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__") == "single-process"


def _ops(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["op_id", "op_type", "num_workers", "output_queue_size",
                                       "output_queue_usage_rate", "avg_cpu_pct", "parent_id"])


def test_dataset_bottleneck_rules() -> None:
    # the saturated map (98.5 % CPU per worker) wins, not the Batch op whose input it starves
    ops = _ops([(0, "BatchOp", 8, 16, 0.02, 8.0, None), (1, "MapOp", 8, 16, 0.03, 12.0, 0),
                (2, "MapOp", 1, 16, 0.04, 98.5, 1), (3, "ImageFolderOp", 8, 16, 0.97, 20.0, 2)])
    row, why = saturated_op(ops)
    assert int(row["op_id"]) == 2 and "98 % CPU per worker" in why
    # no CPU data: MindInsight's queue rule, the op whose input is much fuller than its output
    no_cpu = ops.assign(avg_cpu_pct=None)
    assert saturated_op(no_cpu) is None
    row, why = queue_gap_op(no_cpu)
    assert int(row["op_id"]) == 2 and "97 % full" in why
    # all queues full: nothing to blame
    assert queue_gap_op(no_cpu.assign(output_queue_usage_rate=0.9)) is None


def test_columns_gives_none_for_null_text_and_nan_for_null_numbers(tmp_path: Path) -> None:
    """`_common.columns`: NULL text is None (MaskedArray.filled(None) gave numpy's fill value '?', which a
    check then grouped as an op type named '?'), NULL numbers NaN."""
    from stepdoctor.analysis.checks._common import columns

    ctx = CheckContext(open_profile(need(CLUSTER4), IngestOptions(cache_dir=tmp_path)))
    got = columns(ctx, "SELECT * FROM (VALUES ('a', 1), (NULL, NULL), ('b', 3)) t(s, n)")
    assert got["s"].tolist() == ["a", None, "b"]
    assert got["n"][0] == 1 and got["n"][2] == 3 and got["n"][1] != got["n"][1]


# ---------------------------------------------------------------------------------------------------------
# Idle attribution (analysis/metrics/idle.py) and the real-run rules built on it


def test_profiler_overhead_from_meta(tmp_path: Path) -> None:
    """The script's step times beside the traces (stored as `step_times` at ingest): median profiled step minus
    the median steady step after the profiled window."""

    from stepdoctor.analysis.metrics.idle import profiler_overhead
    from stepdoctor.tools import api

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "data" / "real_cpu" / "ddp2_clean", run)
    (run / "meta" / "step_times_rank0.json").write_text(json.dumps(
        {"rank": 0, "step_ms": [900, 50, 30, 30, 36, 35, 38, 1100, 24, 25, 24], "profiled_steps": [4, 5, 6, 7]}))
    prof = api.load(run / "traces", IngestOptions(cache_dir=tmp_path / "cache"))
    ov = profiler_overhead(prof, 0)
    # median of the profiled steps (the export step 7 does not move it) minus the steady steps after them
    assert ov is not None and ov["profiled_step_ms"] == 37.0 and ov["unprofiled_step_ms"] == 24.0
    assert ov["overhead_ms"] == 13.0
    assert profiler_overhead(prof, 5) is None                 # no such rank, no file
    (run / "meta" / "step_times_rank0.json").write_text("{not json")
    again = api.load(run / "traces", IngestOptions(cache_dir=tmp_path / "cache"))   # a changed sidecar: read anew
    assert profiler_overhead(again, 0) is None                 # damaged: unknown, no traceback


def test_idle_attribution_names_what_the_host_did() -> None:
    from stepdoctor.analysis.metrics.idle import attribute_idle, idle_gaps

    starts = np.array([0, 100, 300, 600, 1000, 1500], dtype=np.int64)
    ends = np.array([50, 200, 400, 700, 1100, 1600], dtype=np.int64)
    g0, g1 = idle_gaps(starts, ends, 0, 1600)
    assert list(zip(g0.tolist(), g1.tolist(), strict=True)) == [(50, 100), (200, 300), (400, 600), (700, 1000),
                                                                (1100, 1500)]
    host = pd.DataFrame({"name": ["cudaStreamSynchronize", "cudaFree", "enumerate(DataLoader)#_SingleProcess"
                                  "DataLoaderIter.__next__", "gloo:all_reduce", "cudaLaunchKernel"],
                         "start_ns": [10, 410, 700, 1100, 250], "dur_ns": [50, 150, 300, 400, 5]})
    silences = (np.array([210], np.int64), np.array([290], np.int64))
    got = attribute_idle(g0, g1, host, silences).tolist()
    assert got == ["sync", "gc_or_untraced", "allocator", "dataloader", "collective_wait"]
    # nothing recorded over a gap: the host was launching (too slowly)
    assert attribute_idle(g0[:1], g1[:1], host.iloc[4:], (np.empty(0, np.int64),) * 2).tolist() == ["launch"]


