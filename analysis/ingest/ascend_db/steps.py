"""Steps: STEP_TIME (torch_npu), else derived for MindSpore (see the package docstring)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .common import DATA_WAIT_RE, INIT_DATA_RE, STEP_MSG_RE
from .db import Db, Steps
from .rank import DbOut, DbRank


# ---- framework side (torch_npu) -----------------------------------------------------------------------
def step_time(db: Db) -> Steps:
    """STEP_TIME's host windows (torch_npu), by start."""
    empty = Steps(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64), "")
    if not db.has("STEP_TIME"):
        return empty
    d = db.fetch("STEP_TIME", {"id": ("id",), "start": ("startNs",), "end": ("endNs",)}, order="ORDER BY 2")
    rows = [(int(i), int(s), int(e)) for i, s, e in zip(d["id"], d["start"], d["end"], strict=False)
            if i is not None and s is not None and e is not None]
    if not rows:
        return empty
    ids, st, en = (np.array(c, dtype=np.int64) for c in zip(*rows, strict=False))
    return Steps(ids, st, en, "STEP_TIME")

# ---- MindSpore: steps without STEP_TIME --------------------------------------------------------------
def derive_steps(desc: DbRank, db: Db, out: DbOut, compute: pd.DataFrame | None, comm: pd.DataFrame | None,
                 other: pd.DataFrame | None) -> Steps:
    """Steps without STEP_TIME, the first way of the package docstring's (a)-(d) that finds some."""
    parts = [d[["start", "end"]] for d in (compute, comm, other) if d is not None and len(d)]
    if not parts:
        out.warn("no STEP_TIME and no device tasks: no steps")
        return Steps(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64), "")
    allt = pd.concat(parts, ignore_index=True)
    t0 = int(allt["start"].astype("int64").min())
    t1 = int(allt["end"].astype("int64").max())
    what = "no STEP_TIME table" if desc.framework == "mindspore" or not db.has("STEP_TIME") else \
        "STEP_TIME is empty"
    # (a) mstx ranges naming a step
    if db.has("MSTX_EVENTS"):
        d = db.fetch("MSTX_EVENTS", {"start": ("startNs",), "end": ("endNs",), "msg": ("message",)})
        win = []
        for s, e, m in zip(d["start"], d["end"], d["msg"], strict=False):
            mm = STEP_MSG_RE.search(db.s(m) or "")
            if mm and s is not None and e is not None and e > s:
                win.append((int(mm.group(1)), int(s), int(e)))
        if win:
            win.sort(key=lambda w: w[1])
            ids, st, en = (np.array(c, dtype=np.int64) for c in zip(*win, strict=False))
            out.warn(f"{what}: steps are the {len(win)} MSTX ranges that name a step")
            return Steps(ids, st, en, "MSTX")
    # (b) and (c) rely on graph-mode repetition: MindSpore only; torch_npu without steps gets (d)
    if desc.framework == "mindspore" and compute is not None and len(compute):
        seq = compute.sort_values("start", kind="stable")
        names = seq["name"].tolist()
        starts = seq["start"].astype("int64").to_numpy()
        # (b) repetition of the first kernel (a leading InitDataSetQueue skipped)
        k0 = 0
        while k0 < len(names) and INIT_DATA_RE.search(names[k0] or ""):
            k0 += 1
        if k0 < len(names):
            first = names[k0]
            occ = [i for i in range(k0, len(names)) if names[i] == first]
            if len(occ) >= 2 and min(np.diff([*occ, len(names)])) >= 2:
                out.warn(f"{what}: {len(occ)} steps derived from the repetition of the first kernel "
                          f"'{first}' (MindSpore 2.x timeline rule)")
                return _steps_from_starts(starts[occ], seq, allt, "repetition")
        # (c) GetNext / dequeue tasks of sink mode
        occ = [i for i, n in enumerate(names) if DATA_WAIT_RE.search(n or "")]
        if len(occ) >= 2:
            out.warn(f"{what}: {len(occ)} steps derived from the GetNext/dequeue tasks (sink mode)")
            return _steps_from_starts(starts[occ], seq, allt, "getnext")
    # (d) the whole collection as step 0
    if db.has("SESSION_TIME_INFO"):
        d = db.fetch("SESSION_TIME_INFO", {"s": ("startTimeNs",), "e": ("endTimeNs",)})
        if d["s"] and d["s"][0] is not None and d["e"][0] is not None:
            t0, t1 = min(t0, int(d["s"][0])), max(t1, int(d["e"][0]))
    out.warn(f"{what}: no step markers found; the whole collection is one step 0")
    return Steps(np.array([0]), np.array([t0]), np.array([t1]), "whole")


def _steps_from_starts(bounds: np.ndarray, compute: pd.DataFrame, allt: pd.DataFrame, how: str) -> Steps:
    """Steps cut at `bounds` (start ns of each step's first kernel) over every device task.

    Step k holds the tasks (compute, collectives, others) starting in [bounds[k], bounds[k+1]); it ends at
    the latest end among them (a collective can outlast the last kernel); its host window is [previous
    step's end, own end]. `first` = its forward start: the first compute task that is not a data fetch
    (GetNext / dequeue / InitDataSetQueue), as MindSpore's fp_point, so interval = fp − window start.
    """
    n = bounds.size
    st = allt["start"].astype("int64").to_numpy()
    en = allt["end"].astype("int64").to_numpy()
    seg = np.searchsorted(bounds, st, side="right") - 1
    last = bounds.copy()
    ok = seg >= 0
    np.maximum.at(last, seg[ok], en[ok])
    cst = compute["start"].astype("int64").to_numpy()
    names = compute["name"].fillna("").astype(str)
    fetch = (names.str.contains(DATA_WAIT_RE) | names.str.contains(INIT_DATA_RE)).to_numpy()
    cseg = np.searchsorted(bounds, cst, side="right") - 1
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    okc = (cseg >= 0) & ~fetch
    np.minimum.at(first, cseg[okc], cst[okc])
    first = np.where(first == np.iinfo(np.int64).max, bounds, first)
    win0 = np.concatenate(([bounds[0]], last[:-1]))
    return Steps(np.arange(1, n + 1, dtype=np.int64), win0, last, how, first)

# ---- emit -----------------------------------------------------------------------------------------
def emit_steps(out: DbOut, steps: Steps, comp: pd.DataFrame | None, devs: list[pd.DataFrame],
                phases_done: set[str]) -> None:
    t = out.t
    if steps.empty:
        return
    first: dict[int, int] = {}
    for df in devs:
        sub = df[df["step"] >= 0]
        if len(sub):
            g = sub.groupby("step")["start"].min()
            for s, v in g.items():
                first[int(s)] = min(first.get(int(s), int(v)), int(v))
    for sid, s0, s1 in zip(steps.ids, steps.start, steps.end, strict=False):
        d0 = first.get(int(sid))
        t.add("steps", step=int(sid), start_ns=int(s0), end_ns=int(s1),
              device_start_ns=d0, device_end_ns=int(s1) if d0 is not None else None, kept=True)
    t.has("steps")
    if steps.how in ("repetition", "getnext"):
        dev_first = steps.first if steps.first is not None else steps.start
        if "iteration_interval" not in phases_done:
            for k in range(1, steps.ids.size):
                t.add("step_phases", step=int(steps.ids[k]), phase="iteration_interval",
                      dur_ns=int(dev_first[k] - steps.start[k]))
        if comp is not None and "data_wait" not in phases_done:
            waits = comp[comp["name"].fillna("").str.contains(DATA_WAIT_RE) & (comp["step"] >= 0)]
            if len(waits):
                dur = (waits["end"].astype("int64") - waits["start"].astype("int64"))
                for s, v in dur.groupby(waits["step"]).sum().items():
                    t.add("step_phases", step=int(s), phase="data_wait", dur_ns=int(v))
        t.has("step_phases")
