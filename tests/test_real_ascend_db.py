"""Real torch_npu DB exports (../shared/data/real/ascend/msinsight-pt-db-l{0,1}, PROVENANCE.md): the rows the
DB reader stores against the DB read here independently, the CLI's exit codes, the text export of the same job
(another collection of it) and damaged copies."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from conftest import SHARED, need
from stepdoctor.tools import api
from stepdoctor.tools.cli import main as cli_main

REAL = SHARED / "real" / "ascend"
LEVELS = ["l0", "l1"]
VENDOR = {"computing": "computing_ns", "communication_not_overlapped": "comm_not_overlapped_ns",
          "overlapped": "overlapped_ns", "communication": "communication_ns", "free": "free_ns",
          "stage": "stage_ns", "bubble": "bubble_ns", "preparing": "preparing_ns"}


def _sql(path: Path, q: str) -> list[tuple]:
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return con.execute(q).fetchall()
    finally:
        con.close()


def _out(folder: Path, rank: int) -> Path:
    return folder / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT"


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("command", ["breakdown", "issues"])
def test_cli_exits_0(level: str, command: str, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("STEPDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    assert cli_main([command, str(need(REAL / f"msinsight-pt-db-{level}"))]) == 0


@pytest.mark.parametrize("level", LEVELS)
def test_vendor_rows_equal_step_trace_time(level: str):
    """vendor_step_trace = analysis.db StepTraceTime, µs -> ns, every field."""
    folder = need(REAL / f"msinsight-pt-db-{level}")
    prof = api.load(str(folder))
    for rank in (0, 1):
        cols = ", ".join(VENDOR)
        want = [(int(r[0]), *(round(v * 1000) for v in r[1:]))
                for r in _sql(_out(folder, rank) / "analysis.db", f"SELECT step, {cols} FROM StepTraceTime")]
        got = prof.rows(f"SELECT step, {', '.join(VENDOR.values())} FROM vendor_step_trace WHERE rank = ?", [rank])
        assert got == want and len(got) == 1


@pytest.mark.parametrize("level", LEVELS)
def test_device_rows_are_the_dbs(level: str):
    """Kernels = COMPUTE_TASK_INFO's tasks, collectives = COMMUNICATION_OP, HCCL tasks = COMMUNICATION_TASK_INFO
    (srcRank/dstRank 4294967295 = none -> NULL), the step = STEP_TIME, counts and total ns."""
    folder = need(REAL / f"msinsight-pt-db-{level}")
    prof = api.load(str(folder))
    for rank in (0, 1):
        db = _out(folder, rank) / f"ascend_pytorch_profiler_{rank}.db"
        kern = _sql(db, "SELECT count(*), sum(endNs - startNs) FROM TASK WHERE globalTaskId IN "
                        "(SELECT globalTaskId FROM COMPUTE_TASK_INFO)")[0]
        assert prof.rows("SELECT count(*), sum(dur_ns) FROM device_ops WHERE rank = ? AND category = 'compute'",
                         [rank]) == [kern]
        ops = _sql(db, "SELECT count(*), sum(endNs - startNs) FROM COMMUNICATION_OP")[0]
        assert prof.rows("SELECT count(*), sum(elapse_ns) FROM comm_ops WHERE rank = ?", [rank]) == [ops]
        n_tasks, n_none = _sql(db, "SELECT count(*), sum(dstRank = 4294967295) FROM COMMUNICATION_TASK_INFO")[0]
        assert n_none > 0
        assert prof.rows("SELECT count(*), count(*) - count(dst_rank) FROM comm_tasks WHERE rank = ?",
                         [rank]) == [(n_tasks, n_none)]
        assert prof.rows("SELECT step, start_ns, end_ns FROM steps WHERE rank = ?", [rank]) == \
            [(50, *_sql(db, "SELECT startNs, endNs FROM STEP_TIME")[0])]


def test_comm_analyzer_rows_reach_their_ops():
    """Level1's CommAnalyzerTime (start ~13 µs after COMMUNICATION_OP.startNs) gives each op its transit and
    wait time, ms -> ns."""
    folder = need(REAL / "msinsight-pt-db-l1")
    prof = api.load(str(folder))
    for rank in (0, 1):
        want = sorted((n, round(t * 1e6), round(w * 1e6)) for n, t, w in _sql(
            _out(folder, rank) / "analysis.db", "SELECT hccl_op_name, transit_time, wait_time FROM CommAnalyzerTime"))
        got = prof.rows("SELECT name, transit_ns, wait_ns FROM comm_ops WHERE rank = ? ORDER BY name", [rank])
        assert got == want and len(got) == 4


@pytest.mark.parametrize("level", LEVELS)
def test_db_and_text_exports_hold_the_same_job(level: str):
    """The text export is another collection of the same job: same ranks, step, kernels and collectives (their
    times differ run to run, so the numbers are compared in test_real_ascend against each export's own table)."""
    db = api.load(str(need(REAL / f"msinsight-pt-db-{level}")))
    text = api.load(str(need(REAL / f"msinsight-pt-text-{level}")))
    q_steps = "SELECT rank, step FROM steps ORDER BY 1, 2"
    assert db.rows(q_steps) == text.rows(q_steps) == [(0, 50), (1, 50)]
    q_kern = "SELECT rank, count(*), count(DISTINCT name) FROM device_ops WHERE category = 'compute' GROUP BY 1"
    assert db.rows(q_kern) == text.rows(q_kern)
    # hcom_allReduce__<run id>_<k>_1: the middle number differs per collection
    q_coll = "SELECT rank, op_type, count(*) FROM comm_ops GROUP BY 1, 2 ORDER BY 1, 2"
    if level == "l1":       # Level0 text writes no communication.json
        assert db.rows(q_coll) == text.rows(q_coll) == [(0, "allreduce", 4), (1, "allreduce", 4)]


def _damaged_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "job"
    shutil.copytree(need(REAL / "msinsight-pt-db-l1"), dst)
    for p in dst.rglob("*"):
        p.chmod(0o755 if p.is_dir() else 0o644)
    return dst


def test_damaged_table_costs_only_its_rows(tmp_path: Path):
    job = _damaged_copy(tmp_path)
    db = _out(job, 1) / "ascend_pytorch_profiler_1.db"
    with sqlite3.connect(db) as con:
        page = con.execute("PRAGMA page_size").fetchone()[0]
        root = con.execute("SELECT rootpage FROM sqlite_master WHERE name = 'MEMORY_RECORD'").fetchone()[0]
    with open(db, "r+b") as f:       # overwrite the table's root page
        f.seek((root - 1) * page)
        f.write(b"\xff" * page)
    prof = api.load(str(job))
    assert any("1 table(s) unreadable" in w and "MEMORY_RECORD" in w for w in prof.warnings)
    assert prof.rows("SELECT count(*) FROM device_ops WHERE rank = 1 AND category = 'compute'") == [(187,)]


def test_unreadable_db_keeps_the_step_table(tmp_path: Path, monkeypatch):
    job = _damaged_copy(tmp_path)
    db = _out(job, 1) / "ascend_pytorch_profiler_1.db"
    db.write_bytes(db.read_bytes()[:200_000])          # truncated
    prof = api.load(str(job))
    assert any("keeps only the step table" in w for w in prof.warnings)
    b = api.breakdown(str(job))
    r1 = next(r for r in b.rows if r.rank == 1)
    want = _sql(_out(job, 1) / "analysis.db", "SELECT computing FROM StepTraceTime")[0][0] / 1000
    assert r1.compute_ms == pytest.approx(want, abs=1e-6)
    # nothing usable left at all: exit 2
    for rank in (0, 1):
        (_out(job, rank) / f"ascend_pytorch_profiler_{rank}.db").write_bytes(b"not sqlite" * 100)
        (_out(job, rank) / "analysis.db").unlink()
    monkeypatch.setenv("STEPDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    assert cli_main(["breakdown", str(job)]) == 2


def test_opaque_connection_ids_are_interned(tmp_path: Path):
    """TASK.connectionId is a plain INTEGER column, so an id beyond int64 arrives as TEXT: it is opaque and stored
    as a dense negative BIGINT (CANN_API.connectionId is an INTEGER PRIMARY KEY: always int64 there)."""
    job = _damaged_copy(tmp_path)
    db = _out(job, 0) / "ascend_pytorch_profiler_0.db"
    with sqlite3.connect(db) as con:
        (conn,) = con.execute("SELECT t.connectionId FROM TASK t JOIN COMPUTE_TASK_INFO c "
                              "ON c.globalTaskId = t.globalTaskId ORDER BY t.startNs LIMIT 1").fetchone()
        n = con.execute("UPDATE TASK SET connectionId = ? WHERE connectionId = ?", (str(2**64 - 7), conn)).rowcount
    assert n >= 1
    prof = api.load(str(job))
    assert prof.rows("SELECT DISTINCT correlation_id FROM device_ops WHERE rank = 0 AND correlation_id < 0") == \
        [(-1,)]
    assert prof.rows("SELECT count(*) FROM device_ops WHERE rank = 0 AND category = 'compute'") == [(187,)]
