"""`replace_callee`: swap the called function (`torch.optim.AdamW` -> `torch_npu.optim.NpuFusedAdamW`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, field_validator

from ..pycalls import edit_kwargs, matching_calls
from ..text import EditLocation, Outcome, TextEdit, one_line
from .base import CallKwargsBase, dotted_names

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..pymodule import Module
    from .base import EnvVar


class ReplaceCallee(CallKwargsBase):
    """Call `replacements[old]` where the file calls `old`, adjusting keywords the new callee takes."""

    kind: Literal["replace_callee"]
    replacements: dict[str, str] = Field(min_length=1, description="old -> new dotted callee name")

    @field_validator("replacements")
    @classmethod
    def _dotted(cls, value: dict[str, str]) -> dict[str, str]:
        dotted_names([*value, *value.values()])
        return value

    def produced(self) -> list[str]:
        return [*super().produced(), *self.replacements.values()]

    def apply(self, mod: Module, params: dict[str, Any], explicit: set[str], env: Sequence[EnvVar]) -> Outcome:
        out = Outcome()
        for call, target in matching_calls(mod, self.locate):
            if target is None or target not in self.replacements:
                continue
            new = self.replacements[target]
            sub = edit_kwargs(mod, call, self.kwargs, self.remove_kwargs, params, explicit, force_change=True)
            start, end = mod.src.span(call.func)
            sub.edits.append(TextEdit(start, end, new))
            whats = [
                f"{one_line(mod.src.segment(call.func), 40)} -> {new}",
                *(loc.what for loc in sub.locations),
            ]
            sub.locations = [EditLocation(line=call.lineno, what="; ".join(whats))]
            out.merge(sub)
        return out
