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
