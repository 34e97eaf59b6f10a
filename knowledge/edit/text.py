"""Result types of the code editor, text edits at character offsets, line mapping and diffs."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, Field

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
class TextEdit:
    """Replace text[start:end] by `text` (character offsets). Insertions have start == end."""

    start: int
    end: int
    text: str


class Source:
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


def apply_text_edits(text: str, edits: Iterable[TextEdit]) -> str:
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
LineMap = list[tuple[int, int, int, int]]


def line_map(src: Source, edits: Iterable[TextEdit]) -> LineMap:
    """How one batch of edits moved lines: see `map_back`."""
    out: LineMap = []
    shift = 0
    for edit in sorted(edits, key=lambda e: (e.start, e.end)):
        old_line = src.line_of(edit.start)
        added = edit.text.count("\n")
        removed = src.text[edit.start : edit.end].count("\n")
        new_line = old_line + shift
        shift += added - removed
        out.append((new_line, added, old_line, shift))
    return out


def map_back(line: int, history: list[LineMap]) -> int:
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
# results of one edit item


@dataclass
class Outcome:
    edits: list[TextEdit] = field(default_factory=list)
    locations: list[EditLocation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    matched: bool = False  # a spot was found (changed or already fine)
    imports_done: set[str] = field(default_factory=set)  # imports the handler already inserted itself

    def merge(self, other: Outcome) -> None:
        self.edits += other.edits
        self.locations += other.locations
        self.notes += other.notes
        self.matched = self.matched or other.matched
        self.imports_done |= other.imports_done


def one_line(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
