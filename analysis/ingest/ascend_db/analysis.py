"""analysis.db / communication_analyzer.db beside the export: communication analysis and the step table."""

from __future__ import annotations

import itertools
import re
from dataclasses import replace
from typing import Any

from ...errors import ProfileError
from ..ascend_events import emit
from ..base import RankTables
from .common import (
    COMM_MATCH_NS,
    COMM_MB,
    floats,
    ms_ns,
    ms_ns_column,
    rank_or_none,
    step_number,
    to_float,
)
from .db import Db, group_id, i64, mapped, open_ro
from .device import CommIndex
from .rank import DbRank

# (name, group) -> [(start ns, step or -1, comm op row)] (device.CommIndex)
CommKeys = dict[tuple[str, str | None], list[tuple[int, int, int]]]


# ---- analysis.db: communication.json / matrix / step_trace_time twins ------------------------------------
def analysis_db(desc: DbRank, t: RankTables, comm: CommIndex | None) -> None:
    """analysis.db / communication_analyzer.db beside the DB (also when the DB was copied out of its rank dir):
    comm_bandwidth, comm_packets, links, vendor_step_trace, and the collectives' comm_ops rows with their
    transit / wait / sync / idle times and bytes moved."""
    extra: dict[int, dict[str, int | None]] = {}
    path = desc.analysis
    if path is not None:
        try:
            with open_ro(path) as con:
                adb = Db(con, path)
                extra = _comm_analyzer(adb, t, comm.index if comm is not None else {})
                step_trace_time(adb, t)
        except ProfileError as e:
            t.warn(f"{path.name}: {e.problem}; communication details skipped")
    if comm is not None:
        n = len(comm.ops.name)
        times = {key: i64([extra.get(i, {}).get(key) for i in range(n)])
                 for key in ("transit_ns", "wait_ns", "sync_ns", "idle_ns")}
        # bytes moved from the analyzer when it has them, else the message size (count x dtype)
        size = i64([extra.get(i, {}).get("size_bytes", m) for i, m in enumerate(comm.ops.size_bytes.tolist())])
        emit(t, replace(comm.ops, **times, size_bytes=size))


def _comm_analyzer(adb: Db, t: RankTables, index: CommKeys) -> dict[int, dict[str, int | None]]:
    """comm_bandwidth, comm_packets and links from analysis.db (the twins of communication*.json), and per
    comm op (index into the DB's comm ops) its transit / wait / sync / idle ns and bytes moved.

    Built as columns: the Matrix table has a row per op and link (48k rows on an 8-rank 100k-event rank),
    where one `RankTables.add` per row was half of the rank's read time. Step, group and rank texts
    repeat on every row and are converted once per distinct value (`mapped`)."""
    extra: dict[int, dict[str, int | None]] = {}
    by_step = _comm_times(adb, index, extra) if adb.has("CommAnalyzerTime") else {}
    if adb.has("CommAnalyzerBandwidth"):
        _comm_bandwidth(adb, t, extra, by_step)
    if adb.has("CommAnalyzerMatrix"):
        _comm_matrix(adb, t)
    return extra


def _comm_times(adb: Db, index: CommKeys, extra: dict[int, dict[str, int | None]]
                ) -> dict[tuple[str, str | None, Any], int]:
    """CommAnalyzerTime: transit / wait / sync / idle ns of each matched comm op into `extra`; returns
    (op, group, step text) -> comm op index."""
    by_step: dict[tuple[str, str | None, Any], int] = {}
    d = adb.fetch("CommAnalyzerTime", {"op": ("hccl_op_name",), "group": ("group_name",),
                                       "start": ("start_timestamp",), "transit": ("transit_time",),
                                       "wait": ("wait_time",), "sync": ("synchronization_time",),
                                       "idle": ("idle_time",), "step": ("step",)})
    for op, grp, st, tr, wa, sy, idl, stp in zip(d["op"], mapped(d["group"], group_id),
                                                 floats(d["start"]), d["transit"], d["wait"], d["sync"],
                                                 d["idle"], d["step"], strict=False):
        cands = index.get((str(op), grp), [])
        sn = step_number(stp)
        if sn is not None and any(c[1] == sn for c in cands):
            cands = [c for c in cands if c[1] == sn]
        if st is None or not cands:
            continue
        # start_timestamp (µs as REAL) is the analyzer's own op start: on torch_npu 2.x DB exports it
        # trails COMMUNICATION_OP.startNs by ~13 µs, so the nearest op of the same name, group and
        # step within COMM_MATCH_NS is the one (names repeat only across steps)
        gap, i = min((abs(s0 - st * 1000.0), i) for s0, _, i in cands)
        if gap <= COMM_MATCH_NS:
            extra[i] = {"transit_ns": ms_ns(tr), "wait_ns": ms_ns(wa), "sync_ns": ms_ns(sy),
                        "idle_ns": ms_ns(idl)}
            by_step[(str(op), grp, stp)] = i
    return by_step


def _comm_bandwidth(adb: Db, t: RankTables, extra: dict[int, dict[str, int | None]],
                    by_step: dict[tuple[str, str | None, Any], int]) -> None:
    """CommAnalyzerBandwidth -> comm_bandwidth and comm_packets; the bytes each op moved into `extra`."""
    d = adb.fetch("CommAnalyzerBandwidth", {
        "op": ("hccl_op_name",), "group": ("group_name",), "transport": ("transport_type",),
        "size": ("transit_size",), "time": ("transit_time",), "bw": ("bandwidth",),
        "lpr": ("large_packet_ratio",), "pkt": ("package_size",), "count": ("count",),
        "total": ("total_duration",), "step": ("step",)})
    seen: set[tuple[Any, ...]] = set()
    moved: dict[int, dict[str, int]] = {}   # comm op index -> transport -> bytes
    bands: list[tuple[Any, ...]] = []
    packets: list[tuple[Any, ...]] = []
    sizes, transits, pkts = floats(d["size"]), ms_ns_column(d["time"]), floats(d["pkt"])
    groups, step_nos = mapped(d["group"], group_id), mapped(d["step"], step_number)
    for k, (op_v, tr_v, stp) in enumerate(zip(d["op"], d["transport"], d["step"], strict=False)):
        op = str(op_v)
        if op.lower().startswith("total"):
            continue
        size, transit = sizes[k], transits[k]
        if not size and not transit:
            continue     # transports the op did not use (as the text reader skips them)
        grp = groups[k]
        transport = str(tr_v)
        key = (op, grp, tr_v, stp)
        if key not in seen:
            seen.add(key)
            size_bytes = round((size or 0.0) * COMM_MB)
            if (i := by_step.get((op, grp, stp))) is not None:
                moved.setdefault(i, {})[transport.upper()] = size_bytes
            bands.append((step_nos[k], op, grp, transport, size_bytes, transit or 0,
                          to_float(d["bw"][k]), to_float(d["lpr"][k])))
        pkt = pkts[k]
        if pkt is not None and d["count"][k] is not None:
            packets.append((step_nos[k], op, transport, round(pkt * COMM_MB), int(float(d["count"][k])),
                            ms_ns(d["total"][k]) or 0))
    if bands:
        t.extend("comm_bandwidth", dict(zip(("step", "op_name", "group_name", "transport", "size_bytes",
                                             "transit_ns", "bandwidth_gbps", "large_packet_ratio"),
                                            map(list, zip(*bands, strict=True)), strict=True)))
    if packets:
        t.extend("comm_packets", dict(zip(("step", "op_name", "transport", "packet_bytes", "count",
                                           "total_ns"), map(list, zip(*packets, strict=True)), strict=True)))
    if seen:
        t.has("comm_json")
    # bytes moved by an op = SDMA (the on-node total, else HCCS + PCIE + SIO) + RDMA, as from the JSON
    for i, sz in moved.items():
        onnode = sz.get("SDMA", sum(sz.get(k, 0) for k in ("HCCS", "PCIE", "SIO")))
        extra.setdefault(i, {})["size_bytes"] = onnode + sz.get("RDMA", 0)


def _comm_matrix(adb: Db, t: RankTables) -> None:
    """CommAnalyzerMatrix -> links (rows whose src or dst rank is a sentinel are dropped)."""
    d = adb.fetch("CommAnalyzerMatrix", {
        "op": ("hccl_op_name",), "group": ("group_name",), "src": ("src_rank",), "dst": ("dst_rank",),
        "transport": ("transport_type",), "size": ("transit_size",), "time": ("transit_time",),
        "bw": ("bandwidth",), "step": ("step",)})
    src, dst = mapped(d["src"], rank_or_none), mapped(d["dst"], rank_or_none)  # (TEXT columns)
    keep = [a is not None and b is not None for a, b in zip(src, dst, strict=True)]
    if not all(keep):
        d = {c: list(itertools.compress(v, keep)) for c, v in d.items()}
        src, dst = list(itertools.compress(src, keep)), list(itertools.compress(dst, keep))
    if src:
        t.extend("links", {
            "step": mapped(d["step"], step_number), "op_name": mapped(d["op"], str),
            "group_name": mapped(d["group"], group_id), "src_rank": src, "dst_rank": dst,
            "transport": d["transport"],
            "size_bytes": [None if f is None else round(f * COMM_MB) for f in floats(d["size"])],
            "transit_ns": ms_ns_column(d["time"]),
            "bandwidth_gbps": floats(d["bw"])})
        t.has("comm_matrix")


def step_trace_time(adb: Db, t: RankTables) -> None:
    """StepTraceTime -> vendor_step_trace (µs as REAL -> ns)."""
    if not adb.has("StepTraceTime"):
        return
    d = adb.fetch("StepTraceTime", {"step": ("step",), "computing": ("computing",),
                                    "cno": ("communication_not_overlapped",), "ov": ("overlapped",),
                                    "comm": ("communication",), "free": ("free",), "stage": ("stage",),
                                    "bubble": ("bubble",), "prep": ("preparing",)})

    def us(v: Any) -> int | None:
        f = to_float(v)
        return None if f is None else round(f * 1000)

    for k in range(len(d["step"])):
        st = d["step"][k]
        m = re.search(r"(\d+)", str(st)) if st not in (None, "") else None
        t.add("vendor_step_trace", step=int(m.group(1)) if m else None,
                   computing_ns=us(d["computing"][k]), comm_not_overlapped_ns=us(d["cno"][k]),
                   overlapped_ns=us(d["ov"][k]), communication_ns=us(d["comm"][k]), free_ns=us(d["free"][k]),
                   stage_ns=us(d["stage"][k]), bubble_ns=us(d["bubble"][k]), preparing_ns=us(d["prep"][k]))
    if d["step"]:
        t.has("vendor_step_trace")
