"""collective-stall on real Ascend exports of one 8-rank job whose ranks 0 and 1 only were kept: both wait ~73 ms
per step inside hcom_allReduce__586_0_1 (and ~22 ms in __586_3_1) with neither late and 0.25 ms of transit.

The expected numbers are computed here from communication.json itself (not through stepdoctor): per op, the
least time a member spends in it after the later member's start, less its largest transit."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import SHARED, need
from stepdoctor.analysis.store import IngestOptions
from stepdoctor.tools import api

TEXT = SHARED / "real" / "ascend" / "msinsight-pt-text-l1"
DB = SHARED / "real" / "ascend" / "msinsight-pt-db-l1"


def _by_hand(root: Path) -> dict[str, float]:
    """op -> stall ms from the ranks' communication.json ("Start Timestamp(us)", "Elapse Time(ms)",
    "Transit Time(ms)"), where it is at least half of the held time and 0.2 ms."""
    ops: dict[str, list[tuple[float, float, float]]] = {}
    for f in sorted(root.glob("rank*_ascend_pt/ASCEND_PROFILER_OUTPUT/communication.json")):
        for step in json.loads(f.read_text()).values():
            for name, op in step["collective"].items():
                if name == "Total Op Info":
                    continue
                t = op["Communication Time Info"]
                start = t["Start Timestamp(us)"] / 1000
                ops.setdefault(name.split("@")[0], []).append((start, start + t["Elapse Time(ms)"],
                                                               t["Transit Time(ms)"]))
    out = {}
    for name, rows in ops.items():
        held = min(e for _, e, _ in rows) - max(s for s, _, _ in rows)
        stall = held - max(tr for *_, tr in rows)
        if held > 0 and stall >= 0.5 * held and stall >= 0.2:
            out[name] = stall
    return out


def _finding(path: Path, tmp_path: Path):
    rep = api.issues(api.load(path, IngestOptions(cache_dir=tmp_path / "cache")), checks=["collective-stall"])
    assert len(rep.findings) == 1, [f.title for f in rep.findings]
    rep.findings[0].evidence["world_size_source"] = rep.profile.world_size_source
    return rep.findings[0]


def test_the_ranks_wait_for_members_with_no_profile(tmp_path):
    f = _finding(need(TEXT), tmp_path)
    want = _by_hand(TEXT)
    assert set(want) == {"hcom_allReduce__586_0_1", "hcom_allReduce__586_3_1"}
    assert f.impact_ms == pytest.approx(sum(want.values()), abs=0.01)
    assert f.evidence["stall_ms_per_step"] == pytest.approx(want, abs=0.01)
    assert f.ranks == [0, 1] and f.severity == "high" and f.subject == "ranks with no profile"
    # no rank records the world size: the communication matrix's groups of 8 do
    assert f.evidence["missing_ranks"] == [2, 3, 4, 5, 6, 7]
    assert f.evidence["world_size_source"] == "communication groups"
    assert "ranks 2-7 have no profile here" in f.message and "8 members" in f.message
    assert f.fixes[0] == "profile-every-group-member"


def test_the_db_export_of_the_job_says_the_same(tmp_path):
    """The DB export of the job (another run of it) holds its communication groups in its own tables: the same
    world and the same missing ranks."""
    f = _finding(need(DB), tmp_path)
    assert f.ranks == [0, 1] and f.evidence["missing_ranks"] == [2, 3, 4, 5, 6, 7]
    assert f.evidence["world_size_source"] == "communication groups"
    assert 85 <= f.impact_ms <= 100 and f.evidence["worst"]["op"].startswith("hcom_allReduce__")


def test_with_every_member_profiled_the_collective_itself_stalls(tmp_path):
    """The same files with the communication matrices cut to ranks 0 and 1 (a 2-rank group): nobody is
    missing, so the stall is the collective's own."""
    root = tmp_path / "job"
    shutil.copytree(need(TEXT), root)
    for f in root.glob("rank*_ascend_pt/ASCEND_PROFILER_OUTPUT/communication_matrix.json"):
        d = json.loads(f.read_text())
        for step in d.values():
            for kind in step.values():
                for op in kind.values():
                    for link in [k for k in op if not set(k.split("-")) <= {"0", "1"}]:
                        del op[link]
        f.write_text(json.dumps(d))
    f = _finding(root, tmp_path)
    assert f.evidence["missing_ranks"] == [] and f.subject == "collective"
    assert "none is late: the collective itself stalls" in f.message
    assert f.fixes[0] == "collective-stall-triage"


def test_a_late_member_is_not_a_stall(tmp_path):
    """Generated 4-rank Ascend job, one rank 30 ms late into every collective (slow-rank's case): the others
    wait before the latest start, the op then moves its data, so nothing is held without data moving."""
    from stepdoctor.evals.generate import Plant, Scenario, write_profile

    write_profile(Scenario(vendor="ascend", ranks=4, steps=3, seed=5, plants=[Plant("slow-rank")]), tmp_path / "p")
    rep = api.issues(api.load(tmp_path / "p", IngestOptions(cache_dir=tmp_path / "cache")), checks=["collective-stall", "slow-rank"])
    assert [f.check for f in rep.findings] == ["slow-rank"]


def test_slow_ranks_says_whom_the_ranks_wait_for(tmp_path):
    """slow-ranks answers "who waits for whom": a rank held by the missing members says so in its verdict."""
    sr = api.slow_ranks(api.load(need(TEXT), IngestOptions(cache_dir=tmp_path / "cache")))
    assert any(f.check == "collective-stall" for f in sr.findings)
    v = {x.rank: x for x in sr.ranks}
    assert v[0].verdict == "waits" and v[0].waits_for == [2, 3, 4, 5, 6, 7]
    assert "no profile here" in v[0].cause


def test_the_stall_on_the_real_job_is_its_golden_answer(tmp_path):
    from checkrun import assert_golden

    rep = api.issues(api.load(need(TEXT), IngestOptions(cache_dir=tmp_path / "cache")), checks=["collective-stall"])
    assert_golden("collective-stall", "msinsight-pt-text", rep.findings)
