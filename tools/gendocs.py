"""Generate docs/checks.md from the check registry and the thresholds table.

`python -m stepdoctor.tools.gendocs` rewrites the page; `tests/test_docs.py` fails when it is stale.
"""

from __future__ import annotations

import sys
from pathlib import Path

from ..analysis.checks.base import registry
from ..analysis.thresholds import all_thresholds

DOCS = Path(__file__).resolve().parent.parent / "docs"


def checks_markdown() -> str:
    lines = ["# Checks", "", "Generated from the check registry (`analysis/checks/`) by "
             "`python -m stepdoctor.tools.gendocs`; do not edit by hand.", "",
             "| id | title | vendors | needs | what it detects |", "|---|---|---|---|---|"]
    for cid, cls in registry().items():
        desc = (cls.description or "").replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{cid}` | {cls.title} | {', '.join(cls.vendors)} | {', '.join(cls.needs) or '-'} | {desc} |")
    lines += ["", "## Thresholds", "", "Every threshold lives in `analysis/thresholds.py` with its source.", "",
              "| name | value | unit | meaning | source |", "|---|---|---|---|---|"]
    for name, t in all_thresholds().items():
        lines.append(f"| `{name}` | {t.value:g} | {t.unit} | {t.meaning} | {t.source} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    DOCS.mkdir(exist_ok=True)
    (DOCS / "checks.md").write_text(checks_markdown(), encoding="utf-8")
    print(f"wrote {DOCS / 'checks.md'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
