# ruff: noqa
# Test input for knowledge/edit.py: a realistic user script, kept as users write it (not linted).
"""ResNet-50 on ImageNet with DistributedDataParallel on NVIDIA GPUs (launched with torchrun)."""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torchvision
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="/data/imagenet")
    parser.add_argument("--epochs", type=int, default=90)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.1)
    return parser.parse_args()


def main():
    args = parse_args()
    dist.init_process_group("nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda", local_rank)

    train_set = torchvision.datasets.ImageFolder(f"{args.data}/train", transform=torchvision.transforms.ToTensor())
    sampler = DistributedSampler(train_set)
    train_loader = DataLoader(
        train_set,
        batch_size=args.batch_size,
        sampler=sampler,
        num_workers=0,
    )
    val_loader = DataLoader(train_set, batch_size=args.batch_size, num_workers=2)

    model = torchvision.models.resnet50().to(device)
    model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    model = DDP(model, device_ids=[local_rank])
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, foreach=True)

    # main training loop
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for step, (images, labels) in enumerate(train_loader):
            images = images.to(device)
            labels = labels.to(device)
            loss = criterion(model(images), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 100 == 0:
                torch.cuda.empty_cache()
            if step % 50 == 0 and dist.get_rank() == 0:
                print(f"epoch {epoch} step {step} loss {loss.item():.4f}")
        model.eval()
        with torch.no_grad():
            for images, labels in val_loader:
                model(images.to(device))
        model.cpu().to(device)


if __name__ == "__main__":
    main()
