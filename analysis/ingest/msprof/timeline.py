"""msprof trace-event timelines (Chrome trace JSON arrays) -> normalized tables.

Processes are named by "M" process_name events; what each holds (CANN 6/7 msprof):
* "Ascend Hardware": device tasks, tid = stream, args "Task Type"/"Stream Id"; its X events with cat
  "Iteration Time" are the step-trace iterations (args "Iteration ID"); FP_BP/Reduce/Refresh spans are not ops.
* "Step Trace": the same iteration spans in step_trace_*.json.
* "HCCL": thread "Communication Kernel" holds one span per collective; "Plane <k>" threads hold its tasks
  (Notify_Wait, Memcpy, Reduce_Inline) with src/dst rank, transport, size.
* "CANN", "Overlap Analysis": host API spans and msprof's own overlap lanes, not read.

Times are µs floats in the files; stored as int ns (round(µs * 1000)). Per-iteration files repeat
cumulative content (step_trace_<k> holds iterations 1..k), so X events are de-duplicated on
(process, thread, ts, name). Steps: the iterations; without any, one window over all device tasks (warned).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import ProfileError
from ...files import read_bytes, read_text
from ..ascend_db import db_task_category
from ..base import RankSource, RankTables

_COLL_RE = re.compile(r"(allreduce|allgather|reducescatter|broadcast|alltoall|send|receive|recv|reduce)")
_NONE_RANKS = {4294967295, -1}


DEVICE_DIR_RE = re.compile(r"^device_(\d+)$")


def device_id_of(path: Path) -> int | None:
    """The device id from a `device_<id>` folder on the path (msprof names device folders by id)."""
    for part in reversed(path.parts):
        m = DEVICE_DIR_RE.match(part)
        if m:
            return int(m.group(1))
    return None


@dataclass
class _Events:
    """X events by kind, each a (name, start_ns, dur_ns, args, tid) tuple."""

    tasks: list[tuple[str, int, int, dict[str, Any], int]] = field(default_factory=list)
    iterations: dict[int, tuple[int, int]] = field(default_factory=dict)
    colls: list[tuple[str, int, int, dict[str, Any], int]] = field(default_factory=list)
    plane: list[tuple[str, int, int, dict[str, Any], int]] = field(default_factory=list)


def _ns(us: Any) -> int:
    return round(float(us) * 1000)


def timeline_files(d: Path) -> list[Path]:
    """msprof*.json (the merged timeline, maybe in slices) when present, else the per-kind files."""
    merged = sorted(d.glob("msprof*.json"))
    if merged:
        return merged
    return sorted(f for pat in ("task_time_*.json", "hccl_*.json", "step_trace_*.json") for f in d.glob(pat))


def _load(files: list[Path], tables: RankTables) -> list[list[dict[str, Any]]]:
    """Each file's event list; empty or damaged files are skipped and counted in one warning each."""
    out, empty, bad = [], [], []
    for f in files:
        if f.stat().st_size == 0:
            empty.append(f.name)
            continue
        try:
            ev = json.loads(read_bytes(f))
        except (ValueError, OSError):
            bad.append(f.name)
            continue
        if isinstance(ev, dict):
            ev = ev.get("traceEvents", [])
        if isinstance(ev, list):
            out.append([e for e in ev if isinstance(e, dict)])
        else:
            bad.append(f.name)
    if empty:
        tables.warn(f"{len(empty)} of {len(files)} timeline file(s) are empty (0 bytes): {', '.join(empty[:4])}")
    if bad:
        tables.warn(f"{len(bad)} of {len(files)} timeline file(s) are not JSON event arrays (damaged, skipped): "
                    f"{', '.join(bad[:4])}")
    return out


def _classify(chunks: list[list[dict[str, Any]]]) -> _Events:
    out = _Events()
    seen: set[tuple[str, Any, Any, Any]] = set()
    for ev in chunks:
        pname = {e.get("pid"): (e.get("args") or {}).get("name") for e in ev
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
        tname = {(e.get("pid"), e.get("tid")): (e.get("args") or {}).get("name") for e in ev
                 if e.get("ph") == "M" and e.get("name") == "thread_name"}
        for e in ev:
            if e.get("ph") != "X" or e.get("ts") is None or e.get("dur") is None:
                continue
            proc = pname.get(e.get("pid")) or ""
            key = (proc, e.get("tid"), e.get("ts"), e.get("name"))
            if key in seen:
                continue
            seen.add(key)
            args = e.get("args") or {}
            row = (str(e.get("name") or ""), _ns(e["ts"]), _ns(e["dur"]), args, e.get("tid"))
            cat = e.get("cat")
            if cat == "Iteration Time" and proc in ("Ascend Hardware", "Step Trace"):
                it = args.get("Iteration ID")
                if isinstance(it, int):
                    out.iterations[it] = (row[1], row[1] + row[2])
            elif proc == "Ascend Hardware" and not cat:
                out.tasks.append(row)
            elif proc == "HCCL":
                thread = str(tname.get((e.get("pid"), e.get("tid"))) or "")
                (out.plane if thread.startswith("Plane") else out.colls).append(row)
    return out


def _step_of(starts: np.ndarray, steps: list[tuple[int, int, int]]) -> list[int | None]:
    """Step id of each start: the iteration window [start, end] holding it, else None."""
    if not steps:
        return [None] * len(starts)
    s0 = np.array([s[1] for s in steps], dtype=np.int64)
    s1 = np.array([s[2] for s in steps], dtype=np.int64)
    k = np.searchsorted(s0, starts, side="right") - 1
    return [steps[i][0] if i >= 0 and t <= s1[i] else None for i, t in zip(k.tolist(), starts.tolist(),
                                                                            strict=True)]


def read_timeline_dir(d: Path, tables: RankTables, src: RankSource) -> None:
    """Fill `tables` from the trace-event files of one device folder `d` (see the module docstring)."""
    files = timeline_files(d)
    ev = _classify(_load(files, tables))
    if not ev.tasks and not ev.colls:
        why = "; ".join(tables.warnings) or "no Ascend Hardware or HCCL spans"
        raise ProfileError(d, f"no device task in {len(files)} timeline file(s) ({why}): nothing usable")
    steps = sorted((i, s, e) for i, (s, e) in ev.iterations.items())
    if not steps:
        t0 = min(r[1] for r in ev.tasks + ev.colls)
        t1 = max(r[1] + r[2] for r in ev.tasks + ev.colls)
        steps = [(0, t0, t1)]
        tables.warn(f"{d.name}: no step-trace iterations in the timeline; the span of all device tasks "
                    "is one step 0")
    for sid, s, e in steps:
        tables.add("steps", step=sid, start_ns=s, end_ns=e, device_start_ns=s, device_end_ns=e, kept=True)
    _emit_tasks(ev, steps, tables)
    _emit_comm(ev, steps, tables)
    _ranks_row(d, src, tables, min(r[1] for r in ev.tasks + ev.colls))


def _emit_tasks(ev: _Events, steps: list[tuple[int, int, int]], tables: RankTables) -> None:
    rows = ev.tasks
    if not rows:
        return
    tt = [str(r[3].get("Task Type") or "") for r in rows]
    starts = np.array([r[1] for r in rows], dtype=np.int64)
    tables.extend("device_ops", {
        "step": _step_of(starts, steps), "name": [r[0] for r in rows], "op_type": [None] * len(rows),
        "category": [db_task_category(t, False, False) for t in tt], "task_type": [t or None for t in tt],
        "stream_id": [r[3].get("Stream Id", r[4]) for r in rows], "start_ns": starts.tolist(),
        "dur_ns": [r[2] for r in rows]})
    tables.has("trace")


def _rank(v: Any) -> int | None:
    return v if isinstance(v, int) and v not in _NONE_RANKS and 0 <= v < 2**31 else None


def _emit_comm(ev: _Events, steps: list[tuple[int, int, int]], tables: RankTables) -> None:
    colls = ev.colls
    if colls:
        starts = np.array([r[1] for r in colls], dtype=np.int64)
        st = _step_of(starts, steps)
        kinds = [(m.group(1) if (m := _COLL_RE.search(r[0].lower())) else None) for r in colls]
        tables.extend("comm_ops", {"step": st, "name": [r[0] for r in colls], "op_type": kinds,
                                   "start_ns": starts.tolist(), "elapse_ns": [r[2] for r in colls]})
        # the collective's span on the device, as the DB/text readers give HCCL ops
        tables.extend("device_ops", {"step": st, "name": [r[0] for r in colls], "category":
                                     ["communication"] * len(colls), "start_ns": starts.tolist(),
                                     "dur_ns": [r[2] for r in colls], "collective": kinds})
    plane = ev.plane
    if plane:
        starts = np.array([r[1] for r in plane], dtype=np.int64)
        a = [r[3] for r in plane]
        size = [x.get("size(Byte)") for x in a]
        tables.extend("comm_tasks", {
            "step": _step_of(starts, steps), "name": [r[0] for r in plane], "start_ns": starts.tolist(),
            "dur_ns": [r[2] for r in plane], "size_bytes": [s if isinstance(s, int) else None for s in size],
            "transport": [x.get("transport type") for x in a],
            "link_type": [None if x.get("link type") in (None, "INVALID_TYPE") else x.get("link type") for x in a],
            "src_rank": [_rank(x.get("src rank")) for x in a], "dst_rank": [_rank(x.get("dst rank")) for x in a],
            "bandwidth_gbps": [x.get("bandwidth(GB/s)") for x in a]})


def _ranks_row(d: Path, src: RankSource, tables: RankTables, t_min: int) -> None:
    """Device id and core count from info.json.<dev> beside timeline/ (PROF layout) when present."""
    dev = device_id_of(d)
    info: dict[str, Any] = {}
    for f in sorted(d.parent.glob("info.json.*")):
        if f.suffix != ".done":
            try:
                info = json.loads(read_text(f))
            except (ValueError, OSError):
                tables.warn(f"{f.name}: not JSON (damaged), device info unknown")
            break
    di = (info.get("DeviceInfo") or [{}])[0] if isinstance(info.get("DeviceInfo"), list) else {}
    if dev is None and isinstance(di.get("id"), int):
        dev = di["id"]
    core = di.get("ai_core_num")
    if isinstance(core, int):
        tables.has("core_counts")
    tables.add("ranks", source_path=str(src.path), format=src.format, vendor="ascend", framework=None,
               device_id=dev, ai_core_num=core if isinstance(core, int) else None, time_origin_ns=t_min)
