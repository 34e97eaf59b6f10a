#!/usr/bin/env bash
# Two-node GPU job; the debug switch was left on the launch line.
export NCCL_DEBUG=WARN
export NCCL_IB_DISABLE=1
CUDA_LAUNCH_BLOCKING=1 torchrun --nnodes=2 --nproc_per_node=8 gpu_ddp_train.py --epochs 90
