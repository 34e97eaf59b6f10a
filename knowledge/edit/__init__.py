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
"""


from .driver import apply_edit, suggest_edit, suggest_edits_for_fixes
from .text import EditConflictError, EditLocation, EditResult

__all__ = [
    "EditConflictError",
    "EditLocation",
    "EditResult",
    "apply_edit",
    "suggest_edit",
    "suggest_edits_for_fixes",
]

