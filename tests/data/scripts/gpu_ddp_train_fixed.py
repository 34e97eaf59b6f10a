# ruff: noqa
# Test input for knowledge/edit.py: a realistic user script, kept as users write it (not linted).
"""ResNet-50 on ImageNet with DistributedDataParallel, already tuned."""

import gc
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

torch.set_float32_matmul_precision("high")


def main():
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank)
    train_set = torchvision.datasets.ImageFolder("/data/imagenet/train")
    sampler = DistributedSampler(train_set)
    train_loader = DataLoader(train_set, batch_size=64, sampler=sampler, num_workers=8, pin_memory=True,
                              persistent_workers=True, prefetch_factor=2, drop_last=True)
    model = DDP(torchvision.models.resnet50().to(device), device_ids=[local_rank], bucket_cap_mb=50,
                gradient_as_bucket_view=True)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)

    gc.collect()
    gc.freeze()
    for epoch in range(90):
        sampler.set_epoch(epoch)
        for images, labels in train_loader:
            images = images.to(device, non_blocking=True)
            labels = labels.to(device, non_blocking=True)
            loss = criterion(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()


if __name__ == "__main__":
    main()
