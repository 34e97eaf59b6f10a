"""Benchmark: does the driver's memory follow ranks x steps or events? `stepdoctor issues` and the breakdown
alone on generated Kineto profiles with the same rank count and different event densities.

Each measurement runs in a fresh driver process (python -m ... --child), which reports its own peak:
* VmHWM: the driver's peak resident set (its own pages; the ingest process and the parse workers of a cold
  run are children, reported apart as the largest child's peak);
* anon: the peak of its private memory (RssAnon, sampled every 20 ms): Python objects, numpy arrays and
  DuckDB's buffer pool, without the mapped code of the libraries.
Modes: `issues` cold (empty cache: the ingest runs, then every check) and warm (the cache has the store);
`breakdown` (warm: open the store, compute_breakdown) from the stored per-rank summaries and, for
comparison, from the events (`from_events=True`, the driver reads every device op).
CPU = user + system of the driver and its children. The machine is shared: note the load average.

Usage: python -m stepdoctor.evals.bench.bench_summary_memory [--ranks 1024] [--events 500,4000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .bench_ray import _AnonPeak, _generate


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _child(mode: str, path: str) -> dict:
    """In a fresh driver process: run one mode, report its wall, CPU and peaks."""
    peak = _AnonPeak()
    t0 = time.perf_counter()
    out = os.dup(1)
    if mode == "issues":
        from stepdoctor.tools.cli import main

        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            rc = main(["issues", path, "--format", "json"])
    else:
        from stepdoctor.analysis.build import open_profile
        from stepdoctor.analysis.metrics.breakdown import compute_breakdown

        prof = open_profile(path)
        rows = compute_breakdown(prof, from_events=mode == "breakdown-events")
        rc = 0 if rows else 1
    wall = time.perf_counter() - t0
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    res = {"mode": mode, "rc": rc, "wall_s": round(wall, 2),
           "cpu_s": round(me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime, 2),
           "driver_hwm_mb": round(_status_kb("VmHWM") / 1024, 1), "driver_anon_peak_mb": peak.stop(),
           "largest_child_mb": round(kids.ru_maxrss / 1024, 1)}
    os.write(out, (json.dumps(res) + "\n").encode())
    return res


def _measure(mode: str, path: Path, cache: Path) -> dict:
    env = {**os.environ, "STEPDOCTOR_CACHE_DIR": str(cache)}
    load = os.getloadavg()[0]
    out = subprocess.run([sys.executable, "-m", "stepdoctor.evals.bench.bench_summary_memory", "--child", mode,
                          str(path)], capture_output=True, text=True, env=env, check=False)
    lines = [ln for ln in out.stdout.strip().splitlines() if ln.startswith("{")]
    if not lines:
        raise SystemExit(f"{mode} {path} failed: {out.stderr[-2000:]}")
    return {**json.loads(lines[-1]), "load": round(load, 1)}


def _store_facts(cache: Path) -> dict:
    import duckdb

    db = next(cache.glob("*.duckdb"))
    con = duckdb.connect(str(db), read_only=True)
    try:
        q = {"device_ops": "SELECT count(*) FROM device_ops", "host_ops": "SELECT count(*) FROM host_ops",
             "step_rows": "SELECT count(*) FROM step_breakdown", "kernel_rows": "SELECT count(*) FROM kernel_totals"}
        facts = {k: con.execute(v).fetchone()[0] for k, v in q.items()}
    finally:
        con.close()
    return {**facts, "store_mb": round(db.stat().st_size / 2**20, 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", default="1024", help="rank counts, comma-separated")
    ap.add_argument("--events", default="500,4000", help="trace events per rank, comma-separated")
    ap.add_argument("--keep", type=Path, help="folder for the generated profiles (reused when there)")
    ap.add_argument("--child", nargs=2, metavar=("MODE", "PATH"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        _child(*a.child)
        return 0
    root = a.keep or Path(tempfile.mkdtemp(prefix="bench-summary-"))
    print(f"# cores {os.cpu_count()}, python {sys.version.split()[0]}", flush=True)
    print("| ranks | events/rank | input MB | device_ops | store MB | summary rows (step / kernel) | run | "
          "wall s | CPU s | driver VmHWM MB | driver anon peak MB | largest child MB | load |", flush=True)
    print("| ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |", flush=True)
    for n in [int(x) for x in a.ranks.split(",")]:
        for ev in [int(x) for x in a.events.split(",")]:
            prof = _generate(root / f"kineto-{n}-{ev}", n, ev)
            size = sum(f.stat().st_size for f in prof.rglob("*") if f.is_file()) / 2**20
            cache = Path(tempfile.mkdtemp(prefix="bench-summary-cache-"))
            runs = [("issues cold", _measure("issues", prof, cache))]
            facts = _store_facts(cache)
            runs.append(("issues warm", _measure("issues", prof, cache)))
            # each breakdown twice, alternating: the machine is shared, one run alone can be an outlier
            for _ in range(2):
                runs += [("breakdown (summaries)", _measure("breakdown", prof, cache)),
                         ("breakdown (events)", _measure("breakdown-events", prof, cache))]
            for name, r in runs:
                print(f"| {n:,} | {ev:,} | {size:,.0f} | {facts['device_ops']:,} | {facts['store_mb']} | "
                      f"{facts['step_rows']:,} / {facts['kernel_rows']:,} | {name} | {r['wall_s']} | {r['cpu_s']} | "
                      f"{r['driver_hwm_mb']} | {r['driver_anon_peak_mb']} | {r['largest_child_mb']} | {r['load']} |",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
