"""The store: cache reuse, atomic writes, no writes into the profile, parallel ingest equals serial."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import CLUSTER4, KINETO, SHARED, need
from stepdoctor.analysis import build, store
from stepdoctor.analysis.build import forks, pool, wire
from stepdoctor.analysis.errors import ProfileError
from stepdoctor.analysis.ingest.base import parse_us_to_ns
from stepdoctor.analysis.ingest.discover import discover
from stepdoctor.analysis.store import IngestOptions, writer


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_exact_us_strings():
    assert parse_us_to_ns("1700000000015250.125") == 1700000000015250125
    assert parse_us_to_ns("1700000000015250.125\t") == 1700000000015250125
    assert parse_us_to_ns("12") == 12000
    assert parse_us_to_ns(1.5) == 1500
    # float64 cannot hold this exactly; the string path must
    assert float("1700000000015250.123") * 1000 != 1700000000015250123
    assert parse_us_to_ns("1700000000015250.123") == 1700000000015250123


def test_second_open_uses_cache_and_writes_nothing_into_profile(tmp_path, monkeypatch):
    src = need(KINETO / "trace_filter")
    prof_dir = tmp_path / "prof"
    shutil.copytree(src, prof_dir)
    before = _snapshot(prof_dir)
    cache = tmp_path / "cache"
    p1 = build.open_profile(prof_dir, IngestOptions(cache_dir=cache))
    assert not p1.from_cache
    build.forget_opened()
    calls = []
    p2 = build.open_profile(prof_dir, IngestOptions(cache_dir=cache, progress=lambda *a: calls.append(a)))
    assert p2.from_cache and not calls, "parsed again"
    assert p2.info == p1.info
    assert _snapshot(prof_dir) == before
    assert [f.name for f in cache.iterdir() if f.suffix == ".duckdb"] == [p1.db_path.name]


def test_changed_input_reingests(tmp_path):
    prof_dir = tmp_path / "prof"
    shutil.copytree(need(KINETO / "trace_filter"), prof_dir)
    cache = tmp_path / "cache"
    a = build.open_profile(prof_dir, IngestOptions(cache_dir=cache))
    f = next(prof_dir.glob("*rank-1*"))
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    build.forget_opened()
    b = build.open_profile(prof_dir, IngestOptions(cache_dir=cache))
    assert a.db_path != b.db_path and not b.from_cache
    # one database per profile: the one of the old input is gone
    assert sorted(f.name for f in cache.glob("*.duckdb")) == [b.db_path.name]


def test_a_rewrite_with_the_same_size_and_mtime_put_back_is_seen(tmp_path):
    """A kernel_details.csv rewritten with other values of the same size and its mtime put back: the ctime moved,
    so the cache is not used and the new values are read."""
    prof_dir = tmp_path / "prof"
    shutil.copytree(need(SHARED / "real" / "ascend" / "msinsight-pt-text-l1"), prof_dir)
    for p in prof_dir.rglob("*"):
        p.chmod(p.stat().st_mode | 0o200)
    cache = tmp_path / "cache"
    a = build.open_profile(prof_dir, IngestOptions(cache_dir=cache))
    f = next(prof_dir.rglob("kernel_details.csv"))
    st = f.stat()
    data = f.read_bytes()
    f.write_bytes(data.replace(b"MatMul", b"MutMal"))   # same length
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert f.stat().st_size == st.st_size and f.stat().st_mtime_ns == st.st_mtime_ns
    build.forget_opened()
    b = build.open_profile(prof_dir, IngestOptions(cache_dir=cache))
    assert not b.from_cache and b.db_path != a.db_path


def test_a_wal_mode_db_export_is_never_written_and_hits_the_cache(tmp_path, monkeypatch):
    """The real torch_npu DB export was left in WAL mode (-wal and -shm beside it): opening it read-only must not
    touch them (SQLite's mode=ro still writes -shm), so the input's fingerprint stays and the second open is a
    cache hit; the -wal's pages are read from a private copy."""
    prof_dir = tmp_path / "prof"
    shutil.copytree(need(SHARED / "real" / "ascend" / "msinsight-pt-db-l1"), prof_dir)
    for p in prof_dir.rglob("*"):
        p.chmod(p.stat().st_mode | 0o200)
    assert list(prof_dir.rglob("*.db-wal"))
    before = _snapshot(prof_dir)
    cache = tmp_path / "cache"
    first = build.open_profile(prof_dir, IngestOptions(cache_dir=cache))
    for _ in range(3):
        build.forget_opened()
        again = build.open_profile(prof_dir, IngestOptions(cache_dir=cache))
        assert again.from_cache and again.db_path == first.db_path
    assert _snapshot(prof_dir) == before
    assert len(list(cache.glob("*.duckdb"))) == 1


def test_the_cache_keeps_under_its_size_cap_least_recently_used_first(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    dirs = []
    for name in ("a", "b"):
        d = tmp_path / name
        shutil.copytree(need(KINETO / "trace_filter"), d)
        dirs.append(d)
    a = build.open_profile(dirs[0], IngestOptions(cache_dir=cache))
    size_mb = a.db_path.stat().st_size / 2**20
    monkeypatch.setenv("STEPDOCTOR_CACHE_MAX_MB", str(size_mb * 1.5))   # room for one database, not two
    build.forget_opened()
    b = build.open_profile(dirs[1], IngestOptions(cache_dir=cache))
    assert sorted(f.name for f in cache.glob("*.duckdb")) == [b.db_path.name]
    # the one just built is kept even when it alone is over the cap
    monkeypatch.setenv("STEPDOCTOR_CACHE_MAX_MB", "0")
    build.forget_opened()
    c = build.open_profile(dirs[0], IngestOptions(cache_dir=cache))
    assert sorted(f.name for f in cache.glob("*.duckdb")) == [c.db_path.name]


def test_crash_mid_ingest_leaves_no_usable_cache(tmp_path):
    prof_dir = need(KINETO / "trace_filter")
    cache = tmp_path / "cache"

    def boom(done, total, label):  # after the first rank is in the half-built database
        assert list(cache.glob("*.tmp-*")), "the database is built under a temporary name"
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        build.open_profile(prof_dir, IngestOptions(cache_dir=cache, engine="here", progress=boom), refresh=True)
    assert not list(cache.glob("*.duckdb")), "a partial database must never be left under the final name"
    assert not list(cache.glob("*.tmp-*"))


def test_parallel_ingest_equals_serial(tmp_path, monkeypatch):
    prof_dir = need(KINETO / "trace_filter")
    par = build.open_profile(prof_dir, IngestOptions(cache_dir=tmp_path / "par", workers=2, engine="pool"))
    build.forget_opened()
    ser = build.open_profile(prof_dir, IngestOptions(cache_dir=tmp_path / "ser", engine="here"))
    for t in ("steps", "device_ops", "host_ops"):
        q = f"SELECT * FROM {t} ORDER BY ALL"
        assert par.sql(q).equals(ser.sql(q)), t


def test_discovery_of_cluster_and_duplicate_rank(tmp_path):
    root = tmp_path / "two"
    shutil.copytree(need(CLUSTER4), root)
    dup = root / "node0_40009_20250101130000999_ascend_pt"
    shutil.copytree(next(root.glob("node0_40000_*")), dup)
    d = discover(root)
    assert [s.rank for s in d.sources] == [0, 1, 2, 3]
    assert d.sources[0].path == dup
    assert any("kept the newest" in w for w in d.warnings)


def test_missing_and_unrecognized_paths(tmp_path):
    with pytest.raises(ProfileError, match="no such file or directory"):
        discover(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProfileError, match="no recognizable profile"):
        discover(tmp_path / "empty")
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(ProfileError, match="not a profile"):
        discover(tmp_path / "x.txt")


# ---------------------------------------------------------------------------------------------------------
# The ingest path (typed columns, child processes, row-group commits) against a reference
# ---------------------------------------------------------------------------------------------------------

def _reference_rows(disc) -> dict[str, list[tuple]]:
    """Every table as the straightforward way builds it: each rank's `frames()` inserted with pandas."""
    import duckdb

    from stepdoctor.analysis.ingest.base import schema_sql, table_columns
    from stepdoctor.analysis.store.summaries import RankSummary

    con = duckdb.connect()
    con.execute(schema_sql())
    for src in disc.sources:
        t = store.read_source(src)
        for name, df in t.frames().items():
            con.register("_df", df)
            con.execute(f"INSERT INTO {name} SELECT * FROM _df")
            con.unregister("_df")
        # the per-rank summaries, from the rank's whole tables (the children's come from streamed blocks)
        summary = RankSummary(t.rank)
        for name, cols in t.parts():
            summary.add(name, cols)
        for name, cols in summary.parts([]):
            writer.insert(con, name, cols, t.rank)
        for w in t.warnings:
            con.execute("INSERT INTO ingest_warnings VALUES (?, NULL, ?)", [t.rank, w])
        for c in t.capabilities:
            con.execute("INSERT INTO capabilities VALUES (?, ?)", [t.rank, c])
    for w in disc.warnings:
        con.execute("INSERT INTO ingest_warnings VALUES (NULL, NULL, ?)", [w])
    return {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in table_columns()}


def _profile_rows(prof: store.Profile) -> dict[str, list[tuple]]:
    from stepdoctor.analysis.ingest.base import table_columns

    return {t: prof.rows(f"SELECT * FROM {t} ORDER BY ALL") for t in table_columns()}


@pytest.mark.parametrize("data", ["kineto/trace_filter", "kineto/trace_diff/control", "kineto/nccl_parser_config",
                                  "ascend/cluster4"])
@pytest.mark.parametrize("path", ["children", "here"])
def test_ingest_tables_equal_the_frames_reference(data, path, tmp_path, monkeypatch):
    prof_dir = need(SHARED / data)
    if path == "children":  # parse workers + ingest process, real row-group size and chunks
        prof = build.open_profile(prof_dir, IngestOptions(cache_dir=tmp_path, workers=2, engine="pool"))
    else:  # in this process, with tiny row groups: many commits, blocks split across them
        monkeypatch.setattr(writer, "ROW_GROUP_ROWS", 2048)
        prof = build.open_profile(prof_dir, IngestOptions(cache_dir=tmp_path, engine="here"))
    got, want = _profile_rows(prof), _reference_rows(discover(prof_dir))
    assert sum(map(len, want.values())) > 1000
    for t in want:
        assert got[t] == want[t], t


def test_parse_worker_imports_neither_pandas_nor_duckdb():
    import subprocess
    import sys

    code = ("import sys; import stepdoctor.analysis.store, stepdoctor.analysis.ingest.kineto; "
            "print(sorted(m for m in ('pandas', 'duckdb', 'pydantic') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_bad_rank_is_skipped_with_a_warning_in_child_processes(tmp_path, monkeypatch):
    prof_dir = tmp_path / "prof"
    shutil.copytree(need(KINETO / "trace_filter"), prof_dir)
    (prof_dir / "sampled_rank-7.json").write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, ')
    prof = build.open_profile(prof_dir, IngestOptions(cache_dir=tmp_path / "cache", workers=2, engine="pool"))
    assert prof.info.ranks == [0, 1]
    assert any(w.startswith("rank skipped:") and "sampled_rank-7.json" in w for w in prof.warnings)
    build.forget_opened()
    (prof_dir / "sampled_rank-0.json.gz").unlink()
    (prof_dir / "sampled_rank-1.json.gz").unlink()
    with pytest.raises(ProfileError, match=r"sampled_rank-7\.json"):
        build.open_profile(prof_dir, IngestOptions(cache_dir=tmp_path / "cache", workers=2, engine="pool"))


def test_an_ascend_rank_failing_after_it_sent_tables_is_removed(tmp_path, monkeypatch):
    """A parse worker sends an Ascend rank's communication tables before it reads its device data; when the
    rank then has none (an empty trace_view.json, no kernel_details.csv, no step table), the rows already
    inserted go, and the other ranks are stored. (A merely damaged trace keeps the rank.)"""
    prof_dir = tmp_path / "prof"
    shutil.copytree(need(CLUSTER4), prof_dir)
    out = next(prof_dir.glob("node0_40002_*")) / "ASCEND_PROFILER_OUTPUT"
    (out / "trace_view.json").write_bytes(b"")
    for name in ("kernel_details.csv", "step_trace_time.csv"):
        (out / name).unlink()
    prof = build.open_profile(prof_dir, IngestOptions(cache_dir=tmp_path / "cache", workers=2, engine="pool"))
    assert prof.info.ranks == [0, 1, 3]
    assert any(w.startswith("rank skipped:") and "trace_view.json" in w for w in prof.warnings)
    for table in ("comm_ops", "links", "device_ops", "host_ops"):
        ranks = [r for (r,) in prof.rows(f"SELECT DISTINCT rank FROM {table} ORDER BY rank")]
        assert ranks == [0, 1, 3], table


def test_streamed_ascend_tables_equal_the_kept_ones(tmp_path):
    """`read_rank(src, sink)`: the blocks the sink gets, and the tables kept, are block for block what
    `parts()` gives without a sink; count() includes what was streamed; add() to a streamed table raises."""
    import numpy as np

    from stepdoctor.analysis.ingest import ascend_text
    from stepdoctor.analysis.ingest.base import RankSource, RankTables, StoreError

    def blocks(parts):
        out: dict[str, list] = {}
        for table, cols in parts:
            out.setdefault(table, []).append({  # (NULL: masked, its data left out: NaN != NaN)
                c: (np.where(np.ma.getmaskarray(a), 0, np.ma.getdata(a)).tolist(), np.ma.getmaskarray(a).tolist())
                if isinstance(a, np.ndarray) else a.decode().tolist() for c, a in cols.items()})
        return out

    for rank_dir in sorted(need(CLUSTER4).glob("*_ascend_pt")):
        src = RankSource(path=rank_dir, format="ascend_pt_text", rank=int(rank_dir.name.split("_")[1]) - 40000)
        plain = ascend_text.read_rank(src)
        got: list = []
        streamed = ascend_text.read_rank(src, lambda rank, table, cols, got=got: got.append((table, cols)))
        assert {t for t, _ in got} == {t for t in ascend_text.STREAMED if plain.count(t)}
        assert blocks(plain.parts()) == blocks([*got, *streamed.parts()])
        for t in ascend_text.STREAMED:
            assert streamed.count(t) == plain.count(t)
    t = RankTables(0)
    t.stream(lambda *a: None, ["host_ops"])
    with pytest.raises(RuntimeError, match="host_ops"):
        t.add("host_ops", name="x")
    with pytest.raises(StoreError, match=r"host_ops\.name"):
        t.extend("host_ops", {"name": [None], "start_ns": [1], "dur_ns": [1]})


def test_writer_refuses_a_taken_rank_id_and_removes_an_aborted_rank(tmp_path):
    import numpy as np

    con, _ = writer.connect_for_writing(tmp_path / "w.duckdb")
    w = writer.Writer(con, 1024)
    ops = {"name": np.array(["k"] * 3000, dtype=object),
           "category": np.array(["compute"] * 3000, dtype=object),
           "start_ns": np.arange(3000), "dur_ns": np.ones(3000, dtype=np.int64)}
    assert w.claim(0) and not w.claim(0) and w.claim(1)
    w.data(0, "device_ops", ops)
    w.data(1, "device_ops", ops)
    w.data(0, "ranks", {"source_path": np.array(["a"], dtype=object),
                        "format": np.array(["kineto"], dtype=object), "vendor": np.array(["cuda"], dtype=object)})
    assert w.done(0, ["w0"], ["kernels"]) is None
    w.abort(1)  # e.g. its worker died half-way: rows in committed row groups and in the open one go
    assert w.claim(1)  # the id is free again
    w.finish(["global"])
    got = con.execute("SELECT rank, count(*) FROM device_ops GROUP BY rank").fetchall()
    assert got == [(0, 3000)]
    assert con.execute("SELECT * FROM ingest_warnings ORDER BY ALL").fetchall() == [(0, None, "w0"),
                                                                                  (None, None, "global")]
    con.close()


def _counting_writer(tmp_path, monkeypatch):
    """(connection, writer, the (table, rows) of every INSERT it makes) on a new database."""
    inserts: list[tuple[str, int]] = []
    real_insert = writer.insert

    def counting(cur, table, cols, rank):
        inserts.append((table, writer.row_count(cols)))
        real_insert(cur, table, cols, rank)

    monkeypatch.setattr(writer, "insert", counting)
    con, _ = writer.connect_for_writing(tmp_path / "w.duckdb")
    return con, writer.Writer(con, 1024), inserts


def test_writer_pools_small_blocks_across_ranks_and_aborts_pooled_rows(tmp_path, monkeypatch):
    """Blocks below POOL_BELOW_ROWS wait in a pool per table and go in together (one INSERT for several
    ranks); an aborted rank's rows leave whether they still wait in the pool or were already flushed."""
    import numpy as np

    from stepdoctor.analysis.ingest.base import Coded

    monkeypatch.setattr(writer, "CHUNK_ROWS", 50)  # the pool is flushed after 3 blocks of 20 rows
    con, w, inserts = _counting_writer(tmp_path, monkeypatch)

    def block(r: int) -> dict:
        names = ["mm", "add"] * 10
        cols = {"name": Coded(np.array([i % 2 for i in range(20)], dtype=np.int32), names[:2]) if r % 2
                else np.array(names, dtype=object),
                "category": np.array(["compute"] * 20, dtype=object),
                "start_ns": np.arange(20, dtype=np.int64) + 1000 * r, "dur_ns": np.full(20, r + 1, dtype=np.int64)}
        if r in (2, 3):  # another column set, with NULLs
            cols["step"] = np.ma.MaskedArray(np.arange(20, dtype=np.int64), mask=[i % 3 == 0 for i in range(20)])
        return cols

    for r in range(5):
        assert w.claim(r)
        w.data(r, "device_ops", block(r))
        if r == 2:
            w.abort(2)  # its block filled the pool (60 rows >= 50), which was flushed: deleted from the table
        elif r == 4:
            w.abort(4)  # still in the pool: dropped from it
        else:
            assert w.done(r, [f"w{r}"], ["kernels"]) is None
    w.finish(["global"])
    got = con.execute("SELECT rank, count(*), min(start_ns), max(dur_ns), count(step), "
                      "string_agg(DISTINCT name, ',' ORDER BY name) FROM device_ops GROUP BY rank ORDER BY rank").fetchall()
    assert got == [(0, 20, 0, 1, 0, "add,mm"), (1, 20, 1000, 2, 0, "add,mm"), (3, 20, 3000, 4, 13, "add,mm")]
    # ranks 0 and 1 in one INSERT and rank 2 (other columns) in another when the pool filled; rank 3 at finish
    assert sorted(n for t, n in inserts if t == "device_ops") == [20, 20, 40]
    assert con.execute("SELECT * FROM ingest_warnings ORDER BY ALL").fetchall() == [
        (0, None, "w0"), (1, None, "w1"), (3, None, "w3"), (None, None, "global")]
    assert con.execute("SELECT rank FROM capabilities ORDER BY rank").fetchall() == [(0,), (1,), (3,)]
    con.close()


def test_writer_inserts_the_ranks_rows_together_and_refuses_two_for_a_rank(tmp_path, monkeypatch):
    """A rank's `ranks` row is checked at done() and inserted with the others at finish(): one INSERT for
    every rank; a rank with two rows is skipped with its other rows, the rest is stored."""
    import numpy as np

    con, w, inserts = _counting_writer(tmp_path, monkeypatch)

    def ranks_row(r: int, n: int = 1) -> dict:
        return {"rank": np.full(n, r, dtype=np.int64), "source_path": np.array([f"/p/{r}"] * n, dtype=object),
                "format": np.array(["kineto"] * n, dtype=object), "vendor": np.array(["cuda"] * n, dtype=object)}

    errors = {}
    for r in range(4):
        assert w.claim(r)
        w.data(r, "env_vars", {"name": np.array(["HCCL_BUFFSIZE"], dtype=object)})
        w.data(r, "ranks", ranks_row(r, 2 if r == 2 else 1))
        errors[r] = w.done(r, [], [])
    w.finish([])
    assert errors[2] == "cannot store the ranks row: 2 rows for rank 2 (ranks [2])"
    assert [e for r, e in errors.items() if r != 2] == [None, None, None]
    assert con.execute("SELECT rank, source_path FROM ranks ORDER BY rank").fetchall() == [
        (0, "/p/0"), (1, "/p/1"), (3, "/p/3")]
    assert con.execute("SELECT DISTINCT rank FROM env_vars ORDER BY rank").fetchall() == [(0,), (1,), (3,)]
    assert [n for t, n in inserts if t == "ranks"] == [3]
    con.close()


def _slow_trace(path: Path) -> Path:
    """A gzip of 256 MB of blanks: a parse worker inflates it for seconds, long enough to be killed."""
    import gzip

    with gzip.open(path, "wb", compresslevel=1) as f:
        f.write(b'{"traceEvents": [')
        for _ in range(16):
            f.write(b" " * (1 << 24))
        f.write(b"]}")
    return path


def test_parse_worker_death_skips_its_rank(tmp_path):
    import threading

    import psutil

    from stepdoctor.analysis.ingest.base import RankSource

    good = next(need(KINETO / "trace_filter").glob("*rank-0*"))
    slow = _slow_trace(tmp_path / "rank1.json")
    con, rows = writer.connect_for_writing(tmp_path / "w.duckdb")
    w = writer.Writer(con, rows)
    seen: list[tuple[int, int, str]] = []

    def kill_when_blocked() -> None:
        while len(seen) < 1:
            threading.Event().wait(0.05)
        for p in psutil.Process().children(recursive=True):
            if "import parse_main as main" in " ".join(p.cmdline()):
                p.kill()

    threading.Thread(target=kill_when_blocked, daemon=True).start()
    sources = [RankSource(path=good, format="kineto", rank=0), RankSource(path=slow, format="kineto", rank=1)]
    _, stored, errors = pool.run_workers(sources, 1, lambda: w, lambda *a: seen.append(a))
    w.finish([])
    assert stored == 1 and len(errors) == 1
    assert "rank1.json: cannot parse: the parse worker died (killed by signal 9" in errors[0]
    assert con.execute("SELECT DISTINCT rank FROM host_ops").fetchall() == [(0,)]
    con.close()


def test_no_child_interpreter_falls_back_to_ingest_here(tmp_path, monkeypatch):
    import sys

    prof_dir = need(KINETO / "trace_filter")
    monkeypatch.setattr(sys, "executable", "/bin/false")  # e.g. an embedded Python: `-c` cannot run
    prof = build.open_profile(prof_dir, IngestOptions(cache_dir=tmp_path, workers=2, engine="pool"))
    assert prof.info.ranks == [0, 1]
    build.forget_opened()
    monkeypatch.undo()
    ref = build.open_profile(prof_dir, IngestOptions(cache_dir=tmp_path / "ref", workers=1))
    assert _profile_rows(prof) == _profile_rows(ref)


FORKED_DEATH = r"""
import json, os, sys
import psutil
from stepdoctor.analysis.build import forks, pool
from stepdoctor.analysis.store import writer
from stepdoctor.analysis.ingest.base import RankSource

forks.NOT_FOR_FORKS.add(os.dup(1))  # as in an ingest process: parse workers are forked
assert forks.may_fork()


class Writer:  # records what reaches the database
    def __init__(self):
        self.rows, self.aborted = {}, []
    def claim(self, r):
        return True
    def data(self, r, table, cols):
        self.rows[r] = self.rows.get(r, 0) + writer.row_count(cols)
    def done(self, r, *info):
        return None
    def abort(self, r):
        self.aborted.append(r)


pids, forked = [], []
def kill_workers(*progress):  # after rank 0 is stored: the worker is now inflating rank 1 (256 MB of blanks)
    if pids:
        return
    me = psutil.Process()
    for p in me.children():
        pids.append(p.pid)
        forked.append(p.cmdline() == me.cmdline())
        p.kill()
w = Writer()
sources = [RankSource(path=__import__("pathlib").Path(sys.argv[1]), format="kineto", rank=0),
           RankSource(path=__import__("pathlib").Path(sys.argv[2]), format="kineto", rank=1)]
_, stored, errors = pool.run_workers(sources, 1, lambda: w, kill_workers)
print(json.dumps({"stored": stored, "errors": errors, "rows": w.rows, "killed": len(pids), "forked": forked}))
"""


def test_forked_parse_worker_death_skips_its_rank(tmp_path):
    import json
    import subprocess
    import sys

    good = next(need(KINETO / "trace_filter").glob("*rank-0*"))

    slow = _slow_trace(tmp_path / "rank1.json")
    # the environment of an ingest process (no BLAS thread pool: it forks only while single-threaded)
    out = subprocess.run([sys.executable, "-c", FORKED_DEATH, str(good), str(slow)], capture_output=True,
                         text=True, timeout=120, env=forks.child_env())
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["stored"] == 1 and got["killed"] == 1 and got["forked"] == [True] and got["rows"]["0"] > 1000
    assert "rank1.json: cannot parse: the parse worker died (killed by signal 9" in got["errors"][0]


def test_frames_carry_columns_out_of_band_and_intact():
    """A frame's arrays cross the pipe as raw buffers (not inside the pickle) and come back equal and
    writable: masked arrays keep their mask, coded text its labels, object text its values."""
    import io
    import pickle

    import numpy as np

    from stepdoctor.analysis.ingest.base import Coded

    cols = {"i": np.arange(40_000, dtype=np.int64),
            "m": np.ma.MaskedArray(np.arange(5, dtype=np.int64), mask=[0, 1, 0, 0, 1]),
            "c": Coded(np.array([0, -1, 1], dtype=np.int32), ["a", "b"]),
            "o": np.array(["x", None, "zz"], dtype=object)}
    buf = io.BytesIO()
    wire.send(buf, b"D", (3, "host_ops", cols))
    assert buf.tell() < 40_000 * 8 + 2_000  # the int64 column is sent once, as its 320 kB of bytes
    inline = pickle.dumps(cols["i"], protocol=5)
    assert inline not in buf.getvalue()     # ... and not also inside the pickle
    buf.seek(0)
    kind, (rank, table, got) = wire.recv(buf)
    assert (kind, rank, table) == (b"D", 3, "host_ops")
    assert np.array_equal(got["i"], cols["i"]) and got["i"].flags.writeable
    assert isinstance(got["m"], np.ma.MaskedArray)
    assert got["m"].mask.tolist() == [False, True, False, False, True] and got["m"].data.tolist() == [0, 1, 2, 3, 4]
    assert got["c"].decode().tolist() == ["a", None, "b"]
    assert got["o"].tolist() == ["x", None, "zz"]
    assert wire.recv(buf) is None  # end of file
    buf = io.BytesIO()
    wire.send(buf, b"D", cols)
    cut = io.BytesIO(buf.getvalue()[:-10])  # a sender that died mid-buffer: no frame
    assert wire.recv(cut) is None


def test_finished_workers_are_released_not_waited_for(tmp_path):
    """Workers with nothing left to do are let go (their exit is reaped later, by _reap_exiting)."""
    from stepdoctor.analysis.ingest.base import RankSource

    files = sorted(need(KINETO / "trace_filter").glob("*.json*"))
    con, rows = writer.connect_for_writing(tmp_path / "w.duckdb")
    w = writer.Writer(con, rows)
    sources = [RankSource(path=f, format="kineto", rank=i) for i, f in enumerate(files)]
    _, stored, errors = pool.run_workers(sources, 2, lambda: w, lambda *a: None)
    w.finish([])
    assert (stored, errors) == (len(files), [])
    assert forks.reap_exiting() == 2  # both workers were released, none waited for
    assert forks.reap_exiting() == 0
    assert con.execute("SELECT count(DISTINCT rank) FROM host_ops").fetchone()[0] == len(files)
    con.close()


FORK_RULE = r"""
import json, os
from stepdoctor.analysis.build import forks
from stepdoctor.analysis.store import writer
import stepdoctor.analysis.ingest.ascend_text  # the Ascend reader loads pandas and DuckDB
forks.NOT_FOR_FORKS.add(os.dup(1))             # as in an ingest process
before = forks.may_fork()
con, _ = writer.connect_for_writing(__import__("pathlib").Path(os.environ["DB"]))
print(json.dumps([before, forks.may_fork()]))
"""


def test_ingest_process_forks_workers_with_duckdb_loaded_but_not_after_opening_a_database(tmp_path):
    """Ascend parse workers are forked (readers loaded, ~0.45 s saved each), never once a database is open."""
    import json
    import subprocess
    import sys

    env = {**forks.child_env(), "DB": str(tmp_path / "x.duckdb")}
    out = subprocess.run([sys.executable, "-c", FORK_RULE], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [True, False]


HOST_FORK = r"""
import json, os, sys, threading
from pathlib import Path
from stepdoctor.analysis import build, store
from stepdoctor.analysis.build.children import Child

roles, ran = [], []
init = Child.__init__
def spy(self, main, fork=False):
    roles.append([main.__name__.removesuffix("_main"), fork])
    init(self, main, fork)
Child.__init__ = spy
if sys.argv[2] == "thread":  # a host running a second thread is never forked
    threading.Thread(target=threading.Event().wait, daemon=True).start()
prof = build.open_profile(sys.argv[1], store.IngestOptions(cache_dir=Path(sys.argv[3]), workers=2, fork=True, engine="pool", background=lambda: ran.append([r for r, _ in roles])))
rows = prof.rows("SELECT rank, count(*) FROM host_ops GROUP BY rank ORDER BY rank")
build.reap_exiting()
print(json.dumps({"roles": roles, "background": ran, "rows": rows}))
"""


@pytest.mark.parametrize("host", ["alone", "thread"])
def test_cli_host_is_forked_for_the_ingest_process_only_when_it_runs_one_thread(tmp_path, host):
    """`open_profile(IngestOptions(fork=True))` (the CLI): a one-thread host is forked for the ingest process, which
    forks its workers; its background work starts once the ingest process runs; same rows either way."""
    import json
    import subprocess
    import sys

    prof_dir = need(KINETO / "trace_filter")
    out = subprocess.run([sys.executable, "-c", HOST_FORK, str(prof_dir), host, str(tmp_path / "c")],
                         capture_output=True, text=True, timeout=300, env=forks.child_env())
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["roles"] == [["ingest", host == "alone"]], "the host's own record: workers are the child's"
    assert got["background"] == [["ingest"]]
    ref = build.open_profile(prof_dir, IngestOptions(cache_dir=tmp_path / "ref", workers=1))
    assert got["rows"] == [list(r) for r in ref.rows(
        "SELECT rank, count(*) FROM host_ops GROUP BY rank ORDER BY rank")]
    assert got["rows"] and all(n > 0 for _, n in got["rows"])


def test_a_released_child_that_does_not_exit_is_killed_when_reaped():
    import subprocess
    import time

    stuck = subprocess.Popen(["sleep", "60"])
    forks.release(stuck)
    t = time.monotonic()
    assert forks.reap_exiting(timeout=0.2) == 1
    assert time.monotonic() - t < 5 and stuck.returncode == -9
    assert forks.reap_exiting() == 0


def test_input_stats_walk_like_os_walk(tmp_path):
    """The fingerprint's file list is os.walk's (sorted, files before subdirectories, unreadable entries
    skipped), so caches keep their keys; a symlinked directory is entered (the readers follow it), so a
    file changed behind it changes the key."""
    from stepdoctor.analysis.ingest.base import RankSource

    root = tmp_path / "node0_1_ascend_pt"
    for rel in ("b.json", "a.csv", "ASCEND_PROFILER_OUTPUT/trace_view.json", "PROF_1/device_0/info.json.0",
                "PROF_1/z.txt", "A/x"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "inside.json").write_text("{}")
    os.symlink(tmp_path / "elsewhere", root / "linked_dir")
    os.symlink(tmp_path / "missing", root / "dangling")
    os.symlink(root / "b.json", root / "c_link.json")
    want = []
    for d, dirs, files in os.walk(root, followlinks=True):
        dirs.sort()
        for f in sorted(files):
            p = Path(d) / f
            if p.exists():
                st = p.stat()
                want.append((str(p.relative_to(root)), st.st_size, store.version_stamp(st)))
    got = store.input_stats(RankSource(path=root, format="ascend_pt_text"))
    assert got == want
    assert [n for n, _, _ in got] == ["a.csv", "b.json", "c_link.json", "A/x",
                                      "ASCEND_PROFILER_OUTPUT/trace_view.json", "PROF_1/z.txt",
                                      "PROF_1/device_0/info.json.0", "linked_dir/inside.json"]
    (tmp_path / "elsewhere" / "inside.json").write_text('{"changed": 1}')
    assert store.input_stats(RankSource(path=root, format="ascend_pt_text")) != got
    os.symlink(root, root / "A" / "loop")   # a link back up is walked once
    assert len(store.input_stats(RankSource(path=root, format="ascend_pt_text"))) == len(got)
    one = root / "b.json"
    assert store.input_stats(RankSource(path=one, format="kineto")) == [("b.json", one.stat().st_size,
                                                                           store.version_stamp(one.stat()))]


def test_writer_memory_stays_bounded_for_many_ranks_of_long_text(tmp_path):
    """Small blocks of long text (a rank's metadata JSON) from thousands of ranks: the writer inserts and
    commits them as their bytes add up, so it never holds every rank's text (DuckDB keeps the Python strings
    of uncommitted rows alive); every row is stored."""
    import gc
    import tracemalloc

    import numpy as np

    con, rows = writer.connect_for_writing(tmp_path / "w.duckdb")
    w = writer.Writer(con, rows)
    tracemalloc.start()
    try:
        for r in range(2000):  # 2000 ranks x 8 rows x 3 kB = 48 MB of text
            assert w.claim(r)
            w.data(r, "metadata", {"key": np.array([f"k{j}" for j in range(8)], dtype=object),
                                   "value_json": np.array([f"{r}:{j}:" + "x" * 3000 for j in range(8)],
                                                          dtype=object)})
            assert w.done(r, [], []) is None
        gc.collect()
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    w.finish([])
    assert held < writer.POOL_MAX_BYTES + writer.TXN_MAX_BYTES + (8 << 20)  # unbounded: the whole 48 MB
    assert con.execute("SELECT count(*), count(DISTINCT rank), sum(length(value_json)) FROM metadata").fetchone() \
        == (16_000, 2000, sum(len(f"{r}:{j}:") + 3000 for r in range(2000) for j in range(8)))
    con.close()


@pytest.mark.parametrize("how", ["truncate", "zero"])
def test_a_damaged_cache_database_is_discarded_and_rebuilt(tmp_path, how):
    prof_dir = tmp_path / "prof"
    shutil.copytree(need(KINETO / "trace_filter"), prof_dir)
    cache = tmp_path / "cache"
    a = build.open_profile(prof_dir, IngestOptions(cache_dir=cache))
    info = a.info
    build.forget_opened()
    a.close()   # (DuckDB shares an open database's instance within a process: a later run is a new process)
    size = a.db_path.stat().st_size
    if how == "truncate":
        with open(a.db_path, "r+b") as f:
            f.truncate(size // 3)
    else:
        a.db_path.write_bytes(b"\0" * size)
    b = build.open_profile(prof_dir, IngestOptions(cache_dir=cache))
    assert not b.from_cache and b.info == info
    build.forget_opened()
    assert build.open_profile(prof_dir, IngestOptions(cache_dir=cache)).from_cache


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_flipped_bytes_in_a_cache_database_never_give_an_answer(tmp_path, seed):
    """Bytes flipped anywhere in the cache database: DuckDB's block checksums find it, at open or while a
    command reads, and the database is deleted and the profile read again: the same answer as before."""
    import random
    import subprocess
    import sys

    example = Path(__file__).resolve().parent.parent / "examples" / "cluster4"
    env = {**os.environ, "STEPDOCTOR_CACHE_DIR": str(tmp_path / "cache")}
    cmd = [sys.executable, "-m", "stepdoctor", "issues", str(example), "--format", "json"]
    clean = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert clean.returncode == 0, clean.stderr
    (db,) = (tmp_path / "cache").glob("*.duckdb")
    data, rng = bytearray(db.read_bytes()), random.Random(seed)
    for _ in range(30):
        data[rng.randrange(len(data) // 16, len(data))] ^= 0xFF
    db.write_bytes(bytes(data))
    again = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert again.returncode == 0, again.stderr
    strip = lambda out: {k: v for k, v in json.loads(out).items() if k not in ("profile",)}  # noqa: E731
    assert strip(again.stdout) == strip(clean.stdout)


def test_an_unusable_default_cache_falls_back_to_a_temporary_one_and_says_so(tmp_path, monkeypatch):
    """A home whose cache folder cannot be made (here $XDG_CACHE_HOME is a file; a read-only home is the common
    case): the run still answers, caching in a folder of this user under the temporary directory, with a note.
    A cache folder the user asked for that cannot be used is one line naming it."""
    import subprocess
    import sys

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {"PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(blocker), "HOME": str(tmp_path), "TMPDIR": str(tmpdir)}
    run = need(KINETO / "trace_filter")
    r = subprocess.run([sys.executable, "-m", "stepdoctor", "breakdown", str(run), "--format", "json"],
                       capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    import json

    notes = [w for w in json.loads(r.stdout)["warnings"] if "cannot be used" in w]
    assert len(notes) == 1 and str(tmpdir) in notes[0] and "STEPDOCTOR_CACHE_DIR" in notes[0]
    assert list(tmpdir.glob("stepdoctor-cache-*/*.duckdb"))
    r = subprocess.run([sys.executable, "-m", "stepdoctor", "breakdown", str(run)], capture_output=True, text=True,
                       env={**env, "STEPDOCTOR_CACHE_DIR": str(blocker / "x")})
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "cannot use the cache directory" in r.stderr
