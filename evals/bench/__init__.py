"""Benchmarks: stepdoctor against the peer tools on the same input."""

from __future__ import annotations

import compileall
from pathlib import Path


def compile_bytecode() -> bool:
    """Compile stepdoctor's modules to bytecode, as installing a wheel does (pip compiles at install, as it
    did for the peer tools measured beside it). An editable install run with PYTHONDONTWRITEBYTECODE=1 (set
    on this VM) otherwise compiles every module from source in every process: 0.15-0.2 s of a warm
    `stepdoctor issues` on bench8 (0.85-1.2 s without bytecode, 0.76-0.82 s with). Writes only the
    `__pycache__` folders of stepdoctor's own sources; True when every module compiled."""
    import stepdoctor

    # the repository root is the package (pyproject's package-dir mapping); its subpackages are the
    # folders with an __init__.py (not .venv, tests, examples)
    root = Path(stepdoctor.__file__).resolve().parent
    ok = bool(compileall.compile_file(root / "__init__.py", quiet=1))
    for sub in sorted(d for d in root.iterdir() if (d / "__init__.py").is_file()):
        ok = bool(compileall.compile_dir(sub, quiet=1)) and ok
    return ok
