"""Format variants of the torch_npu text export that no real profile in ../shared/data/real shows, made from
copies of the real Level0 and Level1 exports (msinsight-pt-text-l0/-l1, 2 ranks, step 50; PROVENANCE.md
there) and judged against the unmodified copy:

- `Device_id` as the first column (newer torch_npu) or the second (CANN 8.3) of every CSV that has one
  (kernel_details, step_trace_time, op_statistic, api_statistic); the real files have none (early 2025);
- a device id that is not the rank (the rank stays the one profiler_info_N.json names);
- `Device_id` `host`: CANN writes it in api_statistic.csv, whose rows are host API statistics;
- `rank_id` as a string in an unnumbered profiler_info.json, together with a device id that differs;
- communication.json with `"p2p": []` and without its `Total Op Info` entries.

Trailing tabs, triple-quoted shapes, `step50` keys, `"p2p": {}` and Task Type `Other` are read from the
real files in test_real_ascend_text.py; they are not repeated here.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from conftest import SHARED, need
from stepdoctor.tools import api

ASC = SHARED / "real" / "ascend"
OUT = "ASCEND_PROFILER_OUTPUT"
LEVELS = ("msinsight-pt-text-l0", "msinsight-pt-text-l1")
# the files newer torch_npu writes with a Device_id column (docs/formats.md §1.2)
WITH_DEVICE_ID = ("kernel_details.csv", "step_trace_time.csv", "op_statistic.csv", "api_statistic.csv")
Rows = list[list[str]]


def _copy(level: str, dst: Path) -> Path:
    """Both ranks of one real export under dst/<level> (the shared copy is never written)."""
    src = need(ASC / level)
    job = dst / level
    for r in (0, 1):
        shutil.copytree(src / f"rank{r}_ascend_pt", job / f"rank{r}_ascend_pt")
    return job


def _rewrite_csv(path: Path, fn: Callable[[list[str], Rows], tuple[list[str], Rows]]) -> None:
    """Rewrite a CSV through `fn(header, rows)`, keeping its line ends, quoting and cell text (tabs inside
    cells, multi-line quoted cells) as the profiler wrote them."""
    raw = path.read_bytes()
    end = "\r\n" if b"\r\n" in raw else "\n"
    header, *rows = list(csv.reader(io.StringIO(raw.decode(), newline="")))
    header, rows = fn(header, rows)
    buf = io.StringIO(newline="")
    csv.writer(buf, lineterminator=end).writerows([header, *rows])
    path.write_bytes(buf.getvalue().encode())


def _with_device_id(job: Path, position: int, value: Callable[[int, str], str]) -> list[Path]:
    """Insert a Device_id column at `position` of every WITH_DEVICE_ID file of every rank, the cell of a row
    being value(rank, file name). Returns the files edited."""
    edited = []
    for r in (0, 1):
        for name in WITH_DEVICE_ID:
            path = job / f"rank{r}_ascend_pt" / OUT / name
            if not path.is_file():
                continue
            cell = value(r, name)
            _rewrite_csv(path, lambda h, rows, c=cell: ([*h[:position], "Device_id", *h[position:]],
                                                       [[*x[:position], c, *x[position:]] for x in rows]))
            edited.append(path)
    return edited


def _facts(job: Path) -> dict[str, Any]:
    """What a variant must leave unchanged: the breakdown rows (every field), device ops per rank and
    category (count, total duration, first start, with a step, with a launch link), comm ops per rank, steps
    per rank, and the warnings."""
    b = api.breakdown(str(job))
    prof = api.load(str(job))
    return {
        "breakdown": [r.model_dump() for r in b.rows],
        "device_ops": prof.rows("SELECT rank, category, count(*), sum(dur_ns), min(start_ns), count(step), "
                                "count(correlation_id) FROM device_ops GROUP BY ALL ORDER BY ALL"),
        "comm_ops": sorted(prof.rows("SELECT rank, count(*) FROM comm_ops GROUP BY 1")),
        "steps": sorted(prof.rows("SELECT rank, step FROM steps")),
        "ranks": sorted(prof.rows("SELECT rank FROM ranks")),
        "warnings": sorted(b.warnings),   # paths in them are relative to the rank folder
    }


def _per_step(facts: dict[str, Any]) -> list[tuple[int, int, float, float, float]]:
    return [(r["rank"], r["step"], r["compute_ms"], r["comm_not_overlapped_ms"], r["free_ms"])
            for r in facts["breakdown"]]


def _findings(rep: Any) -> list[tuple[Any, ...]]:
    return sorted((f.check, f.severity, f.subject, tuple(f.ranks)) for f in rep.findings)


# rank 0, step 50: compute, communication not overlapped, free (ms), the profiler's step_trace_time.csv
STEP_TABLE = {"msinsight-pt-text-l0": (8.827, 81.516, 25.908), "msinsight-pt-text-l1": (8.874, 101.963, 25.744)}


def _assert_real_numbers(level: str, facts: dict[str, Any]) -> None:
    """The unmodified export's own numbers, so that 'equal to the copy' cannot mean 'equally wrong'."""
    rows = _per_step(facts)
    assert [(r, s) for r, s, *_ in rows] == [(0, 50), (1, 50)]
    comp, cno, free = STEP_TABLE[level]
    assert rows[0][2:] == pytest.approx((comp, cno, free), abs=1e-3)
    assert facts["ranks"] == [(0,), (1,)]
    assert [c for _, c in facts["comm_ops"]] == ([] if level.endswith("l0") else [4, 4])
    assert sum(n for _, _, n, *_ in facts["device_ops"]) == (539 * 2 if level.endswith("l0") else 542 + 540)


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    base = tmp_path_factory.mktemp("baseline")
    out = {}
    for level in LEVELS:
        if not (ASC / level).is_dir():
            continue
        job = _copy(level, base)
        # the real files have no Device_id column: this copy is also the "Device_id removed" variant
        for path in job.glob(f"*/{OUT}/*.csv"):
            assert "Device_id" not in path.read_bytes().split(b"\n", 1)[0].decode(), path
        out[level] = _facts(job)
        _assert_real_numbers(level, out[level])
    return out


@pytest.mark.parametrize("level", LEVELS)
@pytest.mark.parametrize("position", [0, 1], ids=["first", "second"])
def test_device_id_column_first_or_second(tmp_path: Path, baseline, level: str, position: int):
    """Device_id (= the rank, as on a one-card-per-rank job) first or second in every file that has one:
    the same breakdown, ops and steps as the export without the column; the device id is read."""
    job = _copy(level, tmp_path)
    edited = _with_device_id(job, position, lambda r, _: str(r))
    assert len(edited) == (4 if level.endswith("l0") else 8)
    got = _facts(job)
    assert got == baseline[level]
    prof = api.load(str(job))
    assert sorted(prof.rows("SELECT rank, device_id FROM ranks")) == [(0, 0), (1, 1)]


@pytest.mark.parametrize("level", LEVELS)
def test_device_id_not_the_rank(tmp_path: Path, baseline, level: str):
    """Both ranks on devices 5 and 6 (Device_id second, and NPU:5 / NPU:6 in the memory files): ranks stay 0
    and 1 (profiler_info_N.json), ranks.device_id is the device, the breakdown is unchanged."""
    job = _copy(level, tmp_path)
    _with_device_id(job, 1, lambda r, _: str(5 + r))
    for r in (0, 1):
        for name in ("memory_record.csv", "npu_module_mem.csv", "operator_memory.csv"):
            path = job / f"rank{r}_ascend_pt" / OUT / name
            text = path.read_bytes().decode()
            assert f"NPU:{r}" in text
            path.write_bytes(text.replace(f"NPU:{r}", f"NPU:{5 + r}").encode())
    got = _facts(job)
    assert got == baseline[level]
    prof = api.load(str(job))
    assert sorted(prof.rows("SELECT rank, device_id FROM ranks")) == [(0, 5), (1, 6)]
    # the diagnosis names the same ranks with the same findings
    rep, plain = api.issues(str(job)), api.issues(str(_copy(level, tmp_path / "plain")))
    assert rep.profile.ranks == plain.profile.ranks == [0, 1]
    assert _findings(rep) == _findings(plain) and len(_findings(plain)) >= 3


def test_rank_id_string_and_device_id_differ(tmp_path: Path, baseline):
    """Level1 rank folders with an unnumbered profiler_info.json whose rank_id is a string ("0", "1") and
    Device_id 7 - rank: the rank_id, not the device; breakdown and counts unchanged."""
    level = LEVELS[1]
    job = _copy(level, tmp_path)
    _with_device_id(job, 0, lambda r, _: "7")
    for r in (0, 1):
        d = job / f"rank{r}_ascend_pt"
        info = json.loads((d / f"profiler_info_{r}.json").read_text())
        assert info["rank_id"] == r
        info["rank_id"] = str(r)
        (d / f"profiler_info_{r}.json").unlink()
        (d / "profiler_info.json").write_text(json.dumps(info, indent=4))
        d.rename(job / f"node_dev7_{r}_ascend_pt")
    got = _facts(job)
    assert got == baseline[level]
    prof = api.load(str(job))
    assert sorted(prof.rows("SELECT rank, device_id FROM ranks")) == [(0, 7), (1, 7)]


def _api_statistic(job: Path) -> list[tuple[int, list[dict[str, Any]]]]:
    prof = api.load(str(job))
    return sorted((r, json.loads(v)) for r, v in prof.rows(
        "SELECT rank, value_json FROM metadata WHERE key = 'api_statistic'"))


def test_device_id_host_in_api_statistic(tmp_path: Path, baseline):
    """CANN writes Device_id `host` in api_statistic.csv (host API statistics), a number in the device files.
    Level1, Device_id first everywhere, `host` on every api_statistic row: every API row is kept as it was,
    the device id comes from the device files only, the breakdown is unchanged and nothing is dropped or warned about."""
    level = LEVELS[1]
    job = _copy(level, tmp_path)
    _with_device_id(job, 0, lambda r, name: "host" if name == "api_statistic.csv" else str(r))
    want = _api_statistic(_copy(level, tmp_path / "plain"))
    assert [(r, len(rows)) for r, rows in want] == [(0, 57), (1, 57)]
    assert want[0][1][0] == {"api": "Launch_Ffts", "time_ns": 474410, "count": 4, "level": "hccl"}
    assert _api_statistic(job) == want
    assert _facts(job) == baseline[level]
    prof = api.load(str(job))
    assert sorted(prof.rows("SELECT rank, device_id FROM ranks")) == [(0, 0), (1, 1)]
    b = api.breakdown(str(job))
    assert not [w for w in b.warnings if "api_statistic" in w or "Device_id" in w], b.warnings


def test_communication_json_p2p_list_and_no_total_op_info(tmp_path: Path, baseline):
    """Level1 communication.json with `"p2p": []` (a list, as some versions write an empty group) and no
    `Total Op Info` entry: the same four allReduce ops of step 50 per rank, the same bandwidth rows (the totals
    are never rows), and the same breakdown."""
    level = LEVELS[1]
    job = _copy(level, tmp_path)
    plain = api.load(str(_copy(level, tmp_path / "plain")))
    bw_sql = "SELECT * FROM comm_bandwidth ORDER BY ALL"
    for r in (0, 1):
        path = job / f"rank{r}_ascend_pt" / OUT / "communication.json"
        data = json.loads(path.read_text())
        assert list(data) == ["step50"] and data["step50"]["p2p"] == {}
        data["step50"]["p2p"] = []
        data["step50"]["collective"].pop("Total Op Info")
        path.write_text(json.dumps(data, indent=4))
    prof = api.load(str(job))
    ops_sql = "SELECT * FROM comm_ops ORDER BY ALL"
    assert prof.rows(ops_sql) == plain.rows(ops_sql) and len(prof.rows(ops_sql)) == 8
    # per op and transport (HCCS, SDMA): 4 ops x 2 per rank, the totals never were rows
    assert prof.rows(bw_sql) == plain.rows(bw_sql) and len(prof.rows(bw_sql)) == 16
    assert _facts(job) == baseline[level]
    assert not [w for w in api.breakdown(str(job)).warnings if "communication.json" in w]
