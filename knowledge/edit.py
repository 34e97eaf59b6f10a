"""The code editor behind `stepdoctor suggest-edit CODE_PATH --fix ID [--apply]`.

Given a fix from the knowledge base and one file, find where the fix belongs and produce a unified diff.

Python files are analysed with the `ast` module, never with regular expressions: calls are matched by
their fully qualified name after resolving the file's imports (`from torch.nn.parallel import
DistributedDataParallel as DDP` makes `DDP(...)` match `torch.nn.parallel.DistributedDataParallel`), and
loops are found structurally. Edits are made on the original text at the source positions the AST reports
(`lineno` / `col_offset` / `end_lineno` / `end_col_offset`), so formatting, comments and quoting elsewhere
stay exactly as they were; nothing is regenerated with `ast.unparse`. Shell launch scripts are not Python,
so they are read line by line (`export NAME=value`, `NAME=value cmd`, `unset NAME`).

Every edit kind is idempotent: when the file already carries the fix (a literal `num_workers >= 1`, a
`gc.freeze()` call, the variable already exported with a good value) nothing changes and the result says so.
When no place is found, the result says that too and carries the fix's before/after template.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from .loader import get_fix
from .schema import CodeEdit, EnvVar, Fix, KwargSpec, placeholders, render_template

__all__ = [
    "EditConflictError",
    "EditLocation",
    "EditResult",
    "apply_edit",
    "suggest_edit",
    "suggest_edits_for_fixes",
]

Status = Literal["changed", "already-applied", "no-spot"]
FileKind = Literal["python", "shell"]

SHELL_SUFFIXES = frozenset({".sh", ".bash", ".zsh", ".ksh"})


class EditConflictError(RuntimeError):
    """The file changed between `suggest_edit` and `apply_edit`; the diff no longer describes it."""


class EditLocation(BaseModel):
    line: int = Field(description="1-based line in the file as it was before the edit")
    what: str


class EditResult(BaseModel):
    """What `suggest_edit` found and proposes; `diff` applies with `git apply` from the diff root."""

    path: str
    fix: str = Field(description="fix id (comma-joined ids for suggest_edits_for_fixes)")
    changed: bool
    status: Status
    diff: str = Field(description="unified diff with a/PATH b/PATH headers; empty when nothing changes")
    message: str
    template: str | None = Field(default=None, description="the fix's before/after when no spot was found")
    locations: list[EditLocation] = Field(default_factory=list)
    base_sha256: str = Field(description="sha256 of the file the diff was computed against")
    patched_text: str | None = Field(default=None, exclude=True, repr=False)


# ----------------------------------------------------------------------------------------------------
# text positions and edits


@dataclass(frozen=True)
class _TextEdit:
    """Replace text[start:end] by `text` (character offsets). Insertions have start == end."""

    start: int
    end: int
    text: str


class _Source:
    """Text with a line table, so AST positions (1-based line, UTF-8 byte column) map to string offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.lines = text.splitlines(keepends=True)
        self.starts: list[int] = []
        offset = 0
        for line in self.lines:
            self.starts.append(offset)
            offset += len(line)
        self.starts.append(offset)  # start of the line after the last one (== len(text))
        self.newline = "\r\n" if "\r\n" in text else "\n"

    def line_start(self, lineno: int) -> int:
        """Offset of the first character of 1-based `lineno`; len(text) past the end."""
        return self.starts[min(max(lineno, 1), len(self.starts)) - 1]

    def offset(self, lineno: int, col_bytes: int) -> int:
        # ast columns count UTF-8 bytes, Python strings count code points: convert through the line's bytes.
        line = self.lines[lineno - 1] if 0 < lineno <= len(self.lines) else ""
        return self.line_start(lineno) + len(line.encode("utf-8")[:col_bytes].decode("utf-8", "ignore"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        start = self.offset(node.lineno, node.col_offset)  # type: ignore[attr-defined]
        end = self.offset(node.end_lineno, node.end_col_offset)  # type: ignore[attr-defined]
        return start, end

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def line_of(self, offset: int) -> int:
        """1-based line containing `offset`."""
        lo, hi = 0, len(self.starts) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.starts[mid] <= offset:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def indent(self, lineno: int) -> str:
        line = self.lines[lineno - 1] if 0 < lineno <= len(self.lines) else ""
        return line[: len(line) - len(line.lstrip(" \t"))]


def _apply_text_edits(text: str, edits: Iterable[_TextEdit]) -> str:
    """Apply non-overlapping edits. Applied from the end backwards so earlier offsets stay valid; at equal
    starts a deletion goes before an insertion (else the deletion would eat the inserted text), and several
    insertions at one point keep the order in which they were produced."""
    indexed = list(enumerate(edits))
    indexed.sort(key=lambda item: (item[1].start, item[1].end, item[0]), reverse=True)
    for _, edit in indexed:
        text = text[: edit.start] + edit.text + text[edit.end :]
    return text


# One applied batch of edits, as (first new line, lines added, first old line, total shift after the edit) per
# edit in file order; used to report every location in lines of the original file.
_LineMap = list[tuple[int, int, int, int]]


def _line_map(src: _Source, edits: Iterable[_TextEdit]) -> _LineMap:
    """How one batch of edits moved lines: see `_map_back`."""
    out: _LineMap = []
    shift = 0
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        old_line = src.line_of(edit.start)
        added = edit.text.count("\n")
        removed = src.text[edit.start : edit.end].count("\n")
        new_line = old_line + shift
        shift += added - removed
        out.append((new_line, added, old_line, shift))
    return out


def _map_back(line: int, history: list[_LineMap]) -> int:
    """Translate a line of the current text back to the original file, undoing the batches newest first.

    Within a batch, the last edit starting at or before the line decides: a line inside the text that edit
    inserted maps to the edit's own old line; a line after it moves back by the batch's shift so far."""
    for batch in reversed(history):
        for new_line, added, old_line, shift in reversed(batch):
            if new_line <= line:
                line = old_line if line < new_line + added else line - shift
                break
    return max(line, 1)


# ----------------------------------------------------------------------------------------------------
# Python module analysis


_LOOPS = (ast.For, ast.AsyncFor, ast.While)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
_NOT_LITERAL = object()


def _literal(node: ast.AST | None) -> Any:
    if node is None:
        return _NOT_LITERAL
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return _NOT_LITERAL


def _same_literal(a: Any, b: Any) -> bool:
    # True == 1 in Python; a keyword set to 1 is not the same as one set to True.
    return type(a) is type(b) and a == b


def _dotted(expr: ast.AST) -> list[str] | None:
    parts: list[str] = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if isinstance(expr, ast.Name):
        parts.append(expr.id)
        return parts[::-1]
    return None


class _Module:
    """A parsed Python file: import aliases, parent links, which calls sit inside loops."""

    def __init__(self, src: _Source) -> None:
        self.src = src
        self.tree = ast.parse(src.text)
        self.aliases: dict[str, str] = {}  # local name -> fully qualified name
        self.packages: set[str] = set()  # top-level packages imported anywhere
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    self.packages.add(alias.name.split(".")[0])
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        head = alias.name.split(".")[0]
                        self.aliases[head] = head
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                self.packages.add(node.module.split(".")[0])
                for alias in node.names:
                    if alias.name != "*":
                        self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        self.parents: dict[ast.AST, ast.AST] = {}
        for parent in ast.walk(self.tree):
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent
        self.in_loop: set[ast.AST] = set()
        self._mark_loops(self.tree, False)

    def _mark_loops(self, node: ast.AST, inside: bool) -> None:
        # A loop body runs once per iteration; a function or class body defined in it does not.
        if inside:
            self.in_loop.add(node)
        if isinstance(node, _SCOPES):
            for child in ast.iter_child_nodes(node):
                self._mark_loops(child, False)
            return
        if isinstance(node, _LOOPS):
            header = [node.test] if isinstance(node, ast.While) else [node.target, node.iter]
            for child in header:
                self._mark_loops(child, inside)
            for child in [*node.body, *node.orelse]:
                self._mark_loops(child, True)
            return
        for child in ast.iter_child_nodes(node):
            self._mark_loops(child, inside)

    def frameworks(self) -> set[str]:
        found = set()
        if "mindspore" in self.packages:
            found.add("mindspore")
        if self.packages & {"torch", "torch_npu"}:
            found.add("pytorch")
        return found

    def qualname(self, expr: ast.AST) -> tuple[str | None, bool]:
        """Dotted name of an expression with its first part resolved through the imports, and whether that
        resolution succeeded (False for local variables and star imports)."""
        parts = _dotted(expr)
        if not parts:
            return None, False
        if parts[0] in self.aliases:
            return ".".join([self.aliases[parts[0]], *parts[1:]]), True
        return ".".join(parts), False

    def match_call(self, call: ast.Call, targets: Iterable[str]) -> str | None:
        """The target a call's callee resolves to, or None. An unresolved bare name (star import) matches a
        target with the same last component; an unresolved dotted name (`self.x.f`) never matches."""
        targets = list(targets)
        name, resolved = self.qualname(call.func)
        if name is None:
            return None
        if resolved:
            return name if name in targets else None
        if "." not in name:
            for target in targets:
                if target.rsplit(".", 1)[-1] == name:
                    return target
        return None

    def calls(self) -> Iterator[ast.Call]:
        """All calls in source order."""
        nodes = [n for n in ast.walk(self.tree) if isinstance(n, ast.Call)]
        yield from sorted(nodes, key=lambda n: (n.lineno, n.col_offset))

    def has_call(self, targets: Iterable[str]) -> ast.Call | None:
        targets = list(targets)
        for call in self.calls():
            if self.match_call(call, targets):
                return call
        return None

    def statement_of(self, node: ast.AST) -> ast.stmt:
        while not isinstance(node, ast.stmt):
            node = self.parents[node]
        return node

    def block_of(self, stmt: ast.stmt) -> list[ast.stmt]:
        """The statement list (body / orelse / finalbody / handler body) that holds `stmt`."""
        parent = self.parents.get(stmt, self.tree)
        for name in ("body", "orelse", "finalbody"):
            block = getattr(parent, name, None)
            if isinstance(block, list) and any(s is stmt for s in block):
                return block
        raise LookupError("statement not found in its parent")  # pragma: no cover - ast invariant

    def owns_lines(self, stmt: ast.stmt) -> bool:
        """True when the statement has its lines to itself (nothing before it, at most a comment after)."""
        first = self.src.lines[stmt.lineno - 1]
        before = first.encode("utf-8")[: stmt.col_offset].decode("utf-8", "ignore")
        last = self.src.lines[stmt.end_lineno - 1]  # type: ignore[index]
        after = last.encode("utf-8")[stmt.end_col_offset :].decode("utf-8", "ignore").strip()  # type: ignore[misc]
        return not before.strip() and (not after or after.startswith("#"))


# ----------------------------------------------------------------------------------------------------
# results of one edit item


@dataclass
class _Outcome:
    edits: list[_TextEdit] = field(default_factory=list)
    locations: list[EditLocation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    matched: bool = False  # a spot was found (changed or already fine)
    imports_done: set[str] = field(default_factory=set)  # imports the handler already inserted itself

    def merge(self, other: _Outcome) -> None:
        self.edits += other.edits
        self.locations += other.locations
        self.notes += other.notes
        self.matched = self.matched or other.matched
        self.imports_done |= other.imports_done


def _one_line(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# ----------------------------------------------------------------------------------------------------
# keyword arguments


def _is_positive_int(value: Any) -> bool:
    return type(value) is int and value > 0


def _kwarg_ok(spec: KwargSpec, current: Any, rendered: str, explicit: bool) -> bool:
    """Whether an existing literal keyword value already satisfies the spec (see KwargSpec docs)."""
    wanted = _literal(ast.parse(rendered, mode="eval").body)
    if explicit:
        return _same_literal(current, wanted)
    if spec.keep_existing:
        return True
    if spec.ok_min is not None:
        return type(current) in (int, float) and current >= spec.ok_min
    if spec.ok_values is not None:
        return any(_same_literal(current, ok) for ok in spec.ok_values)
    return _same_literal(current, wanted)


def _call_args(call: ast.Call) -> list[ast.AST]:
    return sorted([*call.args, *call.keywords], key=lambda n: (n.lineno, n.col_offset))  # type: ignore[attr-defined]


def _removal_edits(src: _Source, call: ast.Call, removed: list[ast.keyword]) -> list[_TextEdit]:
    """Delete keywords with their separating commas. Runs of adjacent removed arguments are deleted as one
    span: from the end of the argument before the run, or (for a leading run) up to the next argument."""
    args = _call_args(call)
    drop = [any(a is r for r in removed) for a in args]
    edits = []
    i = 0
    while i < len(args):
        if not drop[i]:
            i += 1
            continue
        j = i
        while j + 1 < len(args) and drop[j + 1]:
            j += 1
        if i > 0:
            edits.append(_TextEdit(src.span(args[i - 1])[1], src.span(args[j])[1], ""))
        elif j + 1 < len(args):
            edits.append(_TextEdit(src.span(args[i])[0], src.span(args[j + 1])[0], ""))
        else:  # every argument goes: empty the parentheses
            open_paren = src.text.index("(", src.span(call.func)[1])
            edits.append(_TextEdit(open_paren + 1, src.span(call)[1] - 1, ""))
        i = j + 1
    return edits


def _insertion_edit(src: _Source, call: ast.Call, kept: list[ast.AST], pairs: list[str]) -> _TextEdit:
    """Insert `name=value` items after the last kept argument, following the call's layout: one argument
    per line (with or without a trailing comma) when the arguments already sit on their own lines; otherwise
    on the same line, filled up to 100 characters and continued under the first argument."""
    call_end = src.span(call)[1]
    close = call_end - 1  # the ")" of the call
    if not kept:
        return _TextEdit(close, close, ", ".join(pairs))
    anchor = kept[-1]
    anchor_end = src.span(anchor)[1]
    nl = src.newline
    if anchor.lineno > call.lineno:  # type: ignore[attr-defined]
        indent = src.indent(anchor.lineno)  # type: ignore[attr-defined]
        between = src.text[anchor_end:close]
        if between.lstrip().startswith(","):
            comma = anchor_end + between.index(",") + 1
            return _TextEdit(comma, comma, "".join(f"{nl}{indent}{p}," for p in pairs))
        return _TextEdit(anchor_end, anchor_end, "".join(f",{nl}{indent}{p}" for p in pairs))
    line_no = src.line_of(anchor_end)
    line_start = src.line_start(line_no)
    column = anchor_end - line_start
    tail = len(src.lines[line_no - 1].rstrip("\r\n")) - column  # ")" and whatever follows it on the line
    first = _call_args(call)[0]
    hang = " " * (src.span(first)[0] - src.line_start(first.lineno))  # type: ignore[attr-defined]
    text = ""
    for index, pair in enumerate(pairs):
        extra = tail if index == len(pairs) - 1 else 0
        if column + 2 + len(pair) + 1 + extra <= 100:
            text += ", " + pair
            column += 2 + len(pair)
        else:
            text += f",{nl}{hang}{pair}"
            column = len(hang) + len(pair)
    return _TextEdit(anchor_end, anchor_end, text)


def _edit_kwargs(
    mod: _Module,
    call: ast.Call,
    specs: list[KwargSpec],
    remove: list[str],
    params: dict[str, Any],
    explicit: set[str],
    force_change: bool = False,
) -> _Outcome:
    """Add or adjust keyword arguments of one call (the add_kwargs algorithm).

    For each spec: an existing literal that satisfies it is kept, an unsatisfying literal is replaced in
    place, a non-literal (variable, expression) is kept and reported; a missing keyword is added unless the
    call forwards `**kwargs` (the added name could collide) or its `only_if_positive` partner is not a
    positive literal. `remove` keywords are deleted only when the call changes anyway (or `force_change`).
    """
    src = mod.src
    out = _Outcome(matched=True)
    present = {kw.arg: kw for kw in call.keywords if kw.arg}
    has_star_kwargs = any(kw.arg is None for kw in call.keywords)
    final: dict[str, Any] = {name: _literal(kw.value) for name, kw in present.items()}
    additions: list[str] = []
    replaced: list[str] = []
    for spec in specs:
        rendered = render_template(spec.value, params)
        is_explicit = bool(placeholders(spec.value) & explicit)
        if spec.only_if_positive and not _is_positive_int(final.get(spec.only_if_positive)):
            if spec.name not in present:
                out.notes.append(
                    f"`{spec.name}` not added: it needs `{spec.only_if_positive}` > 0 as a literal"
                )
            continue
        if spec.name in present:
            kw = present[spec.name]
            current = _literal(kw.value)
            if current is _NOT_LITERAL:
                expect = (
                    f">= {spec.ok_min:g}" if spec.ok_min is not None and not is_explicit else f"== {rendered}"
                )
                out.notes.append(
                    f"kept `{spec.name}={_one_line(src.segment(kw.value), 40)}` (not a literal; "
                    f"check that it is {expect})"
                )
                continue
            if _kwarg_ok(spec, current, rendered, is_explicit):
                continue
            start, end = src.span(kw.value)
            out.edits.append(_TextEdit(start, end, rendered))
            replaced.append(f"{spec.name}={_one_line(src.segment(kw.value), 30)} -> {rendered}")
            final[spec.name] = _literal(ast.parse(rendered, mode="eval").body)
        elif has_star_kwargs:
            out.notes.append(
                f"`{spec.name}` not added: the call forwards **kwargs, which may already carry it"
            )
        else:
            additions.append(f"{spec.name}={rendered}")
            final[spec.name] = _literal(ast.parse(rendered, mode="eval").body)
    changed = bool(additions or replaced or force_change)
    removed = [present[name] for name in remove if name in present] if changed else []
    if removed:
        out.edits += _removal_edits(src, call, removed)
    if additions:
        kept = [a for a in _call_args(call) if not any(a is r for r in removed)]
        out.edits.append(_insertion_edit(src, call, kept, additions))
    if additions:
        out.locations.append(EditLocation(line=call.lineno, what="added " + ", ".join(additions)))
    if replaced:
        out.locations.append(EditLocation(line=call.lineno, what="changed " + ", ".join(replaced)))
    if removed:
        out.locations.append(
            EditLocation(line=call.lineno, what="removed " + ", ".join(f"{kw.arg}=" for kw in removed))
        )
    return out


def _matching_calls(mod: _Module, edit: CodeEdit) -> list[tuple[ast.Call, str | None]]:
    """Calls the edit's `locate` selects, with the matched qualified target (None for method matches)."""
    loc = edit.locate
    if loc.require_imports_any and not (mod.packages & set(loc.require_imports_any)):
        return []
    found: list[tuple[ast.Call, str | None]] = []
    for call in mod.calls():
        if loc.in_loop and call not in mod.in_loop:
            continue
        target = mod.match_call(call, loc.calls) if loc.calls else None
        if target is None and loc.methods:
            if not (isinstance(call.func, ast.Attribute) and call.func.attr in loc.methods):
                continue
            if len(call.args) + len(call.keywords) < loc.min_args:
                continue
            first = (
                call.args[0]
                if call.args
                else next((k.value for k in call.keywords if k.arg == "device"), None)
            )
            if loc.skip_first_arg and _literal(first) in loc.skip_first_arg:
                continue
            receiver = mod.src.segment(call.func.value).lower()
            if any(word in receiver for word in loc.skip_receivers):
                continue
        elif target is None:
            continue
        found.append((call, target))
    return found


def _handle_add_kwargs(mod: _Module, edit: CodeEdit, params: dict[str, Any], explicit: set[str]) -> _Outcome:
    out = _Outcome()
    # Numbers the caller passes for this edit override "already configured".
    overridden = explicit & {name for spec in edit.kwargs for name in placeholders(spec.value)}
    for call, _ in _matching_calls(mod, edit):
        present = {kw.arg for kw in call.keywords}
        if edit.satisfied_by_kwargs and present & set(edit.satisfied_by_kwargs) and not overridden:
            out.matched = True
            out.locations.append(
                EditLocation(
                    line=call.lineno,
                    what=f"{_one_line(mod.src.segment(call.func), 40)}(...) already sets "
                    f"{', '.join(sorted(present & set(edit.satisfied_by_kwargs)))}",
                )
            )
            continue
        sub = _edit_kwargs(mod, call, edit.kwargs, edit.remove_kwargs, params, explicit)
        callee = _one_line(mod.src.segment(call.func), 40)
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


def _handle_replace_callee(
    mod: _Module, edit: CodeEdit, params: dict[str, Any], explicit: set[str]
) -> _Outcome:
    out = _Outcome()
    for call, target in _matching_calls(mod, edit):
        if target is None or target not in edit.replacements:
            continue
        new = edit.replacements[target]
        sub = _edit_kwargs(mod, call, edit.kwargs, edit.remove_kwargs, params, explicit, force_change=True)
        start, end = mod.src.span(call.func)
        sub.edits.append(_TextEdit(start, end, new))
        whats = [
            f"{_one_line(mod.src.segment(call.func), 40)} -> {new}",
            *(loc.what for loc in sub.locations),
        ]
        sub.locations = [EditLocation(line=call.lineno, what="; ".join(whats))]
        out.merge(sub)
    return out


def _delete_statements(mod: _Module, stmts: list[ast.stmt]) -> list[_TextEdit]:
    """Delete whole statements. A block left empty keeps one `pass` (at the first statement's place)."""
    src = mod.src
    edits: list[_TextEdit] = []
    by_block: dict[int, tuple[list[ast.stmt], list[ast.stmt]]] = {}
    for stmt in stmts:
        block = mod.block_of(stmt)
        by_block.setdefault(id(block), (block, []))[1].append(stmt)
    for block, doomed in by_block.values():
        empties = len(doomed) == len(block)
        for index, stmt in enumerate(sorted(doomed, key=lambda s: s.lineno)):
            replacement = ""
            if empties and index == 0:
                replacement = src.indent(stmt.lineno) + "pass" + src.newline
            if mod.owns_lines(stmt):
                end_line = stmt.end_lineno + 1  # type: ignore[operator]
                end = src.line_start(end_line)
                if end == len(src.text) and not src.text.endswith(("\n", "\r")):
                    replacement = replacement.rstrip("\r\n")
                edits.append(_TextEdit(src.line_start(stmt.lineno), end, replacement))
            else:
                start, end = src.span(stmt)
                edits.append(_TextEdit(start, end, "pass"))
    return edits


def _handle_remove_call(mod: _Module, edit: CodeEdit, params: dict[str, Any], explicit: set[str]) -> _Outcome:
    """Delete call statements (inside loops when locate.in_loop). An `if` whose body holds only such calls
    and has no `else` goes with them, so `if step % 10 == 0: torch.cuda.empty_cache()` disappears whole."""
    out = _Outcome()
    doomed: list[ast.stmt] = []
    for call in mod.calls():
        target = mod.match_call(call, edit.locate.calls)
        if target is None:
            continue
        stmt = mod.statement_of(call)
        if not (isinstance(stmt, ast.Expr) and stmt.value is call):
            out.notes.append(f"line {call.lineno}: `{target}()` is part of a larger statement; left as is")
            continue
        if edit.locate.in_loop and call not in mod.in_loop:
            out.notes.append(
                f"line {call.lineno}: `{_one_line(mod.src.segment(call))}` is outside loops; left as is"
            )
            continue
        doomed.append(stmt)
        out.locations.append(
            EditLocation(line=call.lineno, what=f"removed {_one_line(mod.src.segment(call))}")
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
        out.edits += _delete_statements(mod, doomed)
    else:
        where = " inside loops" if edit.locate.in_loop else ""
        out.notes.append(
            f"nothing to remove: no {' / '.join(f'{c}()' for c in edit.locate.calls[:2])} "
            f"statement{where} in this file"
        )
    return out


def _handle_unwrap_call(mod: _Module, edit: CodeEdit, params: dict[str, Any], explicit: set[str]) -> _Outcome:
    """Replace `wrapper(x, ...)` by `x`; a statement `x = wrapper(x)` becomes pointless and is deleted."""
    out = _Outcome()
    doomed: list[ast.stmt] = []
    for call in mod.calls():
        target = mod.match_call(call, edit.locate.calls)
        if target is None:
            continue
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
                EditLocation(line=stmt.lineno, what=f"removed {_one_line(mod.src.segment(stmt))}")
            )
        else:
            start, end = mod.src.span(call)
            out.edits.append(_TextEdit(start, end, inner_src))
            out.locations.append(
                EditLocation(line=call.lineno, what=f"replaced {target}(...) by {inner_src}")
            )
    out.edits += _delete_statements(mod, doomed)
    if not out.matched:
        out.notes.append(
            f"nothing to remove: no call to {edit.locate.calls[0]} in this file (if the profile "
            f"still shows it, look where the model is built)"
        )
    return out


# ----------------------------------------------------------------------------------------------------
# inserted statements


def _header_imports(mod: _Module) -> list[ast.Import | ast.ImportFrom]:
    """Top-level imports of the file header (before the first def / class / loop / with statement)."""
    found: list[ast.Import | ast.ImportFrom] = []
    for stmt in mod.tree.body:
        if isinstance(stmt, (*_SCOPES, *_LOOPS, ast.With, ast.AsyncWith)):
            break
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            found.append(stmt)
    return found


def _import_top(stmt: ast.Import | ast.ImportFrom) -> str:
    name = stmt.names[0].name if isinstance(stmt, ast.Import) else (stmt.module or "")
    return name.split(".")[0]


def _import_edit(mod: _Module, module: str) -> _TextEdit | None:
    """`import module` in the file header, unless the name is already bound.

    Placement follows isort conventions without reordering anything: a standard-library module goes into
    the standard-library group (before the first plain `import x` that sorts after it, else after the group's
    plain imports, else above the first import with a blank line); any other module goes after the last
    header import. Without imports it goes below the module docstring / comment header.
    """
    if mod.aliases.get(module) == module:
        return None
    src = mod.src
    line = f"import {module}"
    imports = _header_imports(mod)
    if not imports:
        body = mod.tree.body
        first = body[0] if body else None
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            return _insert_lines_edit(src, first.end_lineno or first.lineno, ["", line], "")
        return _insert_lines_edit(src, (first.lineno - 1) if first else len(src.lines), [line], "")
    if module not in sys.stdlib_module_names:
        return _insert_lines_edit(src, max(s.end_lineno or s.lineno for s in imports), [line], "")
    std = [s for s in imports if _import_top(s) in sys.stdlib_module_names and _import_top(s) != "__future__"]
    plain = [s for s in std if isinstance(s, ast.Import)]
    later = next((s for s in plain if s.names[0].name > module), None)
    if later is not None:
        return _insert_lines_edit(src, later.lineno - 1, [line], "")
    if plain:
        return _insert_lines_edit(src, max(s.end_lineno or s.lineno for s in plain), [line], "")
    if std:
        return _insert_lines_edit(src, std[0].lineno - 1, [line], "")
    first_import = next((s for s in imports if _import_top(s) != "__future__"), imports[-1])
    if _import_top(first_import) == "__future__":
        return _insert_lines_edit(src, first_import.end_lineno or first_import.lineno, ["", line], "")
    return _insert_lines_edit(src, first_import.lineno - 1, [line, ""], "")


def _insert_lines_edit(src: _Source, after_line: int, lines: list[str], indent: str) -> _TextEdit:
    """Insert whole lines after 1-based `after_line` (0 = at the top), adding a newline when the file's last
    line has none."""
    pos = src.line_start(after_line + 1)
    nl = src.newline
    body = "".join(f"{indent}{line}{nl}" for line in lines)
    if pos == len(src.text) and src.text and not src.text.endswith(("\n", "\r")):
        body = nl + body
    return _TextEdit(pos, pos, body)


def _statement_key(mod: _Module, stmt: ast.stmt) -> tuple[str, str] | None:
    """What makes two statements 'the same setting': the resolved callee of a call statement, or the target of
    a single assignment (`torch_npu.npu.config.allow_internal_format = ...`)."""
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
        name, _ = mod.qualname(stmt.value.func)
        return ("call", name) if name else None
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
        name, _ = mod.qualname(stmt.targets[0])
        return ("assign", name) if name else None
    return None


def _rendered_statements(edit: CodeEdit, params: dict[str, Any]) -> list[tuple[str, ast.stmt]]:
    out = []
    for source in edit.statements:
        rendered = render_template(source, params)
        out.append((rendered, ast.parse(rendered).body[0]))
    return out


def _training_loop(mod: _Module) -> ast.stmt | None:
    """The statement to insert before: the best-scoring outermost training loop, else a `x.train(epochs,
    dataset, ...)` call statement (MindSpore Model.train runs the loop itself).

    Scoring of loops that are not nested in another loop: +4 when the iterated expression names epochs,
    +2 when it names a loader or an iterator, +1 when it names a dataset / data / batch, +2 when the body
    calls `.backward()` / `.step()` / a train-step function. A loop needs 2 points to count (a loop over
    something merely called `data` is not a training loop). Ties go to the first in the file.
    """
    best: tuple[int, ast.stmt] | None = None
    for node in ast.walk(mod.tree):
        if not isinstance(node, _LOOPS) or node in mod.in_loop:
            continue
        header = node.test if isinstance(node, ast.While) else node.iter
        words = " ".join(
            n.id if isinstance(n, ast.Name) else n.attr
            for n in ast.walk(header)
            if isinstance(n, ast.Name | ast.Attribute)
        ).lower()
        score = 0
        if "epoch" in words:
            score += 4
        if "loader" in words or "iterator" in words:
            score += 2
        elif any(w in words for w in ("dataset", "batch", "data")):
            score += 1
        for sub in ast.walk(node):
            if isinstance(sub, ast.Call):
                name = sub.func.attr if isinstance(sub.func, ast.Attribute) else getattr(sub.func, "id", "")
                if name in ("backward", "step") or "train_step" in name or "train_one_epoch" in name:
                    score += 2
                    break
        if score >= 2 and (
            best is None
            or score > best[0]
            or (score == best[0] and (node.lineno, node.col_offset) < (best[1].lineno, best[1].col_offset))
        ):
            best = (score, node)
    if best:
        return best[1]
    for call in mod.calls():
        if (
            isinstance(call.func, ast.Attribute)
            and call.func.attr == "train"
            and len(call.args) + len(call.keywords) >= 2
        ):
            return mod.statement_of(call)
    return None


def _handle_insert_before_loop(
    mod: _Module, edit: CodeEdit, params: dict[str, Any], explicit: set[str]
) -> _Outcome:
    out = _Outcome()
    src = mod.src
    present = mod.has_call(edit.locate.present_if_calls) if edit.locate.present_if_calls else None
    if present is not None:
        out.matched = True
        out.locations.append(
            EditLocation(line=present.lineno, what=f"already calls {_one_line(src.segment(present))}")
        )
        return out
    anchor = _training_loop(mod)
    if anchor is None:
        out.notes.append(
            "no training loop found (a for / while loop over epochs or a loader, or a model.train call)"
        )
        return out
    out.matched = True
    block = mod.block_of(anchor)
    index = next(i for i, s in enumerate(block) if s is anchor)
    preceding = [ast.dump(s) for s in block[max(0, index - len(edit.statements) - 2) : index]]
    todo = [text for text, stmt in _rendered_statements(edit, params) if ast.dump(stmt) not in preceding]
    if not todo:
        out.locations.append(EditLocation(line=anchor.lineno, what="statements already precede the loop"))
        return out
    # Keep a comment that introduces the loop attached to it: insert above such comment lines.
    line = anchor.lineno
    indent = src.indent(anchor.lineno)
    while line > 1 and src.lines[line - 2].strip().startswith("#") and src.indent(line - 1) == indent:
        line -= 1
    lines = ([f"# {edit.comment}"] if edit.comment else []) + todo
    out.edits.append(_insert_lines_edit(src, line - 1, lines, indent))
    kind = "loop" if isinstance(anchor, _LOOPS) else "statement"
    out.locations.append(
        EditLocation(line=anchor.lineno, what=f"inserted {'; '.join(todo)} before the {kind}")
    )
    return out


def _handle_insert_after_import(
    mod: _Module, edit: CodeEdit, params: dict[str, Any], explicit: set[str]
) -> _Outcome:
    """Insert statements after `import <module>`; a statement that sets the same thing elsewhere in the file
    (same callee / same assignment target) is corrected in place instead of duplicated."""
    src = mod.src
    module = edit.locate.after_import or ""
    if edit.locate.require_imports_any and not (mod.packages & set(edit.locate.require_imports_any)):
        # e.g. torch_npu set-up in a file that does not use torch at all: not the file to change
        return _Outcome(notes=[f"the file imports none of {', '.join(edit.locate.require_imports_any)}"])
    out = _Outcome(matched=True)
    existing: dict[tuple[str, str], list[ast.stmt]] = {}
    for node in ast.walk(mod.tree):
        if isinstance(node, ast.stmt):
            key = _statement_key(mod, node)
            if key:
                existing.setdefault(key, []).append(node)
    todo: list[str] = []
    for text, stmt in _rendered_statements(edit, params):
        key = _statement_key(mod, stmt)
        same = existing.get(key, []) if key else []
        if any(ast.dump(s) == ast.dump(stmt) for s in same):
            out.locations.append(EditLocation(line=same[0].lineno, what=f"already has {text}"))
            continue
        if same:
            for old in same:
                start, end = src.span(old)
                out.edits.append(_TextEdit(start, end, text))
                out.locations.append(
                    EditLocation(line=old.lineno, what=f"{_one_line(src.segment(old))} -> {text}")
                )
            continue
        todo.append(text)
    if not todo:
        return out
    # `import torch_npu` and `import torch_npu.contrib` both bind the name the statements use.
    anchors = [
        n
        for n in ast.walk(mod.tree)
        if isinstance(n, ast.Import)
        and any(a.asname is None and (a.name == module or a.name.startswith(module + ".")) for a in n.names)
    ]
    if anchors:
        anchor = min(anchors, key=lambda n: (n.lineno, n.col_offset))
        after, where = anchor.end_lineno or anchor.lineno, f"after import {module}"
        header = _header_imports(mod)
        if any(anchor is h for h in header):
            # A top-level import: put the set-up below the whole import block, not in the middle of it.
            after, where = max(h.end_lineno or h.lineno for h in header), "after the imports"
        out.edits.append(_insert_lines_edit(src, after, todo, src.indent(anchor.lineno)))
        out.locations.append(EditLocation(line=after + 1, what=f"inserted {'; '.join(todo)} {where}"))
        return out
    if module not in edit.imports:
        out.matched = False
        out.notes.append(f"no `import {module}` found")
        return out
    # Import the module and set it up in one insertion, so the statements follow the import.
    imp = _import_edit(mod, module)
    if imp is None:  # bound some other way (`import x as x`): set up after the header imports
        header = _header_imports(mod)
        after_line = max((h.end_lineno or h.lineno for h in header), default=0)
        imp = _insert_lines_edit(src, after_line, [], "")
    nl = src.newline
    lines = "".join(f"{t}{nl}" for t in todo)
    out.edits.append(_TextEdit(imp.start, imp.end, imp.text + lines))
    out.imports_done.add(module)
    out.locations.append(
        EditLocation(
            line=min(src.line_of(imp.start), max(len(src.lines), 1)),
            what=f"added import {module}; {'; '.join(todo)}",
        )
    )
    return out


# ----------------------------------------------------------------------------------------------------
# environment variables


def _env_value_ok(var: EnvVar, current: str | None) -> bool:
    """Whether a variable's current value (None = unset) already satisfies the fix."""
    if var.value is None:
        return current is None or current in var.ok_values
    if current is None:
        return False
    if current == var.value or current in var.ok_values:
        return True
    if var.at_least is not None and current.strip().isdigit():
        return int(current) >= var.at_least
    if var.option:
        return var.value.replace(" ", "") in [o.strip().replace(" ", "") for o in current.split(",")]
    return False


def _env_new_value(var: EnvVar, current: str | None) -> str:
    """The value to write: for `option` variables, the option merged into the existing comma list
    (replacing the same key with another value), else the fix's value."""
    assert var.value is not None
    if not var.option or not current:
        return var.value
    key = var.value.split(":", 1)[0]
    options = [o for o in current.split(",") if o.strip() and o.split(":", 1)[0].strip() != key]
    return ",".join([*options, var.value])


def _quote_like(value: str, sample: str) -> str:
    """A Python string literal for `value` in the quote style of the literal `sample` (double by default)."""
    if sample.lstrip("rRbBuU").startswith("'") and "'" not in value:
        return repr(value)
    return json.dumps(value)  # JSON string escapes are valid Python escapes


def _env_targets(fix: Fix, params: dict[str, Any]) -> list[EnvVar]:
    """The fix's variables, limited to `params["env"]` (the names a finding flagged) when given."""
    only = params.get("env")
    if only is None:
        return list(fix.env)
    names = {only} if isinstance(only, str) else set(only)
    return [v for v in fix.env if v.name in names]


def _handle_env_python(mod: _Module, fix: Fix, params: dict[str, Any]) -> _Outcome:
    """os.environ["NAME"] = "v" / os.environ.setdefault("NAME", "v") statements, corrected in place; an unset
    becomes os.environ.pop("NAME", None). Variables the file does not touch are left to the launch script."""
    out = _Outcome()
    src = mod.src
    wanted = {v.name: v for v in _env_targets(fix, params)}
    seen: set[str] = set()
    for node in ast.walk(mod.tree):
        name = value = key_node = None
        stmt: ast.stmt | None = None
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Subscript)
            and mod.qualname(node.targets[0].value)[0] == "os.environ"
        ):
            key_node, value, stmt = node.targets[0].slice, node.value, node
        elif (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Call)
            and len(node.value.args) == 2
            and mod.qualname(node.value.func)[0] in ("os.environ.setdefault", "os.putenv")
        ):
            key_node, value, stmt = node.value.args[0], node.value.args[1], node
        if key_node is not None:
            name = _literal(key_node)
        if not isinstance(name, str) or name not in wanted or stmt is None or value is None:
            continue
        var = wanted[name]
        seen.add(name)
        out.matched = True
        current = _literal(value)
        if current is _NOT_LITERAL:
            out.notes.append(f"line {stmt.lineno}: {name} is set from an expression; check it by hand")
            continue
        current = str(current)
        if _env_value_ok(var, current):
            out.locations.append(EditLocation(line=stmt.lineno, what=f"{name}={current} already ok"))
        elif var.value is None:
            start, end = src.span(stmt)
            key = _quote_like(name, src.segment(key_node))
            out.edits.append(_TextEdit(start, end, f"os.environ.pop({key}, None)"))
            out.locations.append(EditLocation(line=stmt.lineno, what=f"unset {name} (was {current})"))
        else:
            new = _env_new_value(var, current)
            start, end = src.span(value)
            out.edits.append(_TextEdit(start, end, _quote_like(new, src.segment(value))))
            out.locations.append(EditLocation(line=stmt.lineno, what=f"{name}: {current} -> {new}"))
    missing = [n for n in wanted if n not in seen]
    if missing and out.matched:
        out.notes.append(f"not set in this file: {', '.join(missing)} (set them in the launch script)")
    return out


_SHELL_ASSIGN_RE = re.compile(
    r"""(?P<name>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>"[^"]*"|'[^']*'|[^\s;]*)(?P<space>[ \t]*)"""
)
_SHELL_UNSET_RE = re.compile(r"^\s*unset\s+(?P<names>[A-Za-z_][A-Za-z0-9_ \t]*?)\s*(?:#.*)?$")
_SHELL_LAUNCH_RE = re.compile(r"\b(python[0-9.]*|torchrun|msrun|mpirun|deepspeed|accelerate|srun)\b")


@dataclass
class _ShellAssign:
    line: int  # 0-based line index
    kind: str  # "export" | "assign" | "prefix"
    name: str
    value: str  # unquoted
    quote: str  # "", '"' or "'"
    span: tuple[int, int]  # value span within the line (including quotes)
    token: tuple[int, int]  # whole NAME=VALUE token plus following blanks, within the line
    count: int  # assignments on this line


def _parse_shell_line(index: int, line: str) -> list[_ShellAssign]:
    """Assignments at the start of a shell line: `export A=1 B=2`, `A=1`, or `A=1 B=2 cmd args`."""
    body = line.rstrip("\r\n")
    stripped = body.lstrip()
    if not stripped or stripped.startswith("#"):
        return []
    pos = len(body) - len(stripped)
    kind = "assign"
    if stripped.startswith("export ") or stripped.startswith("export\t"):
        kind = "export"
        pos += len("export")
        while pos < len(body) and body[pos] in " \t":
            pos += 1
    found = []
    while True:
        match = _SHELL_ASSIGN_RE.match(body, pos)
        if not match:
            break
        raw = match.group("value")
        quote = raw[0] if raw[:1] in ("'", '"') else ""
        value = raw[1:-1] if quote else raw
        found.append((match.group("name"), value, quote, match.span("value"), (match.start(), match.end())))
        pos = match.end()
        if not match.group("space"):
            break
    rest = body[pos:].strip()
    if kind == "assign" and rest and not rest.startswith("#"):
        kind = "prefix"
    elif kind == "export" and rest and not rest.startswith("#"):
        return []  # `export A=1 other-words`: not a simple export line, leave it alone
    return [_ShellAssign(index, kind, n, v, q, s, t, len(found)) for n, v, q, s, t in found]


def _shell_insert_point(lines: list[str], assigns: list[_ShellAssign], unsets: dict[str, list[int]]) -> int:
    """0-based line index where new `export` / `unset` lines go: after the last unindented env line that comes
    before the first launch command; else right before the launch command; else below the leading
    shebang / comment block."""
    launch = next(
        (
            i
            for i, line in enumerate(lines)
            if not line.lstrip().startswith("#") and _SHELL_LAUNCH_RE.search(line)
        ),
        None,
    )
    env_lines = [a.line for a in assigns if a.kind in ("export", "assign")]
    env_lines += [i for found in unsets.values() for i in found]
    env_lines = [i for i in env_lines if not lines[i][:1].isspace() and (launch is None or i < launch)]
    if env_lines:
        return max(env_lines) + 1
    if launch is not None:
        return launch
    index = 0
    while index < len(lines) and lines[index].lstrip().startswith("#"):
        index += 1
    return index


def _handle_env_shell(text: str, fix: Fix, params: dict[str, Any]) -> tuple[str, _Outcome, _LineMap]:
    """Line-based editing of a launch script; returns the new text, the outcome and its line map.

    Per variable, with the script's assignments and `unset` lines in order:
    - to unset: each assignment with a bad value becomes `unset NAME` (an `export NAME=1` line) or loses its
      `NAME=1` token (a line with several assignments, or `NAME=1 python ...`); with no assignment and no
      `unset` in the script the value was inherited, so `unset NAME` is added, but only for a variable the
      caller named in `params["env"]` or, without that list, for the fix's first variable when the script
      mentions none of the fix's variables (a fix that lists CUDA_LAUNCH_BLOCKING and its ROCm twins must not
      spray `unset` lines for variables nobody set);
    - to set: bad values are replaced in place (keeping the quoting; comma-list options are merged), and
      `export NAME=value` is added when the script never sets it or unsets it last.
    """
    out = _Outcome()
    lines = text.splitlines(keepends=True)
    nl = "\r\n" if "\r\n" in text else "\n"
    assigns: list[_ShellAssign] = []
    unsets: dict[str, list[int]] = {}
    for index, line in enumerate(lines):
        assigns += _parse_shell_line(index, line)
        match = _SHELL_UNSET_RE.match(line.rstrip("\r\n"))
        if match:
            for name in match.group("names").split():
                unsets.setdefault(name, []).append(index)
    insert_at = _shell_insert_point(lines, assigns, unsets)

    token_edits: dict[int, list[tuple[int, int, str]]] = {}  # line -> [(start, end, text)] within the line
    whole_line: dict[int, str] = {}
    added: list[str] = []
    targets = _env_targets(fix, params)
    named = params.get("env") is not None
    script_mentions_fix = any(a.name in {v.name for v in fix.env} for a in assigns) or any(
        v.name in unsets for v in fix.env
    )
    for var in targets:
        mine = [a for a in assigns if a.name == var.name]
        unset_lines = unsets.get(var.name, [])
        last_set = max((a.line for a in mine), default=-1)
        last_unset = max(unset_lines, default=-1)
        effective = next(a for a in mine if a.line == last_set).value if last_set > last_unset else None
        bad = [a for a in mine if not _env_value_ok(var, a.value)]
        mentioned = bool(mine or unset_lines)
        if mentioned:
            out.matched = True
        if (
            var.value is None
            and not mentioned
            and not (named or (var is fix.env[0] and not script_mentions_fix))
        ):
            continue  # an unset-type variable the script never mentions and nobody flagged: leave it alone
        if not bad and mentioned and _env_value_ok(var, effective):
            line = max(last_set, last_unset) + 1
            state = "unset" if effective is None else f"={effective}"
            out.locations.append(
                EditLocation(
                    line=line, what=f"{var.name}{' ' if effective is None else ''}{state} already ok"
                )
            )
            continue
        out.matched = True
        token_removed = False
        for a in bad:
            if var.value is None:
                if a.kind in ("export", "assign") and a.count == 1:
                    body = lines[a.line]
                    indent = body[: len(body) - len(body.lstrip())]
                    ending = nl if body.endswith(("\n", "\r")) else ""
                    whole_line[a.line] = f"{indent}unset {var.name}{ending}"
                else:
                    token_edits.setdefault(a.line, []).append((a.token[0], a.token[1], ""))
                    token_removed = True
                out.locations.append(
                    EditLocation(line=a.line + 1, what=f"unset {var.name} (was {a.value!r})")
                )
            else:
                new = _env_new_value(var, a.value)
                token_edits.setdefault(a.line, []).append((a.span[0], a.span[1], f"{a.quote}{new}{a.quote}"))
                out.locations.append(
                    EditLocation(line=a.line + 1, what=f"{var.name}: {a.value!r} -> {new!r}")
                )
        if var.value is None and token_removed and not unset_lines:
            # The inline `NAME=1 cmd` token is gone; an explicit unset also clears an inherited value and
            # keeps the next run from treating the variable as never mentioned.
            added.append(f"unset {var.name}")
        elif var.value is None and not mine and not unset_lines:
            if not (named or (var is fix.env[0] and not script_mentions_fix)):
                continue
            added.append(f"unset {var.name}")
            out.locations.append(
                EditLocation(line=insert_at + 1, what=f"added unset {var.name} (inherited value)")
            )
        elif var.value is not None and (not mine or last_unset > last_set):
            added.append(f"export {var.name}={var.value}")
            out.locations.append(
                EditLocation(line=insert_at + 1, what=f"added export {var.name}={var.value}")
            )

    if not (token_edits or whole_line or added):
        return text, out, []
    result: list[str] = []
    for index, line in enumerate(lines):
        if index == insert_at:
            result += [f"{a}{nl}" for a in added]
        if index in whole_line:
            result.append(whole_line[index])
            continue
        for start, end, repl in sorted(token_edits.get(index, []), reverse=True):
            line = line[:start] + repl + line[end:]
        result.append(line)
    if insert_at >= len(lines) and added:
        if result and not result[-1].endswith(("\n", "\r")):
            result[-1] += nl
        result += [f"{a}{nl}" for a in added]
    return "".join(result), out, [(insert_at + 1, len(added), insert_at + 1, len(added))] if added else []


# ----------------------------------------------------------------------------------------------------
# driver


_PY_HANDLERS = {
    "add_kwargs": _handle_add_kwargs,
    "replace_callee": _handle_replace_callee,
    "remove_call": _handle_remove_call,
    "unwrap_call": _handle_unwrap_call,
    "insert_before_loop": _handle_insert_before_loop,
    "insert_after_import": _handle_insert_after_import,
}


def _file_kind(path: Path, text: str) -> FileKind:
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


def _check_params(params: dict[str, Any] | None) -> dict[str, Any]:
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


def _template(fix: Fix, frameworks: set[str] | None) -> str | None:
    parts = []
    for edit in fix.code_edit:
        if frameworks and edit.framework != "any" and edit.framework not in frameworks:
            continue
        parts.append(
            f"# {fix.id} ({edit.framework}): {edit.locate.description}\n"
            f"# before:\n{edit.before.rstrip()}\n# after:\n{edit.after.rstrip()}"
        )
    if not parts and frameworks:
        return _template(fix, None)  # nothing for this file's framework: show every variant
    if not parts and fix.env:
        lines = [f"export {v.name}={v.value}" if v.value is not None else f"unset {v.name}" for v in fix.env]
        parts.append(f"# {fix.id}: in the launch script\n" + "\n".join(lines))
    return "\n\n".join(parts) or None


@dataclass
class _FixRun:
    text: str
    status: Status
    outcome: _Outcome
    template: str | None


def _run_fix(fix: Fix, text: str, kind: FileKind, params: dict[str, Any], history: list[_LineMap]) -> _FixRun:
    """Apply every applicable edit item of `fix` to `text`, one after the other, re-parsing in between.

    Applicable: shell files take the `env` edit; Python files take the non-template edits whose framework
    matches the file's imports (all of them when the file imports neither torch nor mindspore) and whose
    `requires_params` / `unless_params` fit the caller's parameters. `history` collects the line shifts of
    every applied batch so all locations are reported in lines of the original file.
    """
    total = _Outcome()
    changed = False
    explicit = set(params)
    frameworks: set[str] | None = None
    if kind == "shell":
        if any(e.kind == "env" for e in fix.code_edit):
            new_text, outcome, deltas = _handle_env_shell(text, fix, params)
            for loc in outcome.locations:
                loc.line = _map_back(loc.line, history)
            total.merge(outcome)
            if new_text != text:
                history.append(deltas)
                text, changed = new_text, True
        else:
            total.notes.append("this fix has no launch-script edit")
    else:
        try:
            mod = _Module(_Source(text))
        except SyntaxError as exc:
            raise ValueError(f"cannot parse the Python file: {exc.msg} (line {exc.lineno})") from None
        frameworks = mod.frameworks() or None
        for edit in fix.code_edit:
            if edit.kind == "template":
                continue
            if frameworks and edit.framework != "any" and edit.framework not in frameworks:
                continue
            if edit.requires_params and not set(edit.requires_params) <= explicit:
                continue
            if edit.unless_params and set(edit.unless_params) & explicit:
                continue
            merged = {**edit.params, **params}
            if edit.kind == "env":
                outcome = _handle_env_python(mod, fix, params)
            else:
                outcome = _PY_HANDLERS[edit.kind](mod, edit, merged, explicit)
            if not outcome.edits and not outcome.matched and edit.locate.present_if_calls:
                present = mod.has_call(edit.locate.present_if_calls)
                if present is not None:  # e.g. the optimizer is already torch_npu.optim.NpuFusedAdamW
                    outcome = _Outcome(
                        matched=True,
                        locations=[
                            EditLocation(
                                line=present.lineno,
                                what=f"already uses {_one_line(mod.src.segment(present.func), 60)}",
                            )
                        ],
                    )
            if outcome.edits:
                # Imports go first in the edit list: at an equal offset they must end up above the code.
                for module in edit.imports:
                    imp = None if module in outcome.imports_done else _import_edit(mod, module)
                    if imp is not None:
                        outcome.edits.insert(0, imp)
                        outcome.locations.append(
                            EditLocation(line=mod.src.line_of(imp.start), what=f"added import {module}")
                        )
            for loc in outcome.locations:
                loc.line = _map_back(loc.line, history)
            total.merge(outcome)
            if outcome.edits:
                new_text = _apply_text_edits(text, outcome.edits)
                try:
                    ast.parse(new_text)
                except SyntaxError as exc:  # a bug in an edit kind; never hand out a broken file
                    raise RuntimeError(
                        f"edit {edit.kind} of fix {fix.id} produced invalid Python "
                        f"({exc.msg}, line {exc.lineno}); please report it"
                    ) from None
                if new_text != text:
                    history.append(_line_map(mod.src, outcome.edits))
                    text, changed = new_text, True
                    mod = _Module(_Source(text))
    status: Status = "changed" if changed else "already-applied" if total.matched else "no-spot"
    template = _template(fix, frameworks) if status == "no-spot" else None
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
        return path.read_bytes().decode("utf-8")
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
            text = f"{fix_id}: changed {path} ({whats})"
        elif run.status == "already-applied":
            text = f"{fix_id}: already applied in {path}, nothing to change ({whats})"
        else:
            text = f"{fix_id}: no place to apply it automatically in {path}; see the template"
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
    kind = _file_kind(path, original)
    checked = _check_params(params)
    text = original
    runs: list[tuple[str, _FixRun]] = []
    history: list[_LineMap] = []
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
    EditConflictError when the file no longer has the content the diff was computed against, and with
    ValueError when the result carries no patched text (e.g. it was rebuilt from JSON). The new content is
    written to a temporary file beside the target and renamed over it, keeping the file mode, so a crash
    cannot leave a half-written file.
    """
    if not result.changed:
        return None
    if result.patched_text is None:
        raise ValueError(
            "this result carries no patched text (was it loaded from JSON?); run suggest_edit again"
        )
    path = Path(result.path)
    current = _read(path)
    if hashlib.sha256(current.encode("utf-8")).hexdigest() != result.base_sha256:
        raise EditConflictError(f"{path} changed since the edit was suggested; run suggest-edit again")
    saved: Path | None = None
    if backup:
        saved = _backup_path(path)
        shutil.copy2(path, saved)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(result.patched_text.encode("utf-8"))
        shutil.copymode(path, tmp_name)
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return saved
