"""The Ray engine: one Ray task per rank, the database built by this process (the driver).

Each task parses its rank where Ray runs it (`parse_rank`, the same code as the local parse workers) and
returns the typed numpy columns (`RankTables.parts()`) with the rank's warnings and capabilities; Ray keeps
the arrays as out-of-band buffers in its object store, so a result crosses to the driver without a copy into
a pickle. The driver inserts each result with the same `Writer` as the local engines, in the order the
results arrive, so every table holds the same rows (a multiset: row order may differ).

Memory: at most `in_flight` results wait in the object store (twice the cluster's CPUs by default), and the
driver holds one rank's columns at a time plus the writer's row groups, whatever the number of ranks.

Shards: with a folder that the tasks and the driver share (`shard_dir`, or STEPDOCTOR_RAY_SHARDS), a task
writes each table of at least `shard_min_rows` rows of its rank as a Parquet file there and returns its path:
the big columns then cross compressed, through the shared storage, and DuckDB inserts them from the file
without Python touching them. The files are removed once inserted.

Locality: a rank whose files name a host that a node of the cluster answers to (`locality.place`: the host in
Kineto's / torch_npu's file names, matched against the label `stepdoctor/host`, the custom resources
`stepdoctor-host:<name>`, node names, host names and addresses of `ray.nodes()`) runs with
`NodeAffinitySchedulingStrategy(node, soft=True)`: on that node, waiting for its CPUs when they are busy (its
files may be on its disk only), elsewhere when the node is gone or cannot run the task. Other ranks go where
Ray puts them. The count is logged (INFO) and handed to `on_placement`.

Failures: a rank whose reader fails (ProfileError) is answered, not raised, and skipped at once (parsing it
again gives the same error). A task whose process dies (killed, out of memory, a lost node) is retried by
Ray `max_retries` times; when every attempt failed the rank is skipped with Ray's reason in the warnings.

This module imports Ray only inside the functions the Ray engine runs (`build_with_ray` and what it calls):
nothing else in stepdoctor imports it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import socket
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import files
from ..errors import ProfileError
from ..ingest.base import Coded, RankSource
from ..ingest.discover import Discovery
from ..store.parse import Parts, parse_rank
from ..store.writer import CHUNK_ROWS, Writer, connect_for_writing, row_count
from .locality import Placement, interleaved, place
from .pool import ProgressFn

# A failed attempt is retried once: a rank is skipped after two failed attempts.
MAX_RETRIES = 1
# Test hook: "RANK:FAILURES:DIR" makes the task of rank RANK exit abruptly on its first FAILURES attempts
# (attempts are counted with marker files in DIR, shared by the nodes of a test cluster on one machine).
FAULT_ENV = "STEPDOCTOR_RAY_FAULT"
SHARDS_ENV = "STEPDOCTOR_RAY_SHARDS"
# A rank's table of at least this many rows goes through a shard when shards are on (smaller ones are not
# worth a file: an INSERT from a file costs a few milliseconds whatever its size).
SHARD_MIN_ROWS = 4 * CHUNK_ROWS

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ShardFile:
    """A block of a table written by a task as a Parquet file (columns named as the table's)."""

    path: str
    rows: int


Block = dict[str, Any] | ShardFile
# (rank, parts, warnings, capabilities, the id of the node it ran on) | the error that skips the rank
Parsed = tuple[int, list[tuple[str, Block]], list[str], list[str], str]
TaskResult = Parsed | str


def parse_task(src: RankSource, fault: str | None = None, shard_dir: str | None = None,
               shard_min_rows: int = SHARD_MIN_ROWS,
               confined: tuple[list[str] | None, bool] = (None, False)) -> TaskResult:
    """Run in a Ray worker: parse one rank; its columns (big tables as shard files when `shard_dir` is set),
    or the one-line error that skips it. `confined`: the roots the caller reads under (`files.current()`):
    a worker is not started by the caller, so it learns them here, for each task it runs."""
    files.confine(*confined)
    if fault:
        _inject_fault(src, fault)
    try:
        t, parts = parse_rank(src)
        blocks = _shards(t.rank, parts, Path(shard_dir), shard_min_rows) if shard_dir else list(parts)
    except ProfileError as e:
        return str(e)
    except OSError as e:  # the shard folder
        return f"{src.path}: cannot write its shard: {e}"
    return t.rank, blocks, list(t.warnings), sorted(t.capabilities), _node_id()


def _node_id() -> str:
    """The Ray node this task runs on ("" outside Ray)."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    except Exception:  # the id only reports where a rank ran: never fail a parse for it
        return ""


def _shards(rank: int, parts: Parts, folder: Path, min_rows: int) -> list[tuple[str, Block]]:
    """Each table of at least `min_rows` rows written to its own Parquet file in `folder`."""
    out: list[tuple[str, Block]] = []
    con = None
    try:
        for table, cols in parts:
            n = row_count(cols)
            if table == "ranks" or n < min_rows:
                out.append((table, cols))
                continue
            if con is None:
                import duckdb

                folder.mkdir(parents=True, exist_ok=True)
                con = duckdb.connect(config={"threads": 1})
            path = folder / f"{uuid.uuid4().hex}-rank{rank}-{table}.parquet"
            con.register("_part", {c: a.decode() if isinstance(a, Coded) else a for c, a in cols.items()})
            con.execute("COPY (SELECT * FROM _part) TO '" + str(path).replace("'", "''") + "' (FORMAT parquet)")
            con.unregister("_part")
            out.append((table, ShardFile(str(path), n)))
    finally:
        if con is not None:
            con.close()
    return out


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

    _ray_messages_to_stderr()
    if not ray.is_initialized():
        _reachable(address or os.environ.get("RAY_ADDRESS"))
        try:
            ray.init(address=address, include_dashboard=False, log_to_driver=False, logging_level="WARNING",
                     configure_logging=False)
        except Exception as e:  # an unreachable or refused cluster: one line, not Ray's traceback
            where = address or os.environ.get("RAY_ADDRESS") or "a local Ray"
            first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
            raise ProfileError(None, f"cannot start or join Ray ({where}): {type(e).__name__}: {first}"[:400]) \
                from None
    return ray


def _reachable(address: str | None, timeout_s: float = 5.0) -> None:
    """A "host:port" or "ray://host:port" address must accept a TCP connection within `timeout_s`: Ray itself
    retries an unreachable cluster for minutes before it fails. "auto", "local" and no address are Ray's to
    resolve."""
    if not address or address in ("auto", "local"):
        return
    hostport = address.removeprefix("ray://").rsplit("/", 1)[0]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return
    try:
        socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise ProfileError(None, f"cannot reach the Ray cluster at {address}: {e.strerror or e} "
                                 f"(nothing accepted a connection within {timeout_s:g} s)") from None


def _ray_messages_to_stderr() -> None:
    """Ray prints its daemons' messages ("(raylet) A worker died ...") on the driver's stdout, where a command
    writes its answer (JSON): send them to stderr. This patches a private function of Ray; if a Ray version
    has no such function, nothing changes."""
    with contextlib.suppress(Exception):
        from ray._private import worker

        original = worker.print_to_stdstream
        if getattr(original, "to_stderr", False):
            return

        def to_stderr(data: dict, ignore_prefix: bool) -> None:
            original({**data, "is_err": True}, ignore_prefix)

        to_stderr.to_stderr = True  # type: ignore[attr-defined]
        worker.print_to_stdstream = to_stderr


def build_with_ray(disc: Discovery, out: Path, progress: ProgressFn | None, *, address: str | None = None,
                   in_flight: int | None = None, max_retries: int = MAX_RETRIES, shard_dir: Path | None = None,
                   shard_min_rows: int | None = None,
                   on_placement: Callable[[Placement], None] | None = None) -> tuple[int, list[str]]:
    """Parse every rank of `disc` in Ray tasks and insert them into a new database at `out`; returns (ranks
    stored, errors of the skipped ranks). `on_placement` gets where each rank was pinned and where it ran."""
    ray = connect(address)
    task = ray.remote(num_cpus=1, max_retries=max_retries, retry_exceptions=False)(parse_task)
    placement = place(disc.sources, _nodes(ray))
    remotes = {node: _pinned(task, node) for node in set(placement.targets)}
    fault = os.environ.get(FAULT_ENV)
    base = shard_dir or os.environ.get(SHARDS_ENV)
    shards = str(Path(base) / f"{out.name}.shards") if base else None  # this build's own, removed after it
    min_rows = SHARD_MIN_ROWS if shard_min_rows is None else shard_min_rows
    confined = files.current()
    cpus = int(ray.cluster_resources().get("CPU", 1))
    limit = max(1, in_flight or 2 * cpus)
    todo = list(reversed(interleaved(placement.targets)))  # source indexes, popped from the end
    running: dict[Any, int] = {}
    n, stored, errors = len(disc.sources), 0, []
    con, rows = connect_for_writing(out)
    try:
        writer = Writer(con, rows)
        while todo or running:
            while todo and len(running) < limit:  # backpressure: results wait in the store, not here
                i = todo.pop()
                running[remotes[placement.targets[i]].remote(disc.sources[i], fault, shards, min_rows, confined)] = i
            (ref,), _ = ray.wait(list(running), num_returns=1)
            i = running.pop(ref)
            src = disc.sources[i]
            try:
                result: TaskResult = ray.get(ref)
            except ray.exceptions.RayError as e:
                result = (f"{src.path}: cannot parse: the Ray task failed {max_retries + 1} times "
                          f"({_reason(e)})")
            del ref
            if not isinstance(result, str):
                placement.ran_on[i] = result[4]
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
        if shards:  # (a task that died after writing a shard left it here)
            shutil.rmtree(shards, ignore_errors=True)
    log.info("ray %s", placement.summary())
    if on_placement:
        on_placement(placement)
    return stored, errors


def _nodes(ray: Any) -> list[dict[str, Any]]:
    """The cluster's nodes as Ray reports them; none (no locality) when it cannot say."""
    try:
        return list(ray.nodes())
    except Exception as e:  # locality only speeds a build up: never fail one for it
        log.info("ray locality off: the cluster did not list its nodes (%s)", _reason(e))
        return []


def _pinned(task: Any, node_id: str | None) -> Any:
    """`task`, soft-pinned to `node_id`: there when it is alive and can run it, else wherever Ray pleases."""
    if node_id is None:
        return task
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=True))


def _insert(writer: Writer, src: RankSource, result: Parsed) -> str | None:
    rank, parts, warnings, capabilities, _ = result
    files = [b.path for _, b in parts if isinstance(b, ShardFile)]
    try:
        if not writer.claim(rank):
            return f"{src.path}: rank {rank} was already read from another source"
        for table, block in parts:
            if isinstance(block, ShardFile):
                writer.data_file(rank, table, block.path, block.rows)
            else:
                writer.data(rank, table, block)
        err = writer.done(rank, warnings, capabilities)
        return f"{src.path}: {err}" if err else None
    finally:
        for f in files:
            with contextlib.suppress(OSError):
                os.unlink(f)


def _reason(e: Exception) -> str:
    """Ray's error as one line: its type and the first line of its message."""
    first = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
    return f"{type(e).__name__}: {first}"[:300]
