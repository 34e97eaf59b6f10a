"""The Ray engine: one Ray task per rank, the database built by this process (the driver).

Each task parses its rank where Ray runs it (`parse_rank`, the same code as the local parse workers) and
returns the typed numpy columns (`RankTables.parts()`) with the rank's warnings and capabilities; Ray keeps
the arrays as out-of-band buffers in its object store, so a result crosses to the driver without a copy into
a pickle. The driver inserts each result with the same `Writer` as the local engines, in the order the
results arrive, so every table holds the same rows (a multiset: row order may differ).

Memory: at most `in_flight` results wait in the object store (twice the cluster's CPUs by default), and the
driver holds one rank's columns at a time plus the writer's row groups, whatever the number of ranks.

Failures: a rank whose reader fails (ProfileError) is answered, not raised, and skipped at once (parsing it
again gives the same error). A task whose process dies (killed, out of memory, a lost node) is retried by
Ray `max_retries` times; when every attempt failed the rank is skipped with Ray's reason in the warnings.

This module imports Ray only inside `build_with_ray`: nothing else in stepdoctor imports it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..ingest.base import ProfileError, RankSource
from ..ingest.discover import Discovery
from .parse import Parts, parse_rank
from .pool import ProgressFn
from .writer import Writer, connect_for_writing

# A failed attempt is retried once: a rank is skipped after two failed attempts.
MAX_RETRIES = 1
# Test hook: "RANK:FAILURES:DIR" makes the task of rank RANK exit abruptly on its first FAILURES attempts
# (attempts are counted with marker files in DIR, shared by the nodes of a test cluster on one machine).
FAULT_ENV = "STEPDOCTOR_RAY_FAULT"

TaskResult = tuple[int, Parts, list[str], list[str]] | str  # (rank, parts, warnings, capabilities) | error


def parse_task(src: RankSource, fault: str | None = None) -> TaskResult:
    """Run in a Ray worker: parse one rank; its columns, or the one-line error that skips it."""
    if fault:
        _inject_fault(src, fault)
    try:
        t, parts = parse_rank(src)
    except ProfileError as e:
        return str(e)
    return t.rank, parts, list(t.warnings), sorted(t.capabilities)


def _inject_fault(src: RankSource, fault: str) -> None:
    rank, failures, folder = fault.split(":", 2)
    if src.rank != int(rank):
        return
    marks = Path(folder)
    marks.mkdir(parents=True, exist_ok=True)
    attempt = len(list(marks.glob(f"rank-{rank}.attempt-*"))) + 1
    (marks / f"rank-{rank}.attempt-{attempt}").touch()
    if attempt <= int(failures):
        os._exit(3)  # as a killed process: no answer, no exception


def connect(address: str | None) -> Any:
    """Ray, connected: to `address` ("auto", "ray://host:10001", "host:6379"), else to RAY_ADDRESS when set,
    else to a Ray started here on this machine. A connection made before (a test's cluster) is kept."""
    try:
        import ray
    except ImportError as e:
        raise ProfileError(None, f"the Ray engine needs Ray ({e}): pip install 'stepdoctor[ray]'") from None

    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="WARNING",
                 configure_logging=False)
    return ray


def build_with_ray(disc: Discovery, out: Path, progress: ProgressFn | None, *, address: str | None = None,
                   in_flight: int | None = None, max_retries: int = MAX_RETRIES) -> tuple[int, list[str]]:
    """Parse every rank of `disc` in Ray tasks and insert them into a new database at `out`; returns (ranks
    stored, errors of the skipped ranks)."""
    ray = connect(address)
    task = ray.remote(num_cpus=1, max_retries=max_retries, retry_exceptions=False)(parse_task)
    fault = os.environ.get(FAULT_ENV)
    cpus = int(ray.cluster_resources().get("CPU", 1))
    limit = max(1, in_flight or 2 * cpus)
    todo = list(reversed(disc.sources))
    running: dict[Any, RankSource] = {}
    n, stored, errors = len(disc.sources), 0, []
    con, rows = connect_for_writing(out)
    try:
        writer = Writer(con, rows)
        while todo or running:
            while todo and len(running) < limit:  # backpressure: results wait in the store, not here
                src = todo.pop()
                running[task.remote(src, fault)] = src
            (ref,), _ = ray.wait(list(running), num_returns=1)
            src = running.pop(ref)
            try:
                result: TaskResult = ray.get(ref)
            except ray.exceptions.RayError as e:
                result = (f"{src.path}: cannot parse: the Ray task failed {max_retries + 1} times "
                          f"({_reason(e)})")
            del ref
            err = result if isinstance(result, str) else _insert(writer, src, result)
            del result
            if err:
                errors.append(err)
            else:
                stored += 1
            if progress:
                progress(stored + len(errors), n, f"rank {src.rank}")
        writer.finish([*disc.warnings, *(f"rank skipped: {e}" for e in errors)])
    finally:
        con.close()
    return stored, errors


def _insert(writer: Writer, src: RankSource, result: tuple[int, Parts, list[str], list[str]]) -> str | None:
    rank, parts, warnings, capabilities = result
    if not writer.claim(rank):
        return f"{src.path}: rank {rank} was already read from another source"
    for table, cols in parts:
        writer.data(rank, table, cols)
    err = writer.done(rank, warnings, capabilities)
    return f"{src.path}: {err}" if err else None


def _reason(e: Exception) -> str:
    """Ray's error as one line: its type and the first line of its message."""
    first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {first}"[:300]
