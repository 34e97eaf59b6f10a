"""`unwrap_call`: replace `wrapper(x)` by `x` (`convert_sync_batchnorm(model)` -> `model`)."""

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


class UnwrapCall(EditBase):
    """Keep the wrapped argument of every located call."""

    needs_calls = True

    kind: Literal["unwrap_call"]

    def apply(self, mod: Module, params: dict[str, Any], explicit: set[str], env: Sequence[EnvVar]) -> Outcome:
        """Replace `wrapper(x, ...)` by `x`; a statement `x = wrapper(x)` becomes pointless and is deleted."""
        out = Outcome()
        doomed: list[ast.stmt] = []
        for call, target in mod.calls_to(self.locate.calls):
            inner = (
                call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "module"), None)
            )
            if inner is None:
                out.notes.append(f"line {call.lineno}: `{target}` has no argument to keep; left as is")
                continue
            out.matched = True
            stmt = mod.statement_of(call)
            inner_src = mod.src.segment(inner)
            if (
                isinstance(stmt, ast.Assign)
                and stmt.value is call
                and len(stmt.targets) == 1
                and mod.src.segment(stmt.targets[0]) == inner_src
                and mod.owns_lines(stmt)
            ):
                doomed.append(stmt)
                out.locations.append(
                    EditLocation(line=stmt.lineno, what=f"removed {one_line(mod.src.segment(stmt))}")
                )
            else:
                start, end = mod.src.span(call)
                out.edits.append(TextEdit(start, end, inner_src))
                out.locations.append(
                    EditLocation(line=call.lineno, what=f"replaced {target}(...) by {inner_src}")
                )
        out.edits += delete_statements(mod, doomed)
        if not out.matched:
            out.notes.append(
                f"nothing to remove: no call to {self.locate.calls[0]} in this file (if the profile "
                f"still shows it, look where the model is built)"
            )
        return out
