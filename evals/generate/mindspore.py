"""Seeded generators of small MindSpore profiles in the three layouts, with the MindSpore guide's cases planted.

Layouts (mindspore-format-and-db.md §1):
* `legacy_profile`  — MindSpore ≤ 2.3 flat `profiler/` folder (MindInsight files, every name suffixed `_{rank}`;
  step trace in 10 ns ticks with the trailing mean row); `hybrid=True` adds the 2.4 `rank-{r}_{ts}_ascend_ms/`
  child in the ≥ 2.5 text layout;
* `text_profile`    — ≥ 2.5 `{host}_{pid}_{ts}_ascend_ms/` rank directories, text export (trace_view.json,
  kernel_details.csv, MindSpore's step_trace_time.csv, dataset.csv, minddata files, FRAMEWORK/ queue files);
* `db_profile`      — ≥ 2.6 DB export `ASCEND_PROFILER_OUTPUT/ascend_mindspore_profiler_{rank}.db` (the msprof
  tables, no STEP_TIME, no framework tables) plus the minddata files of a `data_process=True` capture.

Cases (§9, the guide's numbers; `fixed=True` gives the guide's after-fix numbers):

| case | what | planted (ms per step) | fixed |
| --- | --- | --- | --- |
| `slow_dataloader` | ResNet-50 bs32, 1 card, training: map op with num_parallel_workers=1 (decode+crop, one core at 98.5 %), its output queue and all queues after it empty, the reader's queue full; host queue empty in 18/20 batches | interval 72.8, fp_and_bp 16.0, tail 1.2, step 90.0 | workers 12, interval 0.25, step 18.07 |
| `fp32_matmul` | VGG16 inference, 1 card: every op in float32, MatMul (FC layers) 60 ms of the forward | interval 31.34, fp 82.45, step 113.79 | float16, fp 16.89 (MatMul 6.0) |
| `comm_tail` | ResNet-50, 8 cards: one fused AllReduce of all gradients starts at the last backward op and is the whole tail | interval 0.30, fp_and_bp 17.15, tail 6.15, step 23.6 | two buckets: one overlapped with backward, tail 4.20 |

The same per-rank plan (`build_plan`) is rendered into every layout, so the numbers agree across layouts:
step windows are [end of the previous step, end of this step] (MindSpore 2.x: start_point = previous
end_point), the forward starts at fp_point = start + interval, the backward ends at bp_point, the tail runs to
the end. In dataset sink mode (`sink=True`: legacy and DB layouts by default) the device waits in a GetNext
AI CPU task that fills the interval; without sink (text layout default) the device idles during the interval.
The seed only changes how each phase is split into kernels (count, order, shares); the planted phase lengths,
worker counts, queue usages and CPU shares are exact. All times are integer ns on a fake epoch clock
(1.7e18 ns), rank r shifted by 3 µs × r.
"""

from __future__ import annotations

import csv
import itertools
import json
import random
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...analysis.ingest.ascend_common import group_hash
from ...analysis.ingest.ascend_db import (
    ENUM_API_TYPE,
    ENUM_HCCL_DATA_TYPE,
    ENUM_HCCL_LINK_TYPE,
    ENUM_HCCL_TRANSPORT_TYPE,
)
from .to_db import ANALYSIS_TABLES, DB_TABLES, Strings, create_tables, insert

MS = 1_000_000  # ns per ms
US = 1_000  # ns per µs
TICK_NS = 10  # legacy step trace unit
BASE_NS = 1_700_000_000_000_000_000
MS_VERSION_LEGACY = "2.2.14"
MS_VERSION_NEW = "2.6.0"
GROUP = "hccl_world_group"
CASES = ("slow_dataloader", "fp32_matmul", "comm_tail")


# --------------------------------------------------------------------------------------------------------
# The plan


@dataclass
class Kernel:
    name: str  # full op name, e.g. Default/network/fc1-Dense/MatMul-op12
    op_type: str
    start_ns: int
    dur_ns: int
    task_type: str  # AI_CORE | AI_VECTOR_CORE | AI_CPU
    dtype: str  # float32 | float16 | int32
    in_shapes: str  # "32,4096;4096,4096"
    out_shape: str
    stream: int
    task_id: int
    block_dim: int
    phase: str  # data | fp | bp | tail

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns


@dataclass
class Collective:
    name: str  # hcom op name, e.g. hcom_allReduce__4_0_1
    legacy_name: str  # MindSpore op name, e.g. AllReduce-op1
    start_ns: int
    dur_ns: int
    count: int  # elements
    dtype: str  # HCCL data type (FP32)
    stream: int
    task_id: int

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.dur_ns

    @property
    def size_bytes(self) -> int:
        return self.count * 4


@dataclass
class StepPlan:
    step: int
    start_ns: int  # previous step's end
    fp_ns: int  # first compute op after the data fetch
    bp_ns: int | None  # last backward op end (None for inference)
    end_ns: int
    kernels: list[Kernel] = field(default_factory=list)
    collectives: list[Collective] = field(default_factory=list)


@dataclass
class PipelineOp:
    op_id: int
    op_type: str  # MapOp, BatchOp, ImageFolderOp ...
    num_workers: int
    capacity: int  # output queue capacity (0 = no queue)
    usage: float  # planted mean output-queue fill, 0..1
    cpu_per_worker: float  # % of one core per worker
    parent: int | None
    children: list[int]
    sizes: list[int] = field(default_factory=list)  # sampled queue sizes (mean/capacity == usage exactly)


@dataclass
class RankPlan:
    case: str
    fixed: bool
    rank: int
    world_size: int
    training: bool
    sink: bool
    steps: list[StepPlan]
    pipeline: list[PipelineOp]
    host_queue_sizes: list[int]  # per batch, queue size when fetched
    host_queue_capacity: int
    init_kernel: Kernel | None  # InitDataSetQueue before step 1 (sink mode)
    bottleneck: int | None  # op id of the planted slow op


@dataclass(frozen=True)
class CaseSpec:
    training: bool
    world: int
    interval_ms: float
    fp_ms: float  # forward (training) or fp (inference: forward + rest)
    bp_ms: float  # backward (0 for inference)
    tail_ms: float  # 0 for inference
    model: str


def case_spec(case: str, fixed: bool) -> CaseSpec:
    """The guide's numbers (mindspore-format-and-db.md §9) for a case, before or after its fix."""
    if case == "slow_dataloader":
        return (
            CaseSpec(True, 1, 0.25, 5.70, 10.82, 1.30, "resnet50")
            if fixed
            else CaseSpec(True, 1, 72.8, 5.50, 10.50, 1.20, "resnet50")
        )
    if case == "fp32_matmul":
        return CaseSpec(False, 1, 31.34, 16.89 if fixed else 82.45, 0.0, 0.0, "vgg16")
    if case == "comm_tail":
        return CaseSpec(True, 8, 0.30, 5.90, 11.25, 4.20 if fixed else 6.15, "resnet50")
    raise ValueError(f"unknown case {case!r}; one of {', '.join(CASES)}")


_RESNET_FP = [
    ("Conv2D", "AI_CORE", 5),
    ("BNTrainingReduce", "AI_VECTOR_CORE", 2),
    ("BNTrainingUpdate", "AI_VECTOR_CORE", 2),
    ("ReLU", "AI_VECTOR_CORE", 1),
    ("MaxPool", "AI_CORE", 1),
    ("MatMul", "AI_CORE", 1),
]
_RESNET_BP = [
    ("Conv2DBackpropInput", "AI_CORE", 4),
    ("Conv2DBackpropFilter", "AI_CORE", 4),
    ("BNTrainingUpdateGrad", "AI_VECTOR_CORE", 2),
    ("ReluGrad", "AI_VECTOR_CORE", 1),
]
_VGG_REST = [
    ("Conv2D", "AI_CORE", 5),
    ("BiasAdd", "AI_VECTOR_CORE", 1),
    ("ReLU", "AI_VECTOR_CORE", 1),
    ("MaxPool", "AI_CORE", 1),
]
_SHAPES = {
    "Conv2D": ("32,64,56,56;64,64,3,3", "32,64,56,56"),
    "MatMul": ("32,4096;4096,4096", "32,4096"),
    "Conv2DBackpropInput": ("32,64,56,56;64,64,3,3", "32,64,56,56"),
    "Conv2DBackpropFilter": ("32,64,56,56;32,64,56,56", "64,64,3,3"),
}


class _Ids:
    def __init__(self) -> None:
        self.op = 0
        self.task = 0

    def next_op(self) -> int:
        self.op += 1
        return self.op

    def next_task(self) -> int:
        self.task += 1
        return self.task


def _fill(
    t0: int, t1: int, pieces: list[tuple[str, str, float, str]], phase: str, ids: _Ids, dtype: str, scope: str
) -> list[Kernel]:
    """Lay kernels over [t0, t1): `pieces` = (op_type, task_type, weight, dtype|''), 95 % busy.

    The first kernel starts exactly at t0 and the last one ends exactly at t1 (so fp_point / bp_point are op
    boundaries, as MindSpore defines them); durations are the weights' shares of 95 % of the span (integer ns)
    and the 5 % idle is spread evenly between consecutive kernels; the last kernel absorbs the rounding.
    """
    span = t1 - t0
    busy = span * 95 // 100
    wsum = sum(p[2] for p in pieces)
    durs = [int(busy * p[2] / wsum) for p in pieces]
    gap = (span - busy) // (len(pieces) - 1) if len(pieces) > 1 else 0
    out: list[Kernel] = []
    t = t0
    for i, ((op_type, core, _, dt), d) in enumerate(zip(pieces, durs, strict=True)):
        if i == len(pieces) - 1:
            d = t1 - t
        n = ids.next_op()
        ins, outs = _SHAPES.get(op_type, ("32,64,56,56", "32,64,56,56"))
        prefix = "Gradients/Default/network" if phase == "bp" else "Default/network"
        out.append(
            Kernel(
                f"{prefix}/{scope}/{op_type}-op{n}",
                op_type,
                t,
                d,
                core,
                dt or dtype,
                ins,
                outs,
                2,
                ids.next_task(),
                24 if core == "AI_CORE" else 48,
                phase,
            )
        )  # full 910B core counts
        t += d + gap
    return out


def _pieces(
    catalogue: list[tuple[str, str, int]], n: int, rng: random.Random
) -> list[tuple[str, str, float, str]]:
    """n kernels drawn from a catalogue (weights = relative duration), seeded."""
    out = []
    for _ in range(n):
        op, core, w = rng.choice(catalogue)
        out.append((op, core, w * rng.uniform(0.7, 1.3), ""))
    return out


def _pipeline(case: str, fixed: bool, rng: random.Random) -> tuple[list[PipelineOp], int | None]:
    """The dataset pipeline: op 0 = Batch (root) ... op 4 = ImageFolder (leaf); case 1 plants op 3."""
    slow = case == "slow_dataloader" and not fixed
    specs = [  # (type, workers, usage, cpu % per worker)
        ("BatchOp", 8, 0.02 if slow else 0.85, 8.0),
        ("MapOp", 8, 0.03 if slow else 0.88, 12.0),
        ("MapOp", 8, 0.02 if slow else 0.90, 15.0),
        ("MapOp", 1 if slow else 12, 0.04 if slow else 0.90, 98.5 if slow else 46.0),
        ("ImageFolderOp", 8, 0.97 if slow else 0.94, 20.0),
    ]
    ops = []
    for i, (t, w, u, cpu) in enumerate(specs):
        cap = 16
        n_samples = 20
        # sizes whose mean is exactly usage × capacity: round-robin of floor/ceil values
        total = round(u * cap * n_samples)
        base, extra = divmod(total, n_samples)
        sizes = [base + (1 if k < extra else 0) for k in range(n_samples)]
        rng.shuffle(sizes)
        ops.append(
            PipelineOp(
                i,
                t,
                w,
                cap,
                total / (cap * n_samples),
                cpu,
                i - 1 if i else None,
                [i + 1] if i < len(specs) - 1 else [],
                sizes,
            )
        )
    return ops, (3 if case == "slow_dataloader" else None)


def build_plan(
    case: str, rank: int = 0, *, fixed: bool = False, seed: int = 0, n_steps: int = 5, sink: bool = True
) -> RankPlan:
    """One rank's timeline for a case (see the module docstring); deterministic for (case, rank, seed)."""
    spec = case_spec(case, fixed)
    rng = random.Random(f"{case}-{fixed}-{seed}-{rank}")
    ids = _Ids()
    t = BASE_NS + rank * 3 * US
    init = None
    if sink:
        init = Kernel(
            "Default/InitDataSetQueue-op0",
            "InitDataSetQueue",
            t,
            40 * US,
            "AI_CPU",
            "int32",
            "",
            "",
            1,
            ids.next_task(),
            1,
            "data",
        )
        t += 100 * US
    steps: list[StepPlan] = []
    hcom_id = 0
    fp32 = case == "fp32_matmul" and not fixed
    dtype = "float32" if fp32 else "float16"
    for s in range(1, n_steps + 1):
        start = t
        fp = start + round(spec.interval_ms * MS)
        st = StepPlan(s, start, fp, None, 0)
        if sink:
            # the device waits for the batch inside GetNext: it fills the interval (20 µs after the last step)
            st.kernels.append(
                Kernel(
                    "Default/GetNext-op1",
                    "GetNext",
                    start + 20 * US,
                    fp - start - 30 * US,
                    "AI_CPU",
                    "float16",
                    "32,3,224,224",
                    "32,3,224,224",
                    1,
                    ids.next_task(),
                    1,
                    "data",
                )
            )
        if spec.training:
            bp = fp + round((spec.fp_ms + spec.bp_ms) * MS)
            end = bp + round(spec.tail_ms * MS)
            fwd_end = fp + round(spec.fp_ms * MS)
            st.kernels += _fill(fp, fwd_end, _pieces(_RESNET_FP, 12, rng), "fp", ids, dtype, "resnet")
            st.kernels += _fill(fwd_end, bp, _pieces(_RESNET_BP, 14, rng), "bp", ids, dtype, "resnet")
            st.bp_ns = bp
            if case == "comm_tail":
                # ResNet-50's 25.56 M fp32 gradients in one fused bucket, rounded so every HCCL task moves a
                # multiple of 512 bytes (the transfer alignment the byte-misalignment check wants)
                grads = 25_557_032 // 512 * 512
                if fixed:
                    # bucket 1 (params 0..84) overlaps the second half of backward; bucket 2 is the tail
                    b1 = grads * 2 // 5 // 512 * 512
                    c1 = Collective(
                        f"hcom_allReduce__{100 + hcom_id}_0_1",
                        "AllReduce-op1",
                        bp - round(3.0 * MS),
                        round(2.5 * MS),
                        b1,
                        "FP32",
                        3,
                        ids.next_task(),
                    )
                    c2 = Collective(
                        f"hcom_allReduce__{101 + hcom_id}_0_1",
                        "AllReduce-op2",
                        bp,
                        end - bp,
                        grads - b1,
                        "FP32",
                        3,
                        ids.next_task(),
                    )
                    st.collectives += [c1, c2]
                else:
                    st.collectives.append(
                        Collective(
                            f"hcom_allReduce__{100 + hcom_id}_0_1",
                            "AllReduce-op1",
                            bp,
                            end - bp,
                            grads,
                            "FP32",
                            3,
                            ids.next_task(),
                        )
                    )
                hcom_id += 2
            else:
                st.kernels += _fill(
                    bp,
                    end,
                    [("ApplyMomentum", "AI_VECTOR_CORE", 1.0, "float32")] * 4,
                    "tail",
                    ids,
                    dtype,
                    "optimizer",
                )
        else:
            end = fp + round(spec.fp_ms * MS)
            matmul = round((6.0 if fixed else 60.0) * MS)
            rest = _pieces(_VGG_REST, 13, rng)
            st.kernels += _fill(fp, end - matmul, rest, "fp", ids, dtype, "vgg16")
            st.kernels += _fill(
                end - matmul,
                end,
                [("MatMul", "AI_CORE", w, "") for w in (4.0, 1.0, 0.25)],
                "fp",
                ids,
                dtype,
                "classifier",
            )
        st.end_ns = end
        steps.append(st)
        t = end
    pipeline, bottleneck = _pipeline(case, fixed, rng)
    n_batches = 20
    cap = 16
    slow = case == "slow_dataloader" and not fixed
    # case 1: queue pre-filled while the graph compiles, then empty; otherwise mostly full
    host_q = [cap, cap] + [0] * (n_batches - 2) if slow else [cap - (k % 3) for k in range(n_batches)]
    return RankPlan(
        case, fixed, rank, spec.world, spec.training, sink, steps, pipeline, host_q, cap, init, bottleneck
    )


def build_plans(
    case: str, *, fixed: bool = False, seed: int = 0, n_steps: int = 5, sink: bool = True
) -> list[RankPlan]:
    return [
        build_plan(case, r, fixed=fixed, seed=seed, n_steps=n_steps, sink=sink)
        for r in range(case_spec(case, fixed).world)
    ]


# --------------------------------------------------------------------------------------------------------
# Shared writers


def _write_csv(path: Path, header: list[str], rows: list[list[Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def _us(ns: int) -> str:
    """Exact µs string with 3 decimals (how Ascend writes absolute times)."""
    return f"{ns // 1000}.{ns % 1000:03d}"


def _ms(ns: int) -> float:
    return round(ns / MS, 6)


def _summary(plan: RankPlan) -> dict[str, Any]:
    """minddata_pipeline_summary_{r}.json as MindSpore's BottleneckAnalyzer writes it (§3.4)."""
    ops = plan.pipeline
    d: dict[str, Any] = {
        "op_ids": [o.op_id for o in ops],
        "op_names": [o.op_type.removesuffix("Op") for o in ops],
        "pipeline_ops": [f"{o.op_type.removesuffix('Op')}(id={o.op_id})" for o in ops],
        "num_workers": [o.num_workers for o in ops],
        "queue_average_size": [round(sum(o.sizes) / len(o.sizes), 4) for o in ops],
        "queue_utilization_pct": [round(o.usage * 100, 4) for o in ops],
        "queue_empty_freq_pct": [
            round(100 * sum(1 for s in o.sizes if s == 0) / len(o.sizes), 4) for o in ops
        ],
        "children_ids": [o.children for o in ops],
        "parent_id": [o.parent if o.parent is not None else -1 for o in ops],
        "avg_cpu_pct": [round(o.cpu_per_worker * o.num_workers, 4) for o in ops],
        "per_pipeline_time": [-1],
        "per_push_queue_time": [-1],
        "per_batch_time": [-1],
        "avg_cpu_pct_per_worker": [o.cpu_per_worker for o in ops],
    }
    if plan.bottleneck is not None:
        b = ops[plan.bottleneck]
        label = f"{b.op_type.removesuffix('Op')}(id={b.op_id})"
        d["cpu_analysis_details"] = [
            f"{label} is using {b.cpu_per_worker}% CPU per worker. Setting "
            f"num_parallel_workers>{b.num_workers} might bring extra performance."
        ]
        d["queue_analysis_details"] = [
            f"{label}'s output queue is empty {d['queue_empty_freq_pct'][b.op_id]}% of the time."
        ]
        d["bottleneck_warning"] = [label]
        d["bottleneck_suggestion"] = [
            f"{label} may be the bottleneck. Please try increasing "
            f"num_parallel_workers to a value above {b.num_workers}."
        ]
    return d


def write_minddata(plan: RankPlan, folder: Path, raw_folder: Path, rid: int) -> None:
    """Pipeline raw CSV, summary JSON + transposed CSV, CPU sampler JSON, host queue file, chip queue file."""
    folder.mkdir(parents=True, exist_ok=True)
    raw_folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for o in plan.pipeline:
        rows.append(
            [
                o.op_id,
                o.op_type,
                o.num_workers,
                json.dumps(o.sizes),
                round(sum(o.sizes) / len(o.sizes), 4),
                o.capacity,
                o.usage,
                1000,
                "" if o.parent is None else o.parent,
                json.dumps(o.children) if o.children else "",
            ]
        )
    _write_csv(
        folder / f"minddata_pipeline_raw_{rid}.csv",
        [
            "op_id",
            "op_type",
            "num_workers",
            "output_queue_size",
            "output_queue_average_size",
            "output_queue_length",
            "output_queue_usage_rate",
            "sample_interval",
            "parent_id",
            "children_id",
        ],
        rows,
    )
    summary = _summary(plan)
    (folder / f"minddata_pipeline_summary_{rid}.json").write_text(json.dumps(summary, indent=1))
    with open(folder / f"minddata_pipeline_summary_{rid}.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        for k, v in summary.items():
            w.writerow([k, *[json.dumps(x) if isinstance(x, list) else x for x in v]])
    n = 10
    # per-op CPU samples: user+sys, scaled so 100 = one core; symmetric ±2 noise keeps the mean exact
    op_info = []
    for o in plan.pipeline:
        tot = o.cpu_per_worker * o.num_workers
        user = [round(tot * 0.8 + (2 if k % 2 else -2), 4) for k in range(n)]
        sys_ = [round(tot * 0.2, 4)] * n
        op_info.append({"op_id": o.op_id, "metrics": {"user_utilization": user, "sys_utilization": sys_}})
    busy = sum(o.cpu_per_worker * o.num_workers for o in plan.pipeline) / 96  # 96 cores
    (raw_folder / f"minddata_cpu_utilization_{rid}.json").write_text(
        json.dumps(
            {
                "cpu_processor_num": 96,
                "sampling_interval": 1000,
                "time_stamp": [1000 * k for k in range(n)],
                "device_info": {
                    "idle_utilization": [round(100 - busy, 4)] * n,
                    "user_utilization": [round(busy, 4)] * n,
                    "sys_utilization": [0] * n,
                    "io_utilization": [0] * n,
                    "context_switch_count": [0] * n,
                    "runnable_process": [1] * n,
                },
                "op_info": op_info,
                "process_info": {"user_utilization": [0] * n, "sys_utilization": [0] * n},
            }
        )
    )
    # host queue: 4 records per batch (push, batch, pipeline, depth); non-sink: iterator file, push = 0
    lines = []
    ts = 1_700_000_000_000
    slow = plan.case == "slow_dataloader" and not plan.fixed
    for b, size in enumerate(plan.host_queue_sizes, start=1):
        pipe = 72.6 if slow and size == 0 else 0.4
        push = 0.0 if not plan.sink else 0.15
        lines += [
            f"0 1 {b} {push} {ts}",
            f"0 2 {b} {pipe + push:.3f} {ts}",
            f"0 0 {b} {pipe} {ts}",
            f"1 {plan.host_queue_capacity} {b} {size} {ts}",
        ]
        ts += 90
    name = f"device_queue_profiling_{rid}.txt" if plan.sink else f"dataset_iterator_profiling_{rid}.txt"
    (raw_folder / name).write_text("\n".join(lines) + "\n")
    if plan.sink:
        aicpu = ["node_name start_time end_time queue_size"]
        t0 = 1_700_000_000_000_000
        for k, size in enumerate(plan.host_queue_sizes):
            q = 0 if slow and k >= 2 else max(size - 1, 1)
            aicpu.append(
                f"GetNext_dequeue_wait {t0 + k * 90_000} {t0 + k * 90_000 + (72_000 if q == 0 else 20)} {q}"
            )
        (raw_folder / f"minddata_aicpu_{rid}.txt").write_text("\n".join(aicpu) + "\n")


def _device_info(rank_dir: Path, device: int, ts: str) -> None:
    d = rank_dir / f"PROF_000001_{ts}_MSSYNTHETIC" / f"device_{device}"
    d.mkdir(parents=True, exist_ok=True)
    (d / f"info.json.{device}").write_text(
        json.dumps(
            {
                "DeviceInfo": [
                    {
                        "id": device,
                        "ai_core_num": 24,
                        "aiv_num": 48,
                        "aic_frequency": "1800",
                        "ai_cpu_core_num": 6,
                        "hwts_frequency": "50",
                    }
                ],
                "platform_version": "Ascend910B",
                "rank_id": device,
            }
        )
    )


# --------------------------------------------------------------------------------------------------------
# Legacy ≤ 2.3 (and the 2.4 hybrid)


def _legacy_dtype(dtype: str) -> str:
    """2.x framework_raw data types: msprof strings with the underscores removed (DT_FLOAT -> DTFLOAT)."""
    return {"float32": "DTFLOAT", "float16": "DTFLOAT16", "int32": "DTINT32"}.get(dtype, dtype.upper())


def write_legacy_rank(plan: RankPlan, folder: Path, *, timeline: bool = True) -> None:
    """All MindInsight files of one rank into the flat `profiler/` folder."""
    r = plan.rank
    folder.mkdir(parents=True, exist_ok=True)
    first, last = plan.steps[0], plan.steps[-1]
    (folder / f"profiler_info_{r}.json").write_text(
        json.dumps(
            {
                "context_mode": 0,
                "rank_id": r,
                "ms_version": MS_VERSION_LEGACY,
                "parallel_mode": "data_parallel" if plan.world_size > 1 else "stand_alone",
                "stage_num": 1,
                "rank_size": plan.world_size,
                "profiling_start_time": first.start_ns // MS,
                "profiling_stop_time": last.end_ns // MS,
                "analyse_start_time": last.end_ns // MS + 10,
                "analyse_end_time": last.end_ns // MS + 20,
                "graph_ids": [1],
                "is_heterogeneous": False,
            }
        )
    )
    fp_op = next(k for k in first.kernels if k.phase == "fp")
    points = {"fp_start": fp_op.name}
    if plan.training:
        points["bp_end"] = [k for k in first.kernels if k.phase == "bp"][-1].name
    (folder / f"step_trace_point_info_{r}.json").write_text(json.dumps(points))
    # step trace: 10 ns ticks; 2.x triple order (duration, start, end) per collective
    coll_names = [f"stream_{c.stream}_{k}_{c.legacy_name}" for k, c in enumerate(first.collectives)]
    if plan.training:
        header = [
            "step_num",
            "start_point",
            "end_point",
            "total",
            "fp_point",
            "bp_point",
            "iteration_interval",
            "fp_and_bp",
            "tail",
        ]
    else:
        header = ["step_num", "start_point", "end_point", "total", "fp_point", "iteration_interval", "fp"]
    for n in coll_names:
        header += [n, f"{n}_start_point", f"{n}_end_point"]
    rows: list[list[Any]] = []
    for st in plan.steps:
        s, e, f = st.start_ns // TICK_NS, st.end_ns // TICK_NS, st.fp_ns // TICK_NS
        if plan.training:
            b = (st.bp_ns or 0) // TICK_NS
            row: list[Any] = [st.step, s, e, e - s, f, b, f - s, b - f, e - b]
        else:
            row = [st.step, s, e, e - s, f, f - s, e - f]
        for c in st.collectives:
            row += [c.dur_ns // TICK_NS, c.start_ns // TICK_NS, c.end_ns // TICK_NS]
        rows.append(row)
    rows.append(["-"] + [round(sum(r_[i] for r_ in rows) / len(rows)) for i in range(1, len(header))])
    _write_csv(folder / f"step_trace_raw_{r}_detail_time.csv", header, rows)
    # operators
    kernels = [k for st in plan.steps for k in st.kernels if k.task_type != "AI_CPU"]
    by_name: dict[str, list[Kernel]] = {}
    for k in kernels:
        by_name.setdefault(k.name, []).append(k)
    _write_csv(
        folder / f"aicore_intermediate_{r}_detail.csv",
        ["full_op_name", "task_duration", "execution_frequency", "task_type"],
        [
            [n, round(sum(k.dur_ns for k in ks) / len(ks) / MS, 6), len(ks), ks[0].task_type]
            for n, ks in by_name.items()
        ],
    )
    by_type: dict[str, list[Kernel]] = {}
    for k in kernels:
        by_type.setdefault(k.op_type, []).append(k)
    total = sum(k.dur_ns for k in kernels)
    _write_csv(
        folder / f"aicore_intermediate_{r}_type.csv",
        ["op_type", "total_time", "execution_frequency", "percent"],
        [
            [t, _ms(sum(k.dur_ns for k in ks)), len(ks), round(sum(k.dur_ns for k in ks) / total, 6)]
            for t, ks in sorted(by_type.items(), key=lambda kv: -sum(k.dur_ns for k in kv[1]))
        ],
    )
    fr = []
    for n, ks in by_name.items():
        k = ks[0]
        info = {
            f"Input_{i}": {
                "format": "NCHW" if "," in sh and sh.count(",") == 3 else "ND",
                "data_type": _legacy_dtype(k.dtype),
                "shape": sh,
            }
            for i, sh in enumerate(k.in_shapes.split(";"))
            if sh
        }
        info["Output_0"] = {"format": "ND", "data_type": _legacy_dtype(k.dtype), "shape": k.out_shape}
        fr.append(
            [
                k.task_id,
                k.stream,
                k.block_dim,
                n,
                n.rsplit("/", 1)[-1],
                k.op_type,
                "Default",
                json.dumps(info),
                1,
                "TBE",
            ]
        )
    _write_csv(
        folder / f"framework_raw_{r}.csv",
        [
            "task_id",
            "stream_id",
            "block_dim",
            "full_op_name",
            "op_name",
            "op_type",
            "subgraph",
            "op_info",
            "model_id",
            "kernel_type",
        ],
        fr,
    )
    if timeline:
        _write_csv(
            folder / f"output_timeline_data_{r}.txt",
            ["op_name", "stream_id", "start_time(us)", "duration(ms)"],
            [[k.name, k.stream, _us(k.start_ns), round(k.dur_ns / MS, 6)] for k in kernels],
        )
    if plan.world_size > 1:
        hrows: list[list[Any]] = []
        for st in plan.steps:
            cost = sum(c.dur_ns for c in st.collectives)
            links = {
                f"{r}-{(r + 1) % plan.world_size}": {
                    "SDMA": [_ms(cost), sum(c.size_bytes for c in st.collectives) / 1024, 16.6]
                }
            }
            hrows.append(
                [
                    st.step,
                    _ms(cost),
                    _ms(cost // 10),
                    json.dumps(links),
                    json.dumps({c.legacy_name: [_ms(c.dur_ns)] for c in st.collectives}),
                ]
            )
        hrows.append(
            [
                "-",
                round(sum(float(h[1]) for h in hrows) / len(hrows), 6),
                round(sum(float(h[2]) for h in hrows) / len(hrows), 6),
                "",
                "",
            ]
        )
        _write_csv(
            folder / f"hccl_raw_{r}.csv",
            ["step_num", "communication_cost", "wait_cost", "link_info", "communication_operator_cost"],
            hrows,
        )
    write_minddata(plan, folder, folder, r)


def legacy_profile(
    out: Path,
    case: str = "slow_dataloader",
    *,
    fixed: bool = False,
    seed: int = 0,
    n_steps: int = 5,
    hybrid: bool = False,
    timeline: bool = True,
) -> Path:
    """Write a MindSpore ≤ 2.3 `profiler/` folder (all ranks flat in it) under `out`; returns that folder.

    `hybrid=True` writes the 2.4 layout: the same folder plus `rank-{r}_{ts}_ascend_ms/` children in the
    ≥ 2.5 text layout. `timeline=False` leaves out output_timeline_data (op totals only).
    """
    folder = Path(out) / "profiler"
    plans = build_plans(case, fixed=fixed, seed=seed, n_steps=n_steps, sink=True)
    for plan in plans:
        write_legacy_rank(plan, folder, timeline=timeline)
        if hybrid:
            write_text_rank(plan, folder / f"rank-{plan.rank}_20250101120000{plan.rank:03d}_ascend_ms")
    return folder


# --------------------------------------------------------------------------------------------------------
# ≥ 2.5 text layout


def _merge(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def _minus(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Interval set difference a − b (both merged)."""
    out = []
    for s, e in a:
        cur = s
        for bs, be in b:
            if be <= cur or bs >= e:
                continue
            if bs > cur:
                out.append((cur, bs))
            cur = max(cur, be)
        if cur < e:
            out.append((cur, e))
    return out


def _within(iv: list[tuple[int, int]], w0: int, w1: int, clip: bool) -> int:
    """Σ length of intervals starting in [w0, w1) (not clipped), or clipped to the window."""
    if clip:
        return sum(max(0, min(e, w1) - max(s, w0)) for s, e in iv)
    return sum(e - s for s, e in iv if w0 <= s < w1)


def _dtype_dt(dtype: str) -> str:
    return {"float32": "DT_FLOAT", "float16": "DT_FLOAT16", "int32": "DT_INT32"}.get(dtype, dtype.upper())


def write_text_rank(plan: RankPlan, rank_dir: Path, *, cann_step_trace: bool = False) -> None:
    """One ≥ 2.5 `*_ascend_ms` rank dir of the text export (Level1, CPU+NPU activity, data_process=True)."""
    r = plan.rank
    out = rank_dir / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True, exist_ok=True)
    ts = rank_dir.name.split("_")[-3] if rank_dir.name.count("_") >= 3 else "20250101120000000"
    (rank_dir / f"profiler_info_{r}.json").write_text(
        json.dumps(
            {
                "profiler_parameters": {
                    "activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"],
                    "profiler_level": "ProfilerLevel.Level1",
                    "with_stack": False,
                    "data_process": True,
                    "schedule": None,
                    "export_type": ["text"],
                    "data_simplification": not cann_step_trace,
                },
                "ms_profiler_info": {"start_collect_syscnt": 0},
                "cann_profiler_info": {},
                "ms_version": MS_VERSION_NEW,
                "cann_version": "8.1.RC1",
                "jit_level": "O2" if plan.sink else "O0",
                "rank_id": r,
            }
        )
    )
    (rank_dir / "profiler_metadata.json").write_text(json.dumps({}))
    _device_info(rank_dir, r, ts)
    kernels = [k for st in plan.steps for k in st.kernels] + ([plan.init_kernel] if plan.init_kernel else [])
    kernels.sort(key=lambda k: k.start_ns)
    colls = [c for st in plan.steps for c in st.collectives]
    ms_pid, hw_pid, hccl_pid, ov_pid, freq_pid = 3000 + r, 800 + r, 900 + r, 300011 + r, 700 + r
    ev: list[dict[str, Any]] = []

    def meta(pid: int, name: str, label: str, sort: int) -> None:
        ev.extend(
            [
                {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}},
                {"ph": "M", "name": "process_labels", "pid": pid, "tid": 0, "args": {"labels": label}},
                {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "args": {"sort_index": sort}},
            ]
        )

    meta(ms_pid, "MindSpore", "CPU", 0)
    meta(hw_pid, "Ascend Hardware", f"NPU {r}", 8)
    meta(ov_pid, "Overlap Analysis", f"NPU {r}", 11)
    meta(freq_pid, "AI Core Freq", f"NPU {r}", 12)
    for st in plan.steps:
        ev.append(
            {
                "ph": "X",
                "name": f"ProfilerStep#{st.step}",
                "pid": ms_pid,
                "tid": ms_pid,
                "ts": _us(st.start_ns),
                "dur": round((st.end_ns - st.start_ns) / US, 3),
                "cat": "cpu_op",
                "args": {},
            }
        )
    for k in kernels:
        ev.append(
            {
                "ph": "X",
                "name": k.name,
                "pid": hw_pid,
                "tid": k.stream,
                "ts": _us(k.start_ns),
                "dur": round(k.dur_ns / US, 3),
                "args": {
                    "Model Id": 1,
                    "Task Type": k.task_type,
                    "Stream Id": k.stream,
                    "Task Id": k.task_id,
                },
            }
        )
    ghash = group_hash(GROUP)
    if colls:
        meta(hccl_pid, "HCCL", f"NPU {r}", 9)
        ev.append(
            {
                "ph": "M",
                "name": "thread_name",
                "pid": hccl_pid,
                "tid": 0,
                "args": {"name": f"Group {ghash} Communication"},
            }
        )
        ev.append({"ph": "M", "name": "thread_name", "pid": hccl_pid, "tid": 1, "args": {"name": "Plane 0"}})
        for c in colls:
            ev.append(
                {
                    "ph": "X",
                    "name": c.name,
                    "pid": hccl_pid,
                    "tid": 0,
                    "ts": _us(c.start_ns),
                    "dur": round(c.dur_ns / US, 3),
                    "args": {
                        "model id": 1,
                        "data_type": c.dtype,
                        "alg_type": "MESH-RING-NA-NA",
                        "count": c.count,
                    },
                }
            )
            for sub in _subtasks(c, r, plan.world_size):
                ev.append(
                    {
                        "ph": "X",
                        "name": sub["name"],
                        "pid": hccl_pid,
                        "tid": 1,
                        "ts": _us(sub["start"]),
                        "dur": round(sub["dur"] / US, 3),
                        "args": sub["args"],
                    }
                )
    comp = _merge([(k.start_ns, k.end_ns) for k in kernels])
    comm = _merge([(c.start_ns, c.end_ns) for c in colls])
    comm_no = _minus(comm, comp)
    busy = _merge(comp + comm)
    free = [(a[1], b[0]) for a, b in itertools.pairwise(busy) if b[0] > a[1]]
    for name, tid, iv in (
        ("Computing", 0, comp),
        ("Communication", 1, comm),
        ("Communication(Not Overlapped)", 2, comm_no),
        ("Free", 3, free),
    ):
        for s, e in iv:
            ev.append(
                {
                    "ph": "X",
                    "name": name,
                    "pid": ov_pid,
                    "tid": tid,
                    "ts": _us(s),
                    "dur": round((e - s) / US, 3),
                    "args": {},
                }
            )
    for t in (plan.steps[0].start_ns, plan.steps[-1].end_ns):
        ev.append(
            {
                "ph": "C",
                "name": "AI Core Freq",
                "pid": freq_pid,
                "tid": 0,
                "ts": _us(t),
                "args": {"MHz": 1800},
            }
        )
    (out / "trace_view.json").write_text(json.dumps(ev))
    # kernel_details.csv (MindSpore: no Device_id; Level1 columns)
    kd_rows = []
    for k in kernels:
        n_in = len([s for s in k.in_shapes.split(";") if s]) or 1
        kd_rows.append(
            [
                1,
                k.task_id,
                k.stream,
                k.name,
                k.op_type,
                "static",
                k.task_type,
                _us(k.start_ns) + "\t",
                round(k.dur_ns / US, 3),
                0,
                k.block_dim,
                0,
                "NO",
                f'"{k.in_shapes}"',
                ";".join([_dtype_dt(k.dtype)] * n_in),
                ";".join(["ND"] * n_in),
                f'"{k.out_shape}"',
                _dtype_dt(k.dtype),
                "ND",
                "N/A",
            ]
        )
    _write_csv(
        out / "kernel_details.csv",
        [
            "Model ID",
            "Task ID",
            "Stream ID",
            "Name",
            "Type",
            "OP State",
            "Accelerator Core",
            "Start Time(us)",
            "Duration(us)",
            "Wait Time(us)",
            "Block Dim",
            "Mix Block Dim",
            "HF32 Eligible",
            "Input Shapes",
            "Input Data Types",
            "Input Formats",
            "Output Shapes",
            "Output Data Types",
            "Output Formats",
            "Context ID",
        ],
        kd_rows,
    )
    by_type: dict[tuple[str, str], list[int]] = {}
    for k in kernels:
        by_type.setdefault((k.op_type, k.task_type), []).append(k.dur_ns)
    total = sum(k.dur_ns for k in kernels)
    _write_csv(
        out / "op_statistic.csv",
        [
            "OP Type",
            "Core Type",
            "Count",
            "Total Time(us)",
            "Min Time(us)",
            "Avg Time(us)",
            "Max Time(us)",
            "Ratio(%)",
        ],
        [
            [
                t,
                c,
                len(d),
                round(sum(d) / US, 3),
                round(min(d) / US, 3),
                round(sum(d) / len(d) / US, 3),
                round(max(d) / US, 3),
                round(100 * sum(d) / total, 3),
            ]
            for (t, c), d in by_type.items()
        ],
    )
    # step_trace_time.csv, MindSpore variant (§2.3): no Device_id; Stage = HCCL span − Bubble
    stt = []
    for st in plan.steps:
        w0, w1 = st.start_ns, st.end_ns
        c = _within(comp, w0, w1, False)
        m = _within(comm, w0, w1, False)
        mno = _within(comm_no, w0, w1, False)
        f = _within(free, w0, w1, True)
        hc = [x for x in colls if w0 <= x.start_ns < w1]
        stage = (
            (
                max(x.start_ns for x in hc)
                - min(x.start_ns for x in hc)
                + max(hc, key=lambda x: x.start_ns).dur_ns
            )
            if hc
            else 0
        )
        first = min([k.start_ns for k in st.kernels] + [x.start_ns for x in st.collectives])
        stt.append([st.step, *(round(v / US, 3) for v in (c, mno, m - mno, m, f, stage, 0, mno, first - w0))])
    _write_csv(
        out / "step_trace_time.csv",
        [
            "Step",
            "Computing",
            "Communication(Not Overlapped)",
            "Overlapped",
            "Communication",
            "Free",
            "Stage",
            "Bubble",
            "Communication(Not Overlapped and Exclude Receive)",
            "Preparing",
        ],
        stt,
    )
    if colls:
        _communication_json(plan, out, ghash)
    # dataset.csv: pipeline-level and per-op stages (µs)
    slow = plan.case == "slow_dataloader" and not plan.fixed
    ds = [["Pipeline", "GetNext", len(plan.steps), 72_650.0 if slow else 180.0, ""]]
    for o in plan.pipeline:
        label = f"{o.op_type.removesuffix('Op')}(ID:{o.op_id})"
        work = 2_270.0 if (slow and o.op_id == plan.bottleneck) else 150.0
        ds.append([label, "WorkerProcess", 32 * len(plan.steps), work, ""])
        ds.append([label, "WorkerGet", 32 * len(plan.steps), 12.0, ""])
    _write_csv(
        out / "dataset.csv", ["Operation", "Stage", "Occurrences", "Avg. time (us)", "Custom Info"], ds
    )
    write_minddata(plan, out, rank_dir / "FRAMEWORK", r)
    if cann_step_trace:
        _cann_step_trace(plan, rank_dir, ts)


def _subtasks(c: Collective, rank: int, world: int) -> list[dict[str, Any]]:
    """Four HCCL Memcpy/Reduce tasks inside a collective (ring neighbour over HCCS)."""
    size = c.size_bytes // 4
    span = c.dur_ns // 4
    out = []
    for k in range(4):
        name = "Memcpy" if k % 2 == 0 else "Reduce_Inline"
        dur = span * 9 // 10
        out.append(
            {
                "name": name,
                "start": c.start_ns + k * span,
                "dur": dur,
                "args": {
                    "notify id": k,
                    "stream id": c.stream,
                    "task id": k,
                    "task type": name.replace("_", " "),
                    "src rank": rank,
                    "dst rank": (rank + 1) % world,
                    "transport type": "SDMA",
                    "size(Byte)": size,
                    "data type": c.dtype,
                    "link type": "HCCS",
                    "bandwidth(GB/s)": round(size / dur, 4),
                },
            }
        )
    return out


def _communication_json(plan: RankPlan, out: Path, ghash: str) -> None:
    """communication.json and communication_matrix.json per step (ms / MB = 10^6 bytes)."""
    comm: dict[str, Any] = {}
    matrix: dict[str, Any] = {}
    r, world = plan.rank, plan.world_size
    for st in plan.steps:
        ops: dict[str, Any] = {}
        mops: dict[str, Any] = {}
        for c in st.collectives:
            transit = c.dur_ns * 9 // 10
            mb = c.size_bytes / 1e6
            ops[f"{c.name}@{ghash}"] = {
                "Communication Time Info": {
                    "Start Timestamp(us)": float(_us(c.start_ns)),
                    "Elapse Time(ms)": _ms(c.dur_ns),
                    "Transit Time(ms)": _ms(transit),
                    "Wait Time(ms)": _ms(c.dur_ns - transit),
                    "Synchronization Time(ms)": _ms((c.dur_ns - transit) // 2),
                    "Idle Time(ms)": 0.0,
                    "Wait Time Ratio": round((c.dur_ns - transit) / c.dur_ns, 4),
                    "Synchronization Time Ratio": round((c.dur_ns - transit) / 2 / c.dur_ns, 4),
                },
                "Communication Bandwidth Info": {
                    tr: {
                        "Transit Size(MB)": round(mb, 6),
                        "Transit Time(ms)": _ms(transit),
                        "Bandwidth(GB/s)": round(mb / _ms(transit), 4),
                        "Large Packet Ratio": 1.0,
                        "Size Distribution": {f"{mb / 4:.6f}": [4, _ms(transit)]} if tr == "HCCS" else {},
                    }
                    for tr in ("HCCS", "SDMA")
                }
                | {
                    "RDMA": {
                        "Transit Size(MB)": 0,
                        "Transit Time(ms)": 0,
                        "Bandwidth(GB/s)": 0,
                        "Large Packet Ratio": 0,
                        "Size Distribution": {},
                    }
                },
            }
            dst = (r + 1) % world
            mops[f"{c.name}@{ghash}"] = {
                f"{r}-{dst}": {
                    "Transport Type": "HCCS",
                    "Transit Size(MB)": round(mb, 6),
                    "Transit Time(ms)": _ms(transit),
                    "Bandwidth(GB/s)": round(mb / _ms(transit), 4),
                    "Op Name": c.name,
                }
            }
        comm[f"step{st.step}"] = {"collective": ops, "p2p": {}}
        matrix[f"step{st.step}"] = {"collective": mops, "p2p": {}}
    (out / "communication.json").write_text(json.dumps(comm, indent=1))
    (out / "communication_matrix.json").write_text(json.dumps(matrix, indent=1))


def _cann_step_trace(plan: RankPlan, rank_dir: Path, ts: str) -> None:
    """PROF_*/mindstudio_profiler_output/step_trace_{ts}.csv (µs): kept with data_simplification=False."""
    rows = []
    for st in plan.steps:
        bp = st.bp_ns if st.bp_ns is not None else st.end_ns
        rows.append(
            [
                st.step,
                _us(st.fp_ns),
                _us(bp),
                _us(st.end_ns),
                round((st.end_ns - st.fp_ns) / US, 3),
                round((bp - st.fp_ns) / US, 3),
                round((st.end_ns - bp) / US, 3),
                round((st.fp_ns - st.start_ns) / US, 3),
                1,
            ]
        )
    # MindSpore's own model-level row, which readers must drop
    rows.append([1, _us(plan.steps[0].start_ns), "0", _us(plan.steps[-1].end_ns), 0, 0, 0, 0, 4294967295])
    _write_csv(
        rank_dir / f"PROF_000001_{ts}_MSSYNTHETIC" / "mindstudio_profiler_output" / f"step_trace_{ts}.csv",
        [
            "Iteration ID",
            "FP Start(us)",
            "BP End(us)",
            "Iteration End(us)",
            "Iteration Time(us)",
            "FP to BP Time(us)",
            "Iteration Refresh(us)",
            "Data Aug Bound(us)",
            "Model ID",
        ],
        rows,
    )


def text_profile(
    out: Path,
    case: str = "slow_dataloader",
    *,
    fixed: bool = False,
    seed: int = 0,
    n_steps: int = 5,
    sink: bool = False,
    cann_step_trace: bool = False,
) -> Path:
    """Write ≥ 2.5 `*_ascend_ms` rank dirs (text export) under `out`; returns `out`.

    `sink=False` (default): the host fetches data (dataset_iterator_profiling), the device idles during the
    interval; `sink=True` adds the GetNext wait task and device_queue files. `cann_step_trace=True` keeps the
    CANN step trace (data_simplification=False) with the literal Data Aug Bound.
    """
    out = Path(out)
    for plan in build_plans(case, fixed=fixed, seed=seed, n_steps=n_steps, sink=sink):
        write_text_rank(
            plan,
            out / f"node0_{41000 + plan.rank}_20250101120000{plan.rank:03d}_ascend_ms",
            cann_step_trace=cann_step_trace,
        )
    return out


# --------------------------------------------------------------------------------------------------------
# ≥ 2.6 DB export


def write_db_rank(plan: RankPlan, rank_dir: Path, *, with_minddata: bool = True) -> Path:
    """`ascend_mindspore_profiler_{rank}.db` (msprof tables only) + communication_analyzer.db for one rank."""
    r = plan.rank
    out = rank_dir / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True, exist_ok=True)
    ts = "20250101120000000"
    (rank_dir / f"profiler_info_{r}.json").write_text(
        json.dumps(
            {
                "profiler_parameters": {
                    "activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"],
                    "profiler_level": "ProfilerLevel.Level1",
                    "with_stack": False,
                    "data_process": with_minddata,
                    "export_type": ["text", "db"] if with_minddata else ["db"],
                },
                "ms_version": MS_VERSION_NEW,
                "cann_version": "8.1.RC1",
                "jit_level": "O2",
                "rank_id": r,
            }
        )
    )
    _device_info(rank_dir, r, ts)
    s = Strings()
    rows: dict[str, list[tuple[Any, ...]]] = {t: [] for t in DB_TABLES}
    kernels = [k for st in plan.steps for k in st.kernels] + ([plan.init_kernel] if plan.init_kernel else [])
    kernels.sort(key=lambda k: k.start_ns)
    gid = 0
    conn = 0
    pid_tid = (4000 + r) << 32 | (4000 + r)
    rt = {"AI_CORE": "KERNEL_AICORE", "AI_VECTOR_CORE": "KERNEL_AIVEC", "AI_CPU": "KERNEL_AICPU"}
    for k in kernels:
        gid += 1
        conn += 1
        rows["TASK"].append(
            (k.start_ns, k.end_ns, r, conn, gid, 0, s(rt[k.task_type]), 4294967295, k.stream, k.task_id, 1)
        )
        n_in = len([x for x in k.in_shapes.split(";") if x]) or 1
        rows["COMPUTE_TASK_INFO"].append(
            (
                s(k.name),
                gid,
                k.block_dim,
                0,
                s(k.task_type),
                s(k.op_type),
                s(";".join(["ND"] * n_in)),
                s(";".join([_dtype_dt(k.dtype)] * n_in)),
                s(k.in_shapes or None),
                s("ND"),
                s(_dtype_dt(k.dtype)),
                s(k.out_shape or None),
                None,
                s("static"),
                s("NO"),
            )
        )
        # the launch on the host, 20 µs before the task
        rows["CANN_API"].append(
            (k.start_ns - 25 * US, k.start_ns - 20 * US, 10000, pid_tid, conn, s("launch"))
        )
    ghash_name = GROUP
    for op_id, c in enumerate((c for st in plan.steps for c in st.collectives), start=1):
        conn += 1
        rows["COMMUNICATION_OP"].append(
            (
                s(c.name),
                c.start_ns,
                c.end_ns,
                conn,
                s(ghash_name),
                op_id,
                0,
                0,
                4,
                s("MESH-RING-NA-NA"),
                c.count,
                s("hcom_allReduce_"),
                r,
            )
        )
        rows["CANN_API"].append(
            (c.start_ns - 30 * US, c.start_ns - 20 * US, 5500, pid_tid, conn, s("HcomAllReduce"))
        )
        for sub in _subtasks(c, r, plan.world_size):
            gid += 1
            a = sub["args"]
            rows["TASK"].append(
                (
                    sub["start"],
                    sub["start"] + sub["dur"],
                    r,
                    conn,
                    gid,
                    0,
                    s(a["task type"]),
                    4294967295,
                    c.stream,
                    a["task id"],
                    1,
                )
            )
            rows["COMMUNICATION_TASK_INFO"].append(
                (
                    s(sub["name"]),
                    gid,
                    s(a["task type"]),
                    0,
                    s(ghash_name),
                    a["notify id"],
                    65535,
                    a["src rank"],
                    a["dst rank"],
                    0,
                    a["size(Byte)"],
                    4,
                    1,
                    op_id,
                    0,
                    a["bandwidth(GB/s)"] * 1e9,
                )
            )
    t0, t1 = plan.steps[0].start_ns, plan.steps[-1].end_ns
    rows["AICORE_FREQ"] += [(r, t0, 1800), (r, t1, 1800)]
    rows["SESSION_TIME_INFO"].append((t0 - MS, t1 + MS))
    rows["NPU_INFO"].append((r, "Ascend910B"))
    rows["META_DATA"].append(("SCHEMA_VERSION", "1.1.0"))
    db = out / f"ascend_mindspore_profiler_{r}.db"
    db.unlink(missing_ok=True)
    con = sqlite3.connect(db)
    try:
        ms_tables = {
            k: v
            for k, v in DB_TABLES.items()
            if k
            not in (
                "PYTORCH_API",
                "CONNECTION_IDS",
                "PYTORCH_CALLCHAINS",
                "STEP_TIME",
                "GC_RECORD",
                "MEMORY_RECORD",
                "RANK_DEVICE_MAP",
            )
        }
        create_tables(con, ms_tables)
        for table, enum in (
            ("ENUM_API_TYPE", ENUM_API_TYPE),
            ("ENUM_HCCL_DATA_TYPE", ENUM_HCCL_DATA_TYPE),
            ("ENUM_HCCL_LINK_TYPE", ENUM_HCCL_LINK_TYPE),
            ("ENUM_HCCL_TRANSPORT_TYPE", ENUM_HCCL_TRANSPORT_TYPE),
        ):
            insert(con, table, sorted(enum.items()))
        for table, rs in rows.items():
            if table in ms_tables:
                insert(con, table, rs)
        insert(con, "STRING_IDS", [(i, v) for v, i in s.ids.items()])
        con.commit()
    finally:
        con.close()
    colls = [c for st in plan.steps for c in st.collectives]
    if colls:
        adb = out / "communication_analyzer.db"
        adb.unlink(missing_ok=True)
        con = sqlite3.connect(adb)
        try:
            create_tables(con, {k: v for k, v in ANALYSIS_TABLES.items() if k != "StepTraceTime"})
            ghash = group_hash(GROUP)
            for st in plan.steps:
                for c in st.collectives:
                    transit = c.dur_ns * 9 // 10
                    insert(
                        con,
                        "CommAnalyzerTime",
                        [
                            (
                                c.name,
                                ghash,
                                float(_us(c.start_ns)),
                                _ms(c.dur_ns),
                                _ms(transit),
                                _ms(c.dur_ns - transit),
                                _ms((c.dur_ns - transit) // 2),
                                0.0,
                                f"step{st.step}",
                                "collective",
                            )
                        ],
                    )
                    mb = c.size_bytes / 1e6
                    insert(
                        con,
                        "CommAnalyzerBandwidth",
                        [
                            (
                                c.name,
                                ghash,
                                "HCCS",
                                round(mb, 6),
                                _ms(transit),
                                round(mb / _ms(transit), 4),
                                1.0,
                                round(mb / 4, 6),
                                4,
                                _ms(transit),
                                f"step{st.step}",
                                "collective",
                            )
                        ],
                    )
            con.commit()
        finally:
            con.close()
    if with_minddata:
        write_minddata(plan, out, rank_dir / "FRAMEWORK", r)
    return db


def db_profile(
    out: Path,
    case: str = "slow_dataloader",
    *,
    fixed: bool = False,
    seed: int = 0,
    n_steps: int = 5,
    with_minddata: bool = True,
) -> Path:
    """Write ≥ 2.6 MindSpore DB-export rank dirs under `out` (dataset sink mode); returns `out`.

    `with_minddata=True` adds the minddata files a `[Text, Db]` capture with `data_process=True` leaves in
    ASCEND_PROFILER_OUTPUT/ and FRAMEWORK/ (a Db-only export has none).
    """
    out = Path(out)
    for plan in build_plans(case, fixed=fixed, seed=seed, n_steps=n_steps, sink=True):
        write_db_rank(
            plan,
            out / f"node0_{42000 + plan.rank}_20250101120000{plan.rank:03d}_ascend_ms",
            with_minddata=with_minddata,
        )
    return out


LAYOUTS = {"legacy": legacy_profile, "text": text_profile, "db": db_profile}


def main(argv: list[str] | None = None) -> int:
    """`python -m stepdoctor.evals.generate.mindspore OUT --layout legacy|text|db --case CASE [--fixed]`."""
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--layout", choices=sorted(LAYOUTS), default="legacy")
    ap.add_argument("--case", choices=CASES, default="slow_dataloader")
    ap.add_argument("--fixed", action="store_true", help="the guide's after-fix numbers")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--steps", type=int, default=5)
    a = ap.parse_args(argv)
    print(LAYOUTS[a.layout](a.out, a.case, fixed=a.fixed, seed=a.seed, n_steps=a.steps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
