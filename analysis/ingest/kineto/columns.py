"""The folded trace as one set of numpy columns (`Trace`), and the joins the tables need: the ProfilerStep
windows, each device op's launch, the HTA device windows, and the ranks row.

Times are integer ns on the trace's clock; `NONE` marks an absent int64 value."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..base import RankTables
from ..formats import KINETO
from .events import EPOCH_US, us_to_ns
from .folder import NONE, Folder
from .names import (
    D_MTIA,
    H_CPU_OP,
    H_DATALOADER,
    H_DRIVER,
    H_PYTHON,
    H_RUNTIME,
    H_USER_ANN,
    HTA_SYNC_NAMES,
    LAUNCH_APIS,
    STEP_RE,
)
from .steps import step_of, vendor_of


@dataclass
class Trace:
    """One rank's host (`h_*`) and device (`d_*`) columns, the interned names, and the derived joins."""

    names: np.ndarray            # name id -> text (object)
    h_nid: np.ndarray
    h_cat: np.ndarray
    h_tid: np.ndarray
    h_start: np.ndarray
    h_dur: np.ndarray
    h_corr: np.ndarray
    h_ext: np.ndarray
    d_nid: np.ndarray
    d_task: np.ndarray
    d_stream: np.ndarray
    d_dev: np.ndarray
    d_start: np.ndarray
    d_dur: np.ndarray
    d_corr: np.ndarray
    d_ext: np.ndarray
    d_grid: np.ndarray
    d_bytes: np.ndarray
    step_of_name: np.ndarray     # name id -> ProfilerStep number, or -1
    launch: np.ndarray | None = None   # device op -> host row of its launch, or -1
    h_step: np.ndarray | None = None
    d_step: np.ndarray | None = None

    @property
    def nh(self) -> int:
        return int(self.h_nid.size)

    @property
    def nd(self) -> int:
        return int(self.d_nid.size)

    @property
    def d_end(self) -> np.ndarray:
        return self.d_start + self.d_dur

    @property
    def has_launch(self) -> np.ndarray:
        assert self.launch is not None
        return self.launch >= 0


def trace_columns(f: Folder) -> Trace:
    """The folder's columns; data loader annotations get their own host category."""
    names = np.array(list(f.name_ids), dtype=object)
    step_of_name = np.full(names.size, -1, dtype=np.int64)
    for n, i in f.name_ids.items():
        if m := STEP_RE.match(n):
            step_of_name[i] = int(m.group(1))
    h, d = f.host, f.dev
    tr = Trace(
        names=names, h_nid=h.column("name", np.int32), h_cat=h.column("cat", np.int8),
        h_tid=h.column("tid", np.int64), h_start=h.column("ts", np.int64),
        h_dur=np.maximum(us_to_ns(h.column("dur", np.float64)), 0), h_corr=h.column("corr", np.int64),
        h_ext=h.column("ext", np.int64), d_nid=d.column("name", np.int32), d_task=d.column("task", np.int8),
        d_stream=d.column("stream", np.int64), d_dev=d.column("device", np.int64),
        d_start=d.column("ts", np.int64), d_dur=np.maximum(us_to_ns(d.column("dur", np.float64)), 0),
        d_corr=d.column("corr", np.int64), d_ext=d.column("ext", np.int64), d_grid=d.column("grid", np.int64),
        d_bytes=d.column("nbytes", np.int64), step_of_name=step_of_name)
    is_dataloader = np.fromiter((n.startswith("enumerate(DataLoader)") for n in f.name_ids), dtype=bool,
                                count=names.size)
    tr.h_cat[is_dataloader[tr.h_nid] & ((tr.h_cat == H_CPU_OP) | (tr.h_cat == H_USER_ANN))] = H_DATALOADER
    return tr


@dataclass
class Steps:
    """The ProfilerStep windows (host ns), sorted by start; `all_idx`: every ProfilerStep host row."""

    all_idx: np.ndarray
    num: np.ndarray
    start: np.ndarray
    end: np.ndarray

    @property
    def n(self) -> int:
        return int(self.num.size)


def profiler_steps(tr: Trace) -> Steps:
    """Host ProfilerStep#N of any category (user_annotation; cpu_op / legacy `Operator` in older PyTorch;
    python_function) on the thread that has most of them, one event per step number."""
    h_stepname = tr.step_of_name[tr.h_nid]
    all_idx = np.flatnonzero(h_stepname >= 0)
    idx = all_idx
    if idx.size:
        tids, counts = np.unique(tr.h_tid[idx], return_counts=True)
        idx = idx[tr.h_tid[idx] == tids[np.argmax(counts)]]
        idx = idx[np.argsort(tr.h_start[idx], kind="stable")]
        _, first = np.unique(h_stepname[idx], return_index=True)  # one event per step number
        idx = idx[np.sort(first)]
    start = tr.h_start[idx]
    return Steps(all_idx, h_stepname[idx], start, start + tr.h_dur[idx])


def last_step_whole(tr: Trace, st: Steps) -> bool:
    """Whether the last ProfilerStep holds a whole step (else, like HTA, it is not kept). With device ops it is
    never known to be: the profiler stops while the step's kernels may still run, and those are missing. A
    host-only rank (CPU training) has all of a step's work inside its host annotation, so its last step is whole
    when it ends in the same op as the step before it: the profiler's schedule closes a step at `prof.step()`,
    after the step's last op, while a profiler stopped mid-step closes it wherever the loop was."""
    if tr.nd or st.n < 2:
        return False
    tids, counts = np.unique(tr.h_tid[st.all_idx], return_counts=True)
    on = np.flatnonzero((tr.h_tid == tids[np.argmax(counts)]) & (tr.step_of_name[tr.h_nid] < 0))
    if not on.size:
        return False
    order = on[np.lexsort((tr.h_dur[on], tr.h_start[on]))]
    starts = tr.h_start[order]

    def final_op(k: int) -> int | None:
        """Name id of the op that starts last within step k (on the step thread), or None."""
        i = int(np.searchsorted(starts, st.end[k], side="right")) - 1
        return int(tr.h_nid[order[i]]) if i >= 0 and starts[i] >= st.start[k] else None

    last = final_op(st.n - 1)
    return last is not None and last == final_op(st.n - 2)


def join_launches(tr: Trace, st: Steps) -> None:
    """Device op -> host launch by correlation id (launch APIs preferred when several share an id); the
    step of each host row and device op (a device op takes its launch's step, else the step around it)."""
    nd = tr.nd
    launch = np.full(nd, -1, dtype=np.int64)
    corr_host = np.flatnonzero(tr.h_corr >= 0)
    if nd and corr_host.size:
        is_launch_name = np.fromiter((n in LAUNCH_APIS for n in tr.names), dtype=bool, count=tr.names.size)
        is_launch = is_launch_name[tr.h_nid[corr_host]]
        order = np.lexsort((~is_launch, tr.h_corr[corr_host]))
        hc_sorted = tr.h_corr[corr_host][order]
        uniq, first = np.unique(hc_sorted, return_index=True)
        host_of = corr_host[order][first]
        pos = np.searchsorted(uniq, tr.d_corr)
        posc = np.clip(pos, 0, max(uniq.size - 1, 0))
        found = (tr.d_corr >= 0) & (pos < uniq.size) & (uniq[posc] == tr.d_corr)
        launch = np.where(found, host_of[posc], -1)
    tr.launch = launch
    tr.h_step = step_of(tr.h_start, st.start, st.end, st.num)
    tr.d_step = np.where(launch >= 0, tr.h_step[np.clip(launch, 0, None)] if tr.nh else NONE,
                         step_of(tr.d_start, st.start, st.end, st.num))


@dataclass
class Windows:
    """Device windows per ProfilerStep (ns, `NONE` when unknown) and the span of HTA's kept ops."""

    start: np.ndarray
    end: np.ndarray
    span0: int | None
    span1: int | None
    hta_kept: np.ndarray   # per device op: HTA's op set when the last step is dropped (stream ops of kept launches)


def _hta_kept(tr: Trace, st: Steps, f: Folder) -> np.ndarray:
    """HTA's kept device ops: with >= 2 step names, those launched (or, without a correlation, starting)
    before the latest start of any ProfilerStep# event that is not a GPU kernel."""
    step_names = set(tr.step_of_name[tr.h_nid[st.all_idx]].tolist()) | f.gpu_step_names
    if len(step_names) < 2:
        return np.ones(tr.nd, dtype=bool)
    gpu_copies = np.array(f.gpu_step_starts, dtype=np.int64)
    cutoff = int(np.concatenate([tr.h_start[st.all_idx], gpu_copies]).max())
    # HTA treats a device op without a correlation (or with no stream) as a CPU event kept by its own
    # start; Event/Context Sync are GPU events even without one
    is_sync = np.fromiter((n in HTA_SYNC_NAMES for n in tr.names), dtype=bool, count=tr.names.size)
    sync_named = is_sync[tr.d_nid]
    has_launch = tr.has_launch
    launch_start = np.where(has_launch, tr.h_start[np.clip(tr.launch, 0, None)] if tr.nh else 0, 0)
    gpu_like = (tr.d_corr >= 0) & (tr.d_stream >= 0)
    return np.where(gpu_like, has_launch & (launch_start < cutoff), tr.d_start < cutoff) | \
        (sync_named & (tr.d_corr < 0))


def device_windows(tr: Trace, st: Steps, f: Folder) -> Windows:
    """Device windows tiling the span of HTA's kept ops (see the package docstring)."""
    stream_ok = tr.d_stream >= 0
    span_mask = _hta_kept(tr, st, f) & stream_ok
    kept_steps = st.num[:-1] if st.n >= 2 else st.num
    dev_start = np.full(st.n, NONE, dtype=np.int64)
    dev_end = np.full(st.n, NONE, dtype=np.int64)
    if not span_mask.any():
        return Windows(dev_start, dev_end, None, None, span_mask)
    d_end = tr.d_end
    span0 = int(tr.d_start[span_mask].min())
    span1 = int(d_end[span_mask].max())
    nk = kept_steps.size
    if nk:
        assert tr.d_step is not None
        firsts: list[int | None] = []
        ks, kstart = tr.d_step[span_mask], tr.d_start[span_mask]
        for num in kept_steps.tolist():
            sel = kstart[ks == num]
            firsts.append(int(sel.min()) if sel.size else None)
        firsts[0] = span0
        # an empty step's window starts (and ends) where the next non-empty one starts
        nxt = span1
        for k in range(nk - 1, -1, -1):
            if firsts[k] is None:
                firsts[k] = nxt
            nxt = firsts[k]  # type: ignore[assignment]
        starts = np.maximum.accumulate(np.array(firsts, dtype=np.int64))
        dev_start[:nk] = starts
        dev_end[:nk] = np.append(starts[1:], span1)
    if st.n >= 2:
        dev_start[-1] = span1
        dev_end[-1] = max(span1, int(d_end[stream_ok].max()) if stream_ok.any() else span1)
    return Windows(dev_start, dev_end, span0, span1, span_mask)


@dataclass
class RankInfo:
    """What the ranks row and the warnings need from the trace's metadata."""

    props: list[dict[str, Any]]
    prop: dict[str, Any] | None
    dist: dict[str, Any]
    world_size: Any
    first_ns: int | None
    origin: int | None
    with_stack: bool
    has_mtia: bool


def add_ranks_row(t: RankTables, path: Path, meta: dict[str, Any], tr: Trace, f: Folder) -> RankInfo:
    """The `ranks` row: vendor, device (the most frequent device id of the ops), world size, time origin."""
    base_ns = meta.get("baseTimeNanoseconds")
    base_ns = base_ns if isinstance(base_ns, int) and not isinstance(base_ns, bool) else None
    props = [p for p in (meta.get("deviceProperties") or []) if isinstance(p, dict)]
    dist = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else {}
    device_id = None
    if tr.nd:
        dv = tr.d_dev[tr.d_dev != NONE]
        if dv.size:
            vals, cnt = np.unique(dv, return_counts=True)
            device_id = int(vals[np.argmax(cnt)])
    prop = next((p for p in props if p.get("id") == device_id), props[0] if props else None)
    runtime_ids = np.unique(tr.h_nid[(tr.h_cat == H_RUNTIME) | (tr.h_cat == H_DRIVER)])
    hip_runtime = any(str(n).startswith("hip") for n in tr.names[runtime_ids])
    has_mtia = bool(tr.nd and (tr.d_task == D_MTIA).any())
    vendor = vendor_of(meta, tr.nd, has_mtia, hip_runtime)
    all_starts = [int(a.min()) for a in (tr.h_start, tr.d_start) if a.size]
    first_ns = min(all_starts) if all_starts else None
    if first_ns is not None and base_ns is not None:
        origin = first_ns + base_ns
    elif first_ns is not None and first_ns >= EPOCH_US * 1000:
        origin = first_ns
    else:
        origin = None
    ws = dist.get("world_size")
    with_stack = bool(meta.get("with_stack")) or bool(f.stack_ids) or bool((tr.h_cat == H_PYTHON).any())
    t.add("ranks", rank=t.rank, source_path=str(path), format=KINETO, vendor=vendor, framework="pytorch",
          framework_version=None, device_name=prop.get("name") if prop else None,
          device_id=device_id if device_id is not None else (prop.get("id") if prop else None),
          world_size=ws if isinstance(ws, int) else None,
          ai_core_num=prop.get("numSms") if prop and isinstance(prop.get("numSms"), int) else None,
          with_stack=with_stack, time_origin_ns=origin)
    return RankInfo(props, prop, dist, ws, first_ns, origin, with_stack, has_mtia)
