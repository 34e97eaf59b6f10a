"""Reader for MindSpore ≤ 2.3 profiles: the flat MindInsight-format `profiler/` folder (and the 2.4 hybrid).

Input (docs/formats.md §4), every file suffixed `_{rank}`:

| file | -> tables |
| --- | --- |
| `step_trace_raw_{r}_detail_time.csv` | steps, step_phases (iteration_interval, fp_and_bp, tail / fp), comm_ops + device_ops of the reduce triples |
| `output_timeline_data_{r}.txt` | device_ops with real start times (AI Core ops) |
| `framework_raw_{r}.csv` | device_ops op type, block dim, shapes, dtypes, formats (op_info JSON) |
| `aicore_intermediate_{r}_detail.csv` / `output_op_compute_time_{r}.txt` | device_ops task type; per-op totals when there is no timeline |
| `minddata_pipeline_raw_{r}.csv`, `minddata_pipeline_summary_{r}.json/.csv`, `minddata_cpu_utilization_{r}.json`, `device_queue_profiling_{r}.txt`, `dataset_iterator_profiling_{r}.txt`, `minddata_aicpu_{r}.txt` | dataset_ops, metadata (see `minddata.read_minddata`) |
| `hccl_raw_{r}.csv` | step_phases `communication`, `comm_wait` |
| `ascend_cluster_analyse_{mode}_{stages}_{size}_{r}.csv` | step_phases named after its columns (computation, communication_alone, ...); vendor_step_trace (model/pipeline variants; the data-parallel variant repeats the step trace in ticks and is skipped) |
| `profiler_info_{r}.json`, `step_trace_point_info_{r}.json` | ranks, metadata |

Units: step trace values are 10 ns device ticks (MindInsight: 100 000 per ms) -> × 10 ns; absolute points
become ns on the same clock as the op timeline (2.x derives both from msprof µs). The trailing mean row
(`step_num = "-"`) and rows whose total is 0 are skipped; means are left to the metrics (step 1 usually holds
compile / warm-up time). hccl_raw and the cluster file are ms; the timeline is µs (or ms, by its header).

Steps: step n's window is [start_point, end_point] (start_point = previous end_point, so the window holds the
iteration interval); its device window starts at fp_point (the first compute op after the data fetch), so the
breakdown's `preparing` is the interval and its `free` is idle time inside forward/backward/tail. Each
collective triple (`stream_{s}_{k}_{op}` duration, `…_start_point`, `…_end_point`, matched by suffix because
the column order changed in 2.0) becomes one comm_ops row and one device_ops row (category communication,
task_type HCCL); one that starts at or after bp_point runs in the iteration tail.

Operators: with `output_timeline_data` every execution is a device op with its real start; dtypes are
normalised to the `DT_*` spelling of kernel_details (`NUMBER_TYPE_FLOAT32`, `DTFLOAT`, `FLOAT32` -> `DT_FLOAT`).
Without a timeline only per-op totals exist: one device op per op name, duration = mean × count, placed at the
first step's fp_point with no step (a warning says so; capability `op_totals_only` instead of `op_timeline`),
so op-type shares and dtypes stay usable but the device-timeline breakdown is not.

MindSpore 2.4 writes this folder and a `rank-{r}_{ts}_ascend_ms/` copy in the new layout side by side; this
reader reads the flat files (they alone have the iteration interval, fp_and_bp and tail) and warns that the
`*_ascend_ms` copy was not read.
"""

from __future__ import annotations

import json
import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from ..errors import ProfileError
from ..files import read_text
from ..units import NS_PER_MS_INT
from .ascend_common import collective_of
from .base import RankSource, RankTables
from .minddata import read_minddata
from .mindspore_legacy_files import (
    dec_ns,
    int_cell,
    read_csv_table,
    read_framework,
    read_op_totals,
)
from .mindspore_legacy_files import (
    normalize_dtype as normalize_dtype,  # re-exported: callers import it from here
)

TICK_NS = 10
_STREAM_RE = re.compile(r"^stream_(\d+)_(\d+)_(.+)$")
_OP_TYPE_RE = re.compile(r"([A-Za-z][A-Za-z0-9]*)-op\d+$")
_CLUSTER_RE = re.compile(r"^ascend_cluster_analyse_(.+)_(\d+)_(\d+)_(\d+)\.csv$")
_TRACE_PHASES = ("iteration_interval", "fp_and_bp", "tail")


def read_rank(src: RankSource) -> RankTables:
    """Parse one rank of a MindSpore ≤ 2.3 `profiler/` folder (see the module docstring)."""
    folder = src.path if src.path.is_dir() else src.path.parent
    rank = src.rank if src.rank is not None else 0
    tables = RankTables(rank)
    _LegacyReader(folder, rank, tables, src).run()
    return tables


class _LegacyReader:
    def __init__(self, folder: Path, rank: int, tables: RankTables, src: RankSource) -> None:
        self.dir = folder
        self.r = rank
        self.t = tables
        self.src = src
        self.windows: list[tuple[int, int, int]] = []     # (step, start_ns, end_ns)
        self.first_fp: int | None = None
        self.t_min: int | None = None

    def file(self, template: str) -> Path | None:
        p = self.dir / template.format(self.r)
        return p if p.is_file() else None

    def seen(self, ns: int | None) -> None:
        if ns is not None:
            self.t_min = ns if self.t_min is None else min(self.t_min, ns)

    def step_of(self, ns: int) -> int | None:
        for s, w0, w1 in self.windows:
            if w0 <= ns < w1:
                return s
        return None

    def run(self) -> None:
        info = self._profiler_info()
        self._hybrid()
        self._step_trace()
        self._operators()
        self._hccl_raw()
        self._cluster()
        points = self.file("step_trace_point_info_{}.json")
        if points is not None:
            try:
                self.t.add("metadata", key="step_trace_points", value_json=json.dumps(json.loads(
                    read_text(points)), sort_keys=True))
            except (OSError, ValueError) as e:
                self.t.warn(f"{points.name}: unreadable ({e}); ignored")
        read_minddata([self.dir], [str(self.r)], self.t)
        self.t.add("ranks", source_path=str(self.dir), format=self.src.format, vendor="ascend",
                   framework="mindspore", framework_version=info.get("ms_version"),
                   world_size=int_cell(info.get("rank_size")), time_origin_ns=self.t_min)

    def _profiler_info(self) -> dict[str, Any]:
        p = self.file("profiler_info_{}.json")
        if p is None:
            return {}
        info = self.t.read_json(p)
        if isinstance(info, dict):
            self.t.add("metadata", key="profiler_info", value_json=json.dumps(info, sort_keys=True, default=str))
            return info
        return {}

    def _hybrid(self) -> None:
        kids = sorted(p.name for p in self.dir.iterdir() if p.is_dir() and p.name.endswith("_ascend_ms"))
        mine = [k for k in kids if k.startswith(f"rank-{self.r}_")] or kids
        if mine:
            self.t.warn(f"MindSpore 2.4 layout: read the legacy profiler files (they alone have iteration "
                        f"interval / fp_and_bp / tail); the new-layout copy {mine[0]}/ was not read")

    # ---- step trace -----------------------------------------------------------------------------------
    def _step_trace(self) -> None:
        path = self.file("step_trace_raw_{}_detail_time.csv")
        if path is None:
            self.t.warn(f"step_trace_raw_{self.r}_detail_time.csv missing: no steps")
            return
        header, rows = read_csv_table(path, self.t)
        need = {"step_num", "start_point", "end_point", "fp_point"}
        if not need <= set(header):
            raise ProfileError(path, f"not a MindSpore step trace: missing column(s) "
                                     f"{', '.join(sorted(need - set(header)))}")
        inference = "fp" in header and "bp_point" not in header
        colls = []
        for h in header:
            if h.endswith("_start_point") and h != "start_point":
                base = h[: -len("_start_point")]
                if f"{base}_end_point" in header:
                    colls.append(base)
        n_steps = 0
        for row in rows:
            step = int_cell(row.get("step_num"))
            if step is None:       # the trailing mean row ("-")
                continue
            start, end, fp = (int_cell(row.get(c)) for c in ("start_point", "end_point", "fp_point"))
            total = int_cell(row.get("total"))
            if start is None or end is None or fp is None or not (total if total is not None else end - start):
                continue           # odd all-zero rows seen in MindInsight fixtures
            s_ns, e_ns, fp_ns = start * TICK_NS, end * TICK_NS, fp * TICK_NS
            self.windows.append((step, s_ns, e_ns))
            self.t.add("steps", step=step, start_ns=s_ns, end_ns=e_ns, device_start_ns=fp_ns, device_end_ns=e_ns,
                       kept=True)
            self.seen(s_ns)
            if self.first_fp is None:
                self.first_fp = fp_ns
            n_steps += 1
            phases = (("iteration_interval", "fp") if inference else
                      ("iteration_interval", "fp_and_bp", "tail"))
            for ph in phases:
                v = int_cell(row.get(ph))
                if v is None:      # recompute from the points when a duration column is missing
                    bp = int_cell(row.get("bp_point"))
                    v = {"iteration_interval": fp - start, "fp": end - fp,
                         "fp_and_bp": None if bp is None else bp - fp,
                         "tail": None if bp is None else end - bp}[ph]
                if v is not None:
                    self.t.add("step_phases", step=step, phase=ph, dur_ns=v * TICK_NS)
            for base in colls:
                cs, ce = int_cell(row.get(f"{base}_start_point")), int_cell(row.get(f"{base}_end_point"))
                if not cs or not ce or ce < cs:
                    continue
                m = _STREAM_RE.match(base)
                name = m.group(3) if m else base
                stream = int(m.group(1)) if m else None
                dur = int_cell(row.get(base))
                dur_ns = (dur if dur else ce - cs) * TICK_NS
                coll = collective_of(name)
                op_type = (om.group(1) if (om := _OP_TYPE_RE.search(name)) else None)
                self.t.add("comm_ops", step=step, name=name, op_type=coll, start_ns=cs * TICK_NS, elapse_ns=dur_ns)
                self.t.add("device_ops", step=step, name=name, op_type=op_type, category="communication",
                           task_type="HCCL", stream_id=stream, start_ns=cs * TICK_NS, dur_ns=dur_ns,
                           collective=coll)
        if n_steps:
            self.t.has("steps", "step_phases")
        if colls and n_steps:
            self.t.has("comm_ops")
        if not n_steps:
            self.t.warn(f"{path.name}: no step rows (empty step trace)")

    # ---- operators ------------------------------------------------------------------------------------
    def _framework(self) -> dict[str, dict[str, Any]]:
        return read_framework(self.file("framework_raw_{}.csv"), self.t)

    def _op_totals(self) -> dict[str, tuple[Decimal, int, str | None]]:
        return read_op_totals(self.file("aicore_intermediate_{}_detail.csv"),
                              self.file("output_op_compute_time_{}.txt"), self.t)

    def _operators(self) -> None:
        fw = self._framework()
        totals = self._op_totals()
        timeline = self.file("output_timeline_data_{}.txt")
        if timeline is not None:
            header, rows = read_csv_table(timeline, self.t)
            start_col = next((h for h in header if h.startswith("start_time")), None)
            dur_col = next((h for h in header if h.startswith("duration")), None)
            if start_col is None or dur_col is None or "op_name" not in header:
                missing = [c for c, ok in (("op_name", "op_name" in header), ("start_time*", start_col),
                                           ("duration*", dur_col)) if not ok]
                self.t.warn(f"{timeline.name}: no {', '.join(missing)} column in the header; ignored")
                timeline = None
            else:
                s_unit = NS_PER_MS_INT if "(ms)" in start_col else 1000
                d_unit = 1000 if "(us)" in dur_col else NS_PER_MS_INT
                n = 0
                for r in rows:
                    name = r["op_name"]
                    start, dur = dec_ns(r.get(start_col, ""), s_unit), dec_ns(r.get(dur_col, ""), d_unit)
                    if start is None or dur is None:
                        continue
                    self._device_op(name, start, dur, fw.get(name, {}), totals.get(name), int_cell(r.get("stream_id")),
                                    self.step_of(start))
                    n += 1
                if n:
                    self.t.has("device_ops", "op_timeline")
        if timeline is None and totals:
            at = self.first_fp if self.first_fp is not None else 0
            self.t.warn(f"no output_timeline_data_{self.r}.txt: device ops are per-op totals (mean x count) placed "
                        "at the first step's fp_point without a step; op-type shares and dtypes are usable, the "
                        "device timeline breakdown is not")
            for name, (mean, count, _tt) in totals.items():
                dur = int((mean * count * NS_PER_MS_INT).to_integral_value(ROUND_HALF_UP))
                self._device_op(name, at, dur, fw.get(name, {}), totals.get(name), None, None)
            self.t.has("device_ops", "op_totals_only")
        if fw and any(v.get("input_dtypes") for v in fw.values()):
            self.t.has("dtypes")

    def _device_op(self, name: str, start: int, dur: int, fw: dict[str, Any],
                   total: tuple[Decimal, int, str | None] | None, stream: int | None, step: int | None) -> None:
        op_type = fw.get("op_type") or (m.group(1) if (m := _OP_TYPE_RE.search(name)) else None)
        task_type = (total[2] if total else None) or "AI_CORE"
        self.t.add("device_ops", step=step, name=name, op_type=op_type, category="compute", task_type=task_type,
                   stream_id=stream if stream is not None else fw.get("stream_id"), start_ns=start, dur_ns=dur,
                   block_dim=fw.get("block_dim"), input_shapes=fw.get("input_shapes"),
                   input_dtypes=fw.get("input_dtypes"), input_formats=fw.get("input_formats"),
                   output_shapes=fw.get("output_shapes"), output_dtypes=fw.get("output_dtypes"))
        self.seen(start)

    # ---- communication cost and cluster files -----------------------------------------------------------
    def _hccl_raw(self) -> None:
        path = self.file("hccl_raw_{}.csv")
        if path is None:
            return
        _, rows = read_csv_table(path, self.t)
        n = 0
        for r in rows:
            step = int_cell(r.get("step_num"))
            if step is None:
                continue
            for col, phase in (("communication_cost", "communication"), ("wait_cost", "comm_wait")):
                v = dec_ns(r.get(col, ""), NS_PER_MS_INT)
                if v is not None:
                    self.t.add("step_phases", step=step, phase=phase, dur_ns=v)
                    n += 1
        if n:
            self.t.has("hccl_raw")

    def _vendor_row(self, step: int, vals: dict[str, int | None]) -> None:
        """MindInsight's cluster file is MindSpore's own per-step table, the twin of torch_npu's
        step_trace_time: computation (AI Core time) -> Computing, communication_alone -> Communication(Not
        Overlapped), stage_time -> Stage, receive_alone (pure Receive, the pipeline bubble) -> Bubble; the
        file has no Free, Preparing, Overlapped or total Communication, which stay NULL."""
        if all(vals.get(c) is None for c in ("computation_time", "communication_alone_time", "stage_time",
                                              "receive_alone_time")):
            return         # the data-parallel variant (iteration_interval, fp_and_bp, tail) is not this table
        self.t.add("vendor_step_trace", step=step, computing_ns=vals.get("computation_time"),
                   comm_not_overlapped_ns=vals.get("communication_alone_time"), stage_ns=vals.get("stage_time"),
                   bubble_ns=vals.get("receive_alone_time"))

    def _cluster(self) -> None:
        """ascend_cluster_analyse_{mode}_{stages}_{size}_{r}.csv: per-step ms columns -> step_phases."""
        for path in sorted(self.dir.glob(f"ascend_cluster_analyse_*_{self.r}.csv")):
            m = _CLUSTER_RE.match(path.name)
            if not m or int(m.group(4)) != self.r:
                continue
            self.t.add("metadata", key="cluster_analyse", value_json=json.dumps(
                {"file": path.name, "parallel_mode": m.group(1), "stage_num": int(m.group(2)),
                 "rank_size": int(m.group(3))}))
            header, rows = read_csv_table(path, self.t)
            if {h.strip().lower() for h in header} <= set(_TRACE_PHASES):
                # the data-parallel variant repeats the step trace's own columns in its 10 ns ticks (not
                # ms): already read from step_trace_raw, so nothing new here
                continue
            body = rows[:-1] if len(rows) > 1 else rows     # last row = average
            steps = [w[0] for w in self.windows]
            if steps and len(body) != len(steps):
                self.t.warn(f"{path.name}: {len(body)} step row(s) for {len(steps)} step(s) in the step trace; "
                            "rows matched to steps in order")
            for i, r in enumerate(body):
                step = steps[i] if i < len(steps) else i + 1
                vals = {col.strip().lower(): dec_ns(r.get(col, ""), NS_PER_MS_INT) for col in header}
                for col, v in vals.items():
                    if v is not None:
                        self.t.add("step_phases", step=step, phase=col, dur_ns=v)
                self._vendor_row(step, vals)
            self.t.has("cluster_analyse")
            if self.t.count("vendor_step_trace"):
                self.t.has("vendor_step_trace")
