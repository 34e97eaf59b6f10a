"""Pipeline jobs on the cross-rank replay: send / recv pair by their peers, so a stage that waits in recv is
replayed as waiting, not as working; a heavy stage is named by stage-imbalance (never as a slow rank), and the
what-if with it balanced predicts the same job recorded without the plant.

Real recordings: tests/data/real_cpu/{pp2,dp2pp2}_{clean,heavy} (torch 2.13 CPU, gloo; PROVENANCE.md there):
stage 2 of the heavy runs has 2.5x wider blocks. Their repeats keep only meta/, so the run-to-run noise of the
clean job is read from the unprofiled step times the script measured (README "Noise")."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import need
from stepdoctor.analysis.errors import ProfileError
from stepdoctor.analysis.replay import prepare, what_if
from stepdoctor.tools import api

CPU = Path(__file__).parent / "data" / "real_cpu"
PIPES = [("pp2_heavy", "pp2_clean", [1]), ("dp2pp2_heavy", "dp2pp2_clean", [2, 3])]


def _prof(name: str):
    return api.load(need(CPU / name / "traces"))


def _steady(run: str) -> list[float]:
    """Per recording of the run (the folder and its repeats): the mean over ranks of the median unprofiled step
    (steps 3..first profiled - 1 and last profiled + 2..end, as the README defines it)."""
    out = []
    base = need(CPU / run)
    for d in [base, *sorted(base.glob("repeat*"))]:
        per = []
        for f in sorted((d / "meta").glob("step_times_rank*.json")):
            m = json.loads(f.read_text())
            prof = m["profiled_steps"]
            ms = m["step_ms"]
            keep = [v for i, v in enumerate(ms) if 3 <= i < prof[0] or i >= prof[-1] + 2]
            per.append(float(np.median(keep)))
        out.append(float(np.mean(per)))
    return out


def test_send_and_recv_pair_by_their_peers():
    """rank = stage x dp + dp_index: rank 0 pairs with 2 and 1 with 3; every send has its receive."""
    prof = _prof("dp2pp2_heavy")
    df = prof.sql("SELECT rank, op_type, peer_rank, count(*) AS n FROM comm_ops WHERE op_type IN ('send', 'receive') "
                  "GROUP BY ALL ORDER BY ALL")
    assert {(int(r), int(p)) for r, p in zip(df["rank"], df["peer_rank"], strict=True)} == \
        {(0, 2), (2, 0), (1, 3), (3, 1)}
    steps, rep = prepare(prof)
    assert rep.abstained_steps == [] and "p2p" in (rep.source or "")
    pairs = [s.si.rows[s.si.rows["inst"].isin(s.si.rows.groupby("inst").filter(lambda g: len(g) == 2)["inst"])]
             for s in steps]
    assert all(len(p) > 0 for p in pairs)


@pytest.mark.parametrize(("bad", "good", "heavy"), PIPES)
def test_the_heavy_stage_is_named_with_its_replayed_impact_and_the_clean_twin_nothing(bad, good, heavy):
    rep = api.issues(_prof(bad), checks=["stage-imbalance", "slow-rank"])
    assert [(f.check, f.ranks, f.subject) for f in rep.findings] == [("stage-imbalance", heavy, "stage 2 of 2")]
    f = rep.findings[0]
    assert f.severity == "high" and f.evidence["impact_method"].startswith("replay")
    assert f.evidence["stage_source"] == "send/receive partners"
    assert 0.1 * f.evidence["gap_ms"] < f.impact_ms <= f.evidence["gap_ms"]
    assert api.issues(_prof(good), checks=["stage-imbalance", "slow-rank"]).findings == []
    w = api.what_if(_prof(bad))
    assert w.verdict.startswith(f"one slow stage: stage 2 (ranks {', '.join(map(str, heavy))})"), w.verdict
    assert not api.what_if(_prof(good)).verdict.startswith(("one slow", "slow workers"))


@pytest.mark.parametrize(("bad", "good", "heavy"), PIPES)
def test_the_stage_balanced_predicts_the_job_without_the_heavy_stage(bad, good, heavy):
    """Within 10% of the clean twin's profiled step, or twice the clean job's run-to-run noise. A balanced
    pipeline is the target: the clean twin's last stage also holds the loss, so the prediction runs below it."""
    w = api.what_if(_prof(bad), stages_at_median=[2])
    pred = w.scenarios[0].predicted_step_ms
    measured = float(np.mean([s.measured_ms for s in w.replay.steps]))
    truth = float(np.mean([s.measured_ms for s in what_if(_prof(good)).replay.steps]))
    steady = _steady(good)
    noise = float(np.std(steady, ddof=1) / np.mean(steady))
    assert pred < measured - 0.5 * (measured - truth)
    assert abs(pred - truth) / truth <= max(0.10, 2 * noise), (pred, truth, noise)


def test_a_pipeline_whose_peers_are_unknown_is_not_replayed_and_says_why(tmp_path):
    """The same real traces with the peers' arguments removed (as a trace recorded without record_shapes has
    none): a stage's wait in recv would read as its own work, so nothing is replayed, in one line."""
    out = tmp_path / "traces"
    out.mkdir()
    for f in need(CPU / "pp2_heavy" / "traces").glob("*.json.gz"):
        doc = json.loads(gzip.decompress(f.read_bytes()))
        for e in doc["traceEvents"]:
            if e.get("name") in ("c10d::send", "c10d::recv_"):
                e.get("args", {}).pop("Concrete Inputs", None)
        (out / f.name).write_bytes(gzip.compress(json.dumps(doc).encode()))
    shutil.copytree(CPU / "pp2_heavy" / "meta", tmp_path / "meta")
    with pytest.raises(ProfileError, match="the only communication is pipeline send/recv, and their peers"):
        what_if(api.load(out))
    assert not [f for f in api.issues(api.load(out), checks=["slow-rank"]).findings
                if f.evidence.get("dimension") == "replay"]
