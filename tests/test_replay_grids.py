"""Real jobs of shapes the replay was not built on (tests/data/real_cpu/, PROVENANCE.md in each): a TP x DP grid
whose gloo collectives name no group while every rank runs two families of groups of the same size, a TP-only
job with a late rank, and a three-stage pipeline with a heavy middle stage; each recorded twice with its clean
twin. Four ranks share two cores here, so op times move with the other ranks' load: a rank's extra compute
is told by the ops it runs that its peers do not (replay/work.py), not by its time alone."""

from __future__ import annotations

from pathlib import Path

import pytest
from checkrun import assert_predicts_twin

from conftest import need
from stepdoctor.analysis.metrics import collectives
from stepdoctor.tools import api

CPU = Path(__file__).parent / "data" / "real_cpu"
REPEATS = ["", "repeat2"]
PLANTED = {"tp2dp2_slowrank": ("slow-rank", [3], "compute"), "tp4_late": ("slow-rank", [2], "free"),
           "pp3_heavy": ("stage-imbalance", [1], "stage 2 of 3")}
TWIN = {"tp2dp2_slowrank": "tp2dp2_clean", "tp4_late": "tp4_clean", "pp3_heavy": "pp3_clean"}


def _prof(run: str, repeat: str = ""):
    return api.load(need(CPU / run / repeat / "traces"))


@pytest.mark.parametrize("repeat", REPEATS)
def test_tp_and_dp_collectives_are_matched_within_their_own_groups(repeat):
    """8 all_reduces per step and rank: 6 of the TP group (3 in the forward, 3 in the backward), then the 2 DP
    gradient buckets. Matched in order on the world they would pair every rank with every other; each family
    alone would pair one of the two kinds with the wrong peers."""
    prof = _prof("tp2dp2_slowrank", repeat)
    df, _ = collectives.instances(lambda q: prof.sql(q))
    pairs = df.groupby("inst").agg(ranks=("rank", lambda r: tuple(sorted(r))), k=("k", "first"))
    by_k = {int(k): sorted(set(g)) for k, g in pairs.groupby("k")["ranks"]}
    assert sorted(by_k) == list(range(1, 33))                        # 4 steps x 8
    for k, groups in by_k.items():
        want = [(0, 2), (1, 3)] if (k - 1) % 8 >= 6 else [(0, 1), (2, 3)]
        assert groups == want, (k, groups)


@pytest.mark.parametrize("repeat", REPEATS)
@pytest.mark.parametrize("run", sorted(PLANTED))
def test_the_planted_rank_or_stage_is_named_and_its_clean_twin_nothing(run, repeat):
    check, ranks, subject = PLANTED[run]
    rep = api.issues(_prof(run, repeat), checks=["slow-rank", "stage-imbalance"])
    high = [(f.check, f.ranks, f.subject) for f in rep.findings if f.severity != "low"]
    assert high == [(check, ranks, subject)]
    f = next(f for f in rep.findings if f.severity != "low")
    if check == "slow-rank":
        assert f.evidence["dimension"] == "replay"
        assert f.evidence["before"]["cause"] == ("host_ops" if subject == "compute" else "untraced")
        assert api.what_if(_prof(run, repeat)).verdict.startswith(f"one slow worker: rank {ranks[0]}:")
    twin = api.issues(_prof(TWIN[run], repeat), checks=["slow-rank", "stage-imbalance"])
    assert twin.findings == []


WHATIF = [("tp2dp2_slowrank", "repeat2", {"ranks_at_median": [3]}), ("tp4_late", "", {"ranks_at_median": [2]}),
          ("tp4_late", "repeat2", {"ranks_at_median": [2]}), ("pp3_heavy", "", {"stages_at_median": [2]}),
          pytest.param("tp2dp2_slowrank", "", {"ranks_at_median": [3]}, marks=pytest.mark.xfail(
              strict=True, reason="predicts 116.1 ms against the clean twin's 101.4 (+14.5%, bound 11.6%): the other "
              "ranks' own time, not only rank 3's, is inflated by rank 3's extra work on the 2 shared cores")),
          pytest.param("pp3_heavy", "repeat2", {"stages_at_median": [2]}, marks=pytest.mark.xfail(
              strict=True, reason="predicts 125.7 ms against the clean twin's 113.5 (+10.7%, bound 10%)"))]


@pytest.mark.parametrize(("run", "repeat", "change"), WHATIF)
def test_the_what_if_predicts_the_clean_twin(run, repeat, change):
    assert_predicts_twin(_prof(run, repeat), change, [_prof(TWIN[run], r) for r in REPEATS])
