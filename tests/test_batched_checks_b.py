"""exposed-comm-tail, sync-stream and host-bound read event rows a batch of ranks at a time (`rank_batches`):
with one rank per batch they give exactly the findings of the default batch (all ranks of these profiles in
one), on real multi-rank profiles where each check fires."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import CLUSTER4, SHARED, need
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
