"""Replay one step of a multi-rank job from its collectives: a dependency graph across ranks, run forward.

Per rank, its collectives in launch order j = 0..n-1 (`inputs.StepInput`), with four measured parameters:
  c[j]  compute before the launch: launch[j] - resume[j-1], where resume[j] = end[j] if the issuing thread
        waited for it (sync), else launch[j]; resume[-1] = the rank's step start (data loading, host stalls
        and untraced time are in here: they are whatever held the rank before it asked);
  q[j]  the lane's start latency: start[j] - max(launch[j], the end of the previous collective on its lane);
  x[j]  its own transfer time: end[j] - the latest start over the members (the wait for the last member is
        not in it: it is what the replay recomputes); for a row that does not wait for the others (a send
        the transport buffered, `p2p`), end[j] - its own start;
  t     the tail: step end - max(resume[n-1], every collective's end) (the optimizer after the last wait).
Replay (clocks aligned): launch'[j] = resume'[j-1] + c[j]; start'[j] = max(launch'[j], lane free') + q[j];
end'[j] = max over members of start' (own start' where it does not wait) + x[j]; step end' = max(resume'[n-1], ends') + t; the step time is the
slowest rank's end' - its step start. With the measured parameters this returns the measured step (the null
replay), up to what the model does not hold (clipped negative parameters, clocks, ops outside the chain):
that error is reported, and a step whose error is too large is not used for any answer.
Instances are taken in the order of their latest measured start: a collective that waits for another on some
rank started after that one ended everywhere, so its inputs are ready when it is taken.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .inputs import StepInput


@dataclass
class Params:
    """The replay's parameters of one step, as columns beside `StepInput.rows` (c, q, x) and per rank (t)."""

    c: np.ndarray
    q: np.ndarray
    x: np.ndarray
    t: np.ndarray          # per rank, aligned with StepInput.ranks
    clipped: int = 0       # measured parameters that were negative and set to 0
    lead: np.ndarray | None = None   # per rank: a shift of the step's start where no replayed step precedes it
    #                                  (a rank late into the first step was late in the step before it)
    w0: np.ndarray | None = None     # per row: where the measured compute c[j] began (resume[j-1]), ns
    tail_w0: np.ndarray | None = None   # per rank: where the measured tail began, ns


def measure(si: StepInput) -> Params:
    r = si.rows
    n = len(r)
    c = np.zeros(n, np.int64)
    q = np.zeros(n, np.int64)
    clipped = 0
    rank = r["rank"].to_numpy()
    launch, start, end = (r[k].to_numpy(np.int64) for k in ("launch_ns", "start_ns", "end_ns"))
    lane, sync = r["lane"].to_numpy(), r["sync"].to_numpy(bool)
    latest = r.groupby("inst")["start_ns"].transform("max").to_numpy(np.int64)
    x = end - np.where(_waits(r), latest, start)
    pos = {int(rk): i for i, rk in enumerate(si.ranks)}
    t = np.zeros(len(si.ranks), np.int64)
    resume = {int(rk): int(si.start[i]) for i, rk in enumerate(si.ranks)}
    last_end = dict(resume)
    free: dict[tuple[int, int], int] = {}
    w0 = np.zeros(n, np.int64)
    for j in range(n):
        rk = int(rank[j])
        w0[j] = resume[rk]
        c[j] = launch[j] - resume[rk]
        lf = free.get((rk, int(lane[j])))
        q[j] = start[j] - max(launch[j], lf if lf is not None else launch[j])
        resume[rk] = int(end[j]) if sync[j] else int(launch[j])
        free[(rk, int(lane[j]))] = int(end[j])
        last_end[rk] = max(last_end[rk], int(end[j]))
    tail_w0 = np.zeros(len(si.ranks), np.int64)
    for rk, i in pos.items():
        tail_w0[i] = max(resume[rk], last_end[rk])
        t[i] = si.end[i] - tail_w0[i]
    for arr in (c, q, x, t):
        neg = arr < 0
        clipped += int(neg.sum())
        arr[neg] = 0
    return Params(c, q, x, t, clipped, w0=w0, tail_w0=tail_w0)


TAIL = -1   # the instance id of a rank's tail window in `windows`


def windows(si: StepInput, p: Params) -> pd.DataFrame:
    """rank, inst, w0, w1 (ns, on the rank's own clock, as the store holds its ops) of every measured compute
    window: before each collective (inst), and the tail (inst TAIL). What a rank did there is what a what-if
    moves."""
    assert p.w0 is not None and p.tail_w0 is not None
    r = si.rows
    back = own_clock(si)
    rank = r["rank"].to_numpy()
    before = pd.DataFrame({"rank": rank, "inst": r["inst"].to_numpy(), "w0": p.w0 - back(rank),
                           "w1": r["launch_ns"].to_numpy(np.int64) - back(rank)})
    tail = pd.DataFrame({"rank": si.ranks, "inst": TAIL, "w0": p.tail_w0 - back(si.ranks),
                         "w1": si.end - back(si.ranks)})
    return pd.concat([before, tail], ignore_index=True)


def own_clock(si: StepInput):
    """ranks -> the ns to subtract from a shared-clock time to put it back on each rank's own clock."""
    off = dict(zip(si.ranks.tolist(), si.offset.tolist(), strict=True)) if si.offset is not None else {}
    return lambda ranks: np.array([off.get(int(x), 0) for x in ranks], np.int64)


@dataclass
class Trace:
    """What set each replayed time (row indexes into StepInput.rows; -1 = the rank's step start): filled by
    `replay` for the critical path."""

    launch_from: dict[int, int] = field(default_factory=dict)    # row -> the row its compute followed
    lane_from: dict[int, int] = field(default_factory=dict)      # row -> the row whose end freed its lane
    ready_from: dict[int, int] = field(default_factory=dict)     # row -> the member row whose start its own
    #                                                                transfer followed (the last to start, or itself)
    end_from: dict[int, tuple[int, bool]] = field(default_factory=dict)   # rank -> (row, True: that row's end;
    #                                                                          False: the rank resumed after it)
    launch: np.ndarray | None = None
    end: np.ndarray | None = None


def replay(si: StepInput, p: Params, start: np.ndarray | None = None, trace: Trace | None = None) -> np.ndarray:
    """Replayed step end per rank (aligned with si.ranks), ns, the step starting at `start` per rank (default:
    as measured). The parameters are durations, so any start works; the order instances are taken in comes
    from the measured times, which is a topological order of the graph whatever the parameters."""
    start = si.start if start is None else start
    r = si.rows
    rank = r["rank"].to_numpy()
    inst = r["inst"].to_numpy()
    lane, sync = r["lane"].to_numpy(), r["sync"].to_numpy(bool)
    waits = _waits(r)
    order = _instance_order(r)
    # per rank, the row indexes in launch order (rows are sorted by rank, then launch)
    bounds = np.flatnonzero(np.r_[True, rank[1:] != rank[:-1], True]) if len(r) else np.array([0])
    chain = {int(rank[b]): (b, e) for b, e in itertools.pairwise(bounds)} if len(r) else {}
    by_inst: dict[int, list[int]] = {}
    for j, i in enumerate(inst):
        by_inst.setdefault(int(i), []).append(j)
    pos = {int(rk): i for i, rk in enumerate(si.ranks)}
    resume = {rk: int(start[i]) for rk, i in pos.items()}
    nxt = {rk: chain[rk][0] if rk in chain else 0 for rk in pos}
    launch_r = np.zeros(len(r), np.int64)
    end_r = np.full(len(r), -1, np.int64)
    free: dict[tuple[int, int], tuple[int, int]] = {}   # (rank, lane) -> (end, row)
    last_end = {rk: (v, -1) for rk, v in resume.items()}
    came = {rk: -1 for rk in pos}   # the row whose end (sync) or launch (async) the rank resumes from

    def advance(rk: int, upto: int) -> None:
        """Launch times of rank rk's collectives up to row `upto`. A sync collective's end is known once it
        is replayed; the one being replayed now resumes at its launch until then (fixed below)."""
        j = nxt[rk]
        while j <= upto:
            launch_r[j] = resume[rk] + p.c[j]
            if trace is not None:
                trace.launch_from[j] = came[rk]
            resume[rk] = int(end_r[j]) if sync[j] and end_r[j] >= 0 else int(launch_r[j])
            came[rk] = j
            j += 1
        nxt[rk] = max(nxt[rk], j)

    for i in order:
        members = by_inst[i]
        starts = []
        for j in members:
            rk = int(rank[j])
            advance(rk, j)
            lf, lrow = free.get((rk, int(lane[j])), (int(launch_r[j]), -1))
            if trace is not None and lf > launch_r[j]:
                trace.lane_from[j] = lrow
            starts.append(max(int(launch_r[j]), lf) + int(p.q[j]))
        ready = max(starts)
        last = members[int(np.argmax(starts))]
        for j, own in zip(members, starts, strict=True):
            rk = int(rank[j])
            end_r[j] = (ready if waits[j] else own) + p.x[j]
            if trace is not None:
                trace.ready_from[j] = last if waits[j] else j
            free[(rk, int(lane[j]))] = (int(end_r[j]), j)
            if end_r[j] > last_end[rk][0]:
                last_end[rk] = (int(end_r[j]), j)
            if sync[j] and nxt[rk] == j + 1:
                resume[rk] = int(end_r[j])
    out = np.zeros(len(si.ranks), np.int64)
    for rk, i in pos.items():
        if rk in chain:
            advance(rk, chain[rk][1] - 1)
        out[i] = max(resume[rk], last_end[rk][0]) + p.t[i]
        if trace is not None:
            # the tail follows the later of the rank's own resume point and its last collective's end
            trace.end_from[rk] = (last_end[rk][1], True) if last_end[rk][0] >= resume[rk] else (came[rk], False)
    if trace is not None:
        trace.launch, trace.end = launch_r, end_r
    return out


def _waits(r: pd.DataFrame) -> np.ndarray:
    """Per row: whether its transfer waits for the last member to start (else it follows its own start)."""
    return r["waits"].to_numpy(bool) if "waits" in r.columns else np.ones(len(r), bool)


def _instance_order(r: pd.DataFrame) -> list[int]:
    if r.empty:
        return []
    g = r.groupby("inst")["start_ns"].agg(["max", "min"]).sort_values(["max", "min"], kind="stable")
    return [int(i) for i in g.index]


def step_ms(start: np.ndarray, ends: np.ndarray) -> float:
    """The step time: the slowest rank's step end minus its own step start (ms)."""
    return float(np.max(ends - start)) / 1e6 if len(ends) else 0.0
