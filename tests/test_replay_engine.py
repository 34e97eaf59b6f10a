"""The replay engine's two ways to take an instance: with array operations (many members, each its rank's next
collective) and member by member (few members, a rank twice in one instance, a member behind its rank's next
collective). Both must give the same replayed times and the same Trace (the critical path reads it), on a real
8-rank recording and on a generated step with async collectives, two lanes per rank and P2P pairs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import need
from stepdoctor.analysis.replay import engine, prepare
from stepdoctor.analysis.replay.inputs import StepInput
from stepdoctor.tools import api

CPU = Path(__file__).parent / "data" / "real_cpu"


def _generated(n_ranks: int = 48, n_coll: int = 12, seed: int = 3) -> StepInput:
    """A step whose measured times follow the engine's own model, so its null replay is exact: per rank,
    collectives on two lanes (odd ones async: the thread goes on at the launch), then a send / recv pair
    between neighbours."""
    rng = np.random.default_rng(seed)
    start = rng.integers(0, 2_000_000, n_ranks)
    rows = []
    resume = start.copy()
    free = np.zeros((n_ranks, 2), np.int64)
    for k in range(n_coll):
        lane = k % 2
        launch = resume + rng.integers(100_000, 900_000, n_ranks)
        st = np.maximum(launch, free[:, lane]) + rng.integers(0, 20_000, n_ranks)
        end = st.max() + rng.integers(50_000, 80_000, n_ranks)
        sync = k % 2 == 0
        for r in range(n_ranks):
            rows.append((r, k, launch[r], st[r], end[r], lane, sync, True))
        free[:, lane] = end
        resume = np.where(sync, end, launch)
    for r in range(0, n_ranks - 1, 2):      # P2P pairs: two members, taken one by one
        a = max(int(resume[r]), int(free[r, 0])) + 10_000
        b = max(int(resume[r + 1]), int(free[r + 1, 0])) + 10_000
        end = max(a, b) + 30_000
        rows += [(r, n_coll + r, a, a, end, 0, True, True), (r + 1, n_coll + r, b, b, end, 0, True, True)]
    df = pd.DataFrame(rows, columns=["rank", "inst", "launch_ns", "start_ns", "end_ns", "lane", "sync", "waits"])
    df = df.sort_values(["rank", "launch_ns", "inst"], kind="stable").reset_index(drop=True)
    last = df.groupby("rank")["end_ns"].max().reindex(range(n_ranks)).to_numpy()
    return StepInput(step=1, ranks=np.arange(n_ranks), start=start, end=last + 500_000, rows=df)


def _both_ways(si: StepInput, p: engine.Params, monkeypatch) -> None:
    got = []
    for limit in (10**9, 0):        # every instance member by member; every one it can with arrays
        monkeypatch.setattr(engine, "SCALAR_MEMBERS", limit)
        tr = engine.Trace()
        got.append((engine.replay(si, p, trace=tr), tr))
    (a, ta), (b, tb) = got
    assert np.array_equal(a, b)
    assert ta.launch_from == tb.launch_from and ta.lane_from == tb.lane_from
    assert ta.ready_from == tb.ready_from and ta.end_from == tb.end_from
    assert np.array_equal(ta.launch, tb.launch) and np.array_equal(ta.end, tb.end)


def test_generated_step_null_replay_is_exact_and_both_ways_agree(monkeypatch):
    si = _generated()
    p = engine.measure(si)
    assert p.clipped == 0
    assert np.array_equal(engine.replay(si, p), si.end)
    rng = np.random.default_rng(7)
    for _ in range(5):
        moved = replace(p, c=(p.c * rng.uniform(0, 2, len(p.c))).astype(np.int64),
                        x=(p.x * rng.uniform(0, 2, len(p.x))).astype(np.int64),
                        t=(p.t * rng.uniform(0, 2, len(p.t))).astype(np.int64))
        _both_ways(si, moved, monkeypatch)
    # rank 5 5 ms later before its first collective: the step grows by the 5 ms less rank 5's slack there (the
    # time it waited for the last member), never more
    late = p.c.copy()
    first = (si.rows["rank"] == 5) & (si.rows["inst"] == 0)
    late[si.rows.index[first]] += 5_000_000
    c0 = si.rows[si.rows["inst"] == 0]
    slack = int(c0["start_ns"].max() - c0.loc[first, "start_ns"].iloc[0])
    grew = engine.step_ms(si.start, engine.replay(si, replace(p, c=late))) - engine.step_ms(si.start, si.end)
    assert (5_000_000 - slack) / 1e6 - 1e-6 <= grew <= 5.0 + 1e-6


@pytest.mark.parametrize("run", ["dp8_slowrank_1step", "dp4_slowrank", "dp2pp2_heavy"])
def test_real_recordings_both_ways_agree(run, monkeypatch):
    steps, _ = prepare(api.load(need(CPU / run / "traces")))
    rng = np.random.default_rng(1)
    for s in steps:
        _both_ways(s.si, s.p, monkeypatch)
        _both_ways(s.si, replace(s.p, c=(s.p.c * rng.uniform(0, 2, len(s.p.c))).astype(np.int64)), monkeypatch)


def test_measure_keeps_nanoseconds_exact_at_epoch_scale():
    """Kineto's clocks are ns since the epoch (~1.8e18): beyond a float's 2^53 the parameters must stay integer."""
    si = _generated(n_ranks=4, n_coll=4)
    shift = 1_800_000_000_000_000_000
    far = replace(si, start=si.start + shift, end=si.end + shift,
                  rows=si.rows.assign(**{k: si.rows[k] + shift for k in ("launch_ns", "start_ns", "end_ns")}))
    a, b = engine.measure(si), engine.measure(far)
    for k in ("c", "q", "x", "t"):
        assert np.array_equal(getattr(a, k), getattr(b, k)), k
    assert np.array_equal(engine.replay(far, b), far.end)
