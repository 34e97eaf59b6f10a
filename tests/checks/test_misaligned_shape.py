"""misaligned-shape: its planted cases (a generated profile with the problem planted, the numbers re-derived from
the tables by a direct query), its cases on the synthetic cluster4 and their golden answer."""

from __future__ import annotations

from collections.abc import Callable

from checkrun import Result, assert_golden

from stepdoctor.analysis.checks.misaligned_shape import cube_misalignment, fa_misalignment

MS = 1e6


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


def test_cluster4_17_misaligned_matmul_and_fa(cluster4_cc: Result) -> None:
    mm = cluster4_cc.one("misaligned-shape", "MatMulV2")
    assert mm.evidence["shapes"][0]["axes"] == {"a_inner": 1000, "b_inner": 4000}
    fa = cluster4_cc.one("misaligned-shape", "FlashAttentionScore")
    assert fa.evidence["shapes"][0]["axes"] == {"hidden": 3000}
    assert {f.subject for f in cluster4_cc.of("misaligned-shape")} == {"MatMulV2", "FlashAttentionScore"}


def test_shape_rules() -> None:
    assert cube_misalignment("4096,1024;1024,4096", "ND;ND") is None
    assert cube_misalignment('"4096,1000;1000,4000"', "ND;ND").dims == {"a_inner": 1000, "b_inner": 4000}
    assert cube_misalignment("1,2,16,16;1,2,16,16", "FRACTAL_NZ;FRACTAL_NZ") is None  # NZ: not judged
    # BSH query with the softmax statistics [B, N, S, 8] among the outputs: D = H / N, S from the stats
    m = fa_misalignment("FA", "4,2000,4096;4,2000,4096", "4,32,2000,8;4,32,2000,8;0;4,2000,4096")
    assert m is not None and m.dims == {"hidden": 4096, "head_dim": 128, "seq_len": 2000}
    assert fa_misalignment("FA", "4,32,2048,128", "4,2048,4096") is None


def test_misaligned_shape_on_cluster4_is_its_golden_answer(cluster4_cc: Result) -> None:
    assert_golden("misaligned-shape", "cluster4", cluster4_cc.of("misaligned-shape"))
