"""The Kineto reader's native path: the C trace scanner (`_tracescan.c`) folding events into columns.

`kineto.read_rank` reads a trace through here when the extension is built (it is optional: a machine
without a C compiler installs stepdoctor without it, and `STEPDOCTOR_PURE_PYTHON=1` turns it off) and
through its msgspec path otherwise. Both paths fill the same `_Folder`, so everything after the fold
(steps, correlation, HTA's kept ops, the tables) is one code; `tests/test_tracescan.py` checks that the
two give identical tables on every shared trace and on hand-made quirks.

Division of work:
  * the head and tail of the document (the keys around `traceEvents`) are read by the msgspec path's
    own helpers (`_open_array`, `_read_tail`);
  * the scanner walks the event list block by block (1 MiB of decompressed bytes per call) and keeps
    every complete ("X") and instant ("i") event as one row of typed columns (`_tracescan.c` header);
  * an event with a stored field of an unexpected type (the scanner says ODD) is decoded on its own by
    the msgspec path's loose decoder and folded by `_Folder.fold`, in its place in file order;
  * anything else the scanner does not accept (bad JSON, a list that is not of objects, an odd layout)
    raises `Fallback`, and `read_rank` reads the file again on the msgspec path, which reports the
    error with the message and byte offset it always has. Good input never takes that road; bad input
    pays one extra read.

Per block, the columns are split into host and device rows with per-string lookup tables (a category
is classified once per distinct string, not per event), mapped onto the folder's interned name and
call-stack ids, and appended; the few rows that need Python (collective args, memory events, GPU
ProfilerStep copies, unknown categories) are picked out with masks first.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np

from . import kineto as K
from .base import ProfileError

try:
    from . import _tracescan  # type: ignore[attr-defined]
except ImportError:  # built without a C compiler
    _tracescan = None
# What the readers use of it: an extension left from an older build of the source (a rebuild that failed
# in a development tree) lacks some, and then none of it is used
_NEEDED = ("Scanner", "numerals", "text_kinds", "V_OBJ", "V_ARR", "N_FLOAT", "T_NUMBER")
if _tracescan is not None and (not all(hasattr(_tracescan, name) for name in _NEEDED)
                               or not hasattr(_tracescan.Scanner, "forest")):
    _tracescan = None

_BLOCK = 1 << 20  # decompressed bytes per scanner call


class Fallback(Exception):
    """The native path gave up on this file: read it on the msgspec path."""


def available() -> bool:
    """True when the scanner is built and not turned off by STEPDOCTOR_PURE_PYTHON=1."""
    return _tracescan is not None and os.environ.get("STEPDOCTOR_PURE_PYTHON", "") in ("", "0")


# How the scanner reads each field of `kineto._Args`: the same JSON types the typed decode accepts
# (anything else makes the event ODD). Kinds: INT (int64), STR (interned id), INTSTR (int64 or interned
# id), DIMS / TYPES (the raw value turned into the shape / dtype text, interned), GRID (the product of
# a three-int list). A field of `_Args` missing here is an import error, not a silent gap.
_KINDS: dict[str, tuple[str, bool]] = {  # field -> (kind, null allowed)
    "correlation": ("INT", False), "external_id": ("INT", False), "stream": ("INTSTR", True),
    "device": ("INT", True), "input_dims": ("DIMS", True), "input_type": ("TYPES", True),
    "call_stack": ("STR", True), "collective": ("STR", True), "in_nelems": ("INT", True),
    "out_nelems": ("INT", True), "dtype": ("STR", True), "group_size": ("INT", True),
    "pg_name": ("INTSTR", True), "nbytes": ("INT", True), "size": ("INTSTR", True), "grid": ("GRID", True),
    "sync_kind": ("STR", True), "total_allocated": ("INT", True), "total_reserved": ("INT", True),
    "device_type": ("INT", True), "device_id": ("INT", True),
}
_FIELDS = msgspec.structs.fields(K._Args)
if {f.name for f in _FIELDS} != set(_KINDS):
    raise ImportError("kineto_scan._KINDS does not cover kineto._Args")

_I64, _I32, _F64, _U8 = np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.float64), np.dtype(np.uint8)
# take()'s fixed columns (_tracescan.c): ph, cat, name, pid, pid string, tid, tid string, ts, dur (float64
# µs; int64 ns in decimal mode), ts kind, ts text, dur kind, dur text
_FIXED = (_U8, _I32, _I32, _I64, _I32, _I64, _I32, _F64, _F64, _U8, _I32, _U8, _I32)
_HAS_INT = ("INT", "INTSTR", "GRID", "SCALAR")
_HAS_SID = ("STR", "INTSTR", "DIMS", "TYPES", "SCALAR", "RAW")


class Layout:
    """Where `take()` puts each column, in the order `_tracescan.c`'s Scanner_init gives them: the fixed
    columns, then per spec its int64, string-id and float64 columns, those its kind has."""

    def __init__(self, specs: list[tuple[Any, ...]], names: list[str] | None = None, decimal: bool = False) -> None:
        """`specs`: the Scanner's specs; `names`: what to call each spec's columns (default: its key)."""
        kind_of = {getattr(_tracescan, k): k for k in (*_HAS_INT, *_HAS_SID)}
        self.dtypes = list(_FIXED)
        if decimal:
            self.dtypes[7] = self.dtypes[8] = _I64
        self.index: dict[str, tuple[int | None, int | None, int | None]] = {}
        for k, spec in enumerate(specs):
            kind = kind_of[spec[1]]
            cols: list[int | None] = []
            for has, dtype in ((kind in _HAS_INT, _I64), (kind in _HAS_SID, _I32), (kind == "SCALAR", _F64)):
                cols.append(len(self.dtypes) if has else None)
                if has:
                    self.dtypes.append(dtype)
            self.index[names[k] if names else spec[0]] = (cols[0], cols[1], cols[2])


class Rows:
    """Rows of one scanned block as numpy views of its columns: all of them, or those at `idx` (taken
    column by column only when a column is read)."""

    __slots__ = ("_cache", "_cols", "_idx", "_index")

    def __init__(self, cols: list[np.ndarray], index: dict[str, tuple[int | None, int | None, int | None]],
                 idx: np.ndarray | None = None) -> None:
        self._cols = cols
        self._index = index
        self._idx = idx
        self._cache: dict[int, np.ndarray] = {}

    @classmethod
    def view(cls, raw: tuple[bytearray, ...], layout: Layout) -> Rows:
        return cls([np.frombuffer(b, t) for b, t in zip(raw, layout.dtypes, strict=True)], layout.index)

    def col(self, k: int) -> np.ndarray:
        if self._idx is None:
            return self._cols[k]
        c = self._cache.get(k)
        if c is None:
            c = self._cache[k] = self._cols[k][self._idx]
        return c

    def take(self, idx: np.ndarray) -> Rows:
        return Rows(self._cols, self._index, idx if self._idx is None else self._idx[idx])

    def __len__(self) -> int:
        return len(self._cols[0]) if self._idx is None else len(self._idx)

    def int(self, name: str) -> np.ndarray:
        """An argument's int64 column (NONE where absent)."""
        return self.col(self._index[name][0])  # type: ignore[arg-type]

    def sid(self, name: str) -> np.ndarray:
        """An argument's string-id column (-1 where absent)."""
        return self.col(self._index[name][1])  # type: ignore[arg-type]

    def flt(self, name: str) -> np.ndarray:
        """A SCALAR argument's float64 column (NaN where not a float)."""
        return self.col(self._index[name][2])  # type: ignore[arg-type]

    ph = property(lambda self: self.col(0))
    cat = property(lambda self: self.col(1))
    name = property(lambda self: self.col(2))
    pid_i = property(lambda self: self.col(3))
    pid_s = property(lambda self: self.col(4))
    tid_i = property(lambda self: self.col(5))
    tid_s = property(lambda self: self.col(6))
    ts = property(lambda self: self.col(7))
    dur = property(lambda self: self.col(8))
    ts_kind = property(lambda self: self.col(9))
    ts_sid = property(lambda self: self.col(10))
    dur_kind = property(lambda self: self.col(11))
    dur_sid = property(lambda self: self.col(12))


def _layout() -> tuple[list[tuple[str, int, bool, int]], Layout]:
    """Scanner specs for `kineto._Args` and where their columns are, by field name."""
    specs = []
    for f in _FIELDS:
        kind, nullable = _KINDS[f.name]
        default = f.default if isinstance(f.default, int) else K._NONE
        specs.append((f.encode_name, getattr(_tracescan, kind), nullable, default))
    return specs, Layout(specs, [f.name for f in _FIELDS])


_X, _I = ord("X"), ord("i")
# what a category string is to the fold
_CK_UNKNOWN, _CK_HOST, _CK_DEV, _CK_GPU_ANN, _CK_IGNORED = 0, 1, 2, 3, 4


class _Interned:
    """The scanner's strings (id -> str) and per-string tables derived from them, grown as strings come."""

    def __init__(self) -> None:
        self.strs: list[str] = []
        self._tables: dict[str, np.ndarray] = {}
        self._makers: dict[str, Callable[[list[str]], np.ndarray]] = {}

    def add(self, fresh: list[str]) -> None:
        if not fresh:
            return
        self.strs.extend(fresh)
        for key, table in list(self._tables.items()):
            # the last slot answers for id -1 (absent); keep it last
            self._tables[key] = np.concatenate([table[:-1], self._makers[key](fresh), table[-1:]])

    def table(self, key: str, make: Callable[[list[str]], np.ndarray], absent: Any) -> np.ndarray:
        """A lookup array indexed by string id, with `absent` at index -1."""
        t = self._tables.get(key)
        if t is None:
            self._makers[key] = make
            t = np.concatenate([make(self.strs), np.array([absent], dtype=make([]).dtype)])
            self._tables[key] = t
        return t

    def objects(self, ids: np.ndarray, none_for_empty: bool = True) -> np.ndarray:
        """Object array of the strings (None for -1, and for "" when asked)."""
        if none_for_empty:
            return self.table("texts", _texts_or_none, None)[ids]
        return self.table("texts_all", _texts, None)[ids]


def _texts(strs: list[str]) -> np.ndarray:
    out = np.empty(len(strs), dtype=object)
    out[:] = strs
    return out


def _texts_or_none(strs: list[str]) -> np.ndarray:
    out = _texts(strs)
    out[out == ""] = None
    return out


def _cat_kind(strs: list[str]) -> np.ndarray:
    def kind(c: str) -> int:
        if c in K._HOST_CODE:
            return _CK_HOST
        if c in K._DEVICE_CODE:
            return _CK_DEV
        if c == "gpu_user_annotation":
            return _CK_GPU_ANN
        return _CK_IGNORED if c in K._IGNORED_CATS else _CK_UNKNOWN
    return np.fromiter(map(kind, strs), dtype=np.int8, count=len(strs))


def _cat_code(strs: list[str]) -> np.ndarray:
    return np.fromiter((K._HOST_CODE.get(c, K._DEVICE_CODE.get(c, -1)) for c in strs), dtype=np.int8,
                       count=len(strs))


class _Fold:
    """Appends scanned blocks to a `kineto._Folder` exactly as `_Folder.fold` would append their events."""

    def __init__(self, folder: K._Folder, layout: Layout) -> None:
        self.f = folder
        self.layout = layout
        self.s = _Interned()
        # scanner string id -> folder id, -2 = not mapped yet
        self._maps: dict[str, np.ndarray] = {"name": np.empty(0, np.int64), "stack": np.empty(0, np.int64)}

    def _remap(self, which: str, ids: np.ndarray, table: dict[str, int], absent: int | str) -> np.ndarray:
        """Scanner ids -> the folder's interned ids (names, call stacks), assigning new ones in order of
        first use. -1 (absent) -> `absent`: an id, or a text to intern (an absent name is "")."""
        m = self._maps[which]
        if m.size < len(self.s.strs):
            m = np.concatenate([m, np.full(len(self.s.strs) - m.size, -2, np.int64)])
            self._maps[which] = m
        present = ids >= 0
        fresh = np.unique(ids[present][m[ids[present]] == -2])
        if fresh.size:
            strs = self.s.strs
            for i in fresh.tolist():
                text = strs[i]
                if which == "stack" and not text:
                    m[i] = -1  # an empty call stack is no call stack
                else:
                    m[i] = table.setdefault(text, len(table))
        if present.all():
            return m[ids]
        if isinstance(absent, str):
            absent = table.setdefault(absent, len(table))
        return np.where(present, m[np.where(present, ids, 0)], absent)

    def block(self, cols: tuple[bytearray, ...], fresh: list[str], _scanned: int = 0) -> None:
        self.s.add(fresh)
        if not cols[0]:
            return
        r = Rows.view(cols, self.layout)
        s = self.s
        ckind = s.table("cat_kind", _cat_kind, _CK_UNKNOWN)[r.cat]
        x = r.ph == _X
        host = x & (ckind == _CK_HOST)
        dev = x & (ckind == _CK_DEV)
        if (rest := x & ~(host | dev)).any():
            self._other(r, rest, ckind)
        if (inst := r.ph == _I).any():
            self._memory(r, inst)
        # complete events without ts/dur are skipped, as are times beyond int64 ns (kineto._with_times)
        with np.errstate(invalid="ignore"):
            timed = (np.abs(r.ts) < K.TIME_LIMIT_US) & (np.abs(r.dur) < K.TIME_LIMIT_US)
        code = s.table("cat_code", _cat_code, -1)[r.cat]
        for mask, fold in ((host, self._host), (dev, self._device)):
            if mask.any():
                rows = np.flatnonzero(mask & timed)
                self.f.no_dur += int(mask.sum()) - rows.size
                if rows.size:
                    fold(r, rows, code[rows])

    def _other(self, r: Rows, rest: np.ndarray, ckind: np.ndarray) -> None:
        f, strs = self.f, self.s.strs
        for i in np.flatnonzero(rest & (ckind == _CK_GPU_ANN)).tolist():
            name = strs[r.name[i]] if r.name[i] >= 0 else ""
            if (m := K._STEP_RE.match(name)) and not np.isnan(r.ts[i]):
                f.gpu_step_starts.append(float(r.ts[i]))
                f.gpu_step_names.add(int(m.group(1)))
        unknown = r.cat[rest & (ckind == _CK_UNKNOWN)]
        if unknown.size:
            ids, counts = np.unique(unknown, return_counts=True)
            for i, n in zip(ids.tolist(), counts.tolist(), strict=True):
                f.skipped[(strs[i] if i >= 0 else "") or "(none)"] += n

    def _memory(self, r: Rows, inst: np.ndarray) -> None:
        memory = self.s.table("is_memory", lambda strs: np.array([t == "[memory]" for t in strs], dtype=bool),
                              False)[r.name]
        alloc, reserved = r.int("total_allocated"), r.int("total_reserved")
        dtype, did = r.int("device_type"), r.int("device_id")
        none = K._NONE
        for i in np.flatnonzero(inst & memory).tolist():
            a, b = int(alloc[i]), int(reserved[i])
            if np.isnan(r.ts[i]) or (a == none and b == none):
                continue
            dt = int(dtype[i])
            kind = K._DEVICE_TYPE_NAMES.get(dt, f"device_type{dt}") if dt != none else "unknown"
            comp = kind if kind == "cpu" else f"{kind}:{int(did[i]) if did[i] != none else 0}"
            self.f.memory.append((float(r.ts[i]), comp, a if a != none else None, b if b != none else None))

    def _comm(self, r: Rows, rows: np.ndarray, base: int, out: dict[int, K._Comm]) -> None:
        coll, nin = r.sid("collective")[rows], r.int("in_nelems")[rows]
        pick = np.flatnonzero((coll >= 0) | (nin != K._NONE))
        if not pick.size:
            return
        strs, none = self.s.strs, K._NONE
        nout, dtype = r.int("out_nelems")[rows], r.sid("dtype")[rows]
        pg_i, pg_s = r.int("pg_name")[rows], r.sid("pg_name")[rows]
        for j in pick.tolist():
            group = strs[pg_s[j]] if pg_s[j] >= 0 else (str(int(pg_i[j])) if pg_i[j] != none else None)
            out[base + j] = K._Comm(strs[coll[j]] if coll[j] >= 0 else None,
                                    int(nin[j]) if nin[j] != none else None,
                                    int(nout[j]) if nout[j] != none else None,
                                    strs[dtype[j]] if dtype[j] >= 0 else None, group)

    def _host(self, r: Rows, rows: np.ndarray, code: np.ndarray) -> None:
        f = self.f
        cols, base = f.host.done, f.host.n
        cols["name"].append(self._remap("name", r.name[rows], f.name_ids, "").astype(np.int32))
        cols["cat"].append(code.astype(np.int8))
        cols["tid"].append(r.tid_i[rows])
        cols["ts"].append(r.ts[rows])
        cols["dur"].append(r.dur[rows])
        cols["corr"].append(r.int("correlation")[rows])
        cols["ext"].append(r.int("external_id")[rows])
        dims = r.sid("input_dims")[rows]
        if (dims >= 0).any():
            # the shape / dtype texts as `kineto._shape_texts` gives them ("" and absent -> None)
            cols["dims"].append(self.s.objects(dims))
            cols["types"].append(self.s.objects(r.sid("input_type")[rows]))
            f.has_shapes = True
        else:
            cols["dims"].append([None] * rows.size)
            cols["types"].append([None] * rows.size)
        cols["stack"].append(self._remap("stack", r.sid("call_stack")[rows], f.stack_ids, -1).astype(np.int32))
        self._comm(r, rows, base, f.h_comm)
        f.host.n = base + rows.size

    def _device(self, r: Rows, rows: np.ndarray, code: np.ndarray) -> None:
        f = self.f
        cols, base = f.dev.done, f.dev.n
        none = K._NONE
        cols["name"].append(self._remap("name", r.name[rows], f.name_ids, "").astype(np.int32))
        task = code.astype(np.int8)
        cols["task"].append(task)
        stream, stream_s = r.int("stream")[rows], r.sid("stream")[rows]
        if (stream_s >= 0).any() or (stream == none).any():
            # no int `stream` arg: a string ("0x0"), or the tid (legacy "stream 7")
            stream = stream.copy()
            tid, tid_s = r.tid_i[rows], r.tid_s[rows]
            for j in np.flatnonzero((stream_s >= 0) | (stream == none)).tolist():
                if stream_s[j] >= 0:
                    v = K._int_or_none(self.s.strs[stream_s[j]])
                elif tid[j] != none:
                    v = int(tid[j])
                else:
                    v = K._int_or_none(self.s.strs[tid_s[j]]) if tid_s[j] >= 0 else None
                stream[j] = v if v is not None and -(2**63) <= v < 2**63 else none
        cols["stream"].append(stream)
        device = r.int("device")[rows]
        cols["device"].append(np.where(device != none, device, r.pid_i[rows]))
        cols["ts"].append(r.ts[rows])
        cols["dur"].append(r.dur[rows])
        cols["corr"].append(r.int("correlation")[rows])
        cols["ext"].append(r.int("external_id")[rows])
        cols["grid"].append(r.int("grid")[rows])
        nbytes = r.int("nbytes")[rows]
        mtia = np.flatnonzero((nbytes == none) & (task == K._D_MTIA))
        if mtia.size:
            nbytes = nbytes.copy()
            size_i, size_s = r.int("size")[rows], r.sid("size")[rows]
            for j in mtia.tolist():
                v = int(size_i[j]) if size_i[j] != none else (
                    K._int_or_none(self.s.strs[size_s[j]]) if size_s[j] >= 0 else None)
                nbytes[j] = v if v is not None and -(2**63) <= v < 2**63 else none
        cols["nbytes"].append(nbytes)
        self._comm(r, rows, base, f.d_comm)
        f.dev.n = base + rows.size


def drive(scanner: Any, buf: bytearray, pos: int, read: Callable[[], bytes], eof: bool,
          on_block: Callable[..., None], on_odd: Callable[[bytes], None]) -> tuple[bytearray, int, int]:
    """Run the scanner over the event array from buf[pos:] on, appending `read()`'s blocks as it needs
    them: each scanned block goes to `on_block(*scanner.take())`, each element handed back to `on_odd`
    as a one-element JSON array. Returns (buffer, position just past the array's ']', offset of the
    buffer in the stream). Raises Fallback on bytes the scanner does not accept or the reference decoder
    rejects."""
    base = 0
    while True:
        status, p, end = scanner.feed(buf, pos, eof)
        on_block(*scanner.take())
        if status == _tracescan.ODD:
            try:
                on_odd(b"[" + bytes(buf[p:end]) + b"]")
            except msgspec.DecodeError:
                raise Fallback from None
            pos = end
        elif status == _tracescan.DONE:
            return buf, p, base
        elif status == _tracescan.MALFORMED:
            raise Fallback
        else:  # NEED_MORE: keep the unfinished element, append the next block
            more = read()
            eof = not more
            buf = buf[p:] + more
            base += p
            pos = 0


def scan(path: Any) -> tuple[K._Doc, K._Folder]:
    """Read one trace on the native path. Raises Fallback when the msgspec path must read it."""
    specs, layout = _layout()
    scanner = _tracescan.Scanner(specs)
    doc, folder = K._Doc(), K._Folder()
    fold = _Fold(folder, layout)
    src = K._Source(path)
    try:
        opened = K._open_array(src, doc)
        if opened is None:
            raise Fallback
        buf, p, base = drive(scanner, *opened, lambda: src.read(_BLOCK), src.eof, fold.block,
                             lambda piece: folder.fold(K._decode_events(piece)))
        tail = bytes(buf[p:]) + src.read_all()
        if doc.top_level_list:
            if tail.strip():
                raise Fallback  # trailing characters: reported by the msgspec path
        else:
            K._read_tail(src, tail, doc, base + p)
        return doc, folder
    except ProfileError:
        raise Fallback from None
    finally:
        src.close()
