# ruff: noqa
# Test input for knowledge/edit.py: a realistic user script, kept as users write it (not linted).
# Swin-T fine-tuning on Ascend NPUs, already tuned.
import gc
import os

import torch
import torch_npu
torch_npu.npu.set_compile_mode(jit_compile=False)
torch_npu.npu.config.allow_internal_format = False
from torch.utils.data import DataLoader

from mymodels import build_swin, build_dataset


def train(args):
    model = build_swin(args).npu()
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0])
    optimizer = torch_npu.optim.NpuFusedAdamW(model.parameters(), lr=args.lr)
    loader = DataLoader(build_dataset(args), batch_size=32, num_workers=4, pin_memory=True)
    gc.collect()
    gc.freeze()
    for samples, targets in loader:
        loss = model(samples.npu(non_blocking=True), targets.npu(non_blocking=True))
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
