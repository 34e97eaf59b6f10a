"""A second set of real jobs, recorded and run blind before anything was changed for them
(evals/bench/results-2026-12-04-blind.md): TP x PP, DP x PP with a late rank, DP with a slow data loader and an
8-rank TP x PP x DP grid with one profiled step, each with its clean twin, two recordings each
(tests/data/real_cpu/<run>/PROVENANCE.md). What they showed and what these tests hold:

- the 3D grid's gloo collectives name no group and its two gradient buckets tie under the TP and DP matchings:
  they run on their process group's own worker threads, which tell them apart (metrics/coll_groups.py);
- a stage whose excess is one rank's (extra work, a stall) is not a heavy stage: stage-imbalance and the
  what-if verdict ask that the stage's ranks stand apart (replay/whatif.stage_apart);
- a rank that stands out in the one profiled step of a clean job, with no work its peers do not do, is a
  one-off as far as one step can tell: named low, with the reason."""

from __future__ import annotations

from pathlib import Path

import pytest
from checkrun import assert_predicts_twin

from conftest import need
from stepdoctor.analysis.metrics import collectives
from stepdoctor.tools import api

CPU = Path(__file__).parent / "data" / "real_cpu"
REPEATS = ["", "repeat2"]
CHECKS = ["slow-rank", "stage-imbalance", "slow-dataloader"]
TWIN = {"tp2pp2_slowrank": "tp2pp2_clean", "pp2dp2_late": "pp2dp2_clean",
        "dp4_slowloader": "dp4_loaderclean", "tp2pp2dp2_slowrank_1step": "tp2pp2dp2_clean_1step"}


def _prof(run: str, repeat: str = ""):
    return api.load(need(CPU / run / repeat / "traces"))


def _named(run: str, repeat: str) -> list[tuple[str, list[int]]]:
    rep = api.issues(_prof(run, repeat), checks=CHECKS)
    return sorted((f.check, f.ranks) for f in rep.findings if f.severity != "low")


@pytest.mark.parametrize("repeat", REPEATS)
def test_the_3d_grid_matches_each_collective_within_its_own_group(repeat):
    """14 all_reduces per rank in the step: 12 of the TP group, then 2 gradient buckets of the DP group."""
    prof = _prof("tp2pp2dp2_slowrank_1step", repeat)
    df, _ = collectives.instances(lambda q: prof.sql(q))
    ar = df[df["coll"] == "allreduce"]
    pairs = ar.groupby("inst").agg(ranks=("rank", lambda r: tuple(sorted(r))), k=("k", "first"))
    by_k = {int(k): sorted(set(g)) for k, g in pairs.groupby("k")["ranks"]}
    assert sorted(by_k) == list(range(1, 15))
    for k, groups in by_k.items():
        want = [(0, 2), (1, 3), (4, 6), (5, 7)] if k >= 13 else [(0, 1), (2, 3), (4, 5), (6, 7)]
        assert groups == want, (k, groups)


@pytest.mark.parametrize("repeat", REPEATS)
def test_the_slow_rank_of_the_3d_grid_is_named_and_no_stage(repeat):
    assert _named("tp2pp2dp2_slowrank_1step", repeat) == [("slow-rank", [6])]
    f = next(f for f in api.issues(_prof("tp2pp2dp2_slowrank_1step", repeat), checks=["slow-rank"]).findings
             if f.ranks == [6])
    assert f.evidence["before"]["cause"] == "host_ops" and f.impact_ms > 30


@pytest.mark.parametrize("repeat", REPEATS)
def test_the_slow_loader_rank_is_named_with_its_loader(repeat):
    rep = api.issues(_prof("dp4_slowloader", repeat), checks=CHECKS)
    assert {tuple(f.ranks) for f in rep.findings} == {(1,)}
    assert any(f.check == "slow-dataloader" for f in rep.findings)


@pytest.mark.parametrize("repeat", REPEATS)
@pytest.mark.parametrize("run", ["tp2pp2_slowrank", "pp2dp2_late"])
def test_one_ranks_excess_is_not_a_heavy_stage(run, repeat):
    """tp2pp2_slowrank: rank 1's extra matmuls; pp2dp2_late: rank 2's sleep. Each raised its stage's mean work
    past the threshold, and stage-imbalance named the whole stage (blind run). The stage's other rank is not
    heavy: nobody is named a stage, and no finding blames a rank that was not planted."""
    planted = {"tp2pp2_slowrank": [1], "pp2dp2_late": [2]}[run]
    assert all(ranks == planted for _, ranks in _named(run, repeat))
    assert not api.what_if(_prof(run, repeat)).verdict.startswith("one slow stage")


@pytest.mark.parametrize("repeat", REPEATS)
@pytest.mark.parametrize("run", sorted(set(TWIN.values())))
def test_the_clean_twins_are_silent(run, repeat):
    assert _named(run, repeat) == []


def test_a_one_off_in_the_one_profiled_step_is_low_and_says_why():
    """tp2pp2dp2_clean_1step: nothing planted, yet rank 6's one profiled step took 320 ms against 150-189 ms
    (PROVENANCE.md): it was slow in that step, which one step cannot tell from always."""
    rep = api.issues(_prof("tp2pp2dp2_clean_1step"), checks=["slow-rank"])
    f = next(f for f in rep.findings if f.ranks == [6])
    assert f.severity == "low" and f.evidence["noise_tested"] is False
    assert "one profiled step" in f.message and "3 or more steps" in f.message


WHATIF = [("tp2pp2_slowrank", "", {"ranks_at_median": [1]}), ("pp2dp2_late", "", {"ranks_at_median": [2]}),
          ("pp2dp2_late", "repeat2", {"ranks_at_median": [2]}), ("dp4_slowloader", "", {"no_stalls": [1]}),
          ("dp4_slowloader", "repeat2", {"no_stalls": [1]}),
          ("tp2pp2dp2_slowrank_1step", "", {"ranks_at_median": [6]}),
          ("tp2pp2dp2_slowrank_1step", "repeat2", {"ranks_at_median": [6]}),
          pytest.param("tp2pp2_slowrank", "repeat2", {"ranks_at_median": [1]}, marks=pytest.mark.xfail(
              strict=True, reason="predicts 169.2 ms against the clean twin's 133.4 (+26.8%, bound 13.7%): rank 1's "
              "extra work sits in the pipeline's bubble in the replay, but on 2 shared cores it slows the other "
              "ranks' own ops, which the replay keeps as measured"))]


@pytest.mark.parametrize(("run", "repeat", "change"), WHATIF)
def test_the_what_if_predicts_the_clean_twin(run, repeat, change):
    assert_predicts_twin(_prof(run, repeat), change, [_prof(TWIN[run], r) for r in REPEATS])


def test_the_what_if_says_what_it_does_not_model_about_a_shared_host(cluster4):
    """Every CPU run here has its ranks on one host ("vm" in each trace's host_name) sharing its 2 cores: the
    what-if says that its gains can be larger than predicted there (the strict xfails above); a job with
    devices gets no such word."""
    from stepdoctor.analysis.replay.job import shared_hosts

    w = api.what_if(_prof("tp2pp2_slowrank")).warnings
    assert any(x.startswith("ranks 0-3 run without a device on one host (vm)") for x in w)
    assert shared_hosts(cluster4) == []
