"""`set_attribute`: set `a.b.c = value` where the file assigns another literal (`allow_tf32 = False`)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator, model_validator

from ..pymodule import NOT_LITERAL, literal, same_literal
from ..text import EditLocation, Outcome, TextEdit
from .base import EditBase, parse_or_raise

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..pymodule import Module
    from .base import EnvVar


class SetAttribute(EditBase):
    """Correct the literal assigned to one of `locate.attributes` to `assign_value`."""

    kind: Literal["set_attribute"]
    assign_value: str = Field(min_length=1, description="the Python literal to assign")

    @field_validator("assign_value")
    @classmethod
    def _literal(cls, value: str) -> str:
        parse_or_raise(value, "eval", "assign_value")
        return value

    @model_validator(mode="after")
    def _located(self) -> SetAttribute:
        if not self.locate.attributes:
            raise ValueError("set_attribute edit needs locate.attributes")
        return self

    def apply(self, mod: Module, params: dict[str, Any], explicit: set[str], env: Sequence[EnvVar]) -> Outcome:
        """Set `target = assign_value` where the file assigns another literal to a located attribute."""
        out = Outcome()
        wanted_src = self.assign_value or ""
        wanted = literal(ast.parse(wanted_src, mode="eval").body)
        for stmt in ast.walk(mod.tree):
            if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
                continue
            name, resolved = mod.qualname(stmt.targets[0])
            if not resolved or name not in self.locate.attributes:
                continue
            out.matched = True
            current = literal(stmt.value)
            if current is NOT_LITERAL:
                out.notes.append(f"line {stmt.lineno}: {name} is set from an expression; kept")
            elif same_literal(current, wanted):
                out.locations.append(EditLocation(line=stmt.lineno, what=f"{name} is already {wanted_src}"))
            else:
                start, end = mod.src.span(stmt.value)
                out.edits.append(TextEdit(start, end, wanted_src))
                out.locations.append(
                    EditLocation(
                        line=stmt.lineno, what=f"changed {name} = {mod.src.segment(stmt.value)} -> {wanted_src}"
                    )
                )
        return out
