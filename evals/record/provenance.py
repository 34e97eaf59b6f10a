"""Write a recorded train_job.py run's PROVENANCE.md from its own files: scenario.json (command, date,
conditions) and the truths `known_true.py` reads from meta/ and traces/ with json and gzip (never stepdoctor).

    python evals/record/provenance.py RUN_DIR TWIN_DIR|- "JOB" "RECORDED BY"

JOB: the paragraph that says what the job is (model, grid, groups); RECORDED BY: the recorder's command line.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys

import known_true


def _known(run: str, twin: str | None) -> str:
    buf = io.StringIO()
    argv = sys.argv
    sys.argv = ["known_true.py", run, *([twin] if twin else [])]
    try:
        with contextlib.redirect_stdout(buf):
            known_true.main()
    finally:
        sys.argv = argv
    return buf.getvalue()


def _json(path: str) -> dict:
    with open(path, encoding="utf-8") as fh:
        return json.load(fh)


def main() -> None:
    run, twin, job, by = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
    twin = None if twin == "-" else twin
    name = os.path.basename(run.rstrip("/"))
    reps = known_true.recordings(run)[1:]
    sc = _json(f"{run}/scenario.json")
    rsc = [_json(f"{r}/scenario.json") for r in reps]
    prof = sc["profiled_steps"]
    when = sc["date_utc"] + "".join(f" ({os.path.basename(r)}: {s['date_utc']})" for r, s in zip(reps, rsc, strict=True))
    cond = (f"Attempt {sc['attempt']}; other processes took {sc['other_cpu_s']} CPU s during the {sc['wall_s']} s "
            "run" + "".join(f" ({os.path.basename(r)}: {s['other_cpu_s']} CPU s in {s['wall_s']} s)"
                            for r, s in zip(reps, rsc, strict=True)) + f". rc {sc['rc']}.")
    steps = f"ProfilerStep#{prof[0]}" + (f"..#{prof[-1]}" if len(prof) > 1 else "")
    planted = sc["planted"]
    twin_line = (f"Clean twin: `../{os.path.basename(twin.rstrip('/'))}/` (same settings, recorded right before "
                 "this run).\n") if twin else ""
    cmd = sc["command"]
    text = f"""# `{name}`: real CPU gloo profile, {sc['world_size']} ranks

Recorded {when} on this project's CPU VM ({sc['cpus']} vCPUs, 24 GB, no GPU), torch {sc['torch']}, backend gloo over \
loopback, one torchrun on one host, `torch.set_num_threads(1)` per rank, by `{by}` (PY=/work/torchvenv/bin/python; \
each planted run right after its clean twin), which ran:

```
{cmd}
```

**Planted:** {planted}.
{twin_line}
**Job.** {job}

**Profiler.** `torch.profiler.profile(activities=[CPU], schedule(wait=12, warmup=2, active={len(prof)}), \
record_shapes=True, on_trace_ready=tensorboard_trace_handler(traces, worker_name=f"rank{{rank}}", use_gzip=True))`: \
the traces hold {steps} of {sc['steps']} steps.

**Conditions.** {cond}

**Files.** `traces/rank<r>.*.pt.trace.json.gz`, `meta/step_times_rank<r>.json` (`step_ms` of every step: \
`time.perf_counter()` from before the batch is fetched to after `optimizer.step()` + `zero_grad()`; \
`profiled_steps`; `stage`, `dp_index`, `tp_index`; `extra_matmuls_per_step`), `stdout_rank<r>.txt`, \
`scenario.json`{', ' + ', '.join(f'`{os.path.basename(r)}/`' for r in reps) + ' (the same run recorded again, traces kept)' if reps else ''}.

## Known true (read from meta/ and traces/ by `python evals/record/known_true.py {name}\
{' ../' + os.path.basename(twin.rstrip('/')) if twin else ''}`: json and gzip, not stepdoctor)

{_known(run, twin)}"""
    for r in reps:
        text += f"\n### {os.path.basename(r)}\n\n{_known(r, None)}"
    with open(f"{run}/PROVENANCE.md", "w", encoding="utf-8") as fh:
        fh.write(text)


if __name__ == "__main__":
    main()
