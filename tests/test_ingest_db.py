"""The Ascend DB reader: cluster4's DB export (from `evals.generate.to_db`) gives the text export's rows,
the DB is only read, a `[Text, Db]` export prefers the DB, and bad DBs fail in one line or degrade with a
warning."""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
from pathlib import Path

import pandas as pd
import pytest

from conftest import CLUSTER4, need
from stepdoctor.analysis.build import open_profile
from stepdoctor.analysis.errors import ProfileError
from stepdoctor.analysis.ingest.ascend_common import collective_of, group_hash
from stepdoctor.analysis.store import IngestOptions
from stepdoctor.evals.generate import mindspore as ms_gen
from stepdoctor.evals.generate.to_db import DB_TABLES, convert_profile, convert_rank, create_tables

RANK0 = "node0_40000_20250101120000100_ascend_pt"


@pytest.fixture(scope="module")
def cluster4_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("c4db") / "cluster4"
    dbs = convert_profile(need(CLUSTER4), out)
    assert [p.name for p in dbs] == [f"ascend_pytorch_profiler_{r}.db" for r in range(4)]
    return out


def _sorted(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    return df.sort_values(keys).reset_index(drop=True)


def test_cluster4_db_gives_the_text_rows(cluster4_db: Path, tmp_path: Path) -> None:
    text = open_profile(need(CLUSTER4), IngestOptions(cache_dir=tmp_path / "cache"))
    db = open_profile(cluster4_db, IngestOptions(cache_dir=tmp_path / "cache"))
    assert db.info.format == "ascend_pt_db" and text.info.format == "ascend_pt_text"
    assert (db.info.ranks, db.info.steps, db.info.world_size) == (text.info.ranks, text.info.steps, 4)
    assert not db.warnings

    # steps: host windows and device windows, to the ns
    q = "SELECT rank, step, start_ns, end_ns, device_start_ns, device_end_ns, kept FROM steps ORDER BY rank, step"
    pd.testing.assert_frame_equal(db.sql(q), text.sql(q))
    assert db.rows("SELECT device_start_ns - start_ns FROM steps WHERE rank = 0 AND step = 1") == [(15_250_000,)]

    # device ops: per (rank, category) counts and total durations; and the kernels themselves
    q = ("SELECT rank, category, task_type, count(*) AS n, sum(dur_ns) AS ns FROM device_ops "
         "GROUP BY ALL ORDER BY ALL")
    pd.testing.assert_frame_equal(db.sql(q), text.sql(q))
    assert db.rows("SELECT sum(dur_ns) FROM device_ops WHERE rank = 0 AND category = 'compute'") == [(37_243_840,)]
    cols = ["rank", "step", "name", "op_type", "category", "task_type", "stream_id", "start_ns", "dur_ns",
            "block_dim", "mix_block_dim", "op_state", "input_shapes", "input_dtypes", "input_formats",
            "output_shapes", "output_dtypes", "aic_mac_ratio", "aiv_vec_ratio", "size_bytes", "collective",
            "group_name"]
    sel = f"SELECT {', '.join(cols)} FROM device_ops"
    pd.testing.assert_frame_equal(_sorted(db.sql(sel), ["rank", "start_ns", "name"]),
                                  _sorted(text.sql(sel), ["rank", "start_ns", "name"]))

    # communication: ops (the JSON's µs start is rounded to 0.1 µs, the DB has exact ns), tasks, links ...
    q = ("SELECT rank, step, name, op_type, group_name, start_ns, elapse_ns, transit_ns, wait_ns, sync_ns, "
         "idle_ns, size_bytes FROM comm_ops ORDER BY rank, start_ns")
    c_db, c_txt = db.sql(q), text.sql(q)
    assert len(c_db) == 32 and (c_db["start_ns"] - c_txt["start_ns"]).abs().max() <= 1_000
    pd.testing.assert_frame_equal(c_db.drop(columns="start_ns"), c_txt.drop(columns="start_ns"))
    assert c_db.iloc[0][["transit_ns", "wait_ns", "size_bytes"]].tolist() == [950_000, 350_000, 3_000_300]
    for table, keys in (("comm_tasks", ["rank", "start_ns", "name"]), ("links", ["rank", "step", "op_name",
                                                                                "src_rank", "dst_rank"]),
                        ("comm_bandwidth", ["rank", "step", "op_name", "transport"]),
                        ("comm_packets", ["rank", "step", "op_name", "transport", "packet_bytes"]),
                        ("vendor_step_trace", ["rank", "step"]), ("freq_samples", ["rank", "ts_ns"]),
                        ("env_vars", ["rank", "name"])):
        pd.testing.assert_frame_equal(_sorted(db.sql(f"SELECT * FROM {table}"), keys),
                                      _sorted(text.sql(f"SELECT * FROM {table}"), keys), obj=table)
    assert db.rows("SELECT value FROM env_vars WHERE rank = 0 AND name = 'ASCEND_LAUNCH_BLOCKING'") == [("1",)]
    assert db.rows("SELECT count(*) FROM freq_samples") == [(8,)]

    # host ops: names, categories, times, depth and launch links
    sel = "SELECT rank, step, name, category, tid, start_ns, dur_ns, correlation_id, depth FROM host_ops"
    pd.testing.assert_frame_equal(_sorted(db.sql(sel), ["rank", "start_ns", "name", "dur_ns"]),
                                  _sorted(text.sql(sel), ["rank", "start_ns", "name", "dur_ns"]))

    # ranks (but format / path) and capabilities
    q = ("SELECT rank, vendor, framework, framework_version, device_name, device_id, world_size, ai_core_num, "
         "aiv_num, rated_freq_mhz, profiler_level, with_stack, time_origin_ns FROM ranks ORDER BY rank")
    pd.testing.assert_frame_equal(db.sql(q), text.sql(q))
    assert db.capabilities() == text.capabilities()


def test_cluster4_breakdown_db_within_0_1_pct_of_text(cluster4_db: Path, tmp_path: Path) -> None:
    from stepdoctor.analysis.metrics.breakdown import compute_breakdown

    text = compute_breakdown(open_profile(need(CLUSTER4), IngestOptions(cache_dir=tmp_path / "cache")))
    db = compute_breakdown(open_profile(cluster4_db, IngestOptions(cache_dir=tmp_path / "cache")))
    assert [(r.rank, r.step) for r in db] == [(r.rank, r.step) for r in text] and len(db) == 8
    for a, b in zip(db, text, strict=True):
        for f in ("step_ms", "compute_ms", "communication_ms", "comm_not_overlapped_ms", "free_ms",
                  "preparing_ms"):
            x, y = getattr(a, f), getattr(b, f)
            assert x == pytest.approx(y, rel=1e-3, abs=1e-6), (a.rank, a.step, f)
    r0 = db[0]
    assert (r0.step_ms, r0.communication_ms) == (100.0, 5.2) and r0.compute_ms == pytest.approx(18.627879)


def test_db_is_only_read(cluster4_db: Path, tmp_path: Path) -> None:
    """Read-only even when the profile is: no journal, no -shm, no cache next to the input."""
    rank = tmp_path / "ro" / RANK0
    shutil.copytree(cluster4_db / RANK0, rank)   # a DB-only export (cluster4_db has no text files)
    files = sorted(rank.rglob("*"))
    before = {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in files}
    for p in [*files, rank]:
        p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        prof = open_profile(rank, IngestOptions(cache_dir=tmp_path / "cache"))
        assert prof.info.ranks == [0] and prof.info.steps == [1, 2]
        after = sorted(rank.rglob("*"))
        assert after == files and {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in after} == before
    finally:
        for p in [rank, *files]:
            os.chmod(p, p.stat().st_mode | stat.S_IWUSR)


def test_text_beside_db_prefers_the_db(tmp_path: Path) -> None:
    convert_rank(need(CLUSTER4) / RANK0, tmp_path / "both" / RANK0, keep_text=True)
    prof = open_profile(tmp_path / "both", IngestOptions(cache_dir=tmp_path / "cache"))
    assert prof.info.format == "ascend_pt_db"
    assert any("read the DB" in w and "kernel_details.csv" in w and "trace_view.json" in w for w in prof.warnings)
    assert prof.rows("SELECT count(*) FROM device_ops") == [(104,)]       # not doubled by the text files


# --------------------------------------------------------------------------------------------------------
# bad DBs


def _rank_with_db(tmp_path: Path, make) -> Path:
    rank = tmp_path / "bad" / "node0_1_20250101120000000_ascend_pt"
    out = rank / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    (rank / "profiler_info_0.json").write_text('{"torch_npu_version": "2.1.0"}')
    make(out / "ascend_pytorch_profiler_0.db")
    return rank


def test_not_sqlite_is_one_line_profile_error(tmp_path: Path) -> None:
    rank = _rank_with_db(tmp_path, lambda p: p.write_bytes(b"this is not a database\n" * 100))
    with pytest.raises(ProfileError) as ei:
        open_profile(rank, IngestOptions(cache_dir=tmp_path / "cache"))
    msg = str(ei.value)
    assert "\n" not in msg and "ascend_pytorch_profiler_0.db" in msg and "not a readable SQLite database" in msg


def test_missing_required_table_is_one_line_profile_error(tmp_path: Path) -> None:
    def make(p: Path) -> None:
        con = sqlite3.connect(p)
        con.execute("CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY, value TEXT)")
        con.execute("CREATE TABLE SOMETHING_ELSE (x INTEGER)")
        con.commit()
        con.close()

    rank = _rank_with_db(tmp_path, make)
    with pytest.raises(ProfileError) as ei:
        open_profile(rank, IngestOptions(cache_dir=tmp_path / "cache"))
    msg = str(ei.value)
    assert "\n" not in msg and "missing required table(s) TASK" in msg


def test_empty_tables_warn_and_give_a_partial_result(tmp_path: Path) -> None:
    def make(p: Path) -> None:
        con = sqlite3.connect(p)
        create_tables(con, DB_TABLES)
        con.commit()
        con.close()

    rank = _rank_with_db(tmp_path, make)
    prof = open_profile(rank, IngestOptions(cache_dir=tmp_path / "cache"))
    assert prof.info.ranks == [0] and prof.info.steps == []
    w = " | ".join(prof.warnings)
    for table in ("TASK", "COMPUTE_TASK_INFO", "CANN_API", "PYTORCH_API", "STEP_TIME"):
        assert f"{table} is empty" in w
    assert not prof.has_table_rows("device_ops")
    assert prof.rows("SELECT framework, format FROM ranks") == [("pytorch", "ascend_pt_db")]


def test_missing_optional_tables_warn_and_keep_the_rest(cluster4_db: Path, tmp_path: Path) -> None:
    rank = tmp_path / "p" / RANK0
    shutil.copytree(cluster4_db / RANK0, rank)
    db = rank / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"
    con = sqlite3.connect(db)
    for t in ("STEP_TIME", "COMPUTE_TASK_INFO", "AICORE_FREQ"):
        con.execute(f"DROP TABLE {t}")
    con.commit()
    con.close()
    prof = open_profile(tmp_path / "p", IngestOptions(cache_dir=tmp_path / "cache"))
    w = " | ".join(prof.warnings)
    assert "table STEP_TIME missing" in w and "table COMPUTE_TASK_INFO missing" in w
    assert "whole collection is one step 0" in w
    assert prof.info.steps == [0]
    # kernels without COMPUTE_TASK_INFO stay compute (by their runtime task type), just unnamed
    assert prof.rows("SELECT count(*), sum(dur_ns) FROM device_ops WHERE category = 'compute'") == \
        [(96, 37_243_840)]
    assert prof.rows("SELECT count(*) FROM comm_ops") == [(8,)]
    assert "freq" not in prof.capabilities(0) and "kernel_details" not in prof.capabilities(0)


def test_analysis_db_cells_as_text_or_broken(cluster4_db: Path, tmp_path: Path) -> None:
    """analysis.db values as SQLite gives them: ranks as TEXT (with spaces), sizes as text, unreadable
    cells. A link without a readable src / dst is skipped; text numbers count as numbers; an unreadable
    bandwidth is NULL; the rest of the rows are those of the untouched DB."""
    rank = tmp_path / "p" / RANK0
    shutil.copytree(cluster4_db / RANK0, rank)
    good = open_profile(cluster4_db, IngestOptions(cache_dir=tmp_path / "c0"))
    want = good.rows("SELECT count(*), sum(size_bytes), sum(transit_ns) FROM links WHERE rank = 0")[0]
    con = sqlite3.connect(rank / "ASCEND_PROFILER_OUTPUT" / "analysis.db")
    n = con.execute("SELECT count(*) FROM CommAnalyzerMatrix").fetchone()[0]
    con.execute("UPDATE CommAnalyzerMatrix SET src_rank = ' ' || src_rank || ' ', "
                "transit_size = CAST(transit_size AS TEXT) WHERE rowid % 2 = 0")
    con.execute("UPDATE CommAnalyzerMatrix SET bandwidth = 'n/a' WHERE rowid % 3 = 0")
    con.execute("UPDATE CommAnalyzerMatrix SET dst_rank = 'x' WHERE rowid = 1")
    con.execute("UPDATE CommAnalyzerMatrix SET step = 'step 1' WHERE rowid % 5 = 0")
    con.commit()
    con.close()
    prof = open_profile(tmp_path / "p", IngestOptions(cache_dir=tmp_path / "c1"))
    got = prof.rows("SELECT count(*), count(bandwidth_gbps), count(DISTINCT step) FROM links")[0]
    assert n > 10 and got[0] == want[0] - 1 == n - 1
    assert got[1] == sum(1 for r in range(2, n + 1) if r % 3)  # 'n/a' -> NULL, the rest kept
    assert got[2] == good.rows("SELECT count(DISTINCT step) FROM links WHERE rank = 0")[0][0]
    # the dropped row is the first link; every other row keeps its size and time
    first = good.rows("SELECT size_bytes, transit_ns FROM links WHERE rank = 0 LIMIT 1")[0]
    assert prof.rows("SELECT sum(size_bytes), sum(transit_ns) FROM links")[0] == \
        (want[1] - first[0], want[2] - first[1])


def test_mapped_converts_each_kind_apart() -> None:
    """Distinct values are converted once, but never merged across kinds (1 == 1.0 == True)."""
    from stepdoctor.analysis.ingest.ascend_db.db import mapped

    calls: list[object] = []

    def fn(v: object) -> str:
        calls.append(v)
        return f"{type(v).__name__}:{v}"

    assert mapped([1, 1, None, 2, 1], fn) == ["int:1", "int:1", "NoneType:None", "int:2", "int:1"]
    assert len(calls) == 3
    assert mapped([1, 1.0, True], fn) == ["int:1", "float:1.0", "bool:True"]
    assert mapped(["a", None, "a"], fn) == ["str:a", "NoneType:None", "str:a"]


# --------------------------------------------------------------------------------------------------------
# MindSpore DB: how steps are found without STEP_TIME


def test_ms_db_steps_from_mstx_ranges(tmp_path: Path) -> None:
    plan = ms_gen.build_plan("slow_dataloader", n_steps=3)
    rank = tmp_path / "m" / "node0_1_20250101120000000_ascend_ms"
    db = ms_gen.write_db_rank(plan, rank, with_minddata=False)
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE MSTX_EVENTS (startNs INTEGER, endNs INTEGER, eventType INTEGER, rangeId INTEGER, "
                "category INTEGER, message INTEGER, globalTid INTEGER, endGlobalTid INTEGER, domainId INTEGER, "
                "connectionId INTEGER)")
    top = con.execute("SELECT max(id) FROM STRING_IDS").fetchone()[0]
    lead = 50_000    # the host marks a step 50 µs before its device work (launches precede execution)
    for i, s in enumerate(plan.steps):
        con.execute("INSERT INTO STRING_IDS VALUES (?, ?)", (top + 1 + i, f"step {10 + i}"))
        con.execute("INSERT INTO MSTX_EVENTS VALUES (?, ?, 2, ?, 0, ?, 0, 0, 0, NULL)",
                    (s.start_ns - lead, s.end_ns - lead, i, top + 1 + i))
    con.commit()
    con.close()
    prof = open_profile(tmp_path / "m", IngestOptions(cache_dir=tmp_path / "cache"))
    assert prof.info.steps == [10, 11, 12]
    assert any("3 MSTX ranges" in w for w in prof.warnings)
    st = prof.sql("SELECT * FROM steps ORDER BY step")
    assert st["start_ns"].tolist() == [s.start_ns - lead for s in plan.steps]
    # a task belongs to the range its launch (CANN_API, 25 µs before it) falls in: each step's GetNext
    assert (st["device_start_ns"] - st["start_ns"]).tolist() == [lead + 20_000] * 3


def test_ms_db_single_iteration_is_one_whole_step(tmp_path: Path) -> None:
    plan = ms_gen.build_plan("fp32_matmul", n_steps=1)
    ms_gen.write_db_rank(plan, tmp_path / "m" / "node0_1_20250101120000000_ascend_ms", with_minddata=False)
    prof = open_profile(tmp_path / "m", IngestOptions(cache_dir=tmp_path / "cache"))
    assert prof.info.steps == [0]
    assert any("whole collection is one step 0" in w for w in prof.warnings)
    (s0, s1), = prof.rows("SELECT start_ns, end_ns FROM steps")
    # SESSION_TIME_INFO (1 ms around the run) is wider than the tasks: the step is the collection window
    assert (s0, s1) == (plan.steps[0].start_ns - 1_000_000, plan.steps[0].end_ns + 1_000_000)


def test_helpers_match_the_formats() -> None:
    assert group_hash("10.0.0.1%enp0_60000_0_1700000000000000") == "18294791067709168601"
    assert group_hash("18294791067709168601") == "18294791067709168601"
    assert [collective_of(n) for n in ("hcom_allReduce__100_0_1", "hcom_reduceScatter_", "hcom_receive__3",
                                       "AllGather-op7", "hcom_alltoallv_", "Memcpy")] == \
        ["allreduce", "reducescatter", "receive", "allgather", "alltoallv", None]


def test_to_db_never_writes_in_place(cluster4_db: Path) -> None:
    with pytest.raises(ValueError, match="outside the input"):
        convert_rank(cluster4_db / RANK0, cluster4_db / RANK0 / "copy")


def test_db_file_copied_out_of_its_rank_dir(cluster4_db: Path, tmp_path: Path) -> None:
    src = cluster4_db / RANK0 / "ASCEND_PROFILER_OUTPUT"
    (tmp_path / "loose").mkdir()
    shutil.copyfile(src / "ascend_pytorch_profiler_0.db", tmp_path / "loose" / "ascend_pytorch_profiler_3.db")
    shutil.copyfile(src / "analysis.db", tmp_path / "loose" / "analysis.db")
    prof = open_profile(tmp_path / "loose" / "ascend_pytorch_profiler_3.db", IngestOptions(cache_dir=tmp_path / "cache"))
    assert prof.info.ranks == [3] and prof.info.format == "ascend_pt_db" and prof.info.steps == [1, 2]
    assert prof.rows("SELECT count(*) FROM device_ops") == [(104,)]
    assert prof.rows("SELECT count(*) FROM comm_ops WHERE transit_ns IS NOT NULL") == [(8,)]
