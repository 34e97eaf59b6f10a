"""The cross-rank replay at scale: 1,024 ranks x 4,000 device ops per step (64 of them all-reduces, DDP-like
buckets, one rank 8 ms late into each bucket's compute), replayed from a generated store: wall time and peak
memory of the null replay (`prepare`), the what-if answer (`what_if`: ideal, slowdown, verdict) and slow-rank.

    python -m stepdoctor.evals.bench.bench_replay [--ranks 1024] [--ops 4000] [--collectives 64] [--steps 2]

Writes evals/bench/results-<date>-replay.md. The device ops are in the store (as an ingest leaves them); the replay
reads only the collectives and the step windows, so its cost grows with ranks x collectives, not with kernels.
"""

from __future__ import annotations

import argparse
import datetime
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

_MS = 1_000_000


def build(out: Path, ranks: int, ops: int, colls: int, steps: int, late: int, late_ms: float = 8.0) -> Path:
    import duckdb

    from stepdoctor.analysis.ingest.base import schema_sql

    rng = np.random.default_rng(0)
    db = out / "profile.duckdb"
    con = duckdb.connect(str(db))
    con.execute(schema_sql())
    r = np.arange(ranks)
    per = ops // colls            # compute kernels before each all-reduce
    kern_ms = 0.02
    t = np.zeros(ranks)
    for s in range(steps):
        start = t.copy()
        dev, comm = [], []
        for _ in range(colls):
            comp = per * kern_ms + rng.normal(0, 0.01, ranks) + np.where(r == late, late_ms / colls, 0)
            k0 = t[:, None] + np.arange(per)[None, :] * kern_ms
            dev.append(pd.DataFrame({"rank": np.repeat(r, per), "step": s + 1, "name": "sm90_gemm",
                                     "category": "compute", "task_type": "kernel", "stream_id": 7,
                                     "start_ns": (k0.ravel() * _MS).astype(np.int64), "dur_ns": int(kern_ms * _MS)}))
            arrive = t + comp
            end = arrive.max() + 0.3
            comm.append(pd.DataFrame({"rank": r, "step": s + 1, "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                                      "op_type": "allreduce", "group_name": "dp", "start_ns": (arrive * _MS).astype(np.int64),
                                      "elapse_ns": ((end - arrive) * _MS).astype(np.int64)}))
            t = np.full(ranks, end)
        t = t + 1.0
        for name, frames in (("device_ops", dev), ("comm_ops", comm)):
            df = pd.concat(frames)
            con.register("df", df)
            con.execute(f"INSERT INTO {name} ({', '.join(df.columns)}) SELECT * FROM df")
            con.unregister("df")
        st = pd.DataFrame({"rank": r, "step": s + 1, "start_ns": (start * _MS).astype(np.int64),
                           "end_ns": (t * _MS).astype(np.int64)})
        con.register("df", st)
        con.execute("INSERT INTO steps (rank, step, start_ns, end_ns) SELECT * FROM df")
        con.unregister("df")
        t = t + 0.0
    con.register("df", pd.DataFrame({"rank": r, "source_path": "gen", "format": "kineto", "vendor": "cuda",
                                     "framework": "pytorch", "world_size": ranks}))
    con.execute("INSERT INTO ranks (rank, source_path, format, vendor, framework, world_size) SELECT * FROM df")
    con.unregister("df")
    con.register("df", pd.DataFrame({"rank": np.repeat(r, 3), "name": np.tile(["steps", "kernels", "comm"], ranks)}))
    con.execute("INSERT INTO capabilities (rank, name) SELECT * FROM df")
    con.close()
    return db


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--ops", type=int, default=4000)
    ap.add_argument("--collectives", type=int, default=64)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("-o", "--output")
    a = ap.parse_args(argv)
    from stepdoctor.analysis.checks.base import CheckContext, run_checks
    from stepdoctor.analysis.replay import prepare, what_if
    from stepdoctor.evals.generate.stragglers import open_store

    late = a.ranks // 2 + 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        # the store is built in a child, so the peak memory below is the replay's own process
        import multiprocessing as mp

        child = mp.get_context("spawn").Process(target=build, args=(Path(tmp), a.ranks, a.ops, a.collectives,
                                                                     a.steps, late))
        child.start()
        child.join()
        db = Path(tmp) / "profile.duckdb"
        rows.append(("build the store in a child (not stepdoctor's work)", time.perf_counter() - t0, float("nan")))
        prof = open_store(db)
        base = _peak_mb()
        t0 = time.perf_counter()
        _, rep = prepare(prof)
        rows.append(("null replay of every step (prepare)", time.perf_counter() - t0, _peak_mb()))
        t0 = time.perf_counter()
        w = what_if(prof)
        rows.append(("what_if: null replay, ideal, slowdown, verdict", time.perf_counter() - t0, _peak_mb()))
        t0 = time.perf_counter()
        run = run_checks(CheckContext(prof), only=["slow-rank"])
        rows.append(("slow-rank (replay-based)", time.perf_counter() - t0, _peak_mb()))
        named = [f.ranks for f in run.findings]
    out = Path(a.output) if a.output else Path(__file__).parent / \
        f"results-{datetime.date.today().isoformat()}-replay.md"
    lines = [f"# Cross-rank replay at scale ({datetime.date.today()})", "",
             f"`python -m stepdoctor.evals.bench.bench_replay --ranks {a.ranks} --ops {a.ops} --collectives "
             f"{a.collectives} --steps {a.steps}` on this project's 2-core machine: {a.ranks} ranks x {a.ops} device "
             f"ops per step ({a.collectives} all-reduces), {a.steps} steps; rank {late} is 8 ms late per step.", "",
             "| phase | wall s | process peak RSS MB |", "| --- | ---: | ---: |"]
    lines += [f"| {name} | {sec:.2f} | {'-' if mb != mb else f'{mb:.0f}'} |" for name, sec, mb in rows]
    lines += ["", f"Null-replay error per step: {[s.error_pct for s in rep.steps]} %; verdict: {w.verdict}; "
              f"slow-rank names {named} (planted: [[{late}]]). Peak before the replay: {base:.0f} MB."]
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
