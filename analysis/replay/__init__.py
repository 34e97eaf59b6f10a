"""Cross-rank replay of each step from its collectives, and the what-if answers built on it.

The answers (`prepare`, `what_if`, `critical_path_of`, `gain_without`, `replay_scope`) live in `job` and are imported on first
use: the result models are all a renderer needs, and importing them must not load pandas and the store.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from .models import CriticalPath, Replay, WhatIf

__all__ = ["CriticalPath", "Replay", "WhatIf", "critical_path_of", "gain_without", "prepare", "replay_scope",
           "what_if"]
_JOB = {"critical_path_of", "gain_without", "prepare", "replay_scope", "what_if"}


def __getattr__(name: str) -> Any:
    if name in _JOB:
        return getattr(import_module(f"{__name__}.job"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
