"""The compute and communication checks: aicpu-op, dynamic-shape, block-dim-underuse, no-bound-op,
misaligned-shape, freq-throttle, affinity-api, small-packet, bandwidth-contention, retransmission and
byte-misalignment.

Each check fires on a generated profile with its problem planted (right ranks, steps, subject, severity and
numbers, the numbers re-derived here from the tables by a direct query), stays silent on a clean profile,
and finds the planted problems of the synthetic sample cluster4 (rules doc §8.3 #14-#21) without the
unplanted ones. Profiles are small (2 ranks x 2 steps, 3 layers) and each is generated and ingested once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import CLUSTER4, SHARED, need
from stepdoctor.analysis.build import open_profile
from stepdoctor.analysis.checks.affinity_api import compile_pattern, first_level, match_sequences
from stepdoctor.analysis.checks.base import CheckContext, CheckRun, run_checks
from stepdoctor.analysis.checks.block_dim_underuse import unused_share
from stepdoctor.analysis.checks.freq_throttle import mean_freq
from stepdoctor.analysis.checks.misaligned_shape import cube_misalignment, fa_misalignment
from stepdoctor.analysis.models import Finding
from stepdoctor.analysis.store import IngestOptions, Profile
from stepdoctor.analysis.thresholds import T
from stepdoctor.evals.generate import mindspore
from stepdoctor.evals.generate.ascend import write_ascend_profile
from stepdoctor.evals.generate.kineto import write_kineto_profile
from stepdoctor.evals.generate.problems import Plant, Scenario
from stepdoctor.evals.generate.to_db import convert_profile

MINE = (
    "aicpu-op",
    "dynamic-shape",
    "block-dim-underuse",
    "no-bound-op",
    "misaligned-shape",
    "freq-throttle",
    "affinity-api",
    "small-packet",
    "bandwidth-contention",
    "retransmission",
    "byte-misalignment",
)
MS = 1e6


@dataclass
class Result:
    profile: Profile
    run: CheckRun

    def of(self, check: str) -> list[Finding]:
        return [f for f in self.run.findings if f.check == check]

    def one(self, check: str, subject: str | None = None) -> Finding:
        fs = [f for f in self.of(check) if subject is None or f.subject == subject]
        assert len(fs) == 1, [(f.check, f.subject) for f in self.run.findings]
        return fs[0]

    def scalar(self, query: str, params: list | None = None) -> float:
        return float(self.profile.rows(query, params)[0][0])


def _analyse(path: Path, cache: Path) -> Result:
    prof = open_profile(path, IngestOptions(cache_dir=cache))
    return Result(prof, run_checks(CheckContext(prof), only=MINE))


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> Callable[..., Result]:
    """Generate (once per distinct arguments), ingest and check a profile with the given plants."""
    done: dict[tuple, Result] = {}

    def run(
        *plants: Plant | str, vendor: str = "ascend", ranks: int = 2, steps: int = 2, **opts: bool
    ) -> Result:
        ps = [p if isinstance(p, Plant) else Plant(p) for p in plants]
        key = (vendor, ranks, steps, repr(ps), tuple(sorted(opts.items())))
        if key not in done:
            d = tmp_path_factory.mktemp("gen")
            sc = Scenario(vendor, ranks=ranks, steps=steps, plants=ps)
            writer = write_ascend_profile if vendor == "ascend" else write_kineto_profile
            writer(sc, d / "prof", **opts)
            done[key] = _analyse(d / "prof", d / "cache")
        return done[key]

    return run


@pytest.fixture(scope="module")
def cluster4(tmp_path_factory: pytest.TempPathFactory) -> Result:
    return _analyse(need(CLUSTER4), tmp_path_factory.mktemp("c4cache"))


# ------------------------------------------------------------------------------------------- clean profiles


def test_clean_ascend_profile_fires_nothing(scenario: Callable[..., Result]) -> None:
    res = scenario()
    assert res.run.findings == []
    assert res.run.not_applicable == {}  # every capability was there: silence means "checked, fine"
    assert res.run.warnings == []


def test_clean_kineto_profile_small_packet_silent_and_ascend_checks_not_applicable(
    scenario: Callable[..., Result],
) -> None:
    res = scenario(vendor="kineto", steps=3)
    assert res.run.findings == []
    assert "small-packet" not in res.run.not_applicable  # it ran on the NCCL message sizes
    assert "affinity-api" not in res.run.not_applicable  # it looked for SDPA's unfused math backend
    assert set(res.run.not_applicable) == set(MINE) - {"small-packet", "affinity-api"}


# ------------------------------------------------------------------------------------------------- compute


def test_aicpu_op_fires_with_double_and_ai_cpu_time(scenario: Callable[..., Result]) -> None:
    res = scenario("aicpu-op")
    f = res.one("aicpu-op")
    assert (f.subject, f.ranks, f.steps) == ("IndexPut", [0, 1], [1, 2])
    assert f.evidence["double_inputs"] is True and f.evidence["threshold_task_us"] == 20.0
    # impact = Σ AI_CPU time per step of the worst rank, re-derived from the table
    per_rank = [
        res.scalar(
            "SELECT sum(dur_ns) / 2 / 1e6 FROM device_ops WHERE task_type = 'AI_CPU' AND rank = ?", [r]
        )
        for r in (0, 1)
    ]
    assert f.impact_ms == pytest.approx(max(per_rank), abs=1e-3)
    assert 1.1 < f.impact_ms < 1.3  # 3 layers x 1 IndexPut of ~400 µs
    assert f.evidence["per_rank"]["0"]["tasks_per_step"] == 3
    assert f.severity == "low" and f.impact_pct < T.priority_medium_pct.value  # the impact rule
    assert "rank" in f.message and "DOUBLE" in f.message


def test_dynamic_shape_fires_only_when_every_op_is_dynamic(scenario: Callable[..., Result]) -> None:
    f = scenario("dynamic-shape").one("dynamic-shape")
    assert (f.ranks, f.steps, f.severity, f.impact_ms) == ([0, 1], [1, 2], "low", None)
    counts = f.evidence["ops_by_rank_step"]
    assert set(counts) == {"0:1", "0:2", "1:1", "1:2"}
    assert all(c["static"] == 0 and c["dynamic"] > 0 for c in counts.values())


def test_dynamic_shape_not_applicable_without_op_state_column(scenario: Callable[..., Result]) -> None:
    # older CANN: no `OP State` column; the advisor reports "all operators dynamic" here (rules doc §9 bug 1)
    res = scenario("block-dim-underuse", drop_op_state=True)
    assert res.of("dynamic-shape") == []
    assert res.run.not_applicable["dynamic-shape"] == "needs op_state"
    # and, unlike the advisor, block dim is still checked
    assert res.one("block-dim-underuse", "MatMulV2").evidence["core_count"] == 24


def test_block_dim_underuse_numbers(scenario: Callable[..., Result]) -> None:
    res = scenario("block-dim-underuse")
    mm = res.one("block-dim-underuse", "MatMulV2")
    assert (mm.ranks, mm.steps, mm.severity) == ([0, 1], [1, 2], "low")
    assert mm.evidence["block_dims"][0] | {"tasks": 0} == {
        "task_type": "AI_CORE",
        "block_dim": 20,
        "cores": 24,
        "tasks": 0,
        "idle_share": round(1 / 6, 4),
    }
    per_rank = [
        res.scalar(
            "SELECT sum(dur_ns) / 2 / 1e6 FROM device_ops WHERE op_type = 'MatMulV2' AND rank = ?", [r]
        )
        / 6
        for r in (0, 1)
    ]
    assert mm.impact_ms == pytest.approx(max(per_rank), abs=1e-3)
    vec = [f for f in res.of("block-dim-underuse") if f.evidence["task_type"] == "AI_VECTOR_CORE"]
    assert vec and all(
        f.evidence["block_dims"][0]["block_dim"] == 40 and f.evidence["core_count"] == 48 for f in vec
    )
    # the clean MIX_AIC flash attention (block dim 24 on 24 cube cores) is not underuse
    assert not any(f.subject.startswith("FlashAttention") for f in res.of("block-dim-underuse"))


def test_block_dim_reads_block_num_header(scenario: Callable[..., Result]) -> None:
    # newer torch_npu writes `Block Num`: the advisor silently skips the check (rules doc §9 bug 2)
    f = scenario("block-dim-underuse", block_num_header=True).one("block-dim-underuse", "MatMulV2")
    assert f.evidence["block_dims"][0]["block_dim"] == 20


def test_no_bound_op_numbers(scenario: Callable[..., Result]) -> None:
    res = scenario("no-bound-op")
    f = res.one("no-bound-op", "MatMulV2")
    assert (f.ranks, f.steps, f.severity) == ([0, 1], [1, 2], "low")
    top = f.evidence["pipe_ratios_time_weighted"][f.evidence["busiest_pipe"]]
    assert top <= 0.6 + 1e-6 < T.no_bound_ratio.value
    # impact = Σ dur × (1 − busiest ratio / 0.8), per step, worst rank
    q = (
        "SELECT sum(dur_ns * (1 - greatest(coalesce(aic_mac_ratio, 0), coalesce(aic_scalar_ratio, 0), "
        "coalesce(aic_mte1_ratio, 0), coalesce(aic_mte2_ratio, 0), coalesce(aic_fixpipe_ratio, 0), "
        "coalesce(aiv_vec_ratio, 0), coalesce(aiv_scalar_ratio, 0), coalesce(aiv_mte2_ratio, 0), "
        "coalesce(aiv_mte3_ratio, 0)) / 0.8)) / 2 / 1e6 FROM device_ops "
        "WHERE op_type = 'MatMulV2' AND rank = ?"
    )
    assert f.impact_ms == pytest.approx(max(res.scalar(q, [r]) for r in (0, 1)), abs=1e-3)
    # AI CPU / communication tasks have no AI Core pipes and are never judged
    assert all(
        f.evidence["task_type"] in ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV")
        for f in res.of("no-bound-op")
    )


def test_misaligned_shape_matmul_and_flash_attention(scenario: Callable[..., Result]) -> None:
    res = scenario("misaligned-shape")
    mm = res.one("misaligned-shape", "MatMulV2")
    assert (mm.ranks, mm.steps, mm.severity) == ([0, 1], [1, 2], "low")
    axes = {(s["axes"]["a_inner"], s["axes"]["b_inner"]) for s in mm.evidence["shapes"]}
    assert all(a % 256 or b % 256 for a, b in axes) and any(4000 in ab or 11000 in ab for ab in axes)
    fa = res.one("misaligned-shape", "FlashAttentionScore")
    assert fa.evidence["shapes"][0]["axes"]["head_dim"] == 125  # hidden 4000 / 32 heads
    assert fa.evidence["alignment_elements"] == 128
    assert {f.subject for f in res.of("misaligned-shape")} == {
        "MatMulV2",
        "FlashAttentionScore",
        "FlashAttentionScoreGrad",
    }


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


def test_affinity_api_three_replacements(scenario: Callable[..., Result]) -> None:
    res = scenario("affinity-api")
    subjects = {f.subject: f for f in res.of("affinity-api")}
    assert set(subjects) == {
        "torch_npu.fast_gelu",
        "torch_npu.npu_add_layer_norm",
        "torch_npu.optim.NpuFusedAdamW",
    }
    for f in subjects.values():
        assert (f.ranks, f.steps, f.severity, f.impact_ms) == ([0, 1], [1, 2], "low", None)
    assert subjects["torch_npu.optim.NpuFusedAdamW"].evidence["per_rank"]["0"]["occurrences_per_step"] == 1
    assert subjects["torch_npu.npu_add_layer_norm"].evidence["matched_sequences"] == {
        "add-layer_norm": 12
    }  # 2 ranks x 2 steps x 3 layers
    assert subjects["torch_npu.npu_add_layer_norm"].evidence["since_cann"] == "8.0.RC1"


# ------------------------------------------------------------------------------------------- communication


def test_small_packet_ascend_sdma(scenario: Callable[..., Result]) -> None:
    res = scenario("small-packet")
    f = res.one("small-packet")
    assert (f.subject, f.ranks, f.steps, f.severity) == ("SDMA", [0, 1], [1, 2], "low")
    ev = f.evidence["per_rank"]["0"]
    assert ev["small_ratio"] == 1.0 and ev["median_small_size_mb"] < 16
    assert f.evidence["threshold_bytes"] == 16e6 and f.evidence["threshold_ratio"] == 0.2
    small = [
        res.scalar(
            "SELECT sum(transit_ns) / 2 / 1e6 FROM comm_bandwidth WHERE rank = ? AND transport = 'SDMA' "
            "AND size_bytes > 0 AND size_bytes < 16e6",
            [r],
        )
        for r in (0, 1)
    ]
    assert f.impact_ms == pytest.approx(max(small), abs=1e-3)


def test_small_packet_kineto_nccl(scenario: Callable[..., Result]) -> None:
    res = scenario("small-packet", vendor="kineto", steps=3)
    f = res.one("small-packet")
    assert (f.subject, f.ranks, f.severity) == ("NCCL", [0, 1], "low")
    assert f.steps == [1, 2]  # step 3 is the partial last step Kineto keeps out
    assert f.evidence["per_rank"]["0"]["median_small_size_mib"] == 1.0


def test_bandwidth_contention_needs_overlap_and_low_bandwidth(scenario: Callable[..., Result]) -> None:
    f = scenario("bandwidth-contention").one("bandwidth-contention")
    assert (f.subject, f.ranks, f.steps, f.severity) == ("SDMA", [0, 1], [1, 2], "low")
    ev = f.evidence["per_rank"]["0"]
    assert 8.5 < ev["mean_gbps_contended"] < 9.5 < 14.4  # the plant: 9 GB/s
    assert f.evidence["threshold_gbps"] == 14.4 and f.impact_ms > 0


def test_slow_link_alone_is_not_contention(scenario: Callable[..., Result]) -> None:
    # a slow SDMA link with no overlap (the sample's rank 2) belongs to slow-link, not here
    assert scenario("slow-link").of("bandwidth-contention") == []


def test_retransmission_names_rank_and_step(scenario: Callable[..., Result]) -> None:
    res = scenario("retransmission")  # default: last rank, first step, 4200 ms RDMA transit
    f = res.one("retransmission")
    assert (f.subject, f.ranks, f.steps, f.severity) == ("RDMA", [1], [1], "high")
    inst = f.evidence["instances"][0]
    assert inst["rdma_transit_ms"] == {"1": pytest.approx(4200, abs=1)} and inst["min_elapse_ms"] >= 4000
    assert f.impact_ms == pytest.approx(inst["min_elapse_ms"] / 2, abs=1e-3)


def test_byte_misalignment(scenario: Callable[..., Result]) -> None:
    res = scenario("byte-misalignment")
    f = res.one("byte-misalignment")
    assert (f.subject, f.ranks, f.steps, f.severity) == ("SDMA", [0, 1], [1, 2], "medium")
    ev = f.evidence["per_rank"]["0"]
    assert str((32 << 20) + 100) in ev["sizes_bytes"]
    bad = [
        res.scalar(
            "SELECT sum(dur_ns) / 2 / 1e6 FROM comm_tasks WHERE rank = ? AND transport = 'SDMA' "
            "AND size_bytes > 512 AND size_bytes % 512 <> 0",
            [r],
        )
        for r in (0, 1)
    ]
    assert f.impact_ms == pytest.approx(max(bad), abs=1e-3)


# ------------------------------------------------------------------------------- the sample (rules doc §8.3)


def test_cluster4_14_aicpu_indexput_double(cluster4: Result) -> None:
    f = cluster4.one("aicpu-op")
    assert (f.subject, f.ranks, f.steps, f.severity) == ("IndexPut", [0, 1, 2, 3], [1, 2], "medium")
    assert f.evidence["double_inputs"] and "DOUBLE" in f.evidence["dtypes"]
    assert f.impact_ms == pytest.approx(4.472, abs=0.01)  # rank 3 (compute x 1.4): 8 x ~559 µs per step
    assert f.evidence["per_rank"]["3"]["tasks_per_step"] == 8


def test_cluster4_15_block_dim(cluster4: Result) -> None:
    fs = {f.subject: f for f in cluster4.of("block-dim-underuse")}
    assert set(fs) == {"MatMulV2", "Add"}
    assert (
        fs["MatMulV2"].evidence["block_dims"][0]["block_dim"] == 20
        and fs["MatMulV2"].evidence["core_count"] == 24
    )
    assert fs["Add"].evidence["block_dims"][0]["block_dim"] == 40 and fs["Add"].evidence["core_count"] == 48
    assert all(f.ranks == [0, 1, 2, 3] and f.severity == "low" for f in fs.values())


def test_cluster4_16_no_bound(cluster4: Result) -> None:
    fs = {f.subject: f for f in cluster4.of("no-bound-op")}
    assert set(fs) == {"MatMulV2", "FlashAttentionScore", "Add", "Gelu", "Cast"}  # not the AI CPU IndexPut
    assert fs["MatMulV2"].evidence["busiest_pipe"] == "aic_mte2_ratio"
    assert fs["MatMulV2"].evidence["pipe_ratios_time_weighted"]["aic_mte2_ratio"] == pytest.approx(0.55)


def test_cluster4_17_misaligned_matmul_and_fa(cluster4: Result) -> None:
    mm = cluster4.one("misaligned-shape", "MatMulV2")
    assert mm.evidence["shapes"][0]["axes"] == {"a_inner": 1000, "b_inner": 4000}
    fa = cluster4.one("misaligned-shape", "FlashAttentionScore")
    assert fa.evidence["shapes"][0]["axes"] == {"hidden": 3000}
    assert {f.subject for f in cluster4.of("misaligned-shape")} == {"MatMulV2", "FlashAttentionScore"}


def test_cluster4_18_freq_throttle_rank1_only(cluster4: Result) -> None:
    f = cluster4.one("freq-throttle")
    assert (f.ranks, f.steps, f.severity) == ([1], [1, 2], "high")
    assert f.evidence["per_rank"]["1"]["mean_mhz_during_kernels"] == 1300.0
    assert f.evidence["ranks_checked"] == [0, 1, 2, 3]
    assert "rank 1" in f.message and "1300 MHz" in f.message


def test_cluster4_19_byte_alignment(cluster4: Result) -> None:
    f = cluster4.one("byte-misalignment")
    # the advisor's analyzer says medium (fixed); 1.32 ms of misaligned SDMA time per step is ~1 % of the step,
    # and severity follows the measured time: low
    assert (f.ranks, f.severity) == ([0, 1, 2, 3], "low") and f.impact_pct < 3.0
    for r in ("0", "1", "2", "3"):
        ev = f.evidence["per_rank"][r]
        assert "1000100" in ev["sizes_bytes"] and ev["abnormal_ops_per_step"] == 4
    assert f.evidence["per_rank"]["3"]["top_ops"][0]["abnormal_us"] == 330.0  # the advisor's per-op number
    assert f.impact_ms == pytest.approx(1.32, abs=1e-3)


def test_cluster4_20_small_sdma_packets(cluster4: Result) -> None:
    f = cluster4.one("small-packet")
    assert (f.subject, f.ranks, f.severity) == ("SDMA", [0, 1, 2, 3], "low")
    assert f.evidence["per_rank"]["1"] | {"by_step": None} == {
        "ops": 8,
        "small_ops": 8,
        "small_ratio": 1.0,
        "median_small_size_mb": 3.0003,
        "small_ms_per_step": 0.72,
        "steps": [1, 2],
        "by_step": None,
    }
    assert f.impact_ms == pytest.approx(1.8)  # rank 2's slow link: 4 x 0.45 ms per step


def test_cluster4_21_affinity_apis(cluster4: Result) -> None:
    assert {f.subject for f in cluster4.of("affinity-api")} == {
        "torch_npu.fast_gelu",
        "torch_npu.npu_add_layer_norm",
        "torch_npu.optim.NpuFusedAdamW",
    }
    assert all(f.ranks == [0, 1, 2, 3] for f in cluster4.of("affinity-api"))


def test_cluster4_unplanted_checks_silent(cluster4: Result) -> None:
    # dynamic shape (Cast is static), bandwidth contention (no overlap) and retransmission are not planted
    for check in ("dynamic-shape", "bandwidth-contention", "retransmission"):
        assert cluster4.of(check) == [], check
        assert check not in cluster4.run.not_applicable
    loud = sorted((f.check, f.severity) for f in cluster4.run.findings if f.severity != "low")
    assert loud == [("aicpu-op", "medium"), ("freq-throttle", "high")]


def test_cluster4_db_export_gives_the_same_findings(cluster4: Result, tmp_path: Path) -> None:
    convert_profile(need(CLUSTER4), tmp_path / "db")
    db = _analyse(tmp_path / "db", tmp_path / "cache")
    assert db.profile.info.format == "ascend_pt_db"

    def key(r: Result) -> list[tuple]:
        return [(f.check, f.subject, f.ranks, f.steps, f.severity, f.impact_ms) for f in r.run.findings]

    assert key(db) == key(cluster4)


def test_sink_mode_getnext_is_not_an_aicpu_op(tmp_path: Path) -> None:
    # MindSpore dataset sink mode: the device waits for data in GetNext AI CPU tasks (slow-dataloader's
    # business); they must not be reported as operators to move to the AI Core
    res = _analyse(mindspore.db_profile(tmp_path / "p", case="slow_dataloader", n_steps=3), tmp_path / "c")
    assert res.scalar("SELECT sum(dur_ns) / 1e6 FROM device_ops WHERE op_type = 'GetNext'") > 200
    assert res.of("aicpu-op") == []
    assert "aicpu-op" not in res.run.not_applicable


# ------------------------------------------------------------------------------------------ pure helpers


def test_unused_share() -> None:
    assert unused_share(20, 24) == pytest.approx(1 / 6)
    assert unused_share(30, 24) == pytest.approx(1 - 30 / 48)  # second wave runs 6 of 24 cores
    assert unused_share(48, 24) == 0.0


def test_mean_freq_is_time_weighted() -> None:
    import numpy as np

    ts = np.array([0, 100, 200])
    mhz = np.array([1800.0, 900.0, 1800.0])
    got = mean_freq(ts, mhz, np.array([50, 100, -10, 150]), np.array([150, 100, 10, 250]))
    assert got[0] == pytest.approx(1350.0)  # half at 1800, half at 900
    assert got[1] == 900.0  # empty interval: the value at its start
    assert np.isnan(got[2])  # before the first sample: unknown
    assert got[3] == pytest.approx(1350.0)


def test_shape_rules() -> None:
    assert cube_misalignment("4096,1024;1024,4096", "ND;ND") is None
    assert cube_misalignment('"4096,1000;1000,4000"', "ND;ND").dims == {"a_inner": 1000, "b_inner": 4000}
    assert cube_misalignment("1,2,16,16;1,2,16,16", "FRACTAL_NZ;FRACTAL_NZ") is None  # NZ: not judged
    # BSH query with the softmax statistics [B, N, S, 8] among the outputs: D = H / N, S from the stats
    m = fa_misalignment("FA", "4,2000,4096;4,2000,4096", "4,32,2000,8;4,32,2000,8;0;4,2000,4096")
    assert m is not None and m.dims == {"hidden": 4096, "head_dim": 128, "seq_len": 2000}
    assert fa_misalignment("FA", "4,32,2048,128", "4,2048,4096") is None


def test_affinity_matching_is_on_whole_first_level_names() -> None:
    import pandas as pd

    names = ["matmul", "add", "layer_norm", "gelu", "gelu_backward", "slice", "silu", "mul"]
    assert match_sequences(names, compile_pattern("add-layer_norm")) == [(1, 2)]
    assert match_sequences(names, compile_pattern("gelu")) == [(3, 1)]  # not gelu_backward
    assert match_sequences(names, compile_pattern("(slice|chunk)-silu-mul")) == [(5, 3)]
    assert match_sequences(["softmax", "add"], compile_pattern("softmax-(mul){0,1}-(masked_fill_|add)")) == [
        (0, 2)
    ]
    ops = pd.DataFrame(
        {
            "rank": 0,
            "tid": 1,
            "name": ["aten::add", "aten::empty", "aten::layer_norm"],
            "start_ns": [0, 10, 200],
            "dur_ns": [100, 5, 50],
        }
    )
    assert list(first_level(ops)["name"]) == ["aten::add", "aten::layer_norm"]  # empty is inside add


def test_hand_written_attention_pattern() -> None:
    """matmul, a few scale / mask / cast ops, softmax, dropout / casts, matmul: attention by hand; a classifier's
    matmul -> softmax (no second matmul) or ops between that are not elementwise are not."""
    from stepdoctor.analysis.checks._unfused_attention import HAND_RE

    def hit(seq: str) -> bool:
        return bool(HAND_RE.search("".join(n + ";" for n in seq.split("-"))))

    assert hit("transpose-matmul-add_-to-softmax-type_as-dropout-matmul")       # T5 (transformers)
    assert hit("bmm-div-masked_fill-softmax-bmm")
    assert not hit("linear-matmul-softmax-topk")                                 # a router / classifier head
    assert not hit("matmul-layer_norm-softmax-matmul")                           # not the attention core
    assert not hit("matmul-mul-mul-mul-mul-mul-softmax-matmul")                  # too much between


def test_real_t5_encoder_attention_is_found_by_hand() -> None:
    """SD 3.5 inference on MI300X: the T5 text encoder's eager attention (transformers modeling_t5) runs as
    matmul-add_-to-softmax-type_as-dropout-matmul, 46 times in the profiled step; its kernels are 3.4 ms of a
    1.2 s step, so low."""
    from stepdoctor.tools import api

    rep = api.issues(str(need(SHARED / "real" / "kineto" / "tracelens-mi300-xdit-sd35")), checks=["affinity-api"])
    [f] = rep.findings
    assert f.subject == "torch.nn.functional.scaled_dot_product_attention" and f.fixes == ["sdpa-fused-attention"]
    e = f.evidence["per_rank"]["0"]
    assert e["occurrences_per_step"] == 46
    assert e["sequences"] == {"matmul-add_-to-softmax-type_as-dropout-matmul": 46}
    assert e["forward_kernel_ms_per_step"] == pytest.approx(3.41, abs=0.02)
    assert f.severity == "low"
