"""How many parse workers one ingest may run: the CPUs and the memory this process may use, as a container
sees them, and what one rank costs to parse.

`os.cpu_count()` is the host's count. In a container limited to 8 CPUs on a 128-core node it says 128, and
128 workers would then share 8 CPUs while each holds a rank in memory. The usable CPUs are the affinity
mask, capped by a cgroup CPU quota (v2 `cpu.max`, v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`).

Memory bounds the workers too. A parse worker holds one rank at a time, and a big Ascend rank costs a
few hundred MB, so 64 workers on a 64-core node could ask for more than the node has. The kernel's
out-of-memory killer would then end them one by one. The available memory is MemAvailable, capped by a
cgroup memory limit minus the cgroup's working set (its usage without the inactive file cache).

A worker's peak, beyond what it shares with the process it was forked from, is estimated from the bytes
its reader reads (`rank_input_bytes`), with factors measured on the benchmark inputs (evals/bench/README.md,
"Seventh session"). The ingest process itself is reserved INGEST_RESERVE_BYTES.

`STEPDOCTOR_WORKERS` (an integer >= 1) overrides the choice.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

WORKERS_ENV = "STEPDOCTOR_WORKERS"
CGROUP_ROOT = Path("/sys/fs/cgroup")
MEMINFO = Path("/proc/meminfo")

# A cgroup "limit" this large means no limit (v1 writes 2^63 rounded down to a page).
_UNLIMITED = 1 << 60

# A parse worker's peak private memory is a fixed part (index arrays, DuckDB's CSV buffers; worker RSS minus
# the interpreter with its imports, ~72 MB with DuckDB, ~45 MB without, on the bench inputs) plus a share of
# each input byte its reader reads, which is its format's (`Format.peak_per_input_byte`,
# analysis/ingest/formats.py, with the measurements).
WORKER_FIXED_BYTES = 64 << 20
# The ingest process: DuckDB's buffer pool (24 MB), one uncompressed row group per table, the columns of
# the rank being inserted; 124-164 MB on the bench inputs.
INGEST_RESERVE_BYTES = 256 << 20
# Share of the available memory an ingest plans to use: page cache and the rest of the machine keep the
# remainder.
MEMORY_SHARE = 0.7

# Files a reader reads, by suffix (an Ascend rank directory also holds raw PROF_* data it never reads).
_READ_SUFFIXES = (".json", ".csv", ".db", ".gz", ".txt")
_ASCEND_OUTPUT = "ASCEND_PROFILER_OUTPUT"


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def cgroup_cpu_limit(root: Path = CGROUP_ROOT) -> float | None:
    """CPUs the cgroup quota allows (quota / period), or None without a quota."""
    v2 = _read_text(root / "cpu.max")
    if v2 is not None:
        quota, _, period = v2.partition(" ")
        q, p = _int_or_none(quota), _int_or_none(period or "100000")
        return q / p if q is not None and p and q > 0 else None
    for d in ("cpu", "cpu,cpuacct", "cpuacct,cpu"):
        q = _int_or_none(_read_text(root / d / "cpu.cfs_quota_us"))
        p = _int_or_none(_read_text(root / d / "cpu.cfs_period_us"))
        if q is not None and p:
            return q / p if q > 0 else None
    return None


def usable_cpus(root: Path = CGROUP_ROOT) -> int:
    """CPUs this process may run on: the affinity mask, capped by the cgroup quota (rounded up)."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    limit = cgroup_cpu_limit(root)
    if limit is not None:
        n = min(n, max(1, math.ceil(limit)))
    return max(1, n)


def _stat_value(path: Path, key: str) -> int:
    for line in (_read_text(path) or "").splitlines():
        name, _, value = line.partition(" ")
        if name == key:
            return _int_or_none(value.strip()) or 0
    return 0


def cgroup_memory_free(root: Path = CGROUP_ROOT) -> int | None:
    """Bytes the cgroup may still allocate, or None without a limit: the limit minus the working set, i.e.
    the usage without its inactive file cache, which the kernel reclaims before it kills anything (the
    usage of a container that has read many files is mostly cache: limit - usage would say it is full)."""
    for limit_file, usage_file, stat_file, inactive in (
            ("memory.max", "memory.current", "memory.stat", "inactive_file"),
            ("memory/memory.limit_in_bytes", "memory/memory.usage_in_bytes", "memory/memory.stat",
             "total_inactive_file")):
        text = _read_text(root / limit_file)
        if text is None:
            continue
        limit = _int_or_none(text)  # v2 writes "max" without a limit
        if limit is None or limit >= _UNLIMITED:
            return None
        usage = _int_or_none(_read_text(root / usage_file)) or 0
        working = max(0, usage - _stat_value(root / stat_file, inactive))
        return max(0, limit - working)
    return None


def available_memory(root: Path = CGROUP_ROOT, meminfo: Path = MEMINFO) -> int | None:
    """Bytes this process may still use: MemAvailable, capped by the cgroup's free memory; None when
    neither is known (not Linux)."""
    avail = None
    text = _read_text(meminfo)
    for line in (text or "").splitlines():
        if line.startswith("MemAvailable:"):
            parts = line.split()
            kb = _int_or_none(parts[1]) if len(parts) > 1 else None
            avail = kb * 1024 if kb is not None else None
            break
    free = cgroup_memory_free(root)
    if free is not None:
        avail = free if avail is None else min(avail, free)
    return avail


def _gzip_size(path: Path, size: int) -> int:
    """Uncompressed size of a gzip file from its trailer (ISIZE: the size mod 2^32), at least the
    compressed size; 10 x the compressed size when the trailer cannot be read."""
    try:
        with path.open("rb") as f:
            f.seek(-4, os.SEEK_END)
            isize = int.from_bytes(f.read(4), "little")
    except OSError:
        return 10 * size
    while isize < size:  # a file of 4 GiB or more wrapped ISIZE around
        isize += 1 << 32
    return isize


def rank_input_bytes(path: Path, files: Iterable[tuple[str, int]]) -> int:
    """Bytes a reader reads for the rank at `path`, from `files`: (path relative to the rank directory, or
    the trace file's name; size) of every file of the rank, as the store lists them. A trace file counts
    whole; a rank directory its ASCEND_PROFILER_OUTPUT when it has one, else every JSON, CSV, SQLite and
    text file in it. A gzip file counts uncompressed (its trailer is read)."""
    if path.is_file():
        return sum(_gzip_size(path, size) if path.suffix.lower() == ".gz" else size for _, size in files)
    prefix = _ASCEND_OUTPUT + "/" if (path / _ASCEND_OUTPUT).is_dir() else ""
    total = 0
    for name, size in files:
        suffix = Path(name).suffix.lower()
        if name.startswith(prefix) and suffix in _READ_SUFFIXES:
            total += _gzip_size(path / name, size) if suffix == ".gz" else size
    return total


def worker_peak_bytes(per_input_byte: float, input_bytes: int) -> int:
    """Estimated peak private memory of a parse worker reading `input_bytes` of a format that takes
    `per_input_byte` of memory per byte read."""
    return WORKER_FIXED_BYTES + int(per_input_byte * input_bytes)


@dataclass
class WorkerPlan:
    """The number of parse workers and why."""

    workers: int
    cpus: int
    available_bytes: int | None
    worker_peak_bytes: int     # the estimate for the largest rank
    reason: str                # "cpus", "ranks", "memory" or "STEPDOCTOR_WORKERS"


def plan_workers(ranks: list[tuple[float, int]], *, cpus: int | None = None,
                 available: int | None = -1) -> WorkerPlan:
    """Parse workers for `ranks` (their format's peak memory per input byte, `rank_input_bytes`): as many as
    usable CPUs and ranks allow, and no more than fit in MEMORY_SHARE of the available memory beside the
    ingest process, each planned at the estimated peak of the largest rank (any worker may get it); at least
    one. `available=-1`: read it here."""
    cpus = usable_cpus() if cpus is None else cpus
    avail = available_memory() if available == -1 else available
    peak = max((worker_peak_bytes(per_byte, n) for per_byte, n in ranks), default=WORKER_FIXED_BYTES)
    env = os.environ.get(WORKERS_ENV, "").strip()
    if env:
        forced = _int_or_none(env)
        if forced is not None and forced >= 1:
            return WorkerPlan(forced, cpus, avail, peak, WORKERS_ENV)
        log.warning("%s=%r is not an integer >= 1: ignored", WORKERS_ENV, env)
    n, reason = (cpus, "cpus") if cpus <= len(ranks) else (max(1, len(ranks)), "ranks")
    if avail is not None:
        fit = max(1, int((avail * MEMORY_SHARE - INGEST_RESERVE_BYTES) // peak))
        if fit < n:
            n, reason = fit, "memory"
            log.info("ingest: %d parse workers instead of %d: ~%d MB per worker for the largest rank, "
                     "%d MB available", n, cpus, peak >> 20, avail >> 20)
    return WorkerPlan(n, cpus, avail, peak, reason)
