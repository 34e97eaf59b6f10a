"""`add_kwargs`: add or adjust keyword arguments of the located calls (`DataLoader(num_workers=...)`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ..pycalls import edit_kwargs, matching_calls
from ..text import EditLocation, Outcome, one_line
from .base import CallKwargsBase, KwargSpec, placeholders

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..pymodule import Module
    from .base import EnvVar


class AddKwargs(CallKwargsBase):
    """Ensure keyword arguments on every located call; `satisfied_by_kwargs` marks a call already fixed."""

    kind: Literal["add_kwargs"]
    kwargs: list[KwargSpec] = Field(min_length=1)
    satisfied_by_kwargs: list[str] = Field(
        default_factory=list, description="a matching call carrying one of these keywords is already fixed"
    )

    def apply(self, mod: Module, params: dict[str, Any], explicit: set[str], env: Sequence[EnvVar]) -> Outcome:
        out = Outcome()
        # Numbers the caller passes for this edit override "already configured".
        overridden = explicit & {name for spec in self.kwargs for name in placeholders(spec.value)}
        for call, _ in matching_calls(mod, self.locate):
            present = {kw.arg for kw in call.keywords}
            if self.satisfied_by_kwargs and present & set(self.satisfied_by_kwargs) and not overridden:
                out.matched = True
                out.locations.append(
                    EditLocation(
                        line=call.lineno,
                        what=f"{one_line(mod.src.segment(call.func), 40)}(...) already sets "
                        f"{', '.join(sorted(present & set(self.satisfied_by_kwargs)))}",
                    )
                )
                continue
            sub = edit_kwargs(mod, call, self.kwargs, self.remove_kwargs, params, explicit)
            callee = one_line(mod.src.segment(call.func), 40)
            if sub.locations:
                sub.locations = [
                    EditLocation(
                        line=call.lineno, what=f"{callee}(...): " + "; ".join(loc.what for loc in sub.locations)
                    )
                ]
            else:
                sub.locations = [EditLocation(line=call.lineno, what=f"{callee}(...) already has the arguments")]
            out.merge(sub)
        return out
