"""`env`: set / unset the fix's `env` variables, in shell launch scripts and in `os.environ` statements."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from ..shell import edit_env_python
from .base import EditBase

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..pymodule import Module
    from ..text import Outcome
    from .base import EnvVar


class Env(EditBase):
    """The fix's variables (limited to `params["env"]`, the names a finding flagged, when given); shell
    files are edited by the driver line by line, Python files here."""

    kind: Literal["env"]

    def apply(self, mod: Module, params: dict[str, Any], explicit: set[str], env: Sequence[EnvVar]) -> Outcome:
        return edit_env_python(mod, env, params)
