"""`remove_call`: delete call statements inside loops (`torch.cuda.empty_cache()` each step)."""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING, Any, Literal

from ..pycalls import delete_statements
from ..text import EditLocation, Outcome, one_line
from .base import EditBase

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..pymodule import Module
    from .base import EnvVar


class RemoveCall(EditBase):
    """Delete the located call statements (only those inside loops when `locate.in_loop`)."""

    needs_calls = True

    kind: Literal["remove_call"]

    def apply(self, mod: Module, params: dict[str, Any], explicit: set[str], env: Sequence[EnvVar]) -> Outcome:
        """Delete call statements (inside loops when locate.in_loop). An `if` whose body holds only such calls
        and has no `else` goes with them, so `if step % 10 == 0: torch.cuda.empty_cache()` disappears whole."""
        out = Outcome()
        doomed: list[ast.stmt] = []
        for call, target in mod.calls_to(self.locate.calls):
            stmt = mod.statement_of(call)
            if not (isinstance(stmt, ast.Expr) and stmt.value is call):
                out.notes.append(f"line {call.lineno}: `{target}()` is part of a larger statement; left as is")
                continue
            if self.locate.in_loop and call not in mod.in_loop:
                out.notes.append(
                    f"line {call.lineno}: `{one_line(mod.src.segment(call))}` is outside loops; left as is"
                )
                continue
            doomed.append(stmt)
            out.locations.append(
                EditLocation(line=call.lineno, what=f"removed {one_line(mod.src.segment(call))}")
            )
        # Fold `if cond: <only doomed statements>` (no else) into one doomed `if`, innermost first.
        changed = True
        while changed:
            changed = False
            for stmt in list(doomed):
                parent = mod.parents.get(stmt)
                if (
                    isinstance(parent, ast.If)
                    and not parent.orelse
                    and parent not in doomed
                    and all(any(s is d for d in doomed) for s in parent.body)
                ):
                    doomed = [d for d in doomed if not any(d is s for s in parent.body)] + [parent]
                    changed = True
                    break
        if doomed:
            out.matched = True
            out.edits += delete_statements(mod, doomed)
        else:
            where = " inside loops" if self.locate.in_loop else ""
            out.notes.append(
                f"nothing to remove: no {' / '.join(f'{c}()' for c in self.locate.calls[:2])} "
                f"statement{where} in this file"
            )
        return out
