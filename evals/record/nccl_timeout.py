"""Record real NCCL Flight Recorder dumps on one GPU: an on-demand dump, and the dump torch writes itself
when a collective times out.

World size 1 (NCCL needs one GPU per rank). Five all_reduces complete; then a ~30 s device sleep is queued on
the stream ahead of one more all_reduce, so that collective cannot start before the 3 s timeout: the NCCL
watchdog times out and, with TORCH_NCCL_DUMP_ON_TIMEOUT=1, writes the Flight Recorder buffer to
`$TORCH_NCCL_DEBUG_INFO_TEMP_FILE<rank>`. Run: python nccl_timeout.py OUTDIR (needs torch with CUDA).
"""

from __future__ import annotations

import datetime
import os
import sys
import time


def main() -> None:
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29561", RANK="0", WORLD_SIZE="1",
                      TORCH_FR_BUFFER_SIZE="2000", TORCH_NCCL_TRACE_BUFFER_SIZE="2000",
                      TORCH_NCCL_DUMP_ON_TIMEOUT="1",
                      TORCH_NCCL_DEBUG_INFO_TEMP_FILE=f"{out}/nccl_timeout_trace_rank_")
    import torch
    import torch.distributed as dist

    dist.init_process_group("nccl", timeout=datetime.timedelta(seconds=3), device_id=torch.device("cuda:0"))
    x = torch.ones(1 << 20, device="cuda")
    for _ in range(5):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    import torch._C._distributed_c10d as c10d

    with open(f"{out}/nccl_ondemand_trace_rank_0", "wb") as f:
        f.write(c10d._dump_fr_trace(True, True, False))
    torch.cuda._sleep(int(60e9))  # ~30 s of device time at ~2 GHz: the next collective waits behind it
    dist.all_reduce(x)
    print("queued the stalled all_reduce", torch.__version__, torch.cuda.nccl.version(), flush=True)
    for _ in range(60):
        time.sleep(1)
        if os.path.exists(f"{out}/nccl_timeout_trace_rank_0"):
            time.sleep(2)
            break
    print("files:", sorted(os.listdir(out)), flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
