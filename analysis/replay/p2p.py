"""Point-to-point pairs (pipeline send / recv) as replay instances of two members.

A send and a receive pair by their peers: the s-th send from rank a to rank b is the s-th receive on b from
a (both sides issue them in program order). The peers come from the store's `comm_ops.peer_rank` (gloo's
c10d::send / c10d::recv_ arguments, NCCL's record_param_comms), else from the pipeline layout where only one
peer is possible (`layout_peers`). Peers that do not pair are not trusted
(a group rank read as a global one, a rank without a trace): a direction a -> b whose send and receive
counts differ, or where a receive ends before its send began, is left unpaired, and a step that waits in an
unpaired send / recv is not replayed (`inputs.StepInput.p2p_ms`).

On the host (gloo), the op's extent is the c10d call's start (when the rank asked) to the later of the
call's end and its `gloo:send` / `gloo:recv` span's end: a blocking send writes into the socket from the
call's start, and its span may begin only as the call returns. On the device the kernel is the op.

`waits`: which side waits for the other, as measured. A receive always waits for its send; a send waits for
its receive only where it ended after the receive began (a send the transport buffered ends without it). The
replay keeps the edges the measurement shows; it does not invent a wait that did not happen.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..metrics.coll_groups import (
    CLOCK_TOLERANCE_NS,  # a receive ending this much before its send began: paired wrongly
)

SYNC_TOLERANCE_NS = 50_000      # a thread that resumes within this of an op's end waited for it

_P2P = "('send', 'receive')"


def layout_peers(stages: dict[int, int] | None) -> dict[int, int]:
    """rank -> its only possible point-to-point peer from the pipeline layout, where the profile names none
    (MindSpore's hccl_raw files): in stages of equal size, the rank at the same position of the one adjacent
    stage (a first or last stage, or any stage of a two-stage pipeline). A middle stage talks to two stages:
    no peer is guessed for it."""
    if not stages or len(set(stages.values())) < 2:
        return {}
    members: dict[int, list[int]] = {}
    for r, st in sorted(stages.items()):
        members.setdefault(st, []).append(r)
    if len({len(v) for v in members.values()}) != 1:
        return {}
    out = {}
    for st, rs in members.items():
        near = [members[x] for x in (st - 1, st + 1) if x in members]
        if len(near) == 1:
            out.update({r: near[0][i] for i, r in enumerate(rs)})
    return out


def p2p_rows(sql, first_inst: int, stages: dict[int, int] | None = None,
             grouped_taken: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(paired rows, unpaired rows). Paired: rank, step, start_ns, dur_ns, end_ns, launch_ns, src, lane, coll,
    k, inst (from first_inst on), sync, waits. Unpaired: rank, step, dur_ns. `stages` (rank -> stage) gives
    peers by the layout where the profile has none (`layout_peers`). NCCL's grouped send/recv kernels
    (op type sendrecv) name no peer and no direction: unpaired, unless the collectives took them as an
    all-to-all (`grouped_taken`)."""
    kinds = _P2P if grouped_taken else "('send', 'receive', 'sendrecv')"
    df = sql(f"""
        WITH p AS (
            SELECT c.rank, c.step, c.op_type, c.peer_rank, c.start_ns, c.elapse_ns, h.tid
            FROM comm_ops c LEFT JOIN (SELECT DISTINCT rank, start_ns, tid FROM host_ops WHERE name LIKE 'gloo:%') h
                 ON h.rank = c.rank AND h.start_ns = c.start_ns
            WHERE lower(c.op_type) IN {kinds}
        ), calls AS (
            SELECT rank, tid, start_ns AS call_ns, start_ns + dur_ns AS call_end FROM host_ops
            WHERE name IN ('c10d::send', 'c10d::recv_')
        ), nxt AS (
            SELECT rank, tid, start_ns FROM host_ops WHERE name NOT LIKE 'gloo:%' AND name NOT LIKE 'c10d::%'
                   AND name NOT LIKE 'record_param_comms%' AND name NOT LIKE 'ProfilerStep#%'
        ), e AS (
            SELECT p.*, calls.call_ns, calls.call_end FROM p ASOF LEFT JOIN calls
                 ON calls.rank = p.rank AND calls.tid = p.tid AND p.start_ns >= calls.call_ns
        ), x AS (
            SELECT rank, step, op_type, peer_rank, tid,
                   CASE WHEN call_end >= start_ns THEN call_ns ELSE start_ns END AS s0,
                   CASE WHEN call_end >= start_ns THEN greatest(call_end, start_ns + elapse_ns)
                        ELSE start_ns + elapse_ns END AS e0
            FROM e
        )
        SELECT x.*, nxt.start_ns AS next_ns FROM x ASOF LEFT JOIN nxt
             ON nxt.rank = x.rank AND nxt.tid = x.tid AND nxt.start_ns >= x.e0
        ORDER BY x.rank, x.s0
    """)
    empty = pd.DataFrame(columns=["rank", "step", "dur_ns"])
    if df.empty:
        return pd.DataFrame(), empty
    df["dur_ns"] = df["e0"] - df["s0"]
    guess = layout_peers(stages)
    if guess and df["peer_rank"].isna().any():
        df["peer_rank"] = df["peer_rank"].fillna(df["rank"].map(guess))
    known = df["peer_rank"].notna()
    df["a"] = np.where(df["op_type"] == "send", df["rank"], df["peer_rank"].fillna(-1))
    df["b"] = np.where(df["op_type"] == "send", df["peer_rank"].fillna(-1), df["rank"])
    df["s"] = df.groupby(["rank", "op_type", "a", "b"]).cumcount()
    send = df[known & (df["op_type"] == "send")]
    recv = df[known & (df["op_type"] == "receive")]
    pairs = send.merge(recv, on=["a", "b", "s"], suffixes=("_s", "_r"))
    n_send = send.groupby(["a", "b"]).size()
    n_recv = recv.groupby(["a", "b"]).size()
    bad = set(n_send.index.symmetric_difference(n_recv.index))
    bad |= {ab for ab in n_send.index.intersection(n_recv.index) if n_send[ab] != n_recv[ab]}
    late = pairs["e0_r"] < pairs["s0_s"] - CLOCK_TOLERANCE_NS
    bad |= set(map(tuple, pairs.loc[late, ["a", "b"]].to_numpy().tolist()))
    pairs = pairs[[(a, b) not in bad for a, b in zip(pairs["a"], pairs["b"], strict=True)]].reset_index(drop=True)
    if pairs.empty:
        return pd.DataFrame(), df[["rank", "step", "dur_ns"]].reset_index(drop=True)
    pairs["inst"] = np.arange(len(pairs)) + first_inst
    out = []
    for side, other in (("_s", "_r"), ("_r", "_s")):
        o = pd.DataFrame({
            "rank": pairs["rank" + side].astype("int64"), "step": pairs["step" + side],
            "start_ns": pairs["s0" + side].astype("int64"), "dur_ns": pairs["dur_ns" + side].astype("int64"),
            "src": np.where(pairs["tid" + side].notna(), "host_ops", "comm_ops"),
            "lane": pairs["tid" + side].fillna(-1).astype("int64"),
            "coll": np.where(side == "_s", "send", "recv"), "inst": pairs["inst"],
            "waits": (pairs["e0" + side] > pairs["s0" + other]) | (side == "_r"),
            "next_ns": pairs["next_ns" + side]})
        out.append(o)
    rows = pd.concat(out, ignore_index=True)
    rows["end_ns"] = rows["start_ns"] + rows["dur_ns"]
    rows["launch_ns"] = rows["start_ns"]
    rows["sync"] = rows["next_ns"].isna() | (rows["next_ns"] >= rows["end_ns"] - SYNC_TOLERANCE_NS)
    rows["k"] = rows.sort_values("start_ns").groupby(["rank", "coll"]).cumcount() + 1
    rows = rows.drop(columns=["next_ns"])
    paired = set(zip(pairs["rank_s"], pairs["s0_s"], strict=True)) | set(zip(pairs["rank_r"], pairs["s0_r"],
                                                                             strict=True))
    left = df[[(r, s) not in paired for r, s in zip(df["rank"], df["s0"], strict=True)]]
    return rows, left[["rank", "step", "dur_ns"]].reset_index(drop=True)
