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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from conftest import CLUSTER4, need
from stepdoctor.analysis.build import open_profile
from stepdoctor.analysis.checks._minddata import queue_gap_op, saturated_op
from stepdoctor.analysis.checks.base import CheckContext, CheckRun, run_checks
from stepdoctor.analysis.checks.fp32_compute import FP32_SPEEDUP, ascend_precision, gpu_precision
from stepdoctor.analysis.checks.slow_dataloader import iterator_kind
from stepdoctor.analysis.checks.sync_batchnorm import marker_kind
from stepdoctor.analysis.models import Finding
from stepdoctor.analysis.store import IngestOptions, Profile
from stepdoctor.analysis.thresholds import T
from stepdoctor.evals.generate import mindspore as ms_gen
from stepdoctor.evals.generate.ascend import write_ascend_profile
from stepdoctor.evals.generate.kineto import write_kineto_profile
from stepdoctor.evals.generate.problems import Plant, Scenario

MINE = ("sync-stream", "op-compile", "sync-batchnorm", "gc-pause", "slow-dataloader", "host-bound", "memory-ops",
        "h2d-pageable", "exposed-comm-tail", "fp32-compute")
MS = 1e6


@dataclass
class Result:
    profile: Profile
    ctx: CheckContext
    run: CheckRun

    def of(self, check: str) -> list[Finding]:
        return [f for f in self.run.findings if f.check == check]

    def one(self, check: str) -> Finding:
        fs = self.of(check)
        assert len(fs) == 1, [(f.check, f.subject, f.ranks) for f in self.run.findings]
        return fs[0]

    def checks(self, severities: tuple[str, ...] = ("high", "medium", "low")) -> set[str]:
        return {f.check for f in self.run.findings if f.severity in severities}

    def scalar(self, query: str, params: list | None = None) -> float:
        return float(self.profile.rows(query, params)[0][0])


def _analyse(path: Path, cache: Path) -> Result:
    prof = open_profile(path, IngestOptions(cache_dir=cache))
    ctx = CheckContext(prof)
    return Result(prof, ctx, run_checks(ctx, only=MINE))


@pytest.fixture(scope="module")
def gen(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Result]:
    """Generate (once per distinct arguments), ingest and check a profile with the given plants."""
    done: dict[tuple, Result] = {}

    def run(*plants: Plant | str, vendor: str = "ascend", ranks: int = 2, steps: int = 2, layers: int = 3
            ) -> Result:
        ps = [p if isinstance(p, Plant) else Plant(p) for p in plants]
        key = (vendor, ranks, steps, layers, repr(ps))
        if key not in done:
            out = tmp_path_factory.mktemp(vendor)
            sc = Scenario(vendor=vendor, ranks=ranks, steps=steps, plants=ps)
            (write_ascend_profile if vendor == "ascend" else write_kineto_profile)(sc, out / "p", layers=layers)
            done[key] = _analyse(out / "p", out / "cache")
        return done[key]

    return run


def _ev(f: Finding, rank: int) -> dict[str, Any]:
    return f.evidence["per_rank"][str(rank)]


# ---------------------------------------------------------------------------------------------------------
# cluster4: planted problems #8-#13, on all four ranks

@pytest.fixture(scope="module")
def cluster4(tmp_path_factory: pytest.TempPathFactory) -> Result:
    return _analyse(need(CLUSTER4), tmp_path_factory.mktemp("c4") / "cache")


def test_cluster4_finds_8_to_13_on_every_rank_and_nothing_else(cluster4: Result) -> None:
    assert cluster4.checks(("high", "medium")) == {"sync-stream", "op-compile", "sync-batchnorm", "slow-dataloader",
                                                   "gc-pause", "memory-ops"}
    assert not cluster4.run.warnings
    for f in cluster4.run.findings:
        assert f.ranks == [0, 1, 2, 3] and f.steps == [1, 2], f
    assert "h2d-pageable" in cluster4.run.not_applicable   # Ascend does not record pageable copies


def test_cluster4_sync_stream(cluster4: Result) -> None:
    f = cluster4.one("sync-stream")      # #8: Node@launch immediately followed by aclrtSynchronizeStream 96/96
    assert (f.severity, f.subject) == ("high", "AscendCL@aclrtSynchronizeStream")
    for r in range(4):
        e = _ev(f, r)
        assert (e["launches"], e["syncs_right_after_launch"], e["co_occurrence_ratio"]) == (96, 96, 1.0)
        assert e["launch_blocking_env"] == {"ASCEND_LAUNCH_BLOCKING": "1"}
    # impact = host time blocked in those syncs (capped by device idle): 38.29 ms / 2 steps on rank 1
    assert _ev(f, 1)["blocked_ms_per_step"] == pytest.approx(38.2852 / 2, abs=0.01)
    assert f.impact_ms == pytest.approx(_ev(f, 3)["impact_ms_per_step"], abs=1e-3)
    assert "96 of 96" in f.message and "ASCEND_LAUNCH_BLOCKING=1" in f.message


def test_cluster4_op_compile(cluster4: Result) -> None:
    f = cluster4.one("op-compile")       # #9: 25 aclopCompileAndExecute (300 µs) per step
    assert (f.severity, f.subject) == ("high", "AscendCL@aclopCompileAndExecute")
    for r in range(4):
        e = _ev(f, r)
        assert e["by_step"] == {"1": {"calls": 25, "ms": 7.5}, "2": {"calls": 25, "ms": 7.5}}
        assert e["compile_ms_per_step"] == pytest.approx(7.5)
    # time-ratio priority: 7.5 ms of a 100 ms step (rank 0 has a 350 ms step 2, so ranks 1-3 weigh most)
    assert (f.impact_ms, f.impact_pct) == (7.5, 7.5)


def test_cluster4_sync_batchnorm(cluster4: Result) -> None:
    f = cluster4.one("sync-batchnorm")   # #10: 25 SyncBatchNorm per step
    assert (f.severity, f.subject) == ("high", "SyncBatchNorm")
    for r in range(4):
        assert _ev(f, r)["by_step"] == {"1": 25, "2": 25}
    assert f.impact_ms == pytest.approx(25 * 0.030)   # 30 µs each, no collective launched from them
    assert "25 times per step" in f.message


def test_cluster4_slow_dataloader(cluster4: Result) -> None:
    f = cluster4.one("slow-dataloader")  # #11: dataloader 15 ms, single-process iterator
    assert f.severity == "high"
    assert f.subject == "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    assert f.evidence["iterator_kind"] == "single-process"
    for r in range(4):
        assert _ev(f, r)["max_call_ms"] == 15.0
    assert f.impact_ms == pytest.approx(15.0)        # the device is idle the whole fetch (step start)
    assert "num_workers" in f.message


def test_cluster4_gc(cluster4: Result) -> None:
    f = cluster4.one("gc-pause")         # #12: 3 x 1.5 ms GC per step
    assert (f.severity, f.subject) == ("medium", "GC")
    for r in range(4):
        e = _ev(f, r)
        assert (e["events_per_affected_step"], e["max_event_ms"], e["gc_ms_per_step"]) == (3, 1.5, 4.5)
    assert f.impact_ms == pytest.approx(4.5)


def test_cluster4_memory_ops(cluster4: Result) -> None:
    f = cluster4.one("memory-ops")       # #13: aclMallocMemInner 6 x 2.5 ms per step
    assert (f.severity, f.subject) == ("high", "AscendCL@aclMallocMemInner")
    for r in range(4):
        e = _ev(f, r)
        assert (e["calls_per_affected_step"], e["ms_per_step"], e["mean_call_ms"]) == (6, 15.0, 2.5)
    assert f.impact_pct == 15.0


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
    res = _analyse(tmp_path / "p", tmp_path / "cache")
    f = res.one("gc-pause")
    assert (f.subject, f.ranks, f.steps, f.severity) == ("conjectured GC", [0], [2], "medium")
    gap = _ev(f, 0)["top_gaps"][0]
    assert (gap["gap_ms"], gap["acl_calls"], gap["acl_time_ratio"]) == (280.856, 0, 0.0)
    assert f.impact_ms == pytest.approx(280.856 / 2, abs=1e-3)      # one such gap in two steps
    assert f.evidence["threshold_free_ms"] == T.conjectured_gc_free_ms.value


def test_cluster4_tail_is_not_on_the_critical_path(cluster4: Result) -> None:
    # The 5.2 ms AllReduce block after backward is followed by ~31 ms of device idle: the step waits on the
    # host, not on the collectives, so no exposed-comm-tail (and no host-bound: the gaps follow syncs).
    assert not cluster4.of("exposed-comm-tail") and not cluster4.of("host-bound")


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
    assert _ev(f, 0)["by_step"]["1"] == {"calls": 25, "ms": 7.5}
    f = res.one("sync-batchnorm")
    assert (f.ranks, f.severity, _ev(f, 1)["calls_per_affected_step"]) == ([1], "high", 25)
    f = res.one("gc-pause")
    assert (f.ranks, f.steps, f.severity, f.subject) == ([0], [2], "medium", "GC")
    assert _ev(f, 0)["by_step"] == {"2": {"events": 3, "ms": 4.5}}
    f = res.one("slow-dataloader")
    assert (f.ranks, f.severity, f.evidence["iterator_kind"]) == ([1], "high", "single-process")
    assert f.impact_ms == pytest.approx(15.0)
    f = res.one("memory-ops")
    assert (f.ranks, f.subject, _ev(f, 1)["ms_per_step"]) == ([1], "AscendCL@aclMallocMemInner", 15.0)
    assert f.severity == "high" and f.impact_pct == pytest.approx(100 * 15.0 / res.ctx.mean_step_ms(1), abs=0.01)
    f = res.one("fp32-compute")
    e = _ev(f, 0)
    assert (f.ranks, f.subject, e["fp32_share_pct"]) == ([0], "MatMulV2", 100.0)
    fp32 = res.scalar("SELECT sum(dur_ns) FROM device_ops WHERE rank = 0 AND input_dtypes LIKE 'FLOAT;%' AND "
                      "(op_type LIKE '%MatMul%' OR op_type LIKE '%Attention%')") / MS / 2
    assert e["fp32_ms_per_step"] == pytest.approx(fp32, abs=1e-3)
    assert f.impact_ms == pytest.approx(fp32 * (1 - 1 / FP32_SPEEDUP), abs=1e-3)
    assert f.evidence["assumed_speedup"] == FP32_SPEEDUP and f.evidence["speedup_source"]


def test_ascend_sync_stream(gen: Callable[..., Result]) -> None:
    res = gen("sync-stream", layers=1)
    f = res.one("sync-stream")
    assert (f.ranks, f.steps, f.severity) == ([0, 1], [1, 2], "high")
    e = _ev(f, 0)
    assert e["co_occurrence_ratio"] == 1.0 and e["launches"] == e["syncs_right_after_launch"] > 0
    # the gaps behind the host's own syncs are sync-stream's, not host-bound's
    assert not res.of("host-bound")


def test_ascend_host_bound(gen: Callable[..., Result]) -> None:
    res = gen("host-bound", layers=1)
    f = res.one("host-bound")
    assert (f.ranks, f.steps, f.subject) == ([0, 1], [1, 2], "launch")
    for r in (0, 1):
        e = _ev(f, r)
        assert e["free_pct"] >= T.host_bound_free_pct.value
        assert e["late_launch_share_pct"] >= T.host_bound_late_launch_pct.value
        assert e["many_tiny_kernels"] and e["median_kernel_us"] < e["median_launch_interval_us"]
    assert f.impact_ms in [v["late_launch_idle_ms_per_step"] for v in f.evidence["per_rank"].values()]
    assert f.severity == "high" and "late host launch" in f.message


def test_ascend_exposed_comm_tail(gen: Callable[..., Result]) -> None:
    res = gen("exposed-comm-tail")
    f = res.one("exposed-comm-tail")
    assert (f.ranks, f.steps, f.subject, f.severity) == ([0, 1], [1, 2], "allreduce", "high")
    e = _ev(f, f.ranks[0])
    colls = e["collectives"]
    assert len(colls) == 4 and {c["type"] for c in colls} == {"allreduce"}
    assert all(c["size_mb"] == pytest.approx(67.1089, abs=1e-3) for c in colls)
    assert colls[0]["start_after_backward_ms"] == pytest.approx(0.0, abs=0.01)
    # the optimizer waits for the block (no idle after it): the effective tail is the non-overlapped tail,
    # capped by the shortest one of the two ranks (the rank that reaches the collectives last paces them)
    for st in e["by_step"].values():
        assert st["idle_after_ms"] < 0.01
        assert st["effective_ms"] == st["critical_rank_ms"] and st["tail_ms"] - 0.5 < st["effective_ms"] <= st["tail_ms"]
    assert e["tail_pct_of_step"] >= T.exposed_tail_pct.value
    assert e["proposed_bucket_mb"] == pytest.approx(67.1089 / 2, abs=1e-3)   # smaller than every late bucket
    assert "4 allreduce" in f.message


def test_ascend_slow_rank_wait_is_not_a_tail(gen: Callable[..., Result]) -> None:
    # the fast rank waits in the last AllReduce for the slow rank 1, which overlaps it with compute
    res = gen("slow-rank", layers=1)
    assert not res.of("exposed-comm-tail")


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
    e = _ev(f, 0)
    assert e["gaps"] == 6 and e["max_gap_ms"] == pytest.approx(25.0, abs=0.01)
    assert all(g["gap_ms"] == pytest.approx(25.0, abs=0.01) for g in e["top_gaps"])
    f = res.one("slow-dataloader")
    assert (f.ranks, f.evidence["iterator_kind"], _ev(f, 1)["max_call_ms"]) == ([1], "single-process", 15.0)
    f = res.one("memory-ops")
    e = _ev(f, 1)
    assert (f.ranks, f.subject, e["calls_per_affected_step"]) == ([1], "cudaMalloc", 6)
    assert e["ms_per_step"] == pytest.approx(15.0, abs=0.05)
    f = res.one("h2d-pageable")
    e = _ev(f, 0)
    copies = res.profile.sql("SELECT step, dur_ns, size_bytes FROM device_ops WHERE rank = 0 AND name LIKE "
                             "'Memcpy HtoD (Pageable%' AND step IN (1, 2)")
    assert (f.ranks, e["copies_per_affected_step"]) == ([0], 2)
    assert e["ms_per_step"] == pytest.approx(copies["dur_ns"].sum() / MS / 2, abs=1e-3)
    assert e["bandwidth_gbps"] == pytest.approx(6.0, abs=0.1)     # the plant's 6 GB/s
    f = res.one("fp32-compute")
    assert (f.ranks, f.subject, _ev(f, 1)["fp32_share_pct"]) == ([1], "matmul", 100.0)


def test_kineto_sync_stream(gen: Callable[..., Result]) -> None:
    res = gen("sync-stream", vendor="kineto", steps=3)
    f = res.one("sync-stream")
    assert (f.ranks, f.steps, f.subject) == ([0, 1], [1, 2], "cudaStreamSynchronize")
    e = _ev(f, 0)
    assert e["blocked_ms_per_step"] >= T.sync_call_ms.value
    assert e["impact_ms_per_step"] <= e["blocked_ms_per_step"]
    # GPU: the impact rule, not the advisor's fixed priority; a sync after every launch (many per step) is at
    # least medium
    by_share = "high" if f.impact_pct >= 5 else "medium" if f.impact_pct >= 3 else "low"
    many = e["syncs_leaving_device_idle_per_step"] >= T.sync_idle_count.value
    assert f.severity == (by_share if by_share != "low" or not many else "medium")
    assert not res.of("host-bound")


def test_kineto_host_bound(gen: Callable[..., Result]) -> None:
    res = gen("host-bound", vendor="kineto", steps=3)
    f = res.one("host-bound")
    assert f.ranks == [0, 1] and f.steps == [1, 2]
    e = _ev(f, 0)
    assert e["late_launch_share_pct"] >= 90 and e["many_tiny_kernels"]


def test_kineto_exposed_comm_tail(gen: Callable[..., Result]) -> None:
    res = gen("exposed-comm-tail", vendor="kineto", steps=3)
    f = res.one("exposed-comm-tail")
    assert (f.ranks, f.subject) == ([0, 1], "allreduce")
    colls = _ev(f, 0)["collectives"]
    assert colls and all(c["type"] == "allreduce" and c["size_mb"] for c in colls)
    assert not gen("slow-rank", vendor="kineto", steps=3, layers=1).of("exposed-comm-tail")


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


def test_kineto_sync_batchnorm_counts_nested_markers_once(tmp_path: Path) -> None:
    res = _analyse(_kineto_syncbn_trace(tmp_path / "bn", 25), tmp_path / "cache")
    f = res.one("sync-batchnorm")
    e = _ev(f, 0)
    assert (f.ranks, f.severity, e["calls_per_affected_step"]) == ([0], "high", 25)   # not 50 (nested markers)
    assert e["host_ms_per_step"] == pytest.approx(25 * 0.080)
    assert e["collective_ms_per_step"] == pytest.approx(25 * 0.040)      # the all_gathers launched inside
    few = _analyse(_kineto_syncbn_trace(tmp_path / "few", 19), tmp_path / "cache")
    assert not few.of("sync-batchnorm")                                  # 19 < 20


# ---------------------------------------------------------------------------------------------------------
# MindSpore guide cases (mindspore doc §9)

@pytest.fixture(scope="module")
def ms_case(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Result]:
    done: dict[tuple, Result] = {}

    def run(layout: str, case: str, fixed: bool = False) -> Result:
        if (layout, case, fixed) not in done:
            out = tmp_path_factory.mktemp(f"ms_{layout}")
            path = getattr(ms_gen, f"{layout}_profile")(out / "p", case, fixed=fixed)
            done[(layout, case, fixed)] = _analyse(path, out / "cache")
        return done[(layout, case, fixed)]

    return run


@pytest.mark.parametrize("layout", ["legacy", "db", "text"])
def test_mindspore_case1_map_op_with_one_worker(ms_case: Callable[..., Result], layout: str) -> None:
    res = ms_case(layout, "slow_dataloader")
    assert res.checks() == {"slow-dataloader"}
    f = res.one("slow-dataloader")
    assert (f.ranks, f.severity, f.subject) == ([0], "high", "Map(id=3)")
    e = _ev(f, 0)
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


def test_mindspore_case2_fp32_matmul(ms_case: Callable[..., Result]) -> None:
    res = ms_case("legacy", "fp32_matmul")
    # the 31 ms interval is not a data wait: every data queue stays full, so no slow-dataloader
    assert res.checks() == {"fp32-compute"}
    f = res.one("fp32-compute")
    e = _ev(f, 0)
    assert (f.ranks, f.subject, e["fp32_share_pct"]) == ([0], "MatMul", 100.0)
    assert e["phases_ms"]["fp"] == pytest.approx(82.45)
    assert e["top_fp32_ops"][0] == {"op": "MatMul", "count_per_step": 3.0, "ms_per_step": pytest.approx(57.0)}
    assert f.impact_ms == pytest.approx(e["fp32_ms_per_step"] * (1 - 1 / FP32_SPEEDUP), abs=1e-3)
    assert "82.45 ms" in f.message and "amp_level='O2'" in f.message
    assert not ms_case("legacy", "fp32_matmul", fixed=True).of("fp32-compute")


def test_mindspore_case3_allreduce_tail(ms_case: Callable[..., Result]) -> None:
    res = ms_case("legacy", "comm_tail")
    assert res.checks() == {"exposed-comm-tail"}
    f = res.one("exposed-comm-tail")
    assert (f.ranks, f.steps, f.subject) == (list(range(8)), [1, 2, 3, 4, 5], "allreduce")
    assert f.impact_ms == pytest.approx(6.15, abs=1e-3)
    assert f.impact_pct == pytest.approx(100 * 6.15 / 23.6, abs=0.05)
    assert "6.15 ms" in f.message and "1 allreduce" in f.message


def test_mindspore_without_cann_api_is_not_applicable(ms_case: Callable[..., Result]) -> None:
    na = ms_case("legacy", "slow_dataloader").run.not_applicable
    assert na["sync-stream"] == "needs cann_api" and na["op-compile"] == "needs cann_api"


# ---------------------------------------------------------------------------------------------------------
# rules on their own

def test_gpu_kernel_precision() -> None:
    assert gpu_precision("ampere_sgemm_128x64_nn") == "fp32"
    assert gpu_precision("volta_scudnn_128x64_relu_interior_nn_v1") == "fp32"
    assert gpu_precision("fmha_cutlassF_f32_aligned_64x64_rf_sm80") == "fp32"
    assert gpu_precision("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn") == "half"
    assert gpu_precision("volta_h884gemm_64x64_ldg8_nn") == "half"
    assert gpu_precision("flash_fwd_kernel") == "half"
    assert gpu_precision("cutlass_80_tensorop_s1688gemm_64x64_16x6_nn_align4") == "tf32"   # m16n8k8 = TF32
    assert gpu_precision("sm80_xmma_fprop_implicit_gemm_indexed_tf32f32_tf32f32_f32_nhwckrsc") == "tf32"
    assert gpu_precision("void gemmk1_kernel<int, float, 256, 5>") == "fp32"
    assert gpu_precision("ampere_dgemm_64x64_nn") == "fp64"
    assert ascend_precision("FLOAT;FLOAT") == ascend_precision("DT_FLOAT;DT_FLOAT") == "fp32"
    assert ascend_precision("DT_BF16;DT_BF16;FLOAT") == "half"    # only the operands count
    assert ascend_precision(None) == "unknown"


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

def _kineto_sync_trace(path: Path, *, busy: bool, collective: bool = False, wait: str = "gloo:all_reduce") -> Path:
    """A one-rank CUDA Kineto trace of 3 steps. busy=False: 8 kernels per step of 50 µs, each followed by
    `aten::is_nonzero > aten::item > aten::_local_scalar_dense > cudaStreamSynchronize` that returns 1 µs after
    its kernel, then 200 µs of host work before the next launch (the device idles ~210 µs per sync).
    busy=True: one 5 ms kernel, then `loss.item()` waits for it (blocked ~5 ms) at the end of the step.
    collective: a 30 ms host silence in each step, spanned by an open `wait` annotation on another thread."""
    ev: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    t, corr = 1000.0, 1

    def kernel(at: float, dur: float) -> None:
        nonlocal corr
        ev.extend([{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": at,
                    "dur": 5.0, "args": {"correlation": corr}},
                   {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "pid": 0, "tid": 7,
                    "ts": at + 10, "dur": dur, "args": {"correlation": corr, "stream": 7, "device": 0}}])
        corr += 1

    def sync(outer: str, at: float, until: float) -> None:
        ops = [outer, "aten::item", "aten::_local_scalar_dense"] if outer != "aten::item" else \
            ["aten::item", "aten::_local_scalar_dense"]
        # with_stack frames: the user's function, then a library frame inside it (skipped for the source)
        for k, name in enumerate(("train.py(42): forward", "torch/nn/modules/module.py(1736): _call_impl")):
            ev.append({"ph": "X", "cat": "python_function", "name": name, "pid": 1, "tid": 1, "ts": at - 6 + k,
                       "dur": until - at + 12 - 2 * k})
        for k, name in enumerate(ops):
            ev.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": at + k,
                       "dur": until - at + 4 - 2 * k})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1,
                   "ts": at + len(ops), "dur": until - at - len(ops)})

    for step in (1, 2, 3):
        t0 = t
        if busy:
            kernel(t, 5000.0)
            sync("aten::item", t + 20, t + 5011)
            t += 5020
        else:
            for _ in range(8):
                kernel(t, 50.0)
                sync("aten::is_nonzero", t + 20, t + 61)
                t += 261
        if collective:
            ev.append({"ph": "X", "cat": "user_annotation", "name": wait, "pid": 1, "tid": 9,
                       "ts": t + 5, "dur": 30_010.0})
            t += 30_020
            kernel(t, 50.0)
            t += 70
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                   "ts": t0 - 1, "dur": t - t0 + 2})
        t += 10.0
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "numSms": 132,
                                                     "computeMajor": 9, "computeMinor": 0}], "traceEvents": ev}
    path.mkdir(parents=True, exist_ok=True)
    (path / "rank0.pt.trace.json").write_text(json.dumps(doc))
    return path


def test_idle_after_a_sync() -> None:
    from stepdoctor.analysis.metrics.idle import idle_after

    s = np.array([0, 100, 300], dtype=np.int64)
    e = np.array([50, 200, 400], dtype=np.int64)
    got = idle_after(s, e, np.array([60, 150, 250, 450]), np.array([1000, 1000, 280, 1000]))
    # idle to the next start; busy at 150 costs nothing; clipped to the limit; after the last op: to the limit
    assert got.tolist() == [40, 0, 30, 550]


def test_profiler_overhead_from_meta(tmp_path: Path) -> None:
    """The script's step times beside the traces (stored as `step_times` at ingest): median profiled step minus
    the median steady step after the profiled window."""
    import shutil

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


def test_sync_stream_counts_idle_after_syncs_with_their_trigger(tmp_path: Path) -> None:
    res = _analyse(_kineto_sync_trace(tmp_path / "many", busy=False), tmp_path / "cache")
    f = res.one("sync-stream")
    e = _ev(f, 0)
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
    res = _analyse(_kineto_sync_trace(tmp_path / "busy", busy=True), tmp_path / "cache")
    # loss.item() blocks ~5 ms per step, but the device was busy all that time: no finding
    assert res.scalar("SELECT max(dur_ns) FROM host_ops WHERE name = 'cudaStreamSynchronize'") > 4.9 * MS
    assert not res.of("sync-stream")


def test_gc_conjecture_skips_waits_in_a_collective(tmp_path: Path) -> None:
    res = _analyse(_kineto_sync_trace(tmp_path / "coll", busy=True, collective=True), tmp_path / "cache")
    assert not res.of("gc-pause")       # 30 ms silences, but gloo:all_reduce is open: a wait for peers
    plain = _analyse(_kineto_sync_trace(tmp_path / "plain", busy=True, collective=True, wait="my_region"),
                     tmp_path / "cache")
    f = plain.one("gc-pause")           # the same silences under a plain annotation: GC or untraced work
    assert f.subject == "conjectured GC" and _ev(f, 0)["max_gap_ms"] >= 30
    assert "untraced" in f.title and "torch_npu" not in f.message


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
