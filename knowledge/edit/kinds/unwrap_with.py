"""`unwrap_with`: replace `with ctx(...):` by its body (a forced SDPA math backend).

`with sdpa_kernel(SDPBackend.MATH):` pins attention to the slow math kernel; the fix is the body without
the `with`, dedented, and the import names that only the context used are dropped.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any, Literal

from ..pycalls import delete_statements
from ..text import EditLocation, Outcome, TextEdit, one_line
from .base import EditBase

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..pymodule import Module
    from .base import EnvVar


class UnwrapWith(EditBase):
    """Unwrap every located context manager whose arguments name one of `locate.arg_names` (any when empty)."""

    needs_calls = True

    kind: Literal["unwrap_with"]

    def apply(self, mod: Module, params: dict[str, Any], explicit: set[str], env: Sequence[EnvVar]) -> Outcome:
        """Replace each matching `with ctx(...):` (on its own lines) by its body, dedented one level."""
        out = Outcome()
        src = mod.src
        dropped: list[ast.AST] = []
        for stmt in ast.walk(mod.tree):
            if not _with_matches(mod, stmt, self) or not mod.owns_lines(stmt):
                continue
            assert isinstance(stmt, ast.With | ast.AsyncWith)
            body_first = stmt.body[0].lineno
            if body_first == stmt.lineno:  # `with x: y` on one line: no block to dedent
                out.notes.append(f"line {stmt.lineno}: one-line `with`; edit it by hand")
                continue
            cut = len(src.indent(body_first)) - len(src.indent(stmt.lineno))
            strings = [n for n in ast.walk(stmt) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
            if any(s.end_lineno != s.lineno for s in strings):  # dedenting would change a multi-line string
                out.notes.append(f"line {stmt.lineno}: the block holds a multi-line string; edit it by hand")
                continue
            lines = src.lines[body_first - 1 : stmt.end_lineno]
            # lines keep their own line ends; a blank line keeps only its end, an under-indented continuation
            # line (inside brackets) loses just its leading blanks
            body = "".join(
                line.lstrip(" \t") if not line.strip() or line[:cut].strip() else line[cut:] for line in lines
            )
            end = src.line_start(stmt.end_lineno + 1)  # type: ignore[operator]
            out.edits.append(TextEdit(src.line_start(stmt.lineno), end, body))
            dropped.append(stmt.items[0].context_expr)
            out.matched = True
            out.locations.append(
                EditLocation(line=stmt.lineno, what=f"removed `with {one_line(src.segment(dropped[-1]), 60)}:`")
            )
        if dropped:
            edits, names, line = _unused_import_edits(mod, dropped)
            out.edits += edits
            if names:
                out.locations.append(
                    EditLocation(line=line, what=f"dropped the unused import of {', '.join(names)}")
                )
        return out


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _unused_import_edits(mod: Module, dropped: list[ast.AST]) -> tuple[list[TextEdit], list[str], int]:
    """Edits removing `from M import a, b` names that were used only inside the `dropped` nodes."""
    inside = {id(n) for d in dropped for n in ast.walk(d)}
    candidates = set().union(*(_names_in(d) for d in dropped)) if dropped else set()
    used_elsewhere = {n.id for n in ast.walk(mod.tree) if isinstance(n, ast.Name) and id(n) not in inside}
    unused = candidates - used_elsewhere
    edits: list[TextEdit] = []
    removed: list[str] = []
    first_line = 0
    doomed: list[ast.stmt] = []
    for stmt in mod.tree.body:
        if not isinstance(stmt, ast.ImportFrom) or stmt.level or stmt.module is None:
            continue
        gone = [a for a in stmt.names if (a.asname or a.name) in unused]
        if not gone:
            continue
        removed += [a.asname or a.name for a in gone]
        first_line = first_line or stmt.lineno
        kept = [a for a in stmt.names if a not in gone]
        if not kept:
            doomed.append(stmt)
            continue
        names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in kept)
        start, end = mod.src.span(stmt)
        edits.append(TextEdit(start, end, f"from {stmt.module} import {names}"))
    edits += delete_statements(mod, doomed)
    return edits, removed, first_line


def _with_matches(mod: Module, stmt: ast.stmt, edit: UnwrapWith) -> bool:
    if not isinstance(stmt, ast.With | ast.AsyncWith) or len(stmt.items) != 1:
        return False
    ctx = stmt.items[0].context_expr
    if not isinstance(ctx, ast.Call) or stmt.items[0].optional_vars is not None:
        return False
    if not mod.match_call(ctx, edit.locate.calls):
        return False
    if not edit.locate.arg_names:
        return True
    named = {
        n.attr
        for a in [*ctx.args, *(k.value for k in ctx.keywords)]
        for n in ast.walk(a)
        if isinstance(n, ast.Attribute)
    } | set().union(*(_names_in(a) for a in ctx.args))
    return bool(named & set(edit.locate.arg_names))
