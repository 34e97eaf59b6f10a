"""What a recorded run of train_job.py / ddp_job.py holds, read from its files with json and gzip alone (never
with stepdoctor): the known truths its PROVENANCE.md states.

    python evals/record/known_true.py RUN_DIR [TWIN_DIR]

Prints markdown: per rank the steady unprofiled step (median of the unprofiled steps 3..wait-1 and
last_profiled+2..end, with p25-p75) and the profiled steps' step_ms; the job's steady step (mean of the ranks'
medians) for the run and each repeat<k>/; the planted-minus-twin deltas when TWIN_DIR is given; per rank and
ProfilerStep#N of the trace: its duration, the count and summed time of the gloo spans by kind, the DataLoader
op, the extra 384x384 matmuls of the slow-rank plant and the longest main-thread stretch with no op.
"""

from __future__ import annotations

import glob
import gzip
import json
import os
import statistics
import sys

LOADER = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def steady(meta: dict) -> list[float]:
    prof = meta["profiled_steps"]
    first, last = prof[0], prof[-1]
    ms = meta["step_ms"]
    return [ms[i] for i in range(len(ms)) if (3 <= i < first - 2) or i >= last + 2]


def metas(run: str) -> list[dict]:
    fs = sorted(glob.glob(f"{run}/meta/step_times_rank*.json"), key=lambda f: int(f.split("rank")[-1][:-5]))
    return [json.load(open(f)) for f in fs]


def job_steady(run: str) -> float | None:
    ms = metas(run)
    return statistics.mean(statistics.median(steady(m)) for m in ms) if ms else None


def recordings(run: str) -> list[str]:
    reps = sorted(glob.glob(f"{run}/repeat*"), key=lambda p: int(p.rsplit("repeat", 1)[1]))
    return [run, *reps]


def _q(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * (len(xs) - 1) + 0.5))]


def trace_rows(path: str) -> list[tuple]:
    with gzip.open(path) as f:
        d = json.load(f)
    ev = [e for e in d["traceEvents"] if e.get("ph") == "X"]
    steps = sorted((e for e in ev if str(e.get("name", "")).startswith("ProfilerStep#")), key=lambda e: e["ts"])
    main = min({e["tid"] for e in steps}) if steps else None
    out = []
    for s in steps:
        t0, t1 = s["ts"], s["ts"] + s["dur"]
        inside = [e for e in ev if t0 <= e["ts"] < t1 and e is not s]
        gloo: dict[str, list[float]] = {}
        for e in inside:
            if str(e["name"]).startswith("gloo:"):
                gloo.setdefault(e["name"][5:], []).append(e["dur"] / 1000)
        loader = sum(e["dur"] for e in inside if e["name"] == LOADER) / 1000
        extra = sum(1 for e in inside if e["name"] == "aten::mm"
                    and (e.get("args") or {}).get("Input Dims") == [[384, 384], [384, 384]])
        ops = sorted((e for e in inside if e["tid"] == main and e.get("cat") == "cpu_op"), key=lambda e: e["ts"])
        gap, after, end = 0.0, "-", t0
        prev = None
        for e in ops:
            if e["ts"] - end > gap:
                gap, after = e["ts"] - end, prev["name"] if prev else "step start"
            if e["ts"] + e["dur"] > end:
                end, prev = e["ts"] + e["dur"], e
        out.append((s["name"], s["dur"] / 1000, gloo, loader, extra, gap / 1000, after))
    return out


def main() -> None:
    run = sys.argv[1]
    twin = sys.argv[2] if len(sys.argv) > 2 else None
    ms = metas(run)
    print("| rank | steady unprofiled median (p25-p75) | profiled steps step_ms |\n|---|---|---|")
    for m in ms:
        st = steady(m)
        prof = ", ".join(f"#{i} {m['step_ms'][i]:.1f}" for i in m["profiled_steps"])
        print(f"| {m['rank']} | {statistics.median(st):.1f} ({_q(st, .25):.1f}-{_q(st, .75):.1f}) | {prof} |")
    mine = [job_steady(r) for r in recordings(run)]
    print(f"\nJob steady step per recording (first, then repeat2, ...): {', '.join(f'{x:.1f}' for x in mine)} ms")
    if twin:
        theirs = [job_steady(r) for r in recordings(twin)]
        print(f"Clean twin {os.path.basename(twin.rstrip('/'))}: {', '.join(f'{x:.1f}' for x in theirs)} ms; "
              "planted minus twin per recording: "
              + ", ".join(f"{a - b:+.1f}" for a, b in zip(mine, theirs, strict=False)) + " ms")
    print("\n| rank | step | dur | gloo spans (count: summed ms) | loader | extra mm | largest main-thread gap |")
    print("|---|---|---|---|---|---|---|")
    for f in sorted(glob.glob(f"{run}/traces/*.json.gz")):
        rank = os.path.basename(f).split(".")[0].removeprefix("rank")
        for name, dur, gloo, loader, extra, gap, after in trace_rows(f):
            g = "; ".join(f"{k} {len(v)}: {sum(v):.1f}" for k, v in sorted(gloo.items()))
            print(f"| {rank} | {name.split('#')[1]} | {dur:.1f} | {g} | {loader:.1f} | {extra} | {gap:.1f} after "
                  f"`{after}` |")


if __name__ == "__main__":
    main()
