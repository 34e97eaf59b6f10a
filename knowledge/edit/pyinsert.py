"""Python edits that insert statements: imports, before the training loop, after an import."""

from __future__ import annotations

import ast
import sys
from typing import Any

from .kinds.base import Locate, render_template
from .pymodule import LOOPS, SCOPES, Module
from .text import EditLocation, Outcome, Source, TextEdit, one_line

# ----------------------------------------------------------------------------------------------------
# inserted statements


def header_imports(mod: Module) -> list[ast.Import | ast.ImportFrom]:
    """Top-level imports of the file header (before the first def / class / loop / with statement)."""
    found: list[ast.Import | ast.ImportFrom] = []
    for stmt in mod.tree.body:
        if isinstance(stmt, (*SCOPES, *LOOPS, ast.With, ast.AsyncWith)):
            break
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            found.append(stmt)
    return found


def _import_top(stmt: ast.Import | ast.ImportFrom) -> str:
    name = stmt.names[0].name if isinstance(stmt, ast.Import) else (stmt.module or "")
    return name.split(".")[0]


def import_edit(mod: Module, module: str) -> TextEdit | None:
    """`import module` in the file header, unless the name is already bound.

    Placement follows isort conventions without reordering anything: a standard-library module goes into
    the standard-library group (before the first plain `import x` that sorts after it, else after the group's
    plain imports, else above the first import with a blank line); any other module goes after the last
    header import. Without imports it goes below the module docstring / comment header.
    """
    if mod.aliases.get(module) == module:
        return None
    src = mod.src
    line = f"import {module}"
    imports = header_imports(mod)
    if not imports:
        body = mod.tree.body
        first = body[0] if body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            return insert_lines_edit(src, first.end_lineno or first.lineno, ["", line], "")
        return insert_lines_edit(src, (first.lineno - 1) if first else len(src.lines), [line], "")
    if module not in sys.stdlib_module_names:
        return insert_lines_edit(src, max(s.end_lineno or s.lineno for s in imports), [line], "")
    std = [s for s in imports if _import_top(s) in sys.stdlib_module_names and _import_top(s) != "__future__"]
    plain = [s for s in std if isinstance(s, ast.Import)]
    later = next((s for s in plain if s.names[0].name > module), None)
    if later is not None:
        return insert_lines_edit(src, later.lineno - 1, [line], "")
    if plain:
        return insert_lines_edit(src, max(s.end_lineno or s.lineno for s in plain), [line], "")
    if std:
        return insert_lines_edit(src, std[0].lineno - 1, [line], "")
    first_import = next((s for s in imports if _import_top(s) != "__future__"), imports[-1])
    if _import_top(first_import) == "__future__":
        return insert_lines_edit(src, first_import.end_lineno or first_import.lineno, ["", line], "")
    return insert_lines_edit(src, first_import.lineno - 1, [line, ""], "")


def insert_lines_edit(src: Source, after_line: int, lines: list[str], indent: str) -> TextEdit:
    """Insert whole lines after 1-based `after_line` (0 = at the top), adding a newline when the file's last
    line has none."""
    pos = src.line_start(after_line + 1)
    nl = src.newline
    body = "".join(f"{indent}{line}{nl}" for line in lines)
    if pos == len(src.text) and src.text and not src.text.endswith(("\n", "\r")):
        body = nl + body
    return TextEdit(pos, pos, body)


def rendered_statements(statements: list[str], params: dict[str, Any]) -> list[tuple[str, ast.stmt]]:
    """Each statement template filled with `params`, with its parsed statement."""
    out = []
    for source in statements:
        rendered = render_template(source, params)
        out.append((rendered, ast.parse(rendered).body[0]))
    return out


def training_loop(mod: Module) -> ast.stmt | None:
    """The statement to insert before: the best-scoring outermost training loop, else a `x.train(epochs,
    dataset, ...)` call statement (MindSpore Model.train runs the loop itself).

    Scoring of loops that are not nested in another loop: +4 when the iterated expression names epochs,
    +2 when it names a loader or an iterator, +1 when it names a dataset / data / batch, +2 when the body
    calls `.backward()` / `.step()` / a train-step function. A loop needs 2 points to count (a loop over
    something merely called `data` is not a training loop). Ties go to the first in the file.
    """
    best: tuple[int, ast.stmt] | None = None
    for node in ast.walk(mod.tree):
        if not isinstance(node, LOOPS) or node in mod.in_loop:
            continue
        header = node.test if isinstance(node, ast.While) else node.iter
        words = " ".join(
            n.id if isinstance(n, ast.Name) else n.attr
            for n in ast.walk(header)
            if isinstance(n, ast.Name | ast.Attribute)
        ).lower()
        score = 0
        if "epoch" in words:
            score += 4
        if "loader" in words or "iterator" in words:
            score += 2
        elif any(w in words for w in ("dataset", "batch", "data")):
            score += 1
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                name = sub.func.attr if isinstance(sub.func, ast.Attribute) else getattr(sub.func, "id", "")
                if name in ("backward", "step") or "train_step" in name or "train_one_epoch" in name:
                    score += 2
                    break
        if score >= 2 and (
            best is None
            or score > best[0]
            or (score == best[0] and (node.lineno, node.col_offset) < (best[1].lineno, best[1].col_offset))
        ):
            best = (score, node)
    if best:
        return best[1]
    for call in mod.calls():
        if (
            isinstance(call.func, ast.Attribute)
            and call.func.attr == "train"
            and len(call.args) + len(call.keywords) >= 2
        ):
            return mod.statement_of(call)
    return None


def already_applied(mod: Module, loc: Locate, out: Outcome) -> bool:
    """True (and `out` says where) when the script already makes a call of `locate.present_if_calls`: the
    edit is in place and nothing is inserted twice."""
    present = mod.has_call(loc.present_if_calls) if loc.present_if_calls else None
    if present is None:
        return False
    out.matched = True
    out.locations.append(EditLocation(line=present.lineno, what=f"already calls {one_line(mod.src.segment(present))}"))
    return True


