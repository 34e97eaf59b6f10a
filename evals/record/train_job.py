"""A small torchrun training job (gloo, CPU) for recording real multi-rank profiles with planted problems.

A residual MLP (LayerNorm -> Linear -> GELU -> Linear per block) trains on random data with AdamW. The ranks
form a PP x DP x TP grid: rank = (stage * dp + dp_index) * tp + tp_index (tp = 1: stage * dp + dp_index).
With --tp > 1 each block is Megatron-style tensor parallel over its TP group: fc1 column-parallel (hidden / tp
outputs per rank), fc2 row-parallel, an all_reduce of the block's output in the forward and of its input
gradient in the backward (autograd functions on the main thread); the replicated parameters (LayerNorm, the
input and head layers, fc2's bias) stay replicated because their inputs and gradients are. Each pipeline stage owns --layers-per-stage blocks; stages
exchange activations forward and gradients backward with blocking dist.send / dist.recv, GPipe-like (all
microbatches forward, then all backward in reverse order). Data-parallel gradients are summed with plain
dist.all_reduce of flattened gradient buckets (about --bucket-mb each, reverse parameter order, after the
backward, no overlap, no DDP) on each stage's DP group: the default group when pp == 1, else groups made with
new_group, every rank creating every group in the same order. Every rank reads its batches from a real
torch.utils.data.DataLoader (num_workers=0, batch_size=None: one dataset item is one batch), so the profiler
shows the DataLoader ops.

Plants (each off by default):
 --slow-rank R --extra-compute-ms X  rank R runs extra 384x384 matmuls after its forward every step (real
                                    compute: a fixed count, calibrated once on rank R alone to take ~X ms;
                                    --extra-mm N sets the count instead);
 --slow-loader-rank R --loader-ms X  the dataset __getitem__ of rank R does ~X ms of CPU work per batch
                                    (384x384 matmuls until X ms have passed; --loader-sleep: time.sleep);
 --late-rank R --stall-ms X          rank R sleeps X ms on the host (time.sleep) before its forward each step;
 --heavy-stage S --stage-factor F    the hidden width of stage S's blocks is F times bigger (F x its compute).

Timing: meta/step_times_rank<r>.json holds, for every step, step_ms = time.perf_counter() from the start of
the step (before the batch is fetched) to the end of the optimizer step (no barrier inside the loop; one
before it), and step_wall_ms = start of the step to start of the next (adds the print and prof.step(), where
the trace export happens). profiled_steps: the steps the trace holds (ProfilerStep#N, N = step index from 0).

Run: torchrun --nproc-per-node 4 --master-port 29600 evals/record/train_job.py --dp 2 --pp 2 --out DIR
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
from torch.utils.data import DataLoader, Dataset

EXTRA_N = 384  # matmul size of the extra compute (a shape the model never uses)


def matmul_work(n_mm: int, seed: int = 1) -> float:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(EXTRA_N, EXTRA_N, generator=g)
    b = torch.randn(EXTRA_N, EXTRA_N, generator=g) * (1.0 / EXTRA_N ** 0.5)
    for _ in range(n_mm):
        a = torch.tanh(a @ b)
    return float(a[0, 0])


class RandomBatches(Dataset):
    """Item i is a whole batch (x, y), made from a generator seeded by (seed, i)."""

    def __init__(self, n, batch, width, classes, seed, work_ms=0.0, sleep=False):
        self.n, self.batch, self.width, self.classes, self.seed = n, batch, width, classes, seed
        self.work_ms, self.sleep = work_ms, sleep

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        t0 = time.perf_counter()
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + i)
        x = torch.randn(self.batch, self.width, generator=g)
        y = torch.randint(self.classes, (self.batch,), generator=g)
        if self.work_ms > 0:
            if self.sleep:
                time.sleep(self.work_ms / 1000)
            else:  # "augmentation": real CPU work until the budget is spent
                b = torch.randn(EXTRA_N, EXTRA_N, generator=g) * (1.0 / EXTRA_N ** 0.5)
                a = x[:EXTRA_N, :EXTRA_N] if x.shape[0] >= EXTRA_N and x.shape[1] >= EXTRA_N else torch.randn(
                    EXTRA_N, EXTRA_N, generator=g)
                while (time.perf_counter() - t0) * 1000 < self.work_ms:
                    a = torch.tanh(a @ b)
                x = x + 1e-3 * a.mean()
        return x, y


class _CopyToTP(torch.autograd.Function):
    """Identity forward; all_reduce of the input gradient over the TP group backward (Megatron's f)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, g):
        g = g.contiguous()
        dist.all_reduce(g, group=ctx.group)
        return g, None


class _ReduceFromTP(torch.autograd.Function):
    """all_reduce over the TP group forward; identity backward (Megatron's g)."""

    @staticmethod
    def forward(ctx, x, group):
        x = x.contiguous()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, g):
        return g, None


class Block(nn.Module):
    def __init__(self, width, hidden, tp_group=None, tp=1):
        super().__init__()
        self.tp_group = tp_group if tp > 1 else None
        self.ln = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, hidden // tp)
        self.fc2 = nn.Linear(hidden // tp, width, bias=self.tp_group is None)
        self.bias = nn.Parameter(torch.zeros(width)) if self.tp_group is not None else None

    def forward(self, x):
        h = self.ln(x)
        if self.tp_group is None:
            return x + self.fc2(F.gelu(self.fc1(h)))
        y = self.fc2(F.gelu(self.fc1(_CopyToTP.apply(h, self.tp_group))))
        return x + _ReduceFromTP.apply(y, self.tp_group) + self.bias


class Stage(nn.Module):
    def __init__(self, width, hidden, layers, classes, first, last, tp_group=None, tp=1):
        super().__init__()
        self.inp = nn.Linear(width, width) if first else None
        self.blocks = nn.ModuleList([Block(width, hidden, tp_group, tp) for _ in range(layers)])
        self.head = nn.Sequential(nn.LayerNorm(width), nn.Linear(width, classes)) if last else None

    def forward(self, x):
        if self.inp is not None:
            x = self.inp(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x) if self.head is not None else x


def make_buckets(params, cap_bytes):
    buckets, cur, size = [], [], 0
    for p in reversed(params):
        cur.append(p)
        size += p.numel() * p.element_size()
        if size >= cap_bytes:
            buckets.append(cur)
            cur, size = [], 0
    if cur:
        buckets.append(cur)
    return buckets


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--profile-steps", type=int, default=4, help="active steps of the profiler schedule")
    ap.add_argument("--wait", type=int, default=8)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--microbatches", type=int, default=4, help="pipeline microbatches (pp > 1)")
    ap.add_argument("--batch", type=int, default=256, help="batch per DP replica per step")
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers-per-stage", type=int, default=3)
    ap.add_argument("--classes", type=int, default=16)
    ap.add_argument("--bucket-mb", type=float, default=1.0)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--extra-compute-ms", type=float, default=0.0)
    ap.add_argument("--extra-mm", type=int, default=-1, help="fixed extra matmul count (no calibration)")
    ap.add_argument("--slow-loader-rank", type=int, default=-1)
    ap.add_argument("--loader-ms", type=float, default=0.0)
    ap.add_argument("--loader-sleep", action="store_true")
    ap.add_argument("--late-rank", type=int, default=-1)
    ap.add_argument("--stall-ms", type=float, default=0.0)
    ap.add_argument("--heavy-stage", type=int, default=-1)
    ap.add_argument("--stage-factor", type=float, default=1.0)
    a = ap.parse_args()

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    assert world == a.dp * a.pp * a.tp, f"world size {world} != dp {a.dp} x pp {a.pp} x tp {a.tp}"
    stage, dpi, tpi = rank // (a.dp * a.tp), rank // a.tp % a.dp, rank % a.tp
    first, last = stage == 0, stage == a.pp - 1

    os.makedirs(f"{a.out}/traces", exist_ok=True)
    os.makedirs(f"{a.out}/meta", exist_ok=True)
    log = open(f"{a.out}/stdout_rank{rank}.txt", "w")  # noqa: SIM115 (open for the whole run)

    def say(msg):
        print(f"rank {rank}: {msg}", flush=True)
        log.write(msg + "\n")
        log.flush()

    # DP groups, one per (stage, TP index), then TP groups, one per (stage, DP index), made by every rank in the
    # same order. pp == tp == 1: the default group.
    def at(s, d, t):
        return (s * a.dp + d) * a.tp + t

    dp_group = tp_group = None
    if a.pp > 1 or a.tp > 1:
        for s in range(a.pp):
            for t in range(a.tp):
                g = dist.new_group([at(s, d, t) for d in range(a.dp)])
                if (s, t) == (stage, tpi):
                    dp_group = g
        for s in range(a.pp):
            for d in range(a.dp if a.tp > 1 else 0):
                g = dist.new_group([at(s, d, t) for t in range(a.tp)])
                if (s, d) == (stage, dpi):
                    tp_group = g
    prev_rank = at(stage - 1, dpi, tpi) if not first else None
    next_rank = at(stage + 1, dpi, tpi) if not last else None

    torch.manual_seed(1234 + stage)  # every replica of a stage starts from the same weights
    hidden = int(a.hidden * (a.stage_factor if stage == a.heavy_stage else 1.0))
    model = Stage(a.width, hidden, a.layers_per_stage, a.classes, first, last, tp_group, a.tp)
    params = [p for p in model.parameters()]
    opt = torch.optim.AdamW(params, lr=1e-3, foreach=True)
    buckets = make_buckets(params, int(a.bucket_mb * 2 ** 20)) if a.dp > 1 else []

    ds = RandomBatches(a.steps + 1, a.batch, a.width, a.classes, seed=dpi,
                       work_ms=a.loader_ms if rank == a.slow_loader_rank else 0.0, sleep=a.loader_sleep)
    loader = DataLoader(ds, batch_size=None, shuffle=False, num_workers=0)

    # Calibrate the extra compute on the slow rank alone (the others wait in a barrier).
    n_extra = 0
    if rank == a.slow_rank and a.extra_compute_ms > 0:
        if a.extra_mm >= 0:
            n_extra = a.extra_mm
        else:
            matmul_work(5)
            t0 = time.perf_counter()
            matmul_work(40)
            per_mm = (time.perf_counter() - t0) * 1000 / 40
            n_extra = max(1, round(a.extra_compute_ms / per_mm))
            say(f"extra compute calibration: {per_mm:.3f} ms per {EXTRA_N}x{EXTRA_N} matmul "
                f"-> {n_extra} per step")
    dist.barrier()

    n_params = sum(p.numel() for p in params)
    say(f"world {world} dp {a.dp} pp {a.pp} tp {a.tp} stage {stage} dp_index {dpi} tp_index {tpi} params {n_params} hidden {hidden} "
        f"buckets {[sum(p.numel() for p in b) for b in buckets]} torch {torch.__version__} "
        f"threads {torch.get_num_threads()}")

    M = a.microbatches if a.pp > 1 else 1
    mb = a.batch // M
    prof = profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=a.wait, warmup=a.warmup, active=a.profile_steps, repeat=1),
        on_trace_ready=tensorboard_trace_handler(f"{a.out}/traces", worker_name=f"rank{rank}", use_gzip=True),
        record_shapes=True,
    )
    profiled = list(range(a.wait + a.warmup, a.wait + a.warmup + a.profile_steps))
    step_ms, wall_ms, begin_us, losses = [], [], [], []
    it = iter(loader)
    dist.barrier()
    t_prev = None
    with prof:
        for step in range(a.steps):
            t0 = time.perf_counter()
            if t_prev is not None:
                wall_ms.append(round((t0 - t_prev) * 1000, 3))
            t_prev = t0
            begin_us.append(time.time_ns() // 1000)
            x, y = next(it)
            if rank == a.late_rank and a.stall_ms > 0:
                time.sleep(a.stall_ms / 1000)  # a host stall before the forward
            # forward, all microbatches
            ins, outs, loss_sum = [], [], 0.0
            for m in range(M):
                if first:
                    inp = x[m * mb:(m + 1) * mb]
                else:
                    inp = torch.empty(mb, a.width)
                    dist.recv(inp, src=prev_rank)
                    inp.requires_grad_(True)
                out = model(inp)
                if last:
                    out = F.cross_entropy(out, y[m * mb:(m + 1) * mb]) / M
                    loss_sum += float(out.detach())
                else:
                    dist.send(out.detach(), dst=next_rank)
                ins.append(inp)
                outs.append(out)
            if n_extra:
                matmul_work(n_extra, seed=step)
            # backward, microbatches in reverse order
            for m in reversed(range(M)):
                if last:
                    outs[m].backward()
                else:
                    grad = torch.empty(mb, a.width)
                    dist.recv(grad, src=next_rank)
                    outs[m].backward(grad)
                if not first:
                    dist.send(ins[m].grad, dst=prev_rank)
            del ins, outs
            # DP gradient all_reduce, flattened buckets
            for b in buckets:
                flat = torch._utils._flatten_dense_tensors([p.grad for p in b])
                dist.all_reduce(flat, group=dp_group)
                flat /= a.dp
                grads = torch._utils._unflatten_dense_tensors(flat, [p.grad for p in b])
                for p, g in zip(b, grads, strict=True):
                    p.grad.copy_(g)
            opt.step()
            opt.zero_grad(set_to_none=True)
            t1 = time.perf_counter()
            step_ms.append(round((t1 - t0) * 1000, 3))
            losses.append(round(loss_sum, 5) if last else None)
            say(f"step {step} step_ms {step_ms[-1]:.3f}" + (f" loss {loss_sum:.4f}" if last else ""))
            prof.step()
    wall_ms.append(round((time.perf_counter() - t_prev) * 1000, 3))

    meta = {"rank": rank, "step_ms": step_ms, "profiled_steps": profiled, "step_wall_ms": wall_ms,
            "step_begin_unix_us": begin_us, "stage": stage, "dp_index": dpi, "tp_index": tpi,
            "world_size": world, "dp": a.dp, "pp": a.pp, "tp": a.tp, "microbatches": M, "extra_matmuls_per_step": n_extra,
            "loss": losses, "argv": sys.argv[1:], "torch": torch.__version__}
    with open(f"{a.out}/meta/step_times_rank{rank}.json", "w") as f:
        json.dump(meta, f)
    log.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
