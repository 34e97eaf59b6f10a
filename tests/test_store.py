"""The store: cache reuse, atomic writes, no writes into the profile, parallel ingest equals serial."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import CLUSTER4, KINETO, need
from stepdoctor.analysis import store
from stepdoctor.analysis.ingest.base import ProfileError, parse_us_to_ns
from stepdoctor.analysis.ingest.discover import discover


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
    p1 = store.open_profile(prof_dir, cache_dir=cache)
    assert not p1.from_cache
    store._OPEN.clear()
    calls = []
    monkeypatch.setattr(store, "read_source", lambda s: calls.append(s) or pytest.fail("parsed again"))
    p2 = store.open_profile(prof_dir, cache_dir=cache)
    assert p2.from_cache and not calls
    assert p2.info == p1.info
    assert _snapshot(prof_dir) == before
    assert [f.name for f in cache.iterdir() if f.suffix == ".duckdb"] == [p1.db_path.name]


def test_changed_input_reingests(tmp_path):
    prof_dir = tmp_path / "prof"
    shutil.copytree(need(KINETO / "trace_filter"), prof_dir)
    cache = tmp_path / "cache"
    a = store.open_profile(prof_dir, cache_dir=cache)
    f = next(prof_dir.glob("*rank-1*"))
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    store._OPEN.clear()
    b = store.open_profile(prof_dir, cache_dir=cache)
    assert a.db_path != b.db_path and not b.from_cache


def test_crash_mid_ingest_leaves_no_usable_cache(tmp_path, monkeypatch):
    prof_dir = need(KINETO / "trace_filter")
    cache = tmp_path / "cache"

    def boom(disc, out, **kw):
        out.write_bytes(b"half a database")
        raise RuntimeError("killed")

    monkeypatch.setattr(store, "build_database", boom)
    with pytest.raises(RuntimeError):
        store.open_profile(prof_dir, cache_dir=cache, refresh=True)
    assert not list(cache.glob("*.duckdb")), "a partial database must never be left under the final name"
    assert not list(cache.glob("*.tmp-*"))


def test_parallel_ingest_equals_serial(tmp_path, monkeypatch):
    prof_dir = need(KINETO / "trace_filter")
    monkeypatch.setattr(store, "PARALLEL_MIN_BYTES", 0)
    par = store.open_profile(prof_dir, cache_dir=tmp_path / "par", workers=2)
    store._OPEN.clear()
    monkeypatch.setattr(store, "PARALLEL_MIN_BYTES", 1 << 60)
    ser = store.open_profile(prof_dir, cache_dir=tmp_path / "ser", workers=1)
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
