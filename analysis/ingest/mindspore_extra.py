"""MindSpore-only files: the data pipeline (MindData), host/device queues, MindSpore's step_trace_time.csv
variant and the CANN step trace (mindspore-format-and-db.md §2, §3).

Used three ways:
* `read_ms_extras(rank_dir, tables)` — for a ≥ 2.5 `*_ascend_ms` rank directory, called by the text reader
  (and by the DB reader for `ascend_mindspore_profiler_{rank}.db`): reads what the torch_npu-shaped text
  reader does not know about, from `ASCEND_PROFILER_OUTPUT/` and `FRAMEWORK/`;
* `read_minddata(folders, ids, tables)` — the pipeline/queue parser shared with the ≤ 2.3 reader, whose files
  sit flat in `profiler/` with a `_{rank}` suffix;
* `read_cann_step_trace(rank_dir, tables)` — `PROF_*/mindstudio_profiler_output/step_trace_*.csv` (kept only
  with `data_simplification=False`), the one place a ≥ 2.5 graph-sink run still gives a literal iteration
  interval (Data Aug Bound).

Rows written:
* dataset_ops: one per pipeline op. `op_type` is the engine name with the `Op` suffix (`MapOp`, whatever
  file it came from); `output_queue_size` is the queue *capacity* (`output_queue_length`), the column being an
  integer; `output_queue_usage_rate` is the mean fill as a 0–1 fraction (raw CSV as is; summary
  `queue_utilization_pct` / 100; raw sampler JSON mean(size) / capacity); `avg_cpu_pct` is the mean CPU of
  one worker of the op in percent of one core (summary `avg_cpu_pct_per_worker`, else the CPU sampler's
  mean(user + sys) / num_workers) — the number MindSpore's bottleneck rule compares with 75 %.
* metadata: `minddata_summary` (the summary file as written, incl. bottleneck_warning / suggestions),
  `host_queue` and `device_queue` (batches, empty/full counts and ratios, mean times), `minddata_cpu`
  (machine CPU busy %), `dataset_stages` (dataset.csv rows).
* step_phases: `stage` and `bubble` from MindSpore's step_trace_time.csv (Stage there is the HCCL span of the
  step minus Bubble, not torch_npu's step time minus Bubble), and `iteration_interval`, `fp_and_bp`, `tail`
  from the CANN step trace.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from typing import Any

from ..units import NS_PER_US_INT
from .base import RankTables

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
FRAMEWORK_DIR = "FRAMEWORK"
INVALID_MODEL_ID = 4294967295    # MindSpore's own model-level rows in the CANN step trace
_OP_LABEL_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(\s*(?:ID|id)\s*[:=]\s*(\d+)\s*\)\s*$")


def op_type_name(name: str) -> str:
    """Engine op name with the `Op` suffix: `Map`, `MapOp`, `Map(id=3)` -> `MapOp`."""
    base = re.sub(r"\(.*\)$", "", str(name).strip())
    return base if base.endswith("Op") else base + "Op"


def _num(v: Any) -> float | None:
    """A CSV/JSON cell as float; '', '-', None and non-numbers -> None."""
    if v is None:
        return None
    try:
        f = float(str(v).strip())
    except ValueError:
        return None
    return None if math.isnan(f) else f


def _int(v: Any) -> int | None:
    f = _num(v)
    return None if f is None else int(f)


def _list(v: Any) -> list[Any]:
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


def _read_csv(path: Path, tables: RankTables) -> list[dict[str, str]]:
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            rows = list(csv.DictReader(f))
    except (OSError, csv.Error, UnicodeDecodeError) as e:
        tables.warn(f"{path.name}: unreadable ({e}); ignored")
        return []
    # headers carry stray spaces / tabs in some versions
    return [{(k or "").strip(): (v.strip() if isinstance(v, str) else v) for k, v in r.items()} for r in rows]


def _read_json(path: Path, tables: RankTables) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        tables.warn(f"{path.name}: unreadable JSON ({e}); ignored")
        return None


def _find(folders: list[Path], template: str, ids: list[str]) -> Path | None:
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
                parsed.append(_list(v))
            else:
                n = _num(v)
                parsed.append(n if n is not None else v)
        out[key] = parsed
    return out


def _load_summary(folders: list[Path], ids: list[str], tables: RankTables) -> dict[str, Any] | None:
    p = _find(folders, "minddata_pipeline_summary_{}.json", ids)
    if p is not None and isinstance(d := _read_json(p, tables), dict):
        return d
    p = _find(folders, "minddata_pipeline_summary_{}.csv", ids)
    if p is not None:
        try:
            with open(p, newline="", encoding="utf-8-sig") as f:
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
    ops: dict[int, dict[str, Any]] = {}
    raw = _find(folders, "minddata_pipeline_raw_{}.csv", ids)
    if raw is not None:
        for r in _read_csv(raw, tables):
            oid = _int(r.get("op_id"))
            if oid is None:
                continue
            ops[oid] = {"op_type": op_type_name(r.get("op_type") or "Unknown"),
                        "num_workers": _int(r.get("num_workers")),
                        "output_queue_size": _int(r.get("output_queue_length")),
                        "output_queue_usage_rate": _num(r.get("output_queue_usage_rate")),
                        "parent_id": _int(r.get("parent_id")), "avg_cpu_pct": None}
    else:
        sampler = _find(folders, "pipeline_profiling_{}.json", ids)
        if sampler is not None and isinstance(d := _read_json(sampler, tables), dict):
            parents: dict[int, int] = {}
            for o in d.get("op_info") or []:
                for c in o.get("children") or []:
                    parents[int(c)] = int(o.get("op_id"))
            for o in d.get("op_info") or []:
                q = ((o.get("metrics") or {}).get("output_queue") or {})
                sizes = [x for x in (_num(s) for s in q.get("size") or []) if x is not None]
                cap = _int(q.get("length"))
                usage = (sum(sizes) / len(sizes) / cap) if sizes and cap else None
                oid = int(o.get("op_id"))
                ops[oid] = {"op_type": op_type_name(o.get("op_type") or "Unknown"),
                            "num_workers": _int(o.get("num_workers")), "output_queue_size": cap,
                            "output_queue_usage_rate": usage, "parent_id": parents.get(oid), "avg_cpu_pct": None}
    summary = _load_summary(folders, ids, tables)
    if summary:
        tables.add("metadata", key="minddata_summary", value_json=json.dumps(summary, sort_keys=True, default=str))
        ids_s = [_int(x) for x in summary.get("op_ids") or []]
        for k, oid in enumerate(ids_s):
            if oid is None:
                continue

            def at(key: str, k: int = k) -> Any:
                vals = summary.get(key) or []
                return vals[k] if k < len(vals) else None

            op = ops.setdefault(oid, {"op_type": op_type_name(at("op_names") or "Unknown"),
                                      "num_workers": _int(at("num_workers")), "output_queue_size": None,
                                      "output_queue_usage_rate": None, "avg_cpu_pct": None,
                                      "parent_id": None})
            if op["parent_id"] is None and (p := _int(at("parent_id"))) is not None and p >= 0:
                op["parent_id"] = p
            if op["output_queue_usage_rate"] is None and (u := _num(at("queue_utilization_pct"))) is not None \
                    and u >= 0:
                op["output_queue_usage_rate"] = u / 100.0
            per_worker = _num(at("avg_cpu_pct_per_worker"))
            if per_worker is None and (tot := _num(at("avg_cpu_pct"))) is not None:
                per_worker = tot / max(op["num_workers"] or 1, 1)
            op["avg_cpu_pct"] = per_worker
    cpu = _find(folders, "minddata_cpu_utilization_{}.json", ids)
    if cpu is not None and isinstance(d := _read_json(cpu, tables), dict):
        for o in d.get("op_info") or []:
            oid = _int(o.get("op_id"))
            if oid is None or oid not in ops or ops[oid]["avg_cpu_pct"] is not None:
                continue
            m = o.get("metrics") or {}
            user = [x for x in map(_num, m.get("user_utilization") or []) if x is not None]
            sys_ = [x for x in map(_num, m.get("sys_utilization") or []) if x is not None]
            n = max(len(user), len(sys_))
            if n:
                mean = (sum(user) + sum(sys_)) / n    # 100 = one full core (scaled by the core count)
                ops[oid]["avg_cpu_pct"] = mean / max(ops[oid]["num_workers"] or 1, 1)
        dev = d.get("device_info") or {}
        idle = [x for x in map(_num, dev.get("idle_utilization") or []) if x is not None]
        tables.add("metadata", key="minddata_cpu", value_json=json.dumps({
            "cpu_processor_num": _int(d.get("cpu_processor_num")),
            "machine_busy_pct": round(100.0 - sum(idle) / len(idle), 3) if idle else None,
            "sampling_interval_ms": _num(d.get("sampling_interval"))}))
    for oid in sorted(ops):
        tables.add("dataset_ops", op_id=oid, **ops[oid])
    if ops:
        tables.has("dataset_ops")
    _host_queue(folders, ids, tables)
    _device_queue(folders, ids, tables)
    return set(ops)


def _host_queue(folders: list[Path], ids: list[str], tables: RankTables) -> bool:
    """`type extra batch value timestamp` records -> empty/full share of batches and mean times (ms)."""
    path = _find(folders, "device_queue_profiling_{}.txt", ids)
    mode = "sink"
    if path is None:
        path, mode = _find(folders, "dataset_iterator_profiling_{}.txt", ids), "non-sink"
    if path is None:
        return False
    times: dict[int, list[float]] = {0: [], 1: [], 2: []}
    depth: list[tuple[int, int]] = []      # (size, capacity)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        tables.warn(f"{path.name}: unreadable ({e}); ignored")
        return False
    for line in lines:
        f = line.split()
        if len(f) < 4:
            continue
        typ, extra, value = _int(f[0]), _int(f[1]), _num(f[3])
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
    path = _find(folders, "minddata_aicpu_{}.txt", ids) or _find(folders, "minddata_aicpu_{}.json", ids)
    if path is None:
        return False
    sizes: list[int] = []
    waits_us: list[float] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        tables.warn(f"{path.name}: unreadable ({e}); ignored")
        return False
    for line in lines:
        f = line.split()
        if len(f) < 4 or _num(f[3]) is None:
            continue    # header line / malformed
        s, e, q = _num(f[1]), _num(f[2]), _int(f[3])
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


# --------------------------------------------------------------------------------------------------------
# ≥ 2.5 extras


def _dataset_csv(path: Path, tables: RankTables, known_ops: set[int]) -> None:
    """dataset.csv `Operation, Stage, Occurrences, Avg. time (us), Custom Info` -> metadata + missing ops."""
    rows = _read_csv(path, tables)
    stages = []
    for r in rows:
        avg = r.get("Avg. time (us)", r.get("Avg. time(us)"))
        op = r.get("Operation") or ""
        stages.append({"operation": op, "stage": r.get("Stage"), "occurrences": _int(r.get("Occurrences")),
                       "avg_us": _num(avg), "custom_info": r.get("Custom Info") or None})
        if (m := _OP_LABEL_RE.match(op)) and int(m.group(2)) not in known_ops:
            known_ops.add(int(m.group(2)))
            tables.add("dataset_ops", op_id=int(m.group(2)), op_type=op_type_name(m.group(1)))
    if stages:
        tables.add("metadata", key="dataset_stages", value_json=json.dumps(stages))
        tables.has("dataset_stages")


def _ms_step_trace_time(path: Path, tables: RankTables) -> set[str]:
    """MindSpore's step_trace_time.csv (µs, no Device_id): Stage and Bubble per step -> step_phases."""
    done: set[str] = set()
    for r in _read_csv(path, tables):
        step = _int(r.get("Step"))
        if step is None:
            continue
        for col, phase in (("Stage", "stage"), ("Bubble", "bubble")):
            v = _num(r.get(col))
            if v is not None:
                tables.add("step_phases", step=step, phase=phase, dur_ns=round(v * NS_PER_US_INT))
                done.add(phase)
    return done


def read_cann_step_trace(rank_dir: Path, tables: RankTables) -> set[str]:
    """CANN `step_trace_*.csv` (graph sink, µs) -> iteration_interval / fp_and_bp / tail per iteration.

    MindSpore's own model-level rows (Model ID 4294967295) are dropped; of the remaining models the one with
    the most iterations is the training graph (init graphs have one), and its first iteration (compile /
    warm-up, no previous iteration end) is skipped.
    """
    files = sorted(rank_dir.glob("PROF_*/mindstudio_profiler_output/step_trace_*.csv"))
    files = [f for f in files if f.suffix == ".csv"]
    if not files:
        return set()
    rows: list[dict[str, str]] = []
    for f in files:
        rows.extend(_read_csv(f, tables))
    by_model: dict[int, list[dict[str, str]]] = {}
    for r in rows:
        mid = _int(r.get("Model ID"))
        if mid is None or mid == INVALID_MODEL_ID or _int(r.get("Iteration ID")) is None:
            continue
        by_model.setdefault(mid, []).append(r)
    if not by_model:
        return set()
    model = max(by_model, key=lambda m: len(by_model[m]))
    if len(by_model) > 1:
        tables.warn(f"{files[0].name}: {len(by_model)} graphs in the CANN step trace; used model {model} "
                    f"({len(by_model[model])} iterations)")
    its = sorted(by_model[model], key=lambda r: _int(r.get("Iteration ID")) or 0)[1:]
    done: set[str] = set()
    for r in its:
        step = _int(r.get("Iteration ID"))
        for col, phase in (("Data Aug Bound(us)", "iteration_interval"), ("FP to BP Time(us)", "fp_and_bp"),
                           ("Iteration Refresh(us)", "tail")):
            v = _num(r.get(col))
            if v is not None and step is not None:
                tables.add("step_phases", step=step, phase=phase, dur_ns=round(v * NS_PER_US_INT))
                done.add(phase)
    if done:
        tables.has("step_phases", "cann_step_trace")
    return done


def _rank_ids(rank_dir: Path) -> list[str]:
    """Ids MindSpore suffixes files with: the rank id (profiler_info_{rank}.json), else device ids."""
    ids: list[str] = []
    for p in sorted(rank_dir.glob("profiler_info_*.json")):
        if m := re.match(r"profiler_info_(\d+)\.json$", p.name):
            ids.append(m.group(1))
    for p in sorted(rank_dir.glob("PROF_*/device_*")):
        if m := re.match(r"device_(\d+)$", p.name):
            ids.append(m.group(1))
    return list(dict.fromkeys(ids)) or ["0"]


def read_ms_extras_impl(rank_dir: Path, tables: RankTables) -> set[str]:
    """`read_ms_extras`, returning the step_phases names it wrote (so a caller does not duplicate them)."""
    rank_dir = Path(rank_dir)
    out = rank_dir / OUTPUT_DIR
    folders = [out, rank_dir / FRAMEWORK_DIR, rank_dir]
    ids = _rank_ids(rank_dir)
    phases: set[str] = set()
    op_ids = read_minddata(folders, ids, tables)
    dataset = out / "dataset.csv"
    if dataset.is_file():
        _dataset_csv(dataset, tables, known_ops=op_ids)
    stt = out / "step_trace_time.csv"
    if stt.is_file():
        phases |= _ms_step_trace_time(stt, tables)
    phases |= read_cann_step_trace(rank_dir, tables)
    if phases:
        tables.has("step_phases")
    return phases


def read_ms_extras(rank_dir: Path, tables: RankTables) -> None:
    """Read the MindSpore-only files of a ≥ 2.5 `*_ascend_ms` rank dir into dataset_ops / step_phases /
    metadata (see the module docstring). Missing files are simply skipped: they depend on `data_process=True`
    (no schedule), CPU activity and `data_simplification=False`."""
    read_ms_extras_impl(rank_dir, tables)
