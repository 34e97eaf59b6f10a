"""The named views checks ask (analysis/checks/view.py): each member equals what its definition says, read
independently from the tables; the SQL view is in the store; shared derived data is computed once."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO
from stepdoctor.analysis.checks.base import CheckContext
from stepdoctor.analysis.timeline.intervals import merge


@pytest.fixture(scope="module")
def late(gen):
    """A generated 2-rank Kineto profile with a slow rank (device ops, host ops, kept steps and the dropped
    last one), the one test_exposed_comm_tail.py also asks for."""
    return gen("slow-rank", vendor="kineto", steps=3, layers=1)


def test_kept_steps_and_windows_are_the_steps_table(late) -> None:
    prof = late.profile
    view = CheckContext(prof).view
    rows = prof.rows("SELECT rank, step, start_ns, end_ns, device_start_ns, device_end_ns FROM steps "
                     "WHERE kept ORDER BY rank, step")
    assert rows, "the generated profile keeps no step"
    assert view.kept_steps == {r: [int(s) for rr, s, *_ in rows if rr == r] for r in prof.info.ranks}
    w = view.step_windows([0, 1])
    assert [tuple(x) for x in w[["rank", "step", "start_ns", "end_ns", "w0", "w1"]].itertuples(index=False)] == [
        (r, s, a, b, a if d0 is None else d0, b if d1 is None else d1) for r, s, a, b, d0, d1 in rows]
    assert str(w["w0"].dtype) == "int64" and view.step_windows([0, 1]) is w   # computed once
    assert view.step_windows([]).empty
    # the SQL view is the store's own, so the query tool and the replay read the same windows
    assert prof.rows("SELECT count(*) FROM kept_step_windows")[0][0] == len(rows)


def test_device_timeline_is_the_merged_device_ops(late) -> None:
    prof = late.profile
    view = CheckContext(prof).view
    for rank in prof.info.ranks:
        ops = prof.rows("SELECT start_ns, start_ns + dur_ns FROM device_ops WHERE rank = ? AND category <> 'sync' "
                        "ORDER BY start_ns", [rank])
        s, e = merge(np.array([a for a, _ in ops], np.int64), np.array([b for _, b in ops], np.int64))
        tl = view.device_timeline(rank)
        assert (tl.starts.tolist(), tl.ends.tolist()) == (s.tolist(), e.tolist())
        lo, hi = int(s[0]), int(e[-1])
        assert int(tl.busy(lo, hi)[0]) == int((e - s).sum())
        assert int(tl.idle(lo, hi)[0]) == (hi - lo) - int((e - s).sum())
    assert view.device_timeline(99).empty   # a rank without device ops: an empty timeline, not an error


def test_host_stalls_and_step_ms_follow_their_definitions(late) -> None:
    prof = late.profile
    ctx = CheckContext(prof)
    view = ctx.view
    assert view.step_ms == {(r.rank, int(r.step)): float(r.host_step_ms if r.host_step_ms is not None
                                                         else r.step_ms)
                            for r in ctx.breakdown if r.step is not None and r.step_ms is not None}
    spans = 0
    for rank in prof.info.ranks:
        stalls = view.host_stalls(rank)
        assert view.host_stalls(rank) is stalls
        dl = prof.rows("SELECT start_ns, start_ns + dur_ns FROM host_ops WHERE rank = ? AND "
                       "(category IN ('gc', 'dataloader') OR lower(name) LIKE '%dataloader%')", [rank])
        # every recorded GC and data-loader span is a stall
        for a, b in dl:
            assert int(stalls.within(np.array([a]), np.array([b]))[0]) == b - a
        spans += len(dl)
    assert spans, "the generated profile records no data-loader span"
    assert view.rows_per_rank("device_ops") == {r: n for r, n in prof.rows(
        "SELECT rank, count(*) FROM device_ops GROUP BY rank")}


def test_shared_derived_data_is_computed_once_per_context(late) -> None:
    calls: list[tuple] = []

    def derived(ctx: CheckContext, rank: int) -> int:
        calls.append((rank,))
        return rank * 2

    ctx = CheckContext(late.profile)
    assert [ctx.once(derived, 1), ctx.once(derived, 1), ctx.once(derived, 2)] == [2, 2, 4]
    assert calls == [(1,), (2,)]
    assert CheckContext(late.profile).once(derived, 1) == 2 and len(calls) == 3   # per context


def test_checks_ask_the_view_not_invented_memo_keys() -> None:
    """No check memoises under a string key or re-derives the kept steps' windows from the steps table: the
    view and CheckContext.once are the one place."""
    checks = Path(REPO) / "analysis" / "checks"
    offenders = []
    for path in sorted(checks.glob("*.py")):
        if path.name == "view.py":
            continue
        text = path.read_text(encoding="utf-8")
        if re.search(r"\.memo\(|\bsteps WHERE kept\b|FROM steps\b[^\"']*\bkept\b", text):
            offenders.append(path.name)
    assert offenders == []


# Kinds the store's views define (analysis/schema.sql): restating one of them in a query elsewhere is a second
# definition. Patterns over the SQL text with the Python string joins removed (one statement reads as one line).
_RESTATED_KINDS = {
    "device_work / compute_kernels / comm_kernels": re.compile(
        r"FROM device_ops\b(?:(?!SELECT|FROM).){0,240}?\bcategory\s*(=\s*'(compute|communication)'|<>\s*'sync')"),
    "host_api_calls": re.compile(r"(?<!NOT )IN \(\s*'(runtime|driver|cann)',"),
    "kernel_launches": re.compile(r"\bcorrelation_id\s*=\s*\w+\.correlation_id"),
    "ai_core_tasks": re.compile(r"'AI_VECTOR_CORE'"),
    "sdma_transfers": re.compile(r"comm_bandwidth\b(?:(?!SELECT).){0,240}?transport\)?\s*=\s*'SDMA'"),
}


def _sql_text(path: Path) -> str:
    """The file with adjacent string literals joined, so a query written over several lines reads as one."""
    text = path.read_text(encoding="utf-8")
    return re.sub(r"[\"']\s*\n\s*f?[\"']", "", text)


def test_a_kind_of_event_is_defined_once_by_its_view() -> None:
    """Checks, compare, replay, metrics and the front ends name the store's view of a kind of event instead of
    restating its filter (the readers, which assign the kinds, and the schema itself excepted)."""
    offenders = []
    for folder in ("analysis/checks", "analysis/compare", "analysis/replay", "analysis/metrics", "tools", "server"):
        for path in sorted((Path(REPO) / folder).rglob("*.py")):
            text = _sql_text(path)
            offenders += [f"{path.relative_to(REPO)}: {view}" for view, rx in _RESTATED_KINDS.items()
                          if rx.search(text)]
    assert offenders == []


def test_the_kind_views_are_their_definitions(late) -> None:
    """Each kind view holds exactly the rows its definition selects, read from the tables here."""
    prof = late.profile

    def count(sql: str) -> int:
        return int(prof.rows(sql)[0][0])

    assert count("SELECT count(*) FROM compute_kernels") == count(
        "SELECT count(*) FROM device_ops WHERE category = 'compute'") > 0
    assert count("SELECT count(*) FROM comm_kernels") == count(
        "SELECT count(*) FROM device_ops WHERE category = 'communication'") > 0
    assert count("SELECT count(*) FROM device_work") == count(
        "SELECT count(*) FROM device_ops WHERE category <> 'sync'") > 0
    assert count("SELECT count(*) FROM host_api_calls") == count(
        "SELECT count(*) FROM host_ops WHERE category IN ('runtime', 'driver', 'cann')") > 0
    # every launched device op once per launching call, with that call's thread and start
    got = prof.sql("SELECT rank, correlation_id, tid, launch_ns, start_ns FROM kernel_launches "
                   "ORDER BY rank, correlation_id, launch_ns")
    want = prof.sql("SELECT d.rank, d.correlation_id, h.tid, h.start_ns AS launch_ns, d.start_ns FROM device_ops d "
                    "JOIN host_ops h ON h.rank = d.rank AND h.correlation_id = d.correlation_id "
                    "WHERE h.category IN ('runtime', 'driver', 'cann') ORDER BY 1, 2, 4")
    assert len(got) > 0 and got.to_dict("list") == want.to_dict("list")
    assert (got["launch_ns"] <= got["start_ns"]).all()   # a kernel starts after the call that queued it


def test_launch_lookup_finds_each_ops_earliest_launch_and_the_syncs(late) -> None:
    """launch_lookup: the earliest launching call per correlation id, and the sorted ends of the synchronize
    calls, per rank, every asked rank present."""
    prof = late.profile
    view = CheckContext(prof).view
    ranks = list(prof.info.ranks)
    got = view.launch_lookup([*ranks, 99])
    assert got[99].launch_ids.size == 0 and got[99].sync_end.size == 0
    for r in ranks:
        first = prof.sql("SELECT correlation_id, min(start_ns) AS t FROM host_ops WHERE rank = ? AND category "
                         "IN ('runtime', 'driver') AND correlation_id IS NOT NULL GROUP BY 1 ORDER BY 1", [r])
        assert got[r].launch_ids.tolist() == first["correlation_id"].tolist()
        assert got[r].launch_first.tolist() == first["t"].tolist()
        has, at = got[r].launched(np.array([int(first["correlation_id"].iloc[0]), -1], dtype=np.int64))
        assert has.tolist() == [True, False] and int(at[0]) == int(first["t"].iloc[0])
        syncs = prof.sql("SELECT start_ns + dur_ns AS e FROM host_ops WHERE rank = ? AND name LIKE '%Synchronize' "
                         "ORDER BY e", [r])
        assert got[r].sync_end.tolist() == syncs["e"].tolist()


def test_host_events_are_every_host_op_of_each_rank(late) -> None:
    prof = late.profile
    ranks = list(prof.info.ranks)
    got = CheckContext(prof).view.host_events(ranks)
    for r in ranks:
        n = int(prof.rows("SELECT count(*) FROM host_ops WHERE rank = ?", [r])[0][0])
        assert len(got[r]) == n > 0 and (got[r]["rank"] == r).all()
        assert got[r]["start_ns"].is_monotonic_increasing
