"""After a capture: wait for every rank's trace, then write `issues` (JSON) and the HTML report BESIDE the
capture folder (`<folder>.issues.json`, `<folder>.html`; nothing is written into the profile itself).

Run by StepWatch in a detached process: python -m stepdoctor.capture.analyze FOLDER --ranks N [--timeout S]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path


def wait_for_ranks(folder: Path, ranks: int, timeout_s: float) -> int:
    """The number of ranks whose `.done_rank_N` marker appeared before the timeout."""
    deadline = time.monotonic() + timeout_s
    while True:
        done = len(list(folder.glob(".done_rank_*")))
        if done >= ranks or time.monotonic() > deadline:
            return done
        time.sleep(1.0)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--ranks", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600.0)
    a = ap.parse_args(argv)
    done = wait_for_ranks(a.folder, a.ranks, a.timeout)
    cli = [sys.executable, "-m", "stepdoctor"]
    base = a.folder.with_name(a.folder.name)
    with open(f"{base}.issues.json", "w") as out:
        subprocess.run([*cli, "issues", str(a.folder), "--format", "json"], stdout=out, check=False)
    subprocess.run([*cli, "report", str(a.folder), "-o", f"{base}.html"], check=False)
    if done < a.ranks:
        Path(f"{base}.incomplete.txt").write_text(f"{done} of {a.ranks} ranks finished their capture\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
