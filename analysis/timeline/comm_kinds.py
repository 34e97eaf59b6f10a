"""Which device kernels are communication: the one table, and the rules that apply it.

A kernel is communication when any of three rules says so (memcpy / memset / sync tasks keep their own
category; the rules are about kernels):

1. its NAME matches a row of `COMM_KINDS` with `by == "kernel"` (NCCL, RCCL, HCCL, DeepEP,
   symmetric-memory / multimem and custom all-reduce kernels);
2. the CPU op that LAUNCHED it matches a row with `by == "launcher"`: the kernel's correlation id names a
   runtime launch call, and the launch call lies inside (same thread, start within the op's span) an op
   such as `record_param_comms`, `c10d::allreduce_` or `vllm::all_reduce`. Containment rather than the
   External id, because the kernel's External id names the innermost op (`symm_mem::multimem_all_reduce_`)
   while the op that says "communication" may be its parent (`vllm::all_reduce`);
3. it runs on a dedicated communication STREAM: a stream on which more than half of the kernels are
   communication by rules 1-2 (NCCL / RCCL put collectives on streams of their own; the rest of such a
   stream is the collectives' own helper kernels). A majority, not a tuned share: a compute stream that
   carries a few collectives never qualifies.

Gloo collectives run on the host (`gloo:all_reduce` user annotations, `c10d::allreduce_` cpu ops without
a kernel): they are read as host-side comm ops by the Kineto reader, not by these rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np


@dataclass(frozen=True)
class CommKind:
    """One row: `pattern` (a regex searched, ignoring case, in the kernel or op name), `by` ("kernel" or "launcher"),
    `family` (the library or mechanism), `why` (where the name comes from)."""

    pattern: str
    by: str
    family: str
    why: str


COMM_KINDS: tuple[CommKind, ...] = (
    CommKind(r"^nccl|ncclDevKernel|ncclKernel", "kernel", "nccl",
             "NCCL device kernels: ncclDevKernel_AllReduce_RING_LL (2.19+), ncclKernel_* / ncclAllReduceRing*"),
    CommKind(r"^rccl|rcclKernel", "kernel", "rccl", "ROCm RCCL kernels (RCCL also uses the ncclDevKernel names)"),
    CommKind(r"^hccl", "kernel", "hccl", "Huawei HCCL tasks exported into a Kineto trace"),
    CommKind(r"deep_ep::", "kernel", "deepep", "DeepEP dispatch / combine / notify kernels (namespace deep_ep)"),
    CommKind(r"multimem_|symm_mem|one_shot_all_reduce|two_shot_all_reduce", "kernel", "symm_mem",
             "torch symmetric-memory collectives: multimem_all_reduce_kernel, one/two_shot_all_reduce_kernel"),
    CommKind(r"cross_device_reduce|custom_?all_?reduce|allreduce_fusion|(?:one|two)ShotAllReduce|quickreduce",
             "kernel", "custom_allreduce",
             "vLLM / SGLang custom all-reduce (cross_device_reduce_1stage/2stage), TensorRT-LLM all-reduce "
             "(oneShotAllReduceKernel, allreduce_fusion_kernel), vLLM quick-reduce on ROCm"),
    CommKind(r"^record_param_comms$", "launcher", "c10d",
             "PyTorch's collective record (args: Collective name, Process Group Name, In/Out msg nelems)"),
    CommKind(r"^c10d::|^_c10d_functional::|^c10d_functional::", "launcher", "c10d",
             "ProcessGroup ops (c10d::allreduce_) and functional collectives (_c10d_functional::all_reduce)"),
    CommKind(r"^nccl:", "launcher", "nccl", "ProcessGroupNCCL's record function (nccl:all_reduce)"),
    CommKind(r"^vllm::(?:all_reduce|all_gather|reduce_scatter|all_to_all)", "launcher", "vllm",
             "vLLM's collective custom ops; the kernels they launch may be symm-mem, custom or NCCL"),
    CommKind(r"^deep_ep::", "launcher", "deepep", "DeepEP Buffer methods recorded as ops"),
    CommKind(r"^symm_mem::", "launcher", "symm_mem", "torch symmetric-memory ops (symm_mem::multimem_all_reduce_)"),
)


@lru_cache(maxsize=2)
def _regex(by: str) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{k.pattern})" for k in COMM_KINDS if k.by == by), re.I)


def comm_kernel_name(name: str) -> bool:
    """Rule 1: the kernel name says communication."""
    return _regex("kernel").search(name) is not None


def comm_launcher_name(name: str) -> bool:
    """Rule 2's op names: the CPU op says communication."""
    return _regex("launcher").search(name) is not None


def launched_inside(op_tid: np.ndarray, op_start: np.ndarray, op_end: np.ndarray,
                    call_tid: np.ndarray, call_start: np.ndarray) -> np.ndarray:
    """Rule 2's containment: for each launch call, whether its start lies in [start, end] (ns) of an op on
    the same thread. Ops are few (one per collective); calls are sorted once per thread."""
    inside = np.zeros(call_tid.size, dtype=bool)
    for tid in np.unique(op_tid).tolist():
        calls = np.flatnonzero(call_tid == tid)
        if not calls.size:
            continue
        order = calls[np.argsort(call_start[calls], kind="stable")]
        starts = call_start[order]
        sel = op_tid == tid
        lo = np.searchsorted(starts, op_start[sel], side="left")
        hi = np.searchsorted(starts, op_end[sel], side="right")
        for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
            inside[order[a:b]] = True
    return inside


def comm_streams(stream: np.ndarray, is_kernel: np.ndarray, is_comm: np.ndarray) -> np.ndarray:
    """Rule 3: the stream ids on which more than half of the kernels are communication (rules 1-2)."""
    s = stream[is_kernel]
    if not s.size:
        return np.empty(0, dtype=stream.dtype)
    ids, inv = np.unique(s, return_inverse=True)
    total = np.bincount(inv, minlength=ids.size)
    comm = np.bincount(inv, weights=is_comm[is_kernel].astype(np.float64), minlength=ids.size)
    return ids[comm * 2 > total]
