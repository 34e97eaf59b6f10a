"""The native path of the Ascend trace_view.json reader: the C trace scanner (`_tracescan.c`) into columns.

`ascend_text.TraceParser.parse` reads through here when the extension is built (see `kineto_scan` for
when it is not) and through its msgspec path otherwise; both fill the same `TraceColumns`. What stays on
the msgspec path's code, so there is one copy of each rule:
  * the conversions of argument values (`TraceParser.hw_columns`, `comm_columns`, `call_stack`,
    `_labels`, `as_int`, `_floats`) run on the values the scanner read, as Python objects, except for a
    Communication argument column that only has the JSON type its conversion expects (ints, strings,
    numbers): that one is built from the scanner's typed column, with the same values (`_comm_args`;
    `message_bytes` is one function for both paths);
  * metadata (`M`), counters (`C`) and every other phase, and any event with a value the scanner does not
    take (an object where a scalar is read, an integer beyond int64, a lone surrogate), are handed back
    (ODD) and go through `TraceParser._consume` one by one, in file order;
  * bad JSON, a document that is not an array, or a value the typed decode would reject (a null pid)
    raises `kineto_scan.Fallback`, and the msgspec path reads the file and reports what is wrong.

The scanner keeps complete events ("X") and flow endpoints ("s", "f", "t") as rows; `ts` and `dur` arrive
as exact integer ns (`decimal` mode: "…250.125" strings and numbers with up to three decimals parsed
exactly, float durations rounded as `round(d * 1000)`; any other text comes as text and is parsed by the
reader's own `_start_ns` / `dur_ns`). Per block, events are routed by their process's kind with numpy
masks (a pid is looked up once per block), in file order within each group, exactly as `_consume` routes
them one at a time; events of a process whose `process_name` has not come yet wait, as there, until the
end.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from . import ascend_text as A
from .kineto import _NONE as K_NONE
from .kineto_scan import Fallback, Layout, Rows, _Interned, _tracescan, available, drive

__all__ = ["Fallback", "available", "scan"]

_BLOCK = 1 << 20
_NONE = K_NONE  # the readers' "absent" in int64 columns, as the scanner writes it
# argument keys read (all kinds share one scan; each kind's columns pick theirs), top-level "id" first
_SCALARS = ("Call stack", "Call Stack", "connection_id", "Task Type", "Stream Id", "Physic Stream Id", "Task Id",
            "size(Byte)", "transport type", "link type", "src rank", "dst rank", "bandwidth(GB/s)", "data_type",
            "count")
_RAWS = ("Input Dims", "Input type")
_X = ord("X")


def _layout() -> tuple[list[tuple[Any, ...]], Layout]:
    specs: list[tuple[Any, ...]] = [("id", _tracescan.INTSTR, True, _NONE, True)]
    specs += [(key, _tracescan.SCALAR, True, _NONE, False) for key in _SCALARS]
    specs += [(key, _tracescan.RAW, True, _NONE, False) for key in _RAWS]
    return specs, Layout(specs, decimal=True)


class _Native:
    """Turns scanned blocks into a `TraceParser`'s column parts (see the module docstring)."""

    def __init__(self, tp: A.TraceParser, layout: Layout) -> None:
        self.tp = tp
        self.out = tp.out
        self.layout = layout
        self.s = _Interned()
        self.pending: list[tuple[str, Any]] = []  # ("rows", Rows) or ("events", [Event]) in file order

    # -- values as Python objects ---------------------------------------------------------------------

    def _strs(self, ids: np.ndarray) -> list[Any]:
        return self.s.objects(ids, none_for_empty=False).tolist()

    def _ids(self, i: np.ndarray, sid: np.ndarray, share: bool = True) -> list[Any]:
        """pid / tid / flow id objects (int, or str when the JSON value is a string); pids and tids share
        one object per value, as the msgspec path has them (one lookup per distinct value)."""
        objs = self.s.objects(sid, none_for_empty=False)
        ints = sid < 0
        if not share:
            objs[ints] = i[ints].astype(object)
            return objs.tolist()
        setdefault = self.tp._ids.setdefault
        if ints.all():
            uniq, inverse = np.unique(i, return_inverse=True)
            shared = np.empty(len(uniq), dtype=object)
            shared[:] = [setdefault(v, v) for v in uniq.tolist()]
            return shared[inverse].tolist()
        objs[ints] = i[ints].astype(object)
        vals = objs.tolist()
        return list(map(setdefault, vals, vals))

    def _scalars(self, r: Rows, key: str) -> list[Any]:
        """An argument's values as the msgspec path decodes them: int, float, str or None."""
        i, sid, f = r.int(key), r.sid(key), r.flt(key)
        objs = self.s.objects(sid, none_for_empty=False)
        ints = i != _NONE
        if ints.any():
            objs[ints] = i[ints].astype(object)
        floats = ~np.isnan(f)
        if floats.any():
            objs[floats] = f[floats].astype(object)
        return objs.tolist()

    def _names(self, ids: np.ndarray) -> list[str]:
        """Event names ("" when absent), one str object per distinct name (the scanner interns them)."""
        vals = self.s.objects(ids, none_for_empty=False)
        vals[ids < 0] = ""
        return vals.tolist()

    def _starts(self, r: Rows) -> tuple[np.ndarray, np.ndarray]:
        """(start ns, readable) per row: `_start_ns` of the ts the msgspec path would hold."""
        start = r.ts.copy()
        ok = r.ts_kind == _tracescan.T_OK
        for j in np.flatnonzero(~ok).tolist():
            kind, sid = int(r.ts_kind[j]), int(r.ts_sid[j])
            v = None
            try:
                if kind == _tracescan.T_TEXT:
                    v = A._start_ns(self.s.strs[sid])
                elif kind == _tracescan.T_NUMBER:
                    v = A._start_ns(Decimal(self.s.strs[sid]))
            except (ArithmeticError, ValueError):
                raise Fallback from None
            if v is not None:
                if not -(2**63) <= v < 2**63:
                    raise Fallback  # beyond int64: the msgspec path fails on it as it always has
                start[j] = v
                ok[j] = True
        return start, ok

    def _durs(self, r: Rows) -> np.ndarray:
        dur = r.dur.copy()
        for j in np.flatnonzero((r.dur_kind == _tracescan.T_TEXT) | (r.dur_kind == _tracescan.T_NUMBER)).tolist():
            text = self.s.strs[int(r.dur_sid[j])]
            try:
                v = A.dur_ns(text) if r.dur_kind[j] == _tracescan.T_TEXT else round(float(text) * 1000)
            except (ArithmeticError, ValueError):
                raise Fallback from None
            if not -(2**63) <= v < 2**63:
                raise Fallback
            dur[j] = v
        return dur

    # -- routing --------------------------------------------------------------------------------------

    def _kinds(self, r: Rows) -> np.ndarray:
        """The kind of each row's process (-1: no process_name yet)."""
        kinds = self.out.kinds
        out = np.full(len(r), -1, dtype=np.int8)
        strs = r.pid_s >= 0
        for v in np.unique(r.pid_i[~strs]).tolist():
            k = kinds.get(v)
            if k is not None:
                out[(r.pid_i == v) & ~strs] = k
        for v in np.unique(r.pid_s[strs]).tolist():
            k = kinds.get(self.s.strs[v])
            if k is not None:
                out[r.pid_s == v] = k
        return out

    def _is_gc(self, r: Rows) -> np.ndarray:
        return self.s.table("is_gc", lambda strs: np.array([c.lower() == "gc" for c in strs], dtype=bool),
                            False)[r.cat]

    def block(self, raw: tuple[bytearray, ...], fresh: list[str], scanned: int) -> None:
        self.s.add(fresh)
        self.out.n_events += scanned
        if raw[0]:
            self.route(Rows.view(raw, self.layout))

    def route(self, r: Rows, final: bool = False) -> None:
        x = r.ph == _X
        if (~x).any():
            self._flows(r.take(np.flatnonzero(~x)))
        if not x.any():
            return
        if not x.all():
            r = r.take(np.flatnonzero(x))
        kind = self._kinds(r)
        if not final and (kind < 0).any():
            self.pending.append(("rows", r.take(np.flatnonzero(kind < 0))))
        gc = self._is_gc(r)
        hw = kind == A.HARDWARE
        comm = kind == A.COMM
        if hw.any():
            self._tasks(r.take(np.flatnonzero(hw)), A._HW_FIELDS)
        if comm.any():
            self._tasks(r.take(np.flatnonzero(comm)), A._COMM_FIELDS)
        if (over := kind == A.OVERLAP).any():
            o = r.take(np.flatnonzero(over))
            start, ok = self._starts(o)
            self.out.n_bad_ts += int((~ok).sum())
            if ok.any():
                o = o.take(np.flatnonzero(ok))
                self.tp.add_parts(A._OVERLAP_FIELDS, [self._names(o.name), start[ok], self._durs(o)])
        host_kind = (kind == A.FRAMEWORK) | (kind == A.CANN)
        # the rest of the X events: SKIP (kept only when GC), FREQ and other kinds (GC kept; the rest only
        # lower min_ts); the unknown ones wait (`pending`)
        known = kind >= 0
        timed = host_kind | (known & ~hw & ~comm & ~(kind == A.OVERLAP) & ~((kind == A.SKIP) & ~gc))
        if not timed.any():
            return
        t = r.take(np.flatnonzero(timed))
        start, ok = self._starts(t)
        self.out.n_bad_ts += int((~ok).sum())
        t_host, t_gc = host_kind[timed], gc[timed]
        host = ok & (t_host | t_gc)
        dropped = ok & ~host
        if dropped.any():
            self.tp._lower_min_ts(int(start[dropped].min()))
        if host.any():
            self._host(t.take(np.flatnonzero(host)), start[host], t_gc[host], kind[timed][host])

    def _flows(self, r: Rows) -> None:
        """Flow endpoints with an id: (cat or name, id, ph, pid, tid, ts ns); unreadable ts dropped."""
        has_id = (r.int("id") != _NONE) | (r.sid("id") >= 0)
        if not has_id.all():
            r = r.take(np.flatnonzero(has_id))
        if not len(r):
            return
        start, ok = self._starts(r)
        if not ok.all():
            r = r.take(np.flatnonzero(ok))
            start = start[ok]
            if not len(r):
                return
        cat = self._strs(r.cat)
        name = None
        if any(not c for c in cat):
            name = self._strs(r.name)
            cat = [c or (n if n is not None else "") for c, n in zip(cat, name, strict=True)]
        share = self.tp._names.setdefault
        flow_id = self._ids(r.int("id"), r.sid("id"), share=False)
        ph = [chr(c) for c in r.ph.tolist()]
        self.tp.add_parts(A._FLOW_FIELDS, [list(map(share, cat, cat)), flow_id, ph,
                                           self._ids(r.pid_i, r.pid_s), self._ids(r.tid_i, r.tid_s), start])

    def _tasks(self, r: Rows, fields: tuple[str, ...]) -> None:
        """Hardware or Communication tasks, as `_timed_columns` + the kind's arg columns give them."""
        start, ok = self._starts(r)
        self.out.n_bad_ts += int((~ok).sum())
        if not ok.all():
            r = r.take(np.flatnonzero(ok))
            start = start[ok]
            if not len(r):
                return
        tids = self._ids(r.tid_i, r.tid_s)
        cols: list[Any] = [self._ids(r.pid_i, r.pid_s), tids, self._names(r.name), start, self._durs(r)]
        sc = self._scalars
        if fields is A._HW_FIELDS:
            cols += self.tp.hw_columns(sc(r, "Task Type"), sc(r, "Stream Id"), sc(r, "Physic Stream Id"),
                                       sc(r, "Task Id"), sc(r, "connection_id"), tids)
        else:
            cols += self._comm_args(r)
        self.tp.add_parts(fields, cols)

    # -- argument columns converted from the typed columns -------------------------------------------
    # What `TraceParser.comm_columns` gives, built from the scanner's int / string / float columns when an
    # argument only ever has the expected JSON type (an int where `_ints` reads one, a string where
    # `_labels` does, a number where `_floats` does), as the arrays `TraceParser._finish` makes of them
    # (`_NULLABLE_INT_FIELDS`, `_FLOAT_FIELDS`); any other column goes through those functions, as lists.

    def _clean(self, r: Rows, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        i, sid, f = r.int(key), r.sid(key), r.flt(key)
        return i, sid, i != _NONE, sid >= 0, ~np.isnan(f)

    def _int_arg(self, r: Rows, key: str) -> Any:
        """`A._ints` of the argument's values: a masked int64 array (1 under the mask, as `_int_array`)."""
        i, _, ints, strs, floats = self._clean(r, key)
        if strs.any() or floats.any():
            return A._ints(self._scalars(r, key))
        return A._ma(np.where(ints, i, 1), ~ints)

    def _label_arg(self, r: Rows, key: str) -> list[str | None]:
        """`TraceParser._labels` of the argument's values."""
        _, sid, ints, _, floats = self._clean(r, key)
        if ints.any() or floats.any():
            return self.tp._labels(self._scalars(r, key))
        return self.s.objects(sid).tolist()  # ("" and absent: None)

    def _float_arg(self, r: Rows, key: str) -> Any:
        """`A._floats` of the argument's values: float64, NaN for none (an int as float(), correctly rounded
        in both)."""
        i, _, ints, strs, floats = self._clean(r, key)
        if strs.any():
            return A._floats(self._scalars(r, key))
        return np.where(floats, r.flt(key), np.where(ints, i.astype(np.float64), np.nan))

    def _message_bytes(self, r: Rows) -> Any:
        """`A.message_bytes` of count and data_type: per distinct data type when both are clean."""
        i, _, ints, strs, floats = self._clean(r, "count")
        _, dsid, dints, _, dfloats = self._clean(r, "data_type")
        if strs.any() or floats.any() or dints.any() or dfloats.any() or (np.abs(i[ints]) >= 1 << 56).any():
            return A.message_bytes(A._ints(self._scalars(r, "count")), self._scalars(r, "data_type"))
        width = self.s.table("dtype_bytes", lambda strs: np.array(
            [A.DTYPE_BYTES.get(t.upper(), -1) for t in strs], dtype=np.int64), -1)[dsid]
        has = ints & (width >= 0)
        return A._ma(np.where(has, i * width, 1), ~has)

    def _comm_args(self, r: Rows) -> list[Any]:
        return [self._int_arg(r, "size(Byte)"), self._label_arg(r, "transport type"),
                self._label_arg(r, "link type"), self._int_arg(r, "src rank"), self._int_arg(r, "dst rank"),
                self._float_arg(r, "bandwidth(GB/s)"), self._int_arg(r, "connection_id"), self._message_bytes(r)]

    def _host(self, r: Rows, start: np.ndarray, gc: np.ndarray, kind: np.ndarray) -> None:
        """Host rows (framework, CANN, and GC events of any process), as `_consume` builds them: the category
        is decided once per distinct (name, cat, GC, kind); ProfilerStep#N rows also become steps."""
        tp, n = self.tp, len(r)
        names = self._names(r.name)
        dur = self._durs(r)
        # one int64 per (name, cat, GC, kind): ids and kinds are small (< 2^25 and 16), so they pack
        base = len(self.s.strs) + 1
        if base >= 1 << 25:
            raise Fallback  # (a trace with 33 million distinct strings)
        key = ((r.name.astype(np.int64) + 1) * base + (r.cat.astype(np.int64) + 1)) * 32 \
            + gc.astype(np.int64) * 16 + (kind.astype(np.int64) + 1)
        uniq, inverse = np.unique(key, return_inverse=True)
        labels, is_step = [], []
        strs = self.s.strs
        for u in uniq.tolist():
            u, k = divmod(u, 16)
            u, is_gc = divmod(u, 2)
            name_id, cat_id = divmod(u, base)
            name_id, cat_id, k = name_id - 1, cat_id - 1, k - 1
            name = strs[name_id] if name_id >= 0 else ""
            cat = strs[cat_id] if cat_id >= 0 else None
            if is_gc:
                c = "gc"
            elif k == A.CANN:
                c = "cann"
            else:
                c = tp._framework_cat.get((name, cat)) or tp._categorize(name, cat)
            labels.append(c)
            is_step.append(c == "user_annotation" and name.startswith("ProfilerStep#")
                           and A._STEP_RE.match(name) is not None)
        inverse = inverse.reshape(-1)
        category = np.array(labels, dtype=object)[inverse].tolist()
        for j in np.flatnonzero(np.array(is_step, dtype=bool)[inverse]).tolist():
            self.out.steps.append((int(A._STEP_RE.match(names[j]).group(1)), int(start[j]), int(dur[j])))
        # args: none for GC rows (as `_consume` has it)
        plain = ~gc
        cols: list[list[Any]] = [[None] * n for _ in range(4)]
        if plain.any():
            idx = np.flatnonzero(plain)
            p = r if plain.all() else r.take(idx)
            s1, s2 = self._scalars(p, "Call stack"), self._scalars(p, "Call Stack")
            if s1.count(None) == len(s1) and s2.count(None) == len(s2):
                stack = s1
            else:
                stack = [tp.call_stack(a, b) for a, b in zip(s1, s2, strict=True)]
            got = [stack, self._strs(p.sid("Input Dims")), self._strs(p.sid("Input type")),
                   A._ints(self._scalars(p, "connection_id"))]
            if plain.all():
                cols = got
            else:
                for c, part in enumerate(got):
                    full = np.full(n, None, dtype=object)
                    full[idx] = A._objects(part)
                    cols[c] = full.tolist()
        tp.add_parts(A._HOST_FIELDS, [self._ids(r.pid_i, r.pid_s), self._ids(r.tid_i, r.tid_s), names, category,
                                      start, dur, *cols])

    # -- events handed back, and the end --------------------------------------------------------------

    def events(self, evs: list[A.Event]) -> None:
        """Events the scanner handed back, through the msgspec path's own routing."""
        tp = self.tp
        before = len(tp._pending)
        tp._consume(evs)
        if len(tp._pending) > before:
            self.pending.append(("events", tp._pending[before:]))
            del tp._pending[before:]

    def finish(self) -> A.TraceColumns:
        """`TraceParser._finish` for both kinds of waiting events, in file order."""
        out, tp = self.out, self.tp
        if self.pending:
            pids: set[Any] = set()
            for what, item in self.pending:
                if what == "rows":
                    pids.update(self._ids(item.pid_i, item.pid_s))
                else:
                    pids.update(ev.pid for ev in item)
            unknown = {p for p in pids if p not in out.kinds}
            for pid in unknown:
                out.kinds[pid] = A.SKIP  # no process_name at all: only GC events (by cat) are kept
            for what, item in self.pending:
                if what == "rows":
                    ids = self._ids(item.pid_i, item.pid_s)
                    gc = self._is_gc(item)
                    out.n_unclassified += sum(1 for p, g in zip(ids, gc.tolist(), strict=True)
                                              if p in unknown and not g)
                else:
                    out.n_unclassified += sum(1 for ev in item if ev.pid in unknown
                                              and (ev.cat is None or ev.cat.lower() != "gc"))
            for what, item in self.pending:
                if what == "rows":
                    self.route(item, final=True)
                else:
                    out.n_events -= len(item)  # _consume counts them again
                    tp._consume(item)
        tp._finish()
        return out


def scan(path: Path) -> A.TraceColumns:
    """trace_view.json on the native path; raises Fallback when the msgspec path must read it."""
    specs, layout = _layout()
    scanner = _tracescan.Scanner(specs, phases="Xsft", other_odd=True, decimal=True)
    tp = A.TraceParser(path)
    native = _Native(tp, layout)
    dec = msgspec.json.Decoder(list[A.Event], float_hook=Decimal)
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError:
        raise Fallback from None
    with f:
        buf = bytearray(f.read(_BLOCK))
        i = 3 if buf[:3] == b"\xef\xbb\xbf" else 0
        while i < len(buf) and buf[i] in b" \t\r\n":
            i += 1
        if i >= len(buf) or buf[i] != 0x5B:  # empty, whitespace, an object...: the msgspec path says what
            raise Fallback
        buf, p, _ = drive(scanner, buf, i + 1, lambda: f.read(_BLOCK), False, native.block,
                          lambda piece: native.events(dec.decode(piece)))
        if bytes(buf[p:]).strip(b" \t\r\n") or f.read(1 << 16).strip(b" \t\r\n"):
            raise Fallback  # something after the array: the msgspec path reports it
    return native.finish()
