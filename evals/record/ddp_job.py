"""A torchrun DDP training job (gloo, CPU) for recording real data-parallel profiles with a planted problem.

Unlike train_job.py (plain all_reduce after the backward), this is torch's DistributedDataParallel: gradient
buckets are all-reduced by the reducer while the backward runs (autograd hooks), and the step waits for the
last bucket at the end of the backward; the model's buffers and parameters are broadcast at construction.
The model: a residual MLP (LayerNorm -> Linear(width, hidden) -> GELU -> Linear(hidden, width) per block, then a
classifier), AdamW, random data read through a real DataLoader (num_workers=0, one dataset item is one batch).

Plants (each off by default):
 --slow-rank R --extra-mm N       rank R runs N extra 384x384 matmuls after its forward every step;
 --slow-loader-rank R --loader-ms X  rank R's dataset __getitem__ does ~X ms of CPU work per batch;
 --slow-loader-rank R --loader-sleep-ms X  rank R's __getitem__ waits X ms per batch (time.sleep: a loader bound
                                  by its storage or network, which takes no CPU from the other ranks).

Timing: meta/step_times_rank<r>.json holds step_ms per step (time.perf_counter() from before the batch is
fetched to after optimizer.step() + zero_grad()) and profiled_steps (the ProfilerStep#N the trace holds).

Run: torchrun --nproc-per-node 2 --master-port 29610 evals/record/ddp_job.py --out DIR [plant]
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
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler
from torch.utils.data import DataLoader, Dataset
from train_job import matmul_work  # the same extra compute (torchrun puts this script's folder on sys.path)


class RandomBatches(Dataset):
    """Item i is a whole batch; its own seeding and loader work (not train_job's): the ddp2_* recordings were
    made with it."""

    def __init__(self, n, batch, width, classes, seed, work_ms=0.0, sleep_ms=0.0):
        self.n, self.batch, self.width, self.classes, self.seed = n, batch, width, classes, seed
        self.work_ms, self.sleep_ms = work_ms, sleep_ms

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.work_ms > 0:
            t0 = time.perf_counter()
            while (time.perf_counter() - t0) * 1000 < self.work_ms:
                matmul_work(1, seed=i)
        if self.sleep_ms > 0:
            time.sleep(self.sleep_ms / 1000)
        g = torch.Generator().manual_seed(self.seed * 100_003 + i)
        return (torch.randn(self.batch, self.width, generator=g),
                torch.randint(0, self.classes, (self.batch,), generator=g))


class Net(nn.Module):
    def __init__(self, width, hidden, layers, classes):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Sequential(nn.LayerNorm(width), nn.Linear(width, hidden), nn.GELU(),
                                                  nn.Linear(hidden, width)) for _ in range(layers))
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        for b in self.blocks:
            x = x + b(x)
        return self.head(x)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=24)
    ap.add_argument("--wait", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--profile-steps", type=int, default=4)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--classes", type=int, default=16)
    ap.add_argument("--bucket-mb", type=float, default=1.0)
    ap.add_argument("--slow-rank", type=int, default=-1)
    ap.add_argument("--extra-mm", type=int, default=0)
    ap.add_argument("--slow-loader-rank", type=int, default=-1)
    ap.add_argument("--loader-ms", type=float, default=0.0)
    ap.add_argument("--loader-sleep-ms", type=float, default=0.0)
    a = ap.parse_args()

    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    os.makedirs(f"{a.out}/traces", exist_ok=True)
    os.makedirs(f"{a.out}/meta", exist_ok=True)
    log = open(f"{a.out}/stdout_rank{rank}.txt", "w")  # noqa: SIM115 (open for the whole run)

    torch.manual_seed(1234)
    model = DDP(Net(a.width, a.hidden, a.layers, a.classes), bucket_cap_mb=a.bucket_mb)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    ds = RandomBatches(a.steps + 1, a.batch, a.width, a.classes, seed=rank,
                       work_ms=a.loader_ms if rank == a.slow_loader_rank else 0.0,
                       sleep_ms=a.loader_sleep_ms if rank == a.slow_loader_rank else 0.0)
    loader = DataLoader(ds, batch_size=None, shuffle=False, num_workers=0)
    n_extra = a.extra_mm if rank == a.slow_rank else 0
    log.write(f"world {world} rank {rank} extra_mm {n_extra} loader_ms "
              f"{a.loader_ms if rank == a.slow_loader_rank else 0.0} loader_sleep_ms "
              f"{a.loader_sleep_ms if rank == a.slow_loader_rank else 0.0} torch {torch.__version__}\n")
    prof = profile(activities=[ProfilerActivity.CPU],
                   schedule=schedule(wait=a.wait, warmup=a.warmup, active=a.profile_steps, repeat=1),
                   on_trace_ready=tensorboard_trace_handler(f"{a.out}/traces", worker_name=f"rank{rank}",
                                                            use_gzip=True),
                   record_shapes=True)
    profiled = list(range(a.wait + a.warmup, a.wait + a.warmup + a.profile_steps))
    step_ms, losses = [], []
    it = iter(loader)
    dist.barrier()
    with prof:
        for step in range(a.steps):
            t0 = time.perf_counter()
            x, y = next(it)
            out = model(x)
            if n_extra:
                matmul_work(n_extra, seed=step)
            loss = F.cross_entropy(out, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            step_ms.append(round((time.perf_counter() - t0) * 1000, 3))
            losses.append(round(float(loss.detach()), 5))
            log.write(f"step {step} step_ms {step_ms[-1]:.3f}\n")
            prof.step()
    meta = {"rank": rank, "step_ms": step_ms, "profiled_steps": profiled, "world_size": world, "ddp": True,
            "extra_matmuls_per_step": n_extra, "loader_ms": a.loader_ms if rank == a.slow_loader_rank else 0.0,
            "loader_sleep_ms": a.loader_sleep_ms if rank == a.slow_loader_rank else 0.0,
            "loss": losses, "argv": sys.argv[1:], "torch": torch.__version__}
    with open(f"{a.out}/meta/step_times_rank{rank}.json", "w") as f:
        json.dump(meta, f)
    log.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
