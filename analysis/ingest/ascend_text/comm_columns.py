"""communication.json / communication_matrix.json entries -> table columns (comm_ops, bandwidth,
packets, links)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import msgspec
import numpy as np

from ..ascend_common import collective_of
from ..ascend_events import CommOps
from .common import COMM_MB_BYTES
from .frames import objects, step_number
from .numbers import (
    I64_MAX,
    I64_MIN,
    JSON_NUMBER_RE,
    NumbersAsText,
    dec_floats,
    i64,
    int32,
    int_array,
    ma,
    scaled_column,
    scaled_i64,
)
from .trace_events import FLOAT_OR_NONE, STR_OR_NONE, text_or_none

# communication*.json entries, decoded into structs with only the keys this reader uses (see `_comm_json`).
# The typed decoding reads ms / MB / GB/s numbers as floats: msgspec rounds correctly, as float(text) and
# float(Decimal(text)) do (checked on 4 million random numbers, long mantissas and halfway cases included),
# and `_scaled_floats` checks that the integers it makes are exact. The start timestamp stays text: 19
# digits do not fit a float. The generic decoding fills the same structs with text (structs do not check
# their field types when built).


class _TimeInfo(msgspec.Struct, gc=False):
    start: Any = msgspec.field(default=None, name="Start Timestamp(us)")
    elapse: float | None = msgspec.field(default=None, name="Elapse Time(ms)")
    transit: float | None = msgspec.field(default=None, name="Transit Time(ms)")
    wait: float | None = msgspec.field(default=None, name="Wait Time(ms)")
    sync: float | None = msgspec.field(default=None, name="Synchronization Time(ms)")
    idle: float | None = msgspec.field(default=None, name="Idle Time(ms)")


class _Band(msgspec.Struct, gc=False):
    size: float | None = msgspec.field(default=None, name="Transit Size(MB)")
    transit: float | None = msgspec.field(default=None, name="Transit Time(ms)")
    bandwidth: float | None = msgspec.field(default=None, name="Bandwidth(GB/s)")
    large_packet_ratio: float | None = msgspec.field(default=None, name="Large Packet Ratio")
    distribution: Any = msgspec.field(default=None, name="Size Distribution")


class _OpInfo(msgspec.Struct, gc=False):
    time: _TimeInfo | None = msgspec.field(default=None, name="Communication Time Info")
    bands: dict[str, _Band] | None = msgspec.field(default=None, name="Communication Bandwidth Info")


class Link(msgspec.Struct, gc=False):
    op_name: Any = msgspec.field(default=None, name="Op Name")
    transport: Any = msgspec.field(default=None, name="Transport Type")
    size: float | None = msgspec.field(default=None, name="Transit Size(MB)")
    transit: float | None = msgspec.field(default=None, name="Transit Time(ms)")
    bandwidth: float | None = msgspec.field(default=None, name="Bandwidth(GB/s)")


_NO_TIME_INFO = _TimeInfo()


# step -> kind -> op -> entry
COMM_TYPED = msgspec.json.Decoder(dict[str, dict[str, dict[str, _OpInfo]]], float_hook=str)


MATRIX_TYPED = msgspec.json.Decoder(dict[str, dict[str, dict[str, dict[str, Link]]]], float_hook=str)


@dataclass
class CommRows:
    """communication.json gathered into columns: per op (its key is not "Total Op Info"), per transport of
    an op's bandwidth object and per packet bucket of a transport's "Size Distribution", in file order.
    Numbers not yet converted are raw: decoded as floats (the typed decodings) float lists (None: null)
    or float64 arrays (NaN: null), decoded as text lists of their text. Converted ones are exact ints
    within int64 (`scaled_i64`): nullable int64 arrays, or lists of ints and None."""
    step: list[int | None]
    name: list[str]
    group: list[str | None]
    start: Any                      # converted: ns
    elapse: Sequence[Any]
    transit: Sequence[Any]
    wait: Sequence[Any]
    sync: Sequence[Any]
    idle: Sequence[Any]
    b_op: np.ndarray                # int64: the op (index) of each transport row
    b_name: list[str]
    b_size: Sequence[Any]
    b_transit: Sequence[Any]
    b_bw: Sequence[Any]
    b_lpr: Sequence[Any]
    p_band: np.ndarray              # int64: the transport row of each packet bucket
    p_packet: list[Any]             # its key (the packet size in MB, as text)
    p_count: Any                    # converted: its count, and its total time in ns
    p_total: Any


def _comm_gather(data: dict[str, Any], exact: bool, typed: bool) -> CommRows | None:
    """`CommRows` of communication.json decoded into `_OpInfo` structs (`typed`) or dicts; None: no op.
    A "Communication Time Info" that is not an object counts as absent."""
    ops: list[tuple[Any, ...]] = []
    band_ops: list[int] = []                   # the ops (index in ops) with a bandwidth object, and it
    band_infos: list[dict[str, _Band]] = []
    for step, op_key, info in step_ops(data):
        if op_key == "Total Op Info":
            continue
        name, _, group = str(op_key).partition("@")
        if typed:
            ti = info.time if info.time is not None else _NO_TIME_INFO
            bw = info.bands
        elif not isinstance(info, dict):
            continue
        else:
            t = info.get("Communication Time Info")
            if type(t) is not dict:  # (a number, text or list here: no times, the op is skipped, not the file)
                t = {}
            ti = _TimeInfo(t.get("Start Timestamp(us)"), t.get("Elapse Time(ms)"),
                           t.get("Transit Time(ms)"), t.get("Wait Time(ms)"),
                           t.get("Synchronization Time(ms)"), t.get("Idle Time(ms)"))
            bw = info.get("Communication Bandwidth Info") or {}
            if isinstance(bw, dict):
                bw = {str(k): _Band(b.get("Transit Size(MB)"), b.get("Transit Time(ms)"),
                                    b.get("Bandwidth(GB/s)"), b.get("Large Packet Ratio"),
                                    b.get("Size Distribution"))
                      for k, b in bw.items() if isinstance(b, dict)}
        if isinstance(bw, dict):
            band_ops.append(len(ops))
            band_infos.append(bw)
        ops.append((step, name, group or None, ti.start, ti.elapse, ti.transit, ti.wait, ti.sync,
                    ti.idle))
    if not ops:
        return None
    step, name, group, start, elapse, transit, wait, sync, idle = map(list, zip(*ops, strict=True))
    infos: list[_Band] = list(itertools.chain.from_iterable(map(dict.values, band_infos)))
    packets: list[tuple[int, Any, Any, Any]] = []
    dists = [b.distribution for b in infos]
    for j in itertools.compress(range(len(dists)), dists):  # (most transports have none: {} or null)
        if isinstance(dists[j], dict):
            packets += [(j, packet, ct[0], ct[1]) for packet, ct in dists[j].items()
                        if isinstance(ct, list) and len(ct) >= 2]
    p_band, p_packet, p_count, p_total = map(list, zip(*packets, strict=True)) if packets else ([], [], [], [])
    return CommRows(step, name, group, scaled_i64(start, 1000, 3), elapse, transit, wait, sync, idle,
                    np.repeat(np.array(band_ops, dtype=np.int64), list(map(len, band_infos))),
                    list(itertools.chain.from_iterable(band_infos)), [b.size for b in infos],
                    [b.transit for b in infos], [b.bandwidth for b in infos],
                    [b.large_packet_ratio for b in infos], np.array(p_band, dtype=np.int64), p_packet,
                    scaled_i64(p_count, 1, 0), scaled_i64(p_total, 1_000_000, 6))


def comm_json_columns(data: dict[str, Any], exact: bool, typed: bool) -> tuple[
        CommOps | None, dict[str, Any] | None, dict[str, Any] | None, int]:
    """`comm_rows_columns` of `_comm_gather`."""
    rows = _comm_gather(data, exact, typed)
    return (None, None, None, 0) if rows is None else comm_rows_columns(rows, typed)


def _take(col: Any, rows: np.ndarray) -> Any:
    """col[rows] of a list or an array (a masked one keeps its mask)."""
    if isinstance(col, np.ndarray):
        return col[rows]
    return [col[j] for j in rows.tolist()]


def _nulls_of(values: Any) -> np.ndarray:
    """NULL mask of a converted column."""
    if isinstance(values, np.ma.MaskedArray):
        return np.ma.getmaskarray(values)
    return np.fromiter((v is None for v in values), dtype=bool, count=len(values))


_MOVED_TRANSPORTS = ("SDMA", "HCCS", "PCIE", "SIO", "RDMA")


_SUM_SAFE = 1 << 60  # sizes below this add up (four at most) within int64


def _bytes_moved(n_ops: int, ops_of: np.ndarray, names: list[str], sizes: Any) -> Any:
    """Per op, bytes moved = SDMA (the on-node total; else HCCS + PCIE + SIO) + RDMA of its kept transport
    rows (`ops_of`, `names`, `sizes`: ints), a transport's name compared upper-cased, its last row counting
    when an op repeats it; NULL for an op without a kept row. A nullable int64 array; a list when a size is
    beyond what int64 sums safely."""
    if isinstance(sizes, np.ndarray) and (not len(sizes) or np.abs(sizes).max() < _SUM_SAFE):
        upper = {t: t.upper() for t in set(names)}
        code_of = {t: _MOVED_TRANSPORTS.index(u) if u in _MOVED_TRANSPORTS else len(_MOVED_TRANSPORTS)
                   for t, u in upper.items()}
        codes = np.array([code_of[t] for t in names], dtype=np.int64)
        key = ops_of * (len(_MOVED_TRANSPORTS) + 1) + codes
        _, first_rev = np.unique(key[::-1], return_index=True)  # the last row of each (op, transport)
        last = len(key) - 1 - first_rev
        value = np.zeros((n_ops, len(_MOVED_TRANSPORTS) + 1), dtype=np.int64)
        has = np.zeros_like(value, dtype=bool)
        value[ops_of[last], codes[last]] = sizes[last]
        has[ops_of[last], codes[last]] = True
        sdma, hccs, pcie, sio, rdma = (value[:, k] for k in range(len(_MOVED_TRANSPORTS)))
        moved = np.where(has[:, 0], sdma, hccs + pcie + sio) + rdma
        mask = np.ones(n_ops, dtype=bool)
        mask[ops_of] = False
        return ma(np.where(mask, 1, moved), mask)
    by_op: dict[int, dict[str, int]] = {}
    for i, tname, size in zip(ops_of.tolist(), names, list(sizes), strict=True):
        by_op.setdefault(i, {})[tname.upper()] = size
    out: list[int | None] = [None] * n_ops
    for i, by_name in by_op.items():
        onnode = by_name.get("SDMA")
        if onnode is None:
            onnode = sum(by_name.get(k, 0) for k in ("HCCS", "PCIE", "SIO"))
        total = onnode + by_name.get("RDMA", 0)
        out[i] = total if I64_MIN <= total <= I64_MAX else None
    return out


def comm_rows_columns(rows: CommRows, typed: bool) -> tuple[
        CommOps | None, dict[str, Any] | None, dict[str, Any] | None, int]:
    """(comm_ops, comm_bandwidth, comm_packets columns or None, ops skipped) of communication.json's rows.

    An op needs Start Timestamp(us) and Elapse Time(ms); its bandwidth rows are the transports with a size
    or a time, its bytes moved come from those (`_bytes_moved`), and a packet bucket is kept when its
    transport row is, with a size, count and total. Raw numbers become exact integers here
    (`scaled_column`: floats raising `NumbersAsText` when one cannot be shown exact, text through
    `scaled_i64`).
    """
    step, name, group = rows.step, rows.name, rows.group
    n_ops = len(step)
    steps: Any = int_array(step)
    if steps is None:  # (a step number beyond int64: the column stays a list)
        steps = step
    names, groups = objects(name), objects(group)
    elapse = scaled_column(rows.elapse, 1_000_000, 6, typed)
    valid = ~_nulls_of(rows.start) & ~np.ma.getmaskarray(elapse)
    skipped = int(n_ops - valid.sum())

    moved: Any = None
    bands_out = packets_out = None
    if len(rows.b_name):
        of_op = rows.b_op
        sizes = scaled_column(rows.b_size, COMM_MB_BYTES, 6, typed)
        times = scaled_column(rows.b_transit, 1_000_000, 6, typed)
        sz, tm = np.ma.filled(sizes, 0), np.ma.filled(times, 0)
        kept = valid[of_op] & ((sz != 0) | (tm != 0))
        rws = np.flatnonzero(kept)
        if len(rws):
            ops_of = of_op[rws]
            b_names = objects(rows.b_name)
            k_names = b_names[rws].tolist()
            moved = _bytes_moved(n_ops, ops_of, k_names, sz[rws])
            bw, lpr = _take(rows.b_bw, rws), _take(rows.b_lpr, rws)
            if not typed:
                bw, lpr = dec_floats(bw), dec_floats(lpr)
            no_null = np.zeros(len(rws), dtype=bool)
            bands_out = {"step": _take(steps, ops_of), "op_name": names[ops_of].tolist(),
                         "group_name": groups[ops_of].tolist(), "transport": k_names,
                         "size_bytes": ma(sz[rws], no_null), "transit_ns": ma(tm[rws], no_null.copy()),
                         "bandwidth_gbps": _float_column(bw, known=True),
                         "large_packet_ratio": _float_column(lpr, known=True)}
            if len(rows.p_band):
                distinct = list(dict.fromkeys(rows.p_packet))
                table = dict(zip(distinct, scaled_i64(distinct, COMM_MB_BYTES, 6), strict=True))
                packet = [table[k] for k in rows.p_packet]
                keep = kept[rows.p_band] & ~np.fromiter((v is None for v in packet), dtype=bool, count=len(packet)) \
                    & ~_nulls_of(rows.p_count) & ~_nulls_of(rows.p_total)
                pk = np.flatnonzero(keep)
                if len(pk):
                    p_op = of_op[rows.p_band[pk]]
                    packets_out = {"step": _take(steps, p_op), "op_name": names[p_op].tolist(),
                                   "transport": b_names[rows.p_band[pk]].tolist(),
                                   "packet_bytes": i64(_take(packet, pk)),
                                   "count": i64(_take(rows.p_count, pk)),
                                   "total_ns": i64(_take(rows.p_total, pk))}
    ops_out = None
    if skipped < n_ops:
        keep_ops = np.flatnonzero(valid)
        if moved is None:
            size = ma(np.ones(len(keep_ops), dtype=np.int64), np.ones(len(keep_ops), dtype=bool))
        else:
            size = i64(_take(moved, keep_ops))
        kept_names = names[keep_ops].tolist()
        start = rows.start
        ops_out = CommOps(step=int32(_take(step, keep_ops)), name=kept_names,
                          op_type=[collective_of(n) for n in kept_names], group_name=groups[keep_ops].tolist(),
                          start_ns=i64(_take(start, keep_ops)), elapse_ns=i64(elapse[keep_ops]),
                          transit_ns=scaled_column(_take(rows.transit, keep_ops), 1_000_000, 6, typed),
                          wait_ns=scaled_column(_take(rows.wait, keep_ops), 1_000_000, 6, typed),
                          sync_ns=scaled_column(_take(rows.sync, keep_ops), 1_000_000, 6, typed),
                          idle_ns=scaled_column(_take(rows.idle, keep_ops), 1_000_000, 6, typed), size_bytes=size)
    return ops_out, bands_out, packets_out, skipped


@dataclass
class MatrixRows:
    """communication_matrix.json gathered: per op kept (its links counted), and per link kept (a `src-dst`
    key, its op not an aggregate), in file order. Numbers as in `CommRows`."""
    op_steps: list[int | None]
    op_links: list[int]
    names: list[str]                # per link: its op key's name, and group (None: none)
    groups: list[str | None]
    src: Any                        # global ranks: int64 masked arrays (no NULL), or lists of ints
    dst: Any
    op_name: list[Any]              # raw "Op Name" / "Transport Type" values
    transport: list[Any]
    size: Sequence[Any]
    transit: Sequence[Any]
    bandwidth: Sequence[Any]


def _decimal_text(v: Any, exact: bool) -> str | None:
    """`text_or_none` of a value as the Decimal decoding gives it; `exact=False` (numbers decoded as text) raises
    `NumbersAsText` where that could differ: a numeral whose Decimal text is not itself, a list or object."""
    if not exact and (isinstance(v, (list, dict)) or (
            type(v) is str and JSON_NUMBER_RE.fullmatch(v) and str(Decimal(v)) != v)):
        raise NumbersAsText
    return text_or_none(v)


def _decimal_texts(values: Sequence[Any], exact: bool) -> list[str | None]:
    """`_decimal_text` of each value, once per distinct value when all are str / None (names repeat; the
    types are checked on the distinct values)."""
    try:
        distinct = set(values)
    except TypeError:  # a list or an object: _decimal_text() raises on it
        return [_decimal_text(v, exact) for v in values]
    if STR_OR_NONE.issuperset(map(type, distinct)):
        table = {v: _decimal_text(v, exact) for v in distinct}
        return list(map(table.__getitem__, values))
    return [_decimal_text(v, exact) for v in values]


def matrix_rows_columns(rows: MatrixRows, exact: bool, typed: bool) -> dict[str, Any]:
    """The links columns of communication_matrix.json's rows: Op Name (else the op key's name), transport
    as text, MB and ms as exact integer bytes and ns (`scaled_column`), GB/s as float. `exact`: strings
    are the document's strings (the Decimal decoding, or a decoding that tells numbers from strings),
    else numbers decoded as text may hide among them (see `_decimal_text`)."""
    names, op_name = rows.names, rows.op_name
    # `Op Name` is nearly always the op key's name: then text(name) or name is the name itself (a value
    # equal to a str is a str: JSON gives no other type that compares equal to one)
    if op_name == names:
        if not exact:
            for n in set(names):
                _decimal_text(n, exact)  # raises where the Decimal decoding could differ
        op_col = names
    else:
        op_col = [o or n for o, n in zip(_decimal_texts(op_name, exact), names, strict=True)]
    step = int_array(rows.op_steps)
    counts = rows.op_links
    return {
        "step": ma(np.repeat(step._data, counts), np.repeat(step._mask, counts))
        if step is not None else [s for s, n in zip(rows.op_steps, counts, strict=True) for _ in range(n)],
        "op_name": op_col, "group_name": rows.groups, "src_rank": rows.src, "dst_rank": rows.dst,
        "transport": _decimal_texts(rows.transport, exact),
        "size_bytes": scaled_column(rows.size, COMM_MB_BYTES, 6, typed),
        "transit_ns": scaled_column(rows.transit, 1_000_000, 6, typed),
        "bandwidth_gbps": _float_column(rows.bandwidth if typed else dec_floats(rows.bandwidth), known=True),
    }


def int_pairs(pairs: list[tuple[int, int]]) -> tuple[np.ma.MaskedArray, np.ma.MaskedArray] | None:
    """The two int64 columns of (a, b) pairs of ints; None when a value is beyond int64."""
    try:
        a = np.fromiter(itertools.chain.from_iterable(pairs), dtype=np.int64, count=2 * len(pairs)).reshape(-1, 2)
    except OverflowError:
        return None
    no_null = np.zeros(len(a), dtype=bool)
    return ma(a[:, 0].copy(), no_null), ma(a[:, 1].copy(), no_null.copy())


def _float_column(values: list[float | None], known: bool = False) -> Any:
    """A list of floats / None (`known`: no need to check) as a float64 array (None -> NaN, which RankTables
    stores as NULL, as it does None and NaN in a list)."""
    if known or FLOAT_OR_NONE.issuperset(map(type, values)):
        return np.array(values, dtype=np.float64)
    return values


def step_ops(data: dict[Any, Any]) -> Iterator[tuple[int | None, Any, Any]]:
    """(step number, op key, value) of a communication*.json document `{step: {kind: {op key: value}}}`;
    levels that are not objects are skipped."""
    for step_key, kinds in data.items():
        if not isinstance(kinds, dict):
            continue
        step = step_number(str(step_key))
        for by_op in kinds.values():
            if isinstance(by_op, dict):
                for op_key, value in by_op.items():
                    yield step, op_key, value
