"""CLI: write a scenario and print its expected findings as JSON.

    python -m stepdoctor.evals.generate ascend --out DIR [--ranks 4] [--steps 2] [--seed 0]
        [--plant CHECK[:RANKS[:STEPS[:KEY=VAL,...]]]]... [--clean]
        [--block-num-header] [--drop-op-state] [--extra-files] [--events-per-rank N] [--layers N]
    python -m stepdoctor.evals.generate kineto --out DIR ... [--gz] [--legacy-nccl] [--no-cuda-sync]
    python -m stepdoctor.evals.generate repeat --src TRACE --out FILE --rank R --target-mb 90 [--world-size W]
    python -m stepdoctor.evals.generate catalog

RANKS / STEPS are comma lists (empty = the problem's defaults), e.g. `--plant slow-rank:3::dimension=free`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import repeat_kineto_trace, write_ascend_profile, write_kineto_profile
from .problems import Scenario, catalog, expected_findings, parse_plant_spec, tolerated_findings


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="python -m stepdoctor.evals.generate", description="Write seeded profiles with planted problems."
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    for vendor in ("ascend", "kineto"):
        p = sub.add_parser(vendor, help=f"write a {vendor} scenario")
        p.add_argument("--out", required=True, type=Path, help="output directory")
        p.add_argument("--ranks", type=int, default=4)
        p.add_argument("--steps", type=int, default=2)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--plant", action="append", default=[], metavar="CHECK[:RANKS[:STEPS[:K=V,...]]]")
        p.add_argument("--clean", action="store_true", help="no planted problem (refuses --plant)")
        p.add_argument("--events-per-rank", type=int, default=None)
        p.add_argument("--layers", type=int, default=None)
        if vendor == "ascend":
            p.add_argument("--block-num-header", action="store_true")
            p.add_argument("--drop-op-state", action="store_true")
            p.add_argument("--extra-files", action="store_true")
        else:
            p.add_argument("--gz", action="store_true")
            p.add_argument("--legacy-nccl", action="store_true")
            p.add_argument("--no-cuda-sync", action="store_true")
    r = sub.add_parser("repeat", help="enlarge a real Kineto trace by repeating its ProfilerSteps")
    r.add_argument("--src", required=True, type=Path)
    r.add_argument("--out", required=True, type=Path, help="output file (.json or .json.gz)")
    r.add_argument("--rank", type=int, default=0)
    r.add_argument("--world-size", type=int, default=None)
    r.add_argument("--target-mb", type=float, default=90.0, help="size of the written file, MB (1e6 B)")
    sub.add_parser("catalog", help="print the catalog of plantable problems")
    return ap


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "catalog":
            print(json.dumps(catalog(), indent=1))
            return 0
        if args.cmd == "repeat":
            t0 = time.perf_counter()
            out = repeat_kineto_trace(
                args.src, args.out, args.rank, int(args.target_mb * 1e6), args.world_size
            )
            print(
                json.dumps(
                    {
                        "out": str(out),
                        "bytes": out.stat().st_size,
                        "seconds": round(time.perf_counter() - t0, 3),
                    }
                )
            )
            return 0
        if args.clean and args.plant:
            raise ValueError("--clean and --plant exclude each other")
        sc = Scenario(
            args.cmd,
            ranks=args.ranks,
            steps=args.steps,
            seed=args.seed,
            plants=[parse_plant_spec(s) for s in args.plant],
        )
        common = {"events_per_rank": args.events_per_rank, "layers": args.layers}
        if args.cmd == "ascend":
            out = write_ascend_profile(
                sc,
                args.out,
                block_num_header=args.block_num_header,
                drop_op_state=args.drop_op_state,
                extra_files=args.extra_files,
                **common,
            )
        else:
            out = write_kineto_profile(
                sc,
                args.out,
                gz=args.gz,
                legacy_nccl=args.legacy_nccl,
                cuda_sync_events=not args.no_cuda_sync,
                **common,
            )
        print(
            json.dumps(
                {
                    "out": str(out),
                    "vendor": sc.vendor,
                    "ranks": sc.ranks,
                    "steps": sc.steps,
                    "seed": sc.seed,
                    "expected_findings": expected_findings(sc),
                    "tolerated_findings": tolerated_findings(sc),
                },
                indent=1,
            )
        )
        return 0
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
