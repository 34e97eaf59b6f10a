"""The native trace_view.json path (`_tracescan.c` + `ascend_scan.py`) against the msgspec path.

The same tables from both paths: every shared Ascend rank, generated profiles with every planted problem
(torch_npu and MindSpore text layouts), a quirk corpus of hand-made events read with blocks small enough to
cut every token, and random traces (hypothesis); bad input gets the msgspec path's own message.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CLUSTER4, assert_same_error, need, spy_fallback
from stepdoctor.analysis.ingest import ascend_scan, ascend_text
from stepdoctor.analysis.ingest.base import ProfileError, RankSource
from stepdoctor.evals.generate import PROBLEMS, Plant, Scenario, write_ascend_profile

_BUFFERS = {"host_rows", "hw_rows", "comm_rows", "overlap_rows", "flow_rows"}


def _columns(tr: ascend_text.TraceColumns) -> dict[str, object]:
    out = {}
    for f in fields(tr):
        if f.name in _BUFFERS:
            continue
        v = getattr(tr, f.name)
        v = v.tolist() if isinstance(v, np.ndarray) else (list(v) if isinstance(v, tuple) else v)
        if isinstance(v, list):  # (NaN, a float column's none, compares unequal to itself)
            v = [None if isinstance(x, float) and x != x else x for x in v]
        out[f.name] = v
    return out


def _parse(path: Path, native: bool, monkeypatch: pytest.MonkeyPatch) -> ascend_text.TraceColumns:
    monkeypatch.setenv("STEPDOCTOR_PURE_PYTHON", "0" if native else "1")
    return ascend_text.TraceParser(path).parse()


def _same_trace(path: Path, monkeypatch: pytest.MonkeyPatch) -> ascend_text.TraceColumns:
    fell_back = spy_fallback(monkeypatch, ascend_scan)
    a = _parse(path, True, monkeypatch)
    b = _parse(path, False, monkeypatch)
    ca, cb = _columns(a), _columns(b)
    for k in ca:
        assert ca[k] == cb[k], k
    assert not fell_back, "the native path handed the file back"
    return a


def _same_rank(rank_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fmt = "ascend_ms_text" if rank_dir.name.endswith("_ascend_ms") else "ascend_pt_text"
    tables = []
    for native in (True, False):
        monkeypatch.setenv("STEPDOCTOR_PURE_PYTHON", "0" if native else "1")
        tables.append(ascend_text.read_rank(RankSource(path=rank_dir, format=fmt, rank=0)))
    a, b = tables
    fa, fb = a.frames(), b.frames()
    assert fa.keys() == fb.keys()
    for k in fa:
        assert fa[k].equals(fb[k]), (rank_dir.name, k)
    assert a.warnings == b.warnings and a.capabilities == b.capabilities


@pytest.mark.parametrize("rank", sorted(p.name for p in CLUSTER4.glob("*_ascend_pt")) if CLUSTER4.exists() else [])
def test_cluster4_ranks_identical_on_both_paths(rank, monkeypatch):
    _same_trace(need(CLUSTER4 / rank / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"), monkeypatch)
    _same_rank(CLUSTER4 / rank, monkeypatch)


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> Path:
    """Two ranks with every Ascend problem planted (layouts: extra files, Block Num header)."""
    plants = [Plant(check) for check, p in PROBLEMS.items() if "ascend" in p.vendors]
    out = tmp_path_factory.mktemp("planted")
    # one plant per scenario where plants exclude each other
    for i, plant in enumerate(plants):
        sc = Scenario("ascend", ranks=2, steps=2, seed=11 + i, plants=[plant])
        write_ascend_profile(sc, out / plant.check, extra_files=True, block_num_header=bool(i % 2))
    return out


def test_generated_profiles_identical_on_both_paths(planted, monkeypatch):
    ranks = sorted(planted.glob("*/*_ascend_pt"))
    assert len(ranks) >= 20
    for rank in ranks:
        _same_trace(rank / "ASCEND_PROFILER_OUTPUT" / "trace_view.json", monkeypatch)
        _same_rank(rank, monkeypatch)


@pytest.mark.parametrize("quirk", [None, "quoted", "nulls", "not_numeral", "bad_utf8", "short_row"])
def test_large_kernel_details_identical_on_both_paths(quirk, tmp_path, monkeypatch):
    """A kernel_details.csv past PLAIN_CSV_BYTES: the C scanner's read (`_native_csv`) against DuckDB's,
    which the msgspec path uses at that size; with quoted numerals, NULL spellings, a cell that is not a
    numeral of its column (that column read as text, then judged by `_plain_column`), bytes that are not
    UTF-8 and a short row (the file declined: DuckDB reads it on both paths)."""
    import csv
    import io

    src = need(CLUSTER4) / "node0_40000_20250101120000100_ascend_pt"
    rank = tmp_path / src.name
    shutil.copytree(src, rank)
    path = rank / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv"
    lines = path.read_bytes().decode().splitlines()
    header, rows = lines[0], [next(csv.reader([line])) for line in lines[1:]]
    names = next(csv.reader([header]))
    rows = rows * (ascend_text.PLAIN_CSV_BYTES * 2 // len("\n".join(lines)) + 1)
    dur, shapes = names.index("Duration(us)"), names.index("Input Shapes")
    if quirk == "quoted":
        rows[3][dur] = f' {rows[3][dur]} '
    elif quirk == "nulls":
        rows[1][dur], rows[2][dur], rows[4][shapes] = "N/A", "", " N/A "
    elif quirk == "not_numeral":
        rows[5][dur] = "1e3"
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\r\n", quoting=csv.QUOTE_ALL if quirk == "quoted" else csv.QUOTE_MINIMAL)
    w.writerow(names)
    w.writerows(rows)
    data = buf.getvalue().encode()
    if quirk == "bad_utf8":
        data += b"x\xff" + b"," * (len(names) - 1) + b"\r\n"
    elif quirk == "short_row":
        data += b"1,2\r\n"
    path.write_bytes(data)
    assert path.stat().st_size > ascend_text.PLAIN_CSV_BYTES
    monkeypatch.setenv("STEPDOCTOR_PURE_PYTHON", "0")
    r = ascend_text._RankReader(RankSource(path=rank, format="ascend_pt_text", rank=0))
    r.resolve_csv(path, ascend_text.KERNEL_DETAILS, required=True)
    taken = ascend_text._native_csv(path, r._csv_columns[path], [("d", "Duration(us)", "float")])
    r.close()
    assert (taken is not None) == (quirk in (None, "quoted", "nulls"))
    if quirk != "bad_utf8":
        _same_rank(rank, monkeypatch)
        return
    errors = []  # DuckDB rejects the file on both paths, with the same message
    for native in (True, False):
        monkeypatch.setenv("STEPDOCTOR_PURE_PYTHON", "0" if native else "1")
        with pytest.raises(ProfileError) as e:
            ascend_text.read_rank(RankSource(path=rank, format="ascend_pt_text", rank=0))
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "kernel_details.csv" in errors[0]


def test_mindspore_layout_identical_on_both_paths(tmp_path, monkeypatch):
    src = need(CLUSTER4) / "node0_40000_20250101120000100_ascend_pt"
    rank = tmp_path / "host_1_20250101120000100_ascend_ms"
    shutil.copytree(src, rank)
    tv = rank / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    tv.chmod(0o644)
    tv.write_text(tv.read_text().replace('{"name": "Python"}', '{"name": "MindSpore"}')
                  .replace('{"name": "Communication"}', '{"name": "HCCL"}'))
    _same_trace(tv, monkeypatch)


def _meta(pid, name, **kw) -> dict:
    return {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name, **kw}}


def _x(pid, name, ts, dur=1.0, tid=1, cat=None, **args) -> dict:
    ev = {"ph": "X", "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}
    if cat is not None:
        ev["cat"] = cat
    return ev


QUIRKS = [
    # an event before its process's name (waits to the end), one on a process that never gets one
    _x(1, "aten::early", "1700000000000000.500", cat="cpu_op"), _x(99, "orphan", "5.000"),
    _x(99, "gc_orphan", "6.000", cat="GC"),
    _meta(1, "Python"), {"ph": "M", "name": "process_labels", "pid": 1, "args": {"labels": "CPU"}},
    {"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "main"}},
    _meta(2, "CANN"), _meta(3, "Ascend Hardware"), _meta(4, "Communication"), _meta(5, "Overlap Analysis"),
    _meta(6, "AI Core Freq"), _meta("str pid", "Python"), _meta(7, "Something Else"),
    {"ph": "M", "name": "process_labels", "pid": 3, "args": {"labels": "NPU 3"}},
    # timestamps: canonical, sub-µs beyond ns (half up), numbers, exponents, missing, garbage, spaces
    _x(1, "ProfilerStep#4", "1700000000000001.000", 1000.0, cat="user_annotation"),
    _x(1, "aten::mm", "1700000000000002.0005", 2.5, cat="cpu_op", **{"Input Dims": [[4, 8], [8, 2]],
                                                                      "Input type": ["float", "float"],
                                                                      "Call stack": "a.py(1): f\nb.py(2): g"}),
    _x(1, "aten::add", 1700000000000003.123, 3, cat="cpu_op", **{"Call Stack": "upper-case key"}),
    _x(1, "aten::exp", 1.5e3, 1e-3, cat="cpu_op"), _x(1, "no ts", None, cat="cpu_op"),
    _x(1, "bad ts", "abc", cat="cpu_op"), _x(1, "spaced", " 12.345", "0.25", cat="cpu_op"),
    _x(1, "plus", "+12.5", "1e1", cat="cpu_op"), _x(1, "dataloader step", "20.000", cat="python_function"),
    _x(1, "neg", "-5.125", -1.0, cat="cpu_op", connection_id=7), _x(1, "conn float", "21", connection_id=7.0),
    _x(1, "conn text", "22", connection_id="8"), _x(1, "stack int", "23", **{"Call stack": 5}),
    _x(1, "stack float", "24", **{"Call stack": 1.5, "Input Dims": None}), _x(1, "GC", "25", cat="gc"),
    _x(1, "escaped \u00e9 \"q\" \\", "26", cat="cpu_op"), _x("str pid", "on a str pid", "27", tid="t"),
    _x(2, "aclnnMatmul", "28.000", 3.0), _x(2, "CANN gc", "29", cat="GC"),
    # hardware tasks: stream from Stream Id, else Physic Stream Id, else the tid; task types of odd types
    _x(3, "MatMulV2", "1700000000000004.000", 5.0, tid=7, **{"Task Type": "AI_CORE", "Stream Id": 7,
                                                              "Task Id": 11, "connection_id": 1}),
    _x(3, "Add", "30.5", 1.25, tid=8, **{"Task Type": 5, "Physic Stream Id": "9", "Task Id": "12"}),
    _x(3, "Cast", "31", tid="9", **{"Task Type": "", "Stream Id": None, "Task Id": 1.0}),
    _x(3, "NoTs", None, tid=3), _x(3, "Args list", "32", tid=3, args_override=True),
    # communication: ops and tasks, sizes and bandwidth of every type
    _x(4, "hcom_allReduce__123_0_1", "33.000", 10.0, tid=1, data_type="FP16", count=1024),
    _x(4, "Memcpy", "34.000", 2.0, tid=2, **{"size(Byte)": 1000100, "transport type": "SDMA", "link type": "HCCS",
                                             "src rank": 0, "dst rank": "1", "bandwidth(GB/s)": 16.67}),
    _x(4, "Notify_Wait", "35", 1.0, tid=2, **{"size(Byte)": "12", "bandwidth(GB/s)": 3, "count": "7",
                                              "data_type": 4}),
    _x(4, "hcom_broadcast_", "36", "2.5", tid=1, data_type="int8", count=3.0),
    # overlap analysis, frequency counters (handed back), other phases
    _x(5, "Computing", "37.000", 4.0), _x(5, "Free", None),
    {"ph": "C", "name": "AI Core Freq", "pid": 6, "tid": 0, "ts": "38.000", "args": {"MHz": 1800}},
    {"ph": "C", "name": "AI Core Freq", "pid": 6, "tid": 0, "ts": "39.000", "args": {"freq": "1650.5"}},
    {"ph": "C", "name": "other counter", "pid": 6, "ts": "40", "args": {"v": 1}},
    _x(6, "x on freq", "41.000"), _x(7, "x on other", "42.000"), _x(7, "gc on other", "43", cat="gc"),
    {"ph": "B", "name": "begin", "pid": 1, "tid": 1, "ts": "44"}, {"ph": "E", "pid": 1, "tid": 1, "ts": "45"},
    {"ph": "i", "name": "instant", "pid": 1, "ts": "46"}, {"ph": "R", "name": "mark", "pid": 1, "ts": "46"},
    # flows: with and without ids, cat or name, string ids, bad ts
    {"ph": "s", "id": 1, "pid": 1, "tid": 1, "ts": "47.000", "cat": "async_npu", "name": "async_npu", "bp": "e"},
    {"ph": "f", "id": 1, "pid": 3, "tid": 7, "ts": "48.000", "cat": "async_npu", "name": "async_npu", "bp": "e"},
    {"ph": "t", "id": "x1", "pid": 1, "tid": 1, "ts": "49", "name": "no cat"},
    {"ph": "s", "pid": 1, "tid": 1, "ts": "50", "cat": "no id"}, {"ph": "f", "id": 2, "pid": 3, "ts": None},
    {"ph": "s", "id": 3, "pid": 1, "tid": 1, "ts": "51", "cat": ""},
    # args holding objects where scalars are read (handed back), deep nesting elsewhere
    _x(1, "stack dict", "52", cat="cpu_op", **{"Call stack": {"a": 1}}),
    _x(4, "size list", "53", tid=2, **{"size(Byte)": [1, 2]}),
    _x(1, "nested", "54", cat="cpu_op", other={"a": [1, {"b": "}, {"}]}),
    _x(1, "big conn", "55", cat="cpu_op", connection_id=2**70),
]


def _quirk_events() -> list[dict]:
    out = []
    for ev in json.loads(json.dumps(QUIRKS)):
        if ev.get("args", {}).pop("args_override", False):
            ev = {**ev, "args": [1, 2]}
        out.append(ev)
    return out


@pytest.mark.parametrize("indent", [None, 2])
@pytest.mark.parametrize("block", [1 << 20, 89])
def test_quirks_identical_on_both_paths(indent, block, tmp_path, monkeypatch):
    monkeypatch.setattr(ascend_scan, "_BLOCK", block)
    p = tmp_path / "trace_view.json"
    p.write_text(json.dumps(_quirk_events(), indent=indent, ensure_ascii=indent is None))
    tr = _same_trace(p, monkeypatch)
    assert tr.n_unclassified == 1 and tr.steps == [(4, 1_700_000_000_000_001_000, 1_000_000)]
    assert 1_700_000_000_000_002_001 in tr.h_start.tolist()  # .0005 rounds half up
    assert tr.f_mhz == [1800.0, 1650.5] and tr.with_stack


@pytest.mark.parametrize("text, problem", [
    (b"", "empty file"), (b"   \n", "empty file"), (b'{"traceEvents": []}', "JSON object"),
    (b'[{"ph": "X", "name": "a", "pid": 1, "ts": "1"}', "truncated"),
    (b'[{"ph": "X", "name": "a", "pid": 1, "ts": "1"},]', "invalid JSON"),
    (b'[{"ph": "X", "name": "a", "pid": null, "ts": "1"}]', "invalid JSON"),
    (b'[{"ph": "X", "name": "a", "pid": 1, "ts": "1"}] x', "truncated"),  # (the msgspec path's words)
    (b"[5]", "invalid JSON"), (b"hello", "not JSON"),
])
def test_bad_input_gets_the_msgspec_paths_message(text, problem, tmp_path, monkeypatch):
    p = tmp_path / "trace_view.json"
    p.write_bytes(text)
    assert_same_error(lambda native: _parse(p, native, monkeypatch), problem)


_scalar = st.one_of(st.none(), st.integers(-(2**64), 2**64), st.floats(allow_nan=False, allow_infinity=False),
                    st.text(max_size=5), st.booleans(), st.sampled_from(["12", "1.5", "-3", "007"]))
_value = st.recursive(_scalar, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(
    st.text(max_size=3), inner, max_size=2), max_leaves=4)
_KEYS = [*ascend_scan._SCALARS, *ascend_scan._RAWS, "other"]
_ts = st.one_of(st.sampled_from(["1.000", "1700000000000123.456", "12.5", "12.0005", " 3.5", "x", ""]),
                st.integers(0, 10**6), st.floats(0, 1e6, allow_nan=False), st.none())
_event = st.fixed_dictionaries({
    "ph": st.sampled_from(["X", "X", "X", "s", "f", "t", "M", "C", "B", "i"]),
    "pid": st.sampled_from([1, 2, 3, 4, 5, 6, 9, "p"]),
    "name": st.sampled_from(["ProfilerStep#2", "aten::mm", "process_name", "AI Core Freq", "hcom_x", "GC", ""]),
    "ts": _ts,
}, optional={"tid": st.sampled_from([1, 2, "t"]), "dur": st.one_of(st.floats(0, 1e4, allow_nan=False),
                                                                    st.integers(0, 100), st.sampled_from(["1.5", "x"]),
                                                                    st.none()),
             "cat": st.sampled_from(["cpu_op", "gc", "GC", "user_annotation", "async_npu", "", None]),
             "id": st.one_of(st.integers(0, 5), st.sampled_from(["a", "b"]), st.none()),
             "args": st.dictionaries(st.sampled_from(_KEYS), _value, max_size=4)})
_PROCESSES = [_meta(1, "Python"), _meta(2, "CANN"), _meta(3, "Ascend Hardware"), _meta(4, "Communication"),
              _meta(5, "Overlap Analysis"), _meta(6, "AI Core Freq")]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(_event, max_size=20), meta_first=st.booleans(), block=st.sampled_from([13, 1 << 20]))
def test_random_traces_identical_on_both_paths(events, meta_first, block, tmp_path, monkeypatch):
    monkeypatch.setattr(ascend_scan, "_BLOCK", block)
    p = tmp_path / "trace_view.json"
    evs = _PROCESSES + events if meta_first else events + _PROCESSES
    p.write_text(json.dumps(evs))
    results = []
    for native in (True, False):
        try:
            results.append(_columns(_parse(p, native, monkeypatch)))
        except ProfileError as e:
            results.append(str(e))
    assert results[0] == results[1]


# -- CSV numerals (`_tracescan.numerals`, used by `ascend_text._plain_column`) --------------------------

def _plain_both(cells: list, kind: str, monkeypatch: pytest.MonkeyPatch) -> tuple:
    out = []
    for native in (True, False):
        monkeypatch.setenv("STEPDOCTOR_PURE_PYTHON", "0" if native else "1")
        col = ascend_text._plain_column(list(cells), kind, None in cells)
        if col is None:
            out.append(None)
        elif isinstance(col, np.ma.MaskedArray):
            out.append(("masked", col.dtype.str, [None if m else int(v) for v, m in
                                                  zip(col.data.tolist(), np.ma.getmaskarray(col).tolist(), strict=True)]))
        else:
            out.append((type(col).__name__, col.dtype.str, [None if v != v else v for v in col.tolist()]))
    return tuple(out)


_NUMERAL_CELLS = ["0", "-0", "12", " 12\t", "\r\n7 ", "", "N/A", " N/A ", "n/a", "1.5", "-1.25", "1.500", "1.5000",
                  "123456789012345", "1234567890123456", "9223372036854775.807", "9223372036854775.808",
                  "-9223372036854775.808", "-9223372036854775.809", "999999999999999999.999", ".5", "5.", "-",
                  "1e3", "+1", "0x10", "１２", "1 2", "1,5", "\u00a012", "12\n13", None]


@pytest.mark.parametrize("kind", ["int", "ns", "float"])
@pytest.mark.parametrize("cell", _NUMERAL_CELLS)
def test_numerals_match_the_python_conversion(kind, cell, monkeypatch):
    a, b = _plain_both([cell, "1", None], kind, monkeypatch)
    assert a == b


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cells=st.lists(st.one_of(st.none(), st.sampled_from(_NUMERAL_CELLS),
                                st.from_regex(r"[ \t]?-?[0-9]{1,19}(\.[0-9]{0,16})?[ \r\n]?", fullmatch=True),
                                st.floats(allow_nan=False, allow_infinity=False).map(repr)), max_size=12),
       kind=st.sampled_from(["int", "ns", "float"]))
def test_random_numeral_columns_match_the_python_conversion(cells, kind, monkeypatch):
    a, b = _plain_both(cells, kind, monkeypatch)
    assert a == b


@settings(max_examples=300, deadline=None)
@given(names=st.lists(st.text(alphabet="_0123456789ab\n\u0663", max_size=12), max_size=8))
def test_op_types_in_one_pass_match_the_per_name_regex(names):
    assert ascend_text._op_types(names) == [ascend_text._HCOM_SUFFIX_RE.sub("", n) or n for n in names]
