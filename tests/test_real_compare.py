"""`compare` on the real H100 runs (gpu-h100/): the verdict names the operator a person acts on, sync waits
are effects, Python names match across runs, advice fits the hardware; plus the name table and the
host-bound rule on their own."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from conftest import SHARED, need
from stepdoctor.analysis.compare import env as envs
from stepdoctor.analysis.compare import ops, sides
from stepdoctor.analysis.compare import verdict as cv
from stepdoctor.analysis.timeline.names import kernel_label, operator_label, strip_address
from stepdoctor.evals.score_real import score_compare
from stepdoctor.tools import api
from stepdoctor.tools.compare import compare_runs

REAL = SHARED / "real"
H100 = REAL / "gpu-h100"
_ADDR = re.compile(r"0x[0-9a-fA-F]{6,}")
_CACHE: dict[str, object] = {}


def _cmp(target: str):
    """clean -> target, computed once per test session (each compare reads two traces)."""
    if target not in _CACHE:
        # every change, not the first 15: the tests look at where sync waits rank
        _CACHE[target] = compare_runs(need(H100 / "clean" / "traces"), need(H100 / target / "traces"), top=1000)
    return _CACHE[target]


@pytest.mark.parametrize("scenario", ["regress_attn_math", "regress_fp32"])
def test_expected_json_passes(scenario: str) -> None:
    exp_path = need(H100 / scenario / "expected.json")
    exp = json.loads(exp_path.read_text())
    target = exp["paths"][1].split("/")[1]
    entries = score_compare(scenario, exp["compare"], _cmp(target))
    assert entries and all(e.passed for e in entries), [(e.spec, e.detail) for e in entries if not e.passed]


def test_attn_math_verdict_names_the_attention_operator() -> None:
    c = _cmp("attn_math")
    assert c.delta_pct is not None and 90 < c.delta_pct < 110    # the trace's +99%
    m = re.search(r"aten::scaled_dot_product_attention \+([\d.]+) ms", c.verdict)
    assert m, c.verdict
    # forward math path: copies, masking, bmm and softmax launched under the SDPA call, ~20 ms of the +36 ms
    assert 15.0 < float(m.group(1)) < 25.0
    assert "BmmBackward0" in c.verdict and "aten::bmm" in c.verdict
    assert "native::" not in c.verdict and "<" not in c.verdict   # no mangled kernel signatures


def test_fp32_verdict_names_matmul_operators_and_fitting_fix() -> None:
    c = _cmp("fp32_no_tf32")
    assert c.breakdown_delta.compute_ms is not None and c.breakdown_delta.compute_ms > 100
    assert "AddmmBackward0" in c.verdict and "aten::mm" in c.verdict
    assert c.next_step == "stepdoctor explain torch-autocast-bf16"   # H100 (sm90): bf16 fits


def test_sync_waits_are_not_causes() -> None:
    c = _cmp("sync_heavy")
    cause = c.verdict.split("; new finding")[0]
    assert "aten::isfinite" in cause, c.verdict          # the planted per-block check, 0 -> 8 calls/step
    for wait in ("cudaStreamSynchronize", "aten::item", "_local_scalar_dense", "cudaDeviceSynchronize"):
        assert wait not in cause
    waits = [i for i, ch in enumerate(c.top_changes) if ops.is_sync_wait(ch.name)]
    names = {c.top_changes[i].name for i in waits}
    assert {"cudaStreamSynchronize", "aten::item"} <= names    # 1 -> 9 calls/step: they did grow
    # every non-wait change that moved more than the smallest wait ranks before the first wait
    smallest = min(abs(c.top_changes[i].delta_ms) for i in waits)
    late = [ch.name for ch in c.top_changes[waits[0]:] if not ops.is_sync_wait(ch.name)
            and abs(ch.delta_ms) > smallest and not ch.name.startswith(("ProfilerStep#", "## ", "<built-in"))]
    assert not late, late


def test_python_names_lose_addresses() -> None:
    prof = api.load(need(H100 / "dataloader_bound" / "traces"))
    raw = prof.sql("SELECT count(*) AS n FROM host_ops WHERE name LIKE '% at 0x%'")["n"].iloc[0]
    assert raw > 1000                                     # with_stack=True: Python frames carry addresses
    side = sides.make_side(prof, prof.info.ranks)
    keys = ops.op_table(side, "op")["key"]
    assert keys.str.contains("built-in").any() and not keys.str.contains(_ADDR).any()
    c = _cmp("dataloader_bound")
    assert not any(_ADDR.search(ch.name) for ch in c.top_changes) and not _ADDR.search(c.verdict)
    assert "DataLoader" in c.verdict and c.next_step == "stepdoctor explain dataloader-workers-pin-memory"


def test_operator_table_attributes_all_compute() -> None:
    prof = api.load(need(H100 / "clean" / "traces"))
    side = sides.make_side(prof, prof.info.ranks)
    optab = ops.operator_table(side)
    kern = ops.op_table(side, "kernel")
    assert optab["total_ms"].sum() == pytest.approx(kern[kern["dim"].eq("compute")]["total_ms"].sum(), rel=0.02)
    sdpa = optab[optab["op"].eq("aten::scaled_dot_product_attention")]
    assert set(sdpa["inner"]) == {"aten::_cudnn_attention_forward"}   # clean runs SDPA on cuDNN
    assert envs.compute_capability(prof, side.ranks) == (9, 0)


def test_kernel_and_operator_labels() -> None:
    assert kernel_label("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
                        "at::detail::Array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, "
                        "at::detail::Array<char*, 3ul>)") == "vectorized_elementwise"
    assert kernel_label("void cutlass::Kernel2<cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8>"
                        "(cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align8::Params)") \
        == "gemm (cutlass bf16)"
    assert kernel_label("sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize128x128x8_stage3") == "gemm (cublas fp32)"
    assert kernel_label("fmha_cutlassB_f32_aligned_64x64_k64_sm80") == "attention kernel (fp32)"
    assert kernel_label("Memcpy HtoD (Pinned -> Device)") == "Memcpy HtoD (Pinned -> Device)"
    assert operator_label("autograd::engine::evaluate_function: BmmBackward0") == "BmmBackward0"
    assert strip_address("<built-in method to of Tensor object at 0x7f72809f2990>") \
        == "<built-in method to of Tensor object>"


def test_fixes_respect_hardware_and_environment() -> None:
    assert not envs.fix_fits("cuda-tf32-matmul", "cuda", (7, 0), {})       # V100: no TF32
    assert not envs.fix_fits("torch-autocast-bf16", "cuda", (7, 5), {})    # Turing: no bf16
    assert envs.fix_fits("cuda-tf32-matmul", "cuda", (8, 0), {})
    assert not envs.fix_fits("npu-fusion-attention", "cuda", (9, 0), {})
    assert not envs.fix_fits("cuda-launch-blocking-off", "cuda", (9, 0), {})
    assert envs.fix_fits("cuda-launch-blocking-off", "cuda", (9, 0), {"CUDA_LAUNCH_BLOCKING": "1"})
    turing = api.load(need(REAL / "kineto" / "param-resnet-1gpu"))   # RTX 2080 Ti
    cc = envs.compute_capability(turing, turing.info.ranks)
    assert cc == (7, 5) and not envs.fix_fits("cuda-tf32-matmul", turing.info.vendor, cc, {})


def test_hidden_compute_is_said() -> None:
    ops = pd.DataFrame([{"op": "aten::convolution", "delta_ms": 11.5, "base_ms": 15.0, "target_ms": 26.5,
                         "kernels": ["aten::cudnn_convolution"]}])
    ctx = cv.VerdictContext(ops=ops, base_compute_ms=17.6, base_step_ms=60.0)
    dims = {"compute": 12.0, "communication": 0.0, "free": -15.0, "memory": 0.1, "host": 0.0}
    empty = pd.DataFrame(columns=cv.CHANGE_COLUMNS)
    text, _ = cv.verdict_sentence(-2.9, -4.8, dims, empty, [], [], ctx=ctx)
    assert "compute +12.0 ms" in text and "(+68%)" in text and "hidden" in text
    assert "aten::convolution +11.5 ms" in text
    small = dict(dims, compute=0.3)    # under 10% of base compute: the free drop leads
    text, _ = cv.verdict_sentence(-2.9, -4.8, small, empty, [], [], ctx=ctx)
    assert "hidden" not in text and "mostly free" in text
