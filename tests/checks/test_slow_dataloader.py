"""slow-dataloader on real CPU training jobs (tests/data/real_cpu, PROVENANCE.md there): a rank whose loader waits
14 ms per batch on I/O (ddp2_ioloader, DDP) or computes 15 ms per batch (dp2_slowloader); their clean twins; and
the single-GPU H100 run whose loader runs in the main process. In a multi-rank job the step waits for the
slowest rank, so the impact is what the replay gains without that rank's data loading, not its own idle."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import SHARED, need
from stepdoctor.tools import api

CPU = Path(__file__).resolve().parent.parent / "data" / "real_cpu"


def _findings(path: Path):
    return api.issues(api.load(need(path)), checks=["slow-dataloader"]).findings


@pytest.mark.parametrize(("run", "loader_ms"), [("ddp2_ioloader", (14.6, 14.8)), ("dp2_slowloader", (15.5, 16.6))])
def test_a_cpu_ranks_slow_loader_is_named_with_what_the_job_gains_without_it(run, loader_ms):
    (f,) = _findings(CPU / run / "traces")
    assert f.ranks == [1] and f.severity == "high"
    e = f.evidence["per_rank"]["1"]
    # the DataLoader op's time per step on rank 1, as the PROVENANCE.md reads it from the trace
    assert loader_ms[0] <= e["dataloader_ms_per_step"] <= loader_ms[1]
    assert e["device_data"] is False and e["iterator_kind"] == "single-process"
    # rank 0 waits for rank 1 at the first all-reduce: removing the loader gains most of its time, never more
    assert 0.6 * e["dataloader_ms_per_step"] <= f.impact_ms <= e["dataloader_ms_per_step"]
    assert f.impact_ms == e["replay_gain_ms_per_step"] and f.evidence["impact_method"].startswith("replay")
    assert f.fixes[0] == "dataloader-workers-pin-memory"


@pytest.mark.parametrize("run", ["ddp2_ioclean", "dp2_clean"])
def test_the_clean_twins_loaders_are_not_named(run):
    assert _findings(CPU / run / "traces") == []


def test_a_single_gpu_loader_costs_the_device_idle_while_it_loads():
    """gpu-h100/dataloader_bound: one rank, nothing to replay: the impact stays the device idle."""
    (f,) = _findings(SHARED / "real" / "gpu-h100" / "dataloader_bound")
    assert f.evidence["impact_method"].startswith("device idle")
    assert "replay_gain_ms_per_step" not in f.evidence["per_rank"]["0"]


def test_a_slow_loader_nobody_waits_for_is_not_named():
    """dp8_clean_1step (8 ranks on 2 cores, one step): rank 6's DataLoader call takes over 10 ms, but the replay
    gains nothing without it (its rank had slack at the next collective): the step was not held by it."""
    assert _findings(CPU / "dp8_clean_1step" / "traces") == []


def test_with_the_replay_the_severity_follows_the_impact():
    (f,) = _findings(CPU / "ddp2_ioloader" / "traces")
    assert f.impact_pct >= 5.0 and f.severity == "high"   # 14.3 ms of a ~60 ms step: high by the priority table


@pytest.mark.parametrize("run", ["ddp2_ioloader", "dp2_slowloader"])
def test_the_cpu_jobs_slow_loaders_are_their_golden_answers(run):
    from checkrun import assert_golden

    assert_golden("slow-dataloader", run, _findings(CPU / run / "traces"))
