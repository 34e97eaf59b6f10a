"""Building a profile's database: which engine parses the ranks, and the serial engine.

Engines (`build_database(engine=...)`), each giving the same database:
* "here": parse and insert each rank in this process (small inputs: one rank, or under PARALLEL_MIN_BYTES);
* "pool": child processes on this machine (pool.py), memory bounded per process whatever the ranks;
* "ray": one Ray task per rank on a cluster (ray_engine.py); Ray is imported only for this engine.
Without `engine` the input's size chooses between "here" and "pool". A rank that fails is skipped with a
warning when other ranks are stored; if none is, the first error is raised.
"""

from __future__ import annotations

import os
from pathlib import Path

from .. import machine
from ..errors import ProfileError
from ..ingest.discover import Discovery
from ..ingest.formats import FORMATS
from ..store.cache import Listing, input_listing
from ..store.options import IngestOptions, ProgressFn
from ..store.parse import parse_rank
from ..store.writer import Writer, connect_for_writing, store_parsed
from .forks import start_background
from .pool import build_in_children

# Below this many input bytes in total, ingest runs in this process: starting the child processes and
# inserting the last ranks after they are parsed cost more than parsing in parallel saves (figures in
# evals/bench/). Above it, the children also keep the host process small.
PARALLEL_MIN_BYTES = 128 << 20



def build_database(disc: Discovery, out: Path, options: IngestOptions | None = None, *,
                   listing: Listing | None = None) -> list[str]:
    """Parse every rank of `disc` into a new database at `out` as `options` say; returns ingest warnings.

    Pool parse workers default to as many as the usable CPUs and the available memory allow
    (`machine.plan_workers`); `listing`: `input_listing(disc)` when the caller has it.
    """
    o = options or IngestOptions()
    engine, workers, progress, background = o.engine, o.workers, o.progress, o.background
    n = len(disc.sources)
    listing = listing or input_listing(disc)
    total_bytes = sum(size for files in listing for _, size, _ in files)
    if engine is None:
        engine = "here" if n == 1 or total_bytes < PARALLEL_MIN_BYTES or os.name != "posix" else "pool"
    if engine == "pool" and workers is None:
        workers = machine.plan_workers([
            (FORMATS[s.format].peak_per_input_byte, machine.rank_input_bytes(s.path, [(name, size) for name, size, _ in files]))
            for s, files in zip(disc.sources, listing, strict=True)]).workers
    if engine == "pool" and (n == 1 or (workers or 1) <= 1 or os.name != "posix"):
        engine = "here"
    result = None
    if engine == "ray":
        from .ray_engine import build_with_ray  # the only place Ray is reached from

        start_background(background)
        result = build_with_ray(disc, out, progress, address=o.ray_address)
    elif engine == "pool":
        result = build_in_children(disc, out, workers or 1, progress, o.fork, background)
    else:
        start_background(background)
    if result is None:  # "here", or no child interpreter could start
        result = build_here(disc, out, progress)
    stored, errors = result
    if stored == 0:
        raise ProfileError(None, errors[0] if errors else "no rank could be read")
    _store_step_times(disc, out)
    return [*disc.warnings, *(f"rank skipped: {e}" for e in errors)]


def _store_step_times(disc: Discovery, out: Path) -> None:
    """The sidecar step times (ingest/discover/sidecars.py) into `step_times`, once every engine is done with
    the database; a file that cannot be read is a warning and costs only its rows."""
    from ..ingest.discover.sidecars import step_times

    rows, warnings = step_times(disc)
    if not rows and not warnings:
        return
    import duckdb

    con = duckdb.connect(str(out))
    try:
        if rows:
            con.executemany("INSERT INTO step_times VALUES (?, ?, ?, ?, ?)", rows)
        if warnings:
            con.executemany("INSERT INTO ingest_warnings VALUES (NULL, NULL, ?)", [(w,) for w in warnings])
    finally:
        con.close()


def build_here(disc: Discovery, out: Path, progress: ProgressFn | None) -> tuple[int, list[str]]:
    """Parse and insert each rank in this process; (ranks stored, errors of the skipped ones)."""
    n = len(disc.sources)
    stored = 0
    errors: list[str] = []
    con, rows = connect_for_writing(out)
    try:
        writer = Writer(con, rows)
        for i, src in enumerate(disc.sources):
            try:
                t, parts = parse_rank(src)
                err = store_parsed(writer, t, parts, src)
                del t, parts
            except ProfileError as e:
                err = str(e)
            if err:
                errors.append(err)
            else:
                stored += 1
            if progress:
                progress(i + 1, n, f"rank {src.rank}")
        writer.finish([*disc.warnings, *(f"rank skipped: {e}" for e in errors)])
    finally:
        con.close()
    return stored, errors
