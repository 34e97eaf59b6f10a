"""Benchmark: `stepdoctor issues` against `msprof-analyze advisor all` on the same 8-rank Ascend profile.

Both tools run as child processes in one run, one after the other, on the same input (a generated
torch_npu text export with ~40k trace events per rank and the sample's planted problems); wall time,
peak RSS of the largest process and of the whole process tree, and CPU time are sampled from here.
stepdoctor runs twice: cold (empty cache: parse + checks) and warm (cache hit: checks only).

msprof-analyze is not a dependency: point MSPROF_ANALYZE at its executable (e.g. a venv made with
`pip install msprof-analyze==26.2.0`), or it is looked up on PATH; without it only stepdoctor runs.

Usage: python -m stepdoctor.evals.bench.bench_issues [--ranks 8] [--events 40000] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from .bench_ingest import Sampled, run_sampled

PLANTS = ["env-var", "slow-rank", "slow-link", "sync-stream", "op-compile", "sync-batchnorm", "slow-dataloader",
          "gc-pause", "memory-ops", "aicpu-op", "block-dim-underuse", "no-bound-op", "misaligned-shape",
          "freq-throttle", "small-packet", "affinity-api"]


def child_stepdoctor(profile: Path, cache: Path) -> None:
    os.environ["STEPDOCTOR_CACHE_DIR"] = str(cache)
    from ...tools import api

    rep = api.issues(api.load(profile))
    print(json.dumps({"findings": len(rep.findings), "high": sum(f.severity == "high" for f in rep.findings),
                      "checks": sorted({f.check for f in rep.findings})}))


def _msprof() -> str | None:
    exe = os.environ.get("MSPROF_ANALYZE") or shutil.which("msprof-analyze")
    for cand in (exe, "/tmp/msprof-venv/bin/msprof-analyze"):
        if cand and Path(cand).exists():
            return cand
    return None


def build(out: Path, ranks: int, events: int) -> Path:
    from ..generate import Plant, Scenario, write_ascend_profile

    plants = [Plant(p) for p in PLANTS]
    sc = Scenario(vendor="ascend", ranks=ranks, steps=2, seed=11, plants=plants)
    return write_ascend_profile(sc, out, events_per_rank=events)


def _row(name: str, s: Sampled, base: Sampled | None) -> str:
    ratio = f"{s.wall_s / base.wall_s:6.1f}x" if base else "     - "
    return (f"{name:34s} {s.wall_s:8.2f} s {s.cpu_s:8.2f} s {s.peak_proc_b / 2**20:8.0f} MB "
            f"{s.peak_tree_b / 2**20:8.0f} MB {ratio}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=8)
    ap.add_argument("--events", type=int, default=40000, help="trace events per rank")
    ap.add_argument("--keep", help="build the profile here and keep it")
    ap.add_argument("--child", nargs=2, metavar=("PROFILE", "CACHE"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        child_stepdoctor(Path(a.child[0]), Path(a.child[1]))
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="stepdoctor-bench-issues-"))
    try:
        prof = build(Path(a.keep) if a.keep else tmp / "profile", a.ranks, a.events)
        size = sum(f.stat().st_size for f in prof.rglob("*") if f.is_file())
        n_events = sum(len(json.loads(f.read_bytes())) for f in prof.rglob("trace_view.json"))
        print(f"profile: {a.ranks} ranks, {n_events / a.ranks:,.0f} trace events per rank, {size / 2**20:.1f} MB")
        cmd = [sys.executable, "-m", "stepdoctor.evals.bench.bench_issues", "--child", str(prof), str(tmp / "cache")]
        cold = run_sampled(cmd)
        warm = run_sampled(cmd)
        rows = [("stepdoctor issues (cold: parse+checks)", cold), ("stepdoctor issues (warm: cache hit)", warm)]
        msprof = _msprof()
        peer = None
        if msprof:
            out = tmp / "msprof-out"
            out.mkdir()
            # msprof-analyze writes its outputs next to the input unless -o is given; keep the input pristine
            # it also drops operator_tuning_file_*.cfg into the working directory: run it from the temp dir
            sh = (f"cd '{tmp}' && '{msprof}' advisor all -d '{prof}' -o '{out}' -l en > '{tmp}/msprof.log' 2>&1; "
                  "echo \"{\\\"rc\\\": $?}\"")
            peer = run_sampled(["sh", "-c", sh], env={**os.environ, "PYTHONWARNINGS": "ignore"})
            rows.append(("msprof-analyze 26.2.0 advisor all", peer))
        print(f"\n{'':34s} {'wall':>10s} {'cpu':>10s} {'peak proc':>11s} {'peak tree':>11s} {'vs cold':>7s}")
        for name, s in rows:
            print(_row(name, s, cold))
        print(f"\nstepdoctor: {cold.result}")
        if peer:
            print(f"msprof-analyze exit: {peer.result}; stepdoctor cold is {peer.wall_s / cold.wall_s:.1f}x faster, "
                  f"warm {peer.wall_s / warm.wall_s:.1f}x")
        else:
            print("msprof-analyze not found (set MSPROF_ANALYZE): peer not measured")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
