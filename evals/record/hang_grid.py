"""A torchrun job with several process groups that hangs (or not) on purpose, for recording real Flight Recorder
dumps and py-spy stack snapshots of distributed hangs under the gloo backend.

Three jobs (``--job``), each with a plant (``--plant``) that a recorder can switch on:

  grid      ROWS x COLS ranks (rank = row * COLS + col).  Besides the default group, every rank creates (in the same
            order on every rank, as torch requires) one data-parallel group per column, all with
            ``group_desc="DATA_PARALLEL_GROUP"``, then one tensor-parallel group per row, all with
            ``group_desc="TENSOR_MODEL_PARALLEL_GROUP"`` (several groups share one description).  Each step: an
            ``all_reduce`` on the rank's row (TP) group, then one on its column (DP) group, then (even steps only)
            one on the default group.  Plants:
              stuck   rank BAD_RANK sleeps in ``load_batch`` before its TP all_reduce of step BAD_STEP;
              died    rank BAD_RANK calls ``os._exit(1)`` before its TP all_reduce of step BAD_STEP.
  flat      every step an ``all_reduce`` of 4096 floats, then a ``broadcast`` of 1024 floats from rank 0, on the
            default group; a final ``barrier``.  Plants:
              order_swap     rank BAD_RANK issues the broadcast before the all_reduce in step BAD_STEP;
              size_mismatch  rank BAD_RANK's all_reduce tensor has MISMATCH_NUMEL floats (default 2048; the
                             recorder uses 8192) in step BAD_STEP.
  pipeline  one pipeline stage per rank, MICRO micro-batches per step, GPipe order: forward (``recv_activation``
            from the previous stage, ``send_activation`` to the next), then backward (``recv_grad`` from the next,
            ``send_grad`` to the previous) with ``dist.send`` / ``dist.recv`` (with ``--loss-allreduce`` then an
            ``all_reduce`` of 8 floats, a loss, on the default group); a final ``barrier``.  Plant:
              pp_deadlock    stage BAD_RANK does not send the activation of its last micro-batch in step BAD_STEP
                             and goes on to its backward, where it waits for a gradient from the next stage, which
                             itself waits for that activation: the two wait on each other.  The stages before it
                             wait in ``recv_grad``, those after it in ``recv_activation``.
  ``--plant none`` runs the job clean: after the final barrier every rank idles in ``idle_when_done``.

A collective that raises (e.g. gloo's "connection closed" once a peer has died) is caught; the rank prints it and
waits in ``hold_after_error`` so that its dump and stack can still be taken.

For the recorder every rank writes its pid to OUT/pids/<rank> and its groups to OUT/groups/<rank>.json (as
ProcessGroupNCCL would record them in pg_config, which gloo's recorder leaves empty); the planted rank touches
OUT/planted when it reaches the plant, a clean rank OUT/done/<rank> after the final barrier; when OUT/dump_now
appears every rank writes its
Flight Recorder dump (``torch._C._distributed_c10d._dump_fr_trace(True, True, False)``) to
``$TORCH_FR_DUMP_TEMP_FILE<rank>``, or with ``--node-size N`` to ``<dir>/node<rank // N>/<base><rank>`` where
<dir>/<base> is that prefix.  The recorder then ends the job (kill the process group).  Flight Recorder must be on:
``TORCH_FR_BUFFER_SIZE=2000``.

Run (needs torch; 2 CPU cores are enough for 16 ranks):
  TORCH_FR_BUFFER_SIZE=2000 TORCH_FR_DUMP_TEMP_FILE=OUT/fr/gloo_fr_trace_rank_ \\
    torchrun --nproc-per-node 16 evals/record/hang_grid.py --job grid --plant stuck --out OUT --node-size 8
evals/record/record_hang_grid.sh records every scenario.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import threading
import time

import torch
import torch.distributed as dist


def touch(path: str) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(str(time.time()))


def dump_when_asked(flag: str, rank: int, node_size: int) -> None:
    while not os.path.exists(flag):
        time.sleep(0.2)
    import torch._C._distributed_c10d as c10d

    data = c10d._dump_fr_trace(True, True, False)
    prefix = os.environ["TORCH_FR_DUMP_TEMP_FILE"]
    if node_size:
        folder = os.path.join(os.path.dirname(prefix), f"node{rank // node_size}")
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, os.path.basename(prefix) + str(rank))
    else:
        path = f"{prefix}{rank}"
    with open(path + ".tmp", "wb") as f:
        f.write(data)
    os.replace(path + ".tmp", path)


def note_groups(out: str, rank: int, groups: list) -> None:
    """Write the groups this rank belongs to as ProcessGroupNCCL would put them in a dump's pg_config (gloo's
    recorder leaves pg_config empty): {group_name: {name, desc, ranks}}, to OUT/groups/<rank>.json."""
    cfg = {g.group_name: {"name": g.group_name, "desc": g.group_desc, "ranks": str(dist.get_process_group_ranks(g))}
           for g in groups}
    os.makedirs(f"{out}/groups", exist_ok=True)
    with open(f"{out}/groups/{rank}.json", "w") as f:
        json.dump(cfg, f)


def load_batch(step: int, stuck: bool, out: str) -> torch.Tensor:
    if stuck:
        touch(f"{out}/planted")
        time.sleep(3600)  # the stack snapshot shows this frame
    return torch.full((256,), float(step))


def die(out: str) -> None:
    touch(f"{out}/planted")
    os._exit(1)


def hold_after_error(rank: int, e: BaseException) -> None:
    print(f"rank {rank}: {type(e).__name__}: {str(e)[:200]}", flush=True)
    time.sleep(3600)  # the stack snapshot shows this frame


def idle_when_done(rank: int, out: str) -> None:
    touch(f"{out}/done/{rank}")
    time.sleep(3600)  # the stack snapshot shows this frame


def grid_job(a: argparse.Namespace, rank: int, world: int) -> None:
    rows, cols = a.rows, a.cols
    assert rows * cols == world, f"grid {rows}x{cols} needs {rows * cols} ranks, got {world}"
    dp_groups = [dist.new_group([r * cols + c for r in range(rows)], group_desc="DATA_PARALLEL_GROUP")
                 for c in range(cols)]
    tp_groups = [dist.new_group([r * cols + c for c in range(cols)], group_desc="TENSOR_MODEL_PARALLEL_GROUP")
                 for r in range(rows)]
    tp, dp = tp_groups[rank // cols], dp_groups[rank % cols]  # a non-member gets no group object
    note_groups(a.out, rank, [dist.group.WORLD, dp, tp])
    print(f"rank {rank}: TP group_name {tp.group_name} ranks {dist.get_process_group_ranks(tp)}, "
          f"DP group_name {dp.group_name} ranks {dist.get_process_group_ranks(dp)}", flush=True)
    for step in range(a.steps):
        bad = rank == a.bad_rank and step == a.bad_step
        x = load_batch(step, bad and a.plant == "stuck", a.out)
        if bad and a.plant == "died":
            die(a.out)
        dist.all_reduce(x, group=tp)
        dist.all_reduce(x[:128], group=dp)
        if step % 2 == 0:
            dist.all_reduce(x[:64])
    dist.barrier()


def flat_job(a: argparse.Namespace, rank: int, world: int) -> None:
    note_groups(a.out, rank, [dist.group.WORLD])
    for step in range(a.steps):
        bad = rank == a.bad_rank and step == a.bad_step
        x = torch.full((a.mismatch_numel if bad and a.plant == "size_mismatch" else 4096,), float(step))
        y = torch.full((1024,), float(rank))
        if bad:
            touch(f"{a.out}/planted")
        if bad and a.plant == "order_swap":
            dist.broadcast(y, src=0)
            dist.all_reduce(x)
        else:
            dist.all_reduce(x)
            dist.broadcast(y, src=0)
    dist.barrier()


def recv_activation(buf: torch.Tensor, src: int) -> None:
    dist.recv(buf, src=src)


def send_activation(buf: torch.Tensor, dst: int) -> None:
    dist.send(buf, dst=dst)


def recv_grad(buf: torch.Tensor, src: int) -> None:
    dist.recv(buf, src=src)


def send_grad(buf: torch.Tensor, dst: int) -> None:
    dist.send(buf, dst=dst)


def pipeline_job(a: argparse.Namespace, rank: int, world: int) -> None:
    first, last = rank == 0, rank == world - 1
    note_groups(a.out, rank, [dist.group.WORLD])
    for step in range(a.steps):
        for mb in range(a.micro):  # forward
            act = torch.full((512,), float(step * 10 + mb))
            if not first:
                recv_activation(act, rank - 1)
            act = act * 2
            skip = a.plant == "pp_deadlock" and rank == a.bad_rank and step == a.bad_step and mb == a.micro - 1
            if skip:
                touch(f"{a.out}/planted")
            if not last and not skip:
                send_activation(act, rank + 1)
        for mb in reversed(range(a.micro)):  # backward
            grad = torch.full((512,), float(mb))
            if not last:
                recv_grad(grad, rank + 1)
            if not first:
                send_grad(grad * 0.5, rank - 1)
        if a.loss_allreduce:  # e.g. the loss, on the default group, once a step
            dist.all_reduce(torch.full((8,), float(step)))
    dist.barrier()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--job", choices=["grid", "flat", "pipeline"], required=True)
    ap.add_argument("--plant", choices=["none", "stuck", "died", "order_swap", "size_mismatch", "pp_deadlock"],
                    required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--bad-step", type=int, default=3)
    ap.add_argument("--bad-rank", type=int, default=6)
    ap.add_argument("--rows", type=int, default=4)
    ap.add_argument("--cols", type=int, default=4)
    ap.add_argument("--micro", type=int, default=3)
    ap.add_argument("--loss-allreduce", action="store_true", help="pipeline: an all_reduce after every step")
    ap.add_argument("--mismatch-numel", type=int, default=2048, help="size_mismatch: the bad rank's all_reduce size")
    ap.add_argument("--node-size", type=int, default=0, help="write dumps into per-node folders of this many ranks")
    ap.add_argument("--timeout", type=float, default=1800.0)
    a = ap.parse_args()
    torch.set_num_threads(1)
    rank = int(os.environ["RANK"])
    os.makedirs(f"{a.out}/pids", exist_ok=True)
    with open(f"{a.out}/pids/{rank}", "w") as f:
        f.write(str(os.getpid()))
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=a.timeout))
    world = dist.get_world_size()
    threading.Thread(target=dump_when_asked, args=(f"{a.out}/dump_now", rank, a.node_size), daemon=True).start()
    try:
        {"grid": grid_job, "flat": flat_job, "pipeline": pipeline_job}[a.job](a, rank, world)
    except Exception as e:  # e.g. gloo's "connection closed" after a peer died
        hold_after_error(rank, e)
    idle_when_done(rank, a.out)
    os._exit(0)


if __name__ == "__main__":
    main()
