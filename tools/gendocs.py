"""Generate docs/checks.md and the check catalog of docs/contract.md from the check registry, the
thresholds table and the knowledge base.

`python -m stepdoctor.tools.gendocs` (or `make docs`) rewrites both; `tests/test_docs_and_layout.py` fails
when either is stale. Every column comes from a check class attribute, so adding a check is its module
(plus its tests and fix files) and `make docs`.
"""

from __future__ import annotations

import sys
import types
import typing
from pathlib import Path
from typing import Any

from ..analysis.checks.base import registry
from ..analysis.thresholds import all_thresholds

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _needs(cls: type) -> str:
    """Capabilities a rank needs, per vendor where they differ."""
    parts = [f"{v}: {', '.join(n) or '-'}" for v, n in cls.needs_by_vendor.items()]
    rest = [v for v in cls.vendors if v not in cls.needs_by_vendor]
    if not parts:
        return ", ".join(cls.needs) or "-"
    if rest:
        parts.append(f"{', '.join(rest)}: {', '.join(cls.needs) or '-'}")
    return "; ".join(parts)


def evidence_text(model: type) -> str:
    """`key: type; ...` of an evidence model, nested records as `{key: type, ...}`."""
    return "; ".join(f"`{name}`{'?' if f.default is None and not f.is_required() else ''}: "
                     f"{_type_text(f.annotation)}" for name, f in model.model_fields.items())


def _type_text(t: Any) -> str:
    args = [a for a in typing.get_args(t) if a is not type(None)]
    origin = typing.get_origin(t)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_text(a) for a in args)
    if origin is dict:
        return f"{'rank' if args[0] is int else _type_text(args[0])} → {_type_text(args[1])}"
    if origin is list:
        return f"[{_type_text(args[0])}]"
    if isinstance(t, type) and hasattr(t, "model_fields"):
        return "{" + ", ".join(f"{n}: {_type_text(f.annotation)}" for n, f in t.model_fields.items()) + "}"
    return getattr(t, "__name__", str(t)).replace("typing.", "")


def checks_markdown() -> str:
    from ..knowledge.loader import fixes_for

    lines = ["# Checks", "", "Generated from the check registry (`analysis/checks/`) by "
             "`python -m stepdoctor.tools.gendocs` (`make docs`); do not edit by hand. A check is one module: "
             "its class declares everything in this table; the fixes name the checks they answer.", "",
             "| id | title | fires when | dimension | vendors | needs | thresholds | fixes |",
             "|---|---|---|---|---|---|---|---|"]
    reg = registry()
    for cid, cls in reg.items():
        ths = ", ".join(f"[`{t}`](#{t})" for t in cls.thresholds) or "-"
        fixes = ", ".join(f"[`{f}`](fixes.md#{f})" for f in fixes_for(cid)) or "-"
        lines.append(f'| <a id="{cid}"></a>`{cid}` | {_cell(cls.title)} | {_cell(cls.fires_when)} | '
                     f"{cls.dimension} | {', '.join(cls.vendors)} | {_needs(cls)} | {ths} | "
                     f"{fixes} |")
    lines += ["", "## How each check decides", ""]
    for cid, cls in reg.items():
        lines += [f"- `{cid}`: {_cell(cls.describe())}"]
    lines += ["", "## Evidence", "", "Each check's `Finding.evidence` is the JSON of its evidence model (the check "
              "module's `Evidence` subclass): these keys and no others; `rank →` marks a map keyed by rank "
              "(answers trim those to the ranks that weigh most), `?` a key written only where it applies.", ""]
    for cid, cls in reg.items():
        lines += [f"- `{cid}`: {_cell(evidence_text(cls.evidence))}"]
    users: dict[str, list[str]] = {}
    for cid, cls in reg.items():
        for t in cls.thresholds:
            users.setdefault(t, []).append(cid)
    lines += ["", "## Thresholds", "", "Every threshold lives in `analysis/thresholds.py` with its source.", "",
              "| name | value | unit | meaning | source | checks |", "|---|---|---|---|---|---|"]
    for name, t in all_thresholds().items():
        used = ", ".join(f"[`{c}`](#{c})" for c in users.get(name, [])) or "-"
        lines.append(f'| <a id="{name}"></a>`{name}` | {t.value:g} | {t.unit} | {_cell(t.meaning)} | '
                     f"{_cell(t.source)} | {used} |")
    return "\n".join(lines) + "\n"


CATALOG_BEGIN = "<!-- check catalog: generated from the check registry by `make docs`; do not edit by hand -->"
CATALOG_END = "<!-- end of the generated check catalog -->"


def contract_catalog() -> str:
    """The check catalog table of docs/contract.md: every check id with its class's `fires_when`."""
    lines = [CATALOG_BEGIN, "", "| id | fires when (thresholds: [checks.md](checks.md)) |", "| --- | --- |"]
    lines += [f"| `{cid}` | {_cell(cls.fires_when)} |" for cid, cls in registry().items()]
    return "\n".join([*lines, "", CATALOG_END])


def replace_block(text: str, begin: str, end: str, block: str, where: str) -> str:
    """`text` with the generated block from the `begin` marker to the `end` marker replaced by `block` (which
    starts with `begin` and ends with `end`); ValueError naming `where` when the marker is missing."""
    head, found, rest = text.partition(begin)
    if not found:
        raise ValueError(f"{where} has no {begin!r} marker")
    return head + block + rest.partition(end)[2]


def contract_with_catalog(text: str) -> str:
    """docs/contract.md's text with its generated block replaced by `contract_catalog()`."""
    return replace_block(text, CATALOG_BEGIN, CATALOG_END, contract_catalog(), "docs/contract.md")


README = DOCS.parent / "README.md"
COMMANDS_BEGIN = "<!-- commands: generated from the CLI parser by `make docs`; do not edit by hand -->"
COMMANDS_END = "<!-- end of the generated commands -->"
_COMMON = {"-h", "--help", "--format", "--debug", "--ray"}


def _usage(sub) -> str:
    """A subcommand's own arguments (its positionals, then its options with their metavars)."""
    parts = []
    for act in sub._actions:   # argparse keeps no public list of a parser's arguments
        if not act.option_strings:
            parts.append(act.metavar or act.dest.upper())
        elif not set(act.option_strings) & _COMMON:
            opt = max(act.option_strings, key=len)
            takes = act.nargs != 0 and not isinstance(act.const, bool) and act.__class__.__name__ not in (
                "_StoreTrueAction", "_StoreFalseAction")
            meta = act.metavar or act.dest.upper()
            meta = " ".join(meta) if isinstance(meta, tuple) else meta
            parts.append(f"[{opt} {meta}]" if takes else f"[{opt}]")
    return " ".join(str(p) for p in parts)


def commands_block() -> str:
    """README's command list: every CLI command, its arguments and its help line, from the parser itself."""
    import argparse
    import textwrap

    from .cli import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help or "" for c in sub._choices_actions}
    lines = [COMMANDS_BEGIN, "", "```sh"]
    for name, p in sub.choices.items():
        lines.append(f".venv/bin/stepdoctor {name} {_usage(p)}".rstrip())
        for part in textwrap.wrap(helps.get(name, ""), 100):
            lines.append(f"    # {part}")
    fmt = [n for n, p in sub.choices.items() if any("--format" in a.option_strings for a in p._actions)]
    rest = [n for n in sub.choices if n not in fmt]
    lines += ["```", "", f"`--format table|json|markdown` (the JSON shapes: [docs/contract.md](docs/contract.md)) is "
              f"taken by {', '.join(f'`{n}`' for n in fmt)}" + (f"; not by {', '.join(f'`{n}`' for n in rest)}."
                                                                 if rest else ".")]
    return "\n".join([*lines, "", COMMANDS_END])


def readme_with_commands(text: str) -> str:
    return replace_block(text, COMMANDS_BEGIN, COMMANDS_END, commands_block(), "README.md")


def main() -> int:
    DOCS.mkdir(exist_ok=True)
    README.write_text(readme_with_commands(README.read_text(encoding="utf-8")), encoding="utf-8")
    (DOCS / "checks.md").write_text(checks_markdown(), encoding="utf-8")
    contract = DOCS / "contract.md"
    contract.write_text(contract_with_catalog(contract.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {DOCS / 'checks.md'} and the check catalog of {contract}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
