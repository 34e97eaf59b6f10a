"""Per-rank summaries, computed where a rank is parsed: its per-step breakdown and its kernel totals.

Every engine runs `parse_rank` for each rank (here, in a local parse worker, or in a Ray task), and that
adds these two small tables to the rank's parts, so the driver answers the cross-rank questions from rows
proportional to ranks x steps instead of reading every device op of every rank:

* `step_breakdown`: one row per `steps` row, the integer-ns quantities of the breakdown
  (`timeline.breakdown.step_breakdown_ns`, the one implementation: `metrics.breakdown` calls it too when it computes a
  rank's breakdown from its events, e.g. with hta_compat);
* `kernel_totals`: per (step, device-op name, category): count, total and longest duration in ns; the top
  kernels of a rank, a step or the whole job are a GROUP BY over it.

The inputs are the rank's own typed columns as the writer will insert them (`RankTables.parts()` and, for a
streaming reader, the blocks it hands to the sink), so a summary equals what the driver would compute from
the stored rows. This module imports numpy only (a parse worker stays small).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from ..ingest.base import Coded
from ..ingest.formats import is_ascend
from ..timeline.breakdown import Columns, step_breakdown_ns

STEP_TABLE = "step_breakdown"
KERNEL_TABLE = "kernel_totals"
# The driver's receive ops where a rank has no comm_ops rows: `lower(name) LIKE 'hcom_receive%'` (the `_`
# of LIKE is any one character)
_HCOM_RECEIVE = re.compile(r"hcom.receive", re.S)
_RECEIVE_TYPES = ("receive", "recv")





def factorize(col: Any) -> tuple[np.ndarray, list[Any]]:
    """A text column (Coded or object array) as (int64 codes, labels); NULL is code -1."""
    if isinstance(col, Coded):
        return np.asarray(col.codes, dtype=np.int64), list(col.labels)
    index: dict[Any, int] = {}
    codes = np.fromiter((-1 if v is None else index.setdefault(v, len(index)) for v in col), dtype=np.int64,
                        count=len(col))
    return codes, list(index)


def _label_mask(codes: np.ndarray, labels: list[Any], keep: Callable[[Any], bool]) -> np.ndarray:
    """Rows whose label passes `keep` (NULL rows never do)."""
    table = np.array([bool(keep(v)) for v in labels] + [False], dtype=bool)
    return table[codes]  # -1 -> the False at the end


def _ints(col: Any) -> tuple[np.ndarray, np.ndarray]:
    """(values as int64 with NULL as 0, NULL mask) of an integer column."""
    return (np.asarray(np.ma.getdata(col), dtype=np.int64), np.ma.getmaskarray(col))


class RankSummary:
    """Collects, block by block, what a rank's summaries need from its device ops, comm ops and steps (each
    block as `RankTables.parts()` types it, streamed or not), then gives the summary tables (`parts`).

    Holds per device op its start, end and three flags, and the kernel totals merged per block (a few rows
    per distinct name and step), never a block's text."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.ops: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []
        self.kernels: dict[tuple[str, str, int | None], list[int]] = {}
        self.comm_rows = 0
        self.recv: list[tuple[np.ndarray, np.ndarray]] = []
        self.steps: list[Columns] = []
        self.format: str | None = None
        self.failed: str | None = None  # why the summaries cannot be given (see add)

    def tee(self, sink: Callable[[int, str, Columns], None]) -> Callable[[int, str, Columns], None]:
        """A streaming reader's sink that adds each block here before handing it to `sink`."""
        def forward(rank: int, table: str, cols: Columns) -> None:
            self.add(table, cols)
            sink(rank, table, cols)
        return forward

    def add(self, table: str, cols: dict[str, Any]) -> None:
        """Take in one typed block of the rank (only device_ops, comm_ops, steps and ranks are read). A
        failure here never skips the rank: its summaries are left out (`parts`), and the driver computes
        its breakdown from its events as for a store without them."""
        if self.failed is not None:
            return
        try:
            self._add(table, cols)
        except Exception as e:  # a summary bug must not cost the rank its events
            self.failed = f"{type(e).__name__}: {e}"

    def _add(self, table: str, cols: dict[str, Any]) -> None:
        if table == "device_ops":
            self._device_ops(cols)
        elif table == "comm_ops":
            n = len(cols["start_ns"])
            self.comm_rows += n
            if "op_type" in cols:
                codes, labels = factorize(cols["op_type"])
                m = _label_mask(codes, labels, lambda v: v in _RECEIVE_TYPES)
                if m.any():
                    self.recv.append((np.asarray(cols["start_ns"], dtype=np.int64)[m],
                                      np.asarray(cols["elapse_ns"], dtype=np.int64)[m]))
        elif table == "steps":
            self.steps.append(cols)
        elif table == "ranks" and "format" in cols and len(cols["format"]):
            codes, labels = factorize(cols["format"])
            self.format = labels[int(codes[0])] if codes[0] >= 0 else None

    def _device_ops(self, cols: dict[str, Any]) -> None:
        start = np.asarray(cols["start_ns"], dtype=np.int64)
        dur = np.asarray(cols["dur_ns"], dtype=np.int64)
        c_codes, c_labels = factorize(cols["category"])
        n_codes, n_labels = factorize(cols["name"])
        comp = _label_mask(c_codes, c_labels, lambda v: v == "compute")
        comm = _label_mask(c_codes, c_labels, lambda v: v == "communication")
        hcom_recv = comm & _label_mask(n_codes, n_labels, lambda v: _HCOM_RECEIVE.match(v.lower()) is not None)
        self.ops.append((start, start + dur, comp, comm, hcom_recv))
        self._kernels(n_codes, n_labels, c_codes, c_labels, cols.get("step"), dur)

    def _kernels(self, n_codes: np.ndarray, n_labels: list[Any], c_codes: np.ndarray, c_labels: list[Any],
                 step: Any, dur: np.ndarray) -> None:
        """Merge one block's (step, name, category) -> count, total, max into `kernels`."""
        if step is None:
            s_val, s_null = np.zeros(dur.size, dtype=np.int64), np.ones(dur.size, dtype=bool)
        else:
            s_val, s_null = _ints(step)
        s_labels, s_code = np.unique(np.where(s_null, 0, s_val), return_inverse=True)
        s_code = np.where(s_null, len(s_labels), np.asarray(s_code).reshape(-1))
        # one int64 key per row: a sort of one column, not a unique over the rows of a 2-D array
        ns, nc = len(s_labels) + 1, len(c_labels) + 1
        key = ((n_codes + 1) * nc + (c_codes + 1)) * ns + s_code
        order = np.argsort(key, kind="stable")
        k = key[order]
        cuts = np.flatnonzero(np.r_[True, k[1:] != k[:-1]]) if k.size else np.empty(0, np.int64)
        d = dur[order]
        count = np.diff(np.r_[cuts, d.size]).tolist()
        total = (np.add.reduceat(d, cuts) if d.size else d).tolist()
        longest = (np.maximum.reduceat(d, cuts) if d.size else d).tolist()
        uk = k[cuts]
        steps = [None if i == len(s_labels) else int(s_labels[i]) for i in (uk % ns).tolist()]
        names = ((uk // ns) // nc - 1).tolist()
        cats = ((uk // ns) % nc - 1).tolist()
        for n, c, st, cnt, tot, mx in zip(names, cats, steps, count, total, longest, strict=True):
            key3 = (n_labels[n], c_labels[c], st)
            have = self.kernels.get(key3)
            if have is None:
                self.kernels[key3] = [cnt, tot, mx]
            else:
                have[0] += cnt
                have[1] += tot
                have[2] = max(have[2], mx)

    def parts(self, warnings: list[str]) -> list[tuple[str, Columns]]:
        """The summary tables of the rank, typed as `RankTables.parts()` types a block (none when empty);
        where they cannot be computed, none and a line in `warnings` (the rank's ingest warnings)."""
        if self.failed is None:
            try:
                return self._parts()
            except Exception as e:  # as in add()
                self.failed = f"{type(e).__name__}: {e}"
        warnings.append(f"per-rank summaries not computed ({self.failed}): its breakdown is computed from "
                        "its events")
        return []

    def _parts(self) -> list[tuple[str, Columns]]:
        out: list[tuple[str, Columns]] = []
        if self.steps:
            out.append((STEP_TABLE, self._step_rows()))
        if self.kernels:
            keys = list(self.kernels)
            vals = np.array(list(self.kernels.values()), dtype=np.int64).reshape(-1, 3)
            steps = [k[2] for k in keys]
            out.append((KERNEL_TABLE, {
                "rank": np.full(len(keys), self.rank, dtype=np.int64),
                "step": np.ma.MaskedArray([s or 0 for s in steps], mask=[s is None for s in steps], dtype=np.int64)
                if None in steps else np.array(steps, dtype=np.int64),
                "name": _text([k[0] for k in keys]), "category": _text([k[1] for k in keys]),
                "count": vals[:, 0], "total_ns": vals[:, 1], "max_ns": vals[:, 2]}))
        return out

    def _step_rows(self) -> Columns:
        st = {c: _concat([b[c] for b in self.steps]) for c in ("step", "start_ns", "end_ns")}
        n = st["step"].size
        kept = _concat([np.asarray(b["kept"], dtype=bool) if "kept" in b else np.ones(len(b["step"]), dtype=bool)
                        for b in self.steps])
        for side, col in (("0", "device_start_ns"), ("1", "device_end_ns")):
            vals, nulls = [], []
            for b in self.steps:
                v, null = _ints(b[col]) if col in b else (np.zeros(len(b["step"]), np.int64),
                                                           np.ones(len(b["step"]), bool))
                vals.append(v)
                nulls.append(null)
            st["d" + side] = np.where(_concat(nulls), 0, _concat(vals))
            st[f"d{side}_known"] = ~_concat(nulls)
        order = np.argsort(np.asarray(st["step"], dtype=np.int64), kind="stable")
        st = {k: np.asarray(v)[order] for k, v in st.items()}
        starts, ends, comp, comm, hcom = (_concat([o[i] for o in self.ops]) if self.ops else np.empty(0, dt)
                                          for i, dt in enumerate((np.int64, np.int64, bool, bool, bool)))
        if self.comm_rows:
            r_start = _concat([r[0] for r in self.recv]) if self.recv else np.empty(0, np.int64)
            r_elapse = _concat([r[1] for r in self.recv]) if self.recv else np.empty(0, np.int64)
        else:  # no comm_ops rows: the trace's hcom_receive* tasks (as the driver's query)
            r_start, r_elapse = starts[hcom], ends[hcom] - starts[hcom]
        s = step_breakdown_ns(starts, ends, comp, comm, st, r_start, r_elapse, ascend=is_ascend(self.format))
        bubble = s.pop("bubble_ns")
        known = s.pop("bubble_known")
        return {"rank": np.full(n, self.rank, dtype=np.int64), "kept": kept[order], **s,
                "bubble_ns": bubble if known.all() else np.ma.MaskedArray(bubble, mask=~known)}


def _concat(arrays: Iterable[np.ndarray]) -> np.ndarray:
    arrays = list(arrays)
    return arrays[0] if len(arrays) == 1 else np.concatenate(arrays)


def _text(values: list[str]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out
