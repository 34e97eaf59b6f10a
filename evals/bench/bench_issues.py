"""Benchmark: `stepdoctor issues` against `msprof-analyze advisor all` on the same 8-rank Ascend profile.

Both tools run as child processes in one run on the same input (a generated torch_npu text export with
~40k trace events per rank and the sample's planted problems); wall time, peak RSS of the largest process
and of the whole process tree, and CPU time are sampled from here. stepdoctor runs as a user runs it,
`stepdoctor issues PATH --format json` (python -m stepdoctor), twice: cold (empty cache: parse
+ checks) and warm (cache hit: checks only).

`--repeat R` rounds, each one stepdoctor cold, stepdoctor warm and msprof-analyze back to back. The wall
times of this machine drift by ±15-40 % from one minute to the next, so the ratio that counts is taken
within a round (the tools measured side by side), and the median over the rounds is reported with each
round's ratio; the table shows each tool's median run.

msprof-analyze is not a dependency: point MSPROF_ANALYZE at its executable (e.g. a venv made with
`pip install msprof-analyze==26.2.0`), or it is looked up on PATH; without it only stepdoctor runs.

Usage: python -m stepdoctor.evals.bench.bench_issues [--ranks 8] [--events 40000] [--repeat 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

from . import compile_bytecode
from .sampling import Sampled, run_sampled

PLANTS = ["env-var", "slow-rank", "slow-link", "sync-stream", "op-compile", "sync-batchnorm", "slow-dataloader",
          "gc-pause", "memory-ops", "aicpu-op", "block-dim-underuse", "no-bound-op", "misaligned-shape",
          "freq-throttle", "small-packet", "affinity-api"]


def _summary(report: Path) -> dict:
    try:
        findings = json.loads(report.read_text())["findings"]
    except (OSError, ValueError, KeyError) as e:
        return {"error": f"no report: {e}"}
    return {"findings": len(findings), "high": sum(f["severity"] == "high" for f in findings),
            "checks": sorted({f["check"] for f in findings})}


def _sh_rc(command: str) -> list[str]:
    """`command` in a shell that prints its exit status as the JSON line `run_sampled` reads."""
    return ["sh", "-c", command + '; echo "{\\"rc\\": $?}"']


def _median(runs: list[Sampled]) -> Sampled:
    """The run of median wall time (the lower middle one for an even count)."""
    return sorted(runs, key=lambda s: s.wall_s)[(len(runs) - 1) // 2]


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
    ap.add_argument("--repeat", type=int, default=3, help="rounds of stepdoctor cold, warm and the peer")
    a = ap.parse_args(argv)
    compile_bytecode()  # stepdoctor as installed, like the pip-installed peer
    tmp = Path(tempfile.mkdtemp(prefix="stepdoctor-bench-issues-"))
    try:
        prof = build(Path(a.keep) if a.keep else tmp / "profile", a.ranks, a.events)
        size = sum(f.stat().st_size for f in prof.rglob("*") if f.is_file())
        n_events = sum(len(json.loads(f.read_bytes())) for f in prof.rglob("trace_view.json"))
        print(f"profile: {a.ranks} ranks, {n_events / a.ranks:,.0f} trace events per rank, {size / 2**20:.1f} MB")
        # the command a user runs (`stepdoctor issues PATH --format json`), its output kept for the summary
        report = tmp / "issues.json"
        cli = _sh_rc(f"STEPDOCTOR_CACHE_DIR='{tmp / 'cache'}' '{sys.executable}' -m stepdoctor issues "
                     f"'{prof}' --format json > '{report}'")
        msprof = _msprof()
        colds: list[Sampled] = []
        warms: list[Sampled] = []
        peers: list[Sampled] = []
        for i in range(a.repeat):
            shutil.rmtree(tmp / "cache", ignore_errors=True)
            colds.append(run_sampled(cli))
            colds[-1].result = {"rc": colds[-1].result["rc"], **_summary(report)}
            warms.append(run_sampled(cli))
            if msprof:
                out = tmp / f"msprof-out-{i}"
                out.mkdir()
                # msprof-analyze writes its outputs next to the input unless -o is given; keep the input
                # pristine. It also drops operator_tuning_file_*.cfg into the working directory: run it
                # from the temp dir
                peers.append(run_sampled(_sh_rc(f"cd '{tmp}' && '{msprof}' advisor all -d '{prof}' -o '{out}' "
                                                f"-l en > '{tmp}/msprof.log' 2>&1"),
                                         env={**os.environ, "PYTHONWARNINGS": "ignore"}))
        cold, warm = _median(colds), _median(warms)
        rows = [("stepdoctor issues (cold: parse+checks)", cold), ("stepdoctor issues (warm: cache hit)", warm)]
        peer = _median(peers) if peers else None
        if peer:
            rows.append(("msprof-analyze 26.2.0 advisor all", peer))
        print(f"\n{'':34s} {'wall':>10s} {'cpu':>10s} {'peak proc':>11s} {'peak tree':>11s} {'vs cold':>7s}")
        for name, s in rows:
            print(_row(name, s, cold))
        print(f"\nstepdoctor: {cold.result}")
        print("rounds (wall s): " + "; ".join(
            f"cold {c.wall_s:.2f}, warm {w.wall_s:.2f}" + (f", msprof-analyze {p.wall_s:.2f}" if peers else "")
            for c, w, p in zip(colds, warms, peers or colds, strict=True)))
        if peer:
            cold_x = [p.wall_s / c.wall_s for p, c in zip(peers, colds, strict=True)]
            warm_x = [p.wall_s / w.wall_s for p, w in zip(peers, warms, strict=True)]
            print(f"msprof-analyze exit: {peer.result}; stepdoctor is faster by, per round: cold "
                  f"{', '.join(f'{x:.1f}x' for x in cold_x)}; warm {', '.join(f'{x:.1f}x' for x in warm_x)}")
            print(f"median of the rounds: cold {statistics.median(cold_x):.1f}x, "
                  f"warm {statistics.median(warm_x):.1f}x faster than msprof-analyze")
        else:
            print("msprof-analyze not found (set MSPROF_ANALYZE): peer not measured")
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
