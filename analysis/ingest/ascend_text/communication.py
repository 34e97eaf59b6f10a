"""step_trace_time.csv (the profiler's own step table), communication.json and communication_matrix.json."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from decimal import Decimal
from functools import partial
from pathlib import Path
from typing import Any

import msgspec
import numpy as np

from ..ascend_columns import (
    STEP_TRACE_TIME,
)
from ..ascend_events import emit
from .comm_columns import (
    COMM_TYPED,
    MATRIX_TYPED,
    Link,
    MatrixRows,
    comm_json_columns,
    int_pairs,
    matrix_rows_columns,
    step_ops,
)
from .common import AGGREGATE_KEY_RE, LINK_RE
from .csv_io import INT, NS
from .numbers import NumbersAsText, i64, int32
from .rank import RankDesc
from .rank_files import RankFiles
from .trace_tasks import Groups, map_rank


def step_trace_time(desc: RankDesc, io: RankFiles) -> None:
    """vendor_step_trace: the profiler's own per-step breakdown (a cross-check, never the breakdown)."""
    path = desc.path("step_trace_time.csv")
    if not desc.has("step_trace_time.csv"):
        io.warn(path, "missing: the vendor per-step breakdown (cross-check) is unavailable")
        return
    res = io.resolve_csv(path, STEP_TRACE_TIME, required=False)
    if res is None:
        return
    f = res.found
    names = ("computing", "comm_not_overlapped", "overlapped", "communication", "free", "stage", "bubble",
             "preparing")
    df = io.query_converted(path, [("step", f["step"], INT), *((c, f[c], NS) for c in names if c in f)])
    if df is None:
        return
    if not len(df):
        io.warn(path, "no rows")
        return
    cols = {"step": int32(df["step"])}
    for c, out in (("computing", "computing_ns"), ("comm_not_overlapped", "comm_not_overlapped_ns"),
                   ("overlapped", "overlapped_ns"), ("communication", "communication_ns"),
                   ("free", "free_ns"), ("stage", "stage_ns"), ("bubble", "bubble_ns"),
                   ("preparing", "preparing_ns")):
        if c in df:
            cols[out] = i64(df[c])
    masks = [np.ma.getmaskarray(v) for k, v in cols.items() if k != "step"]
    short = int(np.logical_or.reduce(masks).sum()) if masks else 0
    if short:   # a cut row: its fields stay unknown (null), never 0
        io.warn(path, f"{short} row(s) with empty fields: those values are unknown for their steps")
    io.t.extend("vendor_step_trace", cols)
    io.t.has("vendor_step_trace")


def communication(desc: RankDesc, io: RankFiles, profiler_level: str | None, world_size: int | None,
                  groups: Groups) -> None:
    """communication.json -> comm_ops, comm_bandwidth, comm_packets ("Total Op Info" rows skipped).

    Decoded and converted as `_comm_json` describes, the rows added with one `extend` per table.
    """
    path = desc.path("communication.json")
    if not desc.has("communication.json"):
        # Level0 never writes it; at any other level (or an unknown one) its absence loses data
        if profiler_level != "Level0" or world_size not in (None, 1) or groups:
            io.warn(path, "missing: per-op wait/transit times and bandwidth unknown")
        return
    res = _comm_json(io, path, COMM_TYPED, comm_json_columns)
    if res is None:
        return
    ops, bands, packets, skipped = res
    if skipped:
        io.warn(path, f"{skipped} ops without Start Timestamp(us) / Elapse Time(ms) skipped")
    if bands:
        io.t.extend("comm_bandwidth", bands)
    if packets:
        io.t.extend("comm_packets", packets)
    if ops is not None:
        emit(io.t, ops)
        io.t.has("comm_ops")
    io.t.has("comm_json")


def _comm_json(io: RankFiles, path: Path, typed: msgspec.json.Decoder, columns: Callable[..., Any]) -> Any:
    """`columns(data, exact, typed)` of a communication*.json, or None with the warning `load_json` gives.

    The file is read whole, then decoded the first way that works: (1) into `typed`'s structs (only the keys
    this reader uses, no dict per entry; ms / MB / GB/s numbers as floats, the rest as text), (2) generically
    into dicts with numbers as their text (float_hook=str: a third of the cost of Decimal), for a file of
    another shape or a float that cannot be shown exact, (3) with numbers as Decimal (the exact reading), for
    a file whose meaning depends on how numbers decode (`NumbersAsText`). Columns are converted a column at a
    time by the exact helpers (`_scaled_floats`, `_scaled_ints` ...).
    """
    data = io.json_bytes(path)
    if data is None:
        return None
    try:
        decoded = typed.decode(data)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeDecodeError):
        decoded = None  # the generic decoding below reports an invalid file
    if decoded is not None:
        # the structs keep nothing of the bytes: freed before the columns are built, the file is
        # read again in the rare fallback (a 46 MB communication.json: a 44 MB lower peak)
        del data
        try:
            return columns(decoded, False, True)
        except NumbersAsText:
            del decoded
        data = io.json_bytes(path)
        if data is None:
            return None
    generic = io.decode_json(path, data, str)
    if generic is None:
        return None
    if not isinstance(generic, dict):
        io.warn(path, "not a JSON object; skipped")
        return None
    try:
        return columns(generic, False, False)
    except NumbersAsText:
        return columns(io.decode_json(path, data, Decimal), True, False)


def communication_matrix(desc: RankDesc, io: RankFiles, world_size: int | None, groups: Groups) -> None:
    """communication_matrix.json -> links; aggregate keys (-top1/-middle/-bottom/-total) are skipped.

    Decoded and converted as `_comm_json` describes; link keys are mapped to global ranks once per group
    and key.
    """
    path = desc.path("communication_matrix.json")
    if not desc.has("communication_matrix.json"):
        if world_size not in (None, 1) or groups:
            io.warn(path, "missing: per-link bandwidth unknown")
        return
    res = _comm_json(io, path, MATRIX_TYPED, partial(_matrix_columns, desc.rank, groups))
    if res is None:
        return
    cols, unmapped, bad_keys = res
    if cols is not None:
        io.t.extend("links", cols)
    if unmapped:
        io.warn(path, f"group(s) {', '.join(sorted(unmapped))[:120]} not in parallel_group_info: link ranks "
                        "kept as written (they may be group-local)")
    if bad_keys:
        io.warn(path, f"{bad_keys} link entries without a 'src-dst' key skipped")
    io.t.has("comm_matrix")


def _matrix_columns(rank: int, known: Groups, data: dict[str, Any], exact: bool,
                    typed: bool) -> tuple[dict[str, Any] | None, set[str], int]:
    """(links columns or None, unmapped groups, bad link keys) of communication_matrix.json, decoded into
    `Link` structs (`typed`) or dicts.

    `exact=False` (numbers decoded as text) raises `NumbersAsText` where the Decimal decoding could
    differ: a number as `Op Name` / `Transport Type` whose Decimal text is not its JSON text, or a list or
    object there.
    """
    links: list[Link] = []
    ranks: list[tuple[int, int]] = []
    op_steps: list[int | None] = []    # per op, with its number of links
    op_links: list[int] = []
    names: list[str] = []
    groups: list[str | None] = []
    unmapped: set[str] = set()
    bad_keys = 0
    pairs_of: dict[str, dict[str, tuple[int, int] | None]] = {}  # group -> link key -> (src, dst) global
    for step, op_key, by_link in step_ops(data):
        name, _, group = str(op_key).partition("@")
        # (an aggregate key has a '-': the regex only runs on those names)
        if op_key == "Total Op Info" or ("-" in name and AGGREGATE_KEY_RE.search(name)) \
                or not isinstance(by_link, dict):
            continue
        if group and group not in known and _local_group(rank, known, group, by_link):
            unmapped.add(group)
        pairs = pairs_of.get(group)
        if pairs is None:
            pairs = pairs_of[group] = {}
        if not by_link.keys() <= pairs.keys():  # (compared in C, without building a set)
            for lk in by_link.keys() - pairs.keys():
                pairs[lk] = _link_ranks(known, group, lk)
        sds = list(map(pairs.__getitem__, by_link))
        vals = list(by_link.values())
        if not typed:
            ok = [isinstance(v, dict) for v in vals]
            sds = [sd if good else None for sd, good in zip(sds, ok, strict=True)]
            vals = [Link(v.get("Op Name"), v.get("Transport Type"), v.get("Transit Size(MB)"),
                          v.get("Transit Time(ms)"), v.get("Bandwidth(GB/s)")) if good else None
                    for v, good in zip(vals, ok, strict=True)]
        if None in sds:
            keep = [sd is not None for sd in sds]
            bad_keys += len(sds) - sum(keep)
            sds, vals = list(itertools.compress(sds, keep)), list(itertools.compress(vals, keep))
        n = len(vals)
        links += vals
        ranks += sds
        op_steps.append(step)
        op_links.append(n)
        names += [name] * n
        groups += [group or None] * n
    if not links:
        return None, unmapped, bad_keys
    rank = int_pairs(ranks)
    rows = MatrixRows(op_steps, op_links, names, groups,
                      rank[0] if rank else [r[0] for r in ranks], rank[1] if rank else [r[1] for r in ranks],
                      [v.op_name for v in links], [v.transport for v in links], [v.size for v in links],
                      [v.transit for v in links], [v.bandwidth for v in links])
    return matrix_rows_columns(rows, exact, typed), unmapped, bad_keys


def _link_ranks(groups: Groups, group: str, key: str) -> tuple[int, int] | None:
    """(src, dst) global ranks of a `src-dst` link key of a group, None for a bad key."""
    m = LINK_RE.match(str(key))
    if not m:
        return None
    src, dst = map_rank(groups, group, m.group(1)), map_rank(groups, group, m.group(2))
    return None if src is None or dst is None else (src, dst)


def _local_group(rank: int, groups: Groups, group: str, links: dict[str, Any]) -> bool:
    """True when a group's link ranks cannot be mapped to global ranks (unknown group whose self link
    `r-r` is not this rank's global id)."""
    if not group or group in groups:
        return False
    for lk in links:
        m = LINK_RE.match(str(lk))
        if m and m.group(1) == m.group(2):
            return int(m.group(1)) != rank
    return True
