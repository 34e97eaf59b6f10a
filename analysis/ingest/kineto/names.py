"""Kineto name tables: launch APIs, event categories, and the classification of device ops and collectives."""

from __future__ import annotations

import re
from functools import lru_cache

from ...timeline.comm_kinds import comm_kernel_name

# --------------------------------------------------------------------------------------------------
# Name tables
# --------------------------------------------------------------------------------------------------

#: Host APIs that enqueue device work (their `correlation` equals the device op's). Used to pick the
#: launch among several host events sharing a correlation id, and by launch / queue metrics.
LAUNCH_APIS: frozenset[str] = frozenset({
    # CUDA runtime / driver (driver calls come from Triton and other JITs)
    "cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel",
    "cudaLaunchCooperativeKernelMultiDevice", "cuLaunchKernel", "cuLaunchKernelEx",
    "cuLaunchCooperativeKernel", "cudaMemcpyAsync", "cudaMemcpy", "cudaMemcpy2DAsync",
    "cudaMemcpyPeerAsync", "cudaMemcpyToSymbolAsync", "cudaMemcpyFromSymbolAsync", "cudaMemsetAsync",
    "cudaMemset", "cudaGraphLaunch", "cuGraphLaunch", "cuMemcpyAsync", "cuMemcpyHtoDAsync_v2",
    "cuMemcpyDtoHAsync_v2", "cuMemsetD8Async", "cuMemsetD32Async",
    # ROCm / HIP
    "hipLaunchKernel", "hipExtLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel",
    "hipLaunchCooperativeKernel", "hipMemcpyAsync", "hipMemcpyWithStream", "hipMemcpy", "hipMemsetAsync",
    "hipMemset", "hipGraphLaunch", "hipMemcpyDtoDAsync", "hipMemcpyHtoDAsync", "hipMemcpyDtoHAsync",
    # MTIA
    "runFunction", "runFunction - job_prep_and_submit_for_execution", "enqueueCommand memcpyHtoDAsync",
    "enqueueCommand memcpyDtoHAsync",
})


STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")


# Device-op classification. HTA 0.5.0: COMMUNICATION `^nccl.*Kernel`; MEMORY `^Memcpy|^Memset|^dma`;
# COMPUTATION = not matching `^nccl.*Kernel|.*Memcpy|^Memset|.*Sync`; OTHER = the rest. We keep its
# compute set exactly (so compute time matches) and widen communication to RCCL/HCCL/ncclDevKernel names
# and to kernels carrying a `Collective name` arg.
_MEMORY_RE = re.compile(r"^(hip)?Memcpy|^(hip)?Memset|^dma")


_SYNC_RE = re.compile(r"^Stream Wait Event|^(Stream|Event|Context|Device) Sync|^event_(wait|record)$")


# names HTA (0.5.0 + v0.6.1 exclusions) does not count as computation
_NOT_COMPUTE_RE = re.compile(r"^nccl.*Kernel|.*Memcpy|^Memset|.*Sync|^Stream Wait Event|cuda.*LaunchKernel|"
                             r"^runFunction")


_DEVICE_CATS: dict[str, str] = {
    "kernel": "kernel", "Kernel": "kernel", "gpu_memcpy": "gpu_memcpy", "Memcpy": "gpu_memcpy",
    "gpu_memset": "gpu_memset", "Memset": "gpu_memset", "cuda_sync": "cuda_sync",
    "mtia_ccp_events": "mtia_ccp_events",
}


_HOST_CATS: dict[str, str] = {
    "cpu_op": "cpu_op", "Operator": "cpu_op", "user_annotation": "user_annotation",
    "cuda_runtime": "runtime", "Runtime": "runtime", "mtia_runtime": "runtime", "cuda_driver": "driver",
    "python_function": "python_function",
}


DEVICE_TASKS = ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync", "mtia_ccp_events")


HOST_CATEGORIES = ("cpu_op", "user_annotation", "runtime", "driver", "python_function", "dataloader")


DEVICE_CODE = {c: DEVICE_TASKS.index(t) for c, t in _DEVICE_CATS.items()}


HOST_CODE = {c: HOST_CATEGORIES.index(t) for c, t in _HOST_CATS.items()}


H_USER_ANN = HOST_CATEGORIES.index("user_annotation")


H_CPU_OP = HOST_CATEGORIES.index("cpu_op")


H_RUNTIME = HOST_CATEGORIES.index("runtime")


H_DRIVER = HOST_CATEGORIES.index("driver")


H_PYTHON = HOST_CATEGORIES.index("python_function")


H_DATALOADER = HOST_CATEGORIES.index("dataloader")


D_KERNEL = DEVICE_TASKS.index("kernel")


D_MTIA = DEVICE_TASKS.index("mtia_ccp_events")


# HTA counts these as GPU work even without a correlation id
HTA_SYNC_NAMES = frozenset({"Event Sync", "Context Sync"})


# complete-event categories that are read on purpose and not stored: the profiler's own span, flows drawn
# as spans by some exporters, CUPTI range-profiler counters
IGNORED_CATS = frozenset({"Trace", "ac2g", "fwdbwd", "async_cpu_to_gpu", "async_gpu", "cuda_profiler_range",
                           "gpu_user_annotation"})


#: bytes per element of the c10 ScalarType names PyTorch writes in the `dtype` arg
DTYPE_BYTES: dict[str, int] = {
    "Byte": 1, "Char": 1, "Bool": 1, "QInt8": 1, "QUInt8": 1, "QUInt4x2": 1, "QUInt2x4": 1, "Bits1x8": 1,
    "Bits2x4": 1, "Bits4x2": 1, "Bits8": 1, "Float8_e5m2": 1, "Float8_e4m3fn": 1, "Float8_e5m2fnuz": 1,
    "Float8_e4m3fnuz": 1, "Float8_e8m0fnu": 1, "UInt8": 1, "Int8": 1,
    "Short": 2, "Half": 2, "BFloat16": 2, "UInt16": 2, "Bits16": 2, "ComplexHalf": 4,
    "Int": 4, "Float": 4, "QInt32": 4, "UInt32": 4,
    "Long": 8, "Double": 8, "ComplexFloat": 8, "UInt64": 8,
    "ComplexDouble": 16,
}


# c10::DeviceType codes in [memory] events
DEVICE_TYPE_NAMES = {0: "cpu", 1: "cuda", 6: "hip", 12: "xpu", 13: "mps", 19: "mtia", 20: "privateuse1"}


_COLLECTIVE_KERNEL_RE = re.compile(r"(?:nccl|rccl|hccl)(?:Dev)?Kernel_([A-Za-z]+)", re.I)


_OLD_NCCL_KERNEL_RE = re.compile(r"^nccl([A-Z][A-Za-z]+?)(?:Ring|Tree|CollNet|NVLS|PAT)", re.S)


_OP_TYPES = {
    "allreduce": "allreduce", "allgather": "allgather", "allgatherintotensor": "allgather",
    "reducescatter": "reducescatter", "reducescattertensor": "reducescatter", "broadcast": "broadcast",
    "alltoall": "alltoall", "alltoallv": "alltoall", "alltoallbase": "alltoall", "send": "send",
    "recv": "receive", "receive": "receive", "sendrecv": "sendrecv", "reduce": "reduce", "gather": "gather",
    "scatter": "scatter", "barrier": "barrier", "allgatherbase": "allgather", "reducescatterbase":
    "reducescatter", "allgathercoalesced": "allgather", "reducescattercoalesced": "reducescatter",
    "allreducecoalesced": "allreduce",
}


# --------------------------------------------------------------------------------------------------
# Public helpers
# --------------------------------------------------------------------------------------------------

@lru_cache(maxsize=65536)
def classify_device_op(name: str, task_type: str, has_collective: bool = False) -> str:
    """Category of a device op: compute | communication | memory | sync | other.

    `task_type` is the normalized Kineto cat (kernel, gpu_memcpy, gpu_memset, cuda_sync,
    mtia_ccp_events). Compute is exactly HTA 0.5.0's COMPUTATION (a kernel whose name matches none of
    `^nccl.*Kernel|.*Memcpy|^Memset|.*Sync`, plus v0.6.1's launch / runFunction exclusions), so compute
    time matches HTA; names HTA calls OTHER are 'sync' when they are synchronisation events, else 'other'.
    """
    if task_type == "cuda_sync":
        return "sync"
    if task_type in ("gpu_memcpy", "gpu_memset"):
        return "memory"
    if has_collective or comm_kernel_name(name):
        return "communication"
    if _MEMORY_RE.match(name):
        return "memory"
    if _SYNC_RE.match(name):
        return "sync"
    if _NOT_COMPUTE_RE.match(name):
        return "other"
    return "compute"


def collective_op_type(collective: str | None, kernel_name: str | None = None) -> str | None:
    """Normalized collective type (allreduce, allgather, reducescatter, broadcast, alltoall, send,
    receive, sendrecv, reduce, gather, scatter, barrier) from a `Collective name` arg, else from an
    NCCL/RCCL/HCCL kernel name (`ncclDevKernel_AllReduce_...`, `ncclAllReduceRingLLKernel_...`)."""
    if collective:
        key = re.sub(r"[^a-z]", "", collective.lower())
        for suffix in ("intotensorcoalesced", "tensorcoalesced", "intotensor", "base", "coalesced", "tensor"):
            if key not in _OP_TYPES and key.endswith(suffix):
                key = key[: -len(suffix)]
        if key in _OP_TYPES:
            return _OP_TYPES[key]
        return collective.lower()
    if kernel_name:
        m = _COLLECTIVE_KERNEL_RE.search(kernel_name) or _OLD_NCCL_KERNEL_RE.match(kernel_name)
        if m:
            return _OP_TYPES.get(m.group(1).lower())
    return None
