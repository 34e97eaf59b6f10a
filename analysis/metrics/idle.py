"""What the host did while the device idled: idle after synchronize calls, their triggers, profiler overhead.

* `idle_after(starts, ends, t, limit)`: the device idle from host time `t` (a synchronize returned: the
  device had drained) until the next device op starts, clipped to `limit` (the end of the step's host
  window: idle beyond the step belongs to the step boundary, not to the sync). A sync that returns while the
  device is still busy leaves no idle and costs nothing here, however long the host waited.
* `sync_triggers(ctx, rank, ...)`: the innermost operator that issued each synchronize (`aten::item`,
  `aten::_local_scalar_dense`, `aten::is_nonzero`, `aten::nonzero`, ...), and where stacks were recorded
  (with_stack: `python_function` events) the innermost user frame as Kineto names it, "file.py(line): function"
  (the line is where that function starts; library frames such as torch/ are skipped).
* `profiler_overhead(profile, rank)`: per-step host overhead of the profiler itself, from the unprofiled step
  times written next to the traces (`meta/step_times_rank<N>.json`: `step_ms` per iteration and the
  `profiled_steps`): median profiled step minus median steady unprofiled step, in ms; None when absent.

Units: ns on the timeline, ms in what is returned for people.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..timeline.names import DRAINED_RE

if TYPE_CHECKING:
    from ..store import Profile


# operators whose host code reads a device value (and so waits for the device); innermost one wins
TRIGGER_RE = re.compile(r"^aten::(item|_local_scalar_dense|is_nonzero|nonzero|equal|allclose|tolist|cpu|"
                        r"to|copy_|_to_copy|masked_select|unique.*)$")
# host annotations of collectives (Kineto: gloo:all_reduce, nccl:all_reduce, record_param_comms, c10d::...):
# host time inside them is a wait for peer ranks
COLLECTIVE_RE = re.compile(r"^(gloo|nccl|rccl|hccl|mpi|ucc):|^c10d::|record_param_comms|^ProcessGroup\w*::", re.I)
# a Python frame recorded with with_stack: "file.py(123): func"; library frames are skipped for the source line
_PY_FRAME_RE = re.compile(r"^(?P<file>[^()]+\.py)\((?P<line>\d+)\): (?P<func>.+)$")
_LIB_PATH_RE = re.compile(r"(site-packages|dist-packages|(^|/)(torch|torch_npu|numpy|contextlib|functools|"
                          r"threading|multiprocessing)/|/lib/python3|<built-in|^<)")


def idle_after(starts: np.ndarray, ends: np.ndarray, t: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """Per host time `t` (ns): device idle from `t` to the next op start, clipped to `limit`; 0 when the device
    is busy at `t` (its wait cost nothing: the device had work). `starts` / `ends`: the merged, disjoint busy
    intervals of the device, sorted (ns)."""
    t = np.asarray(t, dtype=np.int64)
    limit = np.asarray(limit, dtype=np.int64)
    if starts.size == 0:
        return np.clip(limit - t, 0, None)
    i = np.searchsorted(starts, t, side="right")          # intervals [0, i) started at or before t
    busy = (i > 0) & (ends[np.maximum(i - 1, 0)] > t)
    nxt = np.where(i < starts.size, starts[np.minimum(i, starts.size - 1)], limit)
    return np.where(busy, 0, np.clip(np.minimum(nxt, limit) - t, 0, None))


def sync_triggers(host: Any, sync_idx: np.ndarray) -> list[dict[str, str | None]]:
    """Per synchronize call (row index of `host`): its innermost trigger operator and user source line.

    `host`: the rank's host events as a frame with name, tid, start_ns, dur_ns, sorted by start. An event
    encloses the call when it starts before and ends after it on the same thread; the innermost one is the
    latest-starting enclosing event."""
    names = host["name"].astype(str).to_numpy()
    tid = host["tid"].to_numpy()
    s = host["start_ns"].to_numpy(dtype=np.int64)
    e = s + host["dur_ns"].to_numpy(dtype=np.int64)
    is_trig = np.array([bool(TRIGGER_RE.match(n)) for n in names])
    frame = np.array([m.group(0) if (m := _PY_FRAME_RE.match(n)) and not _LIB_PATH_RE.search(n) else ""
                      for n in names], dtype=object)
    out: list[dict[str, str | None]] = []
    for k in sync_idx.tolist():
        enc = (s <= s[k]) & (e >= e[k]) & (np.arange(s.size) != k)
        trig = np.flatnonzero(enc & is_trig & (tid == tid[k]))
        # python_function events sit on the same thread as the ops they call
        src = np.flatnonzero(enc & (frame != "") & (tid == tid[k]))
        out.append({"trigger": names[trig[np.argmax(s[trig])]] if trig.size else None,
                    "outer_trigger": names[trig[np.argmin(s[trig])]] if trig.size else None,
                    "source": str(frame[src[np.argmax(s[src])]]) if src.size else None})
    return out


def profiler_overhead(profile: Profile | None, rank: int) -> dict[str, float] | None:
    """{profiled_step_ms, unprofiled_step_ms, overhead_ms} from the rank's `step_times` (the script's own step
    times, stored from meta/step_times_rank<N>.json beside the traces), or None (none stored, or no steady
    unprofiled steps). The median of the profiled steps is robust to the last one, which also holds the trace
    export; unprofiled steps are those after the profiled window, else those before it without the first two
    (warm-up)."""
    if profile is None:
        return None
    rows = profile.rows("SELECT step, step_ms, profiled, source FROM step_times WHERE rank = ? ORDER BY step",
                        [int(rank)])
    prof = [int(s) for s, _, p, _ in rows if p]
    if not prof:
        return None
    ms = {int(s): float(x) for s, x, _, _ in rows}
    p_ms = [ms[i] for i in prof]
    after = [x for i, x in ms.items() if i > prof[-1]]
    before = [x for i, x in ms.items() if 2 <= i < prof[0]]
    u_ms = after or before
    if not u_ms:
        return None
    pm, um = float(np.median(p_ms)), float(np.median(u_ms))
    return {"profiled_step_ms": round(pm, 3), "unprofiled_step_ms": round(um, 3),
            "overhead_ms": round(max(pm - um, 0.0), 3), "source": str(rows[0][3])}


def unprofiled_share(profile: Profile | None, rank: int | None, impact_ms: float | None,
                     profiled_step_ms: float | None) -> tuple[float | None, str]:
    """(impact as % of the step, which step it was judged against): the unprofiled step of meta/ when
    known (what the user's run takes without the profiler, whose own host cost inflates the profiled step),
    else the profiled mean step."""
    if impact_ms is None:
        return None, "none"
    ov = profiler_overhead(profile, rank) if rank is not None else None
    if ov and ov["unprofiled_step_ms"] > 0:
        return round(100.0 * impact_ms / ov["unprofiled_step_ms"], 2), "unprofiled step (meta/step_times)"
    if profiled_step_ms:
        return round(100.0 * impact_ms / profiled_step_ms, 2), "profiled mean step"
    return None, "none"


_DATALOADER_RE = re.compile(r"enumerate\(DataLoader\)|_MultiProcessingDataLoaderIter|_SingleProcessDataLoaderIter|"
                            r"dataloader", re.I)
_ALLOC_RE = re.compile(r"^(cudaMalloc|cudaFree|hipMalloc|hipFree|cuMemAlloc|cuMemFree)", re.I)
ATTRIBUTION_KINDS = ("collective_wait", "dataloader", "allocator", "sync", "gc_or_untraced", "launch")


def idle_gaps(starts: np.ndarray, ends: np.ndarray, w0: int, w1: int) -> tuple[np.ndarray, np.ndarray]:
    """Idle stretches of the device inside [w0, w1): between consecutive merged busy intervals only (the time
    before the first and after the last op of the window is the step boundary's)."""
    m = (ends > w0) & (starts < w1)
    s, e = np.maximum(starts[m], w0), np.minimum(ends[m], w1)
    if s.size < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    g0, g1 = e[:-1], s[1:]
    k = g1 > g0
    return g0[k], g1[k]


def attribute_idle(g0: np.ndarray, g1: np.ndarray, host: Any, silences: tuple[np.ndarray, np.ndarray]
                   ) -> np.ndarray:
    """What the host did in each device idle stretch [g0, g1) (ns), one of ATTRIBUTION_KINDS, first match:
    an open collective (waiting for peers), a data-loader fetch, allocator calls (each covering at least half
    of the stretch), a synchronize that returned inside it (the device drained, the host then relaunched),
    a host silence over half of it (GC or untraced Python work: Kineto records neither), else launching
    (the host was dispatching work but not fast enough to keep the device busy). `host`: name, start_ns,
    dur_ns of the rank's host events; `silences`: host_silences of the rank."""
    from ..timeline.intervals import Coverage

    out = np.full(g0.size, "launch", dtype=object)
    if g0.size == 0:
        return out
    # each distinct name is matched once (a rank's host events repeat a few hundred names every step)
    codes, uniq = pd.factorize(host["name"].astype(str), sort=False)
    uniq = [str(u) for u in uniq]
    s = host["start_ns"].to_numpy(dtype=np.int64)
    e = s + host["dur_ns"].to_numpy(dtype=np.int64)
    gap = (g1 - g0).astype(np.float64)

    def matching(test) -> np.ndarray:
        return np.array([bool(test(u)) for u in uniq], dtype=bool)[codes] if uniq else np.zeros(0, bool)

    def share(rx: re.Pattern[str]) -> np.ndarray:
        m = matching(rx.search)
        return Coverage(s[m], e[m]).within(g0, g1) / gap if m.any() else np.zeros(g0.size)

    sync_m = matching(DRAINED_RE.match)
    se = np.sort(e[sync_m])
    j = np.searchsorted(se, g0, side="left")
    synced = (j < se.size) & (se[np.minimum(j, max(se.size - 1, 0))] < g1) if se.size else np.zeros(g0.size, bool)
    silent = Coverage(*silences).within(g0, g1) / gap if silences[0].size else np.zeros(g0.size)
    rules = [("gc_or_untraced", silent >= 0.5), ("sync", synced), ("allocator", share(_ALLOC_RE) >= 0.5),
             ("dataloader", share(_DATALOADER_RE) >= 0.5), ("collective_wait", share(COLLECTIVE_RE) >= 0.5)]
    for kind, hit in rules:          # the last rule that matches wins: reverse precedence order
        out[hit] = kind
    return out
