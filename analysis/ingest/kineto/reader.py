"""One Kineto file -> RankTables: read the events, then build the tables from the folded columns."""

from __future__ import annotations

import gc
from pathlib import Path

import msgspec
import numpy as np

from ..base import Coded, ProfileError, RankSource, RankTables
from .events import _EPOCH_US, us_to_ns
from .folder import _NONE, _Comm, _Folder
from .names import (
    _D_KERNEL,
    _D_MTIA,
    _DEVICE_TASKS,
    _H_CPU_OP,
    _H_DATALOADER,
    _H_DRIVER,
    _H_PYTHON,
    _H_RUNTIME,
    _H_USER_ANN,
    _HOST_CATEGORIES,
    _HTA_SYNC_NAMES,
    _STEP_RE,
    LAUNCH_APIS,
    classify_device_op,
    collective_op_type,
)
from .source import _Doc, _iter_events, _Source
from .steps import (
    _comm_by_launcher_and_stream,
    _host_collectives,
    _ints,
    _launcher_ops,
    _nesting_depth,
    _sparse_text,
    _step_of,
    _stepless_window,
    _vendor,
)


def read_rank(src: RankSource) -> RankTables:
    """Parse one Kineto trace file into a RankTables buffer (see the module docstring)."""
    path = Path(src.path)
    rank = src.rank if src.rank is not None else 0
    tables = RankTables(rank)
    gc_was_enabled = gc.isenabled()
    gc.disable()  # millions of short-lived allocations, no cycles: the cyclic GC would only cost time
    try:
        doc, folder = _read_events(path)
    finally:
        if gc_was_enabled:
            gc.enable()
    _build(tables, src, path, doc, folder)
    return tables


def _read_events(path: Path) -> tuple[_Doc, _Folder]:
    """The msgspec path: typed decode of pieces of the event list, folded one piece at a time."""
    doc = _Doc()
    folder = _Folder()
    source = _Source(path)
    error: ProfileError | None = None
    try:
        for evs in _iter_events(source, doc):
            folder.fold(evs)
            del evs
    except ProfileError as e:
        error = e
    finally:
        source.close()
    # damage (a gzip or JSON cut short, a corrupt block, a syntax error): the whole events before it are
    # kept; a gzip error explains a JSON one that follows from it. Nothing read: the error stands (exit 2)
    error = source.damage or error
    if error is not None:
        if not (folder.host.n or folder.dev.n):
            raise error
        doc.damage = error.problem
    return doc, folder


def _build(t: RankTables, src: RankSource, path: Path, doc: _Doc, f: _Folder) -> None:
    meta = doc.meta
    rank = t.rank
    base_ns = meta.get("baseTimeNanoseconds")
    base_ns = base_ns if isinstance(base_ns, int) and not isinstance(base_ns, bool) else None

    # ---- per-name lookup tables (names are interned to ids while folding)
    names = np.array(list(f.name_ids), dtype=object)
    n_names = names.size
    step_of_name = np.full(n_names, -1, dtype=np.int64)
    for n, i in f.name_ids.items():
        if m := _STEP_RE.match(n):
            step_of_name[i] = int(m.group(1))
    is_launch_name = np.fromiter((n in LAUNCH_APIS for n in f.name_ids), dtype=bool, count=n_names)
    is_dataloader_name = np.fromiter((n.startswith("enumerate(DataLoader)") for n in f.name_ids), dtype=bool,
                                     count=n_names)
    is_hta_sync_name = np.fromiter((n in _HTA_SYNC_NAMES for n in f.name_ids), dtype=bool, count=n_names)

    # ---- host columns
    h = f.host
    h_nid = h.column("name", np.int32)
    h_cat = h.column("cat", np.int8)
    h_tid = h.column("tid", np.int64)
    h_start = h.column("ts", np.int64)
    h_dur = np.maximum(us_to_ns(h.column("dur", np.float64)), 0)
    h_corr = h.column("corr", np.int64)
    h_ext = h.column("ext", np.int64)
    nh = h_nid.size

    # ---- device columns
    d = f.dev
    d_nid = d.column("name", np.int32)
    d_task = d.column("task", np.int8)
    d_stream = d.column("stream", np.int64)
    d_dev = d.column("device", np.int64)
    d_start = d.column("ts", np.int64)
    d_dur = np.maximum(us_to_ns(d.column("dur", np.float64)), 0)
    d_end = d_start + d_dur
    d_corr = d.column("corr", np.int64)
    d_ext = d.column("ext", np.int64)
    d_grid = d.column("grid", np.int64)
    d_bytes = d.column("nbytes", np.int64)
    nd = d_nid.size

    # ---- data loader annotations get their own host category
    h_cat[is_dataloader_name[h_nid] & ((h_cat == _H_CPU_OP) | (h_cat == _H_USER_ANN))] = _H_DATALOADER

    # ---- steps: host ProfilerStep#N of any category (user_annotation; cpu_op / legacy `Operator` in older
    # PyTorch; python_function) on the thread that has most of them, one event per step number
    h_stepname = step_of_name[h_nid]
    all_step_idx = np.flatnonzero(h_stepname >= 0)
    step_idx = all_step_idx
    if step_idx.size:
        tids, counts = np.unique(h_tid[step_idx], return_counts=True)
        step_idx = step_idx[h_tid[step_idx] == tids[np.argmax(counts)]]
        step_idx = step_idx[np.argsort(h_start[step_idx], kind="stable")]
        _, first = np.unique(h_stepname[step_idx], return_index=True)  # one event per step number
        step_idx = step_idx[np.sort(first)]
    st_num = h_stepname[step_idx]
    st_start = h_start[step_idx]
    st_end = st_start + h_dur[step_idx]
    n_steps = st_num.size
    synthetic_step = n_steps == 0

    h_step = _step_of(h_start, st_start, st_end, st_num)

    # ---- correlation: device op -> host launch (prefer launch APIs when several share an id)
    launch = np.full(nd, -1, dtype=np.int64)
    corr_host = np.flatnonzero(h_corr >= 0)
    if nd and corr_host.size:
        is_launch = is_launch_name[h_nid[corr_host]]
        order = np.lexsort((~is_launch, h_corr[corr_host]))
        hc_sorted = h_corr[corr_host][order]
        uniq, first = np.unique(hc_sorted, return_index=True)
        host_of = corr_host[order][first]
        pos = np.searchsorted(uniq, d_corr)
        posc = np.clip(pos, 0, max(uniq.size - 1, 0))
        found = (d_corr >= 0) & (pos < uniq.size) & (uniq[posc] == d_corr)
        launch = np.where(found, host_of[posc], -1)
    has_launch = launch >= 0
    d_step = np.where(has_launch, h_step[np.clip(launch, 0, None)] if nh else _NONE,
                      _step_of(d_start, st_start, st_end, st_num))

    # ---- HTA's kept device ops and the device windows
    stream_ok = d_stream >= 0
    step_name_count = len(set(h_stepname[all_step_idx].tolist()) | f.gpu_step_names)
    if step_name_count >= 2:
        # HTA's cutoff: the latest start of any ProfilerStep# event that is not a GPU kernel, i.e. CPU
        # annotations on any thread and gpu_user_annotation copies alike
        gpu_copies = np.array(f.gpu_step_starts, dtype=np.int64)
        cutoff = int(np.concatenate([h_start[all_step_idx], gpu_copies]).max())
        # HTA treats a device op without a correlation (or with no stream) as a CPU event kept by its
        # own start; Event/Context Sync are GPU events even without one
        sync_named = is_hta_sync_name[d_nid]
        launch_start = np.where(has_launch, h_start[np.clip(launch, 0, None)] if nh else 0, 0)
        gpu_like = (d_corr >= 0) & stream_ok
        kept = np.where(gpu_like, has_launch & (launch_start < cutoff), d_start < cutoff) | \
            (sync_named & (d_corr < 0))
    else:
        kept = np.ones(nd, dtype=bool)
    span_mask = kept & stream_ok
    kept_steps = st_num[:-1] if n_steps >= 2 else st_num

    dev_start = np.full(n_steps, _NONE, dtype=np.int64)
    dev_end = np.full(n_steps, _NONE, dtype=np.int64)
    span0 = span1 = None
    if span_mask.any():
        span0 = int(d_start[span_mask].min())
        span1 = int(d_end[span_mask].max())
        nk = kept_steps.size
        if nk:
            firsts: list[int | None] = []
            ks, kstart = d_step[span_mask], d_start[span_mask]
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
        if n_steps >= 2:
            dev_start[-1] = span1
            dev_end[-1] = max(span1, int(d_end[stream_ok].max()) if stream_ok.any() else span1)

    # ---- ranks
    props = [p for p in (meta.get("deviceProperties") or []) if isinstance(p, dict)]
    dist = meta.get("distributedInfo") if isinstance(meta.get("distributedInfo"), dict) else {}
    device_id = None
    if nd:
        dv = d_dev[d_dev != _NONE]
        if dv.size:
            vals, cnt = np.unique(dv, return_counts=True)
            device_id = int(vals[np.argmax(cnt)])
    prop = next((p for p in props if p.get("id") == device_id), props[0] if props else None)
    runtime_ids = np.unique(h_nid[(h_cat == _H_RUNTIME) | (h_cat == _H_DRIVER)])
    hip_runtime = any(str(n).startswith("hip") for n in names[runtime_ids])
    has_mtia = bool(nd and (d_task == _D_MTIA).any())
    vendor = _vendor(meta, nd, has_mtia, hip_runtime)
    all_starts = [int(a.min()) for a in (h_start, d_start) if a.size]
    first_ns = min(all_starts) if all_starts else None
    if first_ns is not None and base_ns is not None:
        origin = first_ns + base_ns
    elif first_ns is not None and first_ns >= _EPOCH_US * 1000:
        origin = first_ns
    else:
        origin = None
    ws = dist.get("world_size")
    with_stack = bool(meta.get("with_stack")) or bool(f.stack_ids) or bool((h_cat == _H_PYTHON).any())
    t.add("ranks", rank=rank, source_path=str(path), format="kineto", vendor=vendor, framework="pytorch",
          framework_version=None, device_name=prop.get("name") if prop else None,
          device_id=device_id if device_id is not None else (prop.get("id") if prop else None),
          world_size=ws if isinstance(ws, int) else None,
          ai_core_num=prop.get("numSms") if prop and isinstance(prop.get("numSms"), int) else None,
          with_stack=with_stack, time_origin_ns=origin)

    # ---- steps
    window_note = ""
    if synthetic_step:
        all_ends = [int(a.max()) for a in (h_start + h_dur, d_end) if a.size]
        win0, window_note = _stepless_window(first_ns, h_start, h_dur, h_cat, h_nid, names, d_start, launch)
        if win0 is not None:
            t.add("steps", step=0, start_ns=win0, end_ns=max(all_ends), kept=True,
                  device_start_ns=span0, device_end_ns=span1)
            # what starts before the window (initialisation) belongs to no step
            h_step = np.where(h_start < win0, _NONE, np.where(h_step == _NONE, 0, h_step))
            d_step = np.where(d_start < win0, _NONE, np.where(d_step == _NONE, 0, d_step))
    else:
        kept_flags = [True] * n_steps
        if n_steps >= 2:
            kept_flags[-1] = False
        t.extend("steps", {
            "step": st_num.tolist(), "start_ns": st_start.tolist(), "end_ns": st_end.tolist(),
            "device_start_ns": _ints(dev_start), "device_end_ns": _ints(dev_end), "kept": kept_flags,
        })

    # ---- device_ops (+ comm_ops)
    if nd:
        # collective info: on the kernel, else on the cpu op that launched it (same External id)
        h_comm_by_ext: dict[int, _Comm] = {}
        for i, c in f.h_comm.items():
            if h_ext[i] >= 0 and c.collective:
                h_comm_by_ext.setdefault(int(h_ext[i]), c)
        comm_info: dict[int, _Comm] = dict(f.d_comm)
        if h_comm_by_ext:
            for i in np.flatnonzero((d_task == _D_KERNEL) & (d_ext >= 0)).tolist():
                if i not in comm_info and (c := h_comm_by_ext.get(int(d_ext[i]))) is not None:
                    comm_info[i] = c
        has_coll = np.zeros(nd, dtype=bool)
        for i, c in comm_info.items():
            has_coll[i] = bool(c.collective) and d_task[i] == _D_KERNEL
        # classify once per distinct (name, task type, has collective arg)
        key = (d_nid.astype(np.int64) * len(_DEVICE_TASKS) + d_task) * 2 + has_coll
        uniq, inverse = np.unique(key, return_inverse=True)
        labels = np.array([classify_device_op(str(names[k // 2 // len(_DEVICE_TASKS)]),
                                              _DEVICE_TASKS[(k // 2) % len(_DEVICE_TASKS)], bool(k % 2))
                           for k in uniq.tolist()], dtype=object)
        labels, inverse = _comm_by_launcher_and_stream(
            labels, inverse, launch, d_task == _D_KERNEL, d_stream,
            _launcher_ops(names, h_nid, h_cat, h_tid, h_start, h_dur))
        category = labels[inverse]
        collective = np.full(nd, None, dtype=object)
        group = np.full(nd, None, dtype=object)
        size = d_bytes.copy()
        comm_rows = np.flatnonzero(category == "communication")
        for i in comm_rows.tolist():
            c = comm_info.get(i)
            collective[i] = collective_op_type(c.collective if c else None, names[d_nid[i]])
            if c is not None:
                group[i] = c.group
                if size[i] == _NONE and (b := c.size_bytes()) is not None:
                    size[i] = b
        t.extend("device_ops", {
            "step": _ints(d_step), "name": Coded(d_nid, names), "category": Coded(inverse, labels),
            "task_type": Coded(d_task, _DEVICE_TASKS), "stream_id": _ints(d_stream),
            "start_ns": _ints(d_start), "dur_ns": _ints(d_dur), "correlation_id": _ints(d_corr, d_corr < 0),
            "block_dim": _ints(d_grid), "size_bytes": _ints(size), "collective": collective, "group_name": group,
        })
        if comm_rows.size:
            t.extend("comm_ops", {
                "step": _ints(d_step[comm_rows]), "name": Coded(d_nid[comm_rows], names),
                "op_type": collective[comm_rows],
                "group_name": group[comm_rows], "start_ns": _ints(d_start[comm_rows]),
                "elapse_ns": _ints(d_dur[comm_rows]), "size_bytes": _ints(size[comm_rows]),
            })
            t.has("comm_ops")
            if (size[comm_rows] != _NONE).any():
                t.has("nccl_msg_sizes")
        if (d_task == _D_KERNEL).any() or has_mtia:
            t.has("kernels")
        if has_launch.any():
            t.has("correlation")
        if (d_grid != _NONE).any():
            t.has("block_dim")

    _host_collectives(t, names, h_nid, h_cat, h_step, h_start, h_dur)

    # ---- host_ops
    if nh:
        depth = _nesting_depth(h_tid, h_start, h_start + h_dur)
        host = {
            "step": _ints(h_step), "name": Coded(h_nid, names), "category": Coded(h_cat, _HOST_CATEGORIES),
            "tid": _ints(h_tid), "start_ns": _ints(h_start), "dur_ns": _ints(h_dur),
            "correlation_id": _ints(h_corr, h_corr < 0), "external_id": _ints(h_ext, h_ext < 0),
            "depth": _ints(depth),
        }
        # sparse columns only when the trace has them (an absent column is NULL; a column of NULLs
        # still costs the insert a pass over every row)
        if f.has_shapes:
            host["input_dims"], host["input_types"] = h.column("dims", None), h.column("types", None)
        if f.stack_ids:
            host["call_stack"] = Coded(h.column("stack", np.int32), list(f.stack_ids))
        if f.h_comm:
            msg = np.full(nh, _NONE, dtype=np.int64)
            for i, c in f.h_comm.items():
                if (b := c.in_bytes()) is not None and -(2**62) < b < 2**63:
                    msg[i] = b
            host["collective"] = _sparse_text(nh, {i: c.collective for i, c in f.h_comm.items()})
            host["msg_bytes"] = _ints(msg)
        t.extend("host_ops", host)
        if f.has_shapes:
            t.has("record_shapes")
    if with_stack:
        t.has("with_stack")
    if not synthetic_step:
        t.has("steps")

    # ---- metadata, memory
    for k, v in meta.items():
        t.add("metadata", key=k, value_json=msgspec.json.encode(v).decode())
    if f.memory:
        mts = [m[0] for m in f.memory]
        t.extend("memory_records", {
            "ts_ns": mts, "component": [m[1] for m in f.memory],
            "allocated_bytes": [m[2] for m in f.memory], "reserved_bytes": [m[3] for m in f.memory],
        })
        t.has("memory")

    # ---- what the trace lacks
    if nd == 0:
        t.warn("no GPU events: device breakdown unavailable")
    if doc.damage:
        t.warn(f"{path.name} is damaged ({doc.damage}): the {f.host.n + f.dev.n} host and device events read "
               "before the damage are kept, the rest of the file is lost")
    if synthetic_step:
        t.warn("no ProfilerStep#N annotations: the trace is analysed as one step (step 0)" + window_note)
    if not props and nd:
        t.warn("no deviceProperties: device name and SM count unknown")
    if not dist:
        t.warn("no distributedInfo: world size and process groups unknown")
    elif not isinstance(ws, int):
        t.warn("distributedInfo has no world_size: world size unknown")
    if has_mtia:
        t.warn("MTIA trace: device ops are command-processor events (mtia_ccp_events), classified by name "
               "(dma* = memory, event_wait/record = sync, the rest = compute); no per-kernel names")
    if nd:
        no_corr = int(((d_corr < 0) & (d_task != _DEVICE_TASKS.index("cuda_sync"))).sum())
        if no_corr:
            t.warn(f"{no_corr} device ops have no launch correlation: their step is assigned by time")
        unmatched = int(((d_corr >= 0) & ~has_launch).sum())
        if unmatched:
            t.warn(f"{unmatched} device ops whose launch is not in the trace: their step is assigned by time")
        if prop is not None and not isinstance(prop.get("numSms"), int):
            t.warn("deviceProperties has no numSms: device core count unknown")
    if origin is None and first_ns is not None:
        t.warn("timestamps are not epoch-based and baseTimeNanoseconds is absent: absolute time unknown")
    if f.no_dur:
        t.warn(f"{f.no_dur} complete events without a usable ts or dur (absent, or beyond int64 ns) were skipped")
    if f.skipped:
        cats = ", ".join(f"{c} ({n})" for c, n in f.skipped.most_common(5))
        t.warn(f"{sum(f.skipped.values())} complete events of categories this reader does not know were skipped: "
               f"{cats}")
