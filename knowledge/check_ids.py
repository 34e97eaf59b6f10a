"""The check catalog as the knowledge base sees it: ids, one-line descriptions, where each can fire.

`CHECK_IDS` is copied from the check catalog in `cli-contract.md` (ids are stable; the text is the
"fires when" column). `CHECK_VENDORS` says on which vendors' profiles a check can fire at all: the
knowledge-base test requires at least one fix per (check, vendor) pair listed here, so a finding on
any vendor always links to something actionable. `CHECK_FRAMEWORKS_ASCEND` does the same for the
two Ascend frameworks where the fix differs by framework.
"""

from __future__ import annotations

CHECK_IDS: dict[str, str] = {
    "slow-rank": "one or more ranks are slower than the others in a dimension; "
    "`subject` = `compute` | `communication` | `free`",
    "stage-imbalance": "pipeline-parallel stages do unequal work: one stage's ranks compute clearly longer than "
    "the other stages' and the rest wait for them; `ranks` = that stage's ranks, `subject` = the stage "
    '(e.g. `"stage 1 of 2"`)',
    "slow-link": "a link or a rank's links have clearly lower bandwidth than their peers; "
    '`subject` = `"src->dst"` or transport',
    "env-var": "an environment variable is set to a value that costs performance; `subject` = its name",
    "aicpu-op": "operators run on AI CPU; `subject` = op type",
    "dynamic-shape": "operators are compiled for dynamic shapes",
    "block-dim-underuse": "kernels use fewer cores than the device has",
    "no-bound-op": "kernels are bound by nothing (all pipe ratios low)",
    "misaligned-shape": "matmul / attention shapes miss the alignment the hardware wants",
    "freq-throttle": "the AI core frequency dropped below its rated value",
    "sync-stream": "the host synchronizes the stream after launches (e.g. launch blocking)",
    "op-compile": "operators are compiled during training steps",
    "sync-batchnorm": "SyncBatchNorm runs during training",
    "affinity-api": "an op sequence has a fused / vendor-optimized replacement; "
    "`subject` = the replacement API",
    "gc-pause": "Python garbage collection stalls the host",
    "slow-dataloader": "the data loader holds the step",
    "host-bound": "the device waits for the host to launch work (launch overhead, dispatch)",
    "small-packet": "collectives move packets too small to use the link bandwidth",
    "bandwidth-contention": "communication slows down while it overlaps compute",
    "retransmission": "RDMA transfers were retransmitted",
    "byte-misalignment": "communication sizes are not multiples of the transfer alignment",
    "exposed-comm-tail": "gradient communication after backward is not overlapped "
    "(fusion / bucket split helps)",
    "memory-ops": "the allocator frees / mallocs device memory inside steps",
    "h2d-pageable": "host-to-device copies from pageable memory",
    "fp32-compute": "matmul / convolution / attention time is dominated by float32 kernels where mixed "
    "precision (fp16 / bf16) applies",
}

# Short titles for docs and `stepdoctor explain CHECK`; the description above stays the contract text.
CHECK_TITLES: dict[str, str] = {
    "slow-rank": "Slow rank",
    "slow-link": "Slow link",
    "env-var": "Costly environment variable",
    "aicpu-op": "Operators on AI CPU",
    "dynamic-shape": "Dynamic-shape operators",
    "block-dim-underuse": "Kernels use too few cores",
    "no-bound-op": "Kernels bound by nothing",
    "misaligned-shape": "Misaligned matmul / attention shapes",
    "freq-throttle": "AI core frequency throttling",
    "sync-stream": "Stream synchronization after launches",
    "op-compile": "Operator compilation inside steps",
    "sync-batchnorm": "SyncBatchNorm in training",
    "affinity-api": "Fusible op sequence (affinity API)",
    "gc-pause": "Python GC pauses",
    "slow-dataloader": "Slow data loader",
    "host-bound": "Host-bound launch",
    "small-packet": "Small communication packets",
    "bandwidth-contention": "Communication / compute bandwidth contention",
    "retransmission": "RDMA retransmission",
    "byte-misalignment": "Communication byte misalignment",
    "exposed-comm-tail": "Exposed gradient communication tail",
    "memory-ops": "Allocator calls inside steps",
    "h2d-pageable": "Pageable host-to-device copies",
    "fp32-compute": "Float32 compute where mixed precision applies",
    "stage-imbalance": "Pipeline stage imbalance",
}

# Where each check can fire. Ascend-only checks read Ascend-specific data (AI core pipe ratios, block
# dim, AICPU tasks, CANN compile events, AI core frequency counters, HCCL SDMA/RDMA task details);
# the rest are generic PyTorch / runtime behaviour and fire on Kineto traces from CUDA and ROCm too.
_GPU = ("cuda", "rocm")
CHECK_VENDORS: dict[str, tuple[str, ...]] = {
    "slow-rank": ("ascend", *_GPU),
    "slow-link": ("ascend", *_GPU),
    "env-var": ("ascend", *_GPU),
    "aicpu-op": ("ascend",),
    "dynamic-shape": ("ascend",),
    "block-dim-underuse": ("ascend",),
    "no-bound-op": ("ascend",),
    "misaligned-shape": ("ascend",),
    "freq-throttle": ("ascend",),
    "sync-stream": ("ascend", *_GPU),
    "op-compile": ("ascend",),
    "sync-batchnorm": ("ascend", *_GPU),
    "affinity-api": ("ascend", *_GPU),
    "gc-pause": ("ascend", *_GPU),
    "slow-dataloader": ("ascend", *_GPU),
    "host-bound": ("ascend", *_GPU),
    "small-packet": ("ascend", *_GPU),
    "bandwidth-contention": ("ascend",),
    "retransmission": ("ascend",),
    "byte-misalignment": ("ascend",),
    "exposed-comm-tail": ("ascend", *_GPU),
    "memory-ops": ("ascend", *_GPU),
    "h2d-pageable": ("ascend", *_GPU),
    "fp32-compute": ("ascend", *_GPU),
    "stage-imbalance": ("ascend", *_GPU),
}

# Checks whose fix on Ascend differs between torch_npu and MindSpore code: each needs a fix for both
# frameworks (the rest are framework-neutral, hardware, or PyTorch-only by nature of the signal).
CHECK_FRAMEWORKS_ASCEND: dict[str, tuple[str, ...]] = {
    "slow-dataloader": ("pytorch", "mindspore"),
    "exposed-comm-tail": ("pytorch", "mindspore"),
    "fp32-compute": ("pytorch", "mindspore"),
    "gc-pause": ("pytorch", "mindspore"),
    "host-bound": ("pytorch", "mindspore"),
    "small-packet": ("pytorch", "mindspore"),
    "dynamic-shape": ("pytorch", "mindspore"),
    "aicpu-op": ("pytorch", "mindspore"),
    "slow-rank": ("pytorch", "mindspore"),
    "env-var": ("pytorch", "mindspore"),
    "stage-imbalance": ("pytorch", "mindspore"),
}

# Checks where `Finding.subject` names exactly what the fix must match (an env var, a replacement API):
# a fix that does not name the subject is the wrong answer for such a finding.
SUBJECT_KEYED_CHECKS: frozenset[str] = frozenset({"env-var", "affinity-api"})

VENDORS: tuple[str, ...] = ("ascend", "cuda", "rocm")
FRAMEWORKS: tuple[str, ...] = ("pytorch", "mindspore")
