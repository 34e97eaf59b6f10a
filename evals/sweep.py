"""Robustness sweep: `issues` and `breakdown` on every profile under a folder, as a user runs them.

Each entry of DIR (a file or a folder; with --files, every trace file found below DIR instead) is passed to the
installed CLI in a subprocess, with a fresh cache, and its outcome is classified:
  ok          exit 0 and JSON on stdout (the findings are counted by severity);
  refused     exit 2 with exactly one line on stderr, no traceback: the input is not a profile (or nothing usable
              is left), said in one line;
  broken      anything else: a traceback, a crash, several lines of error, or exit 0 without JSON.

A sweep over real traces a project did not record (HolisticTraceAnalysis' and TraceLens' test traces, say)
checks what no generated input can: that every reader and check survives real layouts. Exit status 1 when
an entry is broken.

Usage: python -m stepdoctor.evals.sweep DIR [--files] [--json OUT] [--timeout S]
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ..analysis.ingest.discover.content import KINETO_NAME_RE

COMMANDS = ("issues", "breakdown")


@dataclass
class Outcome:
    path: str
    command: str
    status: str                                     # ok / refused / broken
    exit_code: int
    error: str = ""                                 # the last stderr line (refused, broken)
    severities: dict[str, int] = field(default_factory=dict)   # issues: findings per severity


def run_one(path: Path, command: str, timeout: float) -> Outcome:
    """`stepdoctor COMMAND PATH --format json` in a subprocess with its own cache folder."""
    with tempfile.TemporaryDirectory() as cache:
        cmd = [sys.executable, "-m", "stepdoctor", command, str(path), "--format", "json"]
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                               env={**os.environ, "STEPDOCTOR_CACHE_DIR": cache})
        except subprocess.TimeoutExpired:
            return Outcome(str(path), command, "broken", -1, f"timed out after {timeout:.0f} s")
    err_lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    last = err_lines[-1] if err_lines else ""
    if p.returncode == 0:
        try:
            doc = json.loads(p.stdout)
        except ValueError:
            return Outcome(str(path), command, "broken", 0, "exit 0 without JSON on stdout")
        sev = collections.Counter(f.get("severity") for f in doc.get("findings", []))
        return Outcome(str(path), command, "ok", 0, severities=dict(sev))
    one_line = p.returncode == 2 and len(err_lines) == 1 and "Traceback" not in p.stderr
    return Outcome(str(path), command, "refused" if one_line else "broken", p.returncode, last)


def entries(root: Path, files: bool) -> list[Path]:
    """The profiles to pass: DIR's entries, or (files) every trace file below it (.json, .json.gz as discovery
    names them, .db)."""
    if files:
        return sorted(p for p in root.rglob("*") if p.is_file() and (KINETO_NAME_RE.search(p.name)
                                                                      or p.name.endswith(".db")))
    return sorted(p for p in root.iterdir() if not p.name.startswith("."))


def sweep(root: Path, files: bool = False, timeout: float = 600.0) -> list[Outcome]:
    return [run_one(p, c, timeout) for p in entries(root, files) for c in COMMANDS]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", type=Path)
    ap.add_argument("--files", action="store_true", help="every trace file below DIR, not DIR's entries")
    ap.add_argument("--json", type=Path, help="write the outcomes here")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per command")
    args = ap.parse_args(argv)
    out = sweep(args.dir, args.files, args.timeout)
    for o in out:
        sev = " ".join(f"{k}={v}" for k, v in sorted(o.severities.items()))
        print(f"{o.status:8s} {o.command:9s} rc={o.exit_code} {Path(o.path).name}  {sev or o.error[:160]}")
    counts = collections.Counter(o.status for o in out)
    print(f"{len(out)} runs: " + ", ".join(f"{counts[s]} {s}" for s in ("ok", "refused", "broken")))
    if args.json:
        args.json.write_text(json.dumps([asdict(o) for o in out], indent=1))
    return 1 if counts["broken"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
