"""Real DistributedDataParallel jobs (gloo, CPU): the reducer all-reduces its buckets during the backward and
the step waits for the last one, a shape the what-if and slow-rank tests of test_replay.py (plain all_reduce
after the backward) were not built on. tests/data/real_cpu/ddp2_* (PROVENANCE.md there): a rank with 15 extra
matmuls per step, a rank whose data loader does 14 ms of work per batch, and the clean job recorded twice; a rank
whose data loader waits 14 ms per batch on I/O (ddp2_ioloader, time.sleep) and its clean twin recorded four times."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import need
from stepdoctor.analysis.replay import prepare, what_if
from stepdoctor.tools import api

CPU = Path(__file__).parent / "data" / "real_cpu"
RUNS = [("ddp2_slowrank", 1, "compute", "host_ops"), ("ddp2_slowloader", 1, "free", "data_loading"),
        ("ddp2_ioloader", 1, "free", "data_loading")]
TWIN = {"ddp2_slowrank": "ddp2_clean", "ddp2_slowloader": "ddp2_clean", "ddp2_ioloader": "ddp2_ioclean"}


def _repeats(run: str) -> list[str]:
    """"" (the folder's own recording) and its repeats that keep their traces."""
    base = need(CPU / run)
    return ["", *sorted(p.name for p in base.glob("repeat*") if (p / "traces").is_dir())]


def _prof(run: str, repeat: str = ""):
    return api.load(need(CPU / run / repeat / "traces"))


def _clean_ms() -> list[float]:
    return [float(np.mean([s.measured for s in prepare(_prof("ddp2_clean", r))[0]])) for r in ("", "repeat2")]


@pytest.mark.parametrize("run", ["ddp2_clean", "ddp2_slowrank", "ddp2_slowloader", "ddp2_ioclean", "ddp2_ioloader"])
def test_null_replay_of_ddp_steps(run):
    """All four profiled steps are replayed: a host-only rank's last ProfilerStep is whole (it ends in the same
    op as the step before it), so it is kept."""
    steps, rep = prepare(_prof(run))
    assert rep.abstained_steps == [] and [s.si.step for s in steps] == [14, 15, 16, 17]
    assert max(s.error_pct for s in rep.steps) <= 2.0
    # the buckets overlap the backward: the main thread does not wait for each of them
    assert not steps[0].si.rows["sync"].all()


@pytest.mark.parametrize(("run", "rank", "subject", "cause"), RUNS)
def test_slow_rank_names_the_planted_ddp_rank_and_its_cause(run, rank, subject, cause):
    rep = api.issues(_prof(run), checks=["slow-rank"])
    assert [(f.ranks, f.subject) for f in rep.findings] == [([rank], subject)]
    f = rep.findings[0]
    assert f.evidence["dimension"] == "replay" and f.evidence["before"]["cause"] == cause
    assert what_if(_prof(run)).verdict.startswith(f"one slow worker: rank {rank}:")
    for repeat in _repeats(TWIN[run]):
        assert api.issues(_prof(TWIN[run], repeat), checks=["slow-rank"]).findings == []
        assert not what_if(_prof(TWIN[run], repeat)).verdict.startswith(("one slow", "slow workers"))


def test_the_extra_compute_rank_at_the_median_predicts_the_clean_ddp_job():
    pred = what_if(_prof("ddp2_slowrank"), ranks_at_median=[1]).scenarios[0].predicted_step_ms
    clean = _clean_ms()
    noise = float(np.std(clean, ddof=1) / np.mean(clean))
    assert abs(pred - np.mean(clean)) / np.mean(clean) <= max(0.10, 2 * noise), (pred, clean)


@pytest.mark.xfail(strict=True, reason="profiled, the slow loader costs only ~3 ms (unprofiled ~15 ms): the "
                   "profiler's overhead on 2 shared cores hides it, so the replay's -12.1 ms cannot land on the "
                   "profiled clean twin (PROVENANCE.md of ddp2_slowloader)")
def test_the_slow_loader_rank_at_the_median_predicts_the_clean_ddp_job():
    pred = what_if(_prof("ddp2_slowloader"), ranks_at_median=[1]).scenarios[0].predicted_step_ms
    clean = _clean_ms()
    assert abs(pred - np.mean(clean)) / np.mean(clean) <= 0.10, (pred, clean)


def test_the_io_bound_loader_rank_at_the_median_lands_within_the_clean_jobs_noise():
    """ddp2_ioloader: in the profiled steps the 14 ms sleep does not show above this VM's profiler noise (its
    steps average 62.4 ms against the clean twin's 63.6 ms, 15% between the twin's recordings: PROVENANCE.md),
    so only the issue's bound is asserted here: within 10% of the clean job, or twice its run-to-run noise.
    The diagnosis (rank 1, its loader) is asserted above."""
    preds = [what_if(_prof("ddp2_ioloader", r), ranks_at_median=[1]).scenarios[0].predicted_step_ms
             for r in _repeats("ddp2_ioloader")]
    clean = [float(np.mean([s.measured for s in prepare(_prof("ddp2_ioclean", r))[0]]))
             for r in _repeats("ddp2_ioclean")]
    noise = float(np.std(clean, ddof=1) / np.mean(clean))
    assert len(preds) == 2 and len(clean) == 4
    assert abs(np.mean(preds) - np.mean(clean)) / np.mean(clean) <= max(0.10, 2 * noise), (preds, clean)
