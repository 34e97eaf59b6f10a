"""One rank's DB export -> RankTables: `read_rank` runs `DbReader`, one method per table."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np

from ...errors import ProfileError
from ..base import RankSource, RankTables
from .analysis import AnalysisTables
from .common import (
    ANALYSIS_DBS,
    EXPECTED_TABLES,
    OUTPUT_DIR,
    REQUIRED_TABLES,
    TEXT_DELIVERABLES,
    read_rank_meta,
)
from .db import Db, assign_steps, find_db, open_ro
from .device import DeviceTables
from .host import HostTables
from .steps import StepTables


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
            reader = DbReader(db, tables, rank_dir, framework, src)
            reader.run()
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
    path = next((db_path.parent / n for n in ANALYSIS_DBS if (db_path.parent / n).is_file()), None)
    if path is None:
        return None
    tables = RankTables(src.rank if src.rank is not None else 0)
    try:
        with open_ro(path) as con:
            adb = Db(con, path)
            reader = DbReader(adb, tables, rank_dir, framework, src)
            reader._step_trace_time(adb)
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


class DbReader(HostTables, DeviceTables, StepTables, AnalysisTables):
    # ---- orchestration ---------------------------------------------------------------------------------
    def run(self) -> None:
        db, t = self.db, self.t
        self._preflight()
        meta = read_rank_meta(self.rank_dir, t)
        self._meta_tables(meta)
        cann = self._cann_api()
        host_steps = self._step_time()
        compute = self._compute_tasks()
        comm = self._comm_ops()
        sub = self._comm_subtasks(comm)
        other = self._other_tasks(compute, sub)
        phases_done: set[str] = set()
        if self.framework == "mindspore":
            phases_done = self._ms_extras()
        steps = host_steps if not host_steps.empty else self._derive_steps(compute, comm, other)
        conn_start = dict(zip(cann["conn"], cann["start"], strict=False)) if cann else {}
        if comm is not None and cann:
            # a collective's connectionId is a launch link only when it leads to an HCCL-level API
            types = self.db.enum("ENUM_API_TYPE")
            hccl = {c for c, ty in zip(cann["conn"], cann["type"], strict=False)
                    if types.get(ty, "") in ("communication", "hccl")}
            comm["conn"] = [c if c in hccl else None for c in comm["conn"]]
        for df in (compute, other):
            if df is not None:
                df["step"] = self._step_of_tasks(df, steps, conn_start)
        if comm is not None:
            comm["step"] = assign_steps(comm["start"].to_numpy(np.int64), steps.start, steps.end, steps.ids)
        if sub is not None and comm is not None:
            step_by_op = dict(zip(comm["op_id"], comm["step"], strict=False))
            sub["step"] = np.array([step_by_op.get(o, -1) if o is not None else -1 for o in sub["op_id"]],
                                   dtype=np.int64)
        self._emit_steps(steps, compute, [d for d in (compute, comm, other) if d is not None], phases_done)
        dev_conns = self._device_connections()
        if cann:
            self._emit_cann(cann, steps, dev_conns)
        self._framework_and_gc(steps, dev_conns)
        self._emit_compute(compute)
        self._emit_other(other)
        self._emit_comm(comm, sub)
        self._analysis_db(comm)
        self._freq()
        self._memory()
        self._ranks_row(meta)
        if db.count("TASK") == 0:
            t.warn(f"{self.name}: table TASK is empty: no device activity recorded (partial result)")
        for w in db.losses():
            t.warn(w)

    def _preflight(self) -> None:
        db = self.db
        for table in EXPECTED_TABLES.get(self.framework, ()):
            if not db.has(table):
                self.warn(f"table {table} missing (partial result)")
            elif db.count(table) == 0:
                self.warn(f"table {table} is empty (partial result)")
        out = self.rank_dir / OUTPUT_DIR
        text = [n for n in TEXT_DELIVERABLES if (out / n).is_file()]
        if text:
            self.t.warn(f"{out.name}/ holds both the DB export {self.name} and text files ({', '.join(text)}); "
                        "read the DB (exact ns), ignored the text files")

    # ---- MindSpore-only files beside the DB ------------------------------------------------------------
    def _ms_extras(self) -> set[str]:
        from ..mindspore_extra import read_ms_extras_impl

        return read_ms_extras_impl(self.rank_dir, self.t)
