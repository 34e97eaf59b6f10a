"""Tests of the seeded scenario generators (stepdoctor.evals.generate).

They check, straight from the written files and without the analysis modules: determinism, the exact
layout and headers of the real formats, the internal consistency of derived files (step_trace_time.csv vs
the Overlap Analysis events, op_statistic.csv vs kernel_details.csv, communication.json vs the HCCL tasks),
that a clean profile breaks none of the thresholds of the rules doc, and that every plant moves the number
it is meant to move.
"""

from __future__ import annotations

import csv
import filecmp
import gzip
import io
import itertools
import json
import re
from collections import defaultdict
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import pytest

from stepdoctor.evals.generate import (
    PROBLEMS,
    Plant,
    Scenario,
    expected_findings,
    parse_plant_spec,
    repeat_kineto_trace,
    tolerated_findings,
    write_ascend_profile,
    write_kineto_profile,
)
from stepdoctor.evals.generate.__main__ import main as cli_main
from stepdoctor.evals.generate.ascend import group_hash

SHARED = (Path(__file__).resolve().parent.parent.parent / "shared" / "data").resolve()
SAMPLE = SHARED / "ascend" / "cluster4"

# Headers of the real sample cluster4 (rules doc §2.2), copied so the test runs without the shared data.
KERNEL_HEADER = [
    "Step Id",
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
    "aicore_time(us)",
    "aic_total_cycles",
    "aic_mac_time(us)",
    "aic_mac_ratio",
    "aic_scalar_time(us)",
    "aic_scalar_ratio",
    "aic_mte1_time(us)",
    "aic_mte1_ratio",
    "aic_mte2_time(us)",
    "aic_mte2_ratio",
    "aic_fixpipe_time(us)",
    "aic_fixpipe_ratio",
    "aic_icache_miss_rate",
    "aiv_time(us)",
    "aiv_total_cycles",
    "aiv_vec_time(us)",
    "aiv_vec_ratio",
    "aiv_scalar_time(us)",
    "aiv_scalar_ratio",
    "aiv_mte2_time(us)",
    "aiv_mte2_ratio",
    "aiv_mte3_time(us)",
    "aiv_mte3_ratio",
    "aiv_icache_miss_rate",
    "cube_utilization(%)",
]
STEP_HEADER = [
    "Device_id",
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
]
OPSTAT_HEADER = [
    "Device_id",
    "OP Type",
    "Core Type",
    "Count",
    "Total Time(us)",
    "Min Time(us)",
    "Avg Time(us)",
    "Max Time(us)",
    "Ratio(%)",
]
ENV_KEYS = {
    "ASCEND_GLOBAL_LOG_LEVEL",
    "HCCL_RDMA_TC",
    "HCCL_RDMA_SL",
    "ACLNN_CACHE_LIMIT",
    "HOST_CACHE_CAPACITY",
    "ASCEND_ENHANCE_ENABLE",
    "PYTORCH_NPU_ALLOC_CONF",
    "ASCEND_LAUNCH_BLOCKING",
    "HCCL_ALGO",
}


# ------------------------------------------------------------------------------------------- readers
def ns(ts: str | float) -> int:
    """Exact ns from a µs value with up to 3 decimals ("1700000000015250.000\\t" or 914.977)."""
    text = str(ts).strip() if isinstance(ts, str) else f"{ts:.3f}"
    whole, _, frac = text.partition(".")
    return int(whole) * 1000 + int((frac + "000")[:3])


class Rank:
    """One generated `*_ascend_pt` directory, parsed."""

    def __init__(self, d: Path) -> None:
        self.dir = d
        self.rank = int(next(d.glob("profiler_info_*.json")).stem.rsplit("_", 1)[1])
        apo = d / "ASCEND_PROFILER_OUTPUT"
        self.trace: list[dict[str, Any]] = json.loads((apo / "trace_view.json").read_text())
        self.kernels = self._csv(apo / "kernel_details.csv")
        self.steps = self._csv(apo / "step_trace_time.csv")
        self.opstat = self._csv(apo / "op_statistic.csv")
        self.comm = json.loads((apo / "communication.json").read_text())
        self.matrix = json.loads((apo / "communication_matrix.json").read_text())
        self.meta = json.loads((d / "profiler_metadata.json").read_text())
        procs = {
            e["pid"]: e["args"]["name"] for e in self.trace if e["ph"] == "M" and e["name"] == "process_name"
        }
        self.pid_of = {v: k for k, v in procs.items()}

    @staticmethod
    def _csv(path: Path) -> list[dict[str, str]]:
        with open(path, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))

    def x(self, process: str, name: str | None = None) -> list[dict[str, Any]]:
        pid = self.pid_of.get(process)
        return [
            e
            for e in self.trace
            if e["ph"] == "X" and e["pid"] == pid and (name is None or e["name"] == name)
        ]

    def step_windows(self) -> dict[int, tuple[int, int]]:
        out = {}
        for e in self.x("Python"):
            m = re.fullmatch(r"ProfilerStep#(\d+)", e["name"])
            if m:
                out[int(m.group(1))] = (ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
        return out

    def in_step(self, events: list[dict[str, Any]], step: int) -> list[dict[str, Any]]:
        a, b = self.step_windows()[step]
        return [e for e in events if a <= ns(e["ts"]) < b]

    def comm_ops(self, step: int) -> dict[str, Any]:
        return {k: v for k, v in self.comm[f"step{step}"]["collective"].items() if k != "Total Op Info"}


def ranks_of(root: Path) -> list[Rank]:
    return sorted((Rank(d) for d in root.glob("*_ascend_pt")), key=lambda r: r.rank)


def kineto_events(root: Path, rank: int) -> list[dict[str, Any]]:
    path = root / f"rank{rank}.pt.trace.json"
    return json.loads(path.read_text())["traceEvents"]


def union_ns(iv: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def overlaps(a: tuple[int, int], ivs: list[tuple[int, int]]) -> bool:
    return any(s < a[1] and a[0] < e for s, e in ivs)


# ------------------------------------------------------------------------------------------ fixtures
@pytest.fixture(scope="module")
def gen(tmp_path_factory: pytest.TempPathFactory):
    """Generate (and cache) a scenario: gen(vendor, *plants, **opts) -> output dir."""
    cache: dict[str, Path] = {}

    def make(vendor: str, *plants: Plant, ranks: int = 4, steps: int = 2, seed: int = 0, **opts: Any) -> Path:
        key = json.dumps([vendor, [p.__dict__ for p in plants], ranks, steps, seed, opts], sort_keys=True)
        if key not in cache:
            out = tmp_path_factory.mktemp(vendor)
            sc = Scenario(vendor, ranks=ranks, steps=steps, seed=seed, plants=list(plants))
            (write_ascend_profile if vendor == "ascend" else write_kineto_profile)(sc, out, **opts)
            cache[key] = out
        return cache[key]

    return make


@pytest.fixture(scope="module")
def clean_ascend(gen) -> list[Rank]:
    return ranks_of(gen("ascend"))


# ------------------------------------------------------------------------------------- determinism
def _same_tree(a: Path, b: Path) -> bool:
    fa = sorted(p.relative_to(a) for p in a.rglob("*"))
    fb = sorted(p.relative_to(b) for p in b.rglob("*"))
    return fa == fb and all(filecmp.cmp(a / p, b / p, shallow=False) for p in fa if (a / p).is_file())


def test_ascend_same_seed_same_bytes(tmp_path: Path) -> None:
    sc = Scenario("ascend", ranks=2, steps=2, seed=7, plants=[Plant("slow-rank"), Plant("gc-pause")])
    write_ascend_profile(sc, tmp_path / "a", extra_files=True)
    write_ascend_profile(sc, tmp_path / "b", extra_files=True)
    assert _same_tree(tmp_path / "a", tmp_path / "b")
    write_ascend_profile(
        Scenario("ascend", ranks=2, steps=2, seed=8, plants=sc.plants), tmp_path / "c", extra_files=True
    )
    assert not _same_tree(tmp_path / "a", tmp_path / "c")


def test_kineto_same_seed_same_bytes(tmp_path: Path) -> None:
    sc = Scenario("kineto", ranks=2, steps=2, seed=3, plants=[Plant("h2d-pageable")])
    write_kineto_profile(sc, tmp_path / "a", gz=True)
    write_kineto_profile(sc, tmp_path / "b", gz=True)
    assert _same_tree(tmp_path / "a", tmp_path / "b")
    write_kineto_profile(Scenario("kineto", ranks=2, steps=2, seed=4), tmp_path / "c", gz=True)
    assert (tmp_path / "a" / "rank0.pt.trace.json.gz").read_bytes() != (
        tmp_path / "c" / "rank0.pt.trace.json.gz"
    ).read_bytes()


# ------------------------------------------------------------------------------- ascend: structure
def test_ascend_layout(gen) -> None:
    root = gen("ascend")
    dirs = sorted(root.glob("*_ascend_pt"))
    assert len(dirs) == 4
    for r, d in enumerate(dirs):
        assert re.fullmatch(rf"node0_{40000 + r}_\d{{17}}_ascend_pt", d.name)
        assert (d / f"profiler_info_{r}.json").is_file()
        assert (d / "FRAMEWORK").is_dir()
        info = json.loads(next(d.glob(f"PROF_000001_*/device_{r}/info.json.0")).read_text())
        assert info["DeviceInfo"][0]["ai_core_num"] == 24 and info["DeviceInfo"][0]["aiv_num"] == 48
        meta = json.loads((d / "profiler_metadata.json").read_text())
        assert set(meta["ENV_VARIABLES"]) == ENV_KEYS
        assert meta["distributed_args"]["world_size"] == 4
        (group,) = meta["parallel_group_info"]
        assert meta["parallel_group_info"][group]["global_ranks"] == [0, 1, 2, 3]
        names = {p.name for p in (d / "ASCEND_PROFILER_OUTPUT").iterdir()}
        assert names == {
            "trace_view.json",
            "kernel_details.csv",
            "step_trace_time.csv",
            "op_statistic.csv",
            "communication.json",
            "communication_matrix.json",
        }


def test_ascend_headers_and_quirks(clean_ascend: list[Rank]) -> None:
    apo = clean_ascend[0].dir / "ASCEND_PROFILER_OUTPUT"
    raw = (apo / "kernel_details.csv").read_bytes().decode()
    first, second = raw.split("\r\n")[:2]
    assert first.split(",") == KERNEL_HEADER
    assert re.search(r",\d{16}\.\d{3}\t,", second), "Start Time(us) cell with the trailing tab"
    assert '"""' in second, "shapes wrapped in literal quotes"
    assert (apo / "step_trace_time.csv").read_bytes().decode().split("\r\n")[0].split(",") == STEP_HEADER
    assert (apo / "op_statistic.csv").read_bytes().decode().split("\r\n")[0].split(",") == OPSTAT_HEADER
    if SAMPLE.is_dir():
        real = next(SAMPLE.glob("*_ascend_pt")) / "ASCEND_PROFILER_OUTPUT"
        for name in ("kernel_details.csv", "step_trace_time.csv", "op_statistic.csv"):
            want = (real / name).read_bytes().split(b"\r\n")[0]
            assert (apo / name).read_bytes().split(b"\r\n")[0] == want, name
    ts = [e["ts"] for e in clean_ascend[0].trace if "ts" in e]
    assert all(isinstance(t, str) and re.fullmatch(r"17\d{14}\.\d{3}", t) for t in ts)
    assert group_hash("10.0.0.1%enp0_60000_0_1700000000000000") == "18294791067709168601"


def test_ascend_step_trace_matches_overlap_analysis(gen) -> None:
    for root in (gen("ascend"), gen("ascend", Plant("slow-rank"), Plant("exposed-comm-tail"))):
        for rk in ranks_of(root):
            ov = rk.x("Overlap Analysis")
            tasks = rk.x("Ascend Hardware") + rk.x("Communication")
            for row in rk.steps:
                step = int(row["Step"])
                a, b = rk.step_windows()[step]
                sums: dict[str, int] = defaultdict(int)
                for e in rk.in_step(ov, step):
                    assert ns(e["ts"]) + ns(e["dur"]) <= b, "overlap events stay inside their step"
                    sums[e["name"]] += ns(e["dur"])
                for col in ("Computing", "Communication", "Communication(Not Overlapped)", "Free"):
                    assert abs(ns(row[col]) - sums[col]) <= 10_000, (rk.rank, step, col)  # 0.01 ms
                assert (
                    abs(
                        ns(row["Overlapped"])
                        - (sums["Communication"] - sums["Communication(Not Overlapped)"])
                    )
                    <= 10_000
                )
                assert ns(row["Stage"]) == b - a
                first = min(ns(e["ts"]) for e in rk.in_step(tasks, step))
                assert ns(row["Preparing"]) == first - a
                parts = (
                    ns(row["Preparing"])
                    + ns(row["Computing"])
                    + ns(row["Communication(Not Overlapped)"])
                    + ns(row["Free"])
                )
                assert abs(parts - ns(row["Stage"])) <= 10_000


def test_ascend_op_statistic_matches_kernel_details(clean_ascend: list[Rank]) -> None:
    for rk in clean_ascend:
        groups: dict[tuple[str, str], list[int]] = defaultdict(list)
        for k in rk.kernels:
            groups[(k["Type"], k["Accelerator Core"])].append(ns(k["Duration(us)"]))
        grand = sum(sum(v) for v in groups.values())
        assert len(rk.opstat) == len(groups)
        for row in rk.opstat:
            durs = groups[(row["OP Type"], row["Core Type"])]
            assert int(row["Count"]) == len(durs)
            assert ns(row["Total Time(us)"]) == sum(durs)
            assert ns(row["Min Time(us)"]) == min(durs) and ns(row["Max Time(us)"]) == max(durs)
            assert abs(float(row["Avg Time(us)"]) - sum(durs) / len(durs) / 1000) < 0.001
            assert abs(float(row["Ratio(%)"]) - sum(durs) / grand * 100) < 0.001


def test_ascend_kernel_details_match_trace_tasks(clean_ascend: list[Rank]) -> None:
    for rk in clean_ascend:
        tasks = rk.x("Ascend Hardware")
        assert len(tasks) == len(rk.kernels)
        assert [(ns(t["ts"]), ns(t["dur"]), t["name"]) for t in tasks] == [
            (ns(k["Start Time(us)"]), ns(k["Duration(us)"]), k["Name"]) for k in rk.kernels
        ]
        flows = [e for e in rk.trace if e["ph"] in ("s", "f")]
        assert len(flows) == 2 * len(tasks)
        assert {t["args"]["connection_id"] for t in tasks} == {f["id"] for f in flows}


def test_ascend_communication_json_matches_hccl_tasks(gen) -> None:
    for root in (gen("ascend"), gen("ascend", Plant("slow-link"), Plant("byte-misalignment"))):
        for rk in ranks_of(root):
            ops = {e["name"]: e for e in rk.x("Communication") if e["name"].startswith("hcom_")}
            tasks = [e for e in rk.x("Communication") if not e["name"].startswith("hcom_")]
            for step in (1, 2):
                total_size = 0.0
                for key, info in rk.comm_ops(step).items():
                    op = ops[key.split("@")[0]]
                    a, b = ns(op["ts"]), ns(op["ts"]) + ns(op["dur"])
                    mine = [t for t in tasks if a <= ns(t["ts"]) < b and t["args"]["link type"] == "HCCS"]
                    size = sum(t["args"]["size(Byte)"] for t in mine) / 1e6
                    tm = sum(ns(t["dur"]) for t in mine) / 1e6
                    sdma = info["Communication Bandwidth Info"]["SDMA"]
                    assert abs(sdma["Transit Size(MB)"] - size) < 1e-4
                    assert abs(sdma["Transit Time(ms)"] - tm) < 1e-4
                    assert abs(sdma["Bandwidth(GB/s)"] - size / tm) < 1e-3
                    t = info["Communication Time Info"]
                    assert abs(t["Elapse Time(ms)"] - ns(op["dur"]) / 1e6) < 1e-5
                    assert abs(t["Elapse Time(ms)"] - t["Transit Time(ms)"] - t["Wait Time(ms)"]) < 1e-5
                    links = rk.matrix[f"step{step}"]["collective"][key]
                    assert (
                        abs(
                            sum(
                                v["Transit Size(MB)"] for v in links.values() if v["Transport Type"] == "HCCS"
                            )
                            - size
                        )
                        < 1e-4
                    )
                    total_size += size
                tot = rk.comm[f"step{step}"]["collective"]["Total Op Info"]["Communication Bandwidth Info"][
                    "SDMA"
                ]
                assert abs(tot["Transit Size(MB)"] - total_size) < 1e-3


# ---------------------------------------------------------------------------------- ascend: clean
def _bad_env(name: str, value: str) -> bool:
    """The advisor's predicates (rules doc §5.3)."""
    if name == "ASCEND_LAUNCH_BLOCKING":
        return value == "1"
    if name == "ASCEND_GLOBAL_LOG_LEVEL":
        return value not in ("", "3")
    if name == "ACLNN_CACHE_LIMIT":
        return value == "" or int(value) < 10000
    if name == "HOST_CACHE_CAPACITY":
        return value in ("", "0")
    if name == "PYTORCH_NPU_ALLOC_CONF":
        return "expandable_segments:True" not in value
    if name in ("HCCL_ALGO", "HCCL_RDMA_TC", "HCCL_RDMA_SL"):
        return value != ""
    return False


def _shapes(cell: str) -> list[list[int]]:
    return [[int(d) for d in s.split(",") if d] for s in cell.strip('"').split(";")]


def _max_ratio(k: dict[str, str]) -> float:
    return max(float(v) for c, v in k.items() if c.endswith("_ratio"))


def _slow_rank_gaps(ranks: list[Rank]) -> dict[str, float]:
    """msprof-analyze slow rank: (max - min) / mean step total per dimension, over all (step, rank)."""
    rows = [r for rk in ranks for r in rk.steps]
    cols = {"compute": "Computing", "communication": "Communication(Not Overlapped)", "free": "Free"}
    mean_total = sum(sum(float(r[c]) for c in cols.values()) for r in rows) / len(rows)
    return {
        dim: (max(float(r[c]) for r in rows) - min(float(r[c]) for r in rows)) / mean_total
        for dim, c in cols.items()
    }


def test_clean_ascend_violates_no_threshold(clean_ascend: list[Rank]) -> None:
    for rk in clean_ascend:
        env = rk.meta["ENV_VARIABLES"]
        assert not [k for k, v in env.items() if _bad_env(k, v)]
        for k in rk.kernels:
            assert k["OP State"] == "static"
            core, block, mix = k["Accelerator Core"], int(k["Block Dim"]), int(k["Mix Block Dim"])
            assert core != "AI_CPU"
            if core == "AI_CORE":
                assert block % 24 == 0
            elif core in ("AI_VECTOR_CORE", "MIX_AIV"):
                assert block % 48 == 0
            elif core == "MIX_AIC":
                assert block % 24 == 0 or mix % 48 == 0
            assert _max_ratio(k) > 0.8, (k["Type"], "has a bound pipe")
            shapes = _shapes(k["Input Shapes"])
            if "MatMul" in k["Type"]:
                assert shapes[0][-1] % 256 == 0 and shapes[1][-1] % 256 == 0
                assert k["Input Data Types"] == "DT_BF16;DT_BF16"
            if k["Type"].startswith("FlashAttention"):
                _, _, seq, head = shapes[0]
                assert head % 128 == 0 and seq % 128 == 0
                assert set(k["Input Data Types"].split(";")) == {"DT_BF16"}
        freq = [e for e in rk.trace if e["ph"] == "C" and e["name"] == "AI Core Freq"]
        assert freq and all(e["args"]["MHz"] == 1800 for e in freq)
        assert not [e for e in rk.trace if e.get("cat", "").lower() == "gc"]
        for step in (1, 2):
            py = rk.in_step(rk.x("Python"), step)
            cann = rk.in_step(rk.x("CANN"), step)
            dl = [e for e in py if "dataloader" in e["name"].lower()]
            assert dl and max(ns(e["dur"]) for e in dl) < 10_000_000
            assert sum(e["name"] == "SyncBatchNorm" for e in py) < 20
            assert sum(e["name"] == "AscendCL@aclopCompileAndExecute" for e in cann) < 20
            assert sum(ns(e["dur"]) for e in cann if e["name"] == "AscendCL@aclMallocMemInner") < 10_000_000
            names = [e["name"] for e in py if e["name"].startswith(("aten::", "npu::"))]
            assert "aten::gelu" not in names
            assert not any(a == "aten::add" and b == "aten::layer_norm" for a, b in itertools.pairwise(names))
            assert any(e["name"] == "Optimizer.step#NpuFusedAdamW.step" for e in py)
        launches = sum(e["name"] == "Node@launch" for e in rk.x("CANN"))
        cann = sorted(rk.x("CANN"), key=lambda e: ns(e["ts"]))
        co = sum(
            1
            for a, b in itertools.pairwise(cann)
            if b["name"] == "AscendCL@aclrtSynchronizeStream" and a["name"] == "Node@launch"
        )
        assert co / launches <= 0.5
        for step in (1, 2):
            ops = rk.comm_ops(step)
            sizes = [v["Communication Bandwidth Info"]["SDMA"]["Transit Size(MB)"] for v in ops.values()]
            assert sum(s < 16 for s in sizes) / len(sizes) <= 0.2
            for v in ops.values():
                bw = v["Communication Bandwidth Info"]
                assert all(float(size) >= 16 for size in bw["HCCS"]["Size Distribution"])
                assert bw["SDMA"]["Bandwidth(GB/s)"] >= 14.4
                assert bw["RDMA"]["Transit Time(ms)"] < 4000
        for t in rk.x("Communication"):
            a = t["args"]
            if (
                a.get("transport type") == "SDMA"
                and a.get("link type") != "ON_CHIP"
                and a["size(Byte)"] > 512
            ):
                assert a["size(Byte)"] % 512 == 0
        for row in rk.steps:
            stage = float(row["Stage"])
            assert float(row["Computing"]) / stage >= 0.9, "device busy most of the step"
            assert float(row["Free"]) / stage < 0.02
            assert float(row["Communication(Not Overlapped)"]) / stage < 0.01, "comm hidden under compute"
            assert float(row["Communication"]) > 0
    assert all(g <= 0.05 for g in _slow_rank_gaps(clean_ascend).values())
    stages = [float(r["Stage"]) for rk in clean_ascend for r in rk.steps]
    assert (max(stages) - min(stages)) / min(stages) < 0.02


def test_ascend_options(tmp_path: Path) -> None:
    sc = Scenario("ascend", ranks=2, steps=2, seed=1)
    write_ascend_profile(sc, tmp_path / "new", block_num_header=True, drop_op_state=True, extra_files=True)
    rk = ranks_of(tmp_path / "new")[0]
    header = list(rk.kernels[0])
    assert header[0] == "Device_id" and "Block Num" in header and "Mix Block Num" in header
    assert "Block Dim" not in header and "OP State" not in header and "HF32 Eligible" not in header
    apo = rk.dir / "ASCEND_PROFILER_OUTPUT"
    for name, first in (
        ("memory_record.csv", "Component"),
        ("api_statistic.csv", "Device_id"),
        ("operator_details.csv", "Name"),
    ):
        rows = Rank._csv(apo / name)
        assert rows and next(iter(rows[0])) == first
    with pytest.raises(ValueError, match="OP State"):
        write_ascend_profile(
            Scenario("ascend", ranks=2, plants=[Plant("dynamic-shape")]), tmp_path / "x", drop_op_state=True
        )


def test_ascend_events_per_rank_scales(tmp_path: Path) -> None:
    write_ascend_profile(Scenario("ascend", ranks=2, steps=2), tmp_path, events_per_rank=6000)
    n = len(ranks_of(tmp_path)[0].trace)
    assert 5000 <= n <= 7000


# ---------------------------------------------------------------------------------- ascend: plants
def _pl(check: str, **kw: Any) -> Plant:
    params = kw.pop("params", {})
    return Plant(check, params=params, **kw)


def test_plant_slow_rank_compute(gen) -> None:
    rks = ranks_of(gen("ascend", _pl("slow-rank", ranks=[3])))
    comp = [sum(float(r["Computing"]) for r in rk.steps) for rk in rks]
    assert comp[3] / (sum(comp[:3]) / 3) > 1.3
    assert _slow_rank_gaps(rks)["compute"] > 0.05
    # peers wait for rank 3 in the AllReduce: they show the communication the slow rank does not
    comm = [sum(float(r["Communication(Not Overlapped)"]) for r in rk.steps) for rk in rks]
    assert min(comm[:3]) > comm[3] + 10_000


def test_plant_slow_rank_free_and_communication(gen) -> None:
    rks = ranks_of(gen("ascend", _pl("slow-rank", ranks=[0], steps=[2], params={"dimension": "free"})))
    free = {(rk.rank, int(r["Step"])): float(r["Free"]) for rk in rks for r in rk.steps}
    assert free[(0, 2)] >= 250_000 and max(v for k, v in free.items() if k != (0, 2)) < 5_000
    rks = ranks_of(gen("ascend", _pl("slow-rank", ranks=[1], params={"dimension": "communication"})))
    comm = [float(rk.steps[0]["Communication(Not Overlapped)"]) for rk in rks]
    assert comm[1] >= 29_000 and max(comm[0], comm[2], comm[3]) < 1_000
    assert rks[1].comm["step1"]["p2p"] and not rks[0].comm["step1"]["p2p"]


def test_plant_slow_link(gen) -> None:
    rks = ranks_of(gen("ascend", _pl("slow-link", ranks=[2])))
    for rk in rks:
        bw = rk.comm["step1"]["collective"]["Total Op Info"]["Communication Bandwidth Info"]["SDMA"][
            "Bandwidth(GB/s)"
        ]
        assert (bw < 14.4) if rk.rank == 2 else (bw > 14.4)
        links = [
            v
            for op in rk.matrix["step1"]["collective"].values()
            for v in op.values()
            if v["Transport Type"] == "HCCS"
        ]
        assert all((v["Bandwidth(GB/s)"] < 10) == (rk.rank == 2) for v in links)


def test_plant_env_var(gen) -> None:
    rks = ranks_of(gen("ascend", _pl("env-var")))
    env = rks[0].meta["ENV_VARIABLES"]
    bad = {k for k, v in env.items() if _bad_env(k, v)}
    assert bad == {
        "ASCEND_LAUNCH_BLOCKING",
        "ASCEND_GLOBAL_LOG_LEVEL",
        "ACLNN_CACHE_LIMIT",
        "HOST_CACHE_CAPACITY",
        "PYTORCH_NPU_ALLOC_CONF",
        "HCCL_ALGO",
    }
    rks = ranks_of(gen("ascend", _pl("env-var", ranks=[1], params={"name": "HCCL_RDMA_TC", "value": "132"})))
    assert [rk.meta["ENV_VARIABLES"]["HCCL_RDMA_TC"] for rk in rks] == ["", "132", "", ""]


def test_plant_kernel_details_problems(gen) -> None:
    rk = ranks_of(
        gen(
            "ascend",
            _pl("aicpu-op"),
            _pl("dynamic-shape"),
            _pl("block-dim-underuse"),
            _pl("no-bound-op"),
            _pl("misaligned-shape"),
            _pl("fp32-compute"),
        )
    )[0]
    aicpu = [k for k in rk.kernels if k["Accelerator Core"] == "AI_CPU"]
    assert (
        aicpu
        and max(float(k["Duration(us)"]) for k in aicpu) >= 20
        and "DOUBLE" in aicpu[0]["Input Data Types"]
    )
    assert {k["OP State"] for k in rk.kernels} == {"dynamic"}
    mm = [k for k in rk.kernels if k["Type"] == "MatMulV2"]
    assert {int(k["Block Dim"]) for k in mm} == {20}
    assert all(int(k["Block Dim"]) == 40 for k in rk.kernels if k["Accelerator Core"] == "AI_VECTOR_CORE")
    assert all(_max_ratio(k) <= 0.8 for k in rk.kernels)
    assert any(_shapes(k["Input Shapes"])[0][-1] % 256 for k in mm)
    fa = [k for k in rk.kernels if k["Type"] == "FlashAttentionScore"]
    assert all(_shapes(k["Input Shapes"])[0][-1] % 128 for k in fa)
    assert all(k["Input Data Types"] == "FLOAT;FLOAT" and k["HF32 Eligible"] == "YES" for k in mm)
    cube = sum(
        float(k["Duration(us)"])
        for k in rk.kernels
        if k["Type"] in ("MatMulV2", "FlashAttentionScore", "FlashAttentionScoreGrad")
    )
    assert cube / sum(float(k["Duration(us)"]) for k in rk.kernels) > 0.5


def test_plant_freq_throttle(gen) -> None:
    for rk in ranks_of(gen("ascend", _pl("freq-throttle", ranks=[1]))):
        mhz = {e["args"]["MHz"] for e in rk.trace if e["ph"] == "C" and e["name"] == "AI Core Freq"}
        assert mhz == ({1300} if rk.rank == 1 else {1800})
        assert (1800 - min(mhz)) / 1800 >= 0.05 or rk.rank != 1


def test_plant_host_side_problems(gen) -> None:
    rk = ranks_of(
        gen(
            "ascend",
            _pl("sync-stream"),
            _pl("op-compile"),
            _pl("sync-batchnorm"),
            _pl("gc-pause"),
            _pl("slow-dataloader"),
            _pl("memory-ops"),
            _pl("affinity-api"),
        )
    )[0]
    cann = sorted(rk.x("CANN"), key=lambda e: ns(e["ts"]))
    launches = sum(e["name"] == "Node@launch" for e in cann)
    co = sum(
        1
        for a, b in itertools.pairwise(cann)
        if a["name"] == "Node@launch" and b["name"] == "AscendCL@aclrtSynchronizeStream"
    )
    assert co / launches > 0.5
    for step in (1, 2):
        py, c = rk.in_step(rk.x("Python"), step), rk.in_step(rk.x("CANN"), step)
        assert sum(e["name"] == "AscendCL@aclopCompileAndExecute" for e in c) >= 20
        assert sum(e["name"] == "SyncBatchNorm" for e in py) >= 20
        gc = [e for e in py if e.get("cat") == "GC"]
        assert len(gc) == 3 and all(ns(e["dur"]) >= 1_000_000 for e in gc)
        assert max(ns(e["dur"]) for e in py if "DataLoader" in e["name"]) >= 10_000_000
        assert sum(ns(e["dur"]) for e in c if e["name"] == "AscendCL@aclMallocMemInner") >= 10_000_000
        names = [
            e["name"]
            for e in sorted(py, key=lambda e: ns(e["ts"]))
            if e["name"].startswith(("aten::", "npu::"))
        ]
        assert "aten::gelu" in names
        assert any(a == "aten::add" and b == "aten::layer_norm" for a, b in itertools.pairwise(names))
        assert any(e["name"] == "Optimizer.step#AdamW.step" for e in py)


def test_plant_host_bound(gen) -> None:
    rks = ranks_of(gen("ascend", _pl("host-bound")))
    for rk in rks:
        for row in rk.steps:
            window = float(row["Stage"]) - float(row["Preparing"])
            assert float(row["Free"]) / window > 0.3
        small = [k for k in rk.kernels if float(k["Duration(us)"]) < 20]
        assert len(small) / len(rk.kernels) > 0.5


def test_plant_small_packet_and_misalignment(gen) -> None:
    rk = ranks_of(gen("ascend", _pl("small-packet"), ranks=2))[0]
    sizes = [v["Communication Bandwidth Info"]["SDMA"]["Transit Size(MB)"] for v in rk.comm_ops(1).values()]
    assert sum(s < 16 for s in sizes) / len(sizes) > 0.2
    packets = [
        float(size)
        for v in rk.comm_ops(1).values()
        for size in v["Communication Bandwidth Info"]["HCCS"]["Size Distribution"]
    ]
    assert max(packets) < 16
    rk = ranks_of(gen("ascend", _pl("byte-misalignment"), ranks=2))[0]
    mis = [t for t in rk.x("Communication", "Memcpy") if t["args"]["size(Byte)"] % 512]
    assert mis and all(t["args"]["size(Byte)"] > 512 and t["args"]["transport type"] == "SDMA" for t in mis)


def test_plant_retransmission(gen) -> None:
    rks = ranks_of(gen("ascend", _pl("retransmission", ranks=[1])))
    op = next(iter(rks[1].comm_ops(1)))
    assert rks[1].comm_ops(1)[op]["Communication Bandwidth Info"]["RDMA"]["Transit Time(ms)"] > 4000
    assert min(rk.comm_ops(1)[op]["Communication Time Info"]["Elapse Time(ms)"] for rk in rks) >= 4000
    assert all(
        v["Communication Bandwidth Info"]["RDMA"]["Transit Time(ms)"] == 0
        for v in rks[0].comm_ops(1).values()
    )


def test_plant_bandwidth_contention(gen) -> None:
    rk = ranks_of(gen("ascend", _pl("bandwidth-contention")))[0]
    mm = [
        (ns(k["Start Time(us)"]), ns(k["Start Time(us)"]) + ns(k["Duration(us)"]))
        for k in rk.kernels
        if "matmul" in k["Name"].lower()
    ]
    slow = [
        v
        for v in rk.comm_ops(1).values()
        if v["Communication Bandwidth Info"]["SDMA"]["Bandwidth(GB/s)"] < 14.4
        and overlaps(
            (
                ns(f"{v['Communication Time Info']['Start Timestamp(us)']:.3f}"),
                ns(f"{v['Communication Time Info']['Start Timestamp(us)']:.3f}")
                + int(v["Communication Time Info"]["Elapse Time(ms)"] * 1e6),
            ),
            mm,
        )
    ]
    assert len(slow) >= 2


def test_plant_exposed_comm_tail(gen) -> None:
    for rk in ranks_of(gen("ascend", _pl("exposed-comm-tail"))):
        last_bwd = max(
            ns(t["ts"]) + ns(t["dur"])
            for t in rk.in_step(rk.x("Ascend Hardware"), 1)
            if "ApplyAdamW" not in t["name"]
            and ns(t["ts"])
            < min(ns(o["ts"]) for o in rk.in_step(rk.x("Communication"), 1) if o["name"].startswith("hcom_"))
        )
        ops = [o for o in rk.in_step(rk.x("Communication"), 1) if o["name"].startswith("hcom_")]
        assert all(ns(o["ts"]) >= last_bwd for o in ops)
        row = rk.steps[0]
        assert float(row["Communication(Not Overlapped)"]) / float(row["Stage"]) > 0.05


# ------------------------------------------------------------------------------------------- kineto
def _kin(root: Path, rank: int) -> dict[str, Any]:
    """A Kineto trace, split by kind, for the first step."""
    ev = kineto_events(root, rank)
    steps = sorted((e for e in ev if e.get("name", "").startswith("ProfilerStep#")), key=lambda e: e["ts"])
    a, b = steps[0]["ts"], steps[0]["ts"] + steps[0]["dur"]
    runtime = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime"}
    step_corr = {c for c, e in runtime.items() if a <= e["ts"] < b}
    gpu = [
        e
        for e in ev
        if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and e["args"]["correlation"] in step_corr
    ]
    return {
        "ev": ev,
        "steps": steps,
        "a": a,
        "b": b,
        "runtime": runtime,
        "gpu": gpu,
        "kernels": [e for e in gpu if e["cat"] == "kernel"],
        "nccl": [e for e in gpu if e["cat"] == "kernel" and e["name"].startswith("nccl")],
        "compute": [e for e in gpu if e["cat"] == "kernel" and not e["name"].startswith("nccl")],
        "cpu": [
            e
            for e in ev
            if e.get("ph") == "X" and isinstance(e.get("pid"), int) and e["pid"] > 1000 and a <= e["ts"] < b
        ],
    }


def test_kineto_structure(gen) -> None:
    root = gen("kineto")
    for r in range(4):
        text = (root / f"rank{r}.pt.trace.json").read_text()
        assert re.search(r'"rank":\s+(\d+)', text).group(1) == str(r), "HTA's rank regex finds the rank"
        doc = json.loads(text)
        assert doc["schemaVersion"] == 1 and doc["deviceProperties"]
        assert doc["distributedInfo"]["backend"] == "nccl" and doc["distributedInfo"]["world_size"] == 4
        ev = doc["traceEvents"]
        cats = {e.get("cat") for e in ev}
        assert {
            "cpu_op",
            "user_annotation",
            "cuda_runtime",
            "kernel",
            "ac2g",
            "gpu_memcpy",
            "gpu_memset",
            "cuda_sync",
        } <= cats
        assert [e["name"] for e in ev if e.get("name", "").startswith("ProfilerStep#")] == [
            "ProfilerStep#1",
            "ProfilerStep#2",
        ]
        runtime = {e["args"]["correlation"]: e for e in ev if e.get("cat") == "cuda_runtime"}
        for k in (e for e in ev if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")):
            launch = runtime[k["args"]["correlation"]]
            assert k["pid"] == r and k["tid"] == k["args"]["stream"] and k["args"]["device"] == r
            assert launch["ts"] + launch["dur"] <= k["ts"] + 1e-6 or launch["name"] == "cudaMemcpyAsync"
            assert k["args"]["External id"] == launch["args"]["External id"]
        flows = [(e["ph"], e["id"]) for e in ev if e.get("cat") == "ac2g"]
        assert len(flows) == len(set(flows)) and sum(p == "s" for p, _ in flows) == sum(
            p == "f" for p, _ in flows
        )
        comms = [e for e in ev if e.get("name") == "record_param_comms"]
        assert comms and all(
            e["args"]["Collective name"] == "allreduce" and e["args"]["Group size"] == 4 for e in comms
        )
        nccl = [
            e
            for e in ev
            if e.get("cat") == "kernel" and e["name"].startswith("ncclDevKernel_AllReduce_Sum_bf16")
        ]
        assert len(nccl) == len(comms)
    for line in re.findall(r'"ts": [0-9.]+', (root / "rank0.pt.trace.json").read_text())[:200]:
        assert re.fullmatch(r'"ts": \d{13}\.\d{3}', line)
    legacy = gen("kineto", ranks=2, legacy_nccl=True)
    assert "ncclKernel_AllReduce_RING_LL_Sum_bfloat16" in (legacy / "rank0.pt.trace.json").read_text()


def _host_gaps(k: dict[str, Any]) -> list[float]:
    ivs = union_ns(
        [
            (int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000))
            for e in k["cpu"]
            if not e["name"].startswith("ProfilerStep")
        ]
    )
    return [(b[0] - a[1]) / 1000 for a, b in itertools.pairwise(ivs)]


def test_clean_kineto_violates_no_threshold(gen) -> None:
    root = gen("kineto")
    durs = []
    for r in range(4):
        k = _kin(root, r)
        step = k["steps"][0]["dur"]
        durs.append(step)
        names = {e["name"] for e in k["gpu"]}
        assert "Memcpy HtoD (Pageable -> Device)" not in names and "Memcpy HtoD (Pinned -> Device)" in names
        dl = [e for e in k["cpu"] if "DataLoader" in e["name"]]
        assert dl and max(e["dur"] for e in dl) < 10_000
        gemm = sum(e["dur"] for e in k["compute"] if "gemm" in e["name"])
        assert sum(e["dur"] for e in k["compute"] if "sgemm" in e["name"]) == 0 and gemm > 0
        nelems = [e["args"]["In msg nelems"] for e in k["cpu"] if e["name"] == "record_param_comms"]
        assert min(nelems) * 2 >= 16e6
        syncs = [e for e in k["cpu"] if e["name"] in ("cudaStreamSynchronize", "cudaDeviceSynchronize")]
        assert len(syncs) <= 1
        assert not [e for e in k["cpu"] if e["name"] == "cudaMalloc"]
        busy = union_ns([(int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000)) for e in k["gpu"]])
        assert 1 - sum(b - a for a, b in busy) / 1000 / step < 0.05, "GPU busy most of the step"
        comp = union_ns([(int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000)) for e in k["compute"]])
        last_bwd = max(e["ts"] + e["dur"] for e in k["compute"] if "Adam" not in e["name"])
        exposed = sum(max(0.0, e["ts"] + e["dur"] - max(e["ts"], last_bwd)) for e in k["nccl"])
        assert exposed / step < 0.02
        assert any(overlaps((int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000)), comp) for e in k["nccl"])
        assert max(_host_gaps(k)) < 1_000, "no long host gap (GC) inside the step"
        launch_wait = sum(
            1
            for e in k["compute"]
            if k["runtime"][e["args"]["correlation"]]["ts"]
            > max((o["ts"] + o["dur"] for o in k["compute"] if o["ts"] < e["ts"]), default=0)
        )
        assert launch_wait / len(k["compute"]) < 0.1
    assert (max(durs) - min(durs)) / min(durs) < 0.02


def test_kineto_plant_slow_rank_late_arrival(gen) -> None:
    root = gen("kineto", _pl("slow-rank", ranks=[2]))
    ks = [_kin(root, r) for r in range(4)]
    comp = [sum(e["dur"] for e in k["compute"]) for k in ks]
    assert comp[2] / (sum(comp) - comp[2]) * 3 > 1.3
    nccl = [sum(e["dur"] for e in k["nccl"]) for k in ks]
    assert min(nccl[i] for i in (0, 1, 3)) > 3 * nccl[2], "peers wait in NCCL for the late rank"
    firsts = [[e["ts"] for e in sorted(k["nccl"], key=lambda e: e["ts"])] for k in ks]
    assert all(firsts[2][i] >= max(f[i] for f in firsts) - 1e-3 for i in range(len(firsts[2])))


def test_kineto_host_problems(gen) -> None:
    k = _kin(gen("kineto", _pl("gc-pause"), ranks=2), 0)
    assert sum(g >= 20_000 for g in _host_gaps(k)) == 3
    k = _kin(gen("kineto", _pl("slow-dataloader"), _pl("memory-ops"), _pl("h2d-pageable"), ranks=2), 0)
    assert max(e["dur"] for e in k["cpu"] if "DataLoader" in e["name"]) >= 10_000
    assert sum(e["dur"] for e in k["cpu"] if e["name"] == "cudaMalloc") >= 10_000
    pageable = [e for e in k["gpu"] if e["name"] == "Memcpy HtoD (Pageable -> Device)"]
    assert len(pageable) == 2 and not [e for e in k["gpu"] if "Pinned" in e["name"]]
    k = _kin(gen("kineto", _pl("sync-stream"), ranks=2), 0)
    syncs = [e for e in k["cpu"] if e["name"] == "cudaStreamSynchronize"]
    assert len(syncs) >= len(k["compute"])
    k = _kin(gen("kineto", _pl("host-bound"), ranks=2), 0)
    assert sum(e["dur"] < 20 for e in k["compute"]) / len(k["compute"]) > 0.5
    waited = sum(
        1
        for e in k["compute"]
        if k["runtime"][e["args"]["correlation"]]["ts"]
        > max((o["ts"] + o["dur"] for o in k["compute"] if o["ts"] < e["ts"]), default=0)
    )
    assert waited / len(k["compute"]) > 0.5, "HTA host_wait: the launch came after the previous kernel ended"


def test_kineto_comm_and_dtype_problems(gen) -> None:
    k = _kin(gen("kineto", _pl("small-packet"), ranks=2), 0)
    nelems = [e["args"]["In msg nelems"] for e in k["cpu"] if e["name"] == "record_param_comms"]
    assert len(nelems) > 20 and max(nelems) * 2 <= (1 << 20)
    k = _kin(gen("kineto", _pl("exposed-comm-tail"), ranks=2), 0)
    comp = union_ns([(int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000)) for e in k["compute"]])
    last_bwd = max(e["ts"] + e["dur"] for e in k["compute"] if "Adam" not in e["name"])
    assert all(e["ts"] >= last_bwd for e in k["nccl"])
    assert not any(overlaps((int(e["ts"] * 1000), int((e["ts"] + e["dur"]) * 1000)), comp) for e in k["nccl"])
    k = _kin(gen("kineto", _pl("fp32-compute"), ranks=2), 0)
    sgemm = sum(e["dur"] for e in k["compute"] if "sgemm" in e["name"] or "_f32_" in e["name"])
    assert sgemm / sum(e["dur"] for e in k["compute"]) > 0.5
    assert not [e for e in k["compute"] if "bf16" in e["name"]]
    root = gen("kineto", _pl("slow-rank", ranks=[1], params={"dimension": "communication"}), ranks=2)
    assert [sum("SendRecv" in e["name"] for e in _kin(root, r)["nccl"]) for r in (0, 1)] == [0, 4]
    root = gen("kineto", _pl("slow-rank", ranks=[1], params={"dimension": "free"}), ranks=2)
    steps = [_kin(root, r)["steps"][0]["dur"] for r in (0, 1)]
    assert steps[1] - steps[0] >= 240_000


# ------------------------------------------------------------------------------------------- repeat
@pytest.mark.skipif(
    not (SHARED / "kineto" / "trace_filter" / "sampled_rank-0.json.gz").is_file(),
    reason="shared Kineto traces not available",
)
def test_repeat_kineto_trace(tmp_path: Path) -> None:
    src = SHARED / "kineto" / "trace_filter" / "sampled_rank-0.json.gz"
    orig_size = len(gzip.decompress(src.read_bytes()))
    out = repeat_kineto_trace(
        src, tmp_path / "big.json.gz", rank=6, target_bytes=int(2.5 * orig_size), world_size=8
    )
    text = gzip.decompress(out.read_bytes()).decode()
    assert 2.0 * orig_size <= len(text) <= 3.2 * orig_size
    doc = json.loads(text)
    assert doc["distributedInfo"]["rank"] == 6 and doc["distributedInfo"]["world_size"] == 8
    ev = doc["traceEvents"]
    steps = sorted(
        (e["ts"], e["dur"], e["name"]) for e in ev if e.get("name", "").startswith("ProfilerStep#")
    )
    assert len(steps) >= 4 and len({s[2] for s in steps}) == len(steps)
    assert [int(s[2].split("#")[1]) for s in steps] == list(range(551, 551 + len(steps)))
    assert all(a[0] + a[1] <= b[0] for a, b in itertools.pairwise(steps))
    corr = [e["args"]["correlation"] for e in ev if e.get("cat") == "cuda_runtime"]
    assert len(corr) == len(set(corr))
    launched = set(corr)
    assert all(e["args"]["correlation"] in launched for e in ev if e.get("cat") == "kernel")
    ext = [e["args"]["External id"] for e in ev if e.get("cat") == "cpu_op"]
    assert len(ext) == len(set(ext))


# -------------------------------------------------------------------------------- catalog and CLI
def test_expected_findings() -> None:
    assert expected_findings(Scenario("ascend")) == []
    sc = Scenario(
        "ascend",
        ranks=4,
        steps=3,
        plants=[
            Plant("slow-rank"),
            Plant("env-var", params={"vars": {"HCCL_ALGO": "ring"}}),
            Plant("retransmission"),
        ],
    )
    got = expected_findings(sc)
    assert {"check": "slow-rank", "subject": "compute", "ranks": [3], "steps": [1, 2, 3]} in got
    assert {"check": "env-var", "subject": "HCCL_ALGO", "ranks": [0, 1, 2, 3], "steps": [1, 2, 3]} in got
    assert {"check": "retransmission", "subject": "RDMA", "ranks": [3], "steps": [1]} in got
    assert {"check": "slow-rank", "subject": "communication", "because": "slow-rank"} in tolerated_findings(
        sc
    )
    assert set(PROBLEMS) == {
        "slow-rank",
        "slow-link",
        "env-var",
        "aicpu-op",
        "dynamic-shape",
        "block-dim-underuse",
        "no-bound-op",
        "misaligned-shape",
        "freq-throttle",
        "sync-stream",
        "op-compile",
        "sync-batchnorm",
        "affinity-api",
        "gc-pause",
        "slow-dataloader",
        "host-bound",
        "small-packet",
        "bandwidth-contention",
        "retransmission",
        "byte-misalignment",
        "exposed-comm-tail",
        "memory-ops",
        "h2d-pageable",
        "fp32-compute",
    }
    with pytest.raises(ValueError, match="cannot be planted"):
        Scenario("kineto", plants=[Plant("env-var")])
    with pytest.raises(ValueError, match="rank 9"):
        Scenario("ascend", plants=[Plant("gc-pause", ranks=[9])])
    p = parse_plant_spec("slow-rank:1,3:2:dimension=free,tail_ms=300.5")
    assert (p.check, p.ranks, p.steps, p.params) == (
        "slow-rank",
        [1, 3],
        [2],
        {"dimension": "free", "tail_ms": 300.5},
    )


def test_cli(tmp_path: Path) -> None:
    buf = io.StringIO()
    with redirect_stdout(buf):
        rc = cli_main(
            [
                "ascend",
                "--out",
                str(tmp_path / "a"),
                "--ranks",
                "2",
                "--plant",
                "gc-pause:1",
                "--plant",
                "slow-rank:0::dimension=free",
            ]
        )
    assert rc == 0
    doc = json.loads(buf.getvalue())
    assert {(f["check"], f["subject"], tuple(f["ranks"])) for f in doc["expected_findings"]} == {
        ("gc-pause", "", (1,)),
        ("slow-rank", "free", (0,)),
    }
    assert len(list((tmp_path / "a").glob("*_ascend_pt"))) == 2
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert cli_main(["kineto", "--out", str(tmp_path / "k"), "--ranks", "2", "--clean", "--gz"]) == 0
    assert json.loads(buf.getvalue())["expected_findings"] == []
    assert (tmp_path / "k" / "rank1.pt.trace.json.gz").is_file()
    assert cli_main(["kineto", "--out", str(tmp_path / "x"), "--clean", "--plant", "gc-pause"]) == 2


def test_ascend_beyond_one_node_meshes_the_node_and_rings_over_rdma(tmp_path: Path) -> None:
    """16 ranks = 2 nodes of 8: each rank links to the 7 other NPUs of its node over HCCS and to the same
    device of the next node over RDMA, so links per rank do not grow with the cluster."""
    write_ascend_profile(Scenario("ascend", ranks=16, steps=1, seed=3), tmp_path, events_per_rank=2000)
    dirs = sorted(tmp_path.glob("node*_ascend_pt"), key=lambda p: int(p.name.split("_")[1]))
    assert len(dirs) == 16 and {p.name.split("_")[0] for p in dirs} == {"node0", "node1"}
    for rank in (0, 5, 9, 15):
        matrix = json.loads((dirs[rank] / "ASCEND_PROFILER_OUTPUT" / "communication_matrix.json").read_text())
        for kinds in matrix.values():
            for links in kinds["collective"].values():
                got = {key: v["Transport Type"] for key, v in links.items()}
                node = rank // 8 * 8
                want = {f"{rank}-{p}": "HCCS" for p in range(node, node + 8) if p != rank}
                want[f"{rank}-{rank}"] = "LOCAL"
                want[f"{rank}-{(rank + 8) % 16}"] = "RDMA"
                assert got == want
        comm = json.loads((dirs[rank] / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
        op = next(iter(next(iter(comm.values()))["collective"].values()))
        rdma = op["Communication Bandwidth Info"]["RDMA"]
        assert rdma["Transit Size(MB)"] > 0 and rdma["Bandwidth(GB/s)"] == pytest.approx(12.0, rel=0.01)
