"""affinity-api: its planted cases (a generated profile with the problem planted, the numbers re-derived from
the tables by a direct query), its cases on the synthetic cluster4 and their golden answer."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from checkrun import Result, assert_golden

from conftest import SHARED, need
from stepdoctor.analysis.checks.affinity_api import compile_pattern, first_level, match_sequences
from stepdoctor.tools import api

MS = 1e6


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


def test_cluster4_21_affinity_apis(cluster4_cc: Result) -> None:
    assert {f.subject for f in cluster4_cc.of("affinity-api")} == {
        "torch_npu.fast_gelu",
        "torch_npu.npu_add_layer_norm",
        "torch_npu.optim.NpuFusedAdamW",
    }
    assert all(f.ranks == [0, 1, 2, 3] for f in cluster4_cc.of("affinity-api"))


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

    rep = api.issues(str(need(SHARED / "real" / "kineto" / "tracelens-mi300-xdit-sd35")), checks=["affinity-api"])
    [f] = rep.findings
    assert f.subject == "torch.nn.functional.scaled_dot_product_attention" and f.fixes == ["sdpa-fused-attention"]
    e = f.evidence["per_rank"]["0"]
    assert e["occurrences_per_step"] == 46
    assert e["sequences"] == {"matmul-add_-to-softmax-type_as-dropout-matmul": 46}
    assert e["forward_kernel_ms_per_step"] == pytest.approx(3.41, abs=0.02)
    assert f.severity == "low"


def test_affinity_api_on_cluster4_is_its_golden_answer(cluster4_cc: Result) -> None:
    assert_golden("affinity-api", "cluster4", cluster4_cc.of("affinity-api"))
