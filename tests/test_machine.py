"""How many parse workers an ingest runs: usable CPUs and memory as a container sees them, and the peak
estimate per rank."""

from __future__ import annotations

import gzip
import logging
from pathlib import Path

import pytest

from conftest import CLUSTER4, need
from stepdoctor.analysis import machine, store
from stepdoctor.analysis.ingest.discover import discover
from stepdoctor.analysis.ingest.formats import FORMATS
from stepdoctor.analysis.store import IngestOptions

MB = 1 << 20
GB = 1 << 30


def _files(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_cpu_quota_of_cgroup_v2_and_v1(tmp_path):
    assert machine.cgroup_cpu_limit(_files(tmp_path / "a", {"cpu.max": "250000 100000\n"})) == 2.5
    assert machine.cgroup_cpu_limit(_files(tmp_path / "b", {"cpu.max": "max 100000\n"})) is None
    v1 = _files(tmp_path / "c", {"cpu,cpuacct/cpu.cfs_quota_us": "150000", "cpu,cpuacct/cpu.cfs_period_us": "100000"})
    assert machine.cgroup_cpu_limit(v1) == 1.5
    assert machine.cgroup_cpu_limit(_files(tmp_path / "d", {"cpu/cpu.cfs_quota_us": "-1",
                                                            "cpu/cpu.cfs_period_us": "100000"})) is None
    assert machine.cgroup_cpu_limit(tmp_path / "none") is None


def test_usable_cpus_is_the_affinity_mask_capped_by_the_quota(tmp_path, monkeypatch):
    monkeypatch.setattr(machine.os, "sched_getaffinity", lambda pid: set(range(128)))
    assert machine.usable_cpus(tmp_path / "none") == 128
    assert machine.usable_cpus(_files(tmp_path / "q", {"cpu.max": "800000 100000"})) == 8
    assert machine.usable_cpus(_files(tmp_path / "r", {"cpu.max": "150000 100000"})) == 2  # rounded up
    assert machine.usable_cpus(_files(tmp_path / "s", {"cpu.max": "10000 100000"})) == 1
    monkeypatch.setattr(machine.os, "sched_getaffinity", lambda pid: {0, 1, 2})
    assert machine.usable_cpus(_files(tmp_path / "t", {"cpu.max": "800000 100000"})) == 3


def test_available_memory_is_memavailable_capped_by_the_cgroup(tmp_path):
    meminfo = _files(tmp_path, {"meminfo": "MemTotal: 33554432 kB\nMemFree: 1 kB\nMemAvailable: 16777216 kB\n"})
    mi = meminfo / "meminfo"
    assert machine.available_memory(tmp_path / "none", mi) == 16 * GB
    v2 = _files(tmp_path / "v2", {"memory.max": str(4 * GB), "memory.current": str(1 * GB)})
    assert machine.cgroup_memory_free(v2) == 3 * GB
    assert machine.available_memory(v2, mi) == 3 * GB
    # a container that read many files: its usage is mostly inactive page cache, which does not count
    cached = _files(tmp_path / "cached", {"memory.max": str(4 * GB), "memory.current": str(4 * GB - MB),
                                          "memory.stat": f"anon {GB}\nfile {3 * GB}\ninactive_file {3 * GB - MB}\n"})
    assert machine.cgroup_memory_free(cached) == 3 * GB
    assert machine.cgroup_memory_free(_files(tmp_path / "v2max", {"memory.max": "max"})) is None
    # v1 without a limit writes 2^63 rounded down to a page
    v1 = _files(tmp_path / "v1", {"memory/memory.limit_in_bytes": "9223372036854771712",
                                  "memory/memory.usage_in_bytes": "125566976"})
    assert machine.available_memory(v1, mi) == 16 * GB
    v1lim = _files(tmp_path / "v1lim", {"memory/memory.limit_in_bytes": str(64 * GB),
                                        "memory/memory.usage_in_bytes": str(1 * GB)})
    v1cache = _files(tmp_path / "v1cache", {"memory/memory.limit_in_bytes": str(2 * GB),
                                            "memory/memory.usage_in_bytes": str(2 * GB),
                                            "memory/memory.stat": f"cache 1\ninactive_file 5\ntotal_inactive_file {GB}\n"})
    assert machine.cgroup_memory_free(v1cache) == 1 * GB  # the hierarchy's total, not the cgroup's own
    assert machine.available_memory(v1lim, mi) == 16 * GB  # the cgroup allows more than the machine has
    assert machine.available_memory(v2, tmp_path / "no-meminfo") == 3 * GB
    assert machine.available_memory(tmp_path / "none", tmp_path / "no-meminfo") is None


def _input_bytes(path: Path) -> int:
    """`rank_input_bytes` of a rank from the store's listing of its files, as the ingest plans it."""
    from stepdoctor.analysis.ingest.base import RankSource

    files = store.input_stats(RankSource(path=path, format="?"))
    return machine.rank_input_bytes(path, [(name, size) for name, size, _ in files])


def test_rank_input_bytes_counts_what_readers_read(tmp_path):
    payload = b'{"traceEvents": []}' * 50_000
    gz = tmp_path / "rank3.pt.trace.json.gz"
    gz.write_bytes(gzip.compress(payload))
    assert gz.stat().st_size < len(payload)
    assert _input_bytes(gz) == len(payload)  # uncompressed, from the gzip trailer
    rank = _files(tmp_path / "node0_1_ascend_pt", {
        "ASCEND_PROFILER_OUTPUT/trace_view.json": "x" * 1000,
        "ASCEND_PROFILER_OUTPUT/kernel_details.csv": "y" * 300,
        "PROF_000001_X/device_0/data/aicore.data.0.slice_0": "z" * 100_000,  # raw data: never read
        "profiler_info_1.json": "{}",
    })
    assert _input_bytes(rank) == 1300
    (rank / "ASCEND_PROFILER_OUTPUT" / "loop").symlink_to(rank)  # a link loop is not followed
    assert _input_bytes(rank) == 1300
    legacy = _files(tmp_path / "ms", {"profiler/op_info.json": "a" * 10, "profiler/raw.bin": "b" * 999,
                                      "profiler/timeline.txt": "c" * 5})
    assert _input_bytes(legacy) == 15
    cluster_rank = next(need(CLUSTER4).glob("*_ascend_pt"))
    out = cluster_rank / "ASCEND_PROFILER_OUTPUT"
    assert _input_bytes(cluster_rank) == sum(p.stat().st_size for p in out.rglob("*") if p.is_file())


PEAK = {name: f.peak_per_input_byte for name, f in FORMATS.items()}


def test_plan_workers_fits_the_largest_rank_in_memory(monkeypatch):
    monkeypatch.delenv(machine.WORKERS_ENV, raising=False)
    ranks = [(PEAK["ascend_pt_db"], 1000), (PEAK["ascend_pt_db"], 400 * MB)] * 32
    peak = machine.WORKER_FIXED_BYTES + int(2.5 * 400 * MB)
    plan = machine.plan_workers(ranks, cpus=64, available=None)
    assert (plan.workers, plan.reason, plan.worker_peak_bytes) == (64, "cpus", peak)
    plan = machine.plan_workers(ranks, cpus=64, available=16 * GB)
    assert plan.workers == int((16 * GB * 0.7 - 256 * MB) // peak) == 10
    assert plan.reason == "memory"
    # the Ascend text reader streams its tables: a worker takes ~1.1x what it reads (1.2x planned)
    text = machine.plan_workers([(PEAK["ascend_pt_text"], 400 * MB)] * 32, cpus=64, available=16 * GB)
    assert text.worker_peak_bytes == machine.WORKER_FIXED_BYTES + int(1.2 * 400 * MB)
    assert text.workers == int((16 * GB * 0.7 - 256 * MB) // text.worker_peak_bytes) == 20
    assert machine.plan_workers(ranks, cpus=64, available=512 * MB).workers == 1  # never fewer than one
    assert machine.plan_workers(ranks[:3], cpus=64, available=None).workers == 3
    # Kineto ranks stream: ~0.6 byte per input byte
    kineto = [(PEAK["kineto"], 400 * MB)] * 8
    assert machine.plan_workers(kineto, cpus=8, available=4 * GB).workers == 8
    assert machine.plan_workers(kineto, cpus=8, available=1 * GB).workers == 1


def test_workers_env_overrides_the_plan(monkeypatch, caplog):
    rank = 1
    monkeypatch.setenv(machine.WORKERS_ENV, "3")
    plan = machine.plan_workers([(PEAK["ascend_pt_text"], rank)] * 8, cpus=64, available=1 * MB)
    assert (plan.workers, plan.reason) == (3, machine.WORKERS_ENV)
    monkeypatch.setenv(machine.WORKERS_ENV, "zero")
    with caplog.at_level(logging.WARNING, logger=machine.__name__):
        plan = machine.plan_workers([(PEAK["ascend_pt_text"], rank)] * 8, cpus=4, available=None)
    assert plan.workers == 4
    assert "STEPDOCTOR_WORKERS='zero' is not an integer >= 1" in caplog.text


@pytest.mark.parametrize("workers", [1, 2])
def test_build_database_takes_the_planned_workers(tmp_path, monkeypatch, workers):
    """The store asks `plan_workers` when the caller does not say: one worker parses here, more in child
    processes; the database is the same."""
    prof_dir = need(CLUSTER4)
    calls, children = [], []

    def plan(ranks, **_):
        calls.append(ranks)
        return machine.WorkerPlan(workers, 64, None, 0, "memory")

    from stepdoctor.analysis import build
    from stepdoctor.analysis.build import engine

    in_children = engine.build_in_children

    def spy(disc, out, n, *a, **k):
        children.append(n)
        return in_children(disc, out, n, *a, **k)

    query = "SELECT rank, count(*), sum(dur_ns) FROM device_ops GROUP BY rank ORDER BY rank"
    ref = build.open_profile(prof_dir, IngestOptions(cache_dir=tmp_path / "ref", engine="here"))
    try:
        expected = ref.rows(query)
    finally:
        ref.close()
    monkeypatch.setattr(machine, "plan_workers", plan)
    monkeypatch.setattr(engine, "build_in_children", spy)
    prof = build.open_profile(prof_dir, IngestOptions(cache_dir=tmp_path / "cache", engine="pool"))  # workers: planned
    try:
        got = prof.rows(query)
    finally:
        prof.close()
    assert calls[0] == [(PEAK[s.format], _input_bytes(s.path)) for s in discover(prof_dir).sources]
    assert children == ([] if workers == 1 else [workers])
    assert [r for r, *_ in got] == [0, 1, 2, 3]
    assert got == expected
