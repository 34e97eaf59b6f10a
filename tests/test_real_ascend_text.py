"""The torch_npu text export reader on the real profiles (../shared/data/real/ascend, PROVENANCE.md in each
folder): the CLI runs on Level0 and Level1, the breakdown equals the profiler's own step_trace_time.csv
(read here independently, µs -> ms), opaque ids are interned, and each format quirk found in the real files
is read as the profiler wrote it."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import SHARED, need
from stepdoctor.analysis.ingest.ascend_columns import OPERATOR_DETAILS
from stepdoctor.analysis.ingest.ascend_text import RankFiles, TraceParser, describe, launch_flows, read_rank
from stepdoctor.analysis.ingest.base import RankSource
from stepdoctor.tools import api

REAL = SHARED / "real"
ASC = REAL / "ascend"
OUT = "ASCEND_PROFILER_OUTPUT"
LEVELS = ("msinsight-pt-text-l0", "msinsight-pt-text-l1")
# step_trace_time.csv column -> breakdown field
FIELDS = {"Computing": "compute_ms", "Communication(Not Overlapped)": "comm_not_overlapped_ms",
          "Overlapped": "overlapped_ms", "Communication": "communication_ms", "Free": "free_ms",
          "Stage": "stage_ms", "Bubble": "bubble_ms", "Preparing": "preparing_ms"}
BIG_FLOW_ID = "55426082093320372223"   # an HCCL HostToDevice flow id of the Level1 trace, beyond int64


def _step_table(rank_dir: Path) -> dict[int, dict[str, float]]:
    with open(rank_dir / OUT / "step_trace_time.csv", newline="") as f:
        return {int(r["Step"]): {FIELDS[k]: float(v) / 1000 for k, v in r.items() if k in FIELDS}
                for r in csv.DictReader(f)}


def _read(path: Path, rank: int = 0) -> tuple[dict[str, Any], list[str], set[str]]:
    t = read_rank(RankSource(path=path, format="ascend_pt", rank=rank))
    return t.frames(), t.warnings, t.capabilities


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("command", ["issues", "breakdown"])
def test_cli_exits_0(level: str, command: str, tmp_path: Path):
    env_cache = {"STEPDOCTOR_CACHE_DIR": str(tmp_path / "cache")}
    r = subprocess.run([sys.executable, "-m", "stepdoctor", command, str(need(ASC / level)),
                        "--format", "json"], capture_output=True, text=True, env={**os.environ, **env_cache})
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["profile"]["ranks"] == [0, 1]
    assert not [w for w in out["warnings"] if "cannot parse" in w or "step table" in w], out["warnings"]


@pytest.mark.parametrize("level", LEVELS)
def test_breakdown_equals_step_trace_time(level: str):
    """Every field of every rank and step within 0.5% of the profiler's table; step_ms is its Stage (+
    Bubble, 0 here), the host span stays in host_step_ms."""
    path = need(ASC / level)
    b = api.breakdown(str(path))
    assert [(r.rank, r.step) for r in b.rows] == [(0, 50), (1, 50)]
    assert not [w for w in b.warnings if "step table" in w], b.warnings
    for row in b.rows:
        want = _step_table(path / f"rank{row.rank}_ascend_pt")[row.step]
        for field, v in want.items():
            assert getattr(row, field) == pytest.approx(v, rel=0.005, abs=1e-3), (level, row.rank, field)
        assert row.step_source == "step_table"
        assert row.step_ms == pytest.approx(want["stage_ms"] + want["bubble_ms"], abs=1e-6)
        assert row.host_step_ms is not None and row.host_step_ms > row.step_ms


def test_the_numbers_of_rank0_step50():
    """The profiler's own values (step_trace_time.csv, µs) on rank 0, step 50, to 1 µs."""
    want = {"msinsight-pt-text-l0": (8.827, 81.516, 25.908, 116.251, 19.358),
            "msinsight-pt-text-l1": (8.874, 101.963, 25.744, 136.581, 17.902)}
    for level, (comp, cno, free, stage, prep) in want.items():
        r0 = next(r for r in api.breakdown(str(need(ASC / level))).rows if r.rank == 0)
        assert r0.compute_ms == pytest.approx(comp, abs=1e-3)
        assert r0.comm_not_overlapped_ms == pytest.approx(cno, abs=1e-3)
        assert r0.free_ms == pytest.approx(free, abs=1e-3)
        assert r0.stage_ms == pytest.approx(stage, abs=1e-3) and r0.step_ms == pytest.approx(stage, abs=1e-3)
        assert r0.preparing_ms == pytest.approx(prep, abs=1e-3)
    l0 = next(r for r in api.breakdown(str(need(ASC / LEVELS[0]))).rows if r.rank == 0)
    assert l0.host_step_ms == pytest.approx(136.898, abs=1e-3)   # the host ProfilerStep#50 span


@pytest.mark.parametrize("level,comm_ops,device_ops", [("msinsight-pt-text-l0", {}, {0: 539, 1: 539}),
                                                       ("msinsight-pt-text-l1", {0: 4, 1: 4}, {0: 542, 1: 540})])
def test_key_counts(level: str, comm_ops: dict[int, int], device_ops: dict[int, int]):
    prof = api.load(str(need(ASC / level)))
    assert dict(prof.rows("SELECT rank, count(*) FROM device_ops GROUP BY 1")) == device_ops
    assert dict(prof.rows("SELECT rank, count(*) FROM device_ops WHERE category = 'compute' GROUP BY 1")) == \
        {0: 187, 1: 187}
    assert dict(prof.rows("SELECT rank, count(*) FROM comm_ops GROUP BY 1")) == comm_ops
    # 210 device tasks per rank carry a launch link, each its own interned id
    assert dict(prof.rows("SELECT rank, count(DISTINCT correlation_id) FROM device_ops GROUP BY 1")) == \
        {0: 210, 1: 210}


def _linked(rank_dir: Path) -> set[tuple[str, int]]:
    frames, _, _ = _read(rank_dir)
    dev = frames["device_ops"]
    host = frames["host_ops"]
    linked = dev[dev["correlation_id"].notna()]
    # the interned ids join the host side
    assert set(linked["correlation_id"]) & set(host["correlation_id"].dropna())
    assert str(linked["correlation_id"].dtype).lower() == "int64"
    return set(zip(linked["name"], linked["start_ns"], strict=True))


def _launch_pairs(rank_dir: Path) -> list[tuple[int, int]]:
    """(interned id, end ts) of each launch flow the reader pairs."""
    files = RankFiles(describe(RankSource(path=rank_dir, format="ascend_pt", rank=0)))
    try:
        pairs = launch_flows(files, TraceParser(rank_dir / OUT / "trace_view.json").parse())
    finally:
        files.close()
    return list(zip(pairs.corr, pairs.f_ts, strict=True))


def test_flow_ids_beyond_int64_are_interned(tmp_path: Path):
    """The Level1 HCCL flow id beyond int64 pairs its flow whether written as a string or as a number (an id
    beyond int64 interned after the others); flows whose id is a sentinel (UINT32_MAX) pair nothing, and the device task
    they ended on loses its launch link."""
    src = need(ASC / LEVELS[1] / "rank0_ascend_pt")
    rank = tmp_path / "rank0_ascend_pt"
    shutil.copytree(src, rank)
    tv = rank / OUT / "trace_view.json"
    events = json.loads(tv.read_text())
    as_string, linked = _launch_pairs(rank), _linked(rank)
    assert len(as_string) == 420                       # async_npu + HostToDevice flows
    ids = [c for c, _ in as_string]
    assert all(0 <= c < 1 << 63 for c in ids)
    # the task the big flow ends on has its two flows (async_npu, HostToDevice) paired
    assert len({c for c, ts in as_string if ts == 1736408883717530550}) == 2
    big = [e for e in events if e.get("ph") in ("s", "f") and e.get("id") == BIG_FLOW_ID]
    assert len(big) == 2
    end = next(e for e in big if e["ph"] == "f")
    assert (1736408883717530550 in {ts for _, ts in as_string}) and end["ts"] == "1736408883717530.550"
    for e in big:
        e["id"] = int(BIG_FLOW_ID)
    tv.write_text(json.dumps(events))
    assert '"id": 55426082093320372223' in tv.read_text()
    assert _launch_pairs(rank) == as_string and _linked(rank) == linked
    # every flow ending on that task (its HostToDevice and async_npu flows) gets the sentinel id
    on_task = {(e.get("cat"), e["id"]) for e in events
               if e.get("ph") == "f" and (e.get("pid"), e.get("ts")) == (end["pid"], end["ts"])}
    assert len(on_task) == 2
    for e in events:
        if e.get("ph") in ("s", "f") and (e.get("cat"), e.get("id")) in on_task:
            e["id"] = 4294967295
    tv.write_text(json.dumps(events))
    assert len(_launch_pairs(rank)) == 418
    assert len(linked - _linked(rank)) == 1


def test_operator_details_multiline_call_stacks():
    """operator_details.csv quotes call stacks with line breaks inside: read whole, no 'cannot parse'."""
    rank = need(ASC / LEVELS[0] / "rank0_ascend_pt")
    files = RankFiles(describe(RankSource(path=rank, format="ascend_pt", rank=0)))
    try:
        path = rank / OUT / "operator_details.csv"
        res = files.resolve_csv(path, OPERATOR_DETAILS, required=False)
        assert res is not None and "call_stack" in res.found
        df = files.query_csv(path, [f'"{res.found["name"]}" AS name', f'"{res.found["call_stack"]}" AS stack'])
    finally:
        files.close()
    assert df is not None and len(df) == 859
    stacks = dict(zip(df["name"].tolist(), df["stack"].tolist(), strict=True))
    first = stacks["enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"]
    assert first.count("\n") == 10 and first.endswith("<string>(1): <module>")
    assert not [w for w in files.t.warnings if "operator_details" in w]


def test_level0_kernel_details_eight_columns_na_types_trailing_tabs():
    """Level0 kernel_details.csv: 8 columns, Type and Accelerator Core 'N/A', a tab after each start
    time. Start times are exact ns from the numeral text; N/A types are unknown, not text."""
    rank = need(ASC / LEVELS[0] / "rank0_ascend_pt")
    header = (rank / OUT / "kernel_details.csv").read_text().splitlines()[0].split(",")
    assert len(header) == 8
    frames, warnings, _ = _read(rank)
    dev = frames["device_ops"]
    kd = dev[dev["name"] == "trans_TransData_0"]
    starts = sorted(int(x) for x in kd["start_ns"])
    assert 1736405443881410320 in starts    # "1736405443881410.320\t" in the file
    assert (frames["device_ops"]["category"] == "compute").sum() == 187
    assert any("no Input Shapes" in w for w in warnings)


def test_crlf_step_table_exact_ns():
    """step_trace_time.csv with CRLF line ends and float-noise µs ('25908.102000000003') -> exact ns."""
    rank = need(ASC / LEVELS[0] / "rank0_ascend_pt")
    assert b"\r\n" in (rank / OUT / "step_trace_time.csv").read_bytes()
    frames, _, _ = _read(rank)
    v = frames["vendor_step_trace"].iloc[0]
    assert (int(v["step"]), int(v["free_ns"]), int(v["stage_ns"]), int(v["preparing_ns"])) == \
        (50, 25908102, 116251250, 19358000)


def test_communication_json_empty_p2p_and_step_keys():
    """Level1 communication.json: 'step50' keys and "p2p": {} (not []): four allReduce ops of step 50 per rank."""
    rank = need(ASC / LEVELS[1] / "rank1_ascend_pt")
    data = json.loads((rank / OUT / "communication.json").read_text())
    assert list(data) == ["step50"] and data["step50"]["p2p"] == {}
    frames, warnings, caps = _read(rank, 1)
    ops = frames["comm_ops"]
    assert len(ops) == 4 and set(ops["step"]) == {50} and "comm_json" in caps
    assert not [w for w in warnings if "communication.json" in w]


def test_rank_without_trace_keeps_step_table_and_comm_ops(tmp_path: Path):
    """msinsight-server-fixtures test_rank_0/1: no trace_view.json; 'step2' keys, p2p with a Total Op Info
    entry, no Preparing column. Breakdown rows come from the step table, comm ops from communication.json."""
    for r in (0, 1):
        shutil.copytree(need(ASC / "msinsight-server-fixtures" / f"test_rank_{r}"), tmp_path / f"rank{r}_ascend_pt")
    frames, warnings, _ = _read(tmp_path / "rank0_ascend_pt")
    assert any("trace_view.json: missing" in w for w in warnings)
    assert len(frames["comm_ops"]) == 28 and set(frames["comm_ops"]["step"]) == {2}
    assert not (frames["comm_ops"]["name"] == "Total Op Info").any()
    b = api.breakdown(str(tmp_path))
    rows = {r.rank: r for r in b.rows}
    assert sorted(rows) == [0, 1] and all(r.step == 2 and r.step_source == "step_table" for r in b.rows)
    assert rows[0].compute_ms == pytest.approx(75.174575, abs=1e-6)
    assert rows[0].comm_not_overlapped_ms == pytest.approx(146.614020, abs=1e-6)
    assert rows[1].free_ms == pytest.approx(67.8608, abs=1e-6) and rows[1].step_ms == pytest.approx(294.5865)
    assert rows[0].preparing_ms is None and rows[0].host_step_ms is None   # not in this table
    rep = api.issues(str(tmp_path))
    assert rep.profile.ranks == [0, 1]


def test_damaged_trace_keeps_the_rank(tmp_path: Path):
    """A 0-byte rank-0 trace_view.json on Level0: rank 0 keeps its kernel_details ops and its step table
    row; the run still answers for both ranks."""
    for r in (0, 1):
        shutil.copytree(need(ASC / LEVELS[0] / f"rank{r}_ascend_pt"), tmp_path / f"rank{r}_ascend_pt")
    (tmp_path / "rank0_ascend_pt" / OUT / "trace_view.json").write_bytes(b"")
    b = api.breakdown(str(tmp_path))
    assert any("trace_view.json" in w and "empty file" in w for w in b.warnings)
    r0 = next(r for r in b.rows if r.rank == 0)
    assert r0.step_source == "step_table" and r0.free_ms == pytest.approx(25.908102)
    prof = api.load(str(tmp_path))
    assert dict(prof.rows("SELECT rank, count(*) FROM device_ops GROUP BY 1"))[0] == 191


def test_task_type_other_kernels_are_compute():
    """mstt-fixtures/timeline_advice (a bare trace_view.json of an older CANN): every hardware task is typed
    'Other'; the kernels (aclnn*, trans_*, Conv2D*) are compute, the two MEMCPY_ASYNC tasks memory."""
    path = need(ASC / "mstt-fixtures" / "timeline_advice")
    prof = api.load(str(path))
    assert dict(prof.rows("SELECT category, count(*) FROM device_ops GROUP BY 1")) == {"compute": 274, "memory": 2}
    b = api.breakdown(str(path))
    assert b.rows and all(r.compute_ms and r.compute_ms > 0 for r in b.rows)


@pytest.mark.parametrize("fixture,rows,first_shape,first_start_ns", [
    # 46 columns, OP State, the start time quoted with a tab inside ("1736413971558972.912\t")
    ("compute_advice_data", 29, "81920,4096;8192,512", 1736413971558972912),
    # 33 columns, no OP State, ArithmeticUtilization PMU columns
    ("advisor_backend_compute_advice", 591, "544404480", None),
])
def test_mstt_kernel_details_column_sets(tmp_path: Path, fixture: str, rows: int, first_shape: str,
                                         first_start_ns: int | None):
    """mstt's two kernel_details.csv column sets, with triple-quoted shapes ('\"\"\"81920,4096;8192,512\"\"\"'),
    read as the only file of a rank: every row kept, shapes without their quotes, exact start ns."""
    rank = tmp_path / "rank0_ascend_pt" / OUT
    rank.mkdir(parents=True)
    shutil.copy(need(ASC / "mstt-fixtures" / fixture / "kernel_details.csv"), rank)
    frames, warnings, _ = _read(rank.parent)
    dev = frames["device_ops"]
    assert len(dev) == rows and (dev["category"] == "compute").sum() >= rows - 19
    assert dev["input_shapes"].iloc[0] == first_shape
    if first_start_ns is not None:
        assert int(dev["start_ns"].iloc[0]) == first_start_ns
    assert not [w for w in warnings if "cannot parse" in w]
