"""Raw msprof output (../shared/data/real/ascend, PROVENANCE.md in each folder), read by the msprof reader
called directly on a RankSource; expected numbers are recomputed here from the files themselves."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from conftest import SHARED, need
from stepdoctor.analysis.errors import ProfileError
from stepdoctor.analysis.ingest import msprof
from stepdoctor.analysis.ingest.base import RankSource

REAL = SHARED / "real" / "ascend"
PROF = REAL / "mindinsight-fixtures" / "profiler"
SERVER = REAL / "msinsight-server-fixtures"


def _read(path: Path):
    t = msprof.read_rank(RankSource(path=path, format="ascend_msprof"))
    return t, t.frames()


def _file_tasks(timeline: Path) -> tuple[int, int, dict[int, int]]:
    """Distinct Ascend Hardware AI_CORE/AI_CPU tasks of the msprof_*.json files: count, total ns, and the
    Iteration Time spans (id -> start ns)."""
    seen, iters = {}, {}
    for f in sorted(timeline.glob("msprof_*.json")):
        ev = json.loads(f.read_text())
        hw = {e["pid"] for e in ev if e.get("ph") == "M" and e["name"] == "process_name"
              and e["args"]["name"] == "Ascend Hardware"}
        for e in ev:
            if e.get("ph") != "X" or e["pid"] not in hw:
                continue
            if e.get("cat") == "Iteration Time":
                iters[e["args"]["Iteration ID"]] = round(e["ts"] * 1000)
            elif e.get("args", {}).get("Task Type") in ("AI_CORE", "AI_CPU"):
                seen[(e["tid"], e["ts"], e["name"])] = round(e["dur"] * 1000)
    return len(seen), sum(seen.values()), iters


@pytest.mark.parametrize("job,dev", [("PROF_000001_20230818142704322_COJGGGCANRMICFBC", 0),
                                     ("PROF_000001_20230818142704567_GQFAMHBKGODKJMLA", 1)])
def test_prof_folder_timeline(job: str, dev: int):
    path = need(PROF / job)
    t, f = _read(path)
    assert t.warnings == []
    n, total, iters = _file_tasks(path / f"device_{dev}" / "timeline")
    ops = f["device_ops"]
    comp = ops[ops["category"] == "compute"]
    assert (len(comp), int(comp["dur_ns"].sum())) == (n, total)
    assert len(comp) == 1390 and len(ops) == 4910
    # ten iterations, one per msprof_<dev>_2_<k>.json; every compute task lies in one
    assert dict(zip(f["steps"]["step"], f["steps"]["start_ns"], strict=True)) == iters
    assert sorted(iters) == list(range(1, 11)) and comp["step"].notna().all()
    # one AllReduce per iteration (HCCL "Communication Kernel"), its Notify/Memcpy/Reduce tasks on 4 planes
    assert len(f["comm_ops"]) == 10 and set(f["comm_ops"]["op_type"]) == {"allreduce"}
    assert len(f["comm_tasks"]) == 3370
    assert f["comm_tasks"]["dst_rank"].isna().any()      # 4294967295 = none, stored NULL
    assert f["ranks"]["device_id"].tolist() == [dev] and f["ranks"]["ai_core_num"].tolist() == [32]


def test_standalone_msprof_db():
    db = need(SERVER / "full_db" / "msprof_0.db")
    t, f = _read(db)
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    want = con.execute("SELECT count(*), sum(endNs - startNs) FROM TASK WHERE globalTaskId IN "
                       "(SELECT globalTaskId FROM COMPUTE_TASK_INFO)").fetchone()
    ops = f["device_ops"]
    comp = ops[ops["category"] == "compute"]
    assert (len(comp), int(comp["dur_ns"].sum())) == tuple(want) == (11, 663872)
    assert len(ops) + len(f["comm_tasks"]) == con.execute("SELECT count(*) FROM TASK").fetchone()[0]
    # no STEP_TIME in a raw msprof DB: one window, said so; no framework table is expected
    assert len(f["steps"]) == 1
    assert any("one step 0" in w for w in t.warnings)
    assert not any("PYTORCH_API" in w or "META_DATA" in w for w in t.warnings)
    assert f["ranks"]["framework"].isna().all()


@pytest.mark.parametrize("sub", ["normal", "slice"])
def test_placeholder_exports_are_nothing_usable(sub: str):
    """msprof/{normal,slice} hold 0-byte placeholders: the reader says so instead of inventing a profile."""
    path = need(SERVER / "msprof" / sub)
    with pytest.raises(ProfileError, match=r"empty \(0 bytes\).*nothing usable"):
        _read(path)


def test_damaged_timeline_costs_only_its_file(tmp_path: Path):
    src = need(PROF / "PROF_000001_20230818142704322_COJGGGCANRMICFBC" / "device_0" / "timeline")
    d = tmp_path / "device_0" / "timeline"
    d.mkdir(parents=True)
    for f in sorted(src.glob("msprof_*.json")):
        (d / f.name).write_bytes(f.read_bytes())
    (d / "msprof_0_2_10.json").write_bytes(b'[{"name": "process_na')   # truncated
    t, f = _read(tmp_path)
    assert any("1 of 10 timeline file(s)" in w for w in t.warnings)
    assert len(f["steps"]) == 9 and 0 < len(f["device_ops"]) < 4910


def test_breakdown_through_discovery_and_store(monkeypatch):
    """The whole path: discovery names these ascend_msprof, the store keeps every row, the breakdown runs."""
    from stepdoctor.analysis.ingest.discover import discover
    from stepdoctor.tools import api

    job, db = need(PROF / "PROF_000001_20230818142704322_COJGGGCANRMICFBC"), need(SERVER / "full_db")
    if discover(job).sources[0].format != "ascend_msprof":
        pytest.skip("discovery does not recognise raw msprof folders here")
    b = api.breakdown(str(job))
    assert b.profile.steps == list(range(1, 11)) and all(r.compute_ms > 0 for r in b.rows)
    b = api.breakdown(str(db))
    # one window over the 11 kernels, which do not overlap: compute = their total (663 872 ns)
    assert [(r.step, r.compute_ms) for r in b.rows] == [(0, 0.663872)]
