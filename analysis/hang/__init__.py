"""Hang diagnosis from Flight Recorder dumps and stack snapshots (no profile needed; torch not needed).

`HangReport` (the answer's model, pydantic only) is importable without the diagnosis: the tool catalog names
it at start-up, and only the hang command loads the readers and the diagnosis (`report.diagnose_hang`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .models import HangReport

if TYPE_CHECKING:
    from .report import diagnose_hang

__all__ = ["HangReport", "diagnose_hang"]


def __getattr__(name: str) -> Any:
    if name == "diagnose_hang":
        from .report import diagnose_hang

        return diagnose_hang
    raise AttributeError(name)
