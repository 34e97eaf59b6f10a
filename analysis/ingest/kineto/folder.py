"""Decoded pieces of events folded into compact per-column arrays (names interned to ids)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
import numpy as np

from .events import ANY, NO_NS, NOT_AN_EVENT, TIME_LIMIT_US, Event, raw_ts_ns, ts_ns_column
from .names import D_MTIA, DEVICE_CODE, DEVICE_TYPE_NAMES, DTYPE_BYTES, HOST_CODE, IGNORED_CATS, STEP_RE

# --------------------------------------------------------------------------------------------------
# Folding events into columns
# --------------------------------------------------------------------------------------------------

def _int_or_none(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str):
        s = v.strip()
        try:
            return int(s, 0)
        except ValueError:
            m = re.search(r"(-?\d+)$", s)  # legacy "stream 7"
            return int(m.group(1)) if m else None
    return None


def _int_column(values: list[Any]) -> np.ndarray:
    """ints (the common case, converted in C) or a mix with str/None/ints beyond int64 -> int64, anything
    that is not an int64 becoming the NONE sentinel (absent)."""
    try:
        a = np.array(values)  # (not dtype=int64: numpy would read "7" and 1.5 as ints, and True as 1)
    except (TypeError, ValueError, OverflowError):
        a = None
    if a is not None and a.dtype == np.int64:
        return a
    return np.array([v if type(v) is int and -(2**63) <= v < 2**63 else NONE for v in values], dtype=np.int64)


def _small_codes(codes: list[int]) -> np.ndarray:
    """Category codes (0..127) -> int8 through a bytearray: converted in C, not value by value."""
    return np.frombuffer(bytearray(codes), dtype=np.int8)


def _int64(values: list[int]) -> np.ndarray:
    """A typed int field (the decode gives only ints there: never str, bool or None) -> int64, converted in
    C without sniffing each value's type; an int beyond int64 becomes the NONE sentinel."""
    try:
        return np.array(values, dtype=np.int64)
    except OverflowError:
        return _int_column(values)


_NOT_COMPACT = (b"\n", b"\r", b"\t", b"\\")


def _canonical(raw: bytes) -> bytes:
    """A raw `Input Dims` / `Input type` value made canonical: a value that is not a JSON list (a string,
    null) counts as absent (b""), as the loose decode has it, and a list written with newlines, tabs or
    escapes (a pretty-printed trace) is re-encoded compactly, as the loose decode does, so a value gives the
    same text whichever decode read its piece."""
    if raw[:1] != b"[":
        return b""
    if any(c in raw for c in _NOT_COMPACT):
        return msgspec.json.encode(ANY.decode(raw))
    return raw


def shape_text(raw: bytes) -> str:
    """Input Dims JSON (canonical) -> text, e.g. `[[4096, 1000], [1000, 4000]]` -> "4096,1000;1000,4000"
    (tensors split by ';' like Ascend; a scalar input is an empty field; nested tensor lists are flattened);
    "" (NULL) for an absent value or no inputs at all."""
    return raw.replace(b" ", b"").replace(b"],[", b";").translate(None, b"[]").decode("utf-8", "replace")


def type_text(raw: bytes) -> str:
    """Input type JSON (canonical) -> text: `["float", "Scalar"]` -> "float;Scalar"."""
    return raw.replace(b'", "', b";").replace(b'","', b";").translate(None, b'[]"').decode("utf-8", "replace")


def _raw_keys(raws: list[msgspec.Raw]) -> list[bytes]:
    """The raw values as bytes (b"": absent), cut from one join in C: JSON text never holds \\x01 (control
    characters are escaped), and msgspec.Raw is not hashable."""
    return b"\x01".join(raws).split(b"\x01") if raws else []


class _Columns:
    """Per-column accumulation: one array (or list of str) per decoded piece, concatenated at the end."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.done: dict[str, list[Any]] = {n: [] for n in names}
        self.n = 0

    def column(self, n: str, dtype: Any) -> Any:
        parts = self.done[n]
        if dtype is None:
            out: list[Any] = []
            for p in parts:
                out.extend(p)
            return out
        if not parts:
            return np.empty(0, dtype=dtype)
        return np.concatenate(parts) if len(parts) > 1 else parts[0]


_HOST_COLS = ("name", "cat", "tid", "ts", "dur", "corr", "ext", "dims", "types", "stack")


_DEV_COLS = ("name", "task", "stream", "device", "ts", "dur", "corr", "ext", "grid", "nbytes")


NONE = -(2**62)  # sentinel for "absent" in int64 columns


P2P_CALLS = ("c10d::send", "c10d::recv_")


def concrete_int(raw: msgspec.Raw, at: int) -> int | None:
    """The integer at position `at` of an op's "Concrete Inputs" (a list of texts), or None."""
    if not raw:
        return None
    try:
        v = msgspec.json.decode(raw)
        return int(v[at]) if isinstance(v, list) and len(v) > at and str(v[at]).lstrip("-").isdigit() else None
    except (msgspec.DecodeError, ValueError):
        return None


def p2p_peer(a) -> int | None:
    """The global rank of the other side of a send / recv from record_param_comms: its "Rank" is the peer's
    rank in the group (the caller's own rank for a collective), "Process Group Ranks" the group's global
    ranks. None for a collective, or where the group's ranks are not given."""
    if (a.collective or "").lower() not in ("send", "recv", "receive") or a.comm_rank is None:
        return None
    ranks = a.pg_ranks
    if isinstance(ranks, str):
        try:
            ranks = msgspec.json.decode(ranks)
        except msgspec.DecodeError:
            return None
    if isinstance(ranks, list) and 0 <= a.comm_rank < len(ranks) and isinstance(ranks[a.comm_rank], int):
        return int(ranks[a.comm_rank])
    return None


@dataclass
class Comm:
    collective: str | None
    in_nelems: int | None
    out_nelems: int | None
    dtype: str | None
    group: str | None
    peer: int | None = None      # send / recv: the other rank (global), when the trace says it

    def size_bytes(self) -> int | None:
        """Payload of the collective: max(in, out) elements × dtype size (nccl-tests' "size")."""
        n = max((x for x in (self.in_nelems, self.out_nelems) if x is not None), default=None)
        es = DTYPE_BYTES.get(self.dtype or "")
        return n * es if n is not None and es is not None else None

    def in_bytes(self) -> int | None:
        es = DTYPE_BYTES.get(self.dtype or "")
        return self.in_nelems * es if self.in_nelems is not None and es is not None else None


class Folder:
    """Folds decoded events into compact columns, one piece at a time.

    Names are interned to integer ids (`name_ids`, insertion order = id), so per-name work later
    (step regex, launch table, classification) runs once per distinct name and columns hold int32.
    """

    def __init__(self) -> None:
        self.host = _Columns(_HOST_COLS)
        self.dev = _Columns(_DEV_COLS)
        self.name_ids: dict[str, int] = {}
        # call stacks interned like names; the host column "stack" holds their ids (-1: none)
        self.stack_ids: dict[str, int] = {}
        self.h_comm: dict[int, Comm] = {}
        # host row -> the peer's group rank of a gloo `c10d::send` / `c10d::recv_` call (its Concrete Inputs)
        self.h_p2p: dict[int, int] = {}
        self.d_comm: dict[int, Comm] = {}
        # interned shape / dtype texts (they repeat every step): the host columns "dims" and "types" hold
        # their codes into `texts`; "" (absent, or no inputs) is -1 (NULL). Each raw value is made text once:
        # `dim_codes` / `type_codes` map it to its code, `dim_lists` holds the raw dims that are lists
        self.text_ids: dict[str, int] = {"": -1}
        self.texts: list[str] = []
        self.dim_codes: dict[bytes, int] = {}
        self.type_codes: dict[bytes, int] = {}
        self.dim_lists: set[bytes] = set()
        self.has_shapes = False
        self.gpu_step_starts: list[int] = []  # ns
        self.gpu_step_names: set[int] = set()
        self.memory: list[tuple[int, str, int | None, int | None]] = []
        self.skipped: Counter[str] = Counter()
        self.no_dur = 0
        self.not_events = 0   # entries of traceEvents that are not objects (events.NOT_AN_EVENT)

    def fold(self, evs: list[Event]) -> None:
        """Append one decoded piece. Events are split by cat in one pass; each column is then pulled out
        with a list comprehension (a tight loop per column costs far less than one Python statement per
        field per event)."""
        hget = HOST_CODE.get
        dget = DEVICE_CODE.get
        hl: list[Event] = []
        dl: list[Event] = []
        hc: list[int] = []
        dc: list[int] = []
        h_add, hc_add, d_add, dc_add = hl.append, hc.append, dl.append, dc.append
        for e in evs:
            if e.ph == "X":
                c = e.cat
                code = hget(c)  # type: ignore[arg-type]
                if code is not None:
                    h_add(e)
                    hc_add(code)
                    continue
                code = dget(c)  # type: ignore[arg-type]
                if code is not None:
                    d_add(e)
                    dc_add(code)
                elif c == "gpu_user_annotation":
                    if (m := STEP_RE.match(e.name)) and (ns := raw_ts_ns(e.ts)) is not None:
                        self.gpu_step_starts.append(ns)
                        self.gpu_step_names.add(int(m.group(1)))
                elif c not in IGNORED_CATS:
                    self.skipped[c or "(none)"] += 1
            elif e.ph == "i" and e.name == "[memory]":
                self._memory(e)
            elif e.ph == NOT_AN_EVENT:
                self.not_events += 1
        if hl:
            self._fold_host(*self._with_times(hl, hc))
        if dl:
            self._fold_device(*self._with_times(dl, dc))

    def _with_times(self, evs: list[Event], codes: list[int]
                    ) -> tuple[list[Event], list[int], np.ndarray, np.ndarray]:
        """The events with a time, their codes, `ts` as int ns and `dur` as float64 µs."""
        ts = ts_ns_column([e.ts for e in evs])
        dur = np.array([e.dur for e in evs], dtype=np.float64)  # (an absent dur, None, becomes NaN)
        # complete events without ts/dur carry no time: skipped (like HTA); so are times whose ns do not
        # fit int64 (beyond ~285 years of µs), which no clock writes
        ok = np.abs(dur) < TIME_LIMIT_US  # (False for NaN)
        if not ok.all() or (ts == NO_NS).any():
            ok &= ts != NO_NS
            keep = np.flatnonzero(ok).tolist()
            self.no_dur += len(evs) - len(keep)
            evs = [evs[i] for i in keep]
            codes = [codes[i] for i in keep]
            ts, dur = ts[ok], dur[ok]
        return evs, codes, ts, dur

    def _ids(self, evs: list[Event]) -> np.ndarray:
        ids = self.name_ids
        names = [e.name for e in evs]
        try:  # C-level lookups; new names are rare after the first pieces
            got = list(map(ids.__getitem__, names))
        except KeyError:
            got = [ids.setdefault(n, len(ids)) for n in names]
        return np.array(got, dtype=np.int32)

    def _text_codes(self, keys: list[bytes], codes: dict[bytes, int], text_of: Callable[[bytes], str],
                    lists: set[bytes] | None = None) -> np.ndarray:
        """int32 codes into `texts` of raw values (`_raw_keys`), through `codes` (raw -> code); a new raw value
        is made canonical and text (`text_of`) once, and added to `lists` when it is a list."""
        try:  # C-level lookups: shapes and dtypes repeat every step
            return np.array(list(map(codes.__getitem__, keys)), dtype=np.int32)
        except KeyError:
            for k in set(keys).difference(codes):
                raw = _canonical(k)
                if raw and lists is not None:
                    lists.add(k)
                text = text_of(raw)
                if text not in self.text_ids:
                    self.text_ids[text] = len(self.texts)
                    self.texts.append(text)
                codes[k] = self.text_ids[text]
            return np.array(list(map(codes.__getitem__, keys)), dtype=np.int32)

    def _fold_host(self, hl: list[Event], codes: list[int], ts: np.ndarray, dur: np.ndarray) -> None:
        base = self.host.n
        cols = self.host.done
        cols["name"].append(self._ids(hl))
        cols["cat"].append(_small_codes(codes))
        cols["tid"].append(_int_column([e.tid for e in hl]))
        cols["ts"].append(ts)
        cols["dur"].append(dur)
        args = [e.args for e in hl]
        cols["corr"].append(_int64([a.correlation for a in args]))
        cols["ext"].append(_int64([a.external_id for a in args]))
        dims = [a.input_dims for a in args]
        keys = _raw_keys(dims) if any(dims) else []
        codes = self._text_codes(keys, self.dim_codes, shape_text, self.dim_lists)
        if any(map(self.dim_lists.__contains__, keys)):  # (a piece without shapes stores no dtypes either)
            cols["dims"].append(codes)
            cols["types"].append(self._text_codes(_raw_keys([a.input_type for a in args]), self.type_codes,
                                                  type_text))
            self.has_shapes = True
        else:
            cols["dims"].append(np.full(len(hl), -1, dtype=np.int32))
            cols["types"].append(np.full(len(hl), -1, dtype=np.int32))
        stacks = [a.call_stack for a in args]
        if any(stacks):  # (call stacks are recorded only with with_stack=True)
            sids = self.stack_ids
            cols["stack"].append(np.array([sids.setdefault(s, len(sids)) if s else -1 for s in stacks],
                                          dtype=np.int32))
        else:
            cols["stack"].append(np.full(len(hl), -1, dtype=np.int32))
        for i in [i for i, a in enumerate(args) if a.collective is not None or a.in_nelems is not None]:
            a = args[i]
            self.h_comm[base + i] = Comm(a.collective, a.in_nelems, a.out_nelems, a.dtype,
                                          None if a.pg_name is None else str(a.pg_name), p2p_peer(a))
        self._p2p_calls(cols["name"][-1], args, base)
        self.host.n = base + len(hl)

    def _p2p_calls(self, nids: np.ndarray, args: list, base: int) -> None:
        """The peer of each gloo send / recv call: c10d::send(tensors, group, dst, tag) and
        c10d::recv_(tensors, group, src, tag) hold it as their third concrete input."""
        want = [self.name_ids[n] for n in P2P_CALLS if n in self.name_ids]
        if not want:
            return
        for i in np.flatnonzero(np.isin(nids, want)).tolist():
            peer = concrete_int(args[i].concrete, 2)
            if peer is not None:
                self.h_p2p[base + i] = peer

    def _fold_device(self, dl: list[Event], codes: list[int], ts: np.ndarray, dur: np.ndarray) -> None:
        base = self.dev.n
        cols = self.dev.done
        cols["name"].append(self._ids(dl))
        cols["task"].append(_small_codes(codes))
        args = [e.args for e in dl]
        streams = [a.stream for a in args]
        if all(type(s) is int for s in streams):
            cols["stream"].append(_int_column(streams))
        else:  # no int `stream` arg: a string ("0x0"), or the tid (legacy "stream 7")
            fixed = [s if type(s) is int else _int_or_none(s if s is not None else e.tid)
                     for s, e in zip(streams, dl, strict=True)]
            cols["stream"].append(_int_column(fixed))
        cols["device"].append(_int64([a.device if a.device is not None else (e.pid if type(e.pid) is int else NONE)
                                      for a, e in zip(args, dl, strict=True)]))
        cols["ts"].append(ts)
        cols["dur"].append(dur)
        cols["corr"].append(_int64([a.correlation for a in args]))
        cols["ext"].append(_int64([a.external_id for a in args]))
        cols["grid"].append(_int64([g[0] * g[1] * g[2] if type(g) is list and len(g) == 3 else NONE
                                      for g in [a.grid for a in args]]))
        nbytes = [a.nbytes if a.nbytes is not None else
                  (_int_or_none(a.size) if t == D_MTIA else None) for a, t in zip(args, codes, strict=True)]
        cols["nbytes"].append(_int_column(nbytes))
        for i in [i for i, a in enumerate(args) if a.collective is not None or a.in_nelems is not None]:
            a = args[i]
            self.d_comm[base + i] = Comm(a.collective, a.in_nelems, a.out_nelems, a.dtype,
                                          None if a.pg_name is None else str(a.pg_name), p2p_peer(a))
        self.dev.n = base + len(dl)

    def _memory(self, e: Event) -> None:
        a = e.args
        ns = raw_ts_ns(e.ts)
        if ns is None or (a.total_allocated is None and a.total_reserved is None):
            return
        dt = a.device_type
        kind = DEVICE_TYPE_NAMES.get(dt, f"device_type{dt}") if dt is not None else "unknown"
        comp = kind if kind == "cpu" else f"{kind}:{a.device_id if a.device_id is not None else 0}"
        self.memory.append((ns, comp, a.total_allocated, a.total_reserved))
