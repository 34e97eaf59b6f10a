"""Generated docs are fresh; the core stays free of front-end code; every catalog check is implemented."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from conftest import REPO
from stepdoctor.analysis.checks.base import registry
from stepdoctor.tools.gendocs import checks_markdown


def test_checks_page_is_fresh():
    page = (REPO / "docs" / "checks.md").read_text(encoding="utf-8")
    assert page == checks_markdown(), "docs/checks.md is stale: run `make docs`"


def test_analysis_never_imports_front_ends():
    offenders = []
    for path in (REPO / "analysis").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            mods = []
            if isinstance(node, ast.ImportFrom):
                mods = ["." * node.level + (node.module or "")]
            elif isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            for m in mods:
                if re.match(r"^(\.\.+(tools|server|knowledge)\b|stepdoctor\.(tools|server|knowledge)\b)", m):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno} imports {m}")
    assert not offenders, offenders


def test_every_catalog_check_is_registered_once():
    contract = REPO / "docs" / "contract.md"
    text = contract.read_text(encoding="utf-8").split("## Check catalog", 1)[1].split("\n## ", 1)[0]
    ids = set(re.findall(r"^\| `([a-z0-9-]+)` \|", text, re.M))
    assert ids, "no check catalog in docs/contract.md"
    reg = registry()
    assert set(reg) == ids
    for cid, cls in reg.items():
        assert cls.description, f"{cid} has no description for the docs"
        assert cls.dimension in ("compute", "communication", "memory", "free"), f"{cid} declares no dimension"
        mod = Path(__import__(cls.__module__, fromlist=["x"]).__file__).stem
        assert mod == cid.replace("-", "_"), f"{cid} lives in {mod}.py"
