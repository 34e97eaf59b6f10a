"""The layouts discovery knows (analysis/ingest/discover/layouts.py): each format of the registry names the
layout that finds it, each layout's kinds have a builder, and a folder a layout claims as its own is offered to
no later layout."""

from __future__ import annotations

import json
from pathlib import Path

from stepdoctor.analysis.ingest.discover import BUILDERS, discover
from stepdoctor.analysis.ingest.discover.content import walk
from stepdoctor.analysis.ingest.discover.layouts import KINDS, LAYOUTS, walk_claims
from stepdoctor.analysis.ingest.formats import FORMATS, KINETO


def test_every_format_is_found_by_a_registered_layout_and_every_layout_finds_a_format() -> None:
    names = {x.name for x in LAYOUTS}
    assert {f.name: f.layout for f in FORMATS.values() if f.layout not in names} == {}
    assert names == {f.layout for f in FORMATS.values()}
    assert list(BUILDERS) == list(KINDS) and len(set(KINDS)) == len(KINDS)


def _kineto_trace(path: Path, rank: int) -> None:
    path.write_text(json.dumps({"distributedInfo": {"rank": rank}, "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0}]}))


def test_a_claimed_rank_folder_is_not_searched_for_traces(tmp_path: Path) -> None:
    rank = tmp_path / "node_0_ascend_pt"
    (rank / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    _kineto_trace(rank / "stray.json", 0)          # inside a rank folder: the rank folder's, not a trace
    _kineto_trace(tmp_path / "rank1.json", 1)      # beside it: a trace
    found, notes = walk_claims(walk(tmp_path))
    assert found["ascend_ranks"] == [rank] and found["kineto_traces"] == [tmp_path / "rank1.json"]
    assert notes == [] and not any(found[k] for k in KINDS if k not in ("ascend_ranks", "kineto_traces"))


def test_traces_two_levels_down_are_found_and_deeper_ones_are_not(tmp_path: Path) -> None:
    (tmp_path / "run" / "traces" / "deep").mkdir(parents=True)
    _kineto_trace(tmp_path / "run" / "traces" / "r0.json", 0)
    _kineto_trace(tmp_path / "run" / "traces" / "deep" / "r1.json", 1)
    disc = discover(tmp_path)
    assert disc.kind == KINETO and [s.path.name for s in disc.sources] == ["r0.json"]
