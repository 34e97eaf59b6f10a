"""The Ascend readers' structure: each phase a module-level function of a frozen rank description and the
typed results of the phases before it (no mixins sharing state), and one struct-of-arrays type per event kind
(ascend_events) that both readers hand to the store. The numbers are read from the real files by hand (noted
beside each)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import pkgutil
from pathlib import Path
from typing import Any

import pytest

from conftest import SHARED, need
from stepdoctor.analysis.ingest import ascend_db, ascend_events, ascend_text
from stepdoctor.analysis.ingest.ascend_db.rank import DbRank, describe_db
from stepdoctor.analysis.ingest.ascend_text import metadata, trace_view
from stepdoctor.analysis.ingest.ascend_text.rank import RankDesc, describe
from stepdoctor.analysis.ingest.ascend_text.trace_groups import release
from stepdoctor.analysis.ingest.base import RankSource

ASC = SHARED / "real" / "ascend"
TEXT_L0 = ASC / "msinsight-pt-text-l0" / "rank0_ascend_pt"
DB_L0 = ASC / "msinsight-pt-db-l0" / "rank0_ascend_pt"
READERS = (ascend_text, ascend_db)


def _modules(pkg: Any) -> list[Any]:
    return [importlib.import_module(f"{pkg.__name__}.{m.name}") for m in pkgutil.iter_modules(pkg.__path__)]


def _classes() -> list[type]:
    return [c for pkg in READERS for mod in _modules(pkg) for _, c in inspect.getmembers(mod, inspect.isclass)
            if c.__module__ == mod.__name__]


def test_no_class_of_the_readers_has_several_bases():
    classes = _classes()
    assert len(classes) > 20
    several = [f"{c.__module__}.{c.__qualname__}" for c in classes if len(c.__bases__) > 1]
    assert several == []
    # and no base class of reader parts is left (the mixins' shared state lived there)
    names = {c.__name__ for c in classes}
    assert not names & {"ReaderBase", "TraceView", "DeviceOps", "CommunicationFiles", "MetadataFiles",
                        "HostTables", "DeviceTables", "StepTables", "AnalysisTables"}


TEXT_PHASES = {
    "metadata": ("profiler_info", "profiler_metadata", "device_info", "memory_record", "op_statistic",
                 "api_statistic", "operator_details", "operator_memory", "ranks_row"),
    "communication": ("step_trace_time", "communication", "communication_matrix"),
    "kernel_details": ("kernel_details", "device_ops"),
    "trace_view": ("trace", "trace_steps"),
    "reader": ("read",),
}
DB_PHASES = {"reader": ("run", "preflight"), "steps": ("derive_steps",), "host": ("ranks_row",)}


@pytest.mark.parametrize(("pkg", "phases", "desc"), [(ascend_text, TEXT_PHASES, "RankDesc"),
                                                     (ascend_db, DB_PHASES, "DbRank")])
def test_phases_are_module_functions_of_the_frozen_description(pkg, phases, desc):
    for module, names in phases.items():
        mod = importlib.import_module(f"{pkg.__name__}.{module}")
        for name in names:
            fn = getattr(mod, name)
            assert inspect.isfunction(fn) and fn.__qualname__ == name, f"{module}.{name}"
            first = next(iter(inspect.signature(fn).parameters.values()))
            assert first.name == "desc" and first.annotation == desc, f"{module}.{name}"


def test_the_rank_descriptions_and_phase_results_are_frozen(tmp_path: Path):
    (tmp_path / "ASCEND_PROFILER_OUTPUT").mkdir()
    (tmp_path / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").write_text("Name\n")
    desc = describe(RankSource(path=tmp_path, format="ascend_ms_text", rank=3))
    assert isinstance(desc, RankDesc)
    assert (desc.rank, desc.framework, desc.out.name) == (3, "mindspore", "ASCEND_PROFILER_OUTPUT")
    assert desc.present == {"kernel_details.csv"} and desc.has("kernel_details.csv")
    with pytest.raises(dataclasses.FrozenInstanceError):
        desc.rank = 0  # type: ignore[misc]
    (tmp_path / "ASCEND_PROFILER_OUTPUT" / "analysis.db").write_bytes(b"")
    db = describe_db(tmp_path / "ASCEND_PROFILER_OUTPUT" / "x.db", tmp_path, "pytorch", "ascend_pt_db")
    assert isinstance(db, DbRank) and db.name == "x.db" and db.analysis is not None
    assert db.text_files == ("kernel_details.csv",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        db.framework = "mindspore"  # type: ignore[misc]
    for result in (metadata.ProfilerInfo("pytorch"), metadata.DeviceInfo(), metadata.ProfilerMetadata(None),
                   ascend_events.CommOps(*[[]] * 7)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(result, dataclasses.fields(result)[0].name, None)


def _read_kinds(monkeypatch: pytest.MonkeyPatch, read: Any) -> tuple[Any, set[str]]:
    """The tables `read()` gives, and the ascend_events types its events were handed on as."""
    seen: set[str] = set()
    columns = ascend_events._Columns.columns

    def spy(self: Any) -> dict[str, Any]:
        seen.add(type(self).__name__)
        return columns(self)

    monkeypatch.setattr(ascend_events._Columns, "columns", spy)
    return read(), seen


def test_both_readers_hand_on_the_shared_event_types(monkeypatch: pytest.MonkeyPatch):
    for pkg in READERS:
        used = {n for mod in _modules(pkg) for n, v in vars(mod).items()
                if v in (ascend_events.HostOps, ascend_events.DeviceOps, ascend_events.CommOps,
                         ascend_events.CommTasks)}
        assert used == {"HostOps", "DeviceOps", "CommOps", "CommTasks"}, pkg.__name__
    t, kinds = _read_kinds(monkeypatch, lambda: ascend_text.read_rank(
        RankSource(path=need(TEXT_L0), format="ascend_pt_text", rank=0)))
    assert kinds == {"HostOps", "DeviceOps"}   # (Level0: no communication.json, no HCCL Plane tasks)
    assert t.count("device_ops") and t.count("host_ops")
    t, kinds = _read_kinds(monkeypatch, lambda: ascend_db.read_rank(
        RankSource(path=need(DB_L0), format="ascend_pt_db", rank=0)))
    assert kinds == {"HostOps", "DeviceOps", "CommOps", "CommTasks"}


def test_text_level0_rank0_numbers():
    """msinsight-pt-text-l0 rank 0, counted in the files: trace_view.json has 2460 X events on the Python
    process (durations summing to 2,426,393.990 µs) and 537 on Ascend Hardware + HCCL; kernel_details.csv
    has 191 rows (Duration(us) summing to 94,344.340), 189 of them at the start and name of a trace task.
    device_ops = the 191 rows + the 537 - 189 trace tasks no row matched."""
    frames = ascend_text.read_rank(RankSource(path=need(TEXT_L0), format="ascend_pt_text", rank=0)).frames()
    host, dev = frames["host_ops"], frames["device_ops"]
    assert (len(host), int(host["dur_ns"].sum())) == (2460, 2_426_393_990)
    assert len(dev) == 191 + 537 - 189
    kd = dev[dev["block_dim"].notna()]    # (a kernel_details column: its rows only)
    assert (len(kd), int(kd["dur_ns"].sum())) == (191, 94_344_340)


def test_db_level0_rank0_numbers():
    """msinsight-pt-db-l0 rank 0, counted with sqlite: 187 TASK ⋈ COMPUTE_TASK_INFO (8,843,910 ns), 4
    COMMUNICATION_OP (89,880,576 ns), 67 other TASK rows (168,102,800 ns); 713 CANN_API (98,317,540 ns) and
    2460 PYTORCH_API (2,477,251,730 ns)."""
    frames = ascend_db.read_rank(RankSource(path=need(DB_L0), format="ascend_pt_db", rank=0)).frames()
    host, dev = frames["host_ops"], frames["device_ops"]
    assert (len(dev), int(dev["dur_ns"].sum())) == (187 + 4 + 67, 8_843_910 + 89_880_576 + 168_102_800)
    assert (len(host), int(host["dur_ns"].sum())) == (713 + 2460, 98_317_540 + 2_477_251_730)
    assert dict(dev["category"].value_counts())["compute"] == 187


def test_a_released_trace_group_cannot_be_read(tmp_path: Path):
    """The trace's groups are freed by the phase that last reads them: reading one afterwards is a bug."""
    p = tmp_path / "trace_view.json"
    p.write_text('[{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "Python"}},\n'
                 ' {"ph": "X", "name": "a", "pid": 1, "tid": 1, "ts": "1.000", "dur": 1}]')
    tr = ascend_text.TraceParser(p).parse()
    assert list(tr.host.name) == ["a"]
    release(tr, "host")
    with pytest.raises(RuntimeError):
        len(tr.host.name)
    assert trace_view.labelled_device(tr) is None
