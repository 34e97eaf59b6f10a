"""Benchmarks: stepdoctor against the peer tools on the same input."""

from __future__ import annotations

import compileall
from pathlib import Path

# stepdoctor's top-level packages (pyproject's package-dir mapping: the repository root is the package)
PACKAGES = ("analysis", "knowledge", "tools", "server", "evals")


def compile_bytecode() -> bool:
    """Compile stepdoctor's modules to bytecode, as installing a wheel does (pip compiles at install, as it
    did for the peer tools measured beside it). An editable install run with PYTHONDONTWRITEBYTECODE=1 (set
    on this VM) otherwise compiles every module from source in every process: 0.15-0.2 s of a warm
    `stepdoctor issues` on bench8 (0.85-1.2 s without bytecode, 0.76-0.82 s with). Writes only the
    `__pycache__` folders of stepdoctor's own sources; True when every module compiled."""
    import stepdoctor

    root = Path(stepdoctor.__file__).resolve().parent
    ok = bool(compileall.compile_file(root / "__init__.py", quiet=1))
    for name in PACKAGES:
        if (root / name).is_dir():
            ok = bool(compileall.compile_dir(root / name, quiet=1)) and ok
    return ok
