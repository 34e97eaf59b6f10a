"""The native communication*.json path (`Scanner.forest` + `comm_scan.py`) against the msgspec path.

Both paths must give the same comm_ops / comm_bandwidth / comm_packets / links columns, skipped-op counts,
unmapped groups and bad link keys, the native path reading the file whole and in blocks of a few bytes
(every value, key and number cut somewhere, each block's tree joined to the others): on every shared rank, on generated profiles (where the native path must
take the file, so the comparison is not between two runs of the same fallback), on hand-made quirks and on
random documents whose numbers are written as JSON text of every shape (decimals, exponents, big ints,
strings, nulls, wrong types), so the typed, text and Decimal decodings are all reached.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CLUSTER4, need
from stepdoctor.analysis.ingest import ascend_text, comm_scan
from stepdoctor.analysis.ingest.base import RankSource
from stepdoctor.evals.generate import Scenario, write_ascend_profile

pytestmark = pytest.mark.skipif(not comm_scan.available(), reason="the C scanner is not built")


class Num:
    """A JSON number (or any JSON token) written exactly as given."""

    def __init__(self, text: str) -> None:
        self.text = text


def dumps(v: Any) -> str:
    """JSON text with `Num` tokens verbatim and duplicate keys allowed (a list of pairs is an object)."""
    if isinstance(v, Num):
        return v.text
    if isinstance(v, Obj):
        return "{" + ", ".join(f"{json.dumps(k)}: {dumps(x)}" for k, x in v.pairs) + "}"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {dumps(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(dumps(x) for x in v) + "]"
    return json.dumps(v)


class Obj:
    """An object that may repeat a key."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        self.pairs = pairs


def norm(col: Any) -> list[Any]:
    """A column as a list of Python values, NULL (mask, NaN, None) as None."""
    if isinstance(col, np.ma.MaskedArray):
        return [None if m else v for v, m in zip(col.data.tolist(), np.ma.getmaskarray(col).tolist(), strict=True)]
    out = col.tolist() if isinstance(col, np.ndarray) else list(col)
    return [None if isinstance(v, float) and math.isnan(v) else v for v in out]


def same(a: Any, b: Any) -> None:
    if isinstance(a, dict) and isinstance(b, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert norm(a[k]) == norm(b[k]), k
    else:
        assert a == b


# -- a reader to call the two files' readers on ---------------------------------------------------------

@pytest.fixture(scope="module")
def rank_dir(tmp_path_factory) -> Path:
    """A cluster4 rank (its parallel_group_info maps group-local link ranks), copied to be edited."""
    src = need(CLUSTER4 / "node0_40001_20250101120000101_ascend_pt")
    dst = tmp_path_factory.mktemp("comm") / src.name
    shutil.copytree(src, dst)
    return dst


def _reader(rank_dir: Path) -> Any:
    r = ascend_text._RankReader(RankSource(path=rank_dir, format="ascend_pt_text", rank=1))
    r.profiler_info()
    r.profiler_metadata()
    return r


BLOCKS = (comm_scan.BLOCK, 1, 7, 250)  # bytes per read of the native path: whole, and cut everywhere


def read_both(rank_dir: Path, name: str, text: str | bytes, monkeypatch: pytest.MonkeyPatch,
              expect_native: bool | None = None, blocks: tuple[int, ...] = BLOCKS) -> None:
    """Both paths on one communication*.json text: the same result and warnings, the native path read in
    each of `blocks`; `expect_native`: whether the native path must take the file (True) or hand it back
    (False)."""
    path = rank_dir / "ASCEND_PROFILER_OUTPUT" / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    results = []
    for block in (None, *blocks):
        monkeypatch.setenv("STEPDOCTOR_PURE_PYTHON", "0" if block else "1")
        monkeypatch.setattr(comm_scan, "BLOCK", block or comm_scan.BLOCK)
        r = _reader(rank_dir)
        mark = len(r.t.warnings)
        if name == "communication.json":
            res = r._comm_json(path, ascend_text._COMM_TYPED, ascend_text._comm_json_columns,
                               comm_scan.comm_columns)
        else:
            res = r._comm_json(path, ascend_text._MATRIX_TYPED, r._matrix_columns,
                               lambda data, r=r: comm_scan.matrix_columns(data, r))
        results.append((res, r.t.warnings[mark:]))
        r.close()
    (b, wb), *natives = results
    for (a, wa), block in zip(natives, blocks, strict=True):
        assert wa == wb, block
        if a is None or b is None:
            assert a is b
        else:
            assert len(a) == len(b)
            for x, y in zip(a, b, strict=True):
                same(x, y)
    if expect_native is not None:
        monkeypatch.setenv("STEPDOCTOR_PURE_PYTHON", "0")
        data = path.read_bytes()
        for block in blocks:
            got = comm_scan.comm_columns(data, block) if name == "communication.json" else \
                comm_scan.matrix_columns(data, _reader(rank_dir), block)
            assert (got is not None) == expect_native, block


# -- real and generated files ------------------------------------------------------------------------

@pytest.mark.parametrize("rank", sorted(p.name for p in CLUSTER4.glob("*_ascend_pt")) if CLUSTER4.exists() else [])
def test_cluster4_files_take_the_native_path_with_the_same_columns(rank, rank_dir, monkeypatch):
    out = need(CLUSTER4 / rank / "ASCEND_PROFILER_OUTPUT")
    for name in ("communication.json", "communication_matrix.json"):
        read_both(rank_dir, name, (out / name).read_bytes(), monkeypatch, expect_native=True)


def test_generated_files_take_the_native_path(tmp_path, rank_dir, monkeypatch):
    root = write_ascend_profile(Scenario("ascend", ranks=2, steps=2, seed=5), tmp_path / "gen", layers=4)
    for rank in sorted(root.glob("*_ascend_pt")):
        for name in ("communication.json", "communication_matrix.json"):
            read_both(rank_dir, name, (rank / "ASCEND_PROFILER_OUTPUT" / name).read_bytes(), monkeypatch,
                      expect_native=True)


def test_native_columns_hold_the_exact_numbers(rank_dir, monkeypatch):
    """One op by hand: start µs with a half µs, ms with 6 decimals, MB sizes, packets; bytes moved."""
    doc = {"step3": {"collective": {
        "hcom_allReduce__1_0_1@77": {
            "Communication Time Info": {"Start Timestamp(us)": Num("1700000000478490.5"),
                                        "Elapse Time(ms)": Num("160.501949"), "Transit Time(ms)": Num("0.058841"),
                                        "Wait Time(ms)": Num("0"), "Synchronization Time(ms)": None},
            "Communication Bandwidth Info": {
                "HCCS": {"Transit Size(MB)": Num("7.340032"), "Transit Time(ms)": Num("0.375193"),
                         "Bandwidth(GB/s)": Num("19.5634"), "Large Packet Ratio": Num("0.0"),
                         "Size Distribution": {"1.048576": [Num("7"), Num("0.375193")], "2": [1]}},
                "RDMA": {"Transit Size(MB)": Num("1.5"), "Transit Time(ms)": Num("0.5"), "Bandwidth(GB/s)": 3},
                "PCIE": {"Transit Size(MB)": 0, "Transit Time(ms)": 0}}},
        "Total Op Info": {"Communication Time Info": {"Start Timestamp(us)": 1, "Elapse Time(ms)": 1}}}}}
    data = dumps(doc).encode()
    ops, bands, packets, skipped = comm_scan.comm_columns(data)
    assert skipped == 0
    assert norm(ops["start_ns"]) == [1700000000478490500] and norm(ops["elapse_ns"]) == [160501949]
    assert norm(ops["transit_ns"]) == [58841] and norm(ops["wait_ns"]) == [0] and norm(ops["sync_ns"]) == [None]
    assert norm(ops["size_bytes"]) == [7340032 + 1500000]  # HCCS (no SDMA row) + RDMA
    assert ops["group_name"] == ["77"] and norm(ops["step"]) == [3]
    assert bands["transport"] == ["HCCS", "RDMA"] and norm(bands["size_bytes"]) == [7340032, 1500000]
    assert norm(bands["bandwidth_gbps"]) == [19.5634, 3.0]
    assert packets["transport"] == ["HCCS"] and norm(packets["packet_bytes"]) == [1048576]
    assert norm(packets["count"]) == [7] and norm(packets["total_ns"]) == [375193]
    read_both(rank_dir, "communication.json", data, monkeypatch, expect_native=True)


QUIRKS = [
    # (file, document, whether the native path takes it)
    ("communication.json", {"step1": {"collective": {"a@1": {"Communication Time Info": "x"}}}}, False),
    ("communication.json", {"step1": {"collective": {"a@1": {"Communication Time Info": {
        "Start Timestamp(us)": "1700000000000000.25", "Elapse Time(ms)": 1}}}}}, True),
    ("communication.json", {"step1": {"collective": {"a@1": {"Communication Time Info": {
        "Start Timestamp(us)": Num("1.7e15"), "Elapse Time(ms)": Num("1e-3")}}}}}, True),
    ("communication.json", {"step1": {"collective": {"a@1": {"Communication Time Info": {
        "Start Timestamp(us)": 5, "Elapse Time(ms)": Num("0.1234567")}}}}}, False),  # not exact as a float
    ("communication.json", {"step1": {"collective": {"a@1": {"Communication Time Info": {
        "Start Timestamp(us)": Num("123456789012345678901234"), "Elapse Time(ms)": 1}}}}}, False),
    ("communication.json", {"step1": {"collective": {"a@1": {"Communication Time Info": {
        "Start Timestamp(us)": 5, "Elapse Time(ms)": True}}}}}, False),
    ("communication.json", {"step1": {"collective": {"a@1": {"Communication Time Info": {
        "Start Timestamp(us)": 5, "Elapse Time(ms)": Num("1e400")}}}}}, False),
    ("communication.json", {"step1": {"collective": {"a@1": {"Communication Time Info": Obj([
        ("Start Timestamp(us)", 5), ("Elapse Time(ms)", 1), ("Elapse Time(ms)", 2)])}}}}, False),
    ("communication.json", {"step1": {"collective": {"a": {"Communication Time Info": {
        "Start Timestamp(us)": 1, "Elapse Time(ms)": 1}, "Communication Bandwidth Info": {
        "sdma": {"Transit Size(MB)": 1}, "SDMA": {"Transit Size(MB)": 2}, "HCCS": {"Transit Size(MB)": 4},
        "RDMA": {"Transit Time(ms)": 1, "Size Distribution": {"0.5": ["3", Num("2.5")], "1": [1, None]}}}}}}},
     True),
    ("communication.json", {"step1": {"collective": {"a": {"Communication Time Info": {
        "Start Timestamp(us)": 1, "Elapse Time(ms)": 1}, "Communication Bandwidth Info": {"HCCS": 3}}}}}, False),
    ("communication.json", {"step1": {"collective": {"a": {"Communication Time Info": {
        "Start Timestamp(us)": 1, "Elapse Time(ms)": 1}, "Communication Bandwidth Info": {"HCCS": {
            "Transit Size(MB)": 1, "Size Distribution": {"2": [{"x": 1}, 2]}}}}}}}, False),
    ("communication.json", {"step1": {"collective": {"a": {}}, "p2p": {}}, "stepX": {"p2p": {
        "b@2": {"Communication Time Info": None, "Communication Bandwidth Info": None}}}}, True),
    ("communication.json", {"step1": []}, False),
    # a key repeated in an object at depths 1-3 (read member by member across blocks), or only at other depths
    ("communication.json", Obj([("step1", {"p2p": {}}), ("step1", {"p2p": {}})]), False),
    ("communication.json", {"step1": Obj([("p2p", {"a": {}}), ("p2p", {})])}, False),
    ("communication.json", {"step1": {"p2p": Obj([("a@1", {"Communication Time Info": None}),
                                                  ("a@1", {"Communication Time Info": None})])}}, False),
    ("communication.json", {"step1": {"step1": {"step1": {"Communication Time Info": {
        "Start Timestamp(us)": 1, "Elapse Time(ms)": 1, "step1": 2}}}}, "step2": {"step1": {}}}, True),
    ("communication.json", [], False),
    ("communication_matrix.json", {"step1": {"collective": {
        "allreduce-top1@1": {"0-1": {"Transport Type": "HCCS", "Transit Size(MB)": 1}},
        "ar@18294791067709168601": {"0-1": {"Op Name": None, "Transport Type": "HCCS", "Transit Size(MB)": 2},
                                    "bad": {"Transport Type": "HCCS"}, " 1 - 1 ": {"Op Name": "other"}},
        "br@999": {"3-3": {"Transit Time(ms)": Num("0.000005")}},
        "Total Op Info": {"0-1": {}}}}}, True),
    ("communication_matrix.json", {"step1": {"collective": {"br@999": {"3-3": {  # 0.5 ns: not exact as a float
        "Transit Time(ms)": Num("0.0000005")}}}}}, False),
    ("communication_matrix.json", {"step1": {"collective": {"ar@1": {"0-1": {"Op Name": 12}}}}}, False),
    ("communication_matrix.json", {"step1": {"collective": {"ar@1": {"0-1": {"Op Name": "1.50"}}}}}, True),
    ("communication_matrix.json", {"step1": {"collective": {"ar@1": {"0-1": 7}}}}, False),
    ("communication_matrix.json", {"step1": {"collective": {"ar@1": {"0-1": {"Transit Size(MB)": "2"}}}}}, False),
    ("communication_matrix.json", {"step99999999999999999999": {"collective": {"ar@1": {"0-1": {}}}}}, True),
]


@pytest.mark.parametrize("case", range(len(QUIRKS)))
def test_quirks_same_on_both_paths(case, rank_dir, monkeypatch):
    name, doc, native = QUIRKS[case]
    read_both(rank_dir, name, dumps(doc), monkeypatch, expect_native=native)


def test_bad_json_and_bad_utf8_are_left_to_the_msgspec_path(rank_dir, monkeypatch):
    read_both(rank_dir, "communication.json", '{"step1": {"collective": {', monkeypatch, expect_native=False)
    read_both(rank_dir, "communication.json", '{"step1": {}} x', monkeypatch, expect_native=False)
    read_both(rank_dir, "communication.json", '{"step1": {"p2p": {}}}{}', monkeypatch, expect_native=False)
    read_both(rank_dir, "communication.json", ' \n{"step1" :{ "p2p" : { } } }\n ', monkeypatch, expect_native=True)
    read_both(rank_dir, "communication.json", '', monkeypatch, expect_native=False)
    read_both(rank_dir, "communication_matrix.json", b'{"step1": {"c\xff": {}}}', monkeypatch,
              expect_native=False)
    read_both(rank_dir, "communication_matrix.json", '{"step1": {"\\ud800": {}}}', monkeypatch,
              expect_native=False)


# -- random documents ------------------------------------------------------------------------------------

def _numbers() -> st.SearchStrategy[Any]:
    digits = st.integers(min_value=0, max_value=10**20)
    decimal = st.builds(lambda w, f, n, neg: Num(("-" if neg else "") + f"{w}.{str(f).zfill(n)[:max(n, 1)]}"),
                        st.integers(0, 10**17), st.integers(0, 10**9), st.integers(1, 10), st.booleans())
    return st.one_of(
        st.builds(lambda i: Num(str(i)), digits), decimal,
        st.builds(lambda m, e: Num(f"{m}e{e}"), st.integers(-999, 999), st.integers(-8, 8)),
        st.sampled_from([Num("0"), Num("-0"), Num("0.0"), Num("-0.0"), Num("1e400"), None, True, "1.5", "x",
                         Num("0.0000005"), Num("12345678901234567890123")]),
        st.floats(allow_nan=False, allow_infinity=False).map(lambda f: Num(repr(f))),
    )


def _maybe(d: dict[str, Any], draw_keys: list[str]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if k in draw_keys}


@st.composite
def comm_docs(draw) -> Any:
    num = _numbers()
    doc: dict[str, Any] = {}
    for s in range(draw(st.integers(1, 2))):
        kinds: dict[str, Any] = {}
        for kind in draw(st.lists(st.sampled_from(["collective", "p2p"]), max_size=2, unique=True)):
            ops: dict[str, Any] = {}
            for i in range(draw(st.integers(0, 4))):
                key = draw(st.sampled_from([f"hcom_allReduce__{i}_0_1@18294791067709168601", f"send_{i}",
                                            f"hcom_broadcast_{i}@7", "Total Op Info"]))
                time = {"Start Timestamp(us)": draw(st.one_of(num, st.sampled_from([Num("1700000000478490.5"),
                                                                                    "1700000000000000.125"]))),
                        **{f: draw(num) for f in ("Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)",
                                                  "Synchronization Time(ms)", "Idle Time(ms)")}}
                time = _maybe(time, draw(st.lists(st.sampled_from(list(time)), max_size=6)))
                bands = {}
                for t in draw(st.lists(st.sampled_from(["RDMA", "HCCS", "PCIE", "SDMA", "sdma", "SIO", "LOCAL"]),
                                       max_size=4, unique=True)):
                    dist = draw(st.one_of(
                        st.just({}), st.none(),
                        st.dictionaries(st.sampled_from(["1.048576", "2", "0.5", "x", "1e-3"]),
                                        st.lists(num, max_size=3), max_size=2)))
                    band = {"Transit Size(MB)": draw(num), "Transit Time(ms)": draw(num),
                            "Bandwidth(GB/s)": draw(num), "Large Packet Ratio": draw(num), "Size Distribution": dist}
                    bands[t] = _maybe(band, draw(st.lists(st.sampled_from(list(band)), max_size=5)))
                info = {"Communication Time Info": draw(st.sampled_from([time, time, None])),
                        "Communication Bandwidth Info": draw(st.sampled_from([bands, bands, None]))}
                ops[key] = info
            kinds[kind] = ops
        doc[draw(st.sampled_from([f"step{s + 1}", "step", f" x{s} "]))] = kinds
    return doc


@st.composite
def matrix_docs(draw) -> Any:
    num = _numbers()
    doc: dict[str, Any] = {}
    for s in range(draw(st.integers(1, 2))):
        ops: dict[str, Any] = {}
        for i in range(draw(st.integers(0, 4))):
            name = f"hcom_allReduce__{i}_0_1"
            key = draw(st.sampled_from([f"{name}@18294791067709168601", f"{name}@999", name,
                                        f"{name}-top1@1", "Total Op Info"]))
            links: dict[str, Any] = {}
            for lk in draw(st.lists(st.sampled_from(["0-1", "1-1", "2-3", " 4 - 5 ", "bad", "0-99999999999"]),
                                    max_size=4, unique=True)):
                link = {"Op Name": draw(st.sampled_from([name, name, None, "other", "1.50"])),
                        "Transport Type": draw(st.sampled_from(["HCCS", "RDMA", None, ""])),
                        "Transit Size(MB)": draw(num), "Transit Time(ms)": draw(num), "Bandwidth(GB/s)": draw(num)}
                links[lk] = _maybe(link, draw(st.lists(st.sampled_from(list(link)), max_size=5)))
            ops[key] = links
        doc[f"step{s + 1}"] = {"collective": ops}
    return doc


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=comm_docs())
def test_random_communication_json_same_on_both_paths(doc, rank_dir, monkeypatch):
    read_both(rank_dir, "communication.json", dumps(doc), monkeypatch)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(doc=matrix_docs())
def test_random_communication_matrix_same_on_both_paths(doc, rank_dir, monkeypatch):
    read_both(rank_dir, "communication_matrix.json", dumps(doc), monkeypatch)


def test_a_value_longer_than_a_block_is_read_with_doubling_reads():
    """A value at depth >= 3 longer than a block is read again with the next read; the reads double while
    no call makes progress, so a 1.3 MB value in 4 KB blocks takes ~10 calls, not ~330."""
    doc = json.dumps({"step1": {"p2p": {"big": list(range(200_000))}}, "step2": {"p2p": {}}}).encode()
    sizes, steps = [], set()
    for t in comm_scan._trees(doc, 4096):
        sizes.append(len(t.kind))
        steps |= {t.strs[k] for k in t.key[t.depth == 1].tolist()}
    assert len(sizes) <= 12
    assert max(sizes) >= 3 + 1 + 200_000  # root, step1, p2p, then "big" and its elements in one tree
    assert steps == {"step1", "step2"}
