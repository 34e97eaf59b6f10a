"""The code editor behind `stepdoctor suggest-edit CODE_PATH --fix ID [--apply]`.

Given a fix from the knowledge base and one file, find where the fix belongs and produce a unified diff.

Python files are analysed with the `ast` module, never with regular expressions: calls are matched by
their fully qualified name after resolving the file's imports (`from torch.nn.parallel import
DistributedDataParallel as DDP` makes `DDP(...)` match `torch.nn.parallel.DistributedDataParallel`), and
loops are found structurally. Edits are made on the original text at the source positions the AST reports
(`lineno` / `col_offset` / `end_lineno` / `end_col_offset`), so formatting, comments and quoting elsewhere
stay exactly as they were; nothing is regenerated with `ast.unparse`. Shell launch scripts are not Python,
so they are read line by line (`export NAME=value`, `NAME=value cmd`, `unset NAME`).

Every edit kind is idempotent: when the file already carries the fix (a literal `num_workers >= 1`, a
`gc.freeze()` call, the variable already exported with a good value) nothing changes and the result says so.
When no place is found, the result says that too and carries the fix's before/after template.

Each edit kind is one module of `kinds/` (its fields, rules and handler); the schema of a fix parses its
items into those models, so this package loads its driver only when one of its names is asked for (the
schema imports `kinds/` while the driver imports the schema).
"""

from __future__ import annotations

import importlib
from typing import Any

_HOMES = {
    "apply_edit": "driver",
    "suggest_edit": "driver",
    "suggest_edits_for_fixes": "driver",
    "EditConflictError": "text",
    "EditLocation": "text",
    "EditResult": "text",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)


__all__ = [
    "EditConflictError",
    "EditLocation",
    "EditResult",
    "apply_edit",
    "suggest_edit",
    "suggest_edits_for_fixes",
]

