"""A small torchrun job that hangs on purpose, for recording real Flight Recorder dumps and stack snapshots.

Every rank runs STEPS training-like steps of all_reduce on a gloo process group (and one sub-group of the
even ranks), with Flight Recorder on (TORCH_FR_BUFFER_SIZE). At step HANG_STEP the rank HANG_RANK misbehaves:
  --mode skip   it skips that step's all_reduce and goes on to the barrier (the others wait in all_reduce);
  --mode stuck  it sleeps in `load_batch` before the all_reduce (stuck before its collective).
Every rank writes its pid to OUT/pids/<rank>, so a stack snapshot can be taken while the job hangs, and
when OUT/dump_now appears writes its Flight Recorder dump to `$TORCH_FR_DUMP_TEMP_FILE<rank>` (the name
torch's own dump-on-timeout uses). The recorder then ends the job.

Run (needs torch): torchrun --nproc-per-node 8 evals/record/hang_job.py --mode skip --out DIR
"""

from __future__ import annotations

import argparse
import datetime
import os
import threading
import time

import torch
import torch.distributed as dist


def load_batch(step: int, stuck: bool) -> torch.Tensor:
    if stuck:
        time.sleep(3600)  # the stack snapshot shows this frame
    return torch.full((4096,), float(step))


def dump_when_asked(flag: str, rank: int) -> None:
    while not os.path.exists(flag):
        time.sleep(0.2)
    import torch._C._distributed_c10d as c10d

    data = c10d._dump_fr_trace(True, True, False)
    prefix = os.environ["TORCH_FR_DUMP_TEMP_FILE"]
    with open(f"{prefix}{rank}", "wb") as f:
        f.write(data)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=["skip", "stuck", "none"], required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--hang-step", type=int, default=4)
    ap.add_argument("--hang-rank", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--debug-server-dir", help="also start torch.distributed.debug's server, dumping every "
                                               "rank's stacks into this folder every 3 s (needs aiohttp, jinja2)")
    a = ap.parse_args()
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    evens = dist.new_group([r for r in range(world) if r % 2 == 0])
    if a.debug_server_dir:
        from torch.distributed.debug import start_debug_server

        start_debug_server(port=26011, dump_dir=a.debug_server_dir, dump_interval=3.0, enabled_dumps={"stacks"})
    os.makedirs(f"{a.out}/pids", exist_ok=True)
    with open(f"{a.out}/pids/{rank}", "w") as f:
        f.write(str(os.getpid()))
    threading.Thread(target=dump_when_asked, args=(f"{a.out}/dump_now", rank), daemon=True).start()
    try:
        for step in range(a.steps):
            bad = rank == a.hang_rank and step == a.hang_step
            x = load_batch(step, bad and a.mode == "stuck")
            if not (bad and a.mode == "skip"):
                dist.all_reduce(x)
            if rank % 2 == 0:
                dist.all_reduce(x[:256], group=evens)
        dist.barrier()
    except Exception as e:  # the collective timeout ends the hang
        print(f"rank {rank}: {type(e).__name__}: {str(e)[:160]}", flush=True)
    os._exit(0)


if __name__ == "__main__":
    main()
