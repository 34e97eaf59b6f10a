#!/bin/bash
# Launch 8-rank torch_npu training, already tuned.
export ACLNN_CACHE_LIMIT=200000
export ASCEND_GLOBAL_LOG_LEVEL=3
export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True
export HOST_CACHE_CAPACITY=20
export TASK_QUEUE_ENABLE=2
export CPU_AFFINITY_CONF=1
unset ASCEND_LAUNCH_BLOCKING
unset HCCL_ALGO

torchrun --nproc_per_node=8 npu_train.py
