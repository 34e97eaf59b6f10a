"""The named views of one profile that the checks ask, instead of the tables (`CheckContext.view`).

Each member is typed and computed once per check run (a context: the profile and the ranks it is restricted
to), so two checks asking the same view share one query; callers must not modify what a member returns.
The pure-SQL views (`kept_step_windows`) are DuckDB views of the store itself (`analysis/schema.sql`), which
the members read and the `query` tool shows. A check's own derived data that another view (a tool, another
check) shares goes through `CheckContext.once`, keyed by its function, not through invented string keys.

Members: `breakdown`, `kept_steps`, `step_windows(ranks)`, `step_ms`, `device_timeline(rank)`,
`host_stalls(rank)`, `rows_per_rank(table)`, `replay` (the cross-rank graph of the kept steps and its null
replay), and for a batch of ranks (not kept: they hold rows per event,
and a check over many ranks reads them a batch at a time) `host_events(ranks)` and `launch_lookup(ranks)`.
The kinds of event (compute / communication kernels, the device working, AI Core tasks, host API calls,
kernel launches, SDMA transfers) are the store's views of those names: a check names the view instead of
restating the kind's filter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd

from ..metrics.breakdown import BreakdownRow, compute_breakdown
from ..replay import prepare
from ..replay.models import Replay
from ..replay.whatif import Step
from ..store import Profile
from ..thresholds import T
from ..timeline.arrays import by_value, rank_slices
from ..timeline.intervals import Coverage
from ..timeline.names import SYNC_RE
from ..units import NS_PER_MS

# Host calls that stall dispatch and have their own check (memory-ops, op-compile): late launches behind them
# are theirs, not host-bound's.
STALL_API_RE = re.compile(r"^(AscendCL@(aclMallocMemInner|aclrtFreePhysical|aclrtFree|aclopCompileAndExecute)|"
                          r"cudaMalloc|cudaFree|hipMalloc|hipFree|cuMemAlloc(_v2)?|cuMemFree(_v2)?)$")

# Host op categories that are the host doing work (not an enclosing annotation).
WORK_CATEGORIES = ("cpu_op", "runtime", "driver", "cann", "dataloader", "gc")

_WINDOW_COLUMNS = ["rank", "step", "start_ns", "end_ns", "w0", "w1"]
_HOST_EVENT_QUERY = ("SELECT rank, name, category, tid, start_ns, dur_ns FROM host_ops WHERE rank IN ({marks}) "
                     "ORDER BY rank, start_ns")


class ProfileView:
    """The views of `profile` on `ranks` (None: every rank) that checks share."""

    def __init__(self, profile: Profile, ranks: list[int] | None = None) -> None:
        self.profile = profile
        self.ranks = ranks
        self._windows: dict[tuple[int, ...], pd.DataFrame] = {}
        self._stalls: dict[int, Coverage] = {}
        self._rows: dict[str, dict[int, int]] = {}

    @cached_property
    def all_ranks(self) -> list[int]:
        return [r for r in self.profile.info.ranks if self.ranks is None or r in self.ranks]

    @cached_property
    def breakdown(self) -> list[BreakdownRow]:
        """The per-(rank, step) breakdown (metrics.breakdown), of the kept steps and the partial ones."""
        return compute_breakdown(self.profile, ranks=self.ranks)

    @cached_property
    def kept_steps(self) -> dict[int, list[int]]:
        """Rank -> its kept steps (ProfilerStep numbers) ascending, for every rank of the view."""
        out: dict[int, list[int]] = {r: [] for r in self.all_ranks}
        for rank, step in self.profile.rows("SELECT rank, step FROM kept_step_windows ORDER BY rank, step"):
            if rank in out:
                out[rank].append(int(step))
        return out

    def step_windows(self, ranks: list[int]) -> pd.DataFrame:
        """Kept steps of `ranks`: rank, step, host window (start_ns, end_ns) and device window (w0, w1: the one
        the breakdown uses; a step without one falls back to its host window), by rank and step."""
        key = tuple(int(r) for r in ranks)
        if key not in self._windows:
            self._windows[key] = self._step_windows(list(key))
        return self._windows[key]

    def _step_windows(self, ranks: list[int]) -> pd.DataFrame:
        if not ranks:
            return pd.DataFrame(columns=_WINDOW_COLUMNS)
        marks = ",".join("?" * len(ranks))
        st = self.profile.sql("SELECT rank, step, start_ns, end_ns, w0, w1 FROM kept_step_windows "
                              f"WHERE rank IN ({marks}) ORDER BY rank, step", list(ranks))
        for c in ("start_ns", "end_ns", "w0", "w1"):
            st[c] = st[c].astype("int64")
        return st[_WINDOW_COLUMNS]

    @cached_property
    def replay(self) -> tuple[list[Step], Replay] | None:
        """The job's cross-rank replay inputs per kept step and the null replay (`analysis.replay.prepare`), of
        every rank whatever the view's ranks (a rank's wait is set by the others); None where no collective
        is matched on two ranks. Shared with the report, what-if and the critical path."""
        return prepare(self.profile)

    @cached_property
    def step_ms(self) -> dict[tuple[int, int], float]:
        """(rank, step) -> host step time in ms, from the breakdown. On torch_npu ranks step_ms is the
        profiler's Stage + Bubble; host-side waits are weighed against the host step."""
        def host(r: BreakdownRow) -> float | None:
            return r.host_step_ms if getattr(r, "host_step_ms", None) is not None else r.step_ms

        return {(r.rank, int(r.step)): float(h) for r in self.breakdown
                if r.step is not None and (h := host(r)) is not None}

    def device_timeline(self, rank: int, *, exclude_sync: bool = True) -> DeviceTimeline:
        """The rank's merged device busy intervals (an empty timeline for a rank without device ops); built
        for every rank at once on first ask (one query grouped by rank is cheaper than one per rank)."""
        by_rank = self._timelines_without_sync if exclude_sync else self._timelines
        tl = by_rank.get(int(rank))
        return tl if tl is not None else DeviceTimeline(Coverage(np.empty(0, np.int64), np.empty(0, np.int64)))

    @cached_property
    def _timelines(self) -> dict[int, DeviceTimeline]:
        return self._all_timelines("")

    @cached_property
    def _timelines_without_sync(self) -> dict[int, DeviceTimeline]:
        # cuda_sync markers (Stream Sync...) are the device waiting, not working
        return self._all_timelines("WHERE category <> 'sync'")

    def _all_timelines(self, cond: str) -> dict[int, DeviceTimeline]:
        a = self.profile.arrays(f"SELECT rank, start_ns, dur_ns FROM device_ops {cond} ORDER BY rank")
        rank = np.asarray(a["rank"], dtype=np.int64)
        s = np.asarray(a["start_ns"], dtype=np.int64)
        e = s + np.asarray(a["dur_ns"], dtype=np.int64)
        return {r: DeviceTimeline(Coverage(s[i:j], e[i:j])) for r, i, j in rank_slices(rank)}

    def host_stalls(self, rank: int) -> Coverage:
        """Host intervals where a known stall held the host: GC, allocator and compile APIs, data loading, and
        silences of >= T.conjectured_gc_gpu_silence_ms with no host event on any thread (what an unrecorded
        GC looks like)."""
        r = int(rank)
        if r not in self._stalls:
            self._stalls[r] = self._host_stalls(r)
        return self._stalls[r]

    def _host_stalls(self, rank: int) -> Coverage:
        ev = self.host_events([rank])[rank]
        if ev.empty:
            return Coverage(np.empty(0, np.int64), np.empty(0, np.int64))
        s = ev["start_ns"].to_numpy(dtype=np.int64)
        e = s + ev["dur_ns"].to_numpy(dtype=np.int64)
        cat = ev["category"].to_numpy(dtype=object)
        stall = ((cat == "gc") | (cat == "dataloader")
                 | by_value(ev["name"], lambda n: STALL_API_RE.match(str(n)) or "dataloader" in str(n).lower()))
        q0, q1 = host_silences(ev, int(T.conjectured_gc_gpu_silence_ms.value * NS_PER_MS))
        return Coverage(np.concatenate((s[stall], q0)), np.concatenate((e[stall], q1)))

    def host_events(self, ranks: list[int]) -> dict[int, pd.DataFrame]:
        """Rank -> every host event of the rank (rank, name, category, tid, start_ns, dur_ns) by start time; one
        query for the batch, every rank of `ranks` present (an empty frame without events). Not kept."""
        if not ranks:
            return {}
        marks = ",".join("?" * len(ranks))
        df = self.profile.sql(_HOST_EVENT_QUERY.format(marks=marks), [int(r) for r in ranks])
        cuts = {r: (i, j) for r, i, j in rank_slices(df["rank"].to_numpy(dtype=np.int64))}
        return {int(r): df.iloc[slice(*cuts.get(int(r), (0, 0)))] for r in ranks}

    def launch_lookup(self, ranks: list[int]) -> dict[int, LaunchLookup]:
        """Rank -> which host call launched each device op, and when the host waited for the device, from the
        ranks' host API calls (one query; their order does not matter). Every rank of `ranks` is present (no
        call: nothing launched, nothing waited). Built by sorts over all ranks (rank first), not per rank.
        Not kept."""
        if not ranks:
            return {}
        marks = ",".join("?" * len(ranks))
        a = self.profile.arrays("SELECT rank, name, start_ns, dur_ns, correlation_id FROM host_api_calls "
                                f"WHERE rank IN ({marks})", [int(r) for r in ranks])
        rank = np.asarray(a["rank"], dtype=np.int64)
        hc, hs, hd = a["correlation_id"], np.asarray(a["start_ns"]), np.asarray(a["dur_ns"])
        ok = ~np.ma.getmaskarray(hc) if isinstance(hc, np.ma.MaskedArray) else np.ones(rank.size, dtype=bool)
        hc = np.ma.getdata(hc)
        lr, lc, ls = rank[ok], hc[ok].astype(np.int64), hs[ok].astype(np.int64)
        order = np.lexsort((ls, lc, lr))
        lr, lc, ls = lr[order], lc[order], ls[order]
        first = np.ones(lr.size, dtype=bool)     # the earliest launch of each (rank, id)
        first[1:] = (lr[1:] != lr[:-1]) | (lc[1:] != lc[:-1])
        lr, lc, ls = lr[first], lc[first], ls[first]
        is_sync = by_value(np.asarray(a["name"], dtype=object), lambda n: SYNC_RE.match(str(n)))
        sr = rank[is_sync]
        se = hs[is_sync].astype(np.int64) + hd[is_sync].astype(np.int64)
        order = np.lexsort((se, sr))
        sr, se = sr[order], se[order]
        launches = {r: (i, j) for r, i, j in rank_slices(lr)}
        syncs = {r: (i, j) for r, i, j in rank_slices(sr)}
        out: dict[int, LaunchLookup] = {}
        for r in ranks:
            i, j = launches.get(int(r), (0, 0))
            k, m = syncs.get(int(r), (0, 0))
            out[int(r)] = LaunchLookup(lc[i:j], ls[i:j], se[k:m])
        return out

    def rows_per_rank(self, table: str) -> dict[int, int]:
        """Rank -> its number of rows in `table` (a store table name, never user input)."""
        if table not in self._rows:
            self._rows[table] = {int(r): int(n) for r, n in
                                 self.profile.rows(f"SELECT rank, count(*) FROM {table} GROUP BY rank")}
        return self._rows[table]


@dataclass(frozen=True)
class LaunchLookup:
    """One rank's launches and waits: `launch_ids` (sorted correlation ids) with `launch_first` (the start ns
    of each id's earliest host launch call), for a vectorised lookup by searchsorted; `sync_end`, the sorted
    end ns of its synchronize calls (when the host had waited for the device by itself)."""

    launch_ids: np.ndarray
    launch_first: np.ndarray
    sync_end: np.ndarray

    def launched(self, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per correlation id in `ids` (int64, -1 for none): (was it launched by a recorded call, the start ns
        of that call, 0 where none)."""
        if self.launch_ids.size == 0:
            return np.zeros(ids.size, dtype=bool), np.zeros(ids.size, dtype=np.int64)
        i = np.minimum(np.searchsorted(self.launch_ids, ids), self.launch_ids.size - 1)
        has = (ids >= 0) & (self.launch_ids[i] == ids)
        return has, np.where(has, self.launch_first[i], 0)


@dataclass
class DeviceTimeline:
    """Merged busy intervals of one rank's device ops (sorted, disjoint, integer ns)."""

    cov: Coverage

    @property
    def starts(self) -> np.ndarray:
        return self.cov.s

    @property
    def ends(self) -> np.ndarray:
        return self.cov.e

    @property
    def empty(self) -> bool:
        return self.starts.size == 0

    def busy(self, w0: np.ndarray | int, w1: np.ndarray | int) -> np.ndarray:
        """Busy ns inside each window [w0, w1)."""
        a = np.atleast_1d(np.asarray(w0, dtype=np.int64))
        b = np.atleast_1d(np.asarray(w1, dtype=np.int64))
        return np.maximum(self.cov.within(a, b), 0)

    def idle(self, w0: np.ndarray | int, w1: np.ndarray | int) -> np.ndarray:
        """Idle ns inside each window [w0, w1)."""
        a = np.atleast_1d(np.asarray(w0, dtype=np.int64))
        b = np.atleast_1d(np.asarray(w1, dtype=np.int64))
        return np.maximum(b - a, 0) - self.busy(a, b)

    def idle_run_after(self, t: int, limit: int) -> tuple[int, int]:
        """(idle ns from t until the device next starts work, capped at `limit`; that start or limit).

        0 when the device is busy at t."""
        if self.empty:
            return max(limit - t, 0), limit
        i = int(np.searchsorted(self.starts, t, side="right"))
        if i > 0 and self.ends[i - 1] > t:
            return 0, t
        nxt = int(self.starts[i]) if i < self.starts.size else limit
        end = min(nxt, limit)
        return max(end - t, 0), end


def host_silences(ev: pd.DataFrame, min_ns: int) -> tuple[np.ndarray, np.ndarray]:
    """Intervals >= min_ns in which no host event of any thread starts or ends and no op that does work spans
    them: only annotations (ProfilerStep#N, record_function ranges, Python functions) are open. A long aten
    op, runtime call or dataloader fetch spanning a gap is the host working, not a silence."""
    empty = np.empty(0, np.int64)
    if ev.empty:
        return empty, empty
    s = ev["start_ns"].to_numpy(dtype=np.int64)
    e = s + ev["dur_ns"].to_numpy(dtype=np.int64)
    b = np.sort(np.concatenate((s, e)))
    b = b[np.r_[True, b[1:] != b[:-1]]] if b.size else b   # distinct boundaries (a sort beats np.unique's hash)
    if b.size < 2:
        return empty, empty
    cand = np.flatnonzero(np.diff(b) >= min_ns)
    if cand.size == 0:
        return empty, empty
    work = (ev["category"].isin(WORK_CATEGORIES).to_numpy()
            | by_value(ev["name"], lambda n: "dataloader" in str(n).lower()))
    # a gap [b_i, b_i+1] is work when an op that started at or before b_i is still open at b_i+1: the latest
    # end among the ops started by b_i (a running maximum over the ops sorted by start) reaches b_i+1
    order = np.argsort(s[work], kind="stable")
    ws, reach = s[work][order], np.maximum.accumulate(e[work][order]) if work.any() else e[work]
    j = np.searchsorted(ws, b[cand], side="right") - 1
    covered = (j >= 0) & (reach[np.clip(j, 0, None)] >= b[cand + 1]) if ws.size else np.zeros(cand.size, bool)
    idx = cand[~covered]
    return b[idx], b[idx + 1]
