"""The native Kineto path (`_tracescan.c` + `kineto_scan.py`) against the msgspec path.

The two paths must give identical tables, warnings and capabilities on every input: the real traces
of shared/data, hand-made quirks (escapes, unusual types, nulls, exponents, layouts), random traces
(hypothesis), and with blocks so small that every string, number and escape is cut somewhere. Bad input
must give the msgspec path's own messages. `make test` builds the extension, so the test that it is
available fails if the build silently skipped it.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CLUSTER4, KINETO, assert_same_error, need, spy_fallback
from stepdoctor.analysis.ingest import kineto, kineto_scan
from stepdoctor.analysis.ingest.base import RankSource

TRACES = sorted(p for p in KINETO.glob("*/**/*.json*") if "reference" not in p.parts) if KINETO.exists() else []


def _read(path: Path, native: bool, monkeypatch: pytest.MonkeyPatch) -> kineto.RankTables:
    monkeypatch.setenv("STEPDOCTOR_PURE_PYTHON", "0" if native else "1")
    return kineto.read_rank(RankSource(path=path, format="kineto", rank=0))


def _same(path: Path, monkeypatch: pytest.MonkeyPatch) -> kineto.RankTables:
    a = _read(path, True, monkeypatch)
    b = _read(path, False, monkeypatch)
    fa, fb = a.frames(), b.frames()
    assert fa.keys() == fb.keys()
    for k in fa:
        assert fa[k].equals(fb[k]), (path.name, k)
    assert a.warnings == b.warnings
    assert a.capabilities == b.capabilities
    return a


def _spy_fallback(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    return spy_fallback(monkeypatch, kineto_scan)


def test_the_extension_is_built():
    assert kineto_scan.available(), "make test builds analysis/ingest/_tracescan.c; it is missing"


@pytest.mark.parametrize("path", TRACES, ids=lambda p: p.parent.name + "/" + p.name)
def test_real_traces_identical_on_both_paths(path, monkeypatch):
    fell_back = _spy_fallback(monkeypatch)
    _same(need(path), monkeypatch)
    assert not fell_back, "a real trace must not need the msgspec path"


def test_real_trace_with_tiny_blocks(monkeypatch):
    """Blocks of 613 bytes: elements, strings, escapes and numbers are cut at every kind of place."""
    path = need(KINETO / "nccl_parser_config" / "nccl_data.json.gz")
    whole = _read(path, True, monkeypatch)
    monkeypatch.setattr(kineto_scan, "_BLOCK", 613)
    small = _same(path, monkeypatch)
    for k, frame in whole.frames().items():
        assert frame.equals(small.frames()[k]), k


def _ev(**kw) -> dict:
    base = {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": 10.0, "dur": 2.0,
            "args": {}}
    base.update(kw)
    return base


def _trace(events: list[dict], **top) -> dict:
    evs = [_ev(cat="user_annotation", name="ProfilerStep#1", ts=0.0, dur=500.0),
           _ev(cat="user_annotation", name="ProfilerStep#2", ts=500.0, dur=500.0), *events]
    return {"schemaVersion": 1, "distributedInfo": {"rank": 0, "world_size": 2}, "traceEvents": evs, **top}


QUIRKS = [
    # escapes and non-ASCII in stored strings, raw UTF-8 and \u escapes, a surrogate pair
    _ev(name="aten::mm \"q\" \\ \n\t\u00e9\u4e2d"), _ev(name="caf\u00e9 \U0001F600"),
    _ev(args={"Call stack": "a.py(1): f;\nb.py(2): g\u00e9"}),
    # numbers: exponents, negative, integers as floats, many decimals, ints beyond int64
    _ev(ts=1.5e2, dur=2e0), _ev(ts=123.456789012345678, dur=0.001), _ev(ts=1700000000000123.5, dur=3),
    _ev(ts=-5.25, dur=1), _ev(args={"External id": 2**70}), _ev(args={"correlation": 7.0}),
    _ev(args={"correlation": -3}), _ev(ts=12345678901234567890, dur=1),
    # nulls and absent values where the typed decode allows them, and where it does not
    _ev(cat=None), _ev(name=None), _ev(pid=None, tid=None), _ev(ts=None), _ev(dur=None), _ev(args=None),
    _ev(args=[1, 2]), _ev(args={"correlation": None}), _ev(args={"Call stack": None, "Collective name": None}),
    {"ph": "X", "name": "no cat", "ts": 1, "dur": 1}, {"ph": "X", "cat": "cpu_op"},
    # strings where ints are stored, and the reverse
    _ev(pid="Spans", tid="PyTorch Profiler (0)"), _ev(args={"correlation": "100"}), _ev(ts="1000.5"),
    _ev(tid="0"), _ev(tid="7"),  # a numeral string is not an int tid either (numpy's int64 cast read it)
    _ev(args={"Collective name": 5}), _ev(args={"Process Group Name": 3, "Collective name": "allreduce",
                                                "In msg nelems": 8, "dtype": "Float"}),
    # shapes and dtypes: nested, empty, strings inside, odd spacing, not a list
    _ev(args={"Input Dims": [[4096, 1000], [], [[2, 3], [4]]], "Input type": ["float", "", "c10::Half"]}),
    _ev(args={"Input Dims": [], "Input type": []}), _ev(args={"Input Dims": "not a list"}),
    _ev(args={"Input Dims": None, "Input type": None}), _ev(args={"Input Dims": [["a", "b"]]}),
    # device ops: stream as string / in the tid / absent, grid shapes, MTIA sizes, sync
    _ev(cat="kernel", name="k1", pid=0, tid=7, args={"stream": 7, "device": 0, "correlation": 1, "grid": [4, 2, 1]}),
    _ev(cat="kernel", name="k2", pid=0, tid="stream 9", args={"correlation": 2, "grid": [4, 2]}),
    _ev(cat="kernel", name="k3", pid=0, tid=3, args={"stream": "0x5", "grid": "grid(100,)"}),
    _ev(cat="kernel", name="k4", pid=0, tid=3, args={"stream": None, "grid": None, "device": None}),
    _ev(cat="kernel", name="k5", pid=0, tid=3, args={"stream": 1, "grid": [1.5, 2, 3]}),
    _ev(cat="kernel", name="k6", pid=0, tid=3, args={"stream": 1, "grid": [2**40, 2**40, 2**40]}),
    _ev(cat="mtia_ccp_events", name="dma_request", pid=0, tid=1, args={"size": "4096", "stream": 1}),
    _ev(cat="mtia_ccp_events", name="dma_request", pid=0, tid=1, args={"size": 512, "stream": 1}),
    _ev(cat="cuda_sync", name="Event Sync", pid=0, tid=1, args={"cuda_sync_kind": "event", "stream": -1}),
    _ev(cat="gpu_memcpy", name="Memcpy HtoD", pid=0, tid=1, args={"stream": 2, "bytes": 1024, "correlation": 9}),
    _ev(cat="kernel", name="ncclDevKernel_AllReduce_Sum_f32_RING_LL", pid=0, tid=1,
        args={"stream": 3, "Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems": 1024,
              "dtype": "Float", "Process Group Name": "0", "Group size": 2}),
    # GPU copies of steps, unknown and ignored categories, other phases, duplicate keys are last-wins
    _ev(cat="gpu_user_annotation", name="ProfilerStep#2", pid=0, tid=1, ts=600.0),
    _ev(cat="made_up_cat"), _ev(cat="Trace"), _ev(cat=""),
    {"ph": "s", "id": 1, "ts": 1, "cat": "ac2g", "name": "ac2g", "pid": 1, "tid": 1},
    {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}}, {"ph": "Q"}, {"name": "no ph"},
    {"ph": 5, "name": "ph not a string"}, {"ph": "XX", "name": "long ph"},
    # memory instants
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 700.25, "s": "t",
     "args": {"Total Allocated": 4096, "Total Reserved": 8192, "Device Type": 1, "Device Id": 0}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 701, "args": {"Total Allocated": 1, "Device Type": 0}},
    {"ph": "i", "name": "[memory]", "pid": 1, "tid": 1, "ts": 702, "args": {"Bytes": 5}},
    {"ph": "i", "name": "not memory", "pid": 1, "tid": 1, "ts": 703},
    # deep nesting in args that are not stored
    _ev(args={"nested": {"a": [1, {"b": [[], {}, "x}],{"]}]}, "correlation": 11}),
]


@pytest.mark.parametrize("layout", ["compact", "pretty", "list", "events_first", "gz"])
@pytest.mark.parametrize("block", [1 << 20, 97])
def test_quirks_identical_on_both_paths(layout, block, tmp_path, monkeypatch):
    monkeypatch.setattr(kineto_scan, "_BLOCK", block)
    doc = _trace(QUIRKS, traceName="x", baseTimeNanoseconds=1700000000000000000)
    if layout == "compact":
        text = json.dumps(doc, separators=(",", ":"))
    elif layout == "pretty":
        text = json.dumps(doc, indent=3, ensure_ascii=False)
    elif layout == "list":
        text = json.dumps(doc["traceEvents"])
    elif layout == "events_first":
        evs = doc.pop("traceEvents")
        text = json.dumps({"traceEvents": evs, **doc}, indent=1)
    else:
        text = json.dumps(doc)
    path = tmp_path / ("t.json.gz" if layout == "gz" else "t.json")
    path.write_bytes(gzip.compress(text.encode()) if layout == "gz" else text.encode())
    fell_back = _spy_fallback(monkeypatch)
    t = _same(path, monkeypatch)
    assert not fell_back
    host = t.frames()["host_ops"]
    assert "caf\u00e9 \U0001F600" in set(host["name"])  # the escaped surrogate pair, joined
    dev = t.frames()["device_ops"].set_index("name")
    assert dev.loc["k1", "block_dim"] == 8 and dev.loc["k2", "stream_id"] == 9 and dev.loc["k3", "stream_id"] == 5


@pytest.mark.parametrize("text, problem", [
    (b"", "empty file"),
    (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1}', "invalid JSON: truncated"),
    (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": 1},]}', "invalid JSON"),
    (b'{"traceEvents": [{"ph": "X", "name": "a", "ts": 1, "dur": ?}]}', "invalid JSON"),
    (b'{"traceEvents": [5]}', "traceEvents|invalid JSON"),
    (b'[{"ph": "X", "name": "a", "ts": 1, "dur": 1}] trailing', "trailing characters"),
    (b'{"traceEvents": [], "x": }', "invalid JSON"),
    (b'{"traceEvents": [{"ph": "X", "name": "a\x01", "ts": 1, "dur": 1}]}', "invalid JSON"),
])
def test_bad_input_gets_the_msgspec_paths_message(text, problem, tmp_path, monkeypatch):
    path = tmp_path / "bad.json"
    path.write_bytes(text)
    assert_same_error(lambda native: _read(path, native, monkeypatch), problem)


def test_scanner_statuses():
    """The scanner's contract with its caller: NEED_MORE / DONE / ODD / MALFORMED and resume offsets."""
    ts = kineto_scan._tracescan
    specs, _ = kineto_scan._layout()
    s = ts.Scanner(specs)
    buf = b'{"ph":"X","name":"a","ts":1,"dur":2},{"ph":"X","name":"b","ts":1.'
    status, pos, _ = s.feed(buf, 0, False)
    assert status == ts.NEED_MORE and buf[pos:].startswith(b'{"ph":"X","name":"b"')
    cols, strs, scanned = s.take()
    assert (len(cols[0]) == 1 and strs == ["X", "a"]) or "a" in strs
    buf2 = buf[pos:] + b'5,"dur":2},{"ph":"X","name":null,"ts":1,"dur":1},{"ph":"s"}]'
    status, pos, end = s.feed(buf2, 0, False)
    assert status == ts.ODD and buf2[pos:end] == b'{"ph":"X","name":null,"ts":1,"dur":1}'
    status, pos, _ = s.feed(buf2, end, False)
    assert status == ts.DONE and pos == len(buf2)
    cols, _, scanned = s.take()
    assert len(cols[0]) == 1 and scanned == 2  # "b" and the flow event, which is not kept; the odd one is not counted
    s2 = ts.Scanner(specs)
    assert s2.feed(b'{"ph":"X"} {"ph":"X"}]', 0, True)[0] == ts.MALFORMED
    assert ts.Scanner(specs).feed(b"]", 0, True)[:2] == (ts.DONE, 1)


# random traces: every stored field with values of every JSON type
_json_scalar = st.one_of(st.none(), st.booleans(), st.integers(-(2**64), 2**64),
                         st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=6))
_value = st.recursive(_json_scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
    st.text(max_size=4), inner, max_size=3), max_leaves=6)
_ARG_KEYS = [f.encode_name for f in kineto_scan._FIELDS]
_args = st.dictionaries(st.sampled_from([*_ARG_KEYS, "other"]), _value | st.integers(0, 50), max_size=6)
_event = st.fixed_dictionaries({
    "ph": st.sampled_from(["X", "X", "X", "i", "s", "M"]),
    "cat": st.sampled_from(["cpu_op", "kernel", "cuda_runtime", "gpu_memcpy", "user_annotation", "zzz"]),
    "name": st.sampled_from(["aten::mm", "ProfilerStep#3", "[memory]", "k", "\u00e9"]),
    "ts": st.floats(0, 1e6, allow_nan=False) | st.integers(0, 10**6),
    "dur": st.floats(0, 1e3, allow_nan=False) | st.integers(0, 1000),
}, optional={"pid": _value, "tid": _value, "args": _args | _value})


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(events=st.lists(_event, max_size=25), block=st.sampled_from([7, 61, 1 << 20]))
def test_random_traces_identical_on_both_paths(events, block, tmp_path, monkeypatch):
    monkeypatch.setattr(kineto_scan, "_BLOCK", block)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(_trace(events)))
    _same(path, monkeypatch)


def test_text_kinds_is_the_exact_type_check():
    """`_tracescan.text_kinds`, the check `RankTables.parts()` makes of every text column, against the
    Python check it replaces; a column that fails it still goes through pandas."""
    import numpy as np

    from stepdoctor.analysis.ingest import _tracescan, base

    class Sub(str):
        pass

    cases = [[], ["a", "b"], ["a", None], [None], ["a", 1], [Sub("x")], ["a", 1.5, None], ["é", b"x"]]
    for values in cases:
        arr = np.empty(len(values), dtype=object)
        arr[:] = values
        want = set(map(type, values)) <= {str, type(None)}
        for v in (values, tuple(values), arr):
            assert (_tracescan.text_kinds(v) < 2) == want
            assert base._all_text(v) == want
        assert _tracescan.text_kinds(values) == (0 if want and None not in values else 1 if want else 2)
    assert base.typed_column(["a", None, 3], "VARCHAR").tolist() == ["a", None, "3"]


def test_an_extension_from_an_older_build_is_not_used(tmp_path):
    """A `_tracescan` that lacks what the readers call (a rebuild that failed and left the old one) turns
    the native paths off; the readers still read, on the msgspec path."""
    import subprocess
    import sys

    code = """
import sys, types
stale = types.ModuleType("stepdoctor.analysis.ingest._tracescan")
stale.Scanner = type("Scanner", (), {})  # no forest(), no numerals / text_kinds
sys.modules["stepdoctor.analysis.ingest._tracescan"] = stale
from stepdoctor.analysis.ingest import kineto_scan, ascend_text, base
from stepdoctor.analysis.ingest.base import RankSource
assert not kineto_scan.available()
assert ascend_text._native_numerals() is None and base._all_text(["a", None])
t = ascend_text.read_rank(RankSource(path=sys.argv[1], format="ascend_pt_text", rank=0))
print(t.count("comm_ops"), t.count("device_ops"))
"""
    rank = need(CLUSTER4) / "node0_40000_20250101120000100_ascend_pt"
    out = subprocess.run([sys.executable, "-c", code, str(rank)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["8", "104"]  # (as test_ingest_ascend has this rank)
