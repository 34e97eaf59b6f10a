"""uneven-work: on real CPU jobs (tests/data/real_cpu/, PROVENANCE.md in each): rank 1 of tp2pp2_slowrank runs
19 extra matmuls per step that the replay finds hidden in the pipeline's bubble, so slow-rank names nobody and
this check names it, low; the clean twins and the ranks slow-rank names already stay silent; the golden
answer of the planted case. Also: a knowledge base that cannot be read is said, not silently fixless."""

from __future__ import annotations

from pathlib import Path

import pytest
from checkrun import assert_golden

from conftest import need
from stepdoctor.tools import api

CPU = Path(__file__).resolve().parent.parent / "data" / "real_cpu"


def _issues(run: str, repeat: str = "", checks: tuple[str, ...] = ("uneven-work",)):
    return api.issues(api.load(need(CPU / run / repeat / "traces")), checks=list(checks))


@pytest.mark.parametrize("repeat", ["", "repeat2"])
def test_the_hidden_extra_work_is_named_with_its_ops(repeat):
    rep = _issues("tp2pp2_slowrank", repeat)
    [f] = rep.findings
    assert (f.check, f.ranks, f.subject, f.severity) == ("uneven-work", [1], "aten::matmul", "low")
    e = f.evidence["per_rank"]["1"]
    # PROVENANCE.md: 19 extra 384x384 matmuls per step (each followed by a tanh), rank 0 its only peer
    assert e["peers"] == [0] and e["steps"] == [14, 15, 16, 17]
    ops = {o["op"]: o["extra_per_step"] for o in e["ops"]}
    assert ops["aten::matmul"] == 19 and ops["aten::tanh"] == 19
    assert e["extra_ms_per_step"] > 20 and e["recovered_ms"] < 5   # hidden: moving it recovers little
    assert "would gain nothing" in f.message and "rank 0" in f.message


@pytest.mark.parametrize("run", ["tp2pp2_clean", "pp2dp2_clean", "dp4_loaderclean", "tp2dp2_clean", "dp4_slowloader"])
def test_ranks_with_the_same_ops_are_silent(run):
    """The clean twins run one schedule on every rank; dp4_slowloader's loader does its extra work inside the
    DataLoader op every rank runs once per step (slow-dataloader's finding, not this one)."""
    assert _issues(run).findings == []


@pytest.mark.parametrize("run", ["tp2dp2_slowrank", "tp2pp2dp2_slowrank_1step"])
def test_a_rank_slow_rank_names_is_left_to_it(run):
    rep = _issues(run, checks=("uneven-work", "slow-rank"))
    assert [f.check for f in rep.findings if f.severity != "low"] == ["slow-rank"]
    assert not [f for f in rep.findings if f.check == "uneven-work"]


def test_uneven_work_on_tp2pp2_slowrank_is_its_golden_answer():
    assert_golden("uneven-work", "tp2pp2_slowrank", _issues("tp2pp2_slowrank").findings)


def test_a_knowledge_base_that_cannot_be_read_is_a_warning(monkeypatch):
    from stepdoctor.knowledge import loader

    def broken():
        raise loader.FixLoadError("bad.yaml: not a fix")

    monkeypatch.setattr(loader, "fixes_for", lambda *a, **k: broken())
    prof = api.load(need(CPU / "tp2pp2_slowrank" / "traces"))
    ctx = api.context(prof)
    from stepdoctor.analysis.checks.base import run_checks

    run = run_checks(ctx, only=["uneven-work"])
    assert run.findings and run.findings[0].fixes == []
    assert any("knowledge base could not be read (bad.yaml: not a fix)" in w for w in run.warnings)
