"""`insert_before_loop`: insert statements before the outermost training loop (`gc.freeze()`)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any, Literal

from ..pyinsert import already_applied, insert_lines_edit, rendered_statements, training_loop
from ..pymodule import LOOPS
from ..text import EditLocation, Outcome
from .base import InsertBase

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..pymodule import Module
    from .base import EnvVar


class InsertBeforeLoop(InsertBase):
    """Insert `statements` (once) above the training loop; in place already when a `present_if_calls` call is."""

    kind: Literal["insert_before_loop"]

    def apply(self, mod: Module, params: dict[str, Any], explicit: set[str], env: Sequence[EnvVar]) -> Outcome:
        out = Outcome()
        src = mod.src
        if already_applied(mod, self.locate, out):
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
        preceding = [ast.dump(s) for s in block[max(0, index - len(self.statements) - 2) : index]]
        todo = [text for text, stmt in rendered_statements(self.statements, params) if ast.dump(stmt) not in preceding]
        if not todo:
            out.locations.append(EditLocation(line=anchor.lineno, what="statements already precede the loop"))
            return out
        # Keep a comment that introduces the loop attached to it: insert above such comment lines.
        line = anchor.lineno
        indent = src.indent(anchor.lineno)
        while line > 1 and src.lines[line - 2].strip().startswith("#") and src.indent(line - 1) == indent:
            line -= 1
        lines = ([f"# {self.comment}"] if self.comment else []) + todo
        out.edits.append(insert_lines_edit(src, line - 1, lines, indent))
        kind = "loop" if isinstance(anchor, LOOPS) else "statement"
        out.locations.append(
            EditLocation(line=anchor.lineno, what=f"inserted {'; '.join(todo)} before the {kind}")
        )
        return out
