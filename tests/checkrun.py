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


@dataclass
class Result:
    profile: Profile
    run: CheckRun

    def of(self, check: str) -> list[Finding]:
        return [f for f in self.run.findings if f.check == check]

    def one(self, check: str, subject: str | None = None) -> Finding:
        fs = [f for f in self.of(check) if subject is None or f.subject == subject]
        assert len(fs) == 1, [(f.check, f.subject) for f in self.run.findings]
        return fs[0]

    def scalar(self, query: str, params: list | None = None) -> float:
        return float(self.profile.rows(query, params)[0][0])


def analyse(path: Path, cache: Path, only: tuple[str, ...] = COMPUTE_COMM) -> Result:
    prof = open_profile(path, IngestOptions(cache_dir=cache))
    return Result(prof, run_checks(CheckContext(prof), only=only))


def _rounded(x: Any) -> Any:
    if isinstance(x, float):
        return float(f"{x:.6g}")
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_rounded(v) for v in x]
    return x


def assert_golden(check: str, case: str, findings: list[Finding]) -> None:
    """`findings` (of `check` on `case`) are the golden answer, field by field (or, with
    STEPDOCTOR_GOLDEN=write, become it)."""
    got = _rounded([f.model_dump(mode="json") for f in findings])
    path = GOLDEN / check / f"{case}.json"
    if os.environ.get("STEPDOCTOR_GOLDEN") == "write":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(got, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    assert path.is_file(), f"no golden answer {path}: run STEPDOCTOR_GOLDEN=write pytest tests/checks"
    want = json.loads(path.read_text(encoding="utf-8"))
    assert got == want, f"{check} on {case} differs from {path} (STEPDOCTOR_GOLDEN=write rewrites it)"
