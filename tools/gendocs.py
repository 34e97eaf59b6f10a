"""Generate docs/checks.md and the check catalog of docs/contract.md from the check registry, the
thresholds table and the knowledge base.

`python -m stepdoctor.tools.gendocs` (or `make docs`) rewrites both; `tests/test_docs_and_layout.py` fails
when either is stale. Every column comes from a check class attribute, so adding a check is its module
(plus its tests and fix files) and `make docs`.
"""

from __future__ import annotations

import sys
from pathlib import Path

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
        lines += [f"- `{cid}`: {_cell(cls.description)}"]
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


def contract_with_catalog(text: str) -> str:
    """docs/contract.md's text with its generated block replaced by `contract_catalog()`."""
    head, found, rest = text.partition(CATALOG_BEGIN)
    if not found:
        raise ValueError(f"docs/contract.md has no {CATALOG_BEGIN!r} marker")
    return head + contract_catalog() + rest.partition(CATALOG_END)[2]


def main() -> int:
    DOCS.mkdir(exist_ok=True)
    (DOCS / "checks.md").write_text(checks_markdown(), encoding="utf-8")
    contract = DOCS / "contract.md"
    contract.write_text(contract_with_catalog(contract.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {DOCS / 'checks.md'} and the check catalog of {contract}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
