# ruff: noqa
# Test input for knowledge/edit.py: a realistic user script, kept as users write it (not linted).
# Swin-T fine-tuning on Ascend NPUs with torch_npu (8 ranks per node).
import os

os.environ["ASCEND_LAUNCH_BLOCKING"] = "1"
os.environ.setdefault("PYTORCH_NPU_ALLOC_CONF", "max_split_size_mb:256")

import torch
import torch_npu
from torch import nn, optim
from torch_npu.contrib import transfer_to_npu  # noqa: F401
from torch.utils.data import DataLoader

from mymodels import build_swin, build_dataset


def train(args):
    torch.distributed.init_process_group("hccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.npu.set_device(local_rank)
    model = build_swin(args).npu()
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[local_rank],
                                                      find_unused_parameters=False)
    optimizer = optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.05,
                            foreach=False)
    loader = DataLoader(build_dataset(args), batch_size=args.batch_size, shuffle=True, num_workers=args.workers)

    step = 0
    while step < args.max_steps:
        for samples, targets in loader:
            samples = samples.npu(non_blocking=True)
            targets = targets.npu()
            loss = model(samples, targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            torch.npu.empty_cache()
            step += 1
    torch.npu.empty_cache()
