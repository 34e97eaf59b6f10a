#!/bin/bash
# Launch 8-rank torch_npu training on one Atlas 800T A2 node.
set -euo pipefail

source /usr/local/Ascend/ascend-toolkit/set_env.sh

export ASCEND_LAUNCH_BLOCKING=1
export ASCEND_GLOBAL_LOG_LEVEL=1
export PYTORCH_NPU_ALLOC_CONF="max_split_size_mb:128"
export HCCL_ALGO="level0:NA;level1:ring"
export HCCL_CONNECT_TIMEOUT=1200

MASTER_ADDR=127.0.0.1
torchrun --nproc_per_node=8 --master_addr=${MASTER_ADDR} npu_train.py --batch-size 64 "$@"
