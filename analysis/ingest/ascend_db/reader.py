"""One rank's DB export -> RankTables: `read_rank` runs the phases in order (`run`), each one a function of
the export's description (`DbRank`), the open Db, the tables being filled and the results of the phases
before it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from ...errors import ProfileError
from ..base import RankSource, RankTables
from .analysis import analysis_db, step_trace_time
from .common import (
    EXPECTED_TABLES,
    OUTPUT_DIR,
    REQUIRED_TABLES,
    read_rank_meta,
)
from .db import Db, assign_steps, find_db, open_ro
from .device import (
    comm_ops,
    comm_subtasks,
    compute_tasks,
    emit_comm,
    emit_compute,
    emit_other,
    other_tasks,
    step_of_tasks,
)
from .host import (
    cann_api,
    device_connections,
    emit_cann,
    framework_and_gc,
    freq,
    memory,
    meta_tables,
    ranks_row,
)
from .rank import DbOut, DbRank, describe_db
from .steps import derive_steps, emit_steps, step_time


def read_rank(src: RankSource) -> RankTables:
    """Parse one rank's DB export into normalized tables (see the module docstring for the mapping)."""
    db_path, rank_dir, framework = find_db(src)
    tables = RankTables(src.rank if src.rank is not None else 0)
    try:
        with open_ro(db_path) as con:
            db = Db(con, db_path)
            missing = [t for t in REQUIRED_TABLES if not db.has(t)]
            if views := [t for t in missing if t in db.not_tables]:
                raise _ViewNotTable(db_path, f"{', '.join(views)} is a view, not a table: not read (an export "
                                             "writes tables; a view can compute without end)")
            if missing:
                raise ProfileError(db_path, f"missing required table(s) {', '.join(missing)}: not an Ascend "
                                            f"profiler DB export")
            run(describe_db(db_path, rank_dir, framework, src.format), db, tables)
    except (ProfileError, sqlite3.DatabaseError) as e:
        # the main DB is unusable: the step table in analysis.db still gives the rank's breakdown
        why = e.problem if isinstance(e, _ViewNotTable) else "damaged SQLite file"
        only = _step_table_only(db_path, rank_dir, framework, src, why)
        if only is None:
            raise e if isinstance(e, ProfileError) else ProfileError(db_path, f"damaged SQLite file ({e})") from e
        return only
    return tables


class _ViewNotTable(ProfileError):
    """A required table that the file holds as a view."""


def _step_table_only(db_path: Path, rank_dir: Path, framework: str, src: RankSource,
                     why: str) -> RankTables | None:
    """A rank from analysis.db's StepTraceTime alone (when the main DB is unreadable); None without one."""
    path = describe_db(db_path, rank_dir, framework, src.format).analysis
    if path is None:
        return None
    tables = RankTables(src.rank if src.rank is not None else 0)
    try:
        with open_ro(path) as con:
            adb = Db(con, path)
            step_trace_time(adb, tables)
    except (ProfileError, sqlite3.DatabaseError):
        return None
    if not tables.count("vendor_step_trace"):
        return None
    tables.warn(f"{db_path.name}: unreadable ({why}); the rank keeps only the step table of "
                f"{path.name} ({tables.count('vendor_step_trace')} step row(s)), no timeline")
    meta = read_rank_meta(rank_dir, tables)
    tables.add("ranks", source_path=str(rank_dir), format=src.format, vendor="ascend",
               framework=None if framework == "msprof" else framework, framework_version=meta.framework_version,
               device_name=meta.device_name, device_id=meta.device_id, world_size=meta.world_size,
               profiler_level=meta.profiler_level)
    return tables


def run(desc: DbRank, db: Db, t: RankTables) -> None:
    """Every phase of one export, in order, into `t`."""
    out = DbOut(t, desc.name)
    preflight(desc, db, out)
    meta = meta_tables(db, out, read_rank_meta(desc.rank_dir, t))
    cann = cann_api(db)
    host_steps = step_time(db)
    compute = compute_tasks(db, out)
    comm = comm_ops(db)
    sub = comm_subtasks(db, comm)
    other = other_tasks(db)
    phases_done: set[str] = set()
    if desc.framework == "mindspore":
        from ..mindspore_extra import read_ms_extras_impl

        phases_done = read_ms_extras_impl(desc.rank_dir, t)
    steps = host_steps if not host_steps.empty else derive_steps(desc, db, out, compute, comm, other)
    conn_start = dict(zip(cann.conn, cann.start, strict=False)) if cann is not None else {}
    # the task tables are this function's own: their step (and launch link) columns are set here
    if comm is not None and cann is not None:
        # a collective's connectionId is a launch link only when it leads to an HCCL-level API
        types = db.enum("ENUM_API_TYPE")
        hccl = {c for c, ty in zip(cann.conn, cann.type, strict=False)
                if types.get(ty, "") in ("communication", "hccl")}
        comm["conn"] = [c if c in hccl else None for c in comm["conn"]]
    for df in (compute, other):
        if df is not None:
            df["step"] = step_of_tasks(df, steps, conn_start)
    if comm is not None:
        comm["step"] = assign_steps(comm["start"].to_numpy(np.int64), steps.start, steps.end, steps.ids)
    if sub is not None and comm is not None:
        step_by_op = dict(zip(comm["op_id"], comm["step"], strict=False))
        sub["step"] = np.array([step_by_op.get(o, -1) if o is not None else -1 for o in sub["op_id"]],
                               dtype=np.int64)
    emit_steps(out, steps, compute, [d for d in (compute, comm, other) if d is not None], phases_done)
    dev_conns = device_connections(db)
    if cann is not None:
        emit_cann(out, cann, steps, dev_conns)
    framework_and_gc(db, out, steps, dev_conns)
    emit_compute(out, compute)
    emit_other(out, other)
    ops = emit_comm(out, comm, sub)
    analysis_db(desc, t, ops)
    freq(db, out)
    memory(db, out)
    ranks_row(desc, db, out, meta)
    if db.count("TASK") == 0:
        t.warn(f"{desc.name}: table TASK is empty: no device activity recorded (partial result)")
    for w in db.losses():
        t.warn(w)


def preflight(desc: DbRank, db: Db, out: DbOut) -> None:
    """Warnings for the tables a default capture has that this export lacks, and for text files beside it."""
    for table in EXPECTED_TABLES.get(desc.framework, ()):
        if not db.has(table):
            out.warn(f"table {table} missing (partial result)")
        elif db.count(table) == 0:
            out.warn(f"table {table} is empty (partial result)")
    if desc.text_files:
        out.t.warn(f"{OUTPUT_DIR}/ holds both the DB export {desc.name} and text files "
                   f"({', '.join(desc.text_files)}); read the DB (exact ns), ignored the text files")
