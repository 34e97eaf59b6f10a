"""Steps, nesting, launchers and host collectives of a folded trace."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from ...timeline.comm_kinds import comm_launcher_name, comm_streams, launched_inside
from ..base import Coded, RankTables
from .folder import NONE
from .names import H_DRIVER, H_RUNTIME, H_USER_ANN, collective_op_type

# --------------------------------------------------------------------------------------------------
# Post-processing
# --------------------------------------------------------------------------------------------------

def ints(a: np.ndarray, absent: np.ndarray | None = None) -> np.ndarray:
    """int64 column -> nullable int column (absent = the NONE sentinel, or the given mask): a numpy
    masked array, which the store inserts as it is (no Python object per value, no pandas)."""
    mask = (a == NONE) if absent is None else absent
    a = a.astype(np.int64, copy=False)
    return np.ma.MaskedArray(a, mask=mask) if mask.any() else a


def sparse_text(n: int, values: dict[int, str | None]) -> Coded:
    """n rows of text, NULL except at the given rows (call stacks, collective names)."""
    codes = np.full(n, -1, dtype=np.int32)
    labels: dict[str, int] = {}
    for i, v in values.items():
        if v is not None:
            codes[i] = labels.setdefault(v, len(labels))
    return Coded(codes, list(labels))


def nesting_depth(tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Nesting depth of each interval among the intervals of its thread (0 = outermost).

    Order per thread by (start asc, end desc): a parent precedes its children. The depth of interval i
    is the number of earlier intervals still open at its start = (its rank in that order) − (number of
    intervals of the thread that ended at or before its start). Zero-length intervals are treated as
    ending half a ns after they start, so one at a parent's start counts as its child. O(n log n).
    """
    n = tid.size
    depth = np.zeros(n, dtype=np.int64)
    if n == 0:
        return depth
    s2 = start * 2
    e2 = np.where(end > start, end * 2, s2 + 1)
    order = np.lexsort((-e2, s2, tid))
    t_sorted = tid[order]
    bounds = np.flatnonzero(np.diff(t_sorted)) + 1
    for grp in np.split(order, bounds):
        gs = s2[grp]
        ends_sorted = np.sort(e2[grp])
        closed = np.searchsorted(ends_sorted, gs, side="right")
        depth[grp] = np.maximum(np.arange(grp.size) - closed, 0)
    return depth


def step_of(ts: np.ndarray, st_start: np.ndarray, st_end: np.ndarray, st_num: np.ndarray) -> np.ndarray:
    """Step number whose [start, end) contains each ts (HTA's rule), else NONE. Steps sorted by start."""
    if st_start.size == 0:
        return np.full(ts.size, NONE, dtype=np.int64)
    i = np.searchsorted(st_start, ts, side="right") - 1
    ic = np.clip(i, 0, None)
    inside = (i >= 0) & (ts < st_end[ic])
    return np.where(inside, st_num[ic], NONE)


_GLOO_RE = re.compile(r"^gloo:(\w+)$")


def host_collectives(t: RankTables, names: np.ndarray, h_nid: np.ndarray, h_cat: np.ndarray,
                      h_step: np.ndarray, h_start: np.ndarray, h_dur: np.ndarray, h_tid: np.ndarray,
                      p2p: dict[int, int]) -> None:
    """Gloo collectives run on the host: their `gloo:<op>` annotation (start and duration on the host
    clock) becomes a comm_ops row so that cross-rank checks can match them. The trace gives no process
    group, sequence number or Collective name for them (c10d::allreduce_ carries only Input Dims), so
    group_name and size are unknown (null). A `gloo:send` / `gloo:recv` starts inside the `c10d::send` /
    `c10d::recv_` call that issued it on the same thread: that call's peer (`p2p`: host row -> the peer's
    group rank) is its peer_rank. Gloo traces name no group for it either, so the group rank is taken as the
    global one (the default group); the replay checks every send against its receive before it uses them."""
    ids = [i for i, n in enumerate(names.tolist()) if _GLOO_RE.match(str(n))]
    if not ids or not h_nid.size:
        return
    rows = np.flatnonzero(np.isin(h_nid, ids) & (h_cat == H_USER_ANN))
    if not rows.size:
        return
    ops = [collective_op_type(_GLOO_RE.match(str(names[h_nid[i]])).group(1)) for i in rows.tolist()]  # type: ignore[union-attr]
    peers = _enclosing_peer(rows, h_start, h_dur, h_tid, p2p)
    t.extend("comm_ops", {
        "step": ints(h_step[rows]), "name": [str(names[h_nid[i]]) for i in rows.tolist()], "op_type": ops,
        "group_name": [None] * rows.size, "start_ns": h_start[rows].tolist(), "elapse_ns": h_dur[rows].tolist(),
        "size_bytes": [None] * rows.size, "peer_rank": peers,
    })
    t.has("comm_ops")


def _enclosing_peer(rows: np.ndarray, h_start: np.ndarray, h_dur: np.ndarray, h_tid: np.ndarray,
                    p2p: dict[int, int]) -> list[int | None]:
    """Per row: the peer of the send / recv call on its thread that contains its start, else None."""
    out: list[int | None] = [None] * rows.size
    if not p2p:
        return out
    by_tid: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for tid in {int(h_tid[i]) for i in p2p}:
        calls = np.array(sorted((i for i in p2p if int(h_tid[i]) == tid), key=lambda i: int(h_start[i])), np.int64)
        by_tid[tid] = (calls, h_start[calls])
    for n, i in enumerate(rows.tolist()):
        got = by_tid.get(int(h_tid[i]))
        if got is None:
            continue
        calls, starts = got
        j = int(np.searchsorted(starts, h_start[i], side="right")) - 1
        if j >= 0 and h_start[i] <= starts[j] + h_dur[calls[j]]:
            out[n] = p2p[int(calls[j])]
    return out


def launcher_ops(names: list[str], h_nid: np.ndarray, h_cat: np.ndarray, h_tid: np.ndarray,
                  h_start: np.ndarray, h_dur: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Host ops whose name says communication (comm_kinds rule 2), and which host events (runtime /
    driver launch calls) start inside one of them on the same thread: (is_launcher_op, launched_inside)."""
    is_op = np.array([comm_launcher_name(str(n)) for n in names], dtype=bool)[h_nid] if h_nid.size else \
        np.zeros(0, dtype=bool)
    is_op &= (h_cat != H_RUNTIME) & (h_cat != H_DRIVER)
    calls = (h_cat == H_RUNTIME) | (h_cat == H_DRIVER)
    inside = np.zeros(h_nid.size, dtype=bool)
    if is_op.any() and calls.any():
        ci = np.flatnonzero(calls)
        inside[ci] = launched_inside(h_tid[is_op], h_start[is_op], h_start[is_op] + h_dur[is_op],
                                     h_tid[ci], h_start[ci])
    return is_op, inside


def comm_by_launcher_and_stream(labels: np.ndarray, inverse: np.ndarray, launch: np.ndarray,
                                 is_kernel: np.ndarray, stream: np.ndarray,
                                 launchers: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Kernels launched inside a communication op, or on a communication stream, become communication
    (comm_kinds rules 2 and 3); memcpy / memset / sync keep their category. Returns (labels, inverse)."""
    _, inside = launchers
    by_launch = is_kernel & (launch >= 0) & inside[np.clip(launch, 0, None)] if inside.size else \
        np.zeros(launch.size, dtype=bool)
    is_comm = labels[inverse] == "communication"
    comm_so_far = (is_comm | by_launch) & is_kernel
    streams = comm_streams(stream, is_kernel & (stream >= 0), comm_so_far)
    by_stream = is_kernel & (stream >= 0) & np.isin(stream, streams)
    make = (by_launch | by_stream) & ~is_comm
    if not make.any():
        return labels, inverse
    if "communication" not in labels.tolist():
        labels = np.append(labels, np.array(["communication"], dtype=object))
    inverse = inverse.copy()
    inverse[make] = labels.tolist().index("communication")
    return labels, inverse


# PyTorch's optimizers record one `Optimizer.step#<Class>.step` annotation per call: in a trace without
# ProfilerStep they are the only iteration boundaries the trace itself gives.
_OPTIMIZER_STEP_RE = re.compile(r"^Optimizer\.step#")


def _optimizer_step_ends(h_start: np.ndarray, h_dur: np.ndarray, h_cat: np.ndarray, h_nid: np.ndarray,
                         h_tid: np.ndarray, names: np.ndarray) -> tuple[np.ndarray, str]:
    """(sorted end ns, name) of the most frequent `Optimizer.step#...` annotation on one thread."""
    is_opt = np.fromiter((bool(_OPTIMIZER_STEP_RE.match(str(n))) for n in names), dtype=bool, count=names.size)
    rows = np.flatnonzero(is_opt[h_nid] & (h_cat == H_USER_ANN))
    if not rows.size:
        return np.empty(0, np.int64), ""
    keys = h_nid[rows].astype(np.int64) * (1 << 32) + (h_tid[rows] & 0xFFFFFFFF)
    vals, counts = np.unique(keys, return_counts=True)
    mine = rows[keys == vals[int(np.argmax(counts))]]
    return np.sort(h_start[mine] + h_dur[mine]), str(names[h_nid[mine[0]]])


def _longest_call(h_start: np.ndarray, h_dur: np.ndarray, h_cat: np.ndarray, lo: int, hi: int) -> int | None:
    """Host row of the longest runtime / driver call starting in [lo, hi), or None."""
    rows = np.flatnonzero(((h_cat == H_RUNTIME) | (h_cat == H_DRIVER)) & (h_start >= lo) & (h_start < hi))
    return int(rows[np.argmax(h_dur[rows])]) if rows.size else None


def _call_text(k: int | None, h_dur: np.ndarray, h_nid: np.ndarray, names: np.ndarray) -> str:
    return "" if k is None else f", the longest call there {names[h_nid[k]]} {int(h_dur[k]) / 1e6:.1f} ms"


def stepless_window(first_ns: int | None, h_start: np.ndarray, h_dur: np.ndarray, h_cat: np.ndarray,
                     h_nid: np.ndarray, h_tid: np.ndarray, names: np.ndarray, d_start: np.ndarray,
                     launch: np.ndarray) -> tuple[int | None, str]:
    """Start (ns) of the one step of a trace without ProfilerStep, and a note saying how it was chosen.

    Initialisation runs once and is left out of the window: CUDA context creation, library handles (a
    first cuBLAS / cuDNN call runs a long cudaFree), module loading. Host time before the first device
    op's launch call (or the first device op, when its launch is not in the trace) is initialisation.
    Initialisation can also run inside the first forward, after GPU work began (param-resnet-1gpu: a 788 ms
    cudaFree in cuDNN's first convolution). Where the host records >= 2 optimizer steps
    (`Optimizer.step#...`, one per iteration), a runtime call in the first iteration that lasts longer than
    the median whole later iteration cannot be steady-state work: the window then starts where the first
    optimizer step ends. A trace without device ops keeps its whole span."""
    if first_ns is None or not d_start.size:
        return first_ns, ": the whole trace"
    firsts = [int(d_start.min())]
    if (launch >= 0).any():
        firsts.append(int(h_start[launch[launch >= 0]].min()))
    win0 = min(firsts)
    ends, opt_name = _optimizer_step_ends(h_start, h_dur, h_cat, h_nid, h_tid, names)
    if ends.size >= 2 and ends[0] > win0:
        k = _longest_call(h_start, h_dur, h_cat, win0, int(ends[0]))
        typical = float(np.median(np.diff(ends)))
        if k is not None and h_dur[k] > typical:
            end = int(ends[0])
            return end, (f": it starts where the first of {ends.size} training iterations ends (its "
                         f"{opt_name} annotation ends {(end - first_ns) / 1e6:.1f} ms after the trace starts): "
                         f"that iteration holds one-off initialisation, {names[h_nid[k]]} "
                         f"{int(h_dur[k]) / 1e6:.1f} ms, longer than a whole later iteration (median "
                         f"{typical / 1e6:.1f} ms); it and the time before it belong to no step")
    if win0 <= first_ns:
        return first_ns, ": the whole trace (its first event is GPU work or its launch)"
    return win0, (f": it starts at the first GPU work's launch, {(win0 - first_ns) / 1e6:.1f} ms after the "
                  f"trace starts; the time before it is initialisation and belongs to no step"
                  f"{_call_text(_longest_call(h_start, h_dur, h_cat, first_ns, win0), h_dur, h_nid, names)}")


def vendor_of(meta: dict[str, Any], n_dev: int, has_mtia: bool, hip_runtime: bool) -> str:
    props = meta.get("deviceProperties") or []
    names = " ".join(str(p.get("name", "")) for p in props if isinstance(p, dict))
    backend = str((meta.get("distributedInfo") or {}).get("backend", "")) if isinstance(
        meta.get("distributedInfo"), dict) else ""
    if has_mtia or backend.startswith("mtia"):
        return "mtia"
    if hip_runtime or re.search(r"\bAMD\b|Radeon|Instinct|\bMI\d{3}", names):
        return "rocm"
    if n_dev or re.search(r"NVIDIA|Tesla|Quadro|GeForce|\bRTX\b", names) or "nccl" in backend:
        return "cuda"
    return "cpu"
