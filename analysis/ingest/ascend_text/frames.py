"""Array helpers of the rank reader: step windows, launch flows, factorized names and groups, nullable columns."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .common import (
    GROUP_THREAD_RE,
    HCOM_SUFFIX_LINES_RE,
    HCOM_SUFFIX_RE,
    INT32_MAX,
    LEVEL_RE,
    STEP_KEY_RE,
)
from .numbers import i64, ma
from .trace_events import INT_ONLY


def step_number(key: str) -> int | None:
    """'step12' -> 12 (communication*.json step keys); None when the key carries no number."""
    m = STEP_KEY_RE.search(key)
    return int(m.group(1)) if m else None


def level(v: Any) -> str | None:
    """'ProfilerLevel.Level1' / 'Level1' -> 'Level1'."""
    if v in (None, ""):
        return None
    m = LEVEL_RE.search(str(v))
    return m.group(1) if m else str(v)


@dataclass(frozen=True)
class Steps:
    """ProfilerStep windows sorted by start: ids, host start/end (ns)."""

    ids: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    start: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    end: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))

    @property
    def empty(self) -> bool:
        return self.ids.size == 0

    def of(self, t: np.ndarray) -> np.ndarray:
        """Step whose host window [start, end) contains t, else -1."""
        t = np.asarray(t, dtype=np.int64)
        if self.empty or t.size == 0:
            return np.full(t.shape, -1, dtype=np.int64)
        i = np.searchsorted(self.start, t, side="right") - 1
        ic = np.clip(i, 0, None)
        return np.where((i >= 0) & (t < self.end[ic]), self.ids[ic], -1)

    def of_device(self, t: np.ndarray) -> np.ndarray:
        """Like `of`, but device work that starts after its host step ended and before the next step began
        (the device lags the host) still belongs to the earlier step."""
        t = np.asarray(t, dtype=np.int64)
        if self.empty or t.size == 0:
            return np.full(t.shape, -1, dtype=np.int64)
        i = np.searchsorted(self.start, t, side="right") - 1
        ic = np.clip(i, 0, None)
        nxt = np.append(self.start[1:], self.end[-1])
        limit = np.maximum(self.end[ic], nxt[ic])
        return np.where((i >= 0) & (t < limit), self.ids[ic], -1)


@dataclass(frozen=True)
class Launches:
    """Launch links (`trace_view.launch_flows`), parallel lists: correlation id, the host end (tid, ns) and
    the device end (pid, tid, ns) of each."""

    corr: list[int] = field(default_factory=list)
    s_tid: list[Any] = field(default_factory=list)
    s_ts: list[int] = field(default_factory=list)
    f_pid: list[Any] = field(default_factory=list)
    f_tid: list[Any] = field(default_factory=list)
    f_ts: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.corr)


def op_types(names: list[str]) -> list[str]:
    """An hcom op's type: its name without the counter suffix (`hcom_allReduce__100_0_1` ->
    `hcom_allReduce_`), else the name. One regex pass over all the names joined by line (the same match
    per line as per name when no name holds a line break)."""
    text = "\n".join(names)
    if text.count("\n") != len(names) - 1:
        return [HCOM_SUFFIX_RE.sub("", n) or n for n in names]
    return [t or n for t, n in zip(HCOM_SUFFIX_LINES_RE.sub("", text).split("\n"), names, strict=True)]


def short_names(names: list[Any]) -> list[str]:
    """Kernel names without a MindSpore `launch op/` prefix (only split when some name has a '/')."""
    s = list(map(str, names))
    if "/" not in "".join(s):
        return s
    return [n.rsplit("/", 1)[-1] for n in s]


def first_rows(keys: Iterable[Any], rows: Sequence[int] | None = None) -> dict[Any, int]:
    """key -> its first row (0, 1, ... or `rows`), keys in order of first appearance."""
    first: dict[Any, int] = {}
    if rows is None:
        for j, key in enumerate(keys):
            first.setdefault(key, j)
    else:
        for j, key in zip(rows, keys, strict=True):
            first.setdefault(key, j)
    return first


def first_matches(keys: Iterable[Any], first: dict[Any, int], rows: Sequence[int]) -> tuple[list[int], list[int]]:
    """(left rows, right rows) of an inner join of the first left row of each key (rows `rows`, keys
    `keys`) with `first` (key -> right row), in left order."""
    seen: set[Any] = set()
    left: list[int] = []
    right: list[int] = []
    for i, key in zip(rows, keys, strict=True):
        if key not in seen:
            seen.add(key)
            j = first.get(key)
            if j is not None:
                left.append(i)
                right.append(j)
    return left, right


def _factorize(values: Sequence[Any]) -> tuple[np.ndarray, list[Any]]:
    """pd.factorize(values, use_na_sentinel=False) of a column of ints and str (None ...): (code of each row,
    the distinct values by code), codes in order of first appearance. A column of int64 ints goes through
    numpy (np.unique, then the codes renumbered by first row); any other through a dict (pandas' hash table
    groups ints and str as a dict does: by ==, the first row's value kept)."""
    n = len(values)
    if isinstance(values, np.ndarray) and values.dtype == np.int64:
        arr = values
    elif n and INT_ONLY.issuperset(map(type, values)):
        try:
            arr = np.array(values, dtype=np.int64)
        except OverflowError:
            arr = None
    else:
        arr = None
    if arr is not None:
        uniq, first, inv = np.unique(arr, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        renum = np.empty(len(order), dtype=np.intp)
        renum[order] = np.arange(len(order), dtype=np.intp)
        return renum[inv.reshape(-1)], uniq[order].tolist()
    index: dict[Any, int] = {}
    codes = np.fromiter((index.setdefault(v, len(index)) for v in values), dtype=np.intp, count=n)
    return codes, list(index)


def pair_codes(a: Sequence[Any], b: Sequence[Any]) -> tuple[np.ndarray, list[tuple[Any, Any]]]:
    """(code of each row, the distinct (a, b) pairs by code) of two columns: each column factorized, then the
    two codes combined into one (no tuple per row)."""
    ca, ua = _factorize(a)
    cb, ub = _factorize(b)
    nb = max(len(ub), 1)
    codes, pairs = _factorize(ca.astype(np.int64) * nb + cb)
    return codes, [(ua[k // nb], ub[k % nb]) for k in pairs]


def code_groups(codes: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """(code, its rows ascending) of each distinct code (a stable sort, then the runs)."""
    order = np.argsort(codes, kind="stable")
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    for rows in np.split(order, cuts) if len(order) else ():
        yield int(codes[rows[0]]), rows


def comm_lane(tname: str | None) -> tuple[bool | None, str | None]:
    """(carries hcom ops, group hash) of a Communication thread from its name: "Group <hash> Communication"
    (or another "...communication..." name that is not a "Plane"); (None, None) without a name."""
    if tname is None:
        return None, None
    m = GROUP_THREAD_RE.match(tname) if tname else None
    return (m is not None or ("communication" in tname.lower() and "plane" not in tname.lower()),
            m.group(1) if m else None)


def nulls(n: int) -> np.ma.MaskedArray:
    """n NULLs as a masked int64 array."""
    return ma(np.ones(n, dtype=np.int64), np.ones(n, dtype=bool))


def put(a: np.ma.MaskedArray, rows: np.ndarray, values: np.ma.MaskedArray) -> np.ma.MaskedArray:
    """A copy of `a` with `values` at `rows`."""
    data, mask = a._data.copy(), a._mask.copy()
    data[rows], mask[rows] = values._data, values._mask
    return ma(data, mask)


def concat(a: Any, b: Any) -> Any:
    """Two columns of one kind (numpy arrays or masked int64 arrays) one after the other."""
    if isinstance(a, np.ma.MaskedArray):
        return ma(np.concatenate([a._data, b._data]), np.concatenate([a._mask, b._mask]))
    return np.concatenate([a, b])


def int64s(col: np.ndarray) -> np.ndarray:
    """An int column of a `_Frame` without NULLs as int64."""
    return np.array(np.ma.getdata(col), dtype=np.int64)


def interned(texts: list[Any]) -> list[Any]:
    """The same values with one object per distinct value."""
    seen: dict[Any, Any] = {}
    return list(map(seen.setdefault, texts, texts))


def objects(col: Sequence[Any]) -> np.ndarray:
    """A column of scalars (str, int, None ...) as an object array (rows are then taken by index in C)."""
    a = np.empty(len(col), dtype=object)
    a[:] = col
    return a


def na_steps(a: np.ndarray) -> np.ma.MaskedArray:
    """Step ids (-1 = none) as an INTEGER column: negative and out-of-range ids are NULL."""
    if not a.size:
        return i64([])
    data = np.array(a, dtype=np.int64)
    mask = (data < 0) | (data > INT32_MAX)
    data[mask] = 1
    return ma(data, mask)


def jdump(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)
