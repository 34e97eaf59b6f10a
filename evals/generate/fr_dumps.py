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
