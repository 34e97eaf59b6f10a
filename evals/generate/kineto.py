"""Write one PyTorch-profiler (Kineto) trace per rank, with planted problems; and enlarge a real trace.

`write_kineto_profile` writes `{out}/rank{r}.pt.trace.json[.gz]` in the real Kineto shape and text layout
(kineto doc §2): top-level `schemaVersion`, `deviceProperties`, `distributedInfo` {backend nccl, rank,
world_size, pg_config...}, `traceEvents` with `ProfilerStep#N` user annotations on the main thread,
`cpu_op` aten ops (forward on the main thread, backward on the autograd thread), `cuda_runtime`
launches with `correlation` / `External id`, `kernel` events (pid = device, tid = stream), `ac2g` flows,
`gpu_memcpy` / `gpu_memset`, `cuda_sync`, NCCL kernels with their collective metadata, and
`record_param_comms` host ops. Timestamps are µs floats with ns decimals on a steady clock (~4.46e12 µs,
`baseTimeNanoseconds` gives the epoch), written with exactly 3 decimals like Kineto does.

`repeat_kineto_trace` builds a large trace by repeating the ProfilerSteps of a real one (benchmarks).
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import random
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

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
    simulate,
    us_str,
)
from .problems import ResolvedPlant, Scenario, resolve

T0_NS = 4_458_676_400_000 * US  # steady-clock µs like real traces; exact with 3 decimals in float64
BASE_TIME_NS = 1_711_964_646_000_000_000
TIMING = Timing(api_offset_ns=4 * US, api_dur_ns=6 * US, latency_ns=10 * US, gap_ns=2 * US)
NCCL_BUSBW_GBPS = 80.0  # ring bus bandwidth of a multi-node job (IB-bound)
BUCKET_BYTES = 25 << 20  # DDP bucket_cap_mb=25
BUCKETS_PER_LAYER = 2  # each layer's gradients fill two DDP buckets
H2D_BYTES = 32 << 20  # the input batch, copied twice per step
PINNED_GBPS = 23.0
COMPUTE_STREAM, NCCL_STREAM, P2P_STREAM = 7, 20, 24
LAYERS_DEFAULT = 3

DL_MULTI = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
DL_SINGLE = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"

_DEVICE_PROPS = (
    '"name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85097971712,\n'
    '      "computeMajor": 8, "computeMinor": 0,\n'
    '      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,\n'
    '      "regsPerBlock": 65536, "regsPerMultiprocessor": 65536, "warpSize": 32,\n'
    '      "sharedMemPerBlock": 49152, "sharedMemPerMultiprocessor": 167936,\n'
    '      "numSms": 108, "sharedMemPerBlockOptin": 166912'
)

# ------------------------------------------------------------------------------------------ op catalog
_EW = (
    "void at::native::vectorized_elementwise_kernel<4, {f}, at::detail::Array<char*, {n}> >(int, {f}, "
    "at::detail::Array<char*, {n}>)"
)


def _ew(functor: str, n: int = 3) -> str:
    return _EW.format(f=functor, n=n)


def _gemm(fp32: bool, tile: str = "128x256", layout: str = "tn") -> str:
    if fp32:
        return f"ampere_sgemm_128x64_{layout}"
    return f"ampere_bf16_s16816gemm_bf16_{tile}_ldg8_f2f_stages_64x3_{layout}"


def _kernel_info(key: str, fp32: bool) -> tuple[str, str, tuple[int, int, int], tuple[int, int, int]]:
    """(aten op, kernel name, grid, block) of a logical op."""
    t = "float" if fp32 else "c10::BFloat16"
    if key in ("qkv", "proj", "up", "down", "lm_head"):
        return "aten::mm", _gemm(fp32), (48, 32, 1), (256, 1, 1)
    if key.endswith("_dx"):
        return "aten::mm", _gemm(fp32, layout="nn"), (48, 32, 1), (256, 1, 1)
    if key.endswith("_dw"):
        return "aten::mm", _gemm(fp32, layout="nt"), (32, 16, 1), (256, 1, 1)
    if key == "attn":
        if fp32:
            return (
                "aten::_scaled_dot_product_efficient_attention",
                "fmha_cutlassF_f32_aligned_64x64_rf_sm80(PyTorchMemEffAttention::AttentionKernel<float, "
                "cutlass::arch::Sm80, true, 64, 64, 64, true, true>::Params)",
                (32, 32, 4),
                (32, 4, 1),
            )
        return (
            "aten::_scaled_dot_product_flash_attention",
            "void pytorch_flash::flash_fwd_kernel<pytorch_flash::Flash_fwd_kernel_traits<128, 128, 64, 4, "
            "false, false, cutlass::bfloat16_t, pytorch_flash::Flash_kernel_traits<128, 128, 64, 4, "
            "cutlass::bfloat16_t> >, false, true, false, false, true, true, false, false>"
            "(pytorch_flash::Flash_fwd_params)",
            (16, 4, 32),
            (128, 1, 1),
        )
    if key == "attn_grad":
        if fp32:
            return (
                "aten::_scaled_dot_product_efficient_attention_backward",
                "fmha_cutlassB_f32_aligned_64x64_k64_sm80(PyTorchMemEffAttention::AttentionBackwardKernel<"
                "cutlass::arch::Sm80, float, true, false, false, 64, 64, 64, false>::Params)",
                (1, 32, 4),
                (128, 1, 1),
            )
        return (
            "aten::_scaled_dot_product_flash_attention_backward",
            "void pytorch_flash::flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel<pytorch_flash::"
            "Flash_bwd_kernel_traits<128, 64, 128, 8, 2, 4, 2, false, false, cutlass::bfloat16_t, "
            "pytorch_flash::Flash_kernel_traits<128, 64, 128, 8, cutlass::bfloat16_t> >, true, false, false, "
            "false, false>(pytorch_flash::Flash_bwd_params)",
            (32, 4, 32),
            (256, 1, 1),
        )
    table = {
        "embed": (
            "aten::embedding",
            f"void at::native::(anonymous namespace)::indexSelectLargeIndex<{t}, long, "
            f"unsigned int, 2, 2, -2, true>(at::cuda::detail::TensorInfo<{t}, unsigned int>, "
            f"at::cuda::detail::TensorInfo<{t}, unsigned int>, at::cuda::detail::TensorInfo<long, "
            "unsigned int>, int, int, unsigned int, unsigned int, long)",
            (2048, 1, 1),
            (128, 1, 1),
        ),
        "norm": (
            "aten::native_layer_norm",
            f"void at::native::(anonymous namespace)::vectorized_layer_norm_kernel"
            f"<{t}, float>(int, float, {t} const*, {t} const*, {t} const*, float*, float*, {t}*)",
            (8192, 1, 1),
            (256, 1, 1),
        ),
        "add_norm": ("aten::add", _ew(f"at::native::CUDAFunctor_add<{t}>"), (65536, 1, 1), (128, 1, 1)),
        "act": (
            "aten::silu",
            _ew(
                f"at::native::(anonymous namespace)::silu_kernel(at::TensorIteratorBase&)::"
                f"{{lambda()#1}}::operator()() const::{{lambda({t})#1}}",
                2,
            ),
            (65536, 1, 1),
            (128, 1, 1),
        ),
        "loss": (
            "aten::_log_softmax",
            f"void at::native::(anonymous namespace)::cunn_SoftMaxForward<8, {t}, float, float, "
            "at::native::(anonymous namespace)::LogSoftMaxForwardEpilogue>"
            f"(float*, {t} const*, int)",
            (8192, 1, 1),
            (1024, 1, 1),
        ),
        "loss_grad": (
            "aten::_log_softmax_backward_data",
            f"void at::native::(anonymous namespace)::"
            f"cunn_SoftMaxBackward<8, {t}, float, float, at::native::(anonymous namespace)::"
            f"LogSoftMaxBackwardEpilogue>(float*, {t} const*, {t} const*, int)",
            (8192, 1, 1),
            (1024, 1, 1),
        ),
        "act_grad": (
            "aten::silu_backward",
            _ew(
                f"at::native::(anonymous namespace)::silu_backward_kernel("
                f"at::TensorIteratorBase&)::{{lambda()#1}}::operator()() const::{{lambda({t}, {t})#1}}"
            ),
            (65536, 1, 1),
            (128, 1, 1),
        ),
        "add_norm_grad": (
            "aten::native_layer_norm_backward",
            f"void at::native::(anonymous namespace)::"
            f"layer_norm_grad_input_kernel_vectorized<{t}, float>({t} const*, {t} const*, "
            f"float const*, float const*, {t} const*, {t}*, int)",
            (8192, 1, 1),
            (256, 1, 1),
        ),
        "norm_grad": (
            "aten::native_layer_norm_backward",
            f"void at::native::(anonymous namespace)::"
            f"layer_norm_grad_input_kernel_vectorized<{t}, float>({t} const*, {t} const*, "
            f"float const*, float const*, {t} const*, {t}*, int)",
            (8192, 1, 1),
            (256, 1, 1),
        ),
        "embed_grad": (
            "aten::embedding_dense_backward",
            f"void at::native::(anonymous namespace)::"
            f"embedding_backward_feature_kernel<{t}, float, long>(long const*, {t} const*, {t}*, int, "
            "long, int)",
            (4736, 1, 1),
            (32, 32, 1),
        ),
        "adamw": (
            "aten::_fused_adamw_",
            "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<"
            "at::native::(anonymous namespace)::TensorListMetadata<4>, at::native::(anonymous namespace)::"
            f"FusedAdamMathFunctor<{t}, 4, (at::native::ADAM_MODE)1, false>, double*, double, double, "
            "double, double, double, bool, float*, float*>(at::native::(anonymous namespace)::"
            "TensorListMetadata<4>, ...)",
            (320, 1, 1),
            (512, 1, 1),
        ),
        "tiny": ("aten::fill_", _ew(f"at::native::FillFunctor<{t}>", 1), (1, 1, 1), (64, 1, 1)),
    }
    return table[key]


_DIMS: dict[str, list[list[int]]] = {
    "embed": [[151552, 4096], [4, 2048]],
    "norm": [[4, 2048, 4096], [4096], [4096]],
    "attn": [[4, 32, 2048, 128]] * 3,
    "attn_grad": [[4, 32, 2048, 128]] * 4,
    "loss": [[8192, 151552]],
    "loss_grad": [[8192, 151552], [8192, 151552]],
    "embed_grad": [[4, 2048, 4096], [4, 2048]],
    "adamw": [[67108864]] * 4,
    "tiny": [[4096]],
}


def _dims(key: str) -> list[list[int]]:
    if key in _DIMS:
        return _DIMS[key]
    if key.split("_")[0] in ("qkv", "proj", "up", "down", "lm") or key.endswith(("_dx", "_dw")):
        return [[8192, 4096], [4096, 4096]]
    return [[4, 2048, 4096], [4, 2048, 4096]]


# ------------------------------------------------------------------------------------------- programs
class _RankState:
    def __init__(self, seed: int, rank: int) -> None:
        self.rng = random.Random(f"{seed}:kineto:{rank}")
        self.speed = 1.0 + self.rng.uniform(-0.004, 0.004)


def _allreduce(nbytes: int, n: int, elem: int, rng: random.Random, thread: str) -> Collective:
    """A ring AllReduce of `nbytes`: each rank moves 2(n-1)/n of it at the NVLink bus bandwidth."""
    transit = int(2 * (n - 1) / n * nbytes / (NCCL_BUSBW_GBPS * rng.uniform(0.985, 1.015))) + 12 * US
    return Collective(
        "nccl:all_reduce", "allreduce", nbytes, transit, thread=thread, meta={"nelems": nbytes // elem}
    )


def _step_program(
    sc: Scenario, st: _RankState, rank: int, step: int, resolved: list[ResolvedPlant], layers: int
) -> Builder:
    """One rank's step: dataloader, H2D copies, zero_grad, forward, backward with DDP buckets on the
    autograd thread, optimizer, loss.item()."""
    b = Builder(rank, step, st.rng, resolved, st.speed)
    rng, n = st.rng, sc.ranks
    fp32 = b.first("fp32-compute") is not None
    elem = 4 if fp32 else 2
    hb = b.first("host-bound")
    tiny = int(hb.params["extra_tiny_per_layer"]) if hb else 0
    sp = b.first("small-packet")
    exposed = b.first("exposed-comm-tail") is not None
    meta = {"fp32": fp32}

    def launch(key: str, kind: str, us: float, layer: int, phase: str) -> None:
        thread = "autograd" if phase == "bwd" else "main"
        b.launch(
            key, kind, us, layer, phase, thread=thread, meta=meta, host_us=30.0 if phase == "fwd" else 40.0
        )

    dl = b.first("slow-dataloader")
    if dl:
        b.call(DL_SINGLE, "dataloader", int(float(dl.params["dur_ms"]) * MS))
    else:
        b.call(DL_MULTI, "dataloader", int(1.5 * MS * rng.uniform(0.95, 1.05)))
    pg = b.first("h2d-pageable")
    bw = float(pg.params["bandwidth_gbps"]) if pg else PINNED_GBPS
    for _ in range(2):
        b.launch(
            "h2d",
            "memcpy",
            0,
            -1,
            "io",
            blocking=pg is not None,
            sync=False,
            dur_ns=int(H2D_BYTES / (bw * rng.uniform(0.98, 1.02))),
            meta={"bytes": H2D_BYTES, "pageable": pg is not None},
        )
    b.span("Optimizer.zero_grad#AdamW.zero_grad", "annotation", True)
    for _ in range(2):
        b.launch(
            "zero",
            "memset",
            0,
            -1,
            "io",
            dur_ns=int(50 * US * rng.uniform(0.98, 1.02)),
            meta={"bytes": 268435456},
        )
    b.span("Optimizer.zero_grad#AdamW.zero_grad", "annotation", False)

    launch(*EMBED_FWD, -1, "fwd")
    gc = b.first("gc-pause")
    gcs = b.spread(int(gc.params["count"]), layers) if gc else [0] * layers
    mem = b.first("memory-ops")
    for layer in range(layers):
        for key, kind, us in FWD_LAYER:
            launch(key, kind, us, layer, "fwd")
        for _ in range(tiny):
            launch("tiny", "tiny", 6.0, layer, "fwd")
        if layer == 0 and mem:
            for _ in range(int(mem.params["count"])):
                b.call("cudaMalloc", "malloc", int(float(mem.params["dur_ms"]) * MS))
        for _ in range(gcs[layer]):
            b.idle(int(float(gc.params["dur_ms"]) * MS))
    for key, kind, us in HEAD_FWD:
        launch(key, kind, us, layers, "fwd")

    deferred: list[int] = []

    def bucket(label: str) -> None:
        if n < 2:
            return
        if hb and label != "layer0":
            return  # a host-bound (small) model fits in one DDP bucket
        if hb:
            sizes = [8 << 20]
        else:
            sizes = [BUCKET_BYTES * (2 if fp32 else 1)] * (1 if label == "head" else BUCKETS_PER_LAYER)
        for nbytes in sizes:
            if exposed:
                deferred.append(nbytes)
            else:
                emit(nbytes)

    def emit(nbytes: int) -> None:
        per_call = int(sp.params["bucket_bytes"]) if sp else nbytes
        for _ in range(math.ceil(nbytes / per_call)):
            b.collective(_allreduce(min(per_call, nbytes), n, elem, rng, "autograd"))

    for key, kind, us in HEAD_BWD:
        launch(key, kind, us, layers, "bwd")
    bucket("head")
    for layer in reversed(range(layers)):
        for key, kind, us in BWD_LAYER:
            launch(key, kind, us, layer, "bwd")
        for _ in range(tiny):
            launch("tiny", "tiny", 6.0, layer, "bwd")
        bucket(f"layer{layer}")
    launch(*EMBED_BWD, -1, "bwd")
    for nbytes in deferred:
        emit(nbytes)
    b.wait_comm()

    b.span("Optimizer.step#AdamW.step", "annotation", True)
    for key, kind, us in OPTIMIZER:
        launch(key, kind, us, -1, "opt")
    b.span("Optimizer.step#AdamW.step", "annotation", False)
    for p in b.of("slow-rank"):
        if p.params.get("dimension") == "communication":
            extra = int(float(p.params["extra_comm_ms"]) * MS)
            for _ in range(4):
                size = int(extra // 4 * 40)  # p2p over the inter-node link, ~40 GB/s
                b.collective(
                    Collective(
                        "nccl:send", "send", size, extra // 4, synced=False, meta={"nelems": size // elem}
                    )
                )
    b.wait_comm()
    b.launch("item", "memcpy", 0, -1, "io", blocking=True, sync=False, dur_ns=3 * US, meta={"bytes": 4})
    b.step_sync("cudaStreamSynchronize")
    for p in b.of("slow-rank"):
        if p.params.get("dimension") == "free":
            b.idle(int(float(p.params["tail_ms"]) * MS))
    return b


def _simulate(sc: Scenario, layers: int) -> tuple[list[list[StepRec]], list[ResolvedPlant]]:
    resolved = resolve(sc)
    every = set(range(sc.ranks))
    for p in resolved:
        if p.check == "small-packet" and set(p.ranks) != every:
            raise ValueError(
                "small-packet changes the number of collectives, so it must be planted on all "
                "ranks (collectives are matched across ranks)"
            )
    states = [_RankState(sc.seed, r) for r in range(sc.ranks)]
    step_ids = list(range(1, sc.steps + 1))
    programs = [
        [_step_program(sc, states[r], r, s, resolved, layers).ins for s in step_ids] for r in range(sc.ranks)
    ]
    return simulate(programs, step_ids, T0_NS, TIMING), resolved


# ---------------------------------------------------------------------------------------------- writer
def _args_text(args: dict[str, Any]) -> str:
    return ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in args.items())


class _Events:
    """Formats events exactly like Kineto's JSON writer (one `{ ... }` block per event)."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.count = 0

    def x(self, cat: str, name: str, pid: int, tid: int, ts: int, dur: int, args: dict[str, Any]) -> None:
        self.count += 1
        self.parts.append(
            f'  {{\n    "ph": "X", "cat": "{cat}", "name": {json.dumps(name)}, "pid": {pid}, "tid": {tid},\n'
            f'    "ts": {us_str(ts)}, "dur": {us_str(dur)},\n'
            f'    "args": {{\n      {_args_text(args)}\n    }}\n  }}'
        )

    def flow(self, ph: str, fid: int, pid: int, tid: int, ts: int, cat: str = "ac2g") -> None:
        self.count += 1
        bp = ', "bp": "e"' if ph == "f" else ""
        self.parts.append(
            f'  {{\n    "ph": "{ph}", "id": {fid}, "pid": {pid}, "tid": {tid}, "ts": {us_str(ts)},\n'
            f'    "cat": "{cat}", "name": "{cat}"{bp}\n  }}'
        )

    def meta(self, name: str, pid: int | str, tid: int | str, ts: int, args: dict[str, Any]) -> None:
        self.count += 1
        self.parts.append(
            f'  {{\n    "name": "{name}", "ph": "M", "ts": {us_str(ts)}, "pid": {json.dumps(pid)}, '
            f'"tid": {json.dumps(tid)},\n    "args": {{\n      {_args_text(args)}\n    }}\n  }}'
        )

    def raw(self, text: str) -> None:
        self.count += 1
        self.parts.append(text)


class _RankWriter:
    def __init__(
        self,
        sc: Scenario,
        rank: int,
        steps: list[StepRec],
        resolved: list[ResolvedPlant],
        legacy_nccl: bool,
        cuda_sync_events: bool,
    ) -> None:
        self.sc, self.rank, self.steps, self.resolved = sc, rank, steps, resolved
        self.legacy, self.cuda_sync = legacy_nccl, cuda_sync_events
        self.dev = rank % 8
        self.pid = 2910000 + rank
        self.tids = {"main": self.pid, "autograd": self.pid + 9503}
        self.ext = 0  # External id / Record function id of CPU ops
        self.ev_idx = 0
        self.corr = 1000  # correlation ids of runtime calls
        self.seq = 0
        self.ranks_text = "[" + ", ".join(str(r) for r in range(sc.ranks)) + "]"

    def _cpu(
        self, e: _Events, cat: str, name: str, thread: str, ts: int, dur: int, extra: dict | None = None
    ) -> int:
        self.ext += 1
        args: dict[str, Any] = {"External id": self.ext, "Record function id": 0}
        args.update(extra or {})
        args["Ev Idx"] = self.ev_idx
        self.ev_idx += 1
        e.x(cat, name, self.pid, self.tids[thread], ts, dur, args)
        return self.ext

    def _runtime(self, e: _Events, name: str, cbid: int, thread: str, ts: int, dur: int, ext: int) -> int:
        self.corr += 1
        e.x(
            "cuda_runtime",
            name,
            self.pid,
            self.tids[thread],
            ts,
            dur,
            {"External id": ext, "cbid": cbid, "correlation": self.corr},
        )
        return self.corr

    def _gpu(
        self,
        e: _Events,
        cat: str,
        name: str,
        stream: int,
        ts: int,
        dur: int,
        ext: int,
        corr: int,
        extra: dict[str, Any],
    ) -> None:
        args = {
            "External id": ext,
            "queued": 0,
            "device": self.dev,
            "context": 1,
            "stream": stream,
            "correlation": corr,
        }
        if cat != "kernel":
            args.pop("queued")
        args.update(extra)
        e.x(cat, name, self.dev, stream, ts, dur, args)

    def _fp32(self, step: int) -> bool:
        return any(p.check == "fp32-compute" and p.hits(self.rank, step) for p in self.resolved)

    def events(self) -> _Events:
        e = _Events()
        for st in self.steps:
            self._step(e, st)
        t_first = self.steps[0].start
        self._metadata(e, t_first)
        end = self.steps[-1].end
        e.raw(
            f'  {{\n    "ph": "X", "cat": "Trace", "ts": {us_str(t_first - 200 * US)}, '
            f'"dur": {us_str(end - t_first + 400 * US)},\n    "pid": "Spans", "tid": "PyTorch Profiler",\n'
            f'    "name": "PyTorch Profiler (0)",\n    "args": {{\n      "Op count": 0\n    }}\n  }}'
        )
        e.meta("process_sort_index", "Spans", 0, t_first - 200 * US, {"sort_index": 536870912})
        e.raw(
            f'  {{\n    "name": "Iteration Start: PyTorch Profiler", "ph": "i", "s": "g",\n'
            f'    "pid": "Traces", "tid": "Trace PyTorch Profiler", "ts": {us_str(t_first - 200 * US)}\n  }}'
        )
        e.raw(
            f'  {{\n    "name": "Record Window End", "ph": "i", "s": "g",\n'
            f'    "pid": "", "tid": "", "ts": {us_str(end + 200 * US)}\n  }}'
        )
        return e

    def _metadata(self, e: _Events, ts: int) -> None:
        ts -= 100 * US
        e.meta("process_name", self.pid, 0, ts, {"name": "python3.10"})
        e.meta("process_labels", self.pid, 0, ts, {"labels": "CPU"})
        e.meta("process_sort_index", self.pid, 0, ts, {"sort_index": self.pid})
        e.meta("process_name", self.dev, 0, ts, {"name": "python3.10"})
        e.meta("process_labels", self.dev, 0, ts, {"labels": f"GPU {self.dev}"})
        e.meta("process_sort_index", self.dev, 0, ts, {"sort_index": 16777216 + self.dev})
        for stream in (COMPUTE_STREAM, NCCL_STREAM, P2P_STREAM):
            e.meta("thread_name", self.dev, stream, ts, {"name": f"stream {stream} "})
            e.meta("thread_sort_index", self.dev, stream, ts, {"sort_index": stream})
        for label, tid in self.tids.items():
            pretty = "pt_main_thread" if label == "main" else "pt_autograd_0"
            e.meta("thread_name", self.pid, tid, ts, {"name": f"thread {tid} ({pretty})"})
            e.meta("thread_sort_index", self.pid, tid, ts, {"sort_index": tid})

    def _step(self, e: _Events, st: StepRec) -> None:
        fp32 = self._fp32(st.step)
        self._cpu(e, "user_annotation", f"ProfilerStep#{st.step}", "main", st.start, st.end - st.start)
        for sp in st.spans:
            self._cpu(e, "user_annotation", sp.name, sp.thread, sp.ts, sp.dur)
        comm_iter = iter(st.comms)
        for h in st.host:
            ins = h.ins
            if isinstance(ins, Launch):
                assert h.kernel is not None
                self._launch(e, h, h.kernel, fp32)
            elif isinstance(ins, Call):
                if ins.kind == "dataloader":
                    self._cpu(e, "user_annotation", ins.name, ins.thread, h.ts, h.dur)
                else:  # cudaMalloc inside the caching allocator
                    ext = self._cpu(
                        e,
                        "cpu_op",
                        "aten::empty",
                        ins.thread,
                        h.ts,
                        h.dur,
                        {
                            "Input Dims": [[], [], [], [], [], []],
                            "Input type": ["", "Scalar", "", "", "", ""],
                        },
                    )
                    self._runtime(e, "cudaMalloc", 20, ins.thread, h.ts + 2 * US, h.dur - 4 * US, ext)
            elif isinstance(ins, Collective):
                self._collective(e, h, next(comm_iter), fp32)
            elif isinstance(ins, WaitComm):
                self._runtime(e, "cudaStreamWaitEvent", 147, ins.thread, h.ts, h.dur, 0)
            elif isinstance(ins, StepSync):
                ext = self._cpu(e, "cpu_op", "aten::_local_scalar_dense", ins.thread, h.ts, h.dur)
                corr = self._runtime(
                    e, "cudaStreamSynchronize", 131, ins.thread, h.ts + US, h.dur - 2 * US, ext
                )
                if self.cuda_sync:
                    self._sync_event(e, h.ts + US, h.dur - 2 * US, corr)

    def _sync_event(self, e: _Events, ts: int, dur: int, corr: int) -> None:
        e.x(
            "cuda_sync",
            "Stream Sync",
            self.dev,
            COMPUTE_STREAM,
            ts,
            max(dur, US),
            {
                "cuda_sync_kind": "Stream Sync",
                "stream": COMPUTE_STREAM,
                "correlation": corr,
                "device": self.dev,
                "context": 1,
            },
        )

    def _launch(self, e: _Events, h: HostRec, k: KernelRec, fp32: bool) -> None:
        op = k.op
        thread = h.ins.thread
        if op.kind in ("memcpy", "memset"):
            aten = {"h2d": "aten::copy_", "item": "aten::item", "zero": "aten::zero_"}[op.key]
            ext = self._cpu(
                e,
                "cpu_op",
                aten,
                thread,
                h.ts,
                h.dur,
                {"Input Dims": [[op.meta["bytes"] // 4]], "Input type": ["float"]},
            )
            api = "cudaMemsetAsync" if op.kind == "memset" else "cudaMemcpyAsync"
            corr = self._runtime(e, api, 51 if op.kind == "memset" else 41, thread, k.api_ts, k.api_dur, ext)
            e.flow("s", corr, self.pid, self.tids[thread], k.api_ts)
            if op.kind == "memset":
                cat, name = "gpu_memset", "Memset (Device)"
            elif op.key == "item":
                cat, name = "gpu_memcpy", "Memcpy DtoH (Device -> Pageable)"
            else:
                cat = "gpu_memcpy"
                name = (
                    "Memcpy HtoD (Pageable -> Device)"
                    if op.meta["pageable"]
                    else "Memcpy HtoD (Pinned -> Device)"
                )
            self._gpu(
                e,
                cat,
                name,
                COMPUTE_STREAM,
                k.ts,
                k.dur,
                ext,
                corr,
                {"bytes": op.meta["bytes"], "memory bandwidth (GB/s)": op.meta["bytes"] / k.dur},
            )
            e.flow("f", corr, self.dev, COMPUTE_STREAM, k.ts)
            return
        aten, kname, grid, block = _kernel_info(op.key, fp32)
        if op.phase == "fwd":
            self.seq += 1
        extra: dict[str, Any] = {
            "Sequence number": self.seq,
            "Fwd thread id": 1 if op.phase == "bwd" else 0,
            "Input Dims": _dims(op.key),
            "Input type": ["float" if fp32 else "c10::BFloat16"] * len(_dims(op.key)),
        }
        ext = self._cpu(e, "cpu_op", aten, thread, h.ts, h.dur, extra)
        corr = self._runtime(e, "cudaLaunchKernel", 211, thread, k.api_ts, k.api_dur, ext)
        e.flow("s", corr, self.pid, self.tids[thread], k.api_ts)
        blocks = grid[0] * grid[1] * grid[2]
        threads = block[0] * block[1] * block[2]
        self._gpu(
            e,
            "kernel",
            kname,
            COMPUTE_STREAM,
            k.ts,
            k.dur,
            ext,
            corr,
            {
                "registers per thread": 128 if op.kind in ("matmul", "attention") else 32,
                "shared memory": 65536 if op.kind in ("matmul", "attention") else 0,
                "blocks per SM": round(blocks / 108, 6),
                "warps per SM": round(blocks * threads / 32 / 108, 6),
                "grid": list(grid),
                "block": list(block),
                "est. achieved occupancy %": 25 if op.kind in ("matmul", "attention") else 100,
            },
        )
        e.flow("f", corr, self.dev, COMPUTE_STREAM, k.ts)
        if k.sync_ts >= 0:
            sync_corr = self._runtime(e, "cudaStreamSynchronize", 131, thread, k.sync_ts, k.sync_dur, ext)
            if self.cuda_sync:
                self._sync_event(e, k.sync_ts, k.sync_dur, sync_corr)

    def _collective(self, e: _Events, h: HostRec, c: CommRec, fp32: bool) -> None:
        coll = c.coll
        thread = coll.thread
        send = coll.kind == "send"
        dtype = "Float" if fp32 else "BFloat16"
        group = {
            "Process Group Name": "1" if send else "0",
            "Process Group Description": "pp_send" if send else "default_pg",
            "Process Group Ranks": f"[{self.rank}, {self.rank + self.sc.ranks}]" if send else self.ranks_text,
        }
        meta = {
            "Collective name": "send" if send else "allreduce",
            "In msg nelems": coll.meta["nelems"],
            "Out msg nelems": coll.meta["nelems"],
            "Group size": 2 if send else self.sc.ranks,
            "dtype": dtype,
            "In split size": "[]",
            "Out split size": "[]",
        }
        self._cpu(e, "cpu_op", "c10d::send" if send else "c10d::allreduce_", thread, h.ts, h.dur)
        ext = self._cpu(
            e,
            "cpu_op",
            "record_param_comms",
            thread,
            h.ts + US,
            h.dur - 2 * US,
            {**meta, "Global rank start": 0, "Global rank stride": 1, **group},
        )
        self._cpu(e, "user_annotation", coll.name, thread, h.ts + 2 * US, h.dur - 4 * US)
        self._runtime(e, "cudaStreamWaitEvent", 147, thread, h.ts + 3 * US, US, ext)
        corr = self._runtime(e, "cudaLaunchKernel", 211, thread, h.ts + 4 * US, 6 * US, ext)
        e.flow("s", corr, self.pid, self.tids[thread], h.ts + 4 * US)
        if send:
            kname = (
                "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"
                if self.legacy
                else "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
            )
        elif self.legacy:
            kname = (
                f"ncclKernel_AllReduce_RING_LL_Sum_{'float' if fp32 else 'bfloat16'}"
                "(ncclDevComm*, unsigned long, ncclWork*)"
            )
        else:
            kname = (
                f"ncclDevKernel_AllReduce_Sum_{'f32' if fp32 else 'bf16'}_RING_LL"
                "(ncclDevKernelArgsStorage<4096ul>)"
            )
        stream = P2P_STREAM if send else NCCL_STREAM
        self._gpu(
            e,
            "kernel",
            kname,
            stream,
            c.ts,
            c.end - c.ts,
            ext,
            corr,
            {
                "registers per thread": 96,
                "shared memory": 87568,
                "blocks per SM": 0.074074,
                "warps per SM": 1.259259,
                "grid": [8, 1, 1],
                "block": [544, 1, 1],
                "est. achieved occupancy %": 0,
                **meta,
                **group,
            },
        )
        e.flow("f", corr, self.dev, stream, c.ts)


def _header(sc: Scenario, rank: int) -> str:
    props = ",\n".join(f'    {{\n      "id": {i}, {_DEVICE_PROPS}\n    }}' for i in range(min(sc.ranks, 8)))
    ranks = ", ".join(str(r) for r in range(sc.ranks))
    dist = (
        f'{{"backend": "nccl", "rank": {rank}, "world_size": {sc.ranks}, "pg_count": 1, "pg_config": '
        f'[{{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": {sc.ranks}, '
        f'"ranks": [{ranks}]}}], "nccl_version": "2.20.5"}}'
    )
    return (
        f'{{\n  "schemaVersion": 1,\n  "deviceProperties": [\n{props}\n  ],\n'
        f'  "cupti_version": 18,\n  "cuda_runtime_version": 12010,\n  "cuda_driver_version": 12020,\n'
        f'  "distributedInfo": {dist},\n  "record_shapes": 1,\n  "traceEvents": [\n'
    )


def _trailer(rank: int) -> str:
    return (
        f'\n  ],\n  "traceName": "rank{rank}.pt.trace.json",\n  "displayTimeUnit": "ms",\n'
        f'  "baseTimeNanoseconds": {BASE_TIME_NS}\n}}\n'
    )


def _open_out(path: Path) -> TextIO:
    if path.suffix == ".gz":
        # mtime=0 and no file name in the gzip header, so the same input gives the same bytes.
        fileobj = open(path, "wb")  # noqa: SIM115 - closed by _GzText.close
        return _GzText(gzip.GzipFile(filename="", mode="wb", fileobj=fileobj, mtime=0, compresslevel=6))
    return open(path, "w", encoding="utf-8")


class _GzText:
    """A text wrapper over a GzipFile that also closes the underlying file object."""

    def __init__(self, gz: gzip.GzipFile) -> None:
        self.gz = gz

    def write(self, text: str) -> int:
        return self.gz.write(text.encode("utf-8"))

    def close(self) -> None:
        fileobj = self.gz.fileobj
        self.gz.close()
        if fileobj is not None:
            fileobj.close()

    def __enter__(self) -> _GzText:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_kineto_profile(
    scenario: Scenario,
    out_dir: Path | str,
    *,
    gz: bool = False,
    legacy_nccl: bool = False,
    cuda_sync_events: bool = True,
    events_per_rank: int | None = None,
    layers: int | None = None,
) -> Path:
    """Write `rank{r}.pt.trace.json` (`.json.gz` with `gz=True`) per rank of `scenario`; returns `out_dir`.

    `legacy_nccl` names NCCL kernels `ncclKernel_*` (NCCL < 2.19) instead of `ncclDevKernel_*`;
    `cuda_sync_events` adds the `cuda_sync` GPU events newer PyTorch records for stream syncs;
    `events_per_rank` / `layers` scale the model like the Ascend writer (default 3 layers, ~1,300 events
    per rank for 2 steps). Same scenario and options -> identical bytes.
    """
    if scenario.vendor != "kineto":
        raise ValueError(f"write_kineto_profile needs a kineto scenario, got {scenario.vendor!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if layers is None:
        layers = _layers_for(scenario, events_per_rank) if events_per_rank else LAYERS_DEFAULT
    sims, resolved = _simulate(scenario, layers)
    for rank in range(scenario.ranks):
        events = _RankWriter(scenario, rank, sims[rank], resolved, legacy_nccl, cuda_sync_events).events()
        path = out / f"rank{rank}.pt.trace.json{'.gz' if gz else ''}"
        with _open_out(path) as f:
            f.write(_header(scenario, rank))
            f.write(",\n".join(events.parts))
            f.write(_trailer(rank))
    return out


def _layers_for(sc: Scenario, target: int) -> int:
    def count(layers: int) -> int:
        sims, resolved = _simulate(sc, layers)
        return _RankWriter(sc, 0, sims[0], resolved, False, True).events().count

    a, b = count(1), count(3)
    per_layer = max((b - a) / 2, 1)
    return max(1, round(1 + (target - a) / per_layer))


# ----------------------------------------------------------------------------------- repeat real traces
_STEP_RE = re.compile(r"ProfilerStep\s*#\s*(\d+)")
_SHIFT_RE = re.compile(
    r'"(ts|External id|correlation|id|Ev Idx|Profiler Event Index|Record function id)"'
    r"(\s*:\s*)(\d+)(\.\d+)?|(ProfilerStep\s*#\s*)(\d+)"
)
_ID_KEYS = ("External id", "correlation", "id", "Ev Idx", "Profiler Event Index", "Record function id")
_GPU_CATS = {
    "kernel",
    "gpu_memcpy",
    "gpu_memset",
    "cuda_sync",
    "gpu_user_annotation",
    "Kernel",
    "Memcpy",
    "Memset",
}


def _read_text(path: Path) -> str:
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as f:
            return f.read().decode("utf-8")
    return path.read_text(encoding="utf-8")


def _event_spans(text: str, start: int) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """(start, end, event) of each element of the JSON array that opens at `start` ('[')."""
    dec = json.JSONDecoder()
    i = start + 1
    n = len(text)
    ws = " \t\r\n"
    while i < n:
        while i < n and text[i] in ws:
            i += 1
        if i >= n or text[i] == "]":
            return
        obj, end = dec.raw_decode(text, i)
        yield i, end, obj
        i = end
        while i < n and text[i] in ws:
            i += 1
        if i < n and text[i] == ",":
            i += 1


def repeat_kineto_trace(
    src_path: Path | str, out_path: Path | str, rank: int, target_bytes: int, world_size: int | None = None
) -> Path:
    """Write a trace of about `target_bytes` by repeating the ProfilerSteps of the Kineto trace `src_path`.

    The events inside the ProfilerStep window (CPU events by time, GPU events and flows by the correlation
    of their launch) are written once per repetition, shifted past the previous repetition's last event;
    step numbers, correlation ids, External ids, flow ids and event indices are renumbered so every
    repetition stays unique and linked. `distributedInfo.rank` becomes `rank` (and `world_size` when
    given). Events outside the window (metadata, the profiler span) are written once. The output is
    streamed (`.gz` when `out_path` ends so); memory holds the source text, not decoded events.
    """
    src, out = Path(src_path), Path(out_path)
    text = _read_text(src)
    m = re.search(r'"traceEvents"\s*:\s*\[', text)
    if not m:
        raise ValueError(f"{src}: no traceEvents array")
    arr = m.end() - 1
    head = text[: m.start()]
    head = re.sub(r'("distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*)\d+', rf"\g<1>{rank}", head, count=1)
    if world_size is not None:
        head = re.sub(
            r'("distributedInfo"\s*:\s*\{[^{}]*?"world_size"\s*:\s*)\d+', rf"\g<1>{world_size}", head, count=1
        )

    spans: list[tuple[int, int, str, float, float, Any]] = []  # start, end, kind, ts, end_ts, link
    steps: list[tuple[float, float]] = []
    lo = {k: math.inf for k in _ID_KEYS}
    hi = {k: -math.inf for k in _ID_KEYS}
    arr_end = arr
    for s, e, ev in _event_spans(text, arr):
        arr_end = e
        ts = ev.get("ts")
        ts = float(ts) if isinstance(ts, (int, float)) else None
        args = ev.get("args") or {}
        for k in _ID_KEYS:
            v = ev.get(k) if k == "id" else args.get(k)
            if isinstance(v, int):
                lo[k], hi[k] = min(lo[k], v), max(hi[k], v)
        name = ev.get("name", "")
        if ev.get("ph") == "X" and isinstance(name, str) and _STEP_RE.fullmatch(name):
            steps.append((ts, ts + float(ev.get("dur", 0))))
        ph, cat = ev.get("ph"), ev.get("cat")
        if ts is None or ph in ("M", "i") or cat == "Trace":
            kind = "once"
        elif cat in _GPU_CATS:
            kind = "gpu"
        elif ph in ("s", "f") and _is_gpu_pid(ev):
            kind = "gpu"  # a flow end drawn on the GPU row: it belongs to its launch
        else:
            kind = "cpu"
        corr = args.get("correlation") if ph == "X" else ev.get("id")
        end_ts = ts + float(ev.get("dur", 0) or 0) if ts is not None else 0.0
        spans.append((s, e, kind, ts or 0.0, end_ts, corr))
    if not steps:
        raise ValueError(f"{src}: no ProfilerStep#N events to repeat")
    w0 = min(s for s, _ in steps)
    w1 = max(e for _, e in steps)
    # Which step each event belongs to (-1 = outside the window: written once). CPU events by time, GPU
    # events and GPU-side flow ends by the correlation of their launch, so a kernel that runs after its
    # step's end still moves with its launch.
    starts = sorted(s for s, _ in steps)
    step_of = [
        bisect.bisect_right(starts, ts) - 1 if kind == "cpu" and w0 <= ts < w1 else -1
        for _, _, kind, ts, _, _ in spans
    ]
    corr_step = {sp[5]: k for sp, k in zip(spans, step_of, strict=True) if k >= 0 and sp[5] is not None}
    for i, (_, _, kind, ts, _, corr) in enumerate(spans):
        if kind == "gpu":
            if corr is not None:
                step_of[i] = corr_step.get(corr, -1)
            elif w0 <= ts < w1:
                step_of[i] = bisect.bisect_right(starts, ts) - 1
    n_steps = len(steps)
    sep = ",\n  " if "\n" in text[arr : arr + 200] else ", "
    per_step: list[list[str]] = [[] for _ in range(n_steps)]
    once_parts: list[str] = []
    last = w0
    for (s, e, _, _, end_ts, _), k in zip(spans, step_of, strict=True):
        if k >= 0:
            per_step[k].append(text[s:e])
            last = max(last, end_ts)
        else:
            once_parts.append(text[s:e])
    bodies = [sep.join(parts) for parts in per_step]
    period = math.ceil(last - w0) + 10  # integer µs: decimals stay as they are
    spans_of = {k: int(hi[k] - lo[k] + 1) if hi[k] >= lo[k] else 0 for k in _ID_KEYS}
    tail = text[arr_end:]
    tail = tail[tail.index("]") :]
    budget = target_bytes - (
        len(head) + len(m.group(0)) + sum(len(p) + len(sep) for p in once_parts) + len(tail)
    )
    del text, spans, step_of, per_step

    # Whole repetitions, then the first steps of one more, until the size budget is used.
    plan: list[tuple[int, int]] = []  # (repetition, step index)
    rep = 0
    while budget > 0 or not plan:
        for k, body in enumerate(bodies):
            if body and (budget > 0 or not plan):
                plan.append((rep, k))
                budget -= len(body) + len(sep)
        rep += 1
    with _open_out(out) as f:
        f.write(head)
        f.write('"traceEvents": [\n  ')
        first = True
        for rep, k in plan:
            if not first:
                f.write(sep)
            first = False
            f.write(bodies[k] if rep == 0 else _shift(bodies[k], rep * period, rep, n_steps, spans_of))
        for p in once_parts:
            f.write(sep)
            f.write(p)
        f.write("\n  " + tail)
    return out


def _is_gpu_pid(ev: dict[str, Any]) -> bool:
    """An event on a GPU row: its pid is a small device index (real CPU pids are large)."""
    pid = ev.get("pid")
    return isinstance(pid, int) and 0 <= pid < 64


def _shift(body: str, dt_us: int, rep: int, n_steps: int, spans_of: dict[str, int]) -> str:
    def sub(m: re.Match[str]) -> str:
        if m.group(5):
            return f"{m.group(5)}{int(m.group(6)) + rep * n_steps}"
        key, colon, num, frac = m.group(1), m.group(2), int(m.group(3)), m.group(4) or ""
        if key == "ts":
            return f'"ts"{colon}{num + dt_us}{frac}'
        if frac:
            return m.group(0)
        return f'"{key}"{colon}{num + rep * spans_of[key]}'

    return _SHIFT_RE.sub(sub, body)
