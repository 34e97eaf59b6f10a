"""The native path of communication.json and communication_matrix.json: the C scanner's `tree()`.

Both files are objects nested four deep (step -> kind -> op -> info, and for the matrix -> link) with a
few numbers at the leaves: 6k ops and 48k links for a rank of 100k trace events. Decoding them into
structs and walking the structs in Python cost twice the parse floor (a generic msgspec decode). Here
`Scanner.tree()` reads the whole document into a table of its values (parent row, depth, key, kind,
number, string id, the number's text span) in one pass, and numpy picks each field's column out of it;
Python loops only run per op, per distinct step and per distinct (group, link key).

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

from typing import Any

import numpy as np

from . import ascend_text as A
from .kineto_scan import _tracescan, available

__all__ = ["available", "comm_columns", "matrix_columns"]

# tree() value kinds read as a float field (numbers, null) and as the typed decoding's `Any` (also str)
_NUMBER_KINDS = (_tracescan.V_INT, _tracescan.V_FLOAT, _tracescan.V_NULL) if _tracescan else ()
_RAW_KINDS = (*_NUMBER_KINDS, _tracescan.V_STR) if _tracescan else ()
_EXP_NONE = -(1 << 15)          # tree()'s "not an exact decimal"
_I64_MAX = (1 << 63) - 1


class _Tree:
    """A document's values (see `_tracescan.c`, tree()): one row per value, a parent before its children."""

    def __init__(self, data: bytes, cols: tuple[bytearray, ...], strs: list[str]) -> None:
        self.data = data
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
        self.strs = strs
        texts = np.empty(len(strs) + 1, dtype=object)  # the last slot answers for -1 (None)
        texts[:-1] = strs
        self.texts = texts

    def id(self, text: str) -> int:
        """The string id of `text`; -9 (no key) when the document never has it."""
        try:
            return self.strs.index(text)  # (a few lookups a file: no dict of every string)
        except ValueError:
            return -9

    def at(self, rows: np.ndarray, key: str) -> np.ndarray:
        """The rows among `rows` whose key is `key`."""
        return rows[self.key[rows] == self.id(key)]

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
        if not np.isin(kinds, _NUMBER_KINDS).all():
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
        if not np.isin(kinds, _RAW_KINDS).all():
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
        if not np.isin(kinds, _RAW_KINDS).all():
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
        if not np.isin(kinds, (_tracescan.V_STR, _tracescan.V_NULL)).all():
            return None
        out = np.full(n, None, dtype=object)
        out[pos[self.parent[rows]]] = self.texts[self.sid[rows]]
        return out


def _tree(data: bytes) -> _Tree | None:
    """The tree of a JSON document whose top is an object; None when the extension is off or the scanner
    hands the document back (bad JSON, a string only the reference decoder judges, a repeated key)."""
    if not available():
        return None
    t = _tracescan
    status, cols, strs, dup = t.Scanner([]).tree(data)
    if status != t.DONE or dup:
        return None
    tree = _Tree(data, cols, strs)
    if not len(tree.kind) or tree.kind[0] != t.V_OBJ:
        return None
    return tree


class _Index:
    """Record numbers of rows: `index[some of rows]` -> their positions in `rows`, or `values` at those
    positions. A map over every row of the tree, int32 (6 MB for a 46 MB communication.json), so a lookup
    is one gather (a binary search instead cost the matrix 9 ms of 32)."""

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
    if not np.isin(t.kind[time_rows], (_tracescan.V_OBJ, _tracescan.V_NULL)).all():
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
    if not np.isin(t.kind[band_info], (_tracescan.V_OBJ, _tracescan.V_NULL)).all():
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


def comm_columns(data: bytes) -> tuple[Any, ...] | None:
    """`ascend_text._comm_json_columns` of communication.json's bytes as its typed decoding gives them, or
    None when this path does not take the file (see the module docstring)."""
    t = _tree(data)
    if t is None:
        return None
    rows = _comm_rows(t)
    if rows is None:
        return None
    if rows is False:
        return None, None, None, 0
    try:
        return A.comm_rows_columns(rows, typed=True)
    except A._NumbersAsText:
        return None


def matrix_columns(data: bytes, reader: Any) -> tuple[Any, ...] | None:
    """`_RankReader._matrix_columns` (links, unmapped groups, bad link keys) of communication_matrix.json's
    bytes as its typed decoding gives them, or None when this path does not take the file."""
    t = _tree(data)
    if t is None:
        return None
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
        sd = reader._link_ranks(code_group[g] or "", t.strs[k])
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
    try:
        # (exact: the tree tells strings from numbers, so no number hides among the strings)
        return A.matrix_rows_columns(rows, True, True), unmapped, bad_keys
    except A._NumbersAsText:
        return None
