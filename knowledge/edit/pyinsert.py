"""Python edits that insert statements: imports, before the training loop, after an import."""

from __future__ import annotations

import ast
import sys
from typing import Any

from ..schema import CodeEdit, render_template
from .pymodule import LOOPS, SCOPES, Module
from .text import EditLocation, Outcome, Source, TextEdit, one_line

# ----------------------------------------------------------------------------------------------------
# inserted statements


def _header_imports(mod: Module) -> list[ast.Import | ast.ImportFrom]:
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
    imports = _header_imports(mod)
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


def _statement_key(mod: Module, stmt: ast.stmt) -> tuple[str, str] | None:
    """What makes two statements 'the same setting': the resolved callee of a call statement, or the target of
    a single assignment (`torch_npu.npu.config.allow_internal_format = ...`)."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        name, _ = mod.qualname(stmt.value.func)
        return ("call", name) if name else None
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        name, _ = mod.qualname(stmt.targets[0])
        return ("assign", name) if name else None
    return None


def _rendered_statements(edit: CodeEdit, params: dict[str, Any]) -> list[tuple[str, ast.stmt]]:
    out = []
    for source in edit.statements:
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


def already_applied(mod: Module, edit: CodeEdit, out: Outcome) -> bool:
    """True (and `out` says where) when the script already makes a call of `locate.present_if_calls`: the
    edit is in place and nothing is inserted twice."""
    present = mod.has_call(edit.locate.present_if_calls) if edit.locate.present_if_calls else None
    if present is None:
        return False
    out.matched = True
    out.locations.append(EditLocation(line=present.lineno, what=f"already calls {one_line(mod.src.segment(present))}"))
    return True


def handle_insert_before_loop(
    mod: Module, edit: CodeEdit, params: dict[str, Any], explicit: set[str]
) -> Outcome:
    out = Outcome()
    src = mod.src
    if already_applied(mod, edit, out):
        return out
    anchor = training_loop(mod)
    if anchor is None:
        out.notes.append(
            "no training loop found (a for / while loop over epochs or a loader, or a model.train call)"
        )
        return out
    out.matched = True
    block = mod.block_of(anchor)
    index = next(i for i, s in enumerate(block) if s is anchor)
    preceding = [ast.dump(s) for s in block[max(0, index - len(edit.statements) - 2) : index]]
    todo = [text for text, stmt in _rendered_statements(edit, params) if ast.dump(stmt) not in preceding]
    if not todo:
        out.locations.append(EditLocation(line=anchor.lineno, what="statements already precede the loop"))
        return out
    # Keep a comment that introduces the loop attached to it: insert above such comment lines.
    line = anchor.lineno
    indent = src.indent(anchor.lineno)
    while line > 1 and src.lines[line - 2].strip().startswith("#") and src.indent(line - 1) == indent:
        line -= 1
    lines = ([f"# {edit.comment}"] if edit.comment else []) + todo
    out.edits.append(insert_lines_edit(src, line - 1, lines, indent))
    kind = "loop" if isinstance(anchor, LOOPS) else "statement"
    out.locations.append(
        EditLocation(line=anchor.lineno, what=f"inserted {'; '.join(todo)} before the {kind}")
    )
    return out


def handle_insert_after_import(
    mod: Module, edit: CodeEdit, params: dict[str, Any], explicit: set[str]
) -> Outcome:
    """Insert statements after `import <module>`; a statement that sets the same thing elsewhere in the file
    (same callee / same assignment target) is corrected in place instead of duplicated."""
    src = mod.src
    module = edit.locate.after_import or ""
    if edit.locate.require_imports_any and not (mod.packages & set(edit.locate.require_imports_any)):
        # e.g. torch_npu set-up in a file that does not use torch at all: not the file to change
        return Outcome(notes=[f"the file imports none of {', '.join(edit.locate.require_imports_any)}"])
    out = Outcome(matched=True)
    existing: dict[tuple[str, str], list[ast.stmt]] = {}
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.stmt):
            key = _statement_key(mod, node)
            if key:
                existing.setdefault(key, []).append(node)
    todo: list[str] = []
    for text, stmt in _rendered_statements(edit, params):
        key = _statement_key(mod, stmt)
        same = existing.get(key, []) if key else []
        if any(ast.dump(s) == ast.dump(stmt) for s in same):
            out.locations.append(EditLocation(line=same[0].lineno, what=f"already has {text}"))
            continue
        if same:
            for old in same:
                start, end = src.span(old)
                out.edits.append(TextEdit(start, end, text))
                out.locations.append(
                    EditLocation(line=old.lineno, what=f"{one_line(src.segment(old))} -> {text}")
                )
            continue
        todo.append(text)
    if not todo:
        return out
    # `import torch_npu` and `import torch_npu.contrib` both bind the name the statements use.
    anchors = [
        n
        for n in ast.walk(mod.tree)
        if isinstance(n, ast.Import)
        and any(a.asname is None and (a.name == module or a.name.startswith(module + ".")) for a in n.names)
    ]
    if anchors:
        anchor = min(anchors, key=lambda n: (n.lineno, n.col_offset))
        after, where = anchor.end_lineno or anchor.lineno, f"after import {module}"
        header = _header_imports(mod)
        if any(anchor is h for h in header):
            # A top-level import: put the set-up below the whole import block, not in the middle of it.
            after, where = max(h.end_lineno or h.lineno for h in header), "after the imports"
        out.edits.append(insert_lines_edit(src, after, todo, src.indent(anchor.lineno)))
        out.locations.append(EditLocation(line=after + 1, what=f"inserted {'; '.join(todo)} {where}"))
        return out
    if module not in edit.imports:
        out.matched = False
        out.notes.append(f"no `import {module}` found")
        return out
    # Import the module and set it up in one insertion, so the statements follow the import.
    imp = import_edit(mod, module)
    if imp is None:  # bound some other way (`import x as x`): set up after the header imports
        header = _header_imports(mod)
        after_line = max((h.end_lineno or h.lineno for h in header), default=0)
        imp = insert_lines_edit(src, after_line, [], "")
    nl = src.newline
    lines = "".join(f"{t}{nl}" for t in todo)
    out.edits.append(TextEdit(imp.start, imp.end, imp.text + lines))
    out.imports_done.add(module)
    out.locations.append(
        EditLocation(
            line=min(src.line_of(imp.start), max(len(src.lines), 1)),
            what=f"added import {module}; {'; '.join(todo)}",
        )
    )
    return out
