"""Score stepdoctor's findings against planted problems (`make evals`).

For every plantable problem and vendor, a seeded scenario with that one plant is written, `issues`
runs on it, and the result is scored:
  hit        — every expected finding (check, subject when given, exact ranks) is reported;
  false pos. — a medium/high finding that is neither expected nor tolerated by the plant;
plus one clean scenario per vendor, which must report nothing at medium or high. The summary line is
the plain "N passed, N failed" form so CI can read it.

Usage: python -m stepdoctor.evals.score [--only CHECK ...] [--vendor ascend|kineto] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..analysis.store import IngestOptions
from .generate import PROBLEMS, Plant, Scenario, expected_findings, tolerated_findings, write_profile


@dataclass
class Case:
    name: str
    vendor: str
    expected: list[dict]
    found: list[dict] = field(default_factory=list)
    missing: list[dict] = field(default_factory=list)
    false_positives: list[dict] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and not self.missing and not self.false_positives


def _matches(exp: dict, f) -> bool:
    return f.check == exp["check"] and (not exp["subject"] or f.subject == exp["subject"]) and \
        sorted(f.ranks) == sorted(exp["ranks"])


def run_case(name: str, sc: Scenario, workdir: Path) -> Case:
    from ..analysis import build
    from ..tools import api

    case = Case(name, sc.vendor, expected_findings(sc))
    t0 = time.perf_counter()
    try:
        prof_dir = workdir / name
        write_profile(sc, prof_dir)
        prof = build.open_profile(prof_dir, IngestOptions(cache_dir=workdir / "cache"))
        rep = api.issues(prof)
        tolerated = tolerated_findings(sc)
        for exp in case.expected:
            hit = next((f for f in rep.findings if _matches(exp, f)), None)
            (case.found if hit else case.missing).append(exp if hit is None else
                                                         {**exp, "severity": hit.severity, "title": hit.title})
        for f in rep.findings:
            if f.severity == "low" or any(_matches(e, f) for e in case.expected):
                continue
            if any(t["check"] == f.check and (not t["subject"] or t["subject"] == f.subject) for t in tolerated):
                continue
            case.false_positives.append({"check": f.check, "subject": f.subject, "ranks": f.ranks,
                                         "severity": f.severity, "title": f.title})
    except Exception as e:  # the scorer reports a crash as a failed case, it does not stop
        case.error = f"{type(e).__name__}: {e}"
    case.seconds = round(time.perf_counter() - t0, 2)
    return case


def scenarios(only: list[str] | None, vendor: str | None, seed: int) -> list[tuple[str, Scenario]]:
    out = []
    for v in ("ascend", "kineto"):
        if vendor and v != vendor:
            continue
        out.append((f"{v}-clean", Scenario(vendor=v, ranks=4, steps=2, seed=seed)))
        for check, prob in sorted(PROBLEMS.items()):
            if v not in prob.vendors or (only and check not in only):
                continue
            out.append((f"{v}-{check}", Scenario(vendor=v, ranks=4, steps=2, seed=seed, plants=[Plant(check)])))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="stepdoctor-evals", description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", help="only this check id (repeatable)")
    ap.add_argument("--vendor", choices=["ascend", "kineto"])
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--json", help="write the per-case results here")
    a = ap.parse_args(argv)
    cases = []
    with tempfile.TemporaryDirectory(prefix="stepdoctor-evals-") as tmp:
        for name, sc in scenarios(a.only, a.vendor, a.seed):
            c = run_case(name, sc, Path(tmp))
            cases.append(c)
            status = "ok  " if c.ok else "FAIL"
            detail = c.error or "; ".join(
                [f"missing {m['check']}:{m['subject']} {m['ranks']}" for m in c.missing]
                + [f"extra {f['severity']} {f['check']}:{f['subject']} {f['ranks']}" for f in c.false_positives])
            print(f"{status} {name:38s} {c.seconds:6.2f}s {detail}")
    expected = sum(len(c.expected) for c in cases)
    found = sum(len(c.found) for c in cases)
    fps = sum(len(c.false_positives) for c in cases)
    print(f"\nrecall {found}/{expected} planted findings; {fps} unexpected medium/high findings")
    passed = sum(c.ok for c in cases)
    print(f"evals: {passed} passed, {len(cases) - passed} failed")
    if a.json:
        Path(a.json).write_text(json.dumps([asdict(c) for c in cases], indent=2))
    return 0 if passed == len(cases) else 1


if __name__ == "__main__":
    sys.exit(main())
