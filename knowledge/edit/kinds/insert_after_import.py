"""`insert_after_import`: insert statements right after `import <module>` (`torch_npu` set-up)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any, Literal

from pydantic import model_validator

from ..pyinsert import header_imports, import_edit, insert_lines_edit, rendered_statements
from ..text import EditLocation, Outcome, TextEdit, one_line
from .base import InsertBase

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..pymodule import Module
    from .base import EnvVar


class InsertAfterImport(InsertBase):
    """Insert `statements` after `import <locate.after_import>`, correcting a statement that sets the same thing."""

    kind: Literal["insert_after_import"]

    @model_validator(mode="after")
    def _anchored(self) -> InsertAfterImport:
        if not self.locate.after_import:
            raise ValueError("insert_after_import edit needs locate.after_import")
        return self

    def apply(self, mod: Module, params: dict[str, Any], explicit: set[str], env: Sequence[EnvVar]) -> Outcome:
        """Insert statements after `import <module>`; a statement that sets the same thing elsewhere in the file
        (same callee / same assignment target) is corrected in place instead of duplicated."""
        src = mod.src
        module = self.locate.after_import or ""
        if self.locate.require_imports_any and not (mod.packages & set(self.locate.require_imports_any)):
            # e.g. torch_npu set-up in a file that does not use torch at all: not the file to change
            return Outcome(notes=[f"the file imports none of {', '.join(self.locate.require_imports_any)}"])
        out = Outcome(matched=True)
        existing: dict[tuple[str, str], list[ast.stmt]] = {}
        for node in ast.walk(mod.tree):
            if isinstance(node, ast.stmt):
                key = _statement_key(mod, node)
                if key:
                    existing.setdefault(key, []).append(node)
        todo: list[str] = []
        for text, stmt in rendered_statements(self.statements, params):
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
            header = header_imports(mod)
            if any(anchor is h for h in header):
                # A top-level import: put the set-up below the whole import block, not in the middle of it.
                after, where = max(h.end_lineno or h.lineno for h in header), "after the imports"
            out.edits.append(insert_lines_edit(src, after, todo, src.indent(anchor.lineno)))
            out.locations.append(EditLocation(line=after + 1, what=f"inserted {'; '.join(todo)} {where}"))
            return out
        if module not in self.imports:
            out.matched = False
            out.notes.append(f"no `import {module}` found")
            return out
        # Import the module and set it up in one insertion, so the statements follow the import.
        imp = import_edit(mod, module)
        if imp is None:  # bound some other way (`import x as x`): set up after the header imports
            header = header_imports(mod)
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
