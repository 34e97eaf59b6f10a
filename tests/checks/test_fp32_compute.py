"""fp32-compute: its cases on generated profiles with the problem planted, on the synthetic cluster4 or the
MindSpore guide cases, the rules it is built on, and the golden answer of one case."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from checkrun import Result, assert_golden, ev

from stepdoctor.analysis.checks.fp32_compute import FP32_SPEEDUP, ascend_precision, gpu_precision

MS = 1e6


def test_mindspore_case2_fp32_matmul(ms_case: Callable[..., Result]) -> None:
    res = ms_case("legacy", "fp32_matmul")
    # the 31 ms interval is not a data wait: every data queue stays full, so no slow-dataloader
    assert res.checks() == {"fp32-compute"}
    f = res.one("fp32-compute")
    e = ev(f, 0)
    assert (f.ranks, f.subject, e["fp32_share_pct"]) == ([0], "MatMul", 100.0)
    assert e["phases_ms"]["fp"] == pytest.approx(82.45)
    assert e["top_fp32_ops"][0] == {"op": "MatMul", "count_per_step": 3.0, "ms_per_step": pytest.approx(57.0)}
    assert f.impact_ms == pytest.approx(e["fp32_ms_per_step"] * (1 - 1 / FP32_SPEEDUP), abs=1e-3)
    assert "82.45 ms" in f.message and "amp_level='O2'" in f.message
    assert not ms_case("legacy", "fp32_matmul", fixed=True).of("fp32-compute")


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


def test_fp32_compute_on_mindspore_case2_is_its_golden_answer(ms_case: Callable[..., Result]) -> None:
    assert_golden("fp32-compute", "mindspore-case2", ms_case("legacy", "fp32_matmul").of("fp32-compute"))
