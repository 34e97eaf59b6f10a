"""Python edits on calls: keyword arguments, swapped callees, removed calls, unwrapped wrappers."""

from __future__ import annotations

import ast
from typing import Any

from .kinds.base import KwargSpec, Locate, placeholders, render_template
from .pymodule import NOT_LITERAL, Module, literal, same_literal
from .text import EditLocation, Outcome, Source, TextEdit, one_line

# ----------------------------------------------------------------------------------------------------
# keyword arguments


def _is_positive_int(value: Any) -> bool:
    return type(value) is int and value > 0


def _kwarg_ok(spec: KwargSpec, current: Any, rendered: str, explicit: bool) -> bool:
    """Whether an existing literal keyword value already satisfies the spec (see KwargSpec docs)."""
    wanted = literal(ast.parse(rendered, mode="eval").body)
    if explicit:
        return same_literal(current, wanted)
    if spec.keep_existing:
        return True
    if spec.ok_min is not None:
        return type(current) in (int, float) and current >= spec.ok_min
    if spec.ok_values is not None:
        return any(same_literal(current, ok) for ok in spec.ok_values)
    return same_literal(current, wanted)


def _call_args(call: ast.Call) -> list[ast.AST]:
    return sorted([*call.args, *call.keywords], key=lambda n: (n.lineno, n.col_offset))  # type: ignore[attr-defined]


def _removal_edits(src: Source, call: ast.Call, removed: list[ast.keyword]) -> list[TextEdit]:
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
            edits.append(TextEdit(src.span(args[i - 1])[1], src.span(args[j])[1], ""))
        elif j + 1 < len(args):
            edits.append(TextEdit(src.span(args[i])[0], src.span(args[j + 1])[0], ""))
        else:  # every argument goes: empty the parentheses
            open_paren = src.text.index("(", src.span(call.func)[1])
            edits.append(TextEdit(open_paren + 1, src.span(call)[1] - 1, ""))
        i = j + 1
    return edits


def _insertion_edit(src: Source, call: ast.Call, kept: list[ast.AST], pairs: list[str]) -> TextEdit:
    """Insert `name=value` items after the last kept argument, following the call's layout: one argument
    per line (with or without a trailing comma) when the arguments already sit on their own lines; otherwise
    on the same line, filled up to 100 characters and continued under the first argument."""
    call_end = src.span(call)[1]
    close = call_end - 1  # the ")" of the call
    if not kept:
        return TextEdit(close, close, ", ".join(pairs))
    anchor = kept[-1]
    anchor_end = src.span(anchor)[1]
    nl = src.newline
    if anchor.lineno > call.lineno:  # type: ignore[attr-defined]
        indent = src.indent(anchor.lineno)  # type: ignore[attr-defined]
        between = src.text[anchor_end:close]
        if between.lstrip().startswith(","):
            comma = anchor_end + between.index(",") + 1
            return TextEdit(comma, comma, "".join(f"{nl}{indent}{p}," for p in pairs))
        return TextEdit(anchor_end, anchor_end, "".join(f",{nl}{indent}{p}" for p in pairs))
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
    return TextEdit(anchor_end, anchor_end, text)


def edit_kwargs(
    mod: Module,
    call: ast.Call,
    specs: list[KwargSpec],
    remove: list[str],
    params: dict[str, Any],
    explicit: set[str],
    force_change: bool = False,
) -> Outcome:
    """Add or adjust keyword arguments of one call (the add_kwargs algorithm).

    For each spec: an existing literal that satisfies it is kept, an unsatisfying literal is replaced in
    place, a non-literal (variable, expression) is kept and reported; a missing keyword is added unless the
    call forwards `**kwargs` (the added name could collide) or its `only_if_positive` partner is not a
    positive literal, or its `only_if_changed` partner is not added / changed by this edit. `remove` keywords are deleted only when the call changes anyway (or `force_change`).
    """
    src = mod.src
    out = Outcome(matched=True)
    present = {kw.arg: kw for kw in call.keywords if kw.arg}
    has_star_kwargs = any(kw.arg is None for kw in call.keywords)
    final: dict[str, Any] = {name: literal(kw.value) for name, kw in present.items()}
    additions: list[str] = []
    replaced: list[str] = []
    touched: set[str] = set()  # keywords this edit adds or changes
    for spec in specs:
        rendered = render_template(spec.value, params)
        is_explicit = bool(placeholders(spec.value) & explicit)
        if spec.only_if_positive and not _is_positive_int(final.get(spec.only_if_positive)):
            if spec.name not in present:
                out.notes.append(
                    f"`{spec.name}` not added: it needs `{spec.only_if_positive}` > 0 as a literal"
                )
            continue
        if spec.only_if_changed and spec.only_if_changed not in touched and spec.name not in present:
            continue  # a tuning extra that belongs with the change it follows, not on its own
        if spec.name in present:
            kw = present[spec.name]
            current = literal(kw.value)
            if current is NOT_LITERAL:
                expect = (
                    f">= {spec.ok_min:g}" if spec.ok_min is not None and not is_explicit else f"== {rendered}"
                )
                out.notes.append(
                    f"kept `{spec.name}={one_line(src.segment(kw.value), 40)}` (not a literal; "
                    f"check that it is {expect})"
                )
                continue
            if _kwarg_ok(spec, current, rendered, is_explicit):
                continue
            start, end = src.span(kw.value)
            out.edits.append(TextEdit(start, end, rendered))
            replaced.append(f"{spec.name}={one_line(src.segment(kw.value), 30)} -> {rendered}")
            touched.add(spec.name)
            final[spec.name] = literal(ast.parse(rendered, mode="eval").body)
        elif has_star_kwargs:
            out.notes.append(
                f"`{spec.name}` not added: the call forwards **kwargs, which may already carry it"
            )
        else:
            additions.append(f"{spec.name}={rendered}")
            touched.add(spec.name)
            final[spec.name] = literal(ast.parse(rendered, mode="eval").body)
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


def matching_calls(mod: Module, loc: Locate) -> list[tuple[ast.Call, str | None]]:
    """Calls `loc` selects, with the matched qualified target (None for method matches)."""
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
            if loc.skip_first_arg and literal(first) in loc.skip_first_arg:
                continue
            receiver = mod.src.segment(call.func.value).lower()
            if any(word in receiver for word in loc.skip_receivers):
                continue
        elif target is None:
            continue
        if loc.kwarg_equals and not all(
            any(k.arg == name and same_literal(literal(k.value), value) for k in call.keywords)
            for name, value in loc.kwarg_equals.items()
        ):
            continue
        found.append((call, target))
    return found


def delete_statements(mod: Module, stmts: list[ast.stmt]) -> list[TextEdit]:
    """Delete whole statements. A block left empty keeps one `pass` (at the first statement's place)."""
    src = mod.src
    edits: list[TextEdit] = []
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
                edits.append(TextEdit(src.line_start(stmt.lineno), end, replacement))
            else:
                start, end = src.span(stmt)
                edits.append(TextEdit(start, end, "pass"))
    return edits


