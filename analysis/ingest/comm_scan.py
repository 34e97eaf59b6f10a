"""The native path of communication.json and communication_matrix.json: the C scanner's `forest()`.

Both files are objects nested four deep (step -> kind -> op -> info, and for the matrix -> link) with a
few numbers at the leaves: 6k ops and 48k links for a rank of 100k trace events. Decoding them into
structs and walking the structs in Python cost twice the parse floor (a generic msgspec decode). Here
`Scanner.forest()` reads the document a block (`BLOCK` bytes) at a time into a table of the values it
completes (parent row, depth, key, kind, number, string id, the number's text span), each table a
document by itself (the open step and kind objects come again at its top), and numpy picks each
field's column out of it; Python loops only run per op, per distinct step and per distinct (group, link
key). The rows gathered from each block's table are joined at the end, so the file and its table are
never in memory whole: on a 46 MB communication.json (a rank of 400k trace events) reading it whole into
one table peaked at 176 MB above the reader's start, a block at a time at 58 MB (the columns kept are
~40 MB of it); 79 -> 46 MB on its 17 MB communication_matrix.json.

One rule set: the gathered columns (`ascend_text.CommRows` / `MatrixRows`) are converted by the same
`comm_rows_columns` / `matrix_rows_columns` as the typed msgspec decoding's, and a document is taken here
only when the typed decoding would take it with the same values:
  * every value at depths 1-3 (and the matrix's links at depth 4) is an object, as the typed decoders'
    dict levels and structs require; no object repeats a key;
  * the float fields ("Elapse Time(ms)", "Transit Size(MB)", ...) are numbers within int64 and float range
    or null: read as the correctly rounded double msgspec gives; "Start Timestamp(us)" and a packet's
    count and total are kept as the typed decoding's float_hook=str keeps them (an int, or the number's
    text);
  * "Op Name" / "Transport Type" are strings or null.
Anything else returns None, and the reader decodes the file as before (`_comm_json`): the typed structs,
then text, then Decimal, with its warnings. `tests/test_comm_scan.py` checks the two paths agree.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from . import ascend_text as A
from .kineto_scan import _tracescan, available

__all__ = ["available", "comm_columns", "matrix_columns"]


def _kinds(*kinds: int) -> np.ndarray:
    """A lookup table of tree value kinds: `table[kinds].all()` is `np.isin(kinds, ...)` at a tenth of the
    cost (it is asked ~20 times a tree)."""
    table = np.zeros(256, dtype=bool)
    table[list(kinds)] = True
    return table


# tree value kinds read as a float field (numbers, null), as the typed decoding's `Any` (also str), as a
# string field and as an object field that may be null
_t = _tracescan
_NUMBER_KINDS = _kinds(_t.V_INT, _t.V_FLOAT, _t.V_NULL) if _t else _kinds()
_RAW_KINDS = _kinds(_t.V_INT, _t.V_FLOAT, _t.V_NULL, _t.V_STR) if _t else _kinds()
_STR_KINDS = _kinds(_t.V_STR, _t.V_NULL) if _t else _kinds()
_OBJ_KINDS = _kinds(_t.V_OBJ, _t.V_NULL) if _t else _kinds()
_EXP_NONE = -(1 << 15)          # the tree's "not an exact decimal"
_I64_MAX = (1 << 63) - 1
BLOCK = 1 << 20  # bytes read at a time: ~2 MB of table; 4-8 MB blocks were no faster


class _Back(Exception):
    """The scanner hands the document back to the msgspec path."""


class _Strings:
    """A document's strings so far (its trees share the scanner's string ids): as a list, by text, and as
    an object array (`texts`) whose unused slots, the last one always among them, are None, so that
    `texts[sid]` answers None for -1 (grown by doubling: a tree a block)."""

    def __init__(self) -> None:
        self.strs: list[str] = []
        self.texts = np.full(1024, None, dtype=object)
        self.ids: dict[str, int] = {}

    def add(self, fresh: list[str]) -> None:
        if not fresh:
            return
        n, m = len(self.strs), len(self.strs) + len(fresh)
        self.strs += fresh
        self.ids.update(zip(fresh, range(n, m), strict=True))
        if m >= len(self.texts):
            texts = np.full(max(2 * len(self.texts), m + 1), None, dtype=object)
            texts[:n] = self.texts[:n]
            self.texts = texts
        self.texts[n:m] = fresh


class _Tree:
    """A document's values (see `_tracescan.c`, forest()): one row per value, a parent before its children."""

    def __init__(self, data: bytes, cols: tuple[bytearray, ...], strings: _Strings) -> None:
        self.data = data  # the block the text spans (off, len) point into
        self.parent = np.frombuffer(cols[0], dtype=np.int32)
        self.depth = np.frombuffer(cols[1], dtype=np.uint16)
        self.key = np.frombuffer(cols[2], dtype=np.int32)
        self.kind = np.frombuffer(cols[3], dtype=np.uint8)
        self.num = np.frombuffer(cols[4], dtype=np.float64)
        self.ival = np.frombuffer(cols[5], dtype=np.int64)
        self.exp = np.frombuffer(cols[6], dtype=np.int16)
        self.sid = np.frombuffer(cols[7], dtype=np.int32)
        self.off = np.frombuffer(cols[8], dtype=np.int64)
        self.len = np.frombuffer(cols[9], dtype=np.int32)
        self.strs = strings.strs
        self.texts = strings.texts
        self._ids = strings.ids
        self._at_rows: np.ndarray | None = None
        self._at_keys: np.ndarray | None = None

    def id(self, text: str) -> int:
        """The string id of `text`; -9 (no key) when the document has not had it so far."""
        return self._ids.get(text, -9)

    def at(self, rows: np.ndarray, key: str) -> np.ndarray:
        """The rows among `rows` whose key is `key` (the keys of the last `rows` asked are kept: the fields
        of a record are picked one key after another)."""
        if rows is not self._at_rows:
            self._at_rows, self._at_keys = rows, self.key[rows]
        return rows[self._at_keys == self.id(key)]

    def children(self, rows: np.ndarray, parents: np.ndarray) -> np.ndarray:
        """The rows among `rows` whose parent is one of `parents`."""
        mark = np.zeros(len(self.kind) + 1, dtype=bool)
        mark[parents] = True
        return rows[mark[self.parent[rows]]]

    def numbers(self, rows: np.ndarray, pos: _Index, n: int) -> np.ndarray | None:
        """A float64 column of n records from field rows `rows` (record i = pos[parent]): the number, NaN for
        null or absent; None when a value is not a number or null (or out of int64 / float range)."""
        kinds = self.kind[rows]
        out = np.full(n, np.nan)
        if not len(rows):
            return out
        if not _NUMBER_KINDS[kinds].all():
            return None
        num = rows[kinds != _tracescan.V_NULL]
        values = self.num[num]
        if not np.isfinite(values).all():
            return None
        out[pos[self.parent[num]]] = values
        return out

    def raw(self, rows: np.ndarray) -> list[Any] | None:
        """The values of `rows` as the typed decoding's `Any` with float_hook=str gives them: an int, the
        number's text, a str, None; None when one is something else (an object, a list, a bool, a big int)."""
        kinds = self.kind[rows]
        if not _RAW_KINDS[kinds].all():
            return None
        out: list[Any] = self.texts[self.sid[rows]].tolist()  # str, or None for the others
        for j in np.flatnonzero(kinds == _tracescan.V_INT).tolist():
            out[j] = int(self.ival[rows[j]])
        for j in np.flatnonzero(kinds == _tracescan.V_FLOAT).tolist():
            o = int(self.off[rows[j]])
            out[j] = self.data[o:o + int(self.len[rows[j]])].decode()
        return out

    def scaled(self, rows: np.ndarray, pos: _Index, n: int, digits: int) -> np.ma.MaskedArray | None:
        """A nullable int64 column of n records (record i = pos[parent]) from field rows `rows`: what
        `_scaled_i64(values, 10**digits, digits)` gives of the values `raw` gives, i.e. the value times
        10**digits, exact (round half up past `digits` decimals); NULL for null, absent, no number or beyond
        int64. From the scanner's decimal m * 10^e where that is exact within int64, else by `_scaled_i64`.
        None when a value is not a number, a string or null."""
        kinds = self.kind[rows]
        data = np.zeros(n, dtype=np.int64)
        mask = np.ones(n, dtype=bool)
        if not len(rows):
            return A._ma(data, mask)
        if not _RAW_KINDS[kinds].all():
            return None
        at = pos[self.parent[rows]]
        exp = self.exp[rows].astype(np.int64)
        e = exp + digits
        ok = (exp != _EXP_NONE) & (e >= 0) & (e <= 18)
        e = np.where(ok, e, 0)
        limit = _I64_MAX // np.power(10, e)
        m = self.ival[rows]
        ok &= (m >= -limit) & (m <= limit)  # m * 10^e within int64
        data[at[ok]] = m[ok] * np.power(10, e[ok])
        mask[at[ok]] = False
        rest = np.flatnonzero(~ok & (kinds != _tracescan.V_NULL))
        if len(rest):
            values = self.raw(rows[rest])
            if values is None:
                return None
            for i, v in zip(at[rest].tolist(), A._scaled_i64(values, 10**digits, digits), strict=True):
                if v is not None:
                    data[i] = v
                    mask[i] = False
        return A._ma(data, mask)

    def strings(self, rows: np.ndarray, pos: _Index, n: int) -> np.ndarray | None:
        """An object column of n records from field rows `rows`: the str, None for null or absent; None when
        a value is not a string or null."""
        kinds = self.kind[rows]
        if not _STR_KINDS[kinds].all():
            return None
        out = np.full(n, None, dtype=object)
        out[pos[self.parent[rows]]] = self.texts[self.sid[rows]]
        return out


def _trees(src: bytes | Path, block: int | None = None) -> Iterator[_Tree]:
    """The trees of a JSON document whose top is an object (a file, or bytes: the tests' documents), a
    block at a time (`Scanner.forest`); raises _Back when the extension is off, the file cannot be read,
    or the scanner hands the document back (bad JSON, a string only the reference decoder judges, a
    repeated key, the top not an object). A tree is used before the next is read (its text spans point
    into the block)."""
    if not available():
        raise _Back
    try:
        with contextlib.ExitStack() as stack:
            if isinstance(src, (bytes, bytearray)):
                view, at = memoryview(src), [0]

                def read(n: int) -> bytes:
                    at[0] += n
                    return bytes(view[at[0] - n:at[0]])
            else:
                read = stack.enter_context(open(src, "rb")).read
            yield from _forest(read, block or BLOCK)
    except OSError:
        raise _Back from None


def _forest(read: Callable[[int], bytes], block: int) -> Iterator[_Tree]:
    t = _tracescan
    scanner, strings = t.Scanner([]), _Strings()
    buf = bytearray(read(block))
    pos, eof, size = 0, not buf, block
    while True:
        status, pos, cols, fresh, dup = scanner.forest(buf, pos, eof)
        if status not in (t.DONE, t.NEED_MORE) or dup:
            raise _Back
        strings.add(fresh)
        tree = _Tree(buf, cols, strings)
        del cols
        yield tree
        del tree  # (so that one tree at a time is in memory, and the block can be reused)
        if status == t.DONE:
            return
        # a value longer than the blocks read so far is read again with the next one: read twice as much
        # each time, so that a value of n bytes costs O(n), not O(n^2 / block)
        size = size * 2 if pos == 0 else block
        more = read(size)
        del buf[:pos]
        buf += more
        pos, eof = 0, not more


def _joined(parts: list[Any], offsets: dict[str, str] | None = None) -> Any:
    """Rows gathered per tree (`CommRows` / `MatrixRows`) as one: lists and arrays concatenated; a field
    of `offsets` indexes rows of another field (b_op: the ops), so each part's is shifted past the rows
    of that field in the parts before it."""
    if len(parts) == 1:
        return parts[0]
    offsets = offsets or {}
    out = {}
    for f in dataclasses.fields(parts[0]):
        values = [getattr(p, f.name) for p in parts]
        if f.name in offsets:
            base = np.cumsum([0] + [len(getattr(p, offsets[f.name])) for p in parts[:-1]])
            values = [v + b for v, b in zip(values, base.tolist(), strict=True)]
        if isinstance(values[0], list):
            out[f.name] = list(itertools.chain.from_iterable(values))
        elif any(isinstance(v, np.ma.MaskedArray) for v in values):
            out[f.name] = np.ma.concatenate(values)
        else:
            out[f.name] = np.concatenate(values)
    return type(parts[0])(**out)


class _Index:
    """Record numbers of rows: `index[some of rows]` -> their positions in `rows`, or `values` at those
    positions. A map over every row of the tree, int32 (~150 KB for a 1 MB block), so a lookup is one
    gather (a binary search instead cost the matrix 9 ms of 32)."""

    def __init__(self, n_rows: int, rows: np.ndarray, values: np.ndarray | None = None) -> None:
        self.map = np.full(n_rows + 1, -1, dtype=np.int32)
        self.map[rows] = np.arange(len(rows)) if values is None else values

    def __getitem__(self, of: np.ndarray) -> np.ndarray:
        return self.map[of].astype(np.int64)


def _objects_to(t: _Tree, depth: int) -> np.ndarray | None:
    """The rows at `depth` when every value at depths 1..depth is an object (the typed decoders' dict
    levels), else None."""
    d = t.depth
    if (t.kind[(d >= 1) & (d <= depth)] != _tracescan.V_OBJ).any():
        return None
    return np.flatnonzero(d == depth)


def _op_keys(t: _Tree, ops: np.ndarray) -> tuple[list[str], list[int | None]]:
    """The ops' keys and their steps' numbers (`_step_number` of each distinct step key)."""
    step_rows = t.parent[t.parent[ops]]
    distinct, inverse = np.unique(step_rows, return_inverse=True)
    numbers = [A._step_number(t.strs[k]) for k in t.key[distinct].tolist()]
    return t.texts[t.key[ops]].tolist(), [numbers[i] for i in inverse.tolist()]


def _comm_rows(t: _Tree) -> A.CommRows | bool | None:
    """`CommRows` of communication.json; False: no op; None: leave the file to the msgspec path."""
    ops = _objects_to(t, 3)
    if ops is None:
        return None
    keys, steps = _op_keys(t, ops)
    keep = [k != "Total Op Info" for k in keys]
    if not all(keep):
        ops = ops[np.array(keep, dtype=bool)]
        keys = [k for k, ok in zip(keys, keep, strict=True) if ok]
        steps = [s for s, ok in zip(steps, keep, strict=True) if ok]
    if not len(ops):
        return False
    n = len(ops)
    parts = [k.partition("@") for k in keys]
    name, group = [p[0] for p in parts], [p[2] or None for p in parts]
    d4 = t.children(np.flatnonzero(t.depth == 4), ops)
    op_pos = _Index(len(t.kind), ops)

    time_rows = t.at(d4, "Communication Time Info")
    if not _OBJ_KINDS[t.kind[time_rows]].all():
        return None
    time_objs = time_rows[t.kind[time_rows] == _tracescan.V_OBJ]
    time_pos = _Index(len(t.kind), time_objs, op_pos[t.parent[time_objs]])  # a time object -> its op
    d5 = np.flatnonzero(t.depth == 5)
    fields = t.children(d5, time_objs)
    start = t.scaled(t.at(fields, "Start Timestamp(us)"), time_pos, n, 3)
    if start is None:
        return None
    times = [t.numbers(t.at(fields, f), time_pos, n) for f in
             ("Elapse Time(ms)", "Transit Time(ms)", "Wait Time(ms)", "Synchronization Time(ms)", "Idle Time(ms)")]
    if any(c is None for c in times):
        return None

    band_info = t.at(d4, "Communication Bandwidth Info")
    if not _OBJ_KINDS[t.kind[band_info]].all():
        return None
    bands = t.children(d5, band_info[t.kind[band_info] == _tracescan.V_OBJ])
    if (t.kind[bands] != _tracescan.V_OBJ).any():  # the typed decoding's _Band structs
        return None
    nb = len(bands)
    b_op = op_pos[t.parent[t.parent[bands]]]
    b_pos = _Index(len(t.kind), bands)
    d6 = t.children(np.flatnonzero(t.depth == 6), bands)
    b_cols = [t.numbers(t.at(d6, f), b_pos, nb) for f in
              ("Transit Size(MB)", "Transit Time(ms)", "Bandwidth(GB/s)", "Large Packet Ratio")]
    if any(c is None for c in b_cols):
        return None
    packets = _packets(t, t.at(d6, "Size Distribution"), b_pos)
    if packets is None:
        return None
    elapse, transit, wait, sync, idle = times
    size, b_transit, bw, lpr = b_cols
    return A.CommRows(steps, name, group, start, elapse, transit, wait, sync, idle, b_op,
                      t.texts[t.key[bands]].tolist(), size, b_transit, bw, lpr, *packets)


def _packets(t: _Tree, dist_rows: np.ndarray, b_pos: _Index) -> tuple[Any, ...] | None:
    """(transport row, packet key, count, total ns) of the packet buckets of the "Size Distribution"
    objects `dist_rows`: their members whose value is a list of at least two (count, total); None when a
    count or total is not a number, a string or null."""
    objs = dist_rows[t.kind[dist_rows] == _tracescan.V_OBJ]
    packets = t.children(np.flatnonzero(t.depth == 7), objs) if len(objs) else objs
    lists = packets[t.kind[packets] == _tracescan.V_ARR]
    elems = t.children(np.flatnonzero(t.depth == 8), lists) if len(lists) else lists
    second = elems[t.key[elems] == -2]            # a list with a second element has at least two
    lists = t.parent[second]
    first = elems[t.key[elems] == -1]
    first = first[np.isin(t.parent[first], lists)]
    pos = _Index(len(t.kind), lists)
    count = t.scaled(first, pos, len(lists), 0)
    total = t.scaled(second, pos, len(lists), 6)
    if count is None or total is None:
        return None
    return b_pos[t.parent[t.parent[lists]]], t.texts[t.key[lists]].tolist(), count, total


def comm_columns(src: bytes | Path, block: int | None = None) -> tuple[Any, ...] | None:
    """`ascend_text._comm_json_columns` of communication.json (a path, or its bytes) as its typed decoding
    gives them, or None when this path does not take the file (see the module docstring)."""
    parts = []
    try:
        for t in _trees(src, block):
            rows = _comm_rows(t)
            del t
            if rows is None:
                return None
            if rows is not False:
                parts.append(rows)
    except _Back:
        return None
    if not parts:
        return None, None, None, 0
    try:
        return A.comm_rows_columns(_joined(parts, {"b_op": "step", "p_band": "b_name"}), typed=True)
    except A._NumbersAsText:
        return None


def matrix_columns(src: bytes | Path, reader: Any, block: int | None = None) -> tuple[Any, ...] | None:
    """`_RankReader._matrix_columns` (links, unmapped groups, bad link keys) of communication_matrix.json (a
    path, or its bytes) as its typed decoding gives them, or None when this path does not take the file."""
    parts, unmapped, bad_keys = [], set(), 0
    ranks: dict[tuple[str, int], Any] = {}  # (group, link key id) -> its (src, dst), for every tree
    try:
        for t in _trees(src, block):
            got = _matrix_rows(t, reader, ranks)
            del t
            if got is None:
                return None
            rows, groups, bad = got
            unmapped |= groups
            bad_keys += bad
            if rows is not None:
                parts.append(rows)
    except _Back:
        return None
    if not parts:
        return None, unmapped, bad_keys
    try:
        # (exact: the tree tells strings from numbers, so no number hides among the strings)
        return A.matrix_rows_columns(_joined(parts), True, True), unmapped, bad_keys
    except A._NumbersAsText:
        return None


def _matrix_rows(t: _Tree, reader: Any,
                 ranks: dict[tuple[str, int], Any]) -> tuple[A.MatrixRows | None, set[str], int] | None:
    """(`MatrixRows` or None: no link, unmapped groups, bad link keys) of one tree of
    communication_matrix.json (`ranks`: `reader._link_ranks` of the (group, link key id) pairs so far);
    None: leave the file to the msgspec path."""
    links = _objects_to(t, 4)
    if links is None:
        return None
    ops = np.flatnonzero(t.depth == 3)
    keys, steps = _op_keys(t, ops)
    unmapped: set[str] = set()
    known = reader.groups
    n_ops = len(ops)
    op_keep = np.zeros(n_ops + 1, dtype=bool)  # (the last slot: links of no op, never)
    names: list[str] = [""] * n_ops
    groups: list[str | None] = [None] * n_ops
    link_op = _Index(len(t.kind), ops)[t.parent[links]]
    starts = np.searchsorted(link_op, np.arange(n_ops + 1))  # (links are in op order)
    for i, op_key in enumerate(keys):
        name, _, group = op_key.partition("@")
        if op_key == "Total Op Info" or ("-" in name and A._AGGREGATE_KEY_RE.search(name)):
            continue
        if group and group not in known and \
                reader._local_group(group, t.texts[t.key[links[starts[i]:starts[i + 1]]]].tolist()):
            unmapped.add(group)
        op_keep[i] = True
        names[i], groups[i] = name, group or None
    links = links[op_keep[link_op]]
    link_op = link_op[op_keep[link_op]]
    if not len(links):
        return None, unmapped, 0

    # (src, dst) of each distinct (group, link key)
    group_codes: dict[str | None, int] = {}
    op_group = np.array([group_codes.setdefault(g, len(group_codes)) for g in groups], dtype=np.int64)
    code_group = list(group_codes)
    link_key = t.key[links].astype(np.int64)
    pair = op_group[link_op] * (len(t.strs) + 1) + link_key
    distinct, inverse = np.unique(pair, return_inverse=True)
    src_of, dst_of = np.zeros(len(distinct), dtype=np.int64), np.zeros(len(distinct), dtype=np.int64)
    good = np.ones(len(distinct), dtype=bool)
    for j, (g, k) in enumerate(zip((distinct // (len(t.strs) + 1)).tolist(),
                                   (distinct % (len(t.strs) + 1)).tolist(), strict=True)):
        group = code_group[g] or ""
        if (sd := ranks.get((group, k), ranks)) is ranks:
            sd = ranks[group, k] = reader._link_ranks(group, t.strs[k])
        if sd is None:
            good[j] = False
        elif not all(type(r) is int and -(1 << 63) <= r < (1 << 63) for r in sd):
            return None
        else:
            src_of[j], dst_of[j] = sd
    ok = good[inverse]
    bad_keys = int(len(ok) - ok.sum())
    if bad_keys:
        links, link_op, inverse = links[ok], link_op[ok], inverse[ok]
        if not len(links):
            return None, unmapped, bad_keys
    n = len(links)
    pos = _Index(len(t.kind), links)
    fields = t.children(np.flatnonzero(t.depth == 5), links)
    op_name = t.strings(t.at(fields, "Op Name"), pos, n)
    transport = t.strings(t.at(fields, "Transport Type"), pos, n)
    nums = [t.numbers(t.at(fields, f), pos, n) for f in ("Transit Size(MB)", "Transit Time(ms)", "Bandwidth(GB/s)")]
    if op_name is None or transport is None or any(c is None for c in nums):
        return None
    kept_ops, counts = np.unique(link_op, return_counts=True)
    no_null = np.zeros(n, dtype=bool)
    rows = A.MatrixRows([steps[i] for i in kept_ops.tolist()], counts.tolist(),
                        A._objects(names)[link_op].tolist(), A._objects(groups)[link_op].tolist(),
                        A._ma(src_of[inverse], no_null), A._ma(dst_of[inverse], no_null.copy()),
                        op_name.tolist(), transport.tolist(), *nums)
    return rows, unmapped, bad_keys
