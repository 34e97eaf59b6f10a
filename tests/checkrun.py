"""What the per-check test files (tests/checks/test_<check_id>.py) share: a profile's check run (`Result`),
the generated profiles with planted problems and the synthetic cluster4 they run on (fixtures in
tests/conftest.py, one ingest per session), and the golden answers each check file compares with.

Golden answers: tests/checks/golden/<check_id>/<case>.json holds the findings of one case as JSON, floats to
6 significant digits. `STEPDOCTOR_GOLDEN=write pytest tests/checks` writes them anew from what the checks say
now; read the diff before committing it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from stepdoctor.analysis.build import open_profile
from stepdoctor.analysis.checks.base import CheckContext, CheckRun, run_checks
from stepdoctor.analysis.models import Finding
from stepdoctor.analysis.store import IngestOptions, Profile

GOLDEN = Path(__file__).resolve().parent / "checks" / "golden"

# The compute and communication checks: what the planted scenarios and cluster4 run (each fires or stays
# silent on its own; running them together keeps a scenario to one run).
COMPUTE_COMM = ("aicpu-op", "dynamic-shape", "block-dim-underuse", "no-bound-op", "misaligned-shape",
                "freq-throttle", "affinity-api", "small-packet", "bandwidth-contention", "retransmission",
                "byte-misalignment")
# The host-side checks: what their generated profiles, the MindSpore guide cases and cluster4 run.
HOST = ("sync-stream", "op-compile", "sync-batchnorm", "gc-pause", "slow-dataloader", "host-bound", "memory-ops",
        "h2d-pageable", "exposed-comm-tail", "fp32-compute")


@dataclass
class Result:
    profile: Profile
    run: CheckRun
    ctx: CheckContext

    def of(self, check: str) -> list[Finding]:
        return [f for f in self.run.findings if f.check == check]

    def one(self, check: str, subject: str | None = None) -> Finding:
        fs = [f for f in self.of(check) if subject is None or f.subject == subject]
        assert len(fs) == 1, [(f.check, f.subject) for f in self.run.findings]
        return fs[0]

    def checks(self, severities: tuple[str, ...] = ("high", "medium", "low")) -> set[str]:
        return {f.check for f in self.run.findings if f.severity in severities}

    def scalar(self, query: str, params: list | None = None) -> float:
        return float(self.profile.rows(query, params)[0][0])


def analyse(path: Path, cache: Path, only: tuple[str, ...] = COMPUTE_COMM) -> Result:
    prof = open_profile(path, IngestOptions(cache_dir=cache))
    ctx = CheckContext(prof)
    return Result(prof, run_checks(ctx, only=only), ctx)


def ev(f: Finding, rank: int) -> dict[str, Any]:
    """A finding's evidence for one rank."""
    return f.evidence["per_rank"][str(rank)]


def rounded(x: Any) -> Any:
    if isinstance(x, float):
        return float(f"{x:.6g}")
    if isinstance(x, dict):
        return {k: rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [rounded(v) for v in x]
    return x


def assert_golden(check: str, case: str, findings: list[Finding]) -> None:
    """`findings` (of `check` on `case`) are the golden answer, field by field (or, with
    STEPDOCTOR_GOLDEN=write, become it)."""
    got = rounded([f.model_dump(mode="json") for f in findings])
    path = GOLDEN / check / f"{case}.json"
    if os.environ.get("STEPDOCTOR_GOLDEN") == "write":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    assert path.is_file(), f"no golden answer {path}: run STEPDOCTOR_GOLDEN=write pytest tests/checks"
    want = json.loads(path.read_text(encoding="utf-8"))
    assert got == want, f"{check} on {case} differs from {path} (STEPDOCTOR_GOLDEN=write rewrites it)"


def kineto_sync_trace(path: Path, *, busy: bool, collective: bool = False, wait: str = "gloo:all_reduce") -> Path:
    """A one-rank CUDA Kineto trace of 3 steps. busy=False: 8 kernels per step of 50 µs, each followed by
    `aten::is_nonzero > aten::item > aten::_local_scalar_dense > cudaStreamSynchronize` that returns 1 µs after
    its kernel, then 200 µs of host work before the next launch (the device idles ~210 µs per sync).
    busy=True: one 5 ms kernel, then `loss.item()` waits for it (blocked ~5 ms) at the end of the step.
    collective: a 30 ms host silence in each step, spanned by an open `wait` annotation on another thread."""
    ev: list[dict[str, Any]] = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0, "args": {"name": "python"}}]
    t, corr = 1000.0, 1

    def kernel(at: float, dur: float) -> None:
        nonlocal corr
        ev.extend([{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": at,
                    "dur": 5.0, "args": {"correlation": corr}},
                   {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_128x64_nn", "pid": 0, "tid": 7,
                    "ts": at + 10, "dur": dur, "args": {"correlation": corr, "stream": 7, "device": 0}}])
        corr += 1

    def sync(outer: str, at: float, until: float) -> None:
        ops = [outer, "aten::item", "aten::_local_scalar_dense"] if outer != "aten::item" else \
            ["aten::item", "aten::_local_scalar_dense"]
        # with_stack frames: the user's function, then a library frame inside it (skipped for the source)
        for k, name in enumerate(("train.py(42): forward", "torch/nn/modules/module.py(1736): _call_impl")):
            ev.append({"ph": "X", "cat": "python_function", "name": name, "pid": 1, "tid": 1, "ts": at - 6 + k,
                       "dur": until - at + 12 - 2 * k})
        for k, name in enumerate(ops):
            ev.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": 1, "tid": 1, "ts": at + k,
                       "dur": until - at + 4 - 2 * k})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "pid": 1, "tid": 1,
                   "ts": at + len(ops), "dur": until - at - len(ops)})

    for step in (1, 2, 3):
        t0 = t
        if busy:
            kernel(t, 5000.0)
            sync("aten::item", t + 20, t + 5011)
            t += 5020
        else:
            for _ in range(8):
                kernel(t, 50.0)
                sync("aten::is_nonzero", t + 20, t + 61)
                t += 261
        if collective:
            ev.append({"ph": "X", "cat": "user_annotation", "name": wait, "pid": 1, "tid": 9,
                       "ts": t + 5, "dur": 30_010.0})
            t += 30_020
            kernel(t, 50.0)
            t += 70
        ev.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                   "ts": t0 - 1, "dur": t - t0 + 2})
        t += 10.0
    doc = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100", "numSms": 132,
                                                     "computeMajor": 9, "computeMinor": 0}], "traceEvents": ev}
    path.mkdir(parents=True, exist_ok=True)
    (path / "rank0.pt.trace.json").write_text(json.dumps(doc))
    return path


def stragglers(prof: Profile) -> tuple[list[Finding], float]:
    """slow-rank and stage-imbalance on `prof` (both stand on the cross-rank replay): their findings and the
    seconds the two took."""
    import time

    t = time.perf_counter()
    run = run_checks(CheckContext(prof), only=["slow-rank", "stage-imbalance"])
    return run.findings, time.perf_counter() - t


def assert_predicts_twin(planted: Profile, change: dict, twins: list[Profile]) -> None:
    """The what-if `change` on the planted run lands within max(10 %, twice the clean twin's run-to-run noise)
    of the clean twin's measured step (the mean of its recordings' replayed steps): issue 34's rule."""
    import numpy as np

    from stepdoctor.analysis.replay import prepare
    from stepdoctor.tools import api

    pred = api.what_if(planted, **change).scenarios[0].predicted_step_ms
    clean = [float(np.mean([s.measured for s in prepare(t)[0]])) for t in twins]
    noise = float(np.std(clean, ddof=1) / np.mean(clean))
    assert abs(pred - np.mean(clean)) / np.mean(clean) <= max(0.10, 2 * noise), (pred, clean)
