"""Before/after answer diff: run the same CLI answers (JSON) under two checkouts and list what differs.

    python -m stepdoctor.evals.answer_diff OLD_ROOT PROFILE... [--commands issues breakdown]

OLD_ROOT is a folder holding an older checkout as `stepdoctor/` (e.g. a `git worktree` linked there); the
new side is the installed package, or with `--new-root` another such folder (a commit checked out apart from a
working tree that is being edited). Each side gets its own cache folder so the two never read each other's
databases. Prints one line per (profile, command): `same`; `same-refusal` where both sides exit with the same error
(no answer to compare); or `DIFF` with the first differing JSON paths (a side that fails is named there).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

_OLD_ENTRY = ("import sys; sys.path.insert(0, {root!r}); import importlib; "
              "m = importlib.import_module('stepdoctor.main') if importlib.util.find_spec('stepdoctor.main') "
              "and {root!r} in (importlib.util.find_spec('stepdoctor.main').origin or '') else None; "
              "sys.argv = ['stepdoctor', *sys.argv[1:]]; "
              "raise SystemExit((m.main if m else importlib.import_module('stepdoctor.tools.cli').run)())")


def _answer(argv: list[str], root: str | None, cache: str) -> object:
    code = _OLD_ENTRY.format(root=root) if root else "from stepdoctor.main import main; import sys; " \
        "sys.argv = ['stepdoctor', *sys.argv[1:]]; raise SystemExit(main())"
    out = subprocess.run([sys.executable, "-c", code, *argv, "--format", "json"], capture_output=True, text=True,
                         env={**os.environ, "STEPDOCTOR_CACHE_DIR": cache}, cwd=tempfile.gettempdir())
    try:
        return json.loads(out.stdout)
    except ValueError:
        return _Failed(out.returncode, (out.stderr.strip().splitlines() or [""])[-1])


class _Failed:
    """A side that gave no JSON answer: never equal to anything, so a failure is never reported as same."""

    def __init__(self, rc: int, last: str) -> None:
        self.text = f"exit {rc}: {last}"

    def __eq__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]


def _paths(a: object, b: object, at: str = "") -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        return [p for k in sorted(set(a) | set(b)) for p in _paths(a.get(k), b.get(k), f"{at}.{k}")]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [p for i, (x, y) in enumerate(zip(a, b, strict=True)) for p in _paths(x, y, f"{at}[{i}]")]
    if isinstance(a, _Failed) or isinstance(b, _Failed):
        return [f"{at or '.'} ({(a if isinstance(a, _Failed) else b).text})"]
    return [] if a == b else [at or "."]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old_root")
    ap.add_argument("profiles", nargs="+")
    ap.add_argument("--commands", nargs="+", default=["issues", "breakdown"])
    ap.add_argument("--new-root", default=None,
                    help="the folder holding the newer checkout as stepdoctor/ (default: this installed one)")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as old_cache, tempfile.TemporaryDirectory() as new_cache:
        differ = 0
        for prof in a.profiles:
            for cmd in a.commands:
                old = _answer([cmd, str(Path(prof).resolve())], a.old_root, old_cache)
                new = _answer([cmd, str(Path(prof).resolve())], a.new_root, new_cache)
                diff = _paths(old, new)
                # both sides refusing the input with the same message: no answer to compare, and no change
                refused = isinstance(old, _Failed) and isinstance(new, _Failed) and old.text == new.text
                differ += bool(diff) and not refused
                verdict = "same-refusal" if refused else "DIFF" if diff else "same"
                print(f"{verdict:12s} {cmd:10s} {prof}" + (f"  {diff[:5]}" if diff else ""), flush=True)
    return 1 if differ else 0


if __name__ == "__main__":
    raise SystemExit(main())
