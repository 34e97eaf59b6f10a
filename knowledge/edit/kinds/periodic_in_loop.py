"""`periodic_in_loop`: statements before the training loop and `if step % every == 0:` ones at the end of its body.

`gc.disable()` before the loop and `gc.collect()` every N steps: one planned pause instead of random ones.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, model_validator

from ..pyinsert import already_applied, insert_lines_edit, training_loop
from ..text import EditLocation, Outcome
from .base import InsertBase, render_template

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..pymodule import Module
    from .base import EnvVar


class PeriodicInLoop(InsertBase):
    """Insert `statements` above the loop and, every `params.every` steps, `periodic` at the end of its body."""

    kind: Literal["periodic_in_loop"]
    periodic: list[str] = Field(min_length=1, description="statements run every `params.every` steps")

    @model_validator(mode="after")
    def _every(self) -> PeriodicInLoop:
        if not isinstance(self.params.get("every"), int):
            raise ValueError("periodic_in_loop edit needs an int params.every")
        return self

    def statement_templates(self) -> list[str]:
        return [*self.statements, *self.periodic]

    def apply(self, mod: Module, params: dict[str, Any], explicit: set[str], env: Sequence[EnvVar]) -> Outcome:
        """Insert `statements` above the training loop and `if <step> % every == 0:` + `periodic` at the end of
        its body. Needs a step counter in the loop header; already applied when a located call is present."""
        out = Outcome()
        src = mod.src
        if already_applied(mod, self.locate, out):
            return out
        loop = training_loop(mod)
        step = _step_counter(loop) if loop is not None else None
        if loop is None or step is None:
            out.notes.append("no training loop with a step counter (`for step, batch in enumerate(loader)`)")
            return out
        assert isinstance(loop, ast.For | ast.AsyncFor)
        out.matched = True
        every = int(params.get("every", self.params.get("every", 100)))
        before = ([f"# {self.comment}"] if self.comment else []) + [
            render_template(t, params) for t in self.statements
        ]
        out.edits.append(insert_lines_edit(src, loop.lineno - 1, before, src.indent(loop.lineno)))
        last = loop.body[-1]
        if isinstance(last, ast.Break | ast.Continue | ast.Return | ast.Raise) and len(loop.body) > 1:
            last = loop.body[-2]  # code after an unconditional jump would never run
        inner = src.indent(loop.body[0].lineno)
        tail = [f"if {step} % {every} == 0:"] + [f"    {render_template(t, params)}" for t in self.periodic]
        out.edits.append(insert_lines_edit(src, last.end_lineno or last.lineno, tail, inner))
        out.locations.append(
            EditLocation(
                line=loop.lineno, what=f"inserted {'; '.join(before[-len(self.statements) :])} before the loop"
            )
        )
        out.locations.append(
            EditLocation(
                line=last.end_lineno or last.lineno,
                what=f"inserted {'; '.join(self.periodic)} every {every} steps at the end of the loop body",
            )
        )
        return out


def _step_counter(loop: ast.stmt) -> str | None:
    """The step variable of `for step, ... in enumerate(...)` (or `for step in range(...)`), else None."""
    if not isinstance(loop, ast.For | ast.AsyncFor) or not isinstance(loop.iter, ast.Call):
        return None
    func = loop.iter.func
    name = func.id if isinstance(func, ast.Name) else None
    if name == "enumerate" and isinstance(loop.target, ast.Tuple) and loop.target.elts:
        first = loop.target.elts[0]
        return first.id if isinstance(first, ast.Name) else None
    if name == "range" and isinstance(loop.target, ast.Name):
        return loop.target.id
    return None
