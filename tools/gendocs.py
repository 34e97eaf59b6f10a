"""Generate docs/checks.md from the check registry, the thresholds table and the knowledge base.

`python -m stepdoctor.tools.gendocs` (or `make docs`) rewrites the page; `tests/test_docs_and_layout.py`
fails when it is stale. Every column comes from a check class attribute, so the catalog has one source.
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


def main() -> int:
    DOCS.mkdir(exist_ok=True)
    (DOCS / "checks.md").write_text(checks_markdown(), encoding="utf-8")
    print(f"wrote {DOCS / 'checks.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
