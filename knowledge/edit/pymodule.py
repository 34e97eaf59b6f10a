"""A parsed Python file for the editor: import aliases resolved, parents, loops, literals."""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from typing import Any

from .text import Source

# ----------------------------------------------------------------------------------------------------
# Python module analysis


LOOPS = (ast.For, ast.AsyncFor, ast.While)
SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
NOT_LITERAL = object()


def literal(node: ast.AST | None) -> Any:
    if node is None:
        return NOT_LITERAL
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return NOT_LITERAL


def same_literal(a: Any, b: Any) -> bool:
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


class Module:
    """A parsed Python file: import aliases, parent links, which calls sit inside loops."""

    def __init__(self, src: Source) -> None:
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
        if isinstance(node, SCOPES):
            for child in ast.iter_child_nodes(node):
                self._mark_loops(child, False)
            return
        if isinstance(node, LOOPS):
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

    def devices(self) -> set[str]:
        """Accelerator vendors the file visibly targets: `cuda` for `torch.cuda.*`, `.cuda()` or a "cuda"
        device string, `ascend` for torch_npu imports, `.npu()` or an "npu" device string. Empty when the
        file names neither (a fix is then never ruled out by vendor)."""
        found: set[str] = set()
        if "torch_npu" in self.packages:
            found.add("ascend")
        for node in ast.walk(self.tree):
            word = None
            if isinstance(node, ast.Attribute):
                word = node.attr
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                word = node.value.split(":", 1)[0]
            if word == "cuda":
                found.add("cuda")
            elif word == "npu":
                found.add("ascend")
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

    def calls_to(self, targets: Iterable[str]) -> Iterator[tuple[ast.Call, str]]:
        """The calls whose callee resolves to one of `targets`, in source order, with the target matched."""
        targets = list(targets)
        for call in self.calls():
            target = self.match_call(call, targets)
            if target is not None:
                yield call, target

    def has_call(self, targets: Iterable[str]) -> ast.Call | None:
        return next((call for call, _ in self.calls_to(targets)), None)

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
