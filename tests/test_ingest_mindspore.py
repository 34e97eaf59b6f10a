"""MindSpore ingestion: the ≤ 2.3 `profiler/` folder, the 2.4 hybrid, the ≥ 2.5 extras and the DB export.

Inputs come from `evals.generate.mindspore` (the guide's three cases, exact planted numbers) plus a few
hand-written files for the format corners the generator does not produce (pre-2.0 triple order, all-zero
rows, transposed summary CSV, raw sampler JSON).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from stepdoctor.analysis.build import open_profile
from stepdoctor.analysis.ingest.base import RankTables
from stepdoctor.analysis.ingest.discover import discover
from stepdoctor.analysis.ingest.mindspore_extra import read_ms_extras, read_ms_extras_impl
from stepdoctor.analysis.ingest.mindspore_legacy import normalize_dtype
from stepdoctor.analysis.store import IngestOptions
from stepdoctor.evals.generate import mindspore as gen

MS = 1_000_000


def _phases(prof, rank: int = 0) -> dict[str, dict[int, int]]:
    out: dict[str, dict[int, int]] = {}
    for step, phase, dur in prof.rows("SELECT step, phase, dur_ns FROM step_phases WHERE rank = ? ORDER BY step",
                                      [rank]):
        out.setdefault(phase, {})[int(step)] = int(dur)
    return out


def _meta(prof, key: str, rank: int = 0):
    rows = prof.rows("SELECT value_json FROM metadata WHERE rank = ? AND key = ?", [rank, key])
    return json.loads(rows[0][0]) if rows else None


# --------------------------------------------------------------------------------------------------------
# ≤ 2.3 legacy folder


def test_legacy_case1_steps_phases_and_pipeline(tmp_path: Path) -> None:
    folder = gen.legacy_profile(tmp_path / "p", "slow_dataloader", seed=3)
    plan = gen.build_plan("slow_dataloader", 0, seed=3)
    prof = open_profile(tmp_path / "p", IngestOptions(cache_dir=tmp_path / "cache"))
    assert prof.info.format == "mindspore_legacy" and prof.info.ranks == [0]
    assert prof.info.steps == [1, 2, 3, 4, 5]            # the trailing mean row "-" is not a step
    # 10 ns ticks: the file's points × 10 are the ns the plan planted
    with open(folder / "step_trace_raw_0_detail_time.csv") as f:
        rows = list(csv.DictReader(f))
    assert rows[-1]["step_num"] == "-"
    assert int(rows[0]["start_point"]) * 10 == plan.steps[0].start_ns
    steps = prof.sql("SELECT * FROM steps WHERE rank = 0 ORDER BY step")
    assert steps["start_ns"].tolist() == [s.start_ns for s in plan.steps]
    assert steps["end_ns"].tolist() == [s.end_ns for s in plan.steps]
    assert steps["device_start_ns"].tolist() == [s.fp_ns for s in plan.steps]   # device window starts at fp
    ph = _phases(prof)
    assert set(ph) == {"iteration_interval", "fp_and_bp", "tail"}
    assert all(v == 72_800_000 for v in ph["iteration_interval"].values())      # the guide's 72.8 ms
    assert all(v == 16_000_000 for v in ph["fp_and_bp"].values())
    assert all(v == 1_200_000 for v in ph["tail"].values())
    assert (steps["end_ns"] - steps["start_ns"]).tolist() == [90 * MS] * 5      # 90 ms steps

    ops = prof.sql("SELECT * FROM dataset_ops WHERE rank = 0 ORDER BY op_id")
    assert ops["op_type"].tolist() == ["BatchOp", "MapOp", "MapOp", "MapOp", "ImageFolderOp"]
    slow = ops[ops["op_id"] == 3].iloc[0]
    assert slow["num_workers"] == 1 and slow["avg_cpu_pct"] == pytest.approx(98.5)
    assert slow["output_queue_size"] == 16                                       # capacity
    assert slow["output_queue_usage_rate"] == pytest.approx(plan.pipeline[3].usage)
    assert plan.pipeline[3].usage < 0.1
    assert ops.loc[ops["op_id"] == 4, "output_queue_usage_rate"].item() == pytest.approx(0.96875)
    assert ops["parent_id"].tolist()[1:] == [0, 1, 2, 3] and ops["parent_id"].isna().iloc[0]
    assert _meta(prof, "minddata_summary")["bottleneck_warning"] == ["Map(id=3)"]
    hq = _meta(prof, "host_queue")
    assert (hq["mode"], hq["batches"], hq["empty_batches"], hq["empty_ratio"]) == ("sink", 20, 18, 0.9)
    assert _meta(prof, "device_queue")["empty_ratio"] == 0.9
    assert _meta(prof, "minddata_cpu")["cpu_processor_num"] == 96
    # AI Core ops of the timeline, one device op per execution, with the step they ran in
    kernels = [k for s in plan.steps for k in s.kernels if k.task_type != "AI_CPU"]
    dev = prof.sql("SELECT * FROM device_ops WHERE rank = 0")
    assert len(dev) == len(kernels) and dev["step"].notna().all()
    assert int(dev["dur_ns"].sum()) == sum(k.dur_ns for k in kernels)
    assert {"op_timeline", "steps", "step_phases", "dataset_ops", "host_queue", "device_queue"} <= \
        prof.capabilities(0)
    assert not prof.warnings


def test_legacy_case1_fixed_has_the_guides_after_numbers(tmp_path: Path) -> None:
    gen.legacy_profile(tmp_path / "p", "slow_dataloader", fixed=True)
    prof = open_profile(tmp_path / "p", IngestOptions(cache_dir=tmp_path / "cache"))
    ph = _phases(prof)
    assert set(ph["iteration_interval"].values()) == {250_000}                   # 0.25 ms
    lens = prof.rows("SELECT DISTINCT end_ns - start_ns FROM steps")
    assert lens == [(18_070_000,)]                                               # 18.07 ms
    assert prof.rows("SELECT num_workers FROM dataset_ops WHERE op_id = 3") == [(12,)]


def test_legacy_case2_inference_fp32_matmul(tmp_path: Path) -> None:
    gen.legacy_profile(tmp_path / "p", "fp32_matmul")
    prof = open_profile(tmp_path / "p", IngestOptions(cache_dir=tmp_path / "cache"))
    ph = _phases(prof)
    assert set(ph) == {"iteration_interval", "fp"}                                # inference: fp only
    assert set(ph["fp"].values()) == {82_450_000} and set(ph["iteration_interval"].values()) == {31_340_000}
    assert prof.rows("SELECT DISTINCT end_ns - start_ns FROM steps") == [(113_790_000,)]
    mm = prof.sql("SELECT * FROM device_ops WHERE op_type = 'MatMul'")
    assert set(mm["input_dtypes"]) == {"DT_FLOAT;DT_FLOAT"}                     # DTFLOAT in framework_raw
    assert set(mm["output_dtypes"]) == {"DT_FLOAT"} and set(mm["input_shapes"]) == {"32,4096;4096,4096"}
    per_step = prof.sql("SELECT step, sum(dur_ns) AS ns FROM device_ops WHERE op_type = 'MatMul' GROUP BY step")
    assert set(per_step["ns"]) == {57_000_000}                                   # 95 % of the 60 ms planted
    total = prof.rows("SELECT sum(dur_ns) FROM device_ops WHERE step = 2")[0][0]
    assert 57_000_000 / total > 0.7                                              # MatMul dominates the forward
    gen.legacy_profile(tmp_path / "q", "fp32_matmul", fixed=True)
    fixed = open_profile(tmp_path / "q", IngestOptions(cache_dir=tmp_path / "cache"))
    assert set(_phases(fixed)["fp"].values()) == {16_890_000}
    assert fixed.rows("SELECT DISTINCT input_dtypes FROM device_ops WHERE op_type = 'MatMul'") == \
        [("DT_FLOAT16;DT_FLOAT16",)]


def test_legacy_case3_allreduce_tail_on_8_ranks(tmp_path: Path) -> None:
    gen.legacy_profile(tmp_path / "p", "comm_tail")
    prof = open_profile(tmp_path / "p", IngestOptions(cache_dir=tmp_path / "cache"))
    assert prof.info.ranks == list(range(8)) and prof.info.world_size == 8
    for rank in (0, 7):
        ph = _phases(prof, rank)
        assert set(ph["tail"].values()) == {6_150_000}
        assert set(ph["communication"].values()) == {6_150_000}                  # hccl_raw, ms -> ns
        comm = prof.sql("SELECT c.*, s.start_ns AS s0 FROM comm_ops c JOIN steps s USING (rank, step) "
                        "WHERE rank = ? ORDER BY step", [rank])
        assert len(comm) == 5 and set(comm["op_type"]) == {"allreduce"} and set(comm["name"]) == {"AllReduce-op1"}
        assert set(comm["elapse_ns"]) == {6_150_000}
        # it starts at bp_point = start + interval + fp_and_bp: the whole tail, after the last backward op
        assert ((comm["start_ns"] - comm["s0"]) == 300_000 + 17_150_000).all()
        last_bwd = prof.sql("SELECT step, max(start_ns + dur_ns) AS e FROM device_ops WHERE rank = ? AND "
                            "category = 'compute' GROUP BY step ORDER BY step", [rank])
        assert (comm["start_ns"].to_numpy() >= last_bwd["e"].to_numpy()).all()
        dev = prof.sql("SELECT * FROM device_ops WHERE rank = ? AND category = 'communication'", [rank])
        assert len(dev) == 5 and set(dev["task_type"]) == {"HCCL"} and set(dev["collective"]) == {"allreduce"}


def test_legacy_case3_fixed_two_buckets(tmp_path: Path) -> None:
    gen.legacy_profile(tmp_path / "p", "comm_tail", fixed=True)
    prof = open_profile(tmp_path / "p", IngestOptions(cache_dir=tmp_path / "cache"))
    assert set(_phases(prof)["tail"].values()) == {4_200_000}
    comm = prof.sql("SELECT c.name, c.start_ns - s.start_ns AS off, c.elapse_ns FROM comm_ops c "
                    "JOIN steps s USING (rank, step) WHERE rank = 0 AND step = 2 ORDER BY c.start_ns")
    bp = 300_000 + 17_150_000
    assert comm["name"].tolist() == ["AllReduce-op1", "AllReduce-op2"]
    assert comm["off"].iloc[0] + comm["elapse_ns"].iloc[0] <= bp                  # overlapped with backward
    assert comm["off"].iloc[1] == bp and comm["elapse_ns"].iloc[1] == 4_200_000


def test_legacy_without_timeline_gives_op_totals(tmp_path: Path) -> None:
    gen.legacy_profile(tmp_path / "p", "fp32_matmul", timeline=False)
    prof = open_profile(tmp_path / "p", IngestOptions(cache_dir=tmp_path / "cache"))
    assert any("no output_timeline_data_0.txt" in w for w in prof.warnings)
    assert "op_totals_only" in prof.capabilities(0) and "op_timeline" not in prof.capabilities(0)
    dev = prof.sql("SELECT * FROM device_ops WHERE category = 'compute'")
    assert dev["step"].isna().all() and dev["name"].is_unique                   # one row per op name
    first_fp = prof.rows("SELECT min(device_start_ns) FROM steps")[0][0]
    assert set(dev["start_ns"]) == {first_fp}
    mm = dev[dev["op_type"] == "MatMul"]
    assert int(mm["dur_ns"].sum()) == 5 * 57_000_000                              # mean × count, exact
    assert set(mm["input_dtypes"]) == {"DT_FLOAT;DT_FLOAT"}


def test_legacy_handwritten_ticks_mean_row_zero_row_and_old_triple_order(tmp_path: Path) -> None:
    """Pre-2.0 triple order (start, end, duration), a zero row and the mean row; points are 10 ns ticks."""
    d = tmp_path / "profiler"
    d.mkdir()
    hdr = ["step_num", "start_point", "end_point", "total", "fp_point", "bp_point", "iteration_interval",
           "fp_and_bp", "tail", "stream_5_0_AllReduce_start_point", "stream_5_0_AllReduce_end_point",
           "stream_5_0_AllReduce"]
    rows = [[1, 1000, 11000, 10000, 1000, 8000, 0, 7000, 3000, 8000, 10500, 2500],
            [2, 11000, 22000, 11000, 12000, 19000, 1000, 7000, 3000, 19000, 21500, 2500],
            [3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            ["-", 6000, 16500, 10500, 6500, 13500, 500, 7000, 3000, 13500, 16000, 2500]]
    with open(d / "step_trace_raw_2_detail_time.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(hdr)
        w.writerows(rows)
    prof = open_profile(d, IngestOptions(cache_dir=tmp_path / "cache"))
    assert prof.info.ranks == [2] and prof.info.steps == [1, 2]
    st = prof.sql("SELECT * FROM steps ORDER BY step")
    assert st["start_ns"].tolist() == [10_000, 110_000] and st["end_ns"].tolist() == [110_000, 220_000]
    ph = _phases(prof, 2)
    assert ph == {"iteration_interval": {1: 0, 2: 10_000}, "fp_and_bp": {1: 70_000, 2: 70_000},
                  "tail": {1: 30_000, 2: 30_000}}
    comm = prof.sql("SELECT * FROM comm_ops ORDER BY step")
    assert comm["name"].tolist() == ["AllReduce", "AllReduce"]
    assert comm["start_ns"].tolist() == [80_000, 190_000] and set(comm["elapse_ns"]) == {25_000}
    assert prof.rows("SELECT DISTINCT stream_id FROM device_ops") == [(5,)]


def test_legacy_cluster_analyse_and_point_info(tmp_path: Path) -> None:
    folder = gen.legacy_profile(tmp_path / "p", "slow_dataloader")
    with open(folder / "ascend_cluster_analyse_model-parallel_1_1_0.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["computation_time", "communication_alone_time"])
        w.writerows([[15.5, 0.5]] * 5 + [[15.5, 0.5]])   # 5 steps + the average row
    prof = open_profile(tmp_path / "p", IngestOptions(cache_dir=tmp_path / "cache"))
    ph = _phases(prof)
    assert ph["computation_time"] == {s: 15_500_000 for s in range(1, 6)}
    assert ph["communication_alone_time"][5] == 500_000
    assert _meta(prof, "cluster_analyse")["parallel_mode"] == "model-parallel"
    points = _meta(prof, "step_trace_points")
    assert points["fp_start"].endswith("-op1") and "Gradients/" in points["bp_end"]


def test_hybrid_24_reads_legacy_files_and_warns(tmp_path: Path) -> None:
    gen.legacy_profile(tmp_path / "p", "slow_dataloader", hybrid=True)
    disc = discover(tmp_path / "p")
    assert disc.kind == "mindspore_legacy" and [s.rank for s in disc.sources] == [0]
    prof = open_profile(tmp_path / "p", IngestOptions(cache_dir=tmp_path / "cache"))
    assert prof.info.format == "mindspore_legacy"
    assert any("MindSpore 2.4 layout" in w and "rank-0_" in w for w in prof.warnings)
    assert set(_phases(prof)["iteration_interval"].values()) == {72_800_000}


def test_normalize_dtype_spellings() -> None:
    assert {normalize_dtype(x) for x in ("NUMBER_TYPE_FLOAT32", "DTFLOAT", "DT_FLOAT", "FLOAT", "float32")} == \
        {"DT_FLOAT"}
    assert normalize_dtype("NUMBER_TYPE_FLOAT16") == normalize_dtype("DTFLOAT16") == "DT_FLOAT16"
    assert normalize_dtype("BFLOAT16") == "DT_BF16" and normalize_dtype("DOUBLE") == "DT_DOUBLE"
    assert normalize_dtype("") is None


# --------------------------------------------------------------------------------------------------------
# ≥ 2.5 `*_ascend_ms` extras


def _rank_dir(root: Path, rank: int = 0) -> Path:
    return sorted(root.glob(f"*_20250101120000{rank:03d}_ascend_ms"))[0]


def test_ms_extras_case1_dataset_ops_queue_and_cann_step_trace(tmp_path: Path) -> None:
    gen.text_profile(tmp_path / "t", "slow_dataloader", cann_step_trace=True)
    t = RankTables(0)
    assert read_ms_extras(_rank_dir(tmp_path / "t"), t) is None
    fr = t.frames()
    ops = fr["dataset_ops"].set_index("op_id")
    assert ops.loc[3, "num_workers"] == 1 and ops.loc[3, "avg_cpu_pct"] == pytest.approx(98.5)
    assert ops.loc[3, "output_queue_usage_rate"] < 0.1 < ops.loc[4, "output_queue_usage_rate"]
    meta = {r["key"]: json.loads(r["value_json"]) for _, r in fr["metadata"].iterrows()}
    assert meta["host_queue"]["mode"] == "non-sink" and meta["host_queue"]["empty_ratio"] == 0.9
    stages = {(s["operation"], s["stage"]): s["avg_us"] for s in meta["dataset_stages"]}
    assert stages[("Map(ID:3)", "WorkerProcess")] == 2270.0
    ph = fr["step_phases"]
    cann = ph[ph["phase"] == "iteration_interval"]
    assert cann["step"].tolist() == [2, 3, 4, 5]          # iteration 1 and the model-level row dropped
    assert set(cann["dur_ns"]) == {72_800_000}
    assert set(ph.loc[ph["phase"] == "fp_and_bp", "dur_ns"]) == {16_000_000}
    assert set(ph.loc[ph["phase"] == "tail", "dur_ns"]) == {1_200_000}
    assert {"dataset_ops", "host_queue", "dataset_stages", "cann_step_trace", "step_phases"} <= t.capabilities


def test_ms_extras_stage_from_mindspore_step_trace_time(tmp_path: Path) -> None:
    gen.text_profile(tmp_path / "t", "comm_tail")
    t = RankTables(3)
    done = read_ms_extras_impl(_rank_dir(tmp_path / "t", 3), t)
    assert done == {"stage", "bubble"}
    ph = t.frames()["step_phases"]
    # MindSpore's Stage is the HCCL span of the step minus Bubble: the 6.15 ms AllReduce
    assert set(ph.loc[ph["phase"] == "stage", "dur_ns"]) == {6_150_000}
    assert set(ph.loc[ph["phase"] == "bubble", "dur_ns"]) == {0}


def test_ms_extras_fallbacks_summary_csv_and_raw_sampler(tmp_path: Path) -> None:
    gen.text_profile(tmp_path / "t", "slow_dataloader")
    rd = _rank_dir(tmp_path / "t")
    out = rd / "ASCEND_PROFILER_OUTPUT"
    # transposed summary CSV only (no JSON, no raw pipeline CSV): ops, workers, usage %, CPU per worker
    (out / "minddata_pipeline_summary_0.json").unlink()
    (out / "minddata_pipeline_raw_0.csv").unlink()
    t = RankTables(0)
    read_ms_extras(rd, t)
    ops = t.frames()["dataset_ops"].set_index("op_id")
    assert ops.loc[3, "op_type"] == "MapOp" and ops.loc[3, "num_workers"] == 1
    assert ops.loc[3, "output_queue_usage_rate"] == pytest.approx(0.040625)
    assert ops.loc[3, "avg_cpu_pct"] == pytest.approx(98.5) and ops.loc[3, "parent_id"] == 2
    # raw sampler JSON + CPU sampler only: usage from the samples, CPU = mean(user + sys) / workers
    (out / "minddata_pipeline_summary_0.csv").unlink()
    (rd / "FRAMEWORK" / "pipeline_profiling_0.json").write_text(json.dumps({"sampling_interval": 10, "op_info": [
        {"op_id": 0, "op_type": "BatchOp", "num_workers": 8, "metrics": {"output_queue": {"size": [1, 3],
                                                                                            "length": 16}},
         "children": [1]},
        {"op_id": 1, "op_type": "MapOp", "num_workers": 2, "metrics": {"output_queue": {"size": [8, 8],
                                                                                          "length": 16}},
         "children": []}]}))
    t = RankTables(0)
    read_ms_extras(rd, t)
    ops = t.frames()["dataset_ops"].set_index("op_id")
    assert ops.loc[0, "output_queue_usage_rate"] == pytest.approx(0.125)        # mean 2 / 16
    assert ops.loc[1, "parent_id"] == 0 and ops.loc[1, "output_queue_usage_rate"] == pytest.approx(0.5)
    # CPU sampler: op 1 planted 12 % per worker × 8 workers = 96 % total; this run says 2 workers
    assert ops.loc[1, "avg_cpu_pct"] == pytest.approx(96.0 / 2)


def test_ms_extras_nothing_there_is_quiet(tmp_path: Path) -> None:
    rd = tmp_path / "x_20250101120000000_ascend_ms"
    (rd / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    t = RankTables(0)
    assert read_ms_extras_impl(rd, t) == set()
    assert t.frames() == {} and not t.warnings


# --------------------------------------------------------------------------------------------------------
# ≥ 2.6 MindSpore DB export


def test_ms_db_case1_steps_derived_with_interval_and_pipeline(tmp_path: Path) -> None:
    gen.db_profile(tmp_path / "d", "slow_dataloader")
    prof = open_profile(tmp_path / "d", IngestOptions(cache_dir=tmp_path / "cache"))
    assert prof.info.format == "ascend_ms_db" and prof.info.framework == "mindspore"
    assert prof.info.steps == [1, 2, 3, 4, 5]
    assert any("no STEP_TIME table" in w and "repetition of the first kernel 'Default/GetNext-op1'" in w
               for w in prof.warnings)
    steps = prof.sql("SELECT * FROM steps ORDER BY step")
    assert (steps["end_ns"] - steps["start_ns"]).tolist()[1:] == [90 * MS] * 4
    ph = _phases(prof)
    assert ph["iteration_interval"] == {s: 72_800_000 for s in (2, 3, 4, 5)}
    assert set(ph["data_wait"].values()) == {72_770_000}                         # the GetNext wait task
    ops = prof.sql("SELECT * FROM dataset_ops ORDER BY op_id")
    assert ops.loc[3, "num_workers"] == 1 and ops.loc[3, "avg_cpu_pct"] == pytest.approx(98.5)
    assert _meta(prof, "minddata_summary")["bottleneck_warning"] == ["Map(id=3)"]
    assert _meta(prof, "host_queue")["empty_ratio"] == 0.9


def test_ms_db_case2_fp32_matmul_dtypes(tmp_path: Path) -> None:
    gen.db_profile(tmp_path / "d", "fp32_matmul")
    prof = open_profile(tmp_path / "d", IngestOptions(cache_dir=tmp_path / "cache"))
    mm = prof.sql("SELECT * FROM device_ops WHERE op_type = 'MatMul'")
    assert len(mm) == 15 and set(mm["input_dtypes"]) == {"DT_FLOAT;DT_FLOAT"}
    assert set(mm["task_type"]) == {"AI_CORE"} and set(mm["input_shapes"]) == {"32,4096;4096,4096"}
    assert set(prof.sql("SELECT step, sum(dur_ns) s FROM device_ops WHERE op_type = 'MatMul' GROUP BY step")["s"]) \
        == {57_000_000}
    assert set(_phases(prof)["iteration_interval"].values()) == {31_340_000}
    assert prof.rows("SELECT DISTINCT end_ns - start_ns FROM steps WHERE step > 1") == [(113_790_000,)]


def test_ms_db_case3_comm_after_backward_matches_legacy_and_text(tmp_path: Path) -> None:
    gen.db_profile(tmp_path / "d", "comm_tail")
    gen.legacy_profile(tmp_path / "l", "comm_tail")
    db = open_profile(tmp_path / "d", IngestOptions(cache_dir=tmp_path / "cache"))
    leg = open_profile(tmp_path / "l", IngestOptions(cache_dir=tmp_path / "cache"))
    assert db.info.ranks == list(range(8))
    q = "SELECT step, start_ns, elapse_ns FROM comm_ops WHERE rank = 5 ORDER BY start_ns"
    d, lg = db.sql(q), leg.sql(q)
    # the same collectives on the same clock in both layouts (legacy steps: all 5; DB: step 1 also)
    assert d["start_ns"].tolist() == lg["start_ns"].tolist() and set(d["elapse_ns"]) == {6_150_000}
    c = db.sql("SELECT * FROM comm_ops WHERE rank = 5 ORDER BY start_ns").iloc[0]
    assert c["name"] == "hcom_allReduce__100_0_1" and c["op_type"] == "allreduce"
    assert c["transit_ns"] == 5_535_000 and c["wait_ns"] == 615_000                 # communication_analyzer.db
    plan = gen.build_plan("comm_tail", 5)
    assert c["size_bytes"] == plan.steps[0].collectives[0].size_bytes               # HCCS bytes moved
    last_bwd = db.rows("SELECT max(start_ns + dur_ns) FROM device_ops WHERE rank = 5 AND step = 1 AND "
                       "category = 'compute'")[0][0]
    assert c["start_ns"] >= last_bwd
    sub = db.sql("SELECT * FROM comm_tasks WHERE rank = 5 AND op_name = 'hcom_allReduce__100_0_1'")
    assert len(sub) == 4 and set(sub["transport"]) == {"SDMA"} and set(sub["link_type"]) == {"HCCS"}
    assert set(sub["dst_rank"]) == {6}
    gen.text_profile(tmp_path / "t", "comm_tail", sink=True)      # same plan as the DB (dataset sink)
    txt = open_profile(tmp_path / "t", IngestOptions(cache_dir=tmp_path / "cache"))
    t = txt.sql(q)
    assert t["start_ns"].tolist() == d["start_ns"].tolist() and t["elapse_ns"].tolist() == d["elapse_ns"].tolist()


def test_ms_db_without_minddata_has_no_dataset_ops(tmp_path: Path) -> None:
    gen.db_profile(tmp_path / "d", "comm_tail", with_minddata=False)
    prof = open_profile(tmp_path / "d", IngestOptions(cache_dir=tmp_path / "cache"))
    assert not prof.has_table_rows("dataset_ops")
    assert "dataset_ops" not in prof.capabilities(0)


def test_generators_are_seeded(tmp_path: Path) -> None:
    a = gen.build_plan("slow_dataloader", seed=1)
    b = gen.build_plan("slow_dataloader", seed=1)
    c = gen.build_plan("slow_dataloader", seed=2)
    assert [k.name for s in a.steps for k in s.kernels] == [k.name for s in b.steps for k in s.kernels]
    assert [k.op_type for s in a.steps for k in s.kernels] != [k.op_type for s in c.steps for k in s.kernels]
    # the seed never moves the planted phases
    assert [(s.start_ns, s.fp_ns, s.bp_ns, s.end_ns) for s in a.steps] == \
        [(s.start_ns, s.fp_ns, s.bp_ns, s.end_ns) for s in c.steps]
    with pytest.raises(ValueError, match="unknown case"):
        gen.build_plan("nope")
