"""Environment-variable edits: `os.environ` in Python files, export / unset lines in shell launch scripts."""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .pymodule import NOT_LITERAL, Module, literal
from .text import EditLocation, LineMap, Outcome, TextEdit

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .kinds.base import EnvVar

# ----------------------------------------------------------------------------------------------------
# environment variables


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


def _env_targets(env: Sequence[EnvVar], params: dict[str, Any]) -> list[EnvVar]:
    """The fix's variables, limited to `params["env"]` (the names a finding flagged) when given."""
    only = params.get("env")
    if only is None:
        return list(env)
    names = {only} if isinstance(only, str) else set(only)
    return [v for v in env if v.name in names]


def edit_env_python(mod: Module, env: Sequence[EnvVar], params: dict[str, Any]) -> Outcome:
    """os.environ["NAME"] = "v" / os.environ.setdefault("NAME", "v") statements, corrected in place; an unset
    becomes os.environ.pop("NAME", None). Variables the file does not touch are left to the launch script."""
    out = Outcome()
    src = mod.src
    wanted = {v.name: v for v in _env_targets(env, params)}
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
            name = literal(key_node)
        if not isinstance(name, str) or name not in wanted or stmt is None or value is None:
            continue
        var = wanted[name]
        seen.add(name)
        out.matched = True
        current = literal(value)
        if current is NOT_LITERAL:
            out.notes.append(f"line {stmt.lineno}: {name} is set from an expression; check it by hand")
            continue
        current = str(current)
        if var.satisfied_by(current):
            out.locations.append(EditLocation(line=stmt.lineno, what=f"{name}={current} already ok"))
        elif var.value is None:
            start, end = src.span(stmt)
            key = _quote_like(name, src.segment(key_node))
            out.edits.append(TextEdit(start, end, f"os.environ.pop({key}, None)"))
            out.locations.append(EditLocation(line=stmt.lineno, what=f"unset {name} (was {current})"))
        else:
            new = _env_new_value(var, current)
            start, end = src.span(value)
            out.edits.append(TextEdit(start, end, _quote_like(new, src.segment(value))))
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


def edit_env_shell(text: str, env: Sequence[EnvVar], params: dict[str, Any]) -> tuple[str, Outcome, LineMap]:
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
    out = Outcome()
    lines = text.splitlines(keepends=True)
    nl = "\r\n" if "\r\n" in text else "\n"
    assigns, unsets = _scan_shell(lines)
    insert_at = _shell_insert_point(lines, assigns, unsets)

    token_edits: dict[int, list[tuple[int, int, str]]] = {}  # line -> [(start, end, text)] within the line
    whole_line: dict[int, str] = {}
    added: list[str] = []
    targets = _env_targets(env, params)
    named = params.get("env") is not None
    script_mentions_fix = any(a.name in {v.name for v in env} for a in assigns) or any(
        v.name in unsets for v in env
    )
    for var in targets:
        mine = [a for a in assigns if a.name == var.name]
        unset_lines = unsets.get(var.name, [])
        last_set = max((a.line for a in mine), default=-1)
        last_unset = max(unset_lines, default=-1)
        effective = next(a for a in mine if a.line == last_set).value if last_set > last_unset else None
        bad = [a for a in mine if not var.satisfied_by(a.value)]
        mentioned = bool(mine or unset_lines)
        if mentioned:
            out.matched = True
        if (
            var.value is None
            and not mentioned
            and not (named or (var is env[0] and not script_mentions_fix))
        ):
            continue  # an unset-type variable the script never mentions and nobody flagged: leave it alone
        if not bad and mentioned and var.satisfied_by(effective):
            line = max(last_set, last_unset) + 1
            state = "unset" if effective is None else f"={effective}"
            out.locations.append(
                EditLocation(
                    line=line, what=f"{var.name}{' ' if effective is None else ''}{state} already ok"
                )
            )
            continue
        out.matched = True
        token_removed = _edit_bad_values(var, bad, lines, nl, whole_line, token_edits, out)
        if var.value is None and token_removed and not unset_lines:
            # The inline `NAME=1 cmd` token is gone; an explicit unset also clears an inherited value and
            # keeps the next run from treating the variable as never mentioned.
            added.append(f"unset {var.name}")
        elif var.value is None and not mine and not unset_lines:
            if not (named or (var is env[0] and not script_mentions_fix)):
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
    new_text = _assemble_shell(lines, nl, insert_at, added, whole_line, token_edits)
    return new_text, out, [(insert_at + 1, len(added), insert_at + 1, len(added))] if added else []


def _edit_bad_values(var: EnvVar, bad: list[_ShellAssign], lines: list[str], nl: str, whole_line: dict[int, str],
                     token_edits: dict[int, list[tuple[int, int, str]]], out: Outcome) -> bool:
    """Record the edits of `var`'s assignments with a bad value in `whole_line` / `token_edits` (an unset
    variable: the line becomes `unset NAME` or loses its token; a set one: the value is replaced in its
    quotes); True when an inline token was removed."""
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
    return token_removed


def _scan_shell(lines: list[str]) -> tuple[list[_ShellAssign], dict[str, list[int]]]:
    """Every assignment of the script, and the 0-based lines of each variable's `unset`s."""
    assigns: list[_ShellAssign] = []
    unsets: dict[str, list[int]] = {}
    for index, line in enumerate(lines):
        assigns += _parse_shell_line(index, line)
        match = _SHELL_UNSET_RE.match(line.rstrip("\r\n"))
        if match:
            for name in match.group("names").split():
                unsets.setdefault(name, []).append(index)
    return assigns, unsets


def _assemble_shell(
    lines: list[str],
    nl: str,
    insert_at: int,
    added: list[str],
    whole_line: dict[int, str],
    token_edits: dict[int, list[tuple[int, int, str]]],
) -> str:
    """The script with whole-line replacements, in-line token edits and `added` lines before `insert_at`."""
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
    return "".join(result)
