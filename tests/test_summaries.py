"""Per-rank summaries (analysis/store/summaries.py): computed where a rank is parsed, they must give the very
rows the driver computes from the stored events. Every real profile kind in ../shared/data/real, generated
multi-rank profiles (here and in parse workers, whose Ascend text reader streams its big tables) and a
hand-made rank with receive ops are compared field by field, with exact equality."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import duckdb
import numpy as np
import pytest

from conftest import SHARED, need
from stepdoctor.analysis.build import open_profile
from stepdoctor.analysis.ingest.base import RankSource, RankTables
from stepdoctor.analysis.ingest.formats import FORMATS
from stepdoctor.analysis.metrics.breakdown import BreakdownRow, compute_breakdown
from stepdoctor.analysis.store import IngestOptions, Profile, parse, profile_info
from stepdoctor.analysis.store.summaries import KERNEL_TABLE, STEP_TABLE
from stepdoctor.analysis.store.writer import Writer, connect_for_writing, store_parsed

REAL = SHARED / "real"
MI = REAL / "ascend" / "mindinsight-fixtures"
REAL_PROFILES = [
    "ascend/msinsight-pt-text-l0", "ascend/msinsight-pt-text-l1",                 # Ascend text Level0 / 1
    "ascend/msinsight-pt-db-l0", "ascend/msinsight-pt-db-l1",                     # Ascend DB
    "ascend/mindinsight-fixtures/profiler/PROF_000001_20230818142704322_COJGGGCANRMICFBC",  # raw msprof
    "ascend/msinsight-server-fixtures/full_db",                                   # msprof DB
    "ascend/mindinsight-fixtures/cluster_propose",                                # MindSpore legacy, 4 ranks
    "ascend/mindinsight-fixtures/profiler",                                       # MindSpore legacy
    *(f"kineto/{d.name}" for d in sorted((REAL / "kineto").glob("*")) if d.is_dir()),
    *(f"gpu-h100/{d.name}/traces" for d in sorted((REAL / "gpu-h100").glob("*")) if (d / "traces").is_dir()),
]


def _dump(rows: list[BreakdownRow]) -> list[dict[str, Any]]:
    return [r.model_dump() for r in rows]


def assert_summaries_equal_events(prof: Profile) -> int:
    """The breakdown from the stored summaries equals the one from the events (default arguments, with the
    dropped steps, one rank, one step), field by field; the kernel totals equal a GROUP BY over device_ops.
    Returns the number of summary rows (a rank with steps has one per steps row)."""
    steps = prof.rows("SELECT count(*) FROM steps")[0][0]
    stored = prof.rows(f"SELECT count(*) FROM {STEP_TABLE}")[0][0]
    assert stored == steps, "every steps row has its summary row"
    ranks = [r[0] for r in prof.rows("SELECT DISTINCT rank FROM steps ORDER BY rank")]
    step_ids = [r[0] for r in prof.rows("SELECT DISTINCT step FROM steps ORDER BY step")]
    variants: list[dict[str, Any]] = [{}, {"include_dropped": True}]
    if ranks:
        variants += [{"ranks": [ranks[-1]]}, {"steps": [step_ids[0]]}, {"ranks": ranks[:1], "steps": step_ids[-1:]}]
    for kw in variants:
        got = compute_breakdown(prof, **kw)
        want = compute_breakdown(prof, from_events=True, **kw)
        assert _dump(got) == _dump(want), kw
    events = "SELECT rank, step, name, category, count(*), sum(dur_ns)::BIGINT, max(dur_ns) FROM device_ops " \
             "GROUP BY ALL"
    totals = f"SELECT rank, step, name, category, count, total_ns, max_ns FROM {KERNEL_TABLE}"
    assert prof.rows(f"({events}) EXCEPT ALL ({totals})") == []
    assert prof.rows(f"({totals}) EXCEPT ALL ({events})") == []
    return stored


@pytest.mark.parametrize("rel", REAL_PROFILES)
def test_real_profiles(rel: str, tmp_path: Path) -> None:
    prof = open_profile(need(REAL / rel), IngestOptions(cache_dir=tmp_path))
    assert_summaries_equal_events(prof)
    if prof.rows("SELECT count(*) FROM device_ops")[0][0]:
        assert prof.rows(f"SELECT count(*) FROM {KERNEL_TABLE}")[0][0] > 0


def test_real_ascend_text_through_parse_workers(tmp_path: Path) -> None:
    """In a parse worker the Ascend text reader hands its device ops and comm ops to the sink as it reads
    them: the summaries are computed from those blocks, and equal those of a rank parsed here."""
    path = need(REAL / "ascend" / "msinsight-pt-text-l1")
    here = open_profile(path, IngestOptions(cache_dir=tmp_path / "here", engine="here"))
    pool = open_profile(path, IngestOptions(cache_dir=tmp_path / "pool", engine="pool", workers=2))
    n = assert_summaries_equal_events(pool)
    assert n == 2
    for table in (STEP_TABLE, KERNEL_TABLE):
        assert sorted(pool.rows(f"SELECT * FROM {table}"), key=repr) == \
            sorted(here.rows(f"SELECT * FROM {table}"), key=repr)
    # the numbers themselves: rank 0's step 50 as the breakdown prints it, from both
    assert _dump(compute_breakdown(pool)) == _dump(compute_breakdown(here))


@pytest.mark.parametrize("vendor,engine", [("ascend", "here"), ("ascend", "pool"), ("kineto", "here"),
                                           ("kineto", "pool")])
def test_generated_multi_rank(vendor: str, engine: str, tmp_path: Path) -> None:
    from stepdoctor.evals.generate import Plant, Scenario, write_profile

    sc = Scenario(vendor=vendor, ranks=6, steps=3, seed=11,
                  plants=[Plant(check="slow-rank", ranks=[2]), Plant(check="exposed-comm-tail")])
    path = write_profile(sc, tmp_path / "profile")
    prof = open_profile(path, IngestOptions(cache_dir=tmp_path / "cache", engine=engine, workers=2))
    assert assert_summaries_equal_events(prof) >= 6 * 3
    assert len({r.rank for r in compute_breakdown(prof)}) == 6


def _fake_rank(src: RankSource, *, comm_ops: bool) -> RankTables:
    """One Ascend-like rank with two steps, compute and communication ops and receive ops: in comm_ops, or
    only as the trace's hcom_receive tasks (when `comm_ops` is False)."""
    t = RankTables(src.rank or 0)
    t.add("ranks", source_path=str(src.path), format="ascend_pt_text", vendor="ascend")
    t.extend("steps", {"step": [1, 2], "start_ns": [0, 10_000], "end_ns": [10_000, 20_000],
                       "device_start_ns": [500, None], "device_end_ns": [9_500, None]})
    names = ["MatMul", "hcom_allReduce_1", "hcom_receive_7", "HCOM-RECEIVE_x", "MemCopy", "MatMul"]
    t.extend("device_ops", {"step": [1, 1, 1, 2, None, 2], "name": names,
                            "category": ["compute", "communication", "communication", "communication", "memory",
                                         "compute"],
                            "start_ns": [1_000, 3_000, 4_000, 12_000, 300, 11_000],
                            "dur_ns": [2_500, 1_500, 700, 900, 100, 4_000]})
    if comm_ops:
        t.extend("comm_ops", {"step": [1, 2], "name": ["hcom_receive_7", "hcom_allReduce_9"],
                              "op_type": ["receive", "allreduce"], "start_ns": [4_000, 15_000],
                              "elapse_ns": [800, 300]})
    return t


@pytest.mark.parametrize("comm_ops", [True, False])
def test_receive_ops_make_the_bubble(comm_ops: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bubble comes from comm_ops' receive rows, else from the trace's hcom_receive tasks (`_` of the
    driver's LIKE is any character), as the driver computes it from the events."""
    fake = SimpleNamespace(read_rank=lambda src: _fake_rank(src, comm_ops=comm_ops))
    monkeypatch.setitem(FORMATS, "fake", SimpleNamespace(read_rank=lambda: fake.read_rank, streams=False, ascend=True))
    db = tmp_path / "p.duckdb"
    con, rows = connect_for_writing(db)
    writer = Writer(con, rows)
    for rank in (0, 1):
        src = RankSource(path=tmp_path / f"r{rank}", format="fake", rank=rank)
        t, parts = parse.parse_rank(src)
        assert store_parsed(writer, t, parts, src) is None
    writer.finish([])
    con.close()
    ro = duckdb.connect(str(db), read_only=True)
    prof = Profile(path=tmp_path, db_path=db, info=profile_info(ro, tmp_path), warnings=[], con=ro)
    assert assert_summaries_equal_events(prof) == 4
    r0 = [r for r in compute_breakdown(prof) if r.rank == 0]
    # step 1: receive 800 ns (comm_ops) or 700 ns (hcom_receive_7); step 2: the HCOM-RECEIVE task, 900 ns
    assert [r.bubble_ms for r in r0] == ([0.0008, 0.0] if comm_ops else [0.0007, 0.0009])
    # step 1's window is torch_npu's: the first compute/comm op starting in it (1,000; the memory copy at 300
    # does not count) to their last end (4,700); the all-reduce [3,000, 4,500) and the receive overlap the
    # MatMul [1,000, 3,500) for 500 ns
    s1, s2 = r0
    assert (s1.device_ms, s1.preparing_ms, s1.compute_ms, s1.communication_ms, s1.overlapped_ms) == \
        (0.0037, 0.001, 0.0025, 0.0017, 0.0005)
    # step 2 has no recorded device window: its ops from 11,000 to 15,000; Preparing unknown
    assert (s2.device_ms, s2.preparing_ms, s2.compute_ms) == (0.004, None, 0.004)
    assert np.isclose(s2.free_ms, 0.0)


def test_a_store_without_summaries_is_computed_from_events(tmp_path: Path) -> None:
    """A store whose summary tables are empty (built by other code) still gives the breakdown, from its
    events: the same rows as with the summaries."""
    path = need(REAL / "ascend" / "msinsight-pt-text-l0")
    prof = open_profile(path, IngestOptions(cache_dir=tmp_path))
    want = _dump(compute_breakdown(prof))
    copy = tmp_path / "copy.duckdb"
    con = duckdb.connect()
    con.execute(f"ATTACH '{prof.db_path}' AS src (READ_ONLY)")
    con.execute(f"ATTACH '{copy}' AS dst")
    con.execute("COPY FROM DATABASE src TO dst")
    con.execute(f"DELETE FROM dst.{STEP_TABLE}")
    con.close()
    ro = duckdb.connect(str(copy), read_only=True)
    bare = Profile(path=path, db_path=copy, info=profile_info(ro, path), warnings=[], con=ro)
    assert bare.rows(f"SELECT count(*) FROM {STEP_TABLE}") == [(0,)]
    assert _dump(compute_breakdown(bare)) == want


def test_a_summary_failure_costs_only_the_summary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A bug in the summaries never skips a rank: its summaries are left out, with a warning, and the
    driver computes its breakdown from its events."""
    from stepdoctor.analysis.store import summaries

    def broken(*_: Any, **__: Any) -> Any:
        raise ValueError("planted")

    monkeypatch.setattr(summaries, "step_breakdown_ns", broken)
    src = RankSource(path=need(REAL / "ascend" / "msinsight-pt-text-l0"), format="ascend_pt_text")
    from stepdoctor.analysis.ingest.discover import discover

    src = discover(src.path).sources[0]
    t, parts = parse.parse_rank(src)
    assert STEP_TABLE not in {name for name, _ in parts} and KERNEL_TABLE not in {name for name, _ in parts}
    assert any("per-rank summaries not computed (ValueError: planted)" in w for w in t.warnings)


def test_the_analysis_connection_spills_in_a_folder_of_its_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    """The read-only connection spills into a folder named for this process (removed as a stale temporary once
    it is gone), and takes DuckDB's memory limit from STEPDOCTOR_ANALYSIS_MEMORY_MB when it is set."""
    import os

    from stepdoctor.analysis.build import forget_opened
    from stepdoctor.analysis.store import cache

    path = need(REAL / "ascend" / "msinsight-pt-text-l0")
    monkeypatch.setenv("STEPDOCTOR_ANALYSIS_MEMORY_MB", "64")
    forget_opened()
    prof = open_profile(path, IngestOptions.from_environment(cache_dir=tmp_path))
    (limit, spill), = prof.rows("SELECT current_setting('memory_limit'), current_setting('temp_directory')")
    assert limit in ("61.0 MiB", "64.0 MiB") and spill == f"{prof.db_path}.tmp-{os.getpid()}-0.tmp"
    assert cache._TMP_RE.search(spill)
    assert_summaries_equal_events(prof)
    prof.close()
    forget_opened()
