"""Python edits on whole statements: per-step sync guards, forcing context managers, attribute switches.

- `remove_sync_guard`: `if not torch.isfinite(x).all(): raise ...` or `assert torch.isfinite(x).all()` in
  code that runs every step (a loop body or a module's `forward`) makes the host wait for the device at each
  evaluation; the reviewer-accepted fix deletes the check (it guards nothing the loss check cannot).
- `unwrap_with`: `with sdpa_kernel(SDPBackend.MATH):` pins attention to the slow math kernel; the fix is
  the body without the `with`, dedented, and the import names that only the context used are dropped.
- `set_attribute`: `torch.backends.cuda.matmul.allow_tf32 = False` is corrected in place to the fix's value.
- `periodic_in_loop`: statements before the training loop (`gc.disable()`) and, at the end of its body,
  `if step % every == 0:` statements (`gc.collect()`): one planned pause instead of random ones.
"""

from __future__ import annotations

import ast
from typing import Any

from ..schema import CodeEdit, render_template
from .pycalls import delete_statements
from .pyinsert import already_applied, insert_lines_edit, training_loop
from .pymodule import NOT_LITERAL, Module, literal, same_literal
from .text import EditLocation, Outcome, TextEdit, one_line

# Functions whose body runs once per step even though no loop encloses it in the file.
_PER_STEP_FUNCTIONS = frozenset({"forward", "training_step", "train_step", "step"})


def _enclosing_function(mod: Module, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    while node in mod.parents:
        node = mod.parents[node]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            return node
    return None


def _runs_per_step(mod: Module, stmt: ast.stmt) -> bool:
    if stmt in mod.in_loop:
        return True
    func = _enclosing_function(mod, stmt)
    return func is not None and func.name in _PER_STEP_FUNCTIONS


def _syncing_call(mod: Module, test: ast.AST, edit: CodeEdit) -> ast.Call | None:
    """The located tensor call in `test` (`torch.isfinite(...)`), when the test also reads it on the host
    through a located method (`.all()`, `.item()`) or by being a condition itself. A test without a located
    call is left alone: `arr.all()` on a NumPy array is no device sync."""
    tensor = next(
        (n for n in ast.walk(test) if isinstance(n, ast.Call) and mod.match_call(n, edit.locate.calls)), None
    )
    return tensor


def _is_guard(stmt: ast.stmt) -> bool:
    """`assert ...`, or `if ...:` whose body only raises / warns / prints and that has no else branch."""
    if isinstance(stmt, ast.Assert):
        return True
    if not isinstance(stmt, ast.If) or stmt.orelse:
        return False
    for inner in stmt.body:
        if isinstance(inner, ast.Raise):
            continue
        if isinstance(inner, ast.Expr) and isinstance(inner.value, ast.Call):
            continue  # a logging / warnings call that reports the failed check
        return False
    return True


def handle_remove_sync_guard(
    mod: Module, edit: CodeEdit, params: dict[str, Any], explicit: set[str]
) -> Outcome:
    """Delete guards whose condition reads a tensor on the host in code that runs every step."""
    out = Outcome()
    doomed: list[ast.stmt] = []
    for stmt in ast.walk(mod.tree):
        if not isinstance(stmt, ast.If | ast.Assert) or not _is_guard(stmt) or not _runs_per_step(mod, stmt):
            continue
        call = _syncing_call(mod, stmt.test, edit)
        if call is None:
            continue
        doomed.append(stmt)
        out.matched = True
        out.locations.append(
            EditLocation(
                line=stmt.lineno,
                what=f"removed the per-step check `{one_line(mod.src.segment(stmt.test), 60)}` "
                f"(a host-device sync each time it runs)",
            )
        )
    if doomed:
        out.edits += delete_statements(mod, doomed)
        out.notes.append("to keep a NaN guard, check the loss every N steps (one sync per N steps)")
    return out


def _names_in(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _unused_import_edits(mod: Module, dropped: list[ast.AST]) -> tuple[list[TextEdit], list[str], int]:
    """Edits removing `from M import a, b` names that were used only inside the `dropped` nodes."""
    inside = {id(n) for d in dropped for n in ast.walk(d)}
    candidates = set().union(*(_names_in(d) for d in dropped)) if dropped else set()
    used_elsewhere = {n.id for n in ast.walk(mod.tree) if isinstance(n, ast.Name) and id(n) not in inside}
    unused = candidates - used_elsewhere
    edits: list[TextEdit] = []
    removed: list[str] = []
    first_line = 0
    doomed: list[ast.stmt] = []
    for stmt in mod.tree.body:
        if not isinstance(stmt, ast.ImportFrom) or stmt.level or stmt.module is None:
            continue
        gone = [a for a in stmt.names if (a.asname or a.name) in unused]
        if not gone:
            continue
        removed += [a.asname or a.name for a in gone]
        first_line = first_line or stmt.lineno
        kept = [a for a in stmt.names if a not in gone]
        if not kept:
            doomed.append(stmt)
            continue
        names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in kept)
        start, end = mod.src.span(stmt)
        edits.append(TextEdit(start, end, f"from {stmt.module} import {names}"))
    edits += delete_statements(mod, doomed)
    return edits, removed, first_line


def _with_matches(mod: Module, stmt: ast.stmt, edit: CodeEdit) -> bool:
    if not isinstance(stmt, ast.With | ast.AsyncWith) or len(stmt.items) != 1:
        return False
    ctx = stmt.items[0].context_expr
    if not isinstance(ctx, ast.Call) or stmt.items[0].optional_vars is not None:
        return False
    if not mod.match_call(ctx, edit.locate.calls):
        return False
    if not edit.locate.arg_names:
        return True
    named = {
        n.attr
        for a in [*ctx.args, *(k.value for k in ctx.keywords)]
        for n in ast.walk(a)
        if isinstance(n, ast.Attribute)
    } | set().union(*(_names_in(a) for a in ctx.args))
    return bool(named & set(edit.locate.arg_names))


def handle_unwrap_with(mod: Module, edit: CodeEdit, params: dict[str, Any], explicit: set[str]) -> Outcome:
    """Replace each matching `with ctx(...):` (on its own lines) by its body, dedented one level."""
    out = Outcome()
    src = mod.src
    dropped: list[ast.AST] = []
    for stmt in ast.walk(mod.tree):
        if not _with_matches(mod, stmt, edit) or not mod.owns_lines(stmt):
            continue
        assert isinstance(stmt, ast.With | ast.AsyncWith)
        body_first = stmt.body[0].lineno
        if body_first == stmt.lineno:  # `with x: y` on one line: no block to dedent
            out.notes.append(f"line {stmt.lineno}: one-line `with`; edit it by hand")
            continue
        cut = len(src.indent(body_first)) - len(src.indent(stmt.lineno))
        strings = [n for n in ast.walk(stmt) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
        if any(s.end_lineno != s.lineno for s in strings):  # dedenting would change a multi-line string
            out.notes.append(f"line {stmt.lineno}: the block holds a multi-line string; edit it by hand")
            continue
        lines = src.lines[body_first - 1 : stmt.end_lineno]
        # lines keep their own line ends; a blank line keeps only its end, an under-indented continuation
        # line (inside brackets) loses just its leading blanks
        body = "".join(
            line.lstrip(" \t") if not line.strip() or line[:cut].strip() else line[cut:] for line in lines
        )
        end = src.line_start(stmt.end_lineno + 1)  # type: ignore[operator]
        out.edits.append(TextEdit(src.line_start(stmt.lineno), end, body))
        dropped.append(stmt.items[0].context_expr)
        out.matched = True
        out.locations.append(
            EditLocation(line=stmt.lineno, what=f"removed `with {one_line(src.segment(dropped[-1]), 60)}:`")
        )
    if dropped:
        edits, names, line = _unused_import_edits(mod, dropped)
        out.edits += edits
        if names:
            out.locations.append(
                EditLocation(line=line, what=f"dropped the unused import of {', '.join(names)}")
            )
    return out


def handle_set_attribute(
    mod: Module, edit: CodeEdit, params: dict[str, Any], explicit: set[str]
) -> Outcome:
    """Set `target = assign_value` where the file assigns another literal to a located attribute."""
    out = Outcome()
    wanted_src = edit.assign_value or ""
    wanted = literal(ast.parse(wanted_src, mode="eval").body)
    for stmt in ast.walk(mod.tree):
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            continue
        name, resolved = mod.qualname(stmt.targets[0])
        if not resolved or name not in edit.locate.attributes:
            continue
        out.matched = True
        current = literal(stmt.value)
        if current is NOT_LITERAL:
            out.notes.append(f"line {stmt.lineno}: {name} is set from an expression; kept")
        elif same_literal(current, wanted):
            out.locations.append(EditLocation(line=stmt.lineno, what=f"{name} is already {wanted_src}"))
        else:
            start, end = mod.src.span(stmt.value)
            out.edits.append(TextEdit(start, end, wanted_src))
            out.locations.append(
                EditLocation(
                    line=stmt.lineno, what=f"changed {name} = {mod.src.segment(stmt.value)} -> {wanted_src}"
                )
            )
    return out


def _step_counter(loop: ast.stmt) -> str | None:
    """The step variable of `for step, ... in enumerate(...)` (or `for step in range(...)`), else None."""
    if not isinstance(loop, ast.For | ast.AsyncFor) or not isinstance(loop.iter, ast.Call):
        return None
    func = loop.iter.func
    name = func.id if isinstance(func, ast.Name) else None
    if name == "enumerate" and isinstance(loop.target, ast.Tuple) and loop.target.elts:
        first = loop.target.elts[0]
        return first.id if isinstance(first, ast.Name) else None
    if name == "range" and isinstance(loop.target, ast.Name):
        return loop.target.id
    return None


def handle_periodic_in_loop(
    mod: Module, edit: CodeEdit, params: dict[str, Any], explicit: set[str]
) -> Outcome:
    """Insert `statements` above the training loop and `if <step> % every == 0:` + `periodic` at the end of
    its body. Needs a step counter in the loop header; already applied when a located call is present."""
    out = Outcome()
    src = mod.src
    if already_applied(mod, edit, out):
        return out
    loop = training_loop(mod)
    step = _step_counter(loop) if loop is not None else None
    if loop is None or step is None:
        out.notes.append("no training loop with a step counter (`for step, batch in enumerate(loader)`)")
        return out
    assert isinstance(loop, ast.For | ast.AsyncFor)
    out.matched = True
    every = int(params.get("every", edit.params.get("every", 100)))
    before = ([f"# {edit.comment}"] if edit.comment else []) + [
        render_template(t, params) for t in edit.statements
    ]
    out.edits.append(insert_lines_edit(src, loop.lineno - 1, before, src.indent(loop.lineno)))
    last = loop.body[-1]
    if isinstance(last, ast.Break | ast.Continue | ast.Return | ast.Raise) and len(loop.body) > 1:
        last = loop.body[-2]  # code after an unconditional jump would never run
    inner = src.indent(loop.body[0].lineno)
    tail = [f"if {step} % {every} == 0:"] + [f"    {render_template(t, params)}" for t in edit.periodic]
    out.edits.append(insert_lines_edit(src, last.end_lineno or last.lineno, tail, inner))
    out.locations.append(
        EditLocation(
            line=loop.lineno, what=f"inserted {'; '.join(before[-len(edit.statements) :])} before the loop"
        )
    )
    out.locations.append(
        EditLocation(
            line=last.end_lineno or last.lineno,
            what=f"inserted {'; '.join(edit.periodic)} every {every} steps at the end of the loop body",
        )
    )
    return out
