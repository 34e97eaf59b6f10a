"""Which edit items of a fix run on a file: the file's kind, the caller's parameters, and the skip rules
(framework, parameters, foreign device APIs); `fallback_template` is what a fix shows where no item applies.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ..schema import Fix
from .kinds import EditBase
from .text import SHELL_SUFFIXES, FileKind

__all__ = ["DEVICE_WORDS", "check_params", "fallback_template", "file_kind", "foreign_device", "skip_reason"]


def file_kind(path: Path, text: str) -> FileKind:
    if path.suffix == ".py":
        return "python"
    if path.suffix in SHELL_SUFFIXES:
        return "shell"
    first = text.split("\n", 1)[0]
    if first.startswith("#!"):
        if "python" in first:
            return "python"
        if re.search(r"\b(ba|z|k|da)?sh\b", first):
            return "shell"
    raise ValueError(f"{path}: not a Python file (.py) or shell launch script (.sh); cannot edit it")


def check_params(params: dict[str, Any] | None) -> dict[str, Any]:
    """Caller parameters become Python literals in the edit (repr), so only literal-able types are allowed."""

    def ok(value: Any) -> bool:
        if value is None or type(value) in (bool, int, float, str):
            return True
        if isinstance(value, list | tuple):
            return all(ok(v) for v in value)
        if isinstance(value, dict):
            return all(isinstance(k, str) and ok(v) for k, v in value.items())
        return False

    params = dict(params or {})
    for key, value in params.items():
        if not ok(value):
            raise TypeError(
                f"edit parameter {key!r} must be a number, string, bool, None or a list / dict of "
                f"those, got {type(value).__name__}"
            )
    return params


def fallback_template(fix: Fix, frameworks: set[str] | None) -> str | None:
    parts = []
    for edit in fix.code_edit:
        if frameworks and edit.framework != "any" and edit.framework not in frameworks:
            continue
        parts.append(
            f"# {fix.id} ({edit.framework}): {edit.locate.description}\n"
            f"# before:\n{edit.before.rstrip()}\n# after:\n{edit.after.rstrip()}"
        )
    if not parts and frameworks:
        return fallback_template(fix, None)  # nothing for this file's framework: show every variant
    if not parts and fix.env:
        lines = [f"export {v.name}={v.value}" if v.value is not None else f"unset {v.name}" for v in fix.env]
        parts.append(f"# {fix.id}: in the launch script\n" + "\n".join(lines))
    return "\n\n".join(parts) or None


DEVICE_WORDS = {"ascend": re.compile(r"\btorch_npu\b|\.npu\b"), "cuda": re.compile(r"\.cuda\b|\bcuda\.")}


def foreign_device(edit: EditBase, devices: set[str]) -> str | None:
    """The vendor whose API the edit would introduce into a file that visibly runs on another one, else
    None (a file that names no device, or names that vendor, takes the edit)."""
    if not devices:
        return None
    produced = " ".join(edit.produced())
    for vendor, pattern in DEVICE_WORDS.items():
        if vendor not in devices and pattern.search(produced):
            return vendor
    return None


def skip_reason(edit: EditBase, frameworks: set[str] | None, devices: set[str], explicit: set[str],
                 matched: bool) -> str | None:
    """Why an edit item does not run on this file ("" for a silent skip), or None when it runs."""
    if not edit.automatic:
        return ""
    if frameworks and edit.framework != "any" and edit.framework not in frameworks:
        return ""
    if edit.requires_params and not set(edit.requires_params) <= explicit:
        return ""
    if edit.unless_params and set(edit.unless_params) & explicit:
        return ""
    foreign = foreign_device(edit, devices)
    if foreign:  # e.g. an NPU fused optimizer offered for a script that runs on CUDA: never port it silently
        return f"this edit brings in {foreign} APIs; the file runs on {'/'.join(sorted(devices))}"
    if edit.skip_if_matched and matched:  # an earlier item of this fix already covers the file
        return ""
    return None
