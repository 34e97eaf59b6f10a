"""`remove_sync_guard`: delete per-step `if not <tensor check>: raise` / `assert <tensor check>`.

`if not torch.isfinite(x).all(): raise ...` or `assert torch.isfinite(x).all()` in code that runs every step
(a loop body or a module's `forward`) makes the host wait for the device at each evaluation; the
reviewer-accepted fix deletes the check (it guards nothing the loss check cannot).
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any, Literal

from ..pycalls import delete_statements
from ..text import EditLocation, Outcome, one_line
from .base import EditBase

# Functions whose body runs once per step even though no loop encloses it in the file.
_PER_STEP_FUNCTIONS = frozenset({"forward", "training_step", "train_step", "step"})


if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..pymodule import Module
    from .base import EnvVar


class RemoveSyncGuard(EditBase):
    """Delete guards whose test reads a located tensor call on the host in per-step code."""

    needs_calls = True

    kind: Literal["remove_sync_guard"]

    def apply(self, mod: Module, params: dict[str, Any], explicit: set[str], env: Sequence[EnvVar]) -> Outcome:
        """Delete guards whose condition reads a tensor on the host in code that runs every step."""
        out = Outcome()
        doomed: list[ast.stmt] = []
        for stmt in ast.walk(mod.tree):
            if not isinstance(stmt, ast.If | ast.Assert) or not _is_guard(stmt) or not _runs_per_step(mod, stmt):
                continue
            call = _syncing_call(mod, stmt.test, self)
            if call is None:
                continue
            doomed.append(stmt)
            out.matched = True
            out.locations.append(
                EditLocation(
                    line=stmt.lineno,
                    what=f"removed the per-step check `{one_line(mod.src.segment(stmt.test), 60)}` "
                    f"(a host-device sync each time it runs)",
                )
            )
        if doomed:
            out.edits += delete_statements(mod, doomed)
            out.notes.append("to keep a NaN guard, check the loss every N steps (one sync per N steps)")
        return out


def _enclosing_function(mod: Module, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    while node in mod.parents:
        node = mod.parents[node]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return node
    return None


def _runs_per_step(mod: Module, stmt: ast.stmt) -> bool:
    if stmt in mod.in_loop:
        return True
    func = _enclosing_function(mod, stmt)
    return func is not None and func.name in _PER_STEP_FUNCTIONS


def _syncing_call(mod: Module, test: ast.AST, edit: RemoveSyncGuard) -> ast.Call | None:
    """The located tensor call in `test` (`torch.isfinite(...)`), when the test also reads it on the host
    through a located method (`.all()`, `.item()`) or by being a condition itself. A test without a located
    call is left alone: `arr.all()` on a NumPy array is no device sync."""
    tensor = next(
        (n for n in ast.walk(test) if isinstance(n, ast.Call) and mod.match_call(n, edit.locate.calls)), None
    )
    return tensor


def _is_guard(stmt: ast.stmt) -> bool:
    """`assert ...`, or `if ...:` whose body only raises / warns / prints and that has no else branch."""
    if isinstance(stmt, ast.Assert):
        return True
    if not isinstance(stmt, ast.If) or stmt.orelse:
        return False
    for inner in stmt.body:
        if isinstance(inner, ast.Raise):
            continue
        if isinstance(inner, ast.Expr) and isinstance(inner.value, ast.Call):
            continue  # a logging / warnings call that reports the failed check
        return False
    return True
