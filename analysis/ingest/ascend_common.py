"""Facts shared by the Ascend readers (text export and DB export), so both name things the same way."""

from __future__ import annotations

import re
from functools import lru_cache

# Collective names, most specific first (allreduce before reduce, alltoallv before alltoall ...).
COLLECTIVES = ("batchsendrecv", "reducescatterv", "reducescatter", "allgatherv", "allgather", "allreduce",
               "alltoallvc", "alltoallv", "alltoall", "broadcast", "reduce", "scatter", "gather", "receive",
               "recv", "send", "barrier")

# Bytes per element of the HCCL data types written in trace args and the DB.
DTYPE_BYTES = {"INT8": 1, "UINT8": 1, "INT16": 2, "UINT16": 2, "FP16": 2, "BFP16": 2, "BF16": 2, "INT32": 4,
               "UINT32": 4, "FP32": 4, "INT64": 8, "UINT64": 8, "FP64": 8, "INT128": 16}


def collective_of(name: str | None) -> str | None:
    """Normalized collective of an HCCL op / op type name: `hcom_allReduce__100_0_1` -> `allreduce`."""
    if not name:
        return None
    # Only letters count, so the op counter suffix (`__100_0_1`) can go before the cached lookup: op names
    # are unique per call, their stems are few.
    return _collective_of_stem(name.rstrip("0123456789_"))


_NOT_LETTER_RE = re.compile(r"[^a-z]")


@lru_cache(maxsize=4096)
def _collective_of_stem(name: str) -> str | None:
    s = _NOT_LETTER_RE.sub("", name.lower()).removeprefix("hcom")
    for c in COLLECTIVES:
        if c in s:
            return "receive" if c == "recv" else c
    return None


@lru_cache(maxsize=4096)  # a rank names a few groups, on every one of its thousands of ops
def group_hash(group_name: str) -> str:
    """The id torch_npu / msprof use for an HCCL group in communication*.json keys and trace thread names.

    Two 32-bit polynomial string hashes (multipliers 29 and 131) concatenated high/low into 64 bits, in
    decimal (checked on cluster4: "10.0.0.1%enp0_60000_0_1700000000000000" -> 18294791067709168601).
    A name that already is that number stays as it is.
    """
    if group_name.isdigit():
        return group_name
    h29 = h131 = 0
    for ch in group_name.encode("utf-8"):
        h29 = (h29 * 29 + ch) & 0xFFFFFFFF
        h131 = (h131 * 131 + ch) & 0xFFFFFFFF
    return str((h29 << 32) | h131)
