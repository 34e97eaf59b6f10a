"""Benchmark: building the store with the local process pool vs Ray tasks, on generated Kineto profiles of
64 to 4,096 ranks, on this machine (same cores for both).

Each build runs in a fresh driver process (python -m ... --one), so its peak RSS is its own:
* pool: the driver starts the ingest process, which owns the database and feeds the parse workers; driver
  peak = the host process, "ingest peak" = the largest child (the ingest process or a worker);
* ray: the driver connects to a Ray started once by this benchmark (`ray.init`, num_cpus = the usable
  CPUs) and writes the database itself; driver peak = that process.
CPU = the driver's and its children's user+system time, plus (Ray) the CPU that the Ray processes started
by this benchmark (raylet, GCS, workers) used during the build. Wall excludes Ray's start (reported once).
`issues` on one size runs `stepdoctor issues PATH --format json` cold (empty cache, default engine).

The machine is shared: the figures are noisy; compare within a run.

Usage: python -m stepdoctor.evals.bench.bench_ray [--ranks 64,256,1024] [--events 500] [--issues 1024]
       [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ...analysis.store import IngestOptions


def _generate(out: Path, ranks: int, events: int) -> Path:
    from stepdoctor.evals.generate import Scenario, write_kineto_profile

    if not out.exists():
        write_kineto_profile(Scenario(vendor="kineto", ranks=ranks, steps=2, seed=7, plants=[]), out,
                             events_per_rank=events)
    return out


class _AnonPeak:
    """The peak of this process's private resident memory (RssAnon), sampled every 20 ms in a thread. Peak
    RSS (ru_maxrss) also counts the pages of Ray's shared-memory object store that the driver has read
    results from (up to the store's size), which are not the driver's own."""

    def __init__(self) -> None:
        import threading

        self.peak_kb = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("RssAnon:"):
                    self.peak_kb = max(self.peak_kb, int(line.split()[1]))

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self._sample()

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        self._sample()
        return round(self.peak_kb / 1024, 1)


def _one(engine: str, prof: str, address: str | None, ray_root: int | None) -> dict:
    """In a fresh driver process: build the store once, report wall, CPU and peak RSS (and the CPU of the
    Ray processes below `ray_root`, sampled before this driver exits: Ray ends a driver's workers with it)."""
    import psutil

    from stepdoctor.analysis import build

    if engine == "ray":
        from stepdoctor.analysis.build.ray_engine import connect

        connect(address)
    ray0 = _ray_cpu(ray_root) if ray_root else {}
    anon = _AnonPeak()
    t0, c0 = time.perf_counter(), time.process_time()
    prof_ = build.open_profile(prof, IngestOptions(cache_dir=Path(tempfile.mkdtemp()), engine=engine))  # type: ignore[arg-type]
    wall = time.perf_counter() - t0
    ray_cpu = _cpu_since(ray0, _ray_cpu(ray_root)) if ray_root else 0.0
    anon_peak_mb = anon.stop()
    rows = prof_.rows("SELECT count(*) FROM device_ops")[0][0]
    me = psutil.Process()
    while me.children():  # released children: reaped so that their CPU and peak count
        time.sleep(0.02)
        build.reap_exiting()
    self_ru, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"engine": engine, "wall_s": round(wall, 2), "driver_cpu_s": round(time.process_time() - c0, 2),
            "children_cpu_s": round(kids.ru_utime + kids.ru_stime, 2),
            "driver_peak_mb": round(self_ru.ru_maxrss / 1024, 1), "driver_anon_peak_mb": anon_peak_mb,
            "child_peak_mb": round(kids.ru_maxrss / 1024, 1),
            "ranks": len(prof_.info.ranks), "device_ops": rows, "ray_processes_cpu_s": round(ray_cpu, 2)}


def _ray_cpu(root: int) -> dict[int, float]:
    """User+system CPU seconds of each live process below `root` (the Ray processes it started), by pid."""
    import psutil

    out = {}
    for p in psutil.Process(root).children(recursive=True):
        try:
            t = p.cpu_times()
            out[p.pid] = t.user + t.system
        except psutil.Error:
            continue
    return out


def _cpu_since(before: dict[int, float], after: dict[int, float]) -> float:
    """CPU used between two `_ray_cpu` samples (a process that ended in between is not counted)."""
    return sum(max(0.0, c - before.get(pid, 0.0)) for pid, c in after.items())


def _run(cmd: list[str], env: dict | None = None) -> dict:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _issues(prof: Path) -> dict:
    env = {**os.environ, "STEPDOCTOR_CACHE_DIR": tempfile.mkdtemp()}
    t0, r0 = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run([sys.executable, "-m", "stepdoctor", "issues", str(prof), "--format", "json"],
                         capture_output=True, text=True, env=env, check=False)
    wall, r1 = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    findings = len(json.loads(out.stdout)["findings"]) if out.returncode in (0, 1) else None
    return {"issues_wall_s": round(wall, 2), "issues_cpu_s": round(cpu, 2), "rc": out.returncode,
            "findings": findings}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=2, metavar=("ENGINE", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--address", help=argparse.SUPPRESS)
    ap.add_argument("--ray-root", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--ranks", default="64,256,1024")
    ap.add_argument("--events", type=int, default=500, help="generated trace events per rank")
    ap.add_argument("--issues", type=int, default=1024, help="rank count to time `stepdoctor issues` on (0: none)")
    ap.add_argument("--keep", type=Path, help="folder for the generated profiles (kept between runs)")
    a = ap.parse_args(argv)
    if a.one:
        print(json.dumps(_one(a.one[0], a.one[1], a.address, a.ray_root)))
        return 0
    import ray

    from stepdoctor.analysis import machine

    cpus = machine.usable_cpus()
    t0 = time.perf_counter()
    ray.init(num_cpus=cpus, include_dashboard=False, object_store_memory=512 << 20, log_to_driver=False)
    address = ray.get_runtime_context().gcs_address
    print(json.dumps({"ray_start_s": round(time.perf_counter() - t0, 2), "cpus": cpus}), flush=True)
    root = Path(a.keep or tempfile.mkdtemp())
    me = os.getpid()
    for n in [int(x) for x in a.ranks.split(",")]:
        t0 = time.perf_counter()
        prof = _generate(root / f"kineto-{n}-{a.events}", n, a.events)
        size = sum(f.stat().st_size for f in prof.iterdir())
        row = {"ranks": n, "mb": round(size / 2**20, 1), "generate_s": round(time.perf_counter() - t0, 1)}
        base = [sys.executable, "-m", "stepdoctor.evals.bench.bench_ray", "--one"]
        row["pool"] = _run([*base, "pool", str(prof)])
        row["ray"] = _run([*base, "ray", str(prof), "--address", address, "--ray-root", str(me)])
        for k in ("pool", "ray"):
            e = row[k]
            e["cpu_s"] = round(e["driver_cpu_s"] + e["children_cpu_s"] + e["ray_processes_cpu_s"], 2)
        if n == a.issues:
            row.update(_issues(prof))
        print(json.dumps(row), flush=True)
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
