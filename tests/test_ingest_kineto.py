"""Kineto reader (issue 2, Kineto half): parity with HTA 0.5.0, every shared trace loads, bad input, exact ns.

HTA parity (kineto-format-and-hta.md §3): per rank, the breakdown summed over HTA's kept steps must give
HTA's temporal breakdown (idle = free, compute, non-compute, span = Σ device windows) and comm/comp
overlap within 1 %. `hta_compat=True` (ts rounded up, end down to whole µs, like HTA does for float
timestamps) is used for the float-timestamp traces (nccl_parser_config, amd_trace); the integer-µs traces
need no rounding (plain breakdown).
"""

from __future__ import annotations

import csv
import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import KINETO, need
from stepdoctor.analysis import build, store
from stepdoctor.analysis.errors import ProfileError
from stepdoctor.analysis.ingest import kineto
from stepdoctor.analysis.ingest.base import RankSource, RankTables
from stepdoctor.analysis.ingest.kineto import source as kineto_source
from stepdoctor.analysis.ingest.kineto import steps as kineto_steps
from stepdoctor.analysis.metrics.breakdown import compute_breakdown, totals
from stepdoctor.analysis.store import IngestOptions
from stepdoctor.analysis.timeline.intervals import Coverage

REF = KINETO / "reference"


# dataset -> (trace path, hta_compat): float-µs traces need HTA's ceil/floor rounding
PARITY = {
    "trace_filter_2ranks": ("trace_filter", False),
    "trace_diff_control": ("trace_diff/control", False),
    "trace_diff_test": ("trace_diff/test", True),
    "nccl_parser_config": ("nccl_parser_config", True),
    "amd_trace": ("amd_trace", True),
    "with_gpu_user_annotation": ("with_gpu_user_annotation", False),
}
# kernels launched before the trace started run inside trace_diff_test's first step (HTA drops them because
# their launch is missing), so its numbers are only reached with hta_compat, which keeps HTA's op set


def _open(rel: str, tmp_path: Path) -> store.Profile:
    return build.open_profile(need(KINETO / rel), IngestOptions(cache_dir=tmp_path / "cache"))


def _csv(dataset: str, name: str) -> list[dict[str, str]]:
    with open(need(REF / dataset / name), newline="") as f:
        return list(csv.DictReader(f))


def _assert_close(mine: float, ref: float, what: str, rel: float = 0.01, abs_us: float = 2.0) -> None:
    assert abs(mine - ref) <= max(rel * abs(ref), abs_us), f"{what}: stepdoctor {mine} vs HTA {ref}"


def _check_temporal(dataset: str, per_rank: dict[int, dict[str, float]]) -> None:
    for row in _csv(dataset, "temporal_breakdown.csv"):
        r = int(row["rank"])
        got = per_rank[r]
        span = float(row["kernel_time(us)"])
        _assert_close(got["span"], span, f"{dataset} rank {r} kernel_time")
        # idle and non-compute are parts of the span: 1 % of the span (compute: 1 % of itself)
        _assert_close(got["idle"], float(row["idle_time(us)"]), f"{dataset} rank {r} idle", abs_us=0.01 * span)
        _assert_close(got["compute"], float(row["compute_time(us)"]), f"{dataset} rank {r} compute")
        _assert_close(got["non_compute"], float(row["non_compute_time(us)"]), f"{dataset} rank {r} non-compute",
                      abs_us=0.01 * span)
    for row in _csv(dataset, "comm_comp_overlap.csv"):
        r = int(row["rank"])
        ref = row["comp_comm_overlap_pctg"]
        if ref == "":
            assert per_rank[r]["comm"] == 0, f"{dataset} rank {r}: HTA found no communication"
        else:
            pct = 100.0 * per_rank[r]["overlapped"] / per_rank[r]["comm"]
            assert abs(pct - float(ref)) <= 0.01 * float(ref), f"{dataset} rank {r} overlap {pct} vs {ref}"


@pytest.mark.parametrize("dataset", list(PARITY))
def test_breakdown_totals_match_hta_temporal_breakdown(dataset, tmp_path):
    rel, compat = PARITY[dataset]
    prof = _open(rel, tmp_path)
    per_rank = {}
    for t in totals(compute_breakdown(prof, hta_compat=compat)):
        per_rank[t.rank] = {"span": t.device_ms * 1000, "idle": t.free_ms * 1000, "compute": t.compute_ms * 1000,
                            "non_compute": t.non_compute_ms * 1000, "comm": t.communication_ms * 1000,
                            "overlapped": t.overlapped_ms * 1000}
    _check_temporal(dataset, per_rank)


def _hta_kept_totals(prof: store.Profile, compat: bool) -> dict[int, dict[str, float]]:
    """The breakdown's arithmetic (metrics/breakdown.py) over HTA's kept device ops only."""
    out = {}
    for rank in prof.info.ranks:
        ops = prof.sql("SELECT start_ns, dur_ns, category FROM device_ops WHERE rank = ? AND hta_kept", [rank])
        s = ops["start_ns"].to_numpy(np.int64)
        e = s + ops["dur_ns"].to_numpy(np.int64)
        if compat:
            s, e = -((-s) // 1000) * 1000, (e // 1000) * 1000
        comp = (ops["category"] == "compute").to_numpy()
        comm = (ops["category"] == "communication").to_numpy()
        st = prof.sql("SELECT device_start_ns, device_end_ns FROM steps WHERE rank = ? AND kept", [rank])
        w0, w1 = st["device_start_ns"].to_numpy(np.int64), st["device_end_ns"].to_numpy(np.int64)
        busy = Coverage(s, e).within(w0, w1).sum()
        c = Coverage(s[comp], e[comp]).within(w0, w1).sum()
        m = Coverage(s[comm], e[comm]).within(w0, w1).sum()
        cm = Coverage(s[comp | comm], e[comp | comm]).within(w0, w1).sum()
        out[rank] = {"span": (w1 - w0).sum() / 1000, "idle": ((w1 - w0).sum() - busy) / 1000, "compute": c / 1000,
                     "non_compute": (busy - c) / 1000, "comm": m / 1000, "overlapped": (c + m - cm) / 1000}
    return out


@pytest.mark.parametrize("dataset", list(PARITY))
def test_device_windows_tile_hta_span_with_kept_ops(dataset, tmp_path):
    """The windows of the kept steps tile HTA's span; over HTA's kept ops every number matches."""
    rel, compat = PARITY[dataset]
    prof = _open(rel, tmp_path)
    per_rank = _hta_kept_totals(prof, compat)
    _check_temporal(dataset, per_rank)
    for rank in prof.info.ranks:
        st = prof.sql("SELECT * FROM steps WHERE rank = ? ORDER BY step", [rank])
        w0, w1 = st["device_start_ns"].to_numpy(np.int64), st["device_end_ns"].to_numpy(np.int64)
        assert (w1 >= w0).all() and (w0[1:] == w1[:-1]).all(), "windows must tile without gaps or overlaps"


def test_kept_op_set_is_htas(tmp_path):
    """HTA 0.5.0 keeps 12,515 GPU events on trace_diff/test (counted with HTA itself)."""
    prof = _open("trace_diff/test", tmp_path)
    assert len(prof.sql("SELECT 1 FROM device_ops WHERE rank = 1 AND hta_kept")) == 12515


@pytest.mark.parametrize("dataset,rel", [("trace_filter_2ranks", "trace_filter"),
                                         ("trace_diff_control", "trace_diff/control"),
                                         ("trace_diff_test", "trace_diff/test"),
                                         ("nccl_parser_config", "nccl_parser_config"),
                                         ("amd_trace", "amd_trace"), ("cpu_only", "cpu_only"),
                                         ("with_gpu_user_annotation", "with_gpu_user_annotation")])
def test_steps_match_hta_profiler_steps(dataset, rel, tmp_path):
    prof = _open(rel, tmp_path)
    kept = sorted({int(r["iter"]) for r in _csv(dataset, "profiler_steps.csv")})
    if not kept:  # HTA found no ProfilerStep: stepdoctor analyses the whole trace as step 0
        assert prof.info.steps == [0] and prof.info.dropped_steps == []
        assert any("no ProfilerStep#N annotations" in w for w in prof.warnings)
        return
    assert prof.info.steps == kept
    raw_path = REF / dataset / "profiler_steps_raw_all.csv"
    if raw_path.exists():
        raw = _csv(dataset, "profiler_steps_raw_all.csv")
        assert prof.info.dropped_steps == sorted({int(r["iter"]) for r in raw if r["included_by_hta_default"] != "True"})
        # exact ns: HTA's raw durations are the trace's own µs values
        mine = {(r, s): e - b for r, s, b, e in prof.rows("SELECT rank, step, start_ns, end_ns FROM steps")}
        for r in raw:
            assert mine[(int(r["rank"]), int(r["iter"]))] == int((Decimal(r["dur_us"]) * 1000).to_integral_value())
    # HTA's kept-step durations are rounded (ts up, end down): within 2 µs of ours
    mine_ms = {(r, s): (e - b) / 1000 for r, s, b, e in prof.rows("SELECT rank, step, start_ns, end_ns FROM steps")}
    for r in _csv(dataset, "profiler_steps.csv"):
        key = (int(r["rank"]), int(r["iter"]))
        if float(r["dur_us"]) < 0.5 * mine_ms[key]:
            continue  # AMD's gpu_user_annotation copy of the step, listed by HTA as a second row
        assert abs(mine_ms[key] - float(r["dur_us"])) <= 2.0


@pytest.mark.parametrize("rel,vendor,expect", [
    ("amd_trace", "rocm", []),
    ("mtia_inference_trace", "mtia", ["MTIA trace", "no ProfilerStep#N annotations"]),
    ("cpu_only", "cpu", ["no GPU events: device breakdown unavailable"]),
    ("rank_non_gpu", "cpu", ["no GPU events: device breakdown unavailable", "world size unknown"]),
    ("triton_example", "cuda", ["no distributedInfo"]),
    ("rank_unavailable", "cuda", ["no GPU events: device breakdown unavailable", "no distributedInfo.rank"]),
    ("distributed_info_unavailable", "cuda", ["no GPU events: device breakdown unavailable",
                                              "no distributedInfo: world size and process groups unknown"]),
])
def test_edge_case_traces_load_and_say_what_they_lack(rel, vendor, expect, tmp_path):
    prof = _open(rel, tmp_path)
    assert prof.info.vendor == vendor and prof.info.format == "kineto"
    text = " | ".join(prof.warnings)
    for e in expect:
        assert e in text, f"{rel}: expected warning {e!r} in {text!r}"
    if vendor == "rocm":
        assert not any("no GPU events" in w for w in prof.warnings)
    assert "gc" not in prof.capabilities()


def test_amd_gpu_step_copies_do_not_count(tmp_path):
    prof = _open("amd_trace", tmp_path)
    steps = prof.sql("SELECT step, kept FROM steps ORDER BY step")
    assert steps["step"].tolist() == [1, 2] and steps["kept"].tolist() == [True, False]
    rank = prof.sql("SELECT * FROM ranks").iloc[0]
    assert rank["device_name"] == "AMD Radeon Graphics" and rank["ai_core_num"] == 104 and rank["device_id"] == 2
    # hipLaunchKernel / hipExtModuleLaunchKernel correlate: every kernel has its launch step
    assert prof.rows("SELECT count(*) FROM device_ops WHERE step IS NULL")[0][0] == 0
    assert prof.rows("SELECT count(*) FROM device_ops WHERE task_type = 'kernel'")[0][0] == 14


def test_nccl_metadata_comm_ops_and_message_sizes(tmp_path):
    prof = _open("nccl_parser_config", tmp_path)
    ops = prof.sql("SELECT op_type, count(*) n, min(size_bytes) lo FROM comm_ops GROUP BY 1 ORDER BY 1")
    assert ops["op_type"].tolist() == ["allreduce", "broadcast"] and ops["n"].tolist() == [15, 6]
    assert prof.rows("SELECT count(*) FROM device_ops WHERE category = 'communication'")[0][0] == 21
    # record_param_comms External id 2099: In msg nelems 2049000 × Float (4 B)
    assert prof.rows("SELECT msg_bytes, collective FROM host_ops WHERE name = 'record_param_comms' "
                     "AND external_id = 2099") == [(2049000 * 4, "allreduce")]
    assert prof.rows("SELECT count(*) FROM host_ops WHERE name = 'record_param_comms' AND msg_bytes > 0")[0][0] == 21  # + 6 'wait' with 0 bytes
    assert prof.rows("SELECT DISTINCT group_name FROM comm_ops")[0][0] == "0"
    assert {"steps", "kernels", "correlation", "comm_ops", "nccl_msg_sizes"} <= prof.capabilities()
    r = prof.sql("SELECT * FROM ranks").iloc[0]
    assert (r["vendor"], r["world_size"], r["ai_core_num"], r["device_name"]) == ("cuda", 2, 108,
                                                                                  "NVIDIA A100-PG509-200")
    # time origin = first event + baseTimeNanoseconds
    first = prof.rows("SELECT min(m) FROM (SELECT min(start_ns) m FROM host_ops UNION ALL "
                      "SELECT min(start_ns) FROM device_ops)")[0][0]
    assert r["time_origin_ns"] == first + _base_ns("nccl_parser_config")
    keys = {k for (k,) in prof.rows("SELECT key FROM metadata")}
    assert {"deviceProperties", "distributedInfo", "displayTimeUnit", "baseTimeNanoseconds"} <= keys


def _base_ns(rel: str) -> int:
    path = next((KINETO / rel).glob("*.json.gz"))
    return json.loads(gzip.decompress(path.read_bytes()))["baseTimeNanoseconds"]


def test_older_nccl_kernels_get_op_type_from_name(tmp_path):
    prof = _open("trace_filter", tmp_path)
    assert prof.rows("SELECT DISTINCT op_type FROM comm_ops") == [("sendrecv",)]
    assert prof.rows("SELECT count(*) FROM comm_ops WHERE size_bytes IS NOT NULL")[0][0] == 0
    assert prof.info.ranks == [0, 1] and prof.info.world_size == 128
    assert "record_shapes" in prof.capabilities() and "nccl_msg_sizes" not in prof.capabilities()


def test_exact_ns_for_float_microseconds(tmp_path):
    """Every kernel start/dur equals the trace's decimal µs × 1000, exactly (float ts with ns decimals)."""
    path = next(need(KINETO / "nccl_parser_config").glob("*.json.gz"))
    doc = json.loads(gzip.decompress(path.read_bytes()), parse_float=Decimal)
    expect = sorted((int(e["ts"] * 1000), int(e["dur"] * 1000)) for e in doc["traceEvents"]
                    if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    prof = _open("nccl_parser_config", tmp_path)
    got = sorted(prof.rows("SELECT start_ns, dur_ns FROM device_ops"))
    assert got == expect
    assert got[0][0] % 1000 != 0  # the ns digits are really there


def test_launch_table_and_triton_driver_launch(tmp_path):
    assert {"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "hipLaunchKernel",
            "hipExtModuleLaunchKernel", "cudaGraphLaunch", "runFunction"} <= kineto.LAUNCH_APIS
    prof = _open("triton_example", tmp_path)
    row = prof.rows("SELECT d.step, h.name, h.category FROM device_ops d JOIN host_ops h "
                    "ON h.correlation_id = d.correlation_id")
    assert row == [(1, "cuLaunchKernel", "driver")]


@pytest.mark.parametrize("name,task,coll,cat", [
    ("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)", "kernel", False,
     "communication"),
    ("ncclDevKernel_AllGather_RING_LL(ncclDevComm*, unsigned long, ncclWork*)", "kernel", False, "communication"),
    ("rcclGenericKernel", "kernel", False, "communication"),
    ("hcclAllReduce", "kernel", False, "communication"),
    ("my_allreduce_kernel", "kernel", True, "communication"),
    ("Memcpy DtoD (Device -> Device)", "gpu_memcpy", False, "memory"),
    ("dma_request", "mtia_ccp_events", False, "memory"),
    ("Stream Wait Event", "cuda_sync", False, "sync"),
    ("event_wait", "mtia_ccp_events", False, "sync"),
    ("volta_sgemm_128x32_nt", "kernel", False, "compute"),
    ("Cijk_Ailk_Bjlk_SB_MT64x16x16", "kernel", False, "compute"),
    ("SyncBatchNormKernel", "kernel", False, "other"),   # HTA 0.5.0: `.*Sync` is not computation
])
def test_device_op_classification(name, task, coll, cat):
    assert kineto.classify_device_op(name, task, coll) == cat


@pytest.mark.parametrize("coll,kernel,expect", [
    ("allreduce", None, "allreduce"), ("_allgather_base", None, "allgather"),
    ("reduce_scatter_tensor_coalesced", None, "reducescatter"), ("all_to_all", None, "alltoall"),
    ("recv", None, "receive"), (None, "ncclDevKernel_ReduceScatter_RING_LL(ncclDevComm*)", "reducescatter"),
    (None, "ncclAllReduceRingLLKernel_sum_f32(ncclColl)", "allreduce"), (None, "volta_sgemm", None),
])
def test_collective_op_type(coll, kernel, expect):
    assert kineto.collective_op_type(coll, kernel) == expect


# ---------------------------------------------------------------------------------------------------
# Synthetic traces: streaming edge cases, bad input
# ---------------------------------------------------------------------------------------------------

def _event(name: str, ts: float, dur: float, cat: str = "cpu_op", tid: int = 1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def _small_trace(n_steps: int = 3) -> dict:
    ev = []
    corr = 100
    for k in range(n_steps):
        t0 = 1000.0 + k * 1000
        ev.append(_event(f"ProfilerStep#{k + 7}", t0, 900.0, cat="user_annotation"))
        ev.append(_event("aten::mm", t0 + 10, 100.0, **{"External id": k, "Input Dims": [[8, 16], [16, 4]],
                                                         "Input type": ["float", "float"]}))
        ev.append(_event("cudaLaunchKernel", t0 + 20, 5.0, cat="cuda_runtime", correlation=corr + k))
        ev.append({"ph": "X", "cat": "kernel", "name": "gemm_kernel", "pid": 0, "tid": 7, "ts": t0 + 50,
                   "dur": 200.0, "args": {"stream": 7, "device": 0, "correlation": corr + k, "grid": [4, 2, 1]}})
        ev.append({"ph": "s", "id": corr + k, "pid": 1, "tid": 1, "ts": t0 + 20, "cat": "ac2g", "name": "ac2g"})
    return {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "numSms": 132}],
            "distributedInfo": {"backend": "nccl", "rank": 0, "world_size": 1}, "traceEvents": ev,
            "traceName": "x", "displayTimeUnit": "ms", "baseTimeNanoseconds": 1700000000000000000}


def _read(path: Path) -> RankTables:
    return kineto.read_rank(RankSource(path=path, format="kineto", rank=0))


def _frame(t: RankTables, table: str):
    return t.frames()[table]


@pytest.fixture
def tiny_pieces(monkeypatch):
    """Pieces of ~2 KiB so small files exercise the streaming cuts, the buffer refill and the tail."""
    monkeypatch.setattr(kineto_source, "_PIECE", 2048)
    monkeypatch.setattr(kineto_source, "_BLOCK", 512)


def _same_tables(a: RankTables, b: RankTables) -> None:
    fa, fb = a.frames(), b.frames()
    assert fa.keys() == fb.keys()
    for k in fa:
        assert fa[k].equals(fb[k]), k
    assert a.warnings == b.warnings and a.capabilities == b.capabilities


def test_streaming_equals_whole_file_on_a_real_trace(tmp_path, monkeypatch):
    path = next(need(KINETO / "nccl_parser_config").glob("*.json.gz"))
    whole = _read(path)
    monkeypatch.setattr(kineto_source, "_PIECE", 16 << 10)
    monkeypatch.setattr(kineto_source, "_BLOCK", 4 << 10)
    _same_tables(whole, _read(path))


@pytest.mark.parametrize("layout", ["pretty", "compact", "events_first", "list", "key_as_value", "late_key"])
def test_layouts_and_cut_candidates_inside_strings(layout, tmp_path, tiny_pieces, monkeypatch):
    doc = _small_trace(40)
    if layout == "key_as_value":  # the first '"traceEvents"' in the text is a value: whole-file path
        doc = {"comment": "traceEvents", **doc}
    if layout == "late_key":  # the key comes after more than _HEAD_LIMIT bytes: whole-file path
        monkeypatch.setattr(kineto_source, "_HEAD_LIMIT", 80 << 10)
        doc = {"INFO": ["log line " * 20] * 600, **doc}
    # names with '}' + ',' inside strings and nested objects in args: false cut candidates
    doc["traceEvents"].insert(3, _event('odd}, {"name": "x"}, name', 1500.0, 1.0, nested={"a": {"b": [1, {}]}}))
    doc["traceEvents"].append(_event("tail}, {", 50000.0, 1.0, blob="}," * 300))
    path = tmp_path / "t.json"
    if layout in ("pretty", "key_as_value", "late_key"):
        text = json.dumps(doc, indent=2)
    elif layout == "compact":
        text = json.dumps(doc, separators=(",", ":"))
    elif layout == "events_first":
        evs = doc.pop("traceEvents")
        text = json.dumps({"traceEvents": evs, **doc}, indent=1)  # metadata (with nested objects) after
    else:
        text = json.dumps(doc["traceEvents"])
    path.write_text(text)
    t = _read(path)
    host = _frame(t, "host_ops")
    assert len(host) == 40 * 3 + 2
    assert 'odd}, {"name": "x"}, name' in set(host["name"]) and "tail}, {" in set(host["name"])
    assert _frame(t, "device_ops")["block_dim"].tolist() == [8] * 40
    if layout != "list":
        meta = dict(zip(_frame(t, "metadata")["key"], _frame(t, "metadata")["value_json"], strict=True))
        assert json.loads(meta["deviceProperties"])[0]["numSms"] == 132
        assert json.loads(meta["baseTimeNanoseconds"]) == 1700000000000000000
    steps = _frame(t, "steps")
    assert steps["step"].tolist() == list(range(7, 47)) and steps["kept"].tolist() == [True] * 39 + [False]


def test_synthetic_trace_columns(tmp_path):
    path = tmp_path / "t.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(_small_trace(3), f)
    t = _read(path)
    host = _frame(t, "host_ops").sort_values("start_ns")
    mm = host[host["name"] == "aten::mm"].iloc[0]
    assert (mm["input_dims"], mm["input_types"], mm["depth"], mm["step"]) == ("8,16;16,4", "float;float", 1, 7)
    dev = _frame(t, "device_ops").sort_values("start_ns")
    assert dev["step"].tolist() == [7, 8, 9] and dev["stream_id"].tolist() == [7, 7, 7]
    assert dev["start_ns"].tolist() == [1_050_000, 2_050_000, 3_050_000]
    steps = _frame(t, "steps")
    # windows: first kept step from the first kept op; then from each step's first op; last kept ends at the
    # last kept op's end; the dropped step covers the rest
    assert steps["device_start_ns"].tolist() == [1_050_000, 2_050_000, 2_250_000]
    assert steps["device_end_ns"].tolist() == [2_050_000, 2_250_000, 3_250_000]
    rank = _frame(t, "ranks").iloc[0]
    assert (rank["vendor"], rank["device_name"], rank["ai_core_num"], rank["world_size"]) == ("cuda", "NVIDIA H100",
                                                                                              132, 1)
    assert rank["time_origin_ns"] == 1_000_000 + 1700000000000000000


def test_nesting_depth():
    tid = np.array([1, 1, 1, 1, 2, 1, 1])
    start = np.array([0, 10, 20, 100, 5, 100, 40])
    end = np.array([200, 50, 30, 150, 6, 100, 45])
    # 0:[0,200) > 1:[10,50) > 2:[20,30); 6:[40,45) inside 1; 3:[100,150) inside 0; 5: zero-length at 3's start
    assert kineto_steps.nesting_depth(tid, start, end).tolist() == [0, 1, 2, 1, 0, 2, 2]


def test_memory_records_and_legacy_names(tmp_path):
    doc = _small_trace(1)
    doc["traceEvents"] += [
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1500.5, "s": "t",
         "args": {"Total Allocated": 4096, "Total Reserved": 8192, "Device Type": 1, "Device Id": 0, "Bytes": 4096}},
        {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1600, "s": "t",
         "args": {"Total Allocated": 0, "Total Reserved": 0, "Device Type": 0, "Device Id": -1, "Bytes": -4096}},
        # legacy 2022 names: Kernel / Runtime / Memcpy, stream only in the tid
        {"ph": "X", "cat": "Runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 1, "ts": 1700, "dur": 3,
         "args": {"correlation": 555}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": "stream 9",
         "ts": 1710, "dur": 4, "args": {"correlation": 555, "bytes": 1024}},
    ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    t = _read(path)
    mem = _frame(t, "memory_records")
    assert mem["ts_ns"].tolist() == [1_500_500, 1_600_000] and mem["component"].tolist() == ["cuda:0", "cpu"]
    assert mem["allocated_bytes"].tolist() == [4096, 0] and mem["reserved_bytes"].tolist() == [8192, 0]
    dev = _frame(t, "device_ops")
    cp = dev[dev["task_type"] == "gpu_memcpy"].iloc[0]
    assert (cp["stream_id"], cp["size_bytes"], cp["category"], cp["step"]) == (9, 1024, "memory", 7)
    assert "memory" in t.capabilities


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _raises(path: Path, match: str) -> ProfileError:
    with pytest.raises(ProfileError, match=match) as ei:
        _read(path)
    assert ei.value.path == str(path)
    return ei.value


def _damaged(path: Path, match: str) -> str:
    """The file loads, keeping the events read before the damage, with one warning naming the damage."""
    t = _read(path)
    (w,) = [w for w in t.warnings if "is damaged" in w]
    assert re.search(match, w), w
    assert int(re.search(r"the (\d+) host and device events", w).group(1)) > 0
    return w


def test_bad_input_messages(tmp_path, tiny_pieces):
    good = json.dumps(_small_trace(30), indent=2).encode()
    _raises(_write(tmp_path, "empty.json", b""), "^.*: empty file$")
    _raises(_write(tmp_path, "blank.json", b"  \n\t "), "empty file")
    _raises(_write(tmp_path, "empty.json.gz", gzip.compress(b"")), "empty file")
    # damage after some pieces were read: those events are kept, the warning says what was wrong
    w = _damaged(_write(tmp_path, "trunc.json", good[: len(good) // 2]), "invalid JSON: truncated")
    assert "byte" in w
    _damaged(_write(tmp_path, "trunc_obj.json", good.rstrip()[:-1]), "invalid JSON: truncated")
    # a syntax error deep inside the event array: reported with its absolute byte offset
    pos = good.index(b'"dur"', len(good) // 2)
    bad = good[:pos] + b"?" + good[pos + 1:]
    w = _damaged(_write(tmp_path, "bad.json", bad), r"invalid JSON: .* at byte \d+")
    at = int(re.search(r"at byte (\d+)", w).group(1))
    assert abs(at - pos) <= 2, (at, pos)
    # damage before any event was read: nothing usable, the error stands
    _raises(_write(tmp_path, "trunc_head.json", good[:40]), "invalid JSON")
    _raises(_write(tmp_path, "notjson.json", b"hello"), "invalid JSON")
    _raises(_write(tmp_path, "none.json", b'{"schemaVersion": 1, "deviceProperties": []}'), "no traceEvents")
    _raises(_write(tmp_path, "scalar.json", b'{"traceEvents": 5}'), "traceEvents")
    comp = gzip.compress(good)
    _damaged(_write(tmp_path, "cut.json.gz", comp[: len(comp) // 2]), "corrupt gzip")
    _raises(_write(tmp_path, "cut_head.json.gz", comp[:30]), "^.*: corrupt gzip")
    mangled = bytearray(comp)
    for i in range(len(mangled) // 3, len(mangled) // 3 + 64):
        mangled[i] ^= 0x55
    _damaged(_write(tmp_path, "corrupt.json.gz", bytes(mangled)), "corrupt gzip")


def test_bad_input_through_open_profile(tmp_path):
    good = json.dumps(_small_trace(3)).encode()
    d = tmp_path / "prof"
    d.mkdir()
    (d / "rank0.json").write_bytes(good[:-40])  # cut inside the last event: the others are kept
    prof = build.open_profile(d, IngestOptions(cache_dir=tmp_path / "cache"))
    assert any("is damaged (invalid JSON: truncated" in w for w in prof.warnings)
    assert prof.rows("SELECT count(*) FROM device_ops")[0][0] == 3
    (d / "rank0.json").write_bytes(good[:good.index(b"traceEvents") + 20])  # cut before any whole event
    with pytest.raises(ProfileError, match="invalid JSON: truncated"):
        build.open_profile(d, IngestOptions(cache_dir=tmp_path / "cache2"))


def test_unexpected_value_types_fall_back_to_loose_decoding(tmp_path):
    doc = _small_trace(2)
    doc["traceEvents"][1]["args"]["Input Dims"] = "not a list"
    doc["traceEvents"][2]["args"]["correlation"] = "100"       # a string id
    doc["traceEvents"][0]["ts"] = "1000.5"                       # a string timestamp
    doc["traceEvents"][6]["args"]["External id"] = 2**70         # beyond int64 (HTA PR #324): unknown
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    t = _read(path)
    host = _frame(t, "host_ops").sort_values("start_ns")
    assert host["start_ns"].iloc[0] == 1_000_500
    assert host[host["name"] == "cudaLaunchKernel"]["correlation_id"].tolist() == [100, 101]
    mm = host[host["name"] == "aten::mm"]
    assert mm["external_id"].iloc[0] == 0 and pd.isna(mm["external_id"].iloc[1])
    assert pd.isna(mm["input_dims"].iloc[0]) and mm["input_dims"].iloc[1] == "8,16;16,4"


def test_flow_and_other_phases_are_skipped_unknown_phases_fall_back(tmp_path):
    """The typed decode reads only X and i events (a union keyed by "ph"); flows, metadata and counters
    are skipped unread, and a phase the union does not know (or no "ph") sends the piece to the loose
    decode: the stored rows are the same either way."""
    doc = _small_trace(2)
    evs = doc["traceEvents"]
    extra = [{"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": 1.0, "cat": "ac2g", "name": "ac2g"},
             {"ph": "f", "id": 1, "pid": 1, "tid": 1, "ts": 2.0, "cat": "ac2g", "name": "ac2g", "bp": "e"},
             {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
             {"ph": "C", "name": "counter", "pid": 1, "ts": 3.0, "args": {"v": 1}}]
    known = tmp_path / "known.json"
    known.write_text(json.dumps({**doc, "traceEvents": evs + extra}))
    odd = tmp_path / "odd.json"
    odd.write_text(json.dumps({**doc, "traceEvents": evs + extra + [{"ph": "Q", "name": "x"}, {"name": "no ph"}]}))
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(doc))
    frames = [_frame(_read(p), "host_ops").sort_values("start_ns").reset_index(drop=True) for p in (plain, known, odd)]
    assert len(frames[0]) > 0
    pd.testing.assert_frame_equal(frames[0], frames[1])
    pd.testing.assert_frame_equal(frames[0], frames[2])


@pytest.mark.parametrize("numerals", [
    [b"1610366662254410.123", b"5.000", b"0.001"],          # 3 decimals: the digits are the ns
    [b"1610366662254410", b"7", b"0"],                       # whole µs (older traces)
    [b"9000000000000000", b"8999999999999999"],              # at and below TIME_LIMIT_US
    [b"9999999999999999.999", b"1.000"],                     # 19 digits of ns: beyond int64, not kept
    [b"-5.000", b"1.5", b"1.2345", b"1e3"],                  # the per-value path: sign, other decimals
    [b'"12.5"', b"null", b""],                               # a string numeral, null, absent
])
def test_ts_column_equals_the_decimal_conversion(numerals: list[bytes]) -> None:
    """A piece's `ts` numerals parsed as one text give exactly the per-value Decimal conversion."""
    import msgspec

    from stepdoctor.analysis.ingest.kineto.events import NO_NS, raw_ts_ns, ts_ns_column

    raws = [msgspec.Raw(n) for n in numerals]
    want = [NO_NS if (v := raw_ts_ns(r)) is None else v for r in raws]
    assert ts_ns_column(raws).tolist() == want
    assert ts_ns_column([msgspec.Raw(b"1610366662254410.123"), msgspec.Raw(b"9000000000000000")]).tolist() == \
        [1610366662254410123, NO_NS]


def _host_only(n_steps: int, cut_last_after: str | None = None) -> dict:
    """A CPU-training rank: each step loads, computes and ends in the optimizer; `cut_last_after`: the profiler
    stopped in the last step right after that op (the rest of the step is not in the trace)."""
    ev = []
    for k in range(n_steps):
        t0 = 1000.0 + k * 1000
        ops = [("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 10, 50), ("aten::mm", 100, 300),
               ("c10d::allreduce_", 450, 30), ("Optimizer.step#AdamW.step", 600, 200),
               ("Optimizer.zero_grad#AdamW.zero_grad", 820, 30)]
        end = t0 + 900
        if k == n_steps - 1 and cut_last_after:
            ops = ops[:[o[0] for o in ops].index(cut_last_after) + 1]
            end = t0 + ops[-1][1] + ops[-1][2] + 5
        ev.append(_event(f"ProfilerStep#{k}", t0, end - t0, cat="user_annotation"))
        ev += [_event(n, t0 + a, d, cat="user_annotation" if "#" in n else "cpu_op") for n, a, d in ops]
    return {"schemaVersion": 1, "deviceProperties": [], "traceEvents": ev, "displayTimeUnit": "ms",
            "distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1},
            "baseTimeNanoseconds": 1700000000000000000}


@pytest.mark.parametrize(("cut", "kept"), [(None, True), ("aten::mm", False), ("c10d::allreduce_", False)])
def test_a_host_only_ranks_last_step_is_kept_when_whole(cut, kept, tmp_path):
    """CPU training has every op of a step inside its ProfilerStep: the last one is whole when it ends in the
    op the step before it ended in; a profiler stopped mid-step leaves it ending elsewhere (not kept, as HTA)."""
    f = tmp_path / "rank0.json"
    f.write_text(json.dumps(_host_only(4, cut)))
    steps = _frame(_read(f), "steps")
    assert steps["step"].tolist() == [0, 1, 2, 3] and steps["kept"].tolist() == [True, True, True, kept]


def test_a_device_ranks_last_step_is_never_kept(tmp_path):
    """With device ops the profiler stops while the last step's kernels may still run: HTA's rule stays."""
    f = tmp_path / "rank0.json"
    f.write_text(json.dumps(_small_trace(4)))
    assert _frame(_read(f), "steps")["kept"].tolist() == [True, True, True, False]


def test_every_real_cpu_recording_keeps_its_last_profiled_step(tmp_path):
    """tests/data/real_cpu: every ProfilerStep of every rank is whole (its duration is the script's step_ms of
    that step: tests/data/real_cpu/README.md), so all are kept."""
    base = Path(__file__).parent / "data" / "real_cpu"
    for run in ("dp2_clean", "pp2_heavy", "ddp2_ioloader", "dp8_slowrank_1step"):
        meta = json.loads((base / run / "meta" / "step_times_rank0.json").read_text())
        f = next((base / run / "traces").glob("rank0.*.json.gz"))
        steps = _frame(_read(f), "steps")
        assert steps["step"].tolist() == meta["profiled_steps"] and steps["kept"].all(), run
