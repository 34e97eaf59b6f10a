"""The typed event structs msgspec decodes a Kineto trace into, and exact µs -> ns conversion."""

from __future__ import annotations

import contextlib
import re
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar, Union

import msgspec
import numpy as np

EPOCH_US = 10**15        # µs timestamps above this (Sep 2001) are on the epoch clock


TIME_LIMIT_US = 9e15      # |ts| and |dur| below this (µs) fit int64 ns; an event beyond it is skipped


# --------------------------------------------------------------------------------------------------
# Decoding types: only the fields we store. gc=False: these never form cycles, so the cyclic GC need
# not track (and repeatedly scan) hundreds of thousands of them.
# --------------------------------------------------------------------------------------------------

class _Args(msgspec.Struct, gc=False, frozen=True):
    correlation: int = -1
    external_id: int = msgspec.field(name="External id", default=-1)
    stream: int | str | None = None
    device: int | None = None
    input_dims: msgspec.Raw = msgspec.field(name="Input Dims", default=msgspec.Raw())
    input_type: msgspec.Raw = msgspec.field(name="Input type", default=msgspec.Raw())
    call_stack: str | None = msgspec.field(name="Call stack", default=None)
    collective: str | None = msgspec.field(name="Collective name", default=None)
    in_nelems: int | None = msgspec.field(name="In msg nelems", default=None)
    out_nelems: int | None = msgspec.field(name="Out msg nelems", default=None)
    dtype: str | None = None
    group_size: int | None = msgspec.field(name="Group size", default=None)
    pg_name: str | int | None = msgspec.field(name="Process Group Name", default=None)
    # record_param_comms: the caller's rank for a collective, the peer (group rank) for send / recv
    comm_rank: int | None = msgspec.field(name="Rank", default=None)
    pg_ranks: str | list[int] | None = msgspec.field(name="Process Group Ranks", default=None)
    # the scalar arguments of an op as text; c10d::send / c10d::recv_ (gloo) hold the peer's group rank at 2
    concrete: msgspec.Raw = msgspec.field(name="Concrete Inputs", default=msgspec.Raw())
    nbytes: int | None = msgspec.field(name="bytes", default=None)
    size: int | str | None = None                    # MTIA dma_request bytes (AMD runtime: a string)
    grid: list[int] | str | None = None              # CUDA grid [x, y, z] (Triton cpu ops: "grid(100,)")
    sync_kind: str | None = msgspec.field(name="cuda_sync_kind", default=None)
    total_allocated: int | None = msgspec.field(name="Total Allocated", default=None)
    total_reserved: int | None = msgspec.field(name="Total Reserved", default=None)
    device_type: int | None = msgspec.field(name="Device Type", default=None)
    device_id: int | None = msgspec.field(name="Device Id", default=None)


_NO_ARGS = _Args()


EMPTY_RAW = msgspec.Raw()


class _Fields(msgspec.Struct, gc=False):
    """The stored fields of an event."""

    cat: str | None = None
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    # µs. `ts` stays the numeral's text (an epoch-µs float such as 1610366662254410.123 has no binary
    # float within 0.25 µs of it), made integer ns a piece at a time by `ts_ns_column`; `dur` is a float:
    # durations are below 2^43 µs, where `us_to_ns` gives the exact ns of a numeral with up to 3 decimals
    ts: msgspec.Raw = msgspec.Raw()
    dur: float | None = None
    args: _Args = _NO_ARGS


class Event(_Fields):
    """An event of any phase (what the loose decode gives, see `coerce_event`)."""

    ph: str = ""


# The typed decode picks a struct by the event's "ph" (a msgspec tagged union): complete ("X") and instant
# ("i") events get every stored field, every other phase an empty struct, so their keys are skipped
# without building strings or numbers. Flow events ("s"/"f": ~30 % of a GPU trace's events) are never
# read, and their decode was ~12 % of a trace's. A phase missing from this list (or no "ph" at all) fails
# the piece's typed decode, which then takes the loose path (`_decode_events`) with the same result.
_PHASES = "BbCcDEefIMNnOPRstVv()"


class _Complete(_Fields, tag_field="ph", tag="X"):
    ph: ClassVar[str] = "X"


class _Instant(_Complete, tag="i"):
    ph: ClassVar[str] = "i"


_SKIPPED = tuple(msgspec.defstruct(f"_Phase{ord(p)}", [("ph", ClassVar[str], p)], tag_field="ph", tag=p,
                                   gc=False) for p in _PHASES)


_TypedEvent = Union[(_Complete, _Instant, *_SKIPPED)]  # a runtime union over a tuple of types


class TraceDoc(msgspec.Struct, gc=False):
    """A whole Kineto document with only the stored fields (the benchmark's parse floor decodes this)."""

    traceEvents: list[_TypedEvent]  # type: ignore[valid-type]


class _LooseEvent(msgspec.Struct, gc=False):
    """Same fields, any JSON types: used for a piece whose values do not fit the strict types."""

    ph: Any = ""
    cat: Any = None
    name: Any = ""
    pid: Any = None
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: Any = None


EVENTS = msgspec.json.Decoder(list[_TypedEvent])  # type: ignore[valid-type]


LOOSE_EVENTS = msgspec.json.Decoder(list[_LooseEvent])


RAW_DICT = msgspec.json.Decoder(dict[str, msgspec.Raw])


ANY = msgspec.json.Decoder()


def coerce_event(e: _LooseEvent) -> Event:
    """Strict event from a loose one: values of unexpected types become the field's default."""
    def num(v: Any) -> int | float | None:
        if isinstance(v, bool):
            return None
        if isinstance(v, (int, float)):
            return v
        if isinstance(v, str):
            try:
                return float(v) if any(c in v for c in ".eE") else int(v)
            except ValueError:
                return None
        return None

    args = _NO_ARGS
    if isinstance(e.args, dict):
        kw: dict[str, Any] = {}
        for f in msgspec.structs.fields(_Args):
            if f.encode_name in e.args:
                v = e.args[f.encode_name]
                if f.name in ("input_dims", "input_type", "concrete"):
                    if isinstance(v, list):
                        kw[f.name] = msgspec.Raw(msgspec.json.encode(v))
                    continue
                with contextlib.suppress(msgspec.ValidationError, TypeError):
                    v = msgspec.convert(v, f.type, strict=False)
                    if not (isinstance(v, int) and not -(2**63) <= v < 2**63):  # ids beyond int64: unknown
                        kw[f.name] = v
        args = _Args(**kw)

    def text(v: Any, default: str | None) -> Any:
        return v if isinstance(v, str) else default

    def ident(v: Any) -> int | str | None:
        return v if isinstance(v, (int, str)) and not isinstance(v, bool) else None

    return Event(ph=text(e.ph, ""), cat=text(e.cat, None), name=text(e.name, ""), pid=ident(e.pid),
                  tid=ident(e.tid), ts=_raw_numeral(_decimal(e.ts)), dur=num(e.dur), args=args)


# The `ph` of an entry of traceEvents that is no event at all (a number, string, list or null): the folder
# counts these and the reader says how many were skipped.
NOT_AN_EVENT = "\x00"
_RAW_ITEMS = msgspec.json.Decoder(list[msgspec.Raw])
_LOOSE_EVENT = msgspec.json.Decoder(_LooseEvent)


def loose_events(piece: bytes | memoryview) -> list[Event]:
    """The events of `[ ... ]` whose values do not fit the strict types: coerced; an entry that is not an
    object becomes one NOT_AN_EVENT event (so one junk entry costs itself, not the piece)."""
    try:
        return [coerce_event(e) for e in LOOSE_EVENTS.decode(piece)]
    except msgspec.ValidationError:
        pass
    out = []
    for raw in _RAW_ITEMS.decode(piece):
        try:
            out.append(coerce_event(_LOOSE_EVENT.decode(raw)))
        except msgspec.ValidationError:
            out.append(Event(ph=NOT_AN_EVENT, cat=None, name="", pid=None, tid=None, ts=EMPTY_RAW, dur=None,
                             args=_NO_ARGS))
    return out


def ts_ns(ts: Decimal) -> int:
    """A decimal µs timestamp as integer ns, rounded half-even below the ns (exact: no binary float)."""
    return int(ts.scaleb(3).to_integral_value())


TIME_LIMIT_NS = int(TIME_LIMIT_US) * 1000
NO_NS = np.iinfo(np.int64).min   # ts_ns_column: no usable timestamp
# Whole pieces of `ts` numerals in the two layouts Kineto writes, non-negative: µs with exactly 3 decimals
# (the digits are the ns), or whole µs (older traces). At most 16 integer digits: 19 digits of ns fit uint64,
# and what fits int64 (TIME_LIMIT_US) is checked after parsing.
_FIXED3_RE = re.compile(rb"\d{1,16}\.\d{3}(?:,\d{1,16}\.\d{3})*")
_WHOLE_RE = re.compile(rb"\d{1,16}(?:,\d{1,16})*")


def _raw_numeral(d: Decimal | None) -> msgspec.Raw:
    return EMPTY_RAW if d is None else msgspec.Raw(str(d).encode())


def raw_ts_ns(raw: msgspec.Raw) -> int | None:
    """One raw `ts` (a JSON number, or a string holding one) as integer ns; None when absent, not a finite
    number, or beyond TIME_LIMIT_US."""
    b = bytes(raw)
    if b[:1] == b'"':
        b = b[1:-1]
    try:
        d = Decimal(b.decode("ascii"))
    except (InvalidOperation, UnicodeDecodeError):
        return None
    return ts_ns(d) if d.is_finite() and -TIME_LIMIT_US < d < TIME_LIMIT_US else None


def ts_ns_column(raws: list[msgspec.Raw]) -> np.ndarray:
    """A piece's raw `ts` values as int64 ns (NO_NS: absent, not a number, or beyond TIME_LIMIT_US).

    The numerals are joined and checked as one text: in the layouts Kineto writes (3 decimals, or whole
    µs) the digits are the ns (or µs) as written, parsed by numpy in C without a Python object per value.
    Anything else is converted one value at a time through Decimal (`raw_ts_ns`), with the same result."""
    blob = b",".join(raws)
    fixed3 = _FIXED3_RE.fullmatch(blob) is not None
    if fixed3 or _WHOLE_RE.fullmatch(blob):
        # numpy's text parser, in C; exact for integers (the regex leaves it nothing else to read)
        u = np.fromstring(blob.replace(b".", b"") if fixed3 else blob, dtype=np.uint64, sep=",")
        if u.size == len(raws):
            limit = TIME_LIMIT_NS if fixed3 else int(TIME_LIMIT_US)
            ok = u < limit
            ns = u.astype(np.int64) * (1 if fixed3 else 1000)
            return np.where(ok, ns, NO_NS)
    got = [raw_ts_ns(r) for r in raws]
    return np.array([NO_NS if v is None else v for v in got], dtype=np.int64)


def _decimal(v: Any) -> Decimal | None:
    """A loose JSON value as a finite Decimal (a float keeps its shortest repr), else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        return None
    try:
        d = Decimal(repr(v) if isinstance(v, float) else v)
    except InvalidOperation:
        return None
    return d if d.is_finite() else None


def us_to_ns(us: np.ndarray) -> np.ndarray:
    """float64 µs -> int64 ns: floor(x)·1000 + round(frac(x)·1000), exact for ns-decimal inputs < 2^43 µs.

    Multiplying by 1000 first would lose the last ns above ~4.5e12 µs (ulp of the product > 0.5 ns).
    """
    whole = np.floor(us)
    frac_ns = np.rint((us - whole) * 1000.0).astype(np.int64)
    return whole.astype(np.int64) * 1000 + frac_ns
