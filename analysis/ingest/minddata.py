"""MindSpore's data pipeline (MindData) files of one rank -> dataset_ops + metadata, and the cell helpers the
MindSpore-only readers share. Column meanings: see `mindspore_extra` (the rows written) and
docs/formats.md §4.2; the ≤ 2.3 reader and the ≥ 2.5 extras both call `read_minddata`.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from typing import Any

from ..files import open_regular, read_text
from .base import RankTables


def op_type_name(name: str) -> str:
    """Engine op name with the `Op` suffix: `Map`, `MapOp`, `Map(id=3)` -> `MapOp`."""
    base = re.sub(r"\(.*\)$", "", str(name).strip())
    return base if base.endswith("Op") else base + "Op"


def cell_num(v: Any) -> float | None:
    """A CSV/JSON cell as float; '', '-', None and non-numbers -> None."""
    if v is None:
        return None
    try:
        f = float(str(v).strip())
    except ValueError:
        return None
    return None if math.isnan(f) else f


def cell_int(v: Any) -> int | None:
    f = cell_num(v)
    return None if f is None else int(f)


def cell_list(v: Any) -> list[Any]:
    """'[1, 2]' / '1 2' / '' / list -> list of numbers."""
    if isinstance(v, list):
        return v
    s = str(v or "").strip()
    if not s:
        return []
    try:
        out = json.loads(s)
        return out if isinstance(out, list) else [out]
    except ValueError:
        return [x for x in re.split(r"[\s,\[\]]+", s) if x]


def read_csv_rows(path: Path, tables: RankTables) -> list[dict[str, str]]:
    try:
        with open_regular(path, "r", newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
    except (OSError, csv.Error, UnicodeDecodeError) as e:
        tables.warn(f"{path.name}: unreadable ({e}); ignored")
        return []
    # headers carry stray spaces / tabs in some versions
    return [{(k or "").strip(): (v.strip() if isinstance(v, str) else v) for k, v in r.items()} for r in rows]


def find_file(folders: list[Path], template: str, ids: list[str]) -> Path | None:
    """First existing `template.format(id)` over folders × ids; else the only file matching the pattern."""
    for folder in folders:
        for i in ids:
            p = folder / template.format(i)
            if p.is_file():
                return p
    for folder in folders:
        if folder.is_dir():
            hits = sorted(folder.glob(template.format("*")))
            if len(hits) == 1:
                return hits[0]
    return None


# --------------------------------------------------------------------------------------------------------
# MindData pipeline


def _summary_from_csv(rows: list[list[str]]) -> dict[str, list[Any]]:
    """The transposed summary CSV (one row per key, first cell the key) back into the JSON shape."""
    out: dict[str, list[Any]] = {}
    for r in rows:
        if not r:
            continue
        key, vals = r[0].strip(), r[1:]
        parsed: list[Any] = []
        for v in vals:
            v = v.strip()
            if v.startswith("["):
                parsed.append(cell_list(v))
            else:
                n = cell_num(v)
                parsed.append(n if n is not None else v)
        out[key] = parsed
    return out


def _load_summary(folders: list[Path], ids: list[str], tables: RankTables) -> dict[str, Any] | None:
    p = find_file(folders, "minddata_pipeline_summary_{}.json", ids)
    if p is not None and isinstance(d := tables.read_json(p), dict):
        return d
    p = find_file(folders, "minddata_pipeline_summary_{}.csv", ids)
    if p is not None:
        try:
            with open_regular(p, "r", newline="", encoding="utf-8-sig") as f:
                return _summary_from_csv(list(csv.reader(f)))
        except (OSError, csv.Error) as e:
            tables.warn(f"{p.name}: unreadable ({e}); ignored")
    return None


def read_minddata(folders: list[Path], ids: list[str], tables: RankTables) -> set[int]:
    """Pipeline ops, CPU use and queue records of one rank -> dataset_ops + metadata; returns the op ids.

    Sources, best first: `minddata_pipeline_raw_{id}.csv` (ops, workers, capacity, usage), the raw sampler
    `pipeline_profiling_{id}.json` (when the CSV is absent), `minddata_pipeline_summary_{id}.json|csv`
    (per-worker CPU, usage %, bottleneck text), `minddata_cpu_utilization_{id}.json` (per-op CPU when the
    summary is absent), then the queue files `device_queue_profiling_{id}.txt` (sink) /
    `dataset_iterator_profiling_{id}.txt` (non-sink) and `minddata_aicpu_{id}.txt` (chip side).
    """
    ops = _ops_from_raw_csv(folders, ids, tables)
    if ops is None:
        ops = _ops_from_sampler(folders, ids, tables)
    summary = _load_summary(folders, ids, tables)
    if summary:
        tables.add("metadata", key="minddata_summary", value_json=json.dumps(summary, sort_keys=True, default=str))
        _apply_summary(summary, ops)
    _apply_cpu_sampler(folders, ids, tables, ops)
    for oid in sorted(ops):
        tables.add("dataset_ops", op_id=oid, **ops[oid])
    if ops:
        tables.has("dataset_ops")
    _host_queue(folders, ids, tables)
    _device_queue(folders, ids, tables)
    return set(ops)


def _ops_from_raw_csv(folders: list[Path], ids: list[str], tables: RankTables) -> dict[int, dict[str, Any]] | None:
    """Ops of `minddata_pipeline_raw_{id}.csv` by op id; None when the file is absent."""
    raw = find_file(folders, "minddata_pipeline_raw_{}.csv", ids)
    if raw is None:
        return None
    ops: dict[int, dict[str, Any]] = {}
    for r in read_csv_rows(raw, tables):
        oid = cell_int(r.get("op_id"))
        if oid is None:
            continue
        ops[oid] = {"op_type": op_type_name(r.get("op_type") or "Unknown"),
                    "num_workers": cell_int(r.get("num_workers")),
                    "output_queue_size": cell_int(r.get("output_queue_length")),
                    "output_queue_usage_rate": cell_num(r.get("output_queue_usage_rate")),
                    "parent_id": cell_int(r.get("parent_id")), "avg_cpu_pct": None}
    return ops


def _ops_from_sampler(folders: list[Path], ids: list[str], tables: RankTables) -> dict[int, dict[str, Any]]:
    """Ops of the raw sampler `pipeline_profiling_{id}.json`: usage = mean(queue size) / capacity."""
    ops: dict[int, dict[str, Any]] = {}
    sampler = find_file(folders, "pipeline_profiling_{}.json", ids)
    if sampler is None or not isinstance(d := tables.read_json(sampler), dict):
        return ops
    parents: dict[int, int] = {}
    for o in d.get("op_info") or []:
        for c in o.get("children") or []:
            parents[int(c)] = int(o.get("op_id"))
    for o in d.get("op_info") or []:
        q = ((o.get("metrics") or {}).get("output_queue") or {})
        sizes = [x for x in (cell_num(s) for s in q.get("size") or []) if x is not None]
        cap = cell_int(q.get("length"))
        usage = (sum(sizes) / len(sizes) / cap) if sizes and cap else None
        oid = int(o.get("op_id"))
        ops[oid] = {"op_type": op_type_name(o.get("op_type") or "Unknown"),
                    "num_workers": cell_int(o.get("num_workers")), "output_queue_size": cap,
                    "output_queue_usage_rate": usage, "parent_id": parents.get(oid), "avg_cpu_pct": None}
    return ops


def _apply_summary(summary: dict[str, Any], ops: dict[int, dict[str, Any]]) -> None:
    """Fill `ops` from the summary: missing ops and parents, usage % / 100, CPU per worker (in place)."""
    ids_s = [cell_int(x) for x in summary.get("op_ids") or []]
    for k, oid in enumerate(ids_s):
        if oid is None:
            continue

        def at(key: str, k: int = k) -> Any:
            vals = summary.get(key) or []
            return vals[k] if k < len(vals) else None

        op = ops.setdefault(oid, {"op_type": op_type_name(at("op_names") or "Unknown"),
                                  "num_workers": cell_int(at("num_workers")), "output_queue_size": None,
                                  "output_queue_usage_rate": None, "avg_cpu_pct": None,
                                  "parent_id": None})
        if op["parent_id"] is None and (p := cell_int(at("parent_id"))) is not None and p >= 0:
            op["parent_id"] = p
        if op["output_queue_usage_rate"] is None and (u := cell_num(at("queue_utilization_pct"))) is not None \
                and u >= 0:
            op["output_queue_usage_rate"] = u / 100.0
        per_worker = cell_num(at("avg_cpu_pct_per_worker"))
        if per_worker is None and (tot := cell_num(at("avg_cpu_pct"))) is not None:
            per_worker = tot / max(op["num_workers"] or 1, 1)
        op["avg_cpu_pct"] = per_worker


def _apply_cpu_sampler(folders: list[Path], ids: list[str], tables: RankTables,
                       ops: dict[int, dict[str, Any]]) -> None:
    """`minddata_cpu_utilization_{id}.json`: per-op CPU where the summary gave none, machine busy % -> metadata."""
    cpu = find_file(folders, "minddata_cpu_utilization_{}.json", ids)
    if cpu is None or not isinstance(d := tables.read_json(cpu), dict):
        return
    for o in d.get("op_info") or []:
        oid = cell_int(o.get("op_id"))
        if oid is None or oid not in ops or ops[oid]["avg_cpu_pct"] is not None:
            continue
        m = o.get("metrics") or {}
        user = [x for x in map(cell_num, m.get("user_utilization") or []) if x is not None]
        sys_ = [x for x in map(cell_num, m.get("sys_utilization") or []) if x is not None]
        n = max(len(user), len(sys_))
        if n:
            mean = (sum(user) + sum(sys_)) / n    # 100 = one full core (scaled by the core count)
            ops[oid]["avg_cpu_pct"] = mean / max(ops[oid]["num_workers"] or 1, 1)
    dev = d.get("device_info") or {}
    idle = [x for x in map(cell_num, dev.get("idle_utilization") or []) if x is not None]
    tables.add("metadata", key="minddata_cpu", value_json=json.dumps({
        "cpu_processor_num": cell_int(d.get("cpu_processor_num")),
        "machine_busy_pct": round(100.0 - sum(idle) / len(idle), 3) if idle else None,
        "sampling_interval_ms": cell_num(d.get("sampling_interval"))}))


def _lines(path: Path, tables: RankTables) -> list[str] | None:
    """A text file's lines, or None with a warning naming it when it cannot be read."""
    try:
        return read_text(path).splitlines()
    except OSError as e:
        tables.warn(f"{path.name}: unreadable ({e}); ignored")
        return None


def _host_queue(folders: list[Path], ids: list[str], tables: RankTables) -> bool:
    """`type extra batch value timestamp` records -> empty/full share of batches and mean times (ms)."""
    path = find_file(folders, "device_queue_profiling_{}.txt", ids)
    mode = "sink"
    if path is None:
        path, mode = find_file(folders, "dataset_iterator_profiling_{}.txt", ids), "non-sink"
    if path is None:
        return False
    times: dict[int, list[float]] = {0: [], 1: [], 2: []}
    depth: list[tuple[int, int]] = []      # (size, capacity)
    lines = _lines(path, tables)
    if lines is None:
        return False
    for line in lines:
        f = line.split()
        if len(f) < 4:
            continue
        typ, extra, value = cell_int(f[0]), cell_int(f[1]), cell_num(f[3])
        if typ == 0 and extra in times and value is not None:
            times[extra].append(value)
        elif typ == 1 and extra is not None and value is not None:
            depth.append((int(value), extra))
    n = len(depth)
    empty = sum(1 for s, _ in depth if s == 0)
    full = sum(1 for s, c in depth if s == c)

    def mean(xs: list[float], skip_first: bool) -> float | None:
        xs = xs[1:] if skip_first and len(xs) > 1 else xs   # MindSpore skips batch 1 (warm-up)
        return round(sum(xs) / len(xs), 6) if xs else None

    tables.add("metadata", key="host_queue", value_json=json.dumps({
        "file": path.name, "mode": mode, "batches": n, "empty_batches": empty, "full_batches": full,
        "empty_ratio": round(empty / n, 6) if n else None, "full_ratio": round(full / n, 6) if n else None,
        "capacity": depth[0][1] if depth else None,
        "mean_pipeline_ms": mean(times[0], True), "mean_push_ms": mean(times[1], True),
        "mean_batch_ms": mean(times[2], True)}))
    tables.has("host_queue")
    return True


def _device_queue(folders: list[Path], ids: list[str], tables: RankTables) -> bool:
    """Chip-side GetNext records (`node_name start end queue_size`, µs): share of dequeues that found 0."""
    path = find_file(folders, "minddata_aicpu_{}.txt", ids) or find_file(folders, "minddata_aicpu_{}.json", ids)
    if path is None:
        return False
    sizes: list[int] = []
    waits_us: list[float] = []
    lines = _lines(path, tables)
    if lines is None:
        return False
    for line in lines:
        f = line.split()
        if len(f) < 4 or cell_num(f[3]) is None:
            continue    # header line / malformed
        s, e, q = cell_num(f[1]), cell_num(f[2]), cell_int(f[3])
        sizes.append(q or 0)
        if s is not None and e is not None:
            waits_us.append(e - s)
    n = len(sizes)
    empty = sum(1 for q in sizes if q == 0)
    tables.add("metadata", key="device_queue", value_json=json.dumps({
        "file": path.name, "records": n, "empty_records": empty,
        "empty_ratio": round(empty / n, 6) if n else None,
        "mean_dequeue_ms": round(sum(waits_us) / len(waits_us) / 1000.0, 6) if waits_us else None}))
    tables.has("device_queue")
    return True
