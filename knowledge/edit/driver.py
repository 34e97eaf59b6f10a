"""Run a fix's edit items over one file, combine fixes, build the diff and write it (`--apply`)."""

from __future__ import annotations

import ast
import contextlib
import difflib
import hashlib
import os
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...analysis.files import read_bytes
from ..loader import get_fix
from ..schema import Fix
from .applicable import check_params, fallback_template, file_kind, skip_reason
from .kinds import EditBase
from .pyinsert import import_edit
from .pymodule import Module
from .shell import edit_env_shell
from .text import (
    EditConflictError,
    EditLocation,
    EditResult,
    FileKind,
    LineMap,
    Outcome,
    Source,
    Status,
    apply_text_edits,
    line_map,
    map_back,
    one_line,
)

# ----------------------------------------------------------------------------------------------------
# driver


@dataclass
class _FixRun:
    text: str
    status: Status
    outcome: Outcome
    template: str | None


def _python_item(mod: Module, fix: Fix, edit: EditBase, params: dict[str, Any]) -> Outcome:
    """Run one edit item; a located `present_if_calls` call counts as already applied; needed imports go
    first in the edit list (at an equal offset they must end up above the code)."""
    outcome = edit.apply(mod, {**edit.params, **params}, set(params), fix.env)
    if not outcome.edits and not outcome.matched and edit.locate.present_if_calls:
        present = mod.has_call(edit.locate.present_if_calls)
        if present is not None:  # e.g. the optimizer is already torch_npu.optim.NpuFusedAdamW
            what = f"already uses {one_line(mod.src.segment(present.func), 60)}"
            outcome = Outcome(matched=True, locations=[EditLocation(line=present.lineno, what=what)])
    if outcome.edits:
        for module in edit.imports:
            imp = None if module in outcome.imports_done else import_edit(mod, module)
            if imp is not None:
                outcome.edits.insert(0, imp)
                outcome.locations.append(EditLocation(line=mod.src.line_of(imp.start), what=f"added import {module}"))
    return outcome


def _run_python(fix: Fix, text: str, params: dict[str, Any], history: list[LineMap],
                total: Outcome) -> tuple[str, set[str] | None]:
    """Apply the applicable items of `fix` to Python `text` one after the other, re-parsing in between."""
    try:
        mod = Module(Source(text))
    except SyntaxError as exc:
        raise ValueError(f"cannot parse the Python file: {exc.msg} (line {exc.lineno})") from None
    frameworks = mod.frameworks() or None
    devices = mod.devices()
    for edit in fix.code_edit:
        reason = skip_reason(edit, frameworks, devices, set(params), total.matched)
        if reason is not None:
            if reason:
                total.notes.append(reason)
            continue
        outcome = _python_item(mod, fix, edit, params)
        for loc in outcome.locations:
            loc.line = map_back(loc.line, history)
        total.merge(outcome)
        if not outcome.edits:
            continue
        new_text = apply_text_edits(text, outcome.edits)
        try:
            ast.parse(new_text)
        except SyntaxError as exc:  # a bug in an edit kind; never hand out a broken file
            raise RuntimeError(
                f"edit {edit.kind} of fix {fix.id} produced invalid Python "
                f"({exc.msg}, line {exc.lineno}); please report it"
            ) from None
        if new_text != text:
            history.append(line_map(mod.src, outcome.edits))
            text = new_text
            mod = Module(Source(text))
    return text, frameworks


def _run_fix(fix: Fix, text: str, kind: FileKind, params: dict[str, Any], history: list[LineMap]) -> _FixRun:
    """Apply every applicable edit item of `fix` to `text`, one after the other, re-parsing in between.

    Applicable: shell files take the `env` edit; Python files take the non-template edits whose framework
    matches the file's imports (all of them when the file imports neither torch nor mindspore), whose
    `requires_params` / `unless_params` fit the caller's parameters and that bring in no API of a device
    the file does not run on. `history` collects the line shifts of every applied batch so all locations
    are reported in lines of the original file.
    """
    total = Outcome()
    original = text
    frameworks: set[str] | None = None
    if kind == "shell":
        if any(e.kind == "env" for e in fix.code_edit):
            new_text, outcome, deltas = edit_env_shell(text, fix.env, params)
            for loc in outcome.locations:
                loc.line = map_back(loc.line, history)
            total.merge(outcome)
            if new_text != text:
                history.append(deltas)
                text = new_text
        else:
            total.notes.append("this fix has no launch-script edit")
    else:
        text, frameworks = _run_python(fix, text, params, history, total)
    status: Status = "changed" if text != original else "already-applied" if total.matched else "no-spot"
    template = fallback_template(fix, frameworks) if status == "no-spot" else None
    return _FixRun(text, status, total, template)


def _unified_diff(old: str, new: str, name: str) -> str:
    """difflib unified diff with git-style a/ b/ headers; marks a missing final newline like git does, so
    `git apply` accepts the patch."""
    if old == new:
        return ""
    out = []
    for line in difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), fromfile=f"a/{name}", tofile=f"b/{name}"
    ):
        if line.endswith("\n"):
            out.append(line)
        else:
            out.append(line + "\n\\ No newline at end of file\n")
    return "".join(out)


def _diff_name(path: Path, root: Path | None) -> str:
    """Path for the a/ b/ headers: relative to `root` (default: the current directory); the bare file name
    when the file lies outside it (git apply refuses absolute paths and `..`)."""
    base = root if root is not None else Path.cwd()
    try:
        return path.resolve().relative_to(base.resolve()).as_posix()
    except ValueError:
        return path.name


def _read(path: Path) -> str:
    try:
        return read_bytes(path).decode("utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise ValueError(f"{path}: not UTF-8 text") from None


def _result(
    path: Path, fix_label: str, original: str, runs: list[tuple[str, _FixRun]], final: str, root: Path | None
) -> EditResult:
    changed = final != original
    statuses = [run.status for _, run in runs]
    status: Status = (
        "changed"
        if changed
        else "already-applied"
        if statuses and all(s == "already-applied" for s in statuses)
        else "no-spot"
    )
    locations = [loc for _, run in runs for loc in run.outcome.locations]
    parts = []
    for fix_id, run in runs:
        whats = "; ".join(f"line {loc.line}: {loc.what}" for loc in run.outcome.locations)
        notes = "; ".join(run.outcome.notes)
        if run.status == "changed":
            # a suggestion writes nothing: the message says what the diff would do, never that it was done
            text = f"{fix_id}: proposes an edit of {path} ({whats})"
        elif run.status == "already-applied":
            text = f"{fix_id}: already applied in {path}, nothing to change ({whats})"
        else:
            text = f"{fix_id}: no place to apply it automatically in {path}" + (
                "; see the template" if run.template else ""
            )
        parts.append(text + (f". Notes: {notes}" if notes else ""))
    templates = [run.template for _, run in runs if run.template]
    return EditResult(
        path=str(path),
        fix=fix_label,
        changed=changed,
        status=status,
        diff=_unified_diff(original, final, _diff_name(path, root)),
        message="\n".join(parts),
        template="\n\n".join(templates) or None,
        locations=locations,
        base_sha256=hashlib.sha256(original.encode("utf-8")).hexdigest(),
        patched_text=final if changed else None,
    )


def suggest_edit(
    code_path: Path | str, fix_id: str, *, params: dict[str, Any] | None = None, root: Path | None = None
) -> EditResult:
    """Propose the edit of fix `fix_id` to one file, without writing anything.

    `params` fill the fix's `${placeholders}` (numbers a finding computed, e.g. `num_parallel_workers=12` or
    `all_reduce_fusion_config=[85, 160]`); a parameter the caller passes also overrides an existing literal.
    `params["env"]` (a name or a list of names) limits an environment fix to the variables a finding flagged.
    Diff headers are `a/REL` / `b/REL` with REL relative to `root` (default: the current directory when the
    file is under it, else the file name), so `git apply` run from that directory accepts the diff.
    Raises KeyError for an unknown fix id, FileNotFoundError / ValueError for unreadable or unsupported files.
    """
    return suggest_edits_for_fixes(code_path, [fix_id], params=params, root=root)


def suggest_edits_for_fixes(
    code_path: Path | str,
    fix_ids: list[str],
    *,
    params: dict[str, Any] | None = None,
    root: Path | None = None,
) -> EditResult:
    """Combine several fixes on one file into one diff: each fix is applied to the text the previous one
    produced, in the given order; locations refer to lines of the original file."""
    if not fix_ids:
        raise ValueError("no fix ids given")
    path = Path(code_path)
    fixes = [get_fix(i) for i in fix_ids]
    original = _read(path)
    kind = file_kind(path, original)
    checked = check_params(params)
    text = original
    runs: list[tuple[str, _FixRun]] = []
    history: list[LineMap] = []
    for fix in fixes:
        run = _run_fix(fix, text, kind, checked, history)
        runs.append((fix.id, run))
        text = run.text
    return _result(path, ",".join(fix_ids), original, runs, text, root)


def _backup_path(path: Path) -> Path:
    """FILE.bak, or FILE.bak.1, FILE.bak.2, ... when earlier backups exist (never overwritten)."""
    candidate = path.with_name(path.name + ".bak")
    n = 0
    while candidate.exists():
        n += 1
        candidate = path.with_name(f"{path.name}.bak.{n}")
    return candidate


def apply_edit(result: EditResult, backup: bool = True) -> Path | None:
    """Write the patched file of a `suggest_edit` result (the `--apply` of the CLI).

    Returns the backup path (or None when `backup` is False or nothing changes). Refuses with
    EditConflictError when the file no longer has the content the diff was computed against (checked when
    starting and again just before the new content takes its place: a save by the user's editor meanwhile is
    kept, not overwritten), and with ValueError when the result carries no patched text (e.g. it was rebuilt
    from JSON).

    The file the user means is edited: through a symbolic link, the file it names (the link stays a link);
    a file with hard links is rewritten in place (every name keeps seeing it); otherwise the new content is
    written beside it and renamed over it, so a crash cannot leave a half-written file. Mode and owner are
    kept.
    """
    if not result.changed:
        return None
    if result.patched_text is None:
        raise ValueError(
            "this result carries no patched text (was it loaded from JSON?); run suggest_edit again"
        )
    target = Path(result.path).resolve()
    before = _unchanged_since(target, result.base_sha256, None)
    saved: Path | None = None
    if backup:
        saved = _backup_path(target)
        shutil.copy2(target, saved)
    data = result.patched_text.encode("utf-8")
    if before.st_nlink > 1:
        _unchanged_since(target, result.base_sha256, before)
        with open(target, "r+b") as handle:
            handle.write(data)
            handle.truncate()
        return saved
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp_name, stat.S_IMODE(before.st_mode))
        if (before.st_uid, before.st_gid) != (os.getuid(), os.getgid()):
            with contextlib.suppress(PermissionError):   # only root may give a file away
                os.chown(tmp_name, before.st_uid, before.st_gid)
        _unchanged_since(target, result.base_sha256, before)
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return saved


def _unchanged_since(path: Path, sha256: str, seen: os.stat_result | None) -> os.stat_result:
    """The file's stat when it still has the content the diff was made from (and, given `seen`, the same
    inode, size and modification time as then); EditConflictError otherwise."""
    st = os.stat(path)
    same = seen is None or (st.st_ino, st.st_size, st.st_mtime_ns) == (seen.st_ino, seen.st_size, seen.st_mtime_ns)
    if not same or hashlib.sha256(_read(path).encode("utf-8")).hexdigest() != sha256:
        raise EditConflictError(f"{path} changed since the edit was suggested; run suggest-edit again")
    return st
