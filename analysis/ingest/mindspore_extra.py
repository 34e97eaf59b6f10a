"""MindSpore-only files: the data pipeline (MindData), host/device queues, MindSpore's step_trace_time.csv
variant and the CANN step trace (docs/formats.md §3, §4.2).

Used three ways:
* `read_ms_extras(rank_dir, tables)` — for a ≥ 2.5 `*_ascend_ms` rank directory, called by the text reader
  (and by the DB reader for `ascend_mindspore_profiler_{rank}.db`): reads what the torch_npu-shaped text
  reader does not know about, from `ASCEND_PROFILER_OUTPUT/` and `FRAMEWORK/`;
* `read_minddata(folders, ids, tables)` (in `minddata.py`) — the pipeline/queue parser shared with the ≤ 2.3
  reader, whose files sit flat in `profiler/` with a `_{rank}` suffix;
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

import json
import re
from pathlib import Path

from ..units import NS_PER_US_INT
from .base import RankTables
from .minddata import cell_int, cell_num, op_type_name, read_csv_rows, read_minddata

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
FRAMEWORK_DIR = "FRAMEWORK"
INVALID_MODEL_ID = 4294967295    # MindSpore's own model-level rows in the CANN step trace
_OP_LABEL_RE = re.compile(r"^\s*([A-Za-z_][A-Za-z0-9_]*)\s*\(\s*(?:ID|id)\s*[:=]\s*(\d+)\s*\)\s*$")


# --------------------------------------------------------------------------------------------------------
# ≥ 2.5 extras


def _dataset_csv(path: Path, tables: RankTables, known_ops: set[int]) -> None:
    """dataset.csv `Operation, Stage, Occurrences, Avg. time (us), Custom Info` -> metadata + missing ops."""
    rows = read_csv_rows(path, tables)
    stages = []
    for r in rows:
        avg = r.get("Avg. time (us)", r.get("Avg. time(us)"))
        op = r.get("Operation") or ""
        stages.append({"operation": op, "stage": r.get("Stage"), "occurrences": cell_int(r.get("Occurrences")),
                       "avg_us": cell_num(avg), "custom_info": r.get("Custom Info") or None})
        if (m := _OP_LABEL_RE.match(op)) and int(m.group(2)) not in known_ops:
            known_ops.add(int(m.group(2)))
            tables.add("dataset_ops", op_id=int(m.group(2)), op_type=op_type_name(m.group(1)))
    if stages:
        tables.add("metadata", key="dataset_stages", value_json=json.dumps(stages))
        tables.has("dataset_stages")


def _ms_step_trace_time(path: Path, tables: RankTables) -> set[str]:
    """MindSpore's step_trace_time.csv (µs, no Device_id): Stage and Bubble per step -> step_phases."""
    done: set[str] = set()
    for r in read_csv_rows(path, tables):
        step = cell_int(r.get("Step"))
        if step is None:
            continue
        for col, phase in (("Stage", "stage"), ("Bubble", "bubble")):
            v = cell_num(r.get(col))
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
        rows.extend(read_csv_rows(f, tables))
    by_model: dict[int, list[dict[str, str]]] = {}
    for r in rows:
        mid = cell_int(r.get("Model ID"))
        if mid is None or mid == INVALID_MODEL_ID or cell_int(r.get("Iteration ID")) is None:
            continue
        by_model.setdefault(mid, []).append(r)
    if not by_model:
        return set()
    model = max(by_model, key=lambda m: len(by_model[m]))
    if len(by_model) > 1:
        tables.warn(f"{files[0].name}: {len(by_model)} graphs in the CANN step trace; used model {model} "
                    f"({len(by_model[model])} iterations)")
    its = sorted(by_model[model], key=lambda r: cell_int(r.get("Iteration ID")) or 0)[1:]
    done: set[str] = set()
    for r in its:
        step = cell_int(r.get("Iteration ID"))
        for col, phase in (("Data Aug Bound(us)", "iteration_interval"), ("FP to BP Time(us)", "fp_and_bp"),
                           ("Iteration Refresh(us)", "tail")):
            v = cell_num(r.get(col))
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
