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
    rank = r["rank"].to_numpy()
    launch, start, end = (r[k].to_numpy(np.int64) for k in ("launch_ns", "start_ns", "end_ns"))
    sync = r["sync"].to_numpy(bool)
    latest = r.groupby("inst")["start_ns"].transform("max").to_numpy(np.int64)
    x = end - np.where(_waits(r), latest, start)
    pos = pd.Index(si.ranks).get_indexer(rank)
    step0 = np.asarray(si.start, np.int64)
    # a row's compute began where its rank resumed after the previous row (its end if the thread waited for
    # it, else its launch), or at the step start for the rank's first row
    after = np.where(sync, end, launch)
    w0, last = _prev_in_group([pos], after, step0[pos])
    c = launch - w0
    lane_free, _ = _prev_in_group([pos, r["lane"].to_numpy()], end, launch)
    q = start - np.maximum(launch, lane_free)
    resume = step0.copy()
    resume[pos[last]] = after[last]
    last_end = step0.copy()
    np.maximum.at(last_end, pos, end)
    tail_w0 = np.maximum(resume, last_end)
    t = np.asarray(si.end, np.int64) - tail_w0
    clipped = 0
    for arr in (c, q, x, t):
        neg = arr < 0
        clipped += int(neg.sum())
        arr[neg] = 0
    return Params(c, q, x, t, clipped, w0=w0, tail_w0=tail_w0)


def _prev_in_group(keys: list[np.ndarray], vals: np.ndarray, default: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row: `vals` of the previous row (in row order) with the same keys, else `default` of that row
    (integers kept exact: no float round trip); and the indexes of each group's last row."""
    n = len(vals)
    o = np.lexsort((np.arange(n), *reversed(keys)))   # lexsort's last key sorts first
    same = np.zeros(n, bool)
    if n > 1:
        same[1:] = np.logical_and.reduce([k[o][1:] == k[o][:-1] for k in keys])
    shifted = np.empty(n, np.int64)
    shifted[1:] = vals[o][:-1]
    shifted[:1] = 0
    out = np.empty(n, np.int64)
    out[o] = np.where(same, shifted, default[o])
    ends = np.r_[~same[1:], True] if n else np.zeros(0, bool)
    return out, o[ends]


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


# an instance with at most this many members is replayed member by member (numpy's per-call cost is more)
SCALAR_MEMBERS = 8
_NONE = np.iinfo(np.int64).min   # a lane that has run nothing yet this step


def replay(si: StepInput, p: Params, start: np.ndarray | None = None, trace: Trace | None = None) -> np.ndarray:
    """Replayed step end per rank (aligned with si.ranks), ns, the step starting at `start` per rank (default:
    as measured). The parameters are durations, so any start works; the order instances are taken in comes
    from the measured times, which is a topological order of the graph whatever the parameters."""
    st = _State(si, p, si.start if start is None else start, trace)
    r = si.rows
    inst = r["inst"].to_numpy()
    if len(r):
        by = np.argsort(inst, kind="stable")
        cut = np.flatnonzero(np.r_[True, inst[by][1:] != inst[by][:-1], True])
        members = {int(inst[by[b]]): by[b:e] for b, e in itertools.pairwise(cut)}
        for i in _instance_order(r):
            st.take(members[i])
    return st.finish()


class _State:
    """The replay's state per rank (by its position in si.ranks) and per (rank, lane), as arrays: an instance
    of many members is taken with array operations, one of few (or one whose members are not each their
    rank's next collective) member by member; both give the same times and the same Trace."""

    def __init__(self, si: StepInput, p: Params, start: np.ndarray, trace: Trace | None) -> None:
        r = si.rows
        n = len(r)
        self.p, self.trace, self.ranks = p, trace, si.ranks
        self.pos = pd.Index(si.ranks).get_indexer(r["rank"].to_numpy())
        self.lane = pd.MultiIndex.from_arrays([self.pos, r["lane"].to_numpy()]).factorize()[0] if n else \
            np.zeros(0, np.int64)
        self.sync, self.waits = r["sync"].to_numpy(bool), _waits(r)
        k = len(si.ranks)
        # per rank, its rows in launch order: rows are sorted by rank, then launch
        self.first = np.zeros(k, np.int64)
        self.stop = np.zeros(k, np.int64)
        if n:
            b = np.flatnonzero(np.r_[True, self.pos[1:] != self.pos[:-1]])
            self.first[self.pos[b]] = b
            self.stop[self.pos[b]] = np.r_[b[1:], n]
        self.has = np.zeros(k, bool)
        self.has[self.pos] = True
        self.nxt = self.first.copy()
        self.resume = np.asarray(start, np.int64).copy()
        self.came = np.full(k, -1, np.int64)   # the row whose end (sync) or launch (async) the rank resumes from
        self.last_end, self.last_row = self.resume.copy(), np.full(k, -1, np.int64)
        self.free_end = np.full(int(self.lane.max()) + 1 if n else 0, _NONE, np.int64)
        self.free_row = np.full(len(self.free_end), -1, np.int64)
        self.launch = np.zeros(n, np.int64)
        self.end = np.full(n, -1, np.int64)

    def advance(self, q: int, upto: int) -> None:
        """Launch times of rank position q's collectives up to row `upto`. A sync collective's end is known once
        it is replayed; the one being replayed now resumes at its launch until then (fixed in `take`)."""
        j = int(self.nxt[q])
        while j <= upto:
            self.launch[j] = self.resume[q] + self.p.c[j]
            if self.trace is not None:
                self.trace.launch_from[j] = int(self.came[q])
            self.resume[q] = self.end[j] if self.sync[j] and self.end[j] >= 0 else self.launch[j]
            self.came[q] = j
            j += 1
        self.nxt[q] = max(int(self.nxt[q]), j)

    def take(self, js: np.ndarray) -> None:
        ps = self.pos[js]
        if len(js) <= SCALAR_MEMBERS or not np.array_equal(self.nxt[ps], js) or len(np.unique(ps)) < len(ps):
            return self._take_each(js)
        p, tr = self.p, self.trace
        lt = self.resume[ps] + p.c[js]
        self.launch[js] = lt
        if tr is not None:
            tr.launch_from.update(zip(js.tolist(), self.came[ps].tolist(), strict=True))
        self.resume[ps] = lt
        self.came[ps] = js
        self.nxt[ps] = js + 1
        lk = self.lane[js]
        fe = self.free_end[lk]
        lf = np.where(fe == _NONE, lt, fe)
        if tr is not None:
            later = lf > lt
            tr.lane_from.update(zip(js[later].tolist(), self.free_row[lk[later]].tolist(), strict=True))
        starts = np.maximum(lt, lf) + p.q[js]
        m = int(np.argmax(starts))
        w = self.waits[js]
        et = np.where(w, starts[m], starts) + p.x[js]
        self.end[js] = et
        if tr is not None:
            tr.ready_from.update(zip(js.tolist(), np.where(w, js[m], js).tolist(), strict=True))
        self.free_end[lk], self.free_row[lk] = et, js
        up = et > self.last_end[ps]
        self.last_end[ps[up]], self.last_row[ps[up]] = et[up], js[up]
        s = self.sync[js]
        self.resume[ps[s]] = et[s]

    def _take_each(self, js: np.ndarray) -> None:
        p, tr = self.p, self.trace
        starts = []
        for j in js.tolist():
            q = int(self.pos[j])
            self.advance(q, j)
            lk = int(self.lane[j])
            lf = int(self.free_end[lk]) if self.free_end[lk] != _NONE else int(self.launch[j])
            if tr is not None and lf > self.launch[j]:
                tr.lane_from[j] = int(self.free_row[lk])
            starts.append(max(int(self.launch[j]), lf) + int(p.q[j]))
        ready = max(starts)
        last = int(js[int(np.argmax(starts))])
        for j, own in zip(js.tolist(), starts, strict=True):
            q, lk = int(self.pos[j]), int(self.lane[j])
            self.end[j] = (ready if self.waits[j] else own) + p.x[j]
            if tr is not None:
                tr.ready_from[j] = last if self.waits[j] else j
            self.free_end[lk], self.free_row[lk] = self.end[j], j
            if self.end[j] > self.last_end[q]:
                self.last_end[q], self.last_row[q] = self.end[j], j
            if self.sync[j] and self.nxt[q] == j + 1:
                self.resume[q] = self.end[j]

    def finish(self) -> np.ndarray:
        for q in np.flatnonzero(self.has).tolist():
            self.advance(q, int(self.stop[q]) - 1)
        out = np.maximum(self.resume, self.last_end) + self.p.t
        tr = self.trace
        if tr is not None:
            for q, rk in enumerate(self.ranks.tolist()):
                # the tail follows the later of the rank's own resume point and its last collective's end
                tr.end_from[int(rk)] = ((int(self.last_row[q]), True) if self.last_end[q] >= self.resume[q]
                                        else (int(self.came[q]), False))
            tr.launch, tr.end = self.launch, self.end
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
