"""Fitting a plain table (`Table`) to a terminal's width, and the column labels and name shortening that
the terminal and Markdown renderings of `tools/render.py` share (the algorithm is in that module's
docstring).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from typing import Any

from ..analysis.timeline.names import display_names

__all__ = ["TEXT_MIN", "Table", "column_label", "fit_table", "flex_widths", "hanging", "shorten_names", "wrap_text"]


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[Any]]
    note: str = ""
    text: tuple[str, ...] = ()      # free-text columns: wrapped on a terminal, in the width left
    names: tuple[str, ...] = ()     # identifier columns: shortened to the width left, on one line
    optional: tuple[str | tuple[str, ...], ...] = ()  # left out on a narrow terminal, first listed first;
    #                                                    a tuple of columns goes together
    empty: str = "none"             # printed after the title instead of a table without rows


TEXT_MIN = 24     # the least width a text or name column is squeezed to before optional columns go


LABELS = {"step_ms": "step time", "communication_ms": "comm", "overlapped_ms": "overlap", "impact_%": "% of step"}


def column_label(header: str, title: str) -> str:
    """A column's header on a terminal: the field name with spaces (so it can wrap), its unit dropped
    when the title states it ("comm_not_overlapped_ms" in a table "... (ms)" -> "comm not overlapped");
    a few fields have shorter names (`LABELS`)."""
    if header in LABELS:
        return LABELS[header]
    h = header.replace("_", " ").strip()
    return h[:-3] if "(ms)" in title and h.endswith(" ms") else h


def hanging(text: str, indent: int, width: int) -> str:
    """`text` wrapped (`wrap_text`) to follow a head of `indent` characters, its other lines indented under it."""
    return wrap_text(text, max(width - indent, 20)).replace("\n", "\n" + " " * indent)


def shown_columns(t: Table, cells: list[list[str]], widths: dict[int, int], width: int) -> tuple[list[int], int]:
    """The columns that fit in `width` and the width left for the text / name columns (see
    `tools/render.py`'s docstring); `widths`: what each other column needs. A column costs its width
    plus 3 (padding and a rule)."""
    groups = [(g,) if isinstance(g, str) else g for g in t.optional]
    optional = {h for g in groups for h in g}
    known = {i for i, h in enumerate(t.header) if any(r[i] not in ("-", "") for r in cells)}
    shown = [i for i, h in enumerate(t.header) if i in known or h not in optional]
    drop = list(groups)
    while True:
        fixed = flex = 0
        for i in shown:
            h = t.header[i]
            if h in t.text or h in t.names:
                flex += 1
            else:
                fixed += widths[i]
        left = width - 1 - 3 * len(shown) - fixed
        if ((not flex or left >= flex * TEXT_MIN) and left >= 0) or not drop:
            return shown, max(left, 8 * flex)
        gone = drop.pop(0)
        shown = [i for i in shown if t.header[i] not in gone]


def flex_widths(needs: dict[int, int], left: int) -> dict[int, int]:
    """`left` characters shared by the text / name columns whose widest cell is `needs[i]`: each, narrowest
    first, gets what it needs or an equal share of what is left, whichever is less (a column of short
    values is not wrapped so that a long one gets room it cannot use). At least 8 each."""
    out: dict[int, int] = {}
    for k, i in enumerate(sorted(needs, key=needs.__getitem__)):
        out[i] = max(min(needs[i], left // (len(needs) - k)), 8)
        left -= out[i]
    return out


class Wrapper(textwrap.TextWrapper):
    """Wraps at spaces. A token wider than the line is broken after a list separator `; , |` (not the
    comma of "1,000,000"): `level0:NA;` / `level1:ring`; a piece still too wide, after a `: / = .`:
    `expandable_segments:` / `True`, `torch_npu.` / `npu_add_layer_norm`; and a piece wider than the line
    is folded mid-word, from the start of a line of its own."""

    def _split(self, text: str) -> list[str]:
        out = []
        for chunk in LIST_CHUNK.findall(text):
            out += [chunk] if len(chunk) <= self.width else PART_CHUNK.findall(chunk)
        return [c for c in out if c]

    def _handle_long_word(self, reversed_chunks: list[str], cur_line: list[str], cur_len: int, width: int) -> None:
        if not cur_line:  # folded from the start of a line of its own, not from the end of the previous one
            super()._handle_long_word(reversed_chunks, cur_line, cur_len, width)


# a comma before a digit is inside a number ("1,000,000") or a shape ("4,2048"), not a list separator
LIST_CHUNK = re.compile(r"\s+|(?:[^\s;,|]|,(?=\d))*(?:[;|]|,(?!\d))+|(?:[^\s;,|]|,(?=\d))+")
PART_CHUNK = re.compile(r"[^:/=.]*[:/=.]+|[^:/=.]+")


def wrap_text(text: str, width: int) -> str:
    """`text` as lines of at most `width` characters (its own line breaks kept)."""
    w = Wrapper(width, break_on_hyphens=False)
    return "\n".join(line for para in text.split("\n") for line in (w.wrap(para) or [""]))


def column_width(t: Table, cells: list[list[str]], i: int) -> int:
    label = column_label(t.header[i], t.title)
    data = max((len(r[i]) for r in cells), default=0)
    return max([data, *map(len, label.split())])  # the header wraps between its words


def fit_table(t: Table, width: int) -> Any:
    """`t` as a rich Table fitted to `width` columns of terminal (see `tools/render.py`'s docstring)."""
    from rich.table import Table as RichTable
    from rich.text import Text

    cells = [[str(x) for x in r] for r in t.rows]
    widths = {i: column_width(t, cells, i) for i, h in enumerate(t.header) if h not in t.text + t.names}
    shown, left = shown_columns(t, cells, widths, width)
    flex = flex_widths({i: column_width(t, cells, i) for i in shown if i not in widths}, left)
    rt = RichTable(title=Text(t.title), title_justify="left", show_lines=False)
    for i in shown:
        h = t.header[i]
        label = column_label(h, t.title)
        if i in flex:
            rt.add_column(wrap_text(label, flex[i]), width=flex[i], no_wrap=True,
                          overflow="ellipsis" if h in t.names else "fold")
            continue
        numeric = bool(cells) and all(NUMBER.fullmatch(r[i]) for r in cells)
        rt.add_column(wrap_text(label, widths[i]) or label, no_wrap=True, justify="right" if numeric else "left")
    shorten_names(t, cells, flex)
    for r in cells:
        rt.add_row(*[Text(wrap_text(r[i], flex[i]) if t.header[i] in t.text else r[i]) for i in shown])
    return rt


NUMBER = re.compile(r"[-+]?[\d,]*\.?\d+%?|-")


def shorten_names(t: Table, cells: list[list[str]], width: int | dict[int, int]) -> None:
    """The cells of `t`'s name columns as `display_names` shows them in `width` characters (per column
    index when a dict; columns not in it are left alone), in place."""
    for i, h in enumerate(t.header):
        w = width.get(i) if isinstance(width, dict) else width
        if h in t.names and w is not None:
            for r, name in zip(cells, display_names([r[i] for r in cells], w), strict=True):
                r[i] = name
