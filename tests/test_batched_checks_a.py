"""fp32-compute, gc-pause and memory-ops read event rows a batch of ranks at a time (`rank_batches`): with one
rank per batch they give exactly the findings of the default batch (all ranks of these profiles in one), on
real multi-rank profiles where each check fires."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import SHARED, need
from stepdoctor.analysis.checks._common import rank_batches
from stepdoctor.analysis.metrics import breakdown
from stepdoctor.tools import api

ASCEND = SHARED / "real" / "ascend"


def _findings(path: Path, check: str) -> list[dict]:
    ctx = api.context(api.load(path), None)
    return [f.model_dump() for f in api.run_checks(ctx, only=[check]).findings]


def _same_in_batches_of_one(monkeypatch: pytest.MonkeyPatch, path: Path, check: str, table: str) -> list[dict]:
    """The check's findings with the default batch, after asserting that one rank per batch gives the same."""
    default = _findings(path, check)
    monkeypatch.setattr(breakdown, "BATCH_OPS", 1)
    ctx = api.context(api.load(path), None)
    ranks = list(ctx.all_ranks)
    assert len(ranks) > 1 and rank_batches(ctx, ranks, table) == [[r] for r in ranks]
    assert _findings(path, check) == default
    return default


@pytest.mark.parametrize(("name", "share", "impact"), [("msinsight-pt-db-l1", 96, 1.44),
                                                       ("msinsight-pt-text-l1", 100, 1.419)])
def test_fp32_compute_batches_of_one_rank(monkeypatch: pytest.MonkeyPatch, name: str, share: int,
                                          impact: float) -> None:
    fs = _same_in_batches_of_one(monkeypatch, need(ASCEND / name), "fp32-compute", "device_ops")
    assert len(fs) == 1 and fs[0]["ranks"] == [0, 1] and fs[0]["subject"] == "MatMulV2"
    assert fs[0]["title"].startswith(f"{share} % of matmul/conv/attention time runs in float32")
    assert fs[0]["impact_ms"] == pytest.approx(impact, abs=1e-3)
    assert sorted(fs[0]["evidence"]["per_rank"]) == ["0", "1"]
