"""Write Flight Recorder dumps in torch's own format (the dict torch pickles, version "2.10") for a job of N
ranks that hangs: one rank skips a collective (`skip`) or is stuck before it (`stuck`). For tests and
benchmarks at sizes no machine here can run; the real recordings are in tests/data/real_hang."""

from __future__ import annotations

import pickle
from pathlib import Path

_FRAMES = [{"name": "all_reduce", "filename": "torch/distributed/distributed_c10d.py", "line": 3068},
           {"name": "train_step", "filename": "train.py", "line": 41}]


def _entry(seq: int, op: str, t_ns: int, state: str, pg: tuple[str, str]) -> dict:
    return {"record_id": seq - 1, "pg_id": int(pg[0]), "process_group": pg, "collective_seq_id": seq,
            "p2p_seq_id": 0, "op_id": seq, "profiling_name": op, "time_created_ns": t_ns,
            "input_sizes": [[1024]], "input_dtypes": ["Float"], "output_sizes": [[1024]],
            "output_dtypes": ["Float"], "state": state, "time_discovered_started_ns": None,
            "time_discovered_completed_ns": t_ns + 1000 if state == "completed" else None, "retired": False,
            "timeout_ms": 600000, "is_p2p": False, "frames": _FRAMES, "thread_id": "1", "thread_name": "python"}


def write_hang(out: Path, world: int, culprit: int, mode: str, steps: int = 20, backend: str = "nccl",
               prefix: str = "nccl_trace_rank_", version: str = "2.10") -> None:
    """Every rank issues `steps` all_reduces on the default group; at the last one `culprit` issues a
    barrier instead (`skip`) or nothing (`stuck`). NCCL marks all but the last completed."""
    out.mkdir(parents=True, exist_ok=True)
    pg = ("0", "default_pg")
    t0 = 1_795_000_000_000_000_000
    for r in range(world):
        entries = []
        n = steps - 1 if (r == culprit and mode == "stuck") else steps
        for seq in range(1, n + 1):
            last = seq == steps
            op = f"{backend}:barrier" if (last and r == culprit and mode == "skip") else f"{backend}:all_reduce"
            state = "scheduled" if last or backend == "gloo" else "completed"
            entries.append(_entry(seq, op, t0 + seq * 10_000_000 + r, state, pg))
        done = steps - 1 if backend == "nccl" else -1
        doc = {"version": version, "pg_config": {"0": {"name": "0", "desc": "default_pg",
                                                      "ranks": str(list(range(world)))}},
               "comm_lib_version": "2.28.9",
               "pg_status": {"0": {"last_enqueued_collective": n, "last_started_collective": -1,
                                   "last_completed_collective": min(done, n)}},
               "entries": entries}
        (out / f"{prefix}{r}").write_bytes(pickle.dumps(doc))


def grid_groups(world: int, ngroups: int) -> list[tuple[str, str, list[list[int]]]]:
    """(name prefix, desc, partition of the ranks) for `ngroups` kinds of group: the default group, then
    partitions into blocks of 2, 4, 8, ... consecutive ranks and strided ones, alternating. Several groups of
    one kind share a description, as Megatron's groups do."""
    kinds: list[tuple[str, str, list[list[int]]]] = [("0", "default_pg", [list(range(world))])]
    size = 2
    while len(kinds) < ngroups:
        if world % size:
            size = 2
        blocks = [list(range(b, b + size)) for b in range(0, world, size)]
        strided = [list(range(o, world, world // size)) for o in range(world // size)]
        kinds.append(("b", f"BLOCK{size}_GROUP", blocks))
        if len(kinds) < ngroups:
            kinds.append(("s", f"STRIDE{size}_GROUP", strided))
        size *= 2
    return kinds


def write_grid_hang(out: Path, world: int, ngroups: int, culprit: int, stuck_kind: int = 3, steps: int = 4,
                    backend: str = "nccl") -> None:
    """A job where every rank is in `ngroups` process groups (`grid_groups`) and issues one collective per group
    per step, in kind order; at the last step `culprit` stops before its collective of kind `stuck_kind`.
    NCCL's host does not block: every other rank issues everything, and a collective completes exactly when
    every member issued it. Group names are global (as torch makes them); each rank's local group index
    (`pg_id`, the `pg_status` key) is its own, unlike the name."""
    out.mkdir(parents=True, exist_ok=True)
    kinds = grid_groups(world, ngroups)
    names: dict[tuple[int, int], tuple[str, list[int]]] = {}   # (kind, rank) -> (name, ranks)
    nid = 1
    for k, (_, _, parts) in enumerate(kinds):
        for part in parts:
            name = "0" if k == 0 else str(nid)
            nid += k > 0
            for r in part:
                names[(k, r)] = (name, part)
    t0 = 1_795_000_000_000_000_000
    for r in range(world):
        local = {k: (k + r) % len(kinds) for k in range(len(kinds))}   # differs from the name on purpose
        cfg = {names[(k, r)][0]: {"name": names[(k, r)][0], "desc": kinds[k][1], "ranks": str(names[(k, r)][1])}
               for k in range(len(kinds))}
        entries, top, done = [], {}, {}
        for step in range(steps):
            for k in range(len(kinds)):
                if r == culprit and step == steps - 1 and k >= stuck_kind:
                    break
                name, part = names[(k, r)]
                complete = not (step == steps - 1 and k >= stuck_kind and culprit in part)
                e = _entry(step + 1, f"{backend}:all_reduce", t0 + (step * len(kinds) + k) * 1_000_000 + r,
                           "completed" if complete else "scheduled", (name, kinds[k][1]))
                e.update(record_id=len(entries), pg_id=local[k], op_id=len(entries))
                entries.append(e)
                top[k] = step + 1
                done[k] = step + 1 if complete else done.get(k, 0)
        status = {str(local[k]): {"last_enqueued_collective": top.get(k, 0), "last_started_collective": -1,
                                  "last_completed_collective": done.get(k, 0)} for k in range(len(kinds))}
        doc = {"version": "2.9", "pg_config": cfg, "comm_lib_version": "2.21.5", "pg_status": status,
               "entries": entries}
        (out / f"nccl_trace_rank_{r}").write_bytes(pickle.dumps(doc))


def write_p2p_hang(out: Path, stages: int, culprit: int, micro: int = 4) -> None:
    """An NCCL pipeline of `stages` ranks on the default group: for each microbatch, stage s receives from s-1
    and sends to s+1 (`nccl:recv s<-s-1`, `nccl:send s->s+1`, p2p_seq_id counting each rank's p2p ops). Stage
    `culprit` never sends its last microbatch on; the stage after it waits in that recv and issues nothing
    more, and so on down the pipeline. An op completes when its peer issued the matching one."""
    out.mkdir(parents=True, exist_ok=True)
    t0 = 1_795_000_000_000_000_000
    issued: dict[int, list[tuple[str, int, int]]] = {}   # rank -> [(kind, peer, microbatch)]
    stalled = False
    for s in range(stages):
        ops: list[tuple[str, int, int]] = []
        for m in range(micro):
            if s > 0:
                ops.append(("recv", s - 1, m))
                if stalled and m == micro - 1:
                    break   # waits for the send that never came, and issues nothing after it
            if s < stages - 1 and not (s == culprit and m == micro - 1):
                ops.append(("send", s + 1, m))
        issued[s] = ops
        stalled = stalled or s == culprit
    have = {(s, k, p, m) for s, ops in issued.items() for k, p, m in ops}
    for s, ops in issued.items():
        entries = []
        for n, (kind, peer, m) in enumerate(ops):
            match = ("recv" if kind == "send" else "send", s, m)
            done = (peer, *match[:1], match[1], m) in {(q, k, p, mm) for q, k, p, mm in have if q == peer}
            name = f"nccl:send {s}->{peer}" if kind == "send" else f"nccl:recv {s}<-{peer}"
            e = _entry(0, name, t0 + (m * 10 + n) * 1_000_000 + s, "completed" if done else "scheduled",
                       ("0", "default_pg"))
            e.update(record_id=n, op_id=n + 1, is_p2p=True, p2p_seq_id=n + 1, collective_seq_id=0)
            entries.append(e)
        doc = {"version": "2.10", "pg_config": {"0": {"name": "0", "desc": "default_pg",
                                                     "ranks": str(list(range(stages)))}},
               "pg_status": {"0": {"last_enqueued_collective": 0, "last_started_collective": -1,
                                   "last_completed_collective": 0}}, "entries": entries}
        (out / f"nccl_trace_rank_{s}").write_bytes(pickle.dumps(doc))
