"""Write a multi-rank torch_npu (Ascend PyTorch Profiler) text export, with planted problems.

The layout and every file imitate the synthetic sample `cluster4/` (rules doc §2, §8.2):

```
{out}/node{n}_{pid}_{ts17}_ascend_pt/         one per rank, pid = 40000 + rank
  profiler_info_{rank}.json  profiler_metadata.json  FRAMEWORK/
  PROF_000001_{ts17}_{16 letters}/device_{dev}/info.json.0
  ASCEND_PROFILER_OUTPUT/trace_view.json kernel_details.csv step_trace_time.csv op_statistic.csv
                         communication.json communication_matrix.json
                         [memory_record.csv api_statistic.csv operator_details.csv]   (extra_files=True)
```

Units as in the real files: trace `ts` strings of absolute µs with 3 decimals (~1.7e15), `dur` float µs;
CSV headers carry units; communication.json mixes µs timestamps, ms durations, MB (1e6 B) sizes and GB/s.
Quirks kept on purpose: CRLF CSV lines, a trailing tab in kernel_details `Start Time(us)` cells, shapes
wrapped in literal double quotes.

Derived files agree with the trace: step_trace_time.csv columns are the sums of the Overlap Analysis
events inside each ProfilerStep (Stage = step duration = Preparing + Computing + Communication(Not
Overlapped) + Free), op_statistic.csv is the aggregation of kernel_details.csv, and communication.json /
communication_matrix.json are the sums of the HCCL tasks in the trace.
"""

from __future__ import annotations

import csv
import functools
import io
import json
import math
import random
import string
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ._timeline import (
    BWD_LAYER,
    EMBED_BWD,
    EMBED_FWD,
    FWD_LAYER,
    HEAD_BWD,
    HEAD_FWD,
    MS,
    OPTIMIZER,
    US,
    Builder,
    Call,
    Collective,
    CommRec,
    HostRec,
    KernelRec,
    Launch,
    StepRec,
    StepSync,
    Timing,
    WaitComm,
    clip,
    simulate,
    subtract,
    total,
    union,
    us_num,
    us_str,
)
from .problems import CLEAN_ENV, ResolvedPlant, Scenario, resolve

# ----------------------------------------------------------------------------------------------- device
AI_CORE_NUM = 24
AIV_NUM = 48
RATED_MHZ = 1800
SDMA_GBPS = 19.5  # clean intra-node HCCS/SDMA bandwidth, above 0.8 x 18 = 14.4 GB/s
REDUCE_GBPS = 200.0  # on-chip Reduce_Inline
RDMA_GBPS = 12.0  # inter-node RoCE (100 Gb/s links)
NODE_RANKS = 8  # NPUs per node: the HCCS mesh
CHUNK_BYTES = 32 << 20  # per-peer packet of a clean gradient AllReduce (>= 16 MB, 512-aligned)
T0_NS = 1_700_000_000_000_000 * US  # absolute start, µs epoch ~1.7e15 like the sample
TIMING = Timing()
LARGE_PACKET_MB = 16.0

GROUP_NAME = "10.0.0.1%enp0_60000_0_1700000000000000"  # the dp group
P2P_GROUP_NAME = "10.0.0.1%enp0_60000_1_1700000000000000"  # pipeline p2p to ranks outside the profile

STEP_TRACE_HEADER = [
    "Device_id",
    "Step",
    "Computing",
    "Communication(Not Overlapped)",
    "Overlapped",
    "Communication",
    "Free",
    "Stage",
    "Bubble",
    "Communication(Not Overlapped and Exclude Receive)",
    "Preparing",
]
OP_STAT_HEADER = [
    "Device_id",
    "OP Type",
    "Core Type",
    "Count",
    "Total Time(us)",
    "Min Time(us)",
    "Avg Time(us)",
    "Max Time(us)",
    "Ratio(%)",
]
KERNEL_HEADER = [
    "Step Id",
    "Model ID",
    "Task ID",
    "Stream ID",
    "Name",
    "Type",
    "OP State",
    "Accelerator Core",
    "Start Time(us)",
    "Duration(us)",
    "Wait Time(us)",
    "Block Dim",
    "Mix Block Dim",
    "HF32 Eligible",
    "Input Shapes",
    "Input Data Types",
    "Input Formats",
    "Output Shapes",
    "Output Data Types",
    "Output Formats",
    "Context ID",
    "aicore_time(us)",
    "aic_total_cycles",
    "aic_mac_time(us)",
    "aic_mac_ratio",
    "aic_scalar_time(us)",
    "aic_scalar_ratio",
    "aic_mte1_time(us)",
    "aic_mte1_ratio",
    "aic_mte2_time(us)",
    "aic_mte2_ratio",
    "aic_fixpipe_time(us)",
    "aic_fixpipe_ratio",
    "aic_icache_miss_rate",
    "aiv_time(us)",
    "aiv_total_cycles",
    "aiv_vec_time(us)",
    "aiv_vec_ratio",
    "aiv_scalar_time(us)",
    "aiv_scalar_ratio",
    "aiv_mte2_time(us)",
    "aiv_mte2_ratio",
    "aiv_mte3_time(us)",
    "aiv_mte3_ratio",
    "aiv_icache_miss_rate",
    "cube_utilization(%)",
]
MEMORY_HEADER = [
    "Component",
    "Timestamp(us)",
    "Total Allocated(MB)",
    "Total Reserved(MB)",
    "Total Active(MB)",
    "Stream Ptr",
    "Device Type",
]
API_STAT_HEADER = [
    "Device_id",
    "Level",
    "API Name",
    "Time(us)",
    "Count",
    "Avg(us)",
    "Min(us)",
    "Max(us)",
    "Variance",
]
OP_DETAILS_HEADER = [
    "Name",
    "Input Shapes",
    "Call Stack",
    "Host Self Duration(us)",
    "Host Total Duration(us)",
    "Device Self Duration(us)",
    "Device Total Duration(us)",
    "Device Self Duration With AICore(us)",
    "Device Total Duration With AICore(us)",
]

DL_MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
DL_SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def group_hash(name: str) -> str:
    """HCCL group id as torch_npu prints it: two 32-bit polynomial hashes (29, 131), high and low word.

    Reproduces the sample: GROUP_NAME -> 18294791067709168601.
    """
    h1 = h2 = 0
    for ch in name:
        h1 = (h1 * 29 + ord(ch)) & 0xFFFFFFFF
        h2 = (h2 * 131 + ord(ch)) & 0xFFFFFFFF
    return str((h1 << 32) | h2)


GROUP_HASH = group_hash(GROUP_NAME)
P2P_HASH = group_hash(P2P_GROUP_NAME)


# ------------------------------------------------------------------------------------------ op catalog
class _Shapes:
    """Model dimensions; `misaligned` switches to the not-256-aligned sizes of the misaligned-shape plant."""

    def __init__(self, hidden: int = 4096, ffn: int = 11008) -> None:
        self.B, self.S, self.N = 4, 2048, 32
        self.H, self.F = hidden, ffn
        self.D = hidden // self.N
        self.T = self.B * self.S
        self.V = 151552

    def matmul_io(self, key: str) -> tuple[int, int]:
        """(in, out) features of the weight behind a matmul key."""
        base = key.split("_")[0] if key not in ("lm_head", "lm_head_dx", "lm_head_dw") else "lm_head"
        return {
            "qkv": (self.H, 3 * self.H),
            "proj": (self.H, self.H),
            "up": (self.H, 2 * self.F),
            "down": (self.F, self.H),
            "lm_head": (self.H, self.V),
        }[base]


def _q(shapes: Iterable[Iterable[int]]) -> str:
    """Shapes as kernel_details writes them: literal quotes around `a,b;c,d`."""
    return '"' + ";".join(",".join(str(d) for d in s) for s in shapes) + '"'


@functools.lru_cache(maxsize=1024)
def _op_info(key: str, hidden: int, ffn: int, fp32: bool, gelu: bool) -> dict[str, Any]:
    """aten name, kernel name, Type, core, shapes and dtypes of a logical op (cached: callers only read)."""
    sh = _Shapes(hidden, ffn)
    bf = "FLOAT" if fp32 else "DT_BF16"
    B, S, N, D, H, F, T, V = sh.B, sh.S, sh.N, sh.D, sh.H, sh.F, sh.T, sh.V
    bsh = (B, S, H)
    mm_name = "aclnnMatmul_MatMulCommon_MatMulV2"

    def info(
        aten: str, name: str, typ: str, core: str, ins: list, in_dt: list[str], outs: list, out_dt: list[str]
    ) -> dict[str, Any]:
        return {
            "aten": aten,
            "name": name,
            "type": typ,
            "core": core,
            "in": _q(ins),
            "in_dt": ";".join(in_dt),
            "in_fmt": ";".join("ND" for _ in ins),
            "out": _q(outs),
            "out_dt": ";".join(out_dt),
            "out_fmt": ";".join("ND" for _ in outs),
            "dims": [list(s) for s in ins],
            "types": [
                "float" if d == "FLOAT" else "c10::BFloat16" if d == "DT_BF16" else "long" for d in in_dt
            ],
        }

    if key in ("qkv", "proj", "up", "down", "lm_head"):
        i, o = sh.matmul_io(key)
        if key == "up" and gelu:
            o = F
        return info(
            "aten::matmul", mm_name, "MatMulV2", "AI_CORE", [(T, i), (i, o)], [bf, bf], [(T, o)], [bf]
        )
    if key.endswith("_dx") or key.endswith("_dw"):
        i, o = sh.matmul_io(key)
        if key.startswith("up") and gelu:
            o = F
        if key.endswith("_dx"):  # dX = dY @ W^T
            return info(
                "aten::mm", mm_name, "MatMulV2", "AI_CORE", [(T, o), (i, o)], [bf, bf], [(T, i)], [bf]
            )
        return info("aten::mm", mm_name, "MatMulV2", "AI_CORE", [(T, i), (T, o)], [bf, bf], [(i, o)], [bf])
    bnsd = (B, N, S, D)
    table: dict[str, tuple] = {
        "embed": (
            "aten::embedding",
            "aclnnEmbedding_GatherV2_GatherV2",
            "GatherV2",
            "AI_VECTOR_CORE",
            [(V, H), (B, S)],
            ["DT_BF16", "INT64"],
            [bsh],
            ["DT_BF16"],
        ),
        "norm": (
            "npu::npu_rms_norm",
            "aclnnRmsNorm_RmsNorm_RmsNorm",
            "RmsNorm",
            "AI_VECTOR_CORE",
            [bsh, (H,)],
            ["DT_BF16", "DT_BF16"],
            [bsh, (B, S, 1)],
            ["DT_BF16", "FLOAT"],
        ),
        "attn": (
            "npu::npu_fusion_attention",
            "aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore",
            "FlashAttentionScore",
            "MIX_AIC",
            [bnsd, bnsd, bnsd],
            [bf, bf, bf],
            [bnsd, (B, N, S, 8), (B, N, S, 8)],
            [bf, "FLOAT", "FLOAT"],
        ),
        "attn_grad": (
            "npu::npu_fusion_attention_grad",
            "aclnnFlashAttentionScoreGrad_FlashAttentionScoreGrad_FlashAttentionScoreGrad",
            "FlashAttentionScoreGrad",
            "MIX_AIC",
            [bnsd, bnsd, bnsd, bnsd],
            [bf, bf, bf, bf],
            [bnsd, bnsd, bnsd],
            [bf, bf, bf],
        ),
        "add_norm": (
            "npu::npu_add_rms_norm",
            "aclnnAddRmsNorm_AddRmsNorm_AddRmsNorm",
            "AddRmsNorm",
            "AI_VECTOR_CORE",
            [bsh, bsh, (H,)],
            ["DT_BF16"] * 3,
            [bsh, (B, S, 1), bsh],
            ["DT_BF16", "FLOAT", "DT_BF16"],
        ),
        "add": (
            "aten::add",
            "aclnnAdd_AddAiCore_Add",
            "Add",
            "AI_VECTOR_CORE",
            [bsh, bsh],
            ["DT_BF16"] * 2,
            [bsh],
            ["DT_BF16"],
        ),
        "layer_norm": (
            "aten::layer_norm",
            "aclnnLayerNorm_LayerNormV4_LayerNormV4",
            "LayerNormV4",
            "AI_VECTOR_CORE",
            [bsh, (H,), (H,)],
            ["DT_BF16"] * 3,
            [bsh],
            ["DT_BF16"],
        ),
        "act": (
            "npu::npu_swiglu",
            "aclnnSwiGlu_SwiGlu_SwiGlu",
            "SwiGlu",
            "AI_VECTOR_CORE",
            [(T, 2 * F)],
            ["DT_BF16"],
            [(T, F)],
            ["DT_BF16"],
        ),
        "gelu": (
            "aten::gelu",
            "aclnnGelu_GeluAiCore_Gelu",
            "Gelu",
            "AI_VECTOR_CORE",
            [(T, F)],
            ["DT_BF16"],
            [(T, F)],
            ["DT_BF16"],
        ),
        "act_grad": (
            "npu::npu_swiglu_backward",
            "aclnnSwiGluGrad_SwiGluGrad_SwiGluGrad",
            "SwiGluGrad",
            "AI_VECTOR_CORE",
            [(T, F), (T, 2 * F)],
            ["DT_BF16"] * 2,
            [(T, 2 * F)],
            ["DT_BF16"],
        ),
        "gelu_grad": (
            "aten::gelu_backward",
            "aclnnGeluBackward_GeluGrad_GeluGrad",
            "GeluGrad",
            "AI_VECTOR_CORE",
            [(T, F), (T, F)],
            ["DT_BF16"] * 2,
            [(T, F)],
            ["DT_BF16"],
        ),
        "norm_grad": (
            "npu::npu_rms_norm_backward",
            "aclnnRmsNormGrad_RmsNormGrad_RmsNormGrad",
            "RmsNormGrad",
            "AI_VECTOR_CORE",
            [bsh, bsh, (B, S, 1), (H,)],
            ["DT_BF16", "DT_BF16", "FLOAT", "DT_BF16"],
            [bsh, (H,)],
            ["DT_BF16", "FLOAT"],
        ),
        "layer_norm_grad": (
            "aten::native_layer_norm_backward",
            "aclnnLayerNormBackward_LayerNormBetaGammaBackpropV2_LayerNormBetaGammaBackpropV2",
            "LayerNormBetaGammaBackpropV2",
            "AI_VECTOR_CORE",
            [bsh, bsh, (H,)],
            ["DT_BF16"] * 3,
            [bsh, (H,), (H,)],
            ["DT_BF16", "FLOAT", "FLOAT"],
        ),
        "loss": (
            "npu::npu_cross_entropy_loss",
            "aclnnCrossEntropyLoss_CrossEntropyLoss_CrossEntropyLoss",
            "CrossEntropyLoss",
            "AI_VECTOR_CORE",
            [(T, V), (T,)],
            ["DT_BF16", "INT64"],
            [(1,), (T, V)],
            ["FLOAT", "DT_BF16"],
        ),
        "loss_grad": (
            "npu::npu_cross_entropy_loss_backward",
            "aclnnCrossEntropyLossGrad_CrossEntropyLossGrad_CrossEntropyLossGrad",
            "CrossEntropyLossGrad",
            "AI_VECTOR_CORE",
            [(1,), (T, V), (T,)],
            ["FLOAT", "DT_BF16", "INT64"],
            [(T, V)],
            ["DT_BF16"],
        ),
        "embed_grad": (
            "aten::embedding_dense_backward",
            "aclnnEmbeddingDenseBackward_EmbeddingDenseGrad_EmbeddingDenseGrad",
            "EmbeddingDenseGrad",
            "AI_VECTOR_CORE",
            [bsh, (B, S)],
            ["DT_BF16", "INT64"],
            [(V, H)],
            ["FLOAT"],
        ),
        "adamw": (
            "npu::npu_apply_adam_w",
            "aclnnApplyAdamWV2_ApplyAdamWV2_ApplyAdamWV2",
            "ApplyAdamWV2",
            "AI_VECTOR_CORE",
            [(67108864,)] * 4,
            ["FLOAT", "FLOAT", "FLOAT", "DT_BF16"],
            [(67108864,)],
            ["FLOAT"],
        ),
        "tiny": (
            "aten::fill_",
            "aclnnInplaceFillScalar_FillV2_FillV2",
            "Fills",
            "AI_VECTOR_CORE",
            [(4096,)],
            ["DT_BF16"],
            [(4096,)],
            ["DT_BF16"],
        ),
        "aicpu": (
            "aten::index_put_",
            "aclnnIndexPutImpl_IndexPut",
            "IndexPut",
            "AI_CPU",
            [(1000,), (1000,)],
            ["INT64", "DOUBLE"],
            [(1000,)],
            ["DOUBLE"],
        ),
    }
    table["add_norm_grad"] = table["norm_grad"]  # AddRmsNorm's backward is an RmsNormGrad + the residual
    return info(*table[key])


# PMU ratios (aic: mac, scalar, mte1, mte2, fixpipe; aiv: vec, scalar, mte2, mte3) of a clean kernel; each
# has a bound pipe >= 0.8 (rules doc §5.2 no-bound / AI-core performance).
_RATIOS: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {
    "AI_CORE": ((0.86, 0.06, 0.32, 0.58, 0.14), (0, 0, 0, 0)),
    "MIX_AIC": ((0.62, 0.08, 0.30, 0.84, 0.30), (0.78, 0.05, 0.20, 0.15)),
    "MIX_AIC_GRAD": ((0.55, 0.08, 0.28, 0.82, 0.76), (0.60, 0.05, 0.25, 0.20)),
    "AI_VECTOR_CORE": ((0, 0, 0, 0, 0), (0.35, 0.05, 0.83, 0.40)),
    "AI_CPU": ((0, 0, 0, 0, 0), (0, 0, 0, 0)),
}


# ------------------------------------------------------------------------------------------- programs
class _RankState:
    """Per-rank generation state: rng, systematic speed, running ids."""

    def __init__(self, seed: int, rank: int) -> None:
        self.rng = random.Random(f"{seed}:ascend:{rank}")
        self.speed = 1.0 + self.rng.uniform(-0.004, 0.004)
        self.comm_seq = 100  # running HCCL op number, as in `hcom_allReduce__100_0_1`
        self.comm_index = 0  # index of the AllReduce within the current step


def _hccl_collective(
    name: str,
    rank: int,
    n: int,
    chunk: int,
    packet: int,
    gbps: float,
    rng: random.Random,
    misalign: int | None,
    rdma_ms: float | None,
) -> Collective:
    """An AllReduce on the HCCS mesh: one plane per peer moves `chunk` bytes in packets of `packet` bytes,
    then an on-chip Reduce_Inline; `transit_ns` is the time from the first transfer to the end.

    Beyond one node (n > NODE_RANKS) the mesh is the rank's node and one more plane sends `chunk` bytes over
    RDMA to the same device of the next node (a ring across nodes, as HCCL's hierarchical algorithms do):
    each rank has a fixed number of links whatever n, as on a real cluster, where a full mesh of n ranks
    would write O(n) planes per collective on every rank."""
    planes: list[list[dict[str, Any]]] = []
    bw = gbps * rng.uniform(0.985, 1.015)
    node = rank // NODE_RANKS * NODE_RANKS
    peers = [p for p in range(n) if p != rank and (n <= NODE_RANKS or node <= p < node + NODE_RANKS)]
    for i, peer in enumerate(peers):
        sizes = [packet] * (chunk // packet) + ([chunk % packet] if chunk % packet else [])
        if misalign and i == 0:
            sizes[0] = misalign
        t, tasks = 0, []
        for sz in sizes:
            d = max(int(sz / bw), 1 * US)
            tasks.append(
                {
                    "name": "Memcpy",
                    "type": "Memcpy",
                    "rel": t,
                    "dur": d,
                    "size": sz,
                    "src": rank,
                    "dst": peer,
                    "transport": "SDMA",
                    "link": "HCCS",
                }
            )
            t += d + 500
        planes.append(tasks)
    if n > NODE_RANKS:
        sz = chunk
        planes.append([{"name": "RDMASend", "type": "RDMASend", "rel": 0, "dur": max(int(sz / RDMA_GBPS), 1 * US),
                        "size": sz, "src": rank, "dst": (rank + NODE_RANKS) % n, "transport": "RDMA",
                        "link": "ROCE"}])
    if rdma_ms:
        planes.append(
            [
                {
                    "name": "RDMASend",
                    "type": "RDMASend",
                    "rel": 0,
                    "dur": int(rdma_ms * MS),
                    "size": 16 << 20,
                    "src": rank,
                    "dst": rank + n,
                    "transport": "RDMA",
                    "link": "ROCE",
                }
            ]
        )
    xfer = max((p[-1]["rel"] + p[-1]["dur"] for p in planes if p), default=0)
    red = max(int(chunk / REDUCE_GBPS), 1 * US)
    reduce = {
        "name": "Reduce_Inline",
        "type": "Reduce Inline",
        "rel": xfer,
        "dur": red,
        "size": chunk,
        "src": rank,
        "dst": rank,
        "transport": "LOCAL",
        "link": "ON_CHIP",
    }
    meta = {
        "planes": planes,
        "reduce": reduce,
        "group": GROUP_HASH,
        "count": chunk * max(n, 1) // 2,
        "kind": "collective",
    }
    return Collective(name, "allreduce", chunk * max(len(planes) - bool(rdma_ms), 1), xfer + red, meta=meta)


def _send(name: str, rank: int, n: int, dur_ns: int) -> Collective:
    """A p2p send to the next pipeline stage (a rank outside the profile): not synchronized with peers."""
    size = int(dur_ns * SDMA_GBPS) // 512 * 512
    task = {
        "name": "Memcpy",
        "type": "Memcpy",
        "rel": 0,
        "dur": dur_ns,
        "size": size,
        "src": rank,
        "dst": rank + n,
        "transport": "SDMA",
        "link": "HCCS",
    }
    meta = {"planes": [[task]], "reduce": None, "group": P2P_HASH, "count": size // 2, "kind": "p2p"}
    return Collective(name, "send", size, dur_ns, synced=False, meta=meta)


def _step_program(
    sc: Scenario, st: _RankState, rank: int, step: int, resolved: list[ResolvedPlant], layers: int
) -> Builder:
    """One rank's step: dataloader, forward, backward with gradient buckets, optimizer, loss.item()."""
    b = Builder(rank, step, st.rng, resolved, st.speed)
    rng, n = st.rng, sc.ranks
    fq = b.first("freq-throttle")
    if fq and fq.params.get("slowdown"):
        b.freq_factor = RATED_MHZ / float(fq.params["mhz"])
    aff = b.first("affinity-api")
    apis = set(aff.params["apis"]) if aff else set()
    gelu, add_ln, unfused_adam = "fast_gelu" in apis, "npu_add_layer_norm" in apis, "NpuFusedAdamW" in apis
    aicpu = b.first("aicpu-op")
    hb = b.first("host-bound")
    tiny = int(hb.params["extra_tiny_per_layer"]) if hb else 0
    sp = b.first("small-packet")
    packet = int(sp.params["packet_bytes"]) if sp else CHUNK_BYTES
    mis = b.first("byte-misalignment")
    link = b.first("slow-link")
    contention = b.first("bandwidth-contention")
    exposed = b.first("exposed-comm-tail") is not None
    retrans = b.first("retransmission")
    meta = {"gelu": gelu}

    def launch(key: str, kind: str, us: float, layer: int, phase: str) -> None:
        b.launch(key, kind, us, layer, phase, meta=meta, host_us=35.0 if phase == "fwd" else 45.0)

    dl = b.first("slow-dataloader")
    if dl:
        b.call(DL_SINGLE, "dataloader", int(float(dl.params["dur_ms"]) * MS))
    else:
        b.call(DL_MULTI, "dataloader", int(2 * MS * rng.uniform(0.95, 1.05)))
    launch(*EMBED_FWD, -1, "fwd")

    syncbn = (
        b.spread(int(b.first("sync-batchnorm").params["count"]), layers)
        if b.first("sync-batchnorm")
        else [0] * layers
    )
    compile_p = b.first("op-compile")
    compiles = b.spread(int(compile_p.params["count"]), layers) if compile_p else [0] * layers
    gc = b.first("gc-pause")
    gcs = b.spread(int(gc.params["count"]), layers) if gc else [0] * layers
    mem = b.first("memory-ops")
    for layer in range(layers):
        for key, kind, us in FWD_LAYER:
            if key == "add_norm" and add_ln:
                launch("add", "vector", us * 0.4, layer, "fwd")
                launch("layer_norm", "vector", us * 0.8, layer, "fwd")
            elif key == "act" and gelu:
                launch("gelu", "vector", us, layer, "fwd")
            else:
                launch(key, kind, us, layer, "fwd")
            if key == "act" and aicpu:
                for _ in range(int(aicpu.params["per_layer"])):
                    b.launch("aicpu", "aicpu", float(aicpu.params["dur_us"]), layer, "fwd", meta=meta)
        for _ in range(tiny):
            launch("tiny", "tiny", 8.0, layer, "fwd")
        for _ in range(syncbn[layer]):
            b.call("SyncBatchNorm", "syncbn", 30 * US)
        for _ in range(compiles[layer]):
            b.call("AscendCL@aclopCompileAndExecute", "compile", int(float(compile_p.params["dur_us"]) * US))
        if layer == 0 and mem:
            for _ in range(int(mem.params["count"])):
                b.call("AscendCL@aclMallocMemInner", "malloc", int(float(mem.params["dur_ms"]) * MS))
        for _ in range(gcs[layer]):
            b.call("GC", "gc", int(float(gc.params["dur_ms"]) * MS))
    for key, kind, us in HEAD_FWD:
        launch(key, kind, us, layers, "fwd")

    deferred: list[str] = []

    def bucket(label: str) -> None:
        if n < 2:
            return
        if hb and label != "layer0":
            # A host-bound model is small: its gradients fit one DDP bucket, sent at the end of backward.
            return
        if exposed:
            deferred.append(label)
        else:
            emit_bucket(label, in_backward=True)

    def emit_bucket(label: str, in_backward: bool) -> None:
        gbps = SDMA_GBPS
        if link:
            gbps = float(link.params["bandwidth_gbps"])
        if contention and in_backward:
            gbps = min(gbps, float(contention.params["bandwidth_gbps"]))
        chunk = CHUNK_BYTES // 2 if hb else CHUNK_BYTES  # 16 MiB: still a large packet
        per_op = min(packet, chunk)
        for i in range(math.ceil(chunk / per_op)):
            rdma = None
            if retrans and st.comm_index == int(retrans.params["op_index"]):
                rdma = float(retrans.params["transit_ms"])
            name = f"hcom_allReduce__{st.comm_seq}_0_1"
            st.comm_seq += 1
            st.comm_index += 1
            misalign = int(mis.params["size_bytes"]) if mis else None
            coll = _hccl_collective(name, rank, n, per_op, per_op, gbps, rng, misalign, rdma)
            coll.meta["bucket"] = label
            coll.meta["part"] = i
            b.collective(coll)

    st.comm_index = 0
    for key, kind, us in HEAD_BWD:
        launch(key, kind, us, layers, "bwd")
    bucket("head")
    for layer in reversed(range(layers)):
        for key, kind, us in BWD_LAYER:
            if key == "act_grad" and gelu:
                key = "gelu_grad"
            if key == "add_norm_grad" and add_ln:
                key = "layer_norm_grad"
            launch(key, kind, us, layer, "bwd")
        for _ in range(tiny):
            launch("tiny", "tiny", 8.0, layer, "bwd")
        bucket(f"layer{layer}")
    launch(*EMBED_BWD, -1, "bwd")
    for label in deferred:
        emit_bucket(label, in_backward=False)
    b.wait_comm()

    opt_name = "Optimizer.step#AdamW.step" if unfused_adam else "Optimizer.step#NpuFusedAdamW.step"
    b.span(opt_name, "optimizer", True)
    for key, kind, us in OPTIMIZER:
        launch(key, kind, us, -1, "opt")
    b.span(opt_name, "optimizer", False)

    for p in b.of("slow-rank"):
        if p.params.get("dimension") == "communication":
            extra = int(float(p.params["extra_comm_ms"]) * MS)
            for _ in range(4):
                b.collective(_send(f"hcom_send__{st.comm_seq}_1_1", rank, n, extra // 4))
                st.comm_seq += 1
    b.wait_comm()
    b.step_sync("aten::item")
    for p in b.of("slow-rank"):
        if p.params.get("dimension") == "free":
            b.idle(int(float(p.params["tail_ms"]) * MS))
    return b


def _check_plants(sc: Scenario, resolved: list[ResolvedPlant], drop_op_state: bool) -> None:
    every = set(range(sc.ranks))
    for p in resolved:
        if p.check == "small-packet" and set(p.ranks) != every:
            raise ValueError(
                "small-packet changes the number of collectives, so it must be planted on all "
                "ranks (collectives are matched across ranks)"
            )
        if p.check == "dynamic-shape" and drop_op_state:
            raise ValueError("dynamic-shape needs the OP State column: do not combine it with drop_op_state")


def _simulate(sc: Scenario, layers: int) -> tuple[list[list[StepRec]], list[ResolvedPlant]]:
    resolved = resolve(sc)
    states = [_RankState(sc.seed, r) for r in range(sc.ranks)]
    step_ids = list(range(1, sc.steps + 1))
    programs = [
        [_step_program(sc, states[r], r, s, resolved, layers).ins for s in step_ids] for r in range(sc.ranks)
    ]
    return simulate(programs, step_ids, T0_NS, TIMING), resolved


# -------------------------------------------------------------------------------------------- writers
def _plant_at(resolved: list[ResolvedPlant], check: str, rank: int, step: int) -> ResolvedPlant | None:
    for p in resolved:
        if p.check == check and p.hits(rank, step):
            return p
    return None


def _mhz(resolved: list[ResolvedPlant], rank: int, step: int) -> int:
    fq = _plant_at(resolved, "freq-throttle", rank, step)
    return int(fq.params["mhz"]) if fq else RATED_MHZ


class _RankWriter:
    """Turns one rank's simulated steps into the torch_npu files."""

    def __init__(
        self,
        sc: Scenario,
        rank: int,
        steps: list[StepRec],
        resolved: list[ResolvedPlant],
        block_num_header: bool,
        drop_op_state: bool,
    ) -> None:
        self.sc, self.rank, self.steps, self.resolved = sc, rank, steps, resolved
        self.block_num_header, self.drop_op_state = block_num_header, drop_op_state
        self.dev = rank % 8
        self.pid = 40000 + rank
        self.cann_pid = self.pid * 100 + 2
        self.hw_pid = 800 + rank
        self.comm_pid = 900 + rank
        self.ov_pid = self.pid * 100 + 11
        self.freq_pid = 700 + rank
        self.conn = 0
        self.task_id = 1000
        self.seq = 0
        self.kernel_rows: list[dict[str, Any]] = []  # (kernel rec, step, task id, wait)
        self.cann: list[tuple[str, int]] = []  # (name, dur_ns) for api_statistic.csv
        self.op_details: list[list[Any]] = []
        self.overlap: list[dict[str, int]] = []

    # -------------------------------------------------------------------- trace_view.json
    def _x(
        self,
        name: str,
        pid: int,
        tid: int,
        ts: int,
        dur: int,
        args: dict | None = None,
        cat: str | None = None,
    ) -> dict[str, Any]:
        ev: dict[str, Any] = {
            "ph": "X",
            "name": name,
            "pid": pid,
            "tid": tid,
            "ts": us_str(ts),
            "dur": us_num(dur),
        }
        if cat is not None:
            ev["cat"] = cat
        ev["args"] = args if args is not None else {}
        return ev

    def _acl(self, name: str, ts: int, dur: int, mode: str, level: str = "acl") -> dict[str, Any]:
        api = name.split("@", 1)[1]
        self.cann.append((name, dur))
        return self._x(
            name,
            self.cann_pid,
            self.pid,
            ts,
            dur,
            {"Thread Id": self.pid, "Mode": mode, "level": level, "id": api},
        )

    def _meta(self, planes: int, p2p: bool) -> list[dict[str, Any]]:
        def m(name: str, pid: int, tid: int, args: dict) -> dict[str, Any]:
            return {"ph": "M", "name": name, "pid": pid, "tid": tid, "args": args}

        ev = [
            m("process_name", self.pid, 0, {"name": "Python"}),
            m("process_labels", self.pid, 0, {"labels": "CPU"}),
            m("process_sort_index", self.pid, 0, {"sort_index": 0}),
            m("thread_name", self.pid, self.pid, {"name": f"Thread {self.pid}"}),
            m("process_name", self.cann_pid, 0, {"name": "CANN"}),
            m("process_labels", self.cann_pid, 0, {"labels": "CPU"}),
            m("process_sort_index", self.cann_pid, 0, {"sort_index": 2}),
            m("thread_name", self.cann_pid, self.pid, {"name": f"Thread {self.pid}"}),
            m("process_name", self.hw_pid, 0, {"name": "Ascend Hardware"}),
            m("process_labels", self.hw_pid, 0, {"labels": f"NPU {self.dev}"}),
            m("process_sort_index", self.hw_pid, 0, {"sort_index": 8}),
            m("thread_name", self.hw_pid, 2, {"name": "Stream 2"}),
            m("process_name", self.comm_pid, 0, {"name": "Communication"}),
            m("process_labels", self.comm_pid, 0, {"labels": f"NPU {self.dev}"}),
            m("process_sort_index", self.comm_pid, 0, {"sort_index": 9}),
            m("thread_name", self.comm_pid, 0, {"name": f"Group {GROUP_HASH} Communication"}),
        ]
        ev += [m("thread_name", self.comm_pid, i + 1, {"name": f"Plane {i}"}) for i in range(planes)]
        if p2p:
            ev += [
                m("thread_name", self.comm_pid, 50, {"name": f"Group {P2P_HASH} Communication"}),
                m("thread_name", self.comm_pid, 51, {"name": "Plane 0"}),
            ]
        ev += [
            m("process_name", self.ov_pid, 0, {"name": "Overlap Analysis"}),
            m("process_labels", self.ov_pid, 0, {"labels": f"NPU {self.dev}"}),
            m("process_sort_index", self.ov_pid, 0, {"sort_index": 11}),
        ]
        ev += [
            m("thread_name", self.ov_pid, i, {"name": nm})
            for i, nm in enumerate(("Computing", "Communication", "Communication(Not Overlapped)", "Free"))
        ]
        ev += [
            m("process_name", self.freq_pid, 0, {"name": "AI Core Freq"}),
            m("process_labels", self.freq_pid, 0, {"labels": f"NPU {self.dev}"}),
            m("process_sort_index", self.freq_pid, 0, {"sort_index": 12}),
        ]
        return ev

    def _launch_events(self, h: HostRec, k: KernelRec, step: int) -> list[dict[str, Any]]:
        sh = self._shapes(step)
        info = _op_info(k.op.key, sh.H, sh.F, self._fp32(step, k), bool(k.op.meta.get("gelu")))
        self.conn += 1
        self.task_id = self.task_id + 1 if self.task_id < 65535 else 1
        cid = self.conn
        seq = self.seq if k.op.phase == "fwd" else max(self.seq - 1, 0)
        if k.op.phase == "fwd":
            self.seq += 1
        ev = [
            self._x(
                info["aten"],
                self.pid,
                self.pid,
                h.ts,
                h.dur,
                {
                    "Sequence number": seq,
                    "Fwd thread id": 0,
                    "Input Dims": info["dims"],
                    "Input type": info["types"],
                },
                cat="cpu_op",
            ),
            self._x(
                "Node@launch",
                self.cann_pid,
                self.pid,
                k.api_ts,
                k.api_dur,
                {"Thread Id": self.pid, "Mode": "Node", "level": "node", "id": "launch"},
            ),
            self._x(
                info["name"],
                self.hw_pid,
                2,
                k.ts,
                k.dur,
                {
                    "Model Id": 4294967295,
                    "Task Type": info["core"],
                    "Physic Stream Id": 2,
                    "Task Id": self.task_id,
                    "Batch Id": 0,
                    "Subtask Id": 4294967295,
                    "connection_id": cid,
                },
            ),
            {
                "ph": "s",
                "bp": "e",
                "name": "async_npu",
                "id": cid,
                "pid": self.pid,
                "tid": self.pid,
                "ts": us_str(k.api_ts),
                "cat": "async_npu",
            },
            {
                "ph": "f",
                "bp": "e",
                "name": "async_npu",
                "id": cid,
                "pid": self.hw_pid,
                "tid": 2,
                "ts": us_str(k.ts),
                "cat": "async_npu",
            },
        ]
        self.cann.append(("Node@launch", k.api_dur))
        if k.sync_ts >= 0:
            ev.append(self._acl("AscendCL@aclrtSynchronizeStream", k.sync_ts, k.sync_dur, "ACL_RTS"))
        self.kernel_rows.append({"k": k, "step": step, "task": self.task_id, "info": info})
        self.op_details.append(
            [
                info["aten"],
                info["in"],
                "",
                us_num(h.dur - k.api_dur),
                us_num(h.dur),
                us_num(k.dur),
                us_num(k.dur),
                us_num(k.dur if info["core"] != "AI_CPU" else 0),
                us_num(k.dur if info["core"] != "AI_CPU" else 0),
            ]
        )
        return ev

    def _shapes(self, step: int) -> _Shapes:
        p = _plant_at(self.resolved, "misaligned-shape", self.rank, step)
        return _Shapes(int(p.params["hidden"]), int(p.params["ffn"])) if p else _Shapes()

    def _fp32(self, step: int, k: KernelRec) -> bool:
        return (
            k.op.kind in ("matmul", "attention")
            and _plant_at(self.resolved, "fp32-compute", self.rank, step) is not None
        )

    def _comm_events(self, c: CommRec, tid0: int) -> list[dict[str, Any]]:
        meta = c.coll.meta
        self.conn += 1
        op = self._x(
            c.coll.name,
            self.comm_pid,
            tid0,
            c.ts,
            c.end - c.ts,
            {
                "connection_id": self.conn,
                "model id": 4294967295,
                "data_type": "BF16",
                "alg_type": "MESH-RING-NA-NA" if meta["kind"] == "collective" else "NA",
                "count": meta["count"],
            },
        )
        ev = [op]
        task_id = 0

        def task(t: dict[str, Any], ts: int, tid: int) -> dict[str, Any]:
            nonlocal task_id
            task_id += 1
            args: dict[str, Any] = {"notify id": 0}
            if t["type"] == "Memcpy":
                args["duration estimated(us)"] = round(t["dur"] / 1000 * 0.92, 3)
            args.update(
                {
                    "stream id": 5,
                    "task id": task_id,
                    "context id": 0,
                    "task type": t["type"],
                    "src rank": t["src"],
                    "dst rank": t["dst"],
                    "transport type": t["transport"],
                    "size(Byte)": t["size"],
                    "data type": "BF16" if t["size"] else "INVALID_TYPE",
                    "link type": t["link"],
                    "bandwidth(GB/s)": round(t["size"] / t["dur"], 4) if t["size"] else 0,
                }
            )
            return self._x(t["name"], self.comm_pid, tid, ts, t["dur"], args)

        notify = {
            "name": "Notify_Wait",
            "type": "Notify Wait",
            "size": 0,
            "src": self.rank,
            "dst": self.rank,
            "transport": "LOCAL",
            "link": "ON_CHIP",
        }
        if c.xfer_ts > c.ts:
            ev.append(task({**notify, "dur": c.xfer_ts - c.ts}, c.ts, tid0 + 1))
        for i, plane in enumerate(meta["planes"]):
            for t in plane:
                ev.append(task(t, c.xfer_ts + t["rel"], tid0 + 1 + i))
        if meta["reduce"]:
            ev.append(task(meta["reduce"], c.xfer_ts + meta["reduce"]["rel"], tid0 + 1))
        tail = c.xfer_ts + c.transit
        if c.end > tail:
            ev.append(task({**notify, "dur": c.end - tail}, tail, tid0 + 1))
        return ev

    def _overlap(
        self, st: StepRec, compute: list[tuple[int, int]], comm: list[tuple[int, int]]
    ) -> tuple[list[dict[str, Any]], dict[str, int]]:
        first = min([s for s, _ in compute] + [s for s, _ in comm], default=st.end)
        window = [(first, st.end)]
        comp = clip(compute, first, st.end)
        com = clip(comm, first, st.end)
        comm_no = subtract(com, comp)
        free = subtract(window, union(comp + com))
        ev = []
        for tid, name, ivs in (
            (0, "Computing", comp),
            (1, "Communication", com),
            (2, "Communication(Not Overlapped)", comm_no),
            (3, "Free", free),
        ):
            ev += [self._x(name, self.ov_pid, tid, s, e - s) for s, e in ivs]
        sums = {
            "Computing": total(comp),
            "Communication": total(com),
            "CommNO": total(comm_no),
            "Free": total(free),
            "Stage": st.end - st.start,
            "Preparing": first - st.start,
        }
        return ev, sums

    def trace_events(self) -> list[dict[str, Any]]:
        planes = max(
            (
                len(c.coll.meta["planes"])
                for s in self.steps
                for c in s.comms
                if c.coll.meta["kind"] == "collective"
            ),
            default=0,
        )
        p2p = any(c.coll.meta["kind"] == "p2p" for s in self.steps for c in s.comms)
        events = self._meta(planes, p2p)
        for st in self.steps:
            events += self._step_events(st)
        return events

    def _step_events(self, st: StepRec) -> list[dict[str, Any]]:
        ev: list[dict[str, Any]] = []
        for h in st.host:
            ins = h.ins
            if isinstance(ins, Launch):
                assert h.kernel is not None
                ev += self._launch_events(h, h.kernel, st.step)
            elif isinstance(ins, Call):
                if ins.kind == "gc":
                    ev.append(self._x("GC", self.pid, self.pid, h.ts, h.dur, {}, cat="GC"))
                elif ins.kind in ("compile", "malloc"):
                    mode = "ACL_OP" if ins.kind == "compile" else "ACL_RTS"
                    ev.append(self._acl(ins.name, h.ts, h.dur, mode))
                else:
                    args = {} if ins.kind == "syncbn" else {"Sequence number": -1, "Fwd thread id": 0}
                    ev.append(self._x(ins.name, self.pid, self.pid, h.ts, h.dur, args, cat="cpu_op"))
            elif isinstance(ins, Collective):
                name = "c10d::allreduce_" if ins.kind == "allreduce" else "c10d::send"
                ev.append(
                    self._x(
                        name,
                        self.pid,
                        self.pid,
                        h.ts,
                        h.dur,
                        {"Sequence number": -1, "Fwd thread id": 0},
                        cat="cpu_op",
                    )
                )
            elif isinstance(ins, WaitComm):
                ev.append(self._acl("AscendCL@aclrtStreamWaitEvent", h.ts, h.dur, "ACL_RTS"))
            elif isinstance(ins, StepSync):
                ev.append(
                    self._x(
                        ins.name,
                        self.pid,
                        self.pid,
                        h.ts,
                        h.dur,
                        {"Sequence number": -1, "Fwd thread id": 0},
                        cat="cpu_op",
                    )
                )
                ev.append(
                    self._acl(
                        "AscendCL@aclrtSynchronizeStream", h.ts + 3 * US, max(h.dur - 5 * US, US), "ACL_RTS"
                    )
                )
        for sp in st.spans:
            ev.append(self._x(sp.name, self.pid, self.pid, sp.ts, sp.dur, {}, cat="cpu_op"))
        ev.append(
            self._x(
                f"ProfilerStep#{st.step}", self.pid, self.pid, st.start, st.end - st.start, {}, cat="cpu_op"
            )
        )
        for c in st.comms:
            ev += self._comm_events(c, 0 if c.coll.meta["kind"] == "collective" else 50)
        compute = union((k.ts, k.ts + k.dur) for k in st.kernels)
        comm = union((c.ts, c.end) for c in st.comms)
        ov, sums = self._overlap(st, compute, comm)
        ev += ov
        self.overlap.append({"step": st.step, **sums})
        ev.append(
            {
                "ph": "C",
                "name": "AI Core Freq",
                "pid": self.freq_pid,
                "tid": 0,
                "ts": us_str(st.start),
                "args": {"MHz": _mhz(self.resolved, self.rank, st.step)},
            }
        )
        return ev

    # -------------------------------------------------------------------- CSV files
    def kernel_details(self) -> tuple[list[str], list[list[Any]]]:
        header = list(KERNEL_HEADER)
        if self.drop_op_state:
            header.remove("OP State")
            header.remove("HF32 Eligible")
        if self.block_num_header:
            header = ["Device_id"] + [
                {"Block Dim": "Block Num", "Mix Block Dim": "Mix Block Num"}.get(h, h) for h in header
            ]
        rows = []
        prev_end = None
        for row in self.kernel_rows:
            k: KernelRec = row["k"]
            info, step = row["info"], row["step"]
            wait = 0 if prev_end is None else max(k.ts - prev_end, 0)
            prev_end = k.ts + k.dur
            vals = self._kernel_values(k, info, step, row["task"], wait)
            if self.drop_op_state:
                vals.pop("OP State")
                vals.pop("HF32 Eligible")
            if self.block_num_header:
                vals["Device_id"] = self.dev
                vals["Block Num"] = vals.pop("Block Dim")
                vals["Mix Block Num"] = vals.pop("Mix Block Dim")
            rows.append([vals[h] for h in header])
        return header, rows

    def _kernel_values(
        self, k: KernelRec, info: dict[str, Any], step: int, task: int, wait: int
    ) -> dict[str, Any]:
        core = info["core"]
        plant = lambda check: _plant_at(self.resolved, check, self.rank, step)  # noqa: E731
        dyn = plant("dynamic-shape") is not None
        bd = plant("block-dim-underuse")
        nb = plant("no-bound-op")
        mhz = _mhz(self.resolved, self.rank, step)
        if core == "AI_CORE":
            block, mix = (int(bd.params["cube_block_dim"]) if bd else AI_CORE_NUM), 0
        elif core == "MIX_AIC":
            block, mix = AI_CORE_NUM, AIV_NUM
        elif core == "AI_VECTOR_CORE":
            block, mix = (int(bd.params["vector_block_dim"]) if bd else AIV_NUM), 0
        else:
            block, mix = 0, 0
        key = "MIX_AIC_GRAD" if core == "MIX_AIC" and k.op.key.endswith("grad") else core
        aic, aiv = (list(x) for x in _RATIOS[key])
        if nb:
            top = max(aic + aiv)
            if top > 0:
                scale = float(nb.params["max_ratio"]) * 0.95 / top
                aic, aiv = [r * scale for r in aic], [r * scale for r in aiv]
        dur_us = k.dur / 1000
        aic_t = dur_us * 0.97 if core in ("AI_CORE", "MIX_AIC") else 0.0
        aiv_t = dur_us * 0.96 if core in ("AI_VECTOR_CORE", "MIX_AIC") else 0.0
        fp32 = self._fp32(step, k)
        v: dict[str, Any] = {
            "Step Id": step,
            "Model ID": 4294967295,
            "Task ID": task,
            "Stream ID": 2,
            "Name": info["name"],
            "Type": info["type"],
            "OP State": "dynamic" if dyn else "static",
            "Accelerator Core": core,
            "Start Time(us)": us_str(k.ts) + "\t",
            "Duration(us)": us_num(k.dur),
            "Wait Time(us)": us_num(wait),
            "Block Dim": block,
            "Mix Block Dim": mix,
            "HF32 Eligible": "YES" if fp32 else "NO",
            "Input Shapes": info["in"],
            "Input Data Types": info["in_dt"],
            "Input Formats": info["in_fmt"],
            "Output Shapes": info["out"],
            "Output Data Types": info["out_dt"],
            "Output Formats": info["out_fmt"],
            "Context ID": "N/A",
            "aicore_time(us)": round(aic_t, 3),
            "aic_total_cycles": round(aic_t * mhz),
        }
        for name, r in zip(("mac", "scalar", "mte1", "mte2", "fixpipe"), aic, strict=True):
            v[f"aic_{name}_time(us)"] = round(aic_t * r, 3)
            v[f"aic_{name}_ratio"] = round(r, 3)
        v["aic_icache_miss_rate"] = 0.001 if aic_t else 0
        v["aiv_time(us)"] = round(aiv_t, 3)
        v["aiv_total_cycles"] = round(aiv_t * mhz)
        for name, r in zip(("vec", "scalar", "mte2", "mte3"), aiv, strict=True):
            v[f"aiv_{name}_time(us)"] = round(aiv_t * r, 3)
            v[f"aiv_{name}_ratio"] = round(r, 3)
        v["aiv_icache_miss_rate"] = 0.001 if aiv_t else 0
        v["cube_utilization(%)"] = round(aic[0] * 100, 3) if aic_t else 0
        return v

    def op_statistic(self) -> list[list[Any]]:
        groups: dict[tuple[str, str], list[int]] = defaultdict(list)
        for row in self.kernel_rows:
            groups[(row["info"]["type"], row["info"]["core"])].append(row["k"].dur)
        grand = sum(sum(d) for d in groups.values()) or 1
        rows = []
        for (typ, core), durs in sorted(groups.items(), key=lambda kv: (-sum(kv[1]), kv[0])):
            tot = sum(durs)
            rows.append(
                [
                    self.dev,
                    typ,
                    core,
                    len(durs),
                    us_num(tot),
                    us_num(min(durs)),
                    round(tot / len(durs) / 1000, 3),
                    us_num(max(durs)),
                    round(tot / grand * 100, 3),
                ]
            )
        return rows

    def step_trace(self) -> list[list[Any]]:
        rows = []
        for o in self.overlap:
            bubble = 0
            rows.append(
                [
                    self.dev,
                    o["step"],
                    us_num(o["Computing"]),
                    us_num(o["CommNO"]),
                    us_num(o["Communication"] - o["CommNO"]),
                    us_num(o["Communication"]),
                    us_num(o["Free"]),
                    us_num(o["Stage"] - bubble),
                    us_num(bubble),
                    us_num(o["CommNO"] - bubble),
                    us_num(o["Preparing"]),
                ]
            )
        return rows

    # -------------------------------------------------------------------- communication
    def communication(self) -> tuple[dict[str, Any], dict[str, Any]]:
        comm: dict[str, Any] = {}
        matrix: dict[str, Any] = {}
        for st in self.steps:
            sec: dict[str, dict[str, Any]] = {"collective": {}, "p2p": {}}
            msec: dict[str, dict[str, Any]] = {"collective": {}, "p2p": {}}
            for c in st.comms:
                kind = c.coll.meta["kind"]
                key = f"{c.coll.name}@{c.coll.meta['group']}"
                sec[kind][key] = _op_info_json(c)
                msec[kind][key] = _op_matrix(c)
            for kind in ("collective", "p2p"):
                if sec[kind]:
                    sec[kind]["Total Op Info"] = _total_info(list(sec[kind].values()))
            comm[f"step{st.step}"] = sec
            matrix[f"step{st.step}"] = msec
        return comm, matrix

    # -------------------------------------------------------------------- optional files
    def memory_record(self) -> list[list[Any]]:
        rows = []
        alloc = 30000.0 + self.rank
        for st in self.steps:
            mid = st.start + (st.end - st.start) // 3
            for ts, a in ((st.start, alloc), (mid, alloc + 18000.0), (st.end - US, alloc + 2000.0)):
                rows.append(
                    ["PTA", us_str(ts), round(a, 3), 61440.0, round(a, 3), 187651237478400, f"NPU:{self.dev}"]
                )
        return rows

    def api_statistic(self) -> list[list[Any]]:
        groups: dict[str, list[int]] = defaultdict(list)
        for name, dur in self.cann:
            groups[name].append(dur)
        rows = []
        for name, durs in sorted(groups.items(), key=lambda kv: -sum(kv[1])):
            level, api = name.split("@", 1)
            mean = sum(durs) / len(durs)
            var = sum((d - mean) ** 2 for d in durs) / len(durs) / 1e6
            rows.append(
                [
                    self.dev,
                    level,
                    api,
                    us_num(sum(durs)),
                    len(durs),
                    round(mean / 1000, 3),
                    us_num(min(durs)),
                    us_num(max(durs)),
                    round(var, 3),
                ]
            )
        return rows


def _band(tasks: list[dict[str, Any]], large_mb: float, with_dist: bool) -> dict[str, Any]:
    if not tasks:
        return {
            "Transit Size(MB)": 0,
            "Transit Time(ms)": 0,
            "Bandwidth(GB/s)": 0,
            "Large Packet Ratio": 0,
            "Size Distribution": {},
        }
    size = sum(t["size"] for t in tasks) / 1e6
    tm = sum(t["dur"] for t in tasks) / 1e6
    dist: dict[str, list[Any]] = {}
    if with_dist:
        for t in tasks:
            k = repr(round(t["size"] / 1e6, 6))
            cnt, ms = dist.get(k, [0, 0.0])
            dist[k] = [cnt + 1, round(ms + t["dur"] / 1e6, 6)]
    large = sum(1 for t in tasks if t["size"] / 1e6 >= large_mb) / len(tasks)
    return {
        "Transit Size(MB)": round(size, 6),
        "Transit Time(ms)": round(tm, 6),
        "Bandwidth(GB/s)": round(size / tm, 4) if tm else 0,
        "Large Packet Ratio": round(large, 4),
        "Size Distribution": dist,
    }


def _op_info_json(c: CommRec) -> dict[str, Any]:
    tasks = [t for plane in c.coll.meta["planes"] for t in plane]
    hccs = [t for t in tasks if t["link"] == "HCCS"]
    rdma = [t for t in tasks if t["transport"] == "RDMA"]
    elapse = c.end - c.ts
    transit = c.transit
    wait = elapse - transit
    sync = c.xfer_ts - c.ts
    info = {
        "Communication Time Info": {
            "Start Timestamp(us)": round(c.ts / 1000, 3),
            "Elapse Time(ms)": round(elapse / 1e6, 6),
            "Transit Time(ms)": round(transit / 1e6, 6),
            "Wait Time(ms)": round(wait / 1e6, 6),
            "Synchronization Time(ms)": round(sync / 1e6, 6),
            "Idle Time(ms)": 0.0,
            "Wait Time Ratio": round(wait / (wait + transit), 4) if wait + transit else 0,
            "Synchronization Time Ratio": round(sync / (sync + transit), 4) if sync + transit else 0,
        },
        "Communication Bandwidth Info": {
            "RDMA": _band(rdma, 1.0, True),
            "HCCS": _band(hccs, LARGE_PACKET_MB, True),
            "PCIE": _band([], 0, False),
            "SDMA": _band(hccs, LARGE_PACKET_MB, False),
        },
    }
    return info


def _total_info(infos: list[dict[str, Any]]) -> dict[str, Any]:
    keys = (
        "Elapse Time(ms)",
        "Transit Time(ms)",
        "Wait Time(ms)",
        "Synchronization Time(ms)",
        "Idle Time(ms)",
    )
    t = {k: round(sum(i["Communication Time Info"][k] for i in infos), 6) for k in keys}
    w, tr, sy = t["Wait Time(ms)"], t["Transit Time(ms)"], t["Synchronization Time(ms)"]
    t["Wait Time Ratio"] = round(w / (w + tr), 4) if w + tr else 0
    t["Synchronization Time Ratio"] = round(sy / (sy + tr), 4) if sy + tr else 0
    bw: dict[str, Any] = {}
    for link in ("RDMA", "HCCS", "PCIE", "SDMA"):
        size = round(sum(i["Communication Bandwidth Info"][link]["Transit Size(MB)"] for i in infos), 6)
        tm = round(sum(i["Communication Bandwidth Info"][link]["Transit Time(ms)"] for i in infos), 6)
        dist: dict[str, list[Any]] = {}
        for i in infos:
            for k, (cnt, ms) in i["Communication Bandwidth Info"][link]["Size Distribution"].items():
                c0, m0 = dist.get(k, [0, 0.0])
                dist[k] = [c0 + cnt, round(m0 + ms, 6)]
        n_large = sum(i["Communication Bandwidth Info"][link]["Large Packet Ratio"] for i in infos)
        bw[link] = {
            "Transit Size(MB)": size,
            "Transit Time(ms)": tm,
            "Bandwidth(GB/s)": round(size / tm, 4) if tm else 0,
            "Large Packet Ratio": round(n_large / len(infos), 4) if infos else 0,
            "Size Distribution": dist,
        }
    return {"Communication Time Info": t, "Communication Bandwidth Info": bw}


def _op_matrix(c: CommRec) -> dict[str, Any]:
    links: dict[str, dict[str, Any]] = {}
    tasks = [t for plane in c.coll.meta["planes"] for t in plane]
    if c.coll.meta["reduce"]:
        tasks.append(c.coll.meta["reduce"])
    for t in tasks:
        key = f"{t['src']}-{t['dst']}"
        cur = links.setdefault(
            key,
            {
                "Transport Type": {"LOCAL": "LOCAL", "RDMA": "RDMA"}.get(t["transport"], "HCCS"),
                "size": 0,
                "dur": 0,
            },
        )
        cur["size"] += t["size"]
        cur["dur"] += t["dur"]
    out = {}
    for key in sorted(links, key=lambda k: tuple(int(x) for x in k.split("-"))):
        cur = links[key]
        size, tm = cur["size"] / 1e6, cur["dur"] / 1e6
        out[key] = {
            "Transport Type": cur["Transport Type"],
            "Transit Size(MB)": round(size, 6),
            "Transit Time(ms)": round(tm, 6),
            "Bandwidth(GB/s)": round(size / tm, 4) if tm else 0,
            "Op Name": c.coll.name,
        }
    return out


def _csv(path: Path, header: list[str], rows: Iterable[list[Any]]) -> None:
    buf = io.StringIO()
    w = csv.writer(buf)  # default dialect: CRLF line ends, like torch_npu's files
    w.writerow(header)
    w.writerows(rows)
    path.write_bytes(buf.getvalue().encode("utf-8"))


def _json(path: Path, obj: Any, indent: int | None = 1) -> None:
    path.write_text(json.dumps(obj, indent=indent), encoding="utf-8")


# -------------------------------------------------------------------------------------------- public
LAYERS_DEFAULT = 3


def write_ascend_profile(
    scenario: Scenario,
    out_dir: Path | str,
    *,
    block_num_header: bool = False,
    drop_op_state: bool = False,
    extra_files: bool = False,
    events_per_rank: int | None = None,
    layers: int | None = None,
) -> Path:
    """Write one `*_ascend_pt` directory per rank of `scenario` under `out_dir`; returns `out_dir`.

    Options: `block_num_header` = newer torch_npu kernel_details (`Device_id` first, `Block Num` /
    `Mix Block Num`); `drop_op_state` = older CANN (no `OP State` / `HF32 Eligible`); `extra_files` adds
    memory_record.csv, api_statistic.csv and operator_details.csv; `events_per_rank` scales the number of
    transformer layers so each trace_view.json holds about that many events (e.g. 40,000 for the
    benchmark); `layers` sets it directly (default 3, ~1,100 events per rank for 2 steps).
    Same scenario and options -> identical bytes.
    """
    if scenario.vendor != "ascend":
        raise ValueError(f"write_ascend_profile needs an ascend scenario, got {scenario.vendor!r}")
    out = Path(out_dir)
    _check_plants(scenario, resolve(scenario), drop_op_state)
    if layers is None:
        layers = _layers_for(scenario, events_per_rank) if events_per_rank else LAYERS_DEFAULT
    sims, resolved = _simulate(scenario, layers)
    for rank in range(scenario.ranks):
        _write_rank(out, scenario, rank, sims[rank], resolved, block_num_header, drop_op_state, extra_files)
    return out


def _layers_for(sc: Scenario, target: int) -> int:
    """Layers such that rank 0's trace holds about `target` events (events grow linearly with layers)."""

    def count(layers: int) -> int:
        sims, resolved = _simulate(sc, layers)
        return len(_RankWriter(sc, 0, sims[0], resolved, False, False).trace_events())

    a, b = count(1), count(3)
    per_layer = max((b - a) / 2, 1)
    return max(1, round(1 + (target - a) / per_layer))


def _write_rank(
    out: Path,
    sc: Scenario,
    rank: int,
    steps: list[StepRec],
    resolved: list[ResolvedPlant],
    block_num_header: bool,
    drop_op_state: bool,
    extra_files: bool,
) -> None:
    w = _RankWriter(sc, rank, steps, resolved, block_num_header, drop_op_state)
    ts17 = f"20250101120000{100 + rank:03d}" if rank < 900 else f"2025010112{rank:07d}"
    rdir = out / f"node{rank // 8}_{w.pid}_{ts17}_ascend_pt"
    prof_rng = random.Random(f"{sc.seed}:prof:{rank}")
    prof = f"PROF_000001_{ts17}_{''.join(prof_rng.choice(string.ascii_uppercase) for _ in range(16))}"
    apo = rdir / "ASCEND_PROFILER_OUTPUT"
    for d in (apo, rdir / "FRAMEWORK", rdir / prof / f"device_{w.dev}"):
        d.mkdir(parents=True, exist_ok=True)

    env = dict(CLEAN_ENV)
    for p in resolved:
        if p.check == "env-var" and rank in p.ranks:
            env.update(p.params["vars"])
    _json(
        rdir / f"profiler_info_{rank}.json",
        {
            "config": {
                "common_config": {
                    "activities": ["ProfilerActivity.CPU", "ProfilerActivity.NPU"],
                    "schedule": {"wait": 1, "warmup": 1, "active": sc.steps, "repeat": 1},
                    "record_shapes": True,
                    "profile_memory": extra_files,
                    "with_stack": False,
                    "with_flops": False,
                    "with_modules": False,
                },
                "experimental_config": {
                    "_profiler_level": "Level1",
                    "_aic_metrics": "ACL_AICORE_PIPE_UTILIZATION",
                    "_l2_cache": False,
                    "_export_type": ["text"],
                    "_gc_detect_threshold": 1.0,
                },
            },
            "start_info": {"syscntEnable": True, "freq": 100000000},
            "end_info": {},
            "torch_npu_version": "2.5.1 (synthetic)" if block_num_header else "2.1.0.post13 (synthetic)",
            "rank_id": rank,
        },
    )
    _json(
        rdir / "profiler_metadata.json",
        {
            "ENV_VARIABLES": env,
            "distributed_args": {
                "world_size": sc.ranks,
                "tensor_model_parallel_size": 1,
                "pipeline_model_parallel_size": 1,
                "data_parallel_size": sc.ranks,
                "context_parallel_size": 1,
                "expert_model_parallel_size": 1,
            },
            "parallel_group_info": {
                GROUP_NAME: {"group_name": "dp", "group_rank": rank, "global_ranks": list(range(sc.ranks))}
            },
        },
    )
    (rdir / prof / f"device_{w.dev}" / "info.json.0").write_text(
        json.dumps(
            {
                "DeviceInfo": [
                    {
                        "id": w.dev,
                        "env_type": 3,
                        "ctrl_cpu_id": "ARMv8_Cortex_A55",
                        "ctrl_cpu_core_num": 1,
                        "ai_cpu_core_num": 6,
                        "ai_core_num": AI_CORE_NUM,
                        "aic_frequency": str(RATED_MHZ),
                        "aiv_num": AIV_NUM,
                        "hwts_frequency": "50",
                    }
                ],
                "platform_version": "Ascend910B",
            }
        ),
        encoding="utf-8",
    )

    events = w.trace_events()
    (apo / "trace_view.json").write_text(json.dumps(events), encoding="utf-8")
    header, rows = w.kernel_details()
    _csv(apo / "kernel_details.csv", header, rows)
    _csv(apo / "step_trace_time.csv", STEP_TRACE_HEADER, w.step_trace())
    _csv(apo / "op_statistic.csv", OP_STAT_HEADER, w.op_statistic())
    comm, matrix = w.communication()
    _json(apo / "communication.json", comm)
    _json(apo / "communication_matrix.json", matrix)
    if extra_files:
        _csv(apo / "memory_record.csv", MEMORY_HEADER, w.memory_record())
        _csv(apo / "api_statistic.csv", API_STAT_HEADER, w.api_statistic())
        _csv(apo / "operator_details.csv", OP_DETAILS_HEADER, w.op_details)
