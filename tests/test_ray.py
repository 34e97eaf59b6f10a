"""The Ray engine builds the same store as the local one, retries a killed task, skips a rank that fails twice;
without it nothing of Ray is imported.

The cluster is started here: a head and a second node process on this machine (one CPU each, small object
stores), so tasks really run in other processes on two Ray nodes."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import KINETO, REPO, SHARED, need
from stepdoctor.analysis import build, store
from stepdoctor.analysis.build.ray_engine import FAULT_ENV
from stepdoctor.analysis.ingest.base import table_columns
from stepdoctor.analysis.store import IngestOptions

REAL = SHARED / "real"
HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install -e '.[dev]')")


@pytest.fixture(scope="module")
def cluster():
    if not HAS_RAY:
        pytest.skip("ray is not installed (pip install -e '.[dev]')")
    import ray
    from ray.cluster_utils import Cluster

    c = Cluster(initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 80 << 20,
                                                      "include_dashboard": False})
    c.add_node(num_cpus=1, object_store_memory=80 << 20)
    ray.init(address=c.address, log_to_driver=False, logging_level="WARNING")
    c.wait_for_nodes()
    yield c
    ray.shutdown()
    c.shutdown()


def _build(prof: Path, cache: Path, **kw) -> store.Profile:
    build.forget_opened()
    return build.open_profile(prof, IngestOptions(cache_dir=cache, **kw))


def _differences(a: store.Profile, b: store.Profile) -> dict[str, tuple[int, int, int]]:
    """Per table: (rows of a, rows in a not in b, rows in b not in a), multisets compared with EXCEPT ALL."""
    import duckdb

    con = duckdb.connect()
    con.execute(f"ATTACH '{a.db_path}' AS a (READ_ONLY)")
    con.execute(f"ATTACH '{b.db_path}' AS b (READ_ONLY)")
    out = {}
    for t in table_columns():
        n = con.execute(f"SELECT count(*) FROM a.{t}").fetchone()[0]
        ab = con.execute(f"SELECT count(*) FROM (SELECT * FROM a.{t} EXCEPT ALL SELECT * FROM b.{t})").fetchone()[0]
        ba = con.execute(f"SELECT count(*) FROM (SELECT * FROM b.{t} EXCEPT ALL SELECT * FROM a.{t})").fetchone()[0]
        out[t] = (n, ab, ba)
    con.close()
    return out


def _assert_same_store(ray_prof: store.Profile, local: store.Profile, min_rows: int) -> None:
    diff = _differences(ray_prof, local)
    assert {t: d for t, d in diff.items() if d[1] or d[2]} == {}
    assert sum(n for n, _, _ in diff.values()) >= min_rows
    assert ray_prof.info == local.info
    assert ray_prof.warnings == local.warnings


@needs_ray
@pytest.mark.parametrize("data, ranks, min_rows", [
    ("ascend/msinsight-pt-text-l1", [0, 1], 10_000),    # Ascend text export, 2 ranks (a streaming reader)
    ("ascend/msinsight-pt-db-l1", [0, 1], 5_000),       # the same job, DB export
    ("gpu-h100/gloo2_straggler", [0, 1], 1_000),        # Kineto, 2 ranks (DDP over gloo)
])
def test_real_profile_through_ray_equals_the_local_store(cluster, tmp_path, data, ranks, min_rows):
    prof = need(REAL / data)
    via_ray = _build(prof, tmp_path / "ray", engine="ray")
    local = _build(prof, tmp_path / "local", engine="pool", workers=2)
    assert via_ray.info.ranks == ranks and not via_ray.from_cache
    _assert_same_store(via_ray, local, min_rows)


@needs_ray
def test_big_tables_through_parquet_shards_give_the_same_store(cluster, tmp_path, monkeypatch):
    """With a shard folder, a rank's big tables cross as Parquet files inserted by DuckDB; same store, and
    the files are gone afterwards."""
    from stepdoctor.analysis.build import ray_engine

    prof = need(REAL / "ascend/msinsight-pt-text-l1")
    monkeypatch.setenv(ray_engine.SHARDS_ENV, str(tmp_path / "shards"))
    monkeypatch.setattr(ray_engine, "SHARD_MIN_ROWS", 500)
    monkeypatch.setattr(ray_engine.Writer, "data_file", _counting(ray_engine.Writer.data_file, seen := []))
    via_ray = _build(prof, tmp_path / "ray", engine="ray")
    assert len(seen) >= 4 and sum(seen) > 5_000  # several tables of both ranks went through files
    assert list((tmp_path / "shards").iterdir()) == []
    _assert_same_store(via_ray, _build(prof, tmp_path / "local", engine="here"), 10_000)


def _counting(method, seen: list):
    def wrapped(self, rank, table, path, rows):
        seen.append(rows)
        return method(self, rank, table, path, rows)
    return wrapped


@pytest.fixture(scope="module")
def generated_256(tmp_path_factory) -> Path:
    from stepdoctor.evals.generate import Scenario, write_kineto_profile

    out = tmp_path_factory.mktemp("gen") / "k256"
    write_kineto_profile(Scenario(vendor="kineto", ranks=256, steps=2, seed=5, plants=[]), out, events_per_rank=400)
    return out


@needs_ray
def test_generated_256_ranks_through_ray_equal_the_local_store(cluster, tmp_path, generated_256):
    via_ray = _build(generated_256, tmp_path / "ray", engine="ray")
    local = _build(generated_256, tmp_path / "local", engine="pool", workers=2)
    assert via_ray.info.ranks == list(range(256))
    _assert_same_store(via_ray, local, 256 * 200)


@needs_ray
def test_a_killed_task_is_retried_and_its_rank_stored(cluster, tmp_path, monkeypatch):
    prof = need(REAL / "gpu-h100/gloo2_straggler")
    marks = tmp_path / "marks"
    monkeypatch.setenv(FAULT_ENV, f"1:1:{marks}")  # rank 1's first attempt exits abruptly
    via_ray = _build(prof, tmp_path / "ray", engine="ray")
    assert sorted(p.name for p in marks.iterdir()) == ["rank-1.attempt-1", "rank-1.attempt-2"]
    assert via_ray.info.ranks == [0, 1]
    assert not any("skipped" in w for w in via_ray.warnings)
    _assert_same_store(via_ray, _build(prof, tmp_path / "local", engine="here"), 1_000)


@needs_ray
def test_a_rank_whose_task_fails_twice_is_reported_skipped(cluster, tmp_path, monkeypatch):
    prof = need(REAL / "gpu-h100/gloo2_straggler")
    marks = tmp_path / "marks"
    monkeypatch.setenv(FAULT_ENV, f"0:2:{marks}")  # both attempts of rank 0 die
    via_ray = _build(prof, tmp_path / "ray", engine="ray")
    assert len(list(marks.iterdir())) == 2
    assert via_ray.info.ranks == [1]
    skipped = [w for w in via_ray.warnings if w.startswith("rank skipped:")]
    assert len(skipped) == 1 and "the Ray task failed 2 times" in skipped[0], via_ray.warnings
    for table in ("host_ops", "device_ops", "ranks"):
        assert via_ray.rows(f"SELECT DISTINCT rank FROM {table}") == [(1,)], table


@needs_ray
def test_a_rank_the_reader_refuses_is_skipped_at_once(cluster, tmp_path):
    """A parse error is the rank's answer, not a task failure: no retry, the same warning as locally."""
    prof = tmp_path / "prof"
    prof.mkdir()
    for f in sorted(need(KINETO / "trace_filter").glob("*rank-*")):
        (prof / f.name).symlink_to(f)
    (prof / "sampled_rank-7.json").write_text('{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, ')
    via_ray = _build(prof, tmp_path / "ray", engine="ray")
    local = _build(prof, tmp_path / "local", engine="here")
    assert via_ray.info.ranks == local.info.ranks == [0, 1]
    assert via_ray.warnings == local.warnings
    assert any(w.startswith("rank skipped:") and "sampled_rank-7.json" in w for w in via_ray.warnings)


def test_the_roots_a_server_reads_under_reach_the_ray_workers(cluster, tmp_path):
    """A Ray worker is not started by the caller, so it learns the caller's confinement with each task: a
    rank file that is a link to outside the roots is refused there as it is locally (and the confinement
    is never written into this process's environment)."""
    import os

    from stepdoctor.analysis import files

    root = tmp_path / "root"
    prof = root / "prof"
    prof.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    rank0, rank1 = sorted(need(KINETO / "trace_filter").glob("*rank-*"))[:2]
    (prof / rank0.name).write_bytes(rank0.read_bytes())
    (outside / rank1.name).write_bytes(rank1.read_bytes())
    (prof / rank1.name).symlink_to(outside / rank1.name)
    files.confine([root])
    try:
        assert "STEPDOCTOR_CONFINED_ROOTS" not in os.environ
        via_ray = _build(prof, tmp_path / "ray", engine="ray")
        local = _build(prof, tmp_path / "local", engine="here")
    finally:
        files.confine(None)
    assert via_ray.info.ranks == local.info.ranks == [0]
    assert any("outside the allowed roots when opened" in w for w in via_ray.warnings), via_ray.warnings


@needs_ray
def test_the_cli_flag_ingests_through_ray_and_answers_the_same(cluster, tmp_path, monkeypatch, capsys):
    from stepdoctor.tools import cli

    prof = need(REAL / "gpu-h100/gloo2_straggler")
    marks = tmp_path / "marks"
    monkeypatch.setenv(FAULT_ENV, f"0:1:{marks}")  # proof that the ranks went through Ray tasks
    answers = []
    for flag in (["--ray"], []):
        monkeypatch.setenv("STEPDOCTOR_CACHE_DIR", str(tmp_path / f"cache{len(answers)}"))
        build.forget_opened()
        assert cli.main(["breakdown", str(prof), "--format", "json", *flag]) == 0
        answers.append(json.loads(capsys.readouterr().out))
    assert sorted(p.name for p in marks.iterdir()) == ["rank-0.attempt-1", "rank-0.attempt-2"]
    assert answers[0] == answers[1] and len(answers[0]["rows"]) >= 2


@pytest.mark.parametrize("argv", [["issues", "P"], ["breakdown", "P"], ["slow-ranks", "P"], ["kernels", "P"],
                                  ["env", "P"], ["compare", "A", "B"], ["report", "P", "-o", "r.html"]])
def test_every_profile_command_takes_the_ray_flag(argv):
    from stepdoctor.tools.cli import build_parser

    p = build_parser()
    assert p.parse_args(argv).ray is None
    assert p.parse_args([*argv, "--ray"]).ray == ""
    assert p.parse_args([*argv, "--ray=ray://head:10001"]).ray == "ray://head:10001"


def test_the_mcp_server_takes_the_ray_flag():
    from stepdoctor.server.app import build_parser

    assert build_parser().parse_args([]).ray is None
    assert build_parser().parse_args(["--ray", "auto"]).ray == "auto"


NO_RAY = r"""
import json, sys, tempfile
from pathlib import Path
import stepdoctor, stepdoctor.analysis.store, stepdoctor.analysis.build, stepdoctor.tools.cli, stepdoctor.server.app
from stepdoctor.analysis import build, store
prof = build.open_profile(sys.argv[1], store.IngestOptions(cache_dir=Path(tempfile.mkdtemp()), engine=sys.argv[2], workers=2))
print(json.dumps({"ranks": prof.info.ranks, "ray": sorted(m for m in sys.modules if m.split(".")[0] == "ray")}))
"""


@pytest.mark.parametrize("engine", ["here", "pool"])
def test_a_local_run_never_imports_ray(engine):
    prof = need(KINETO / "trace_filter")
    out = subprocess.run([sys.executable, "-c", NO_RAY, str(prof), engine], capture_output=True, text=True,
                         timeout=300, cwd=REPO.parent)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"ranks": [0, 1], "ray": []}
