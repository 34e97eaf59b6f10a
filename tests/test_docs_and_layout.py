"""Generated docs are fresh; the core stays free of front-end code; every catalog check is implemented."""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path

import pytest

from conftest import REPO
from stepdoctor.analysis.checks.base import FRAMEWORKS, VENDORS, registry
from stepdoctor.analysis.checks.evidence import Entry, Evidence
from stepdoctor.analysis.thresholds import T, all_thresholds
from stepdoctor.tools.gendocs import checks_markdown, contract_with_catalog, readme_with_commands


def test_checks_page_is_fresh():
    page = (REPO / "docs" / "checks.md").read_text(encoding="utf-8")
    assert page == checks_markdown(), "docs/checks.md is stale: run `make docs`"


def test_contract_check_catalog_is_fresh():
    text = (REPO / "docs" / "contract.md").read_text(encoding="utf-8")
    assert text == contract_with_catalog(text), "docs/contract.md's check catalog is stale: run `make docs`"


def test_readme_command_list_is_fresh():
    """README's command list is the CLI parser's: every command (hang, trigger and snapshot too) with its own
    arguments, and which commands take --format."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert text == readme_with_commands(text), "README.md's command list is stale: run `make docs`"
    for name in ("issues", "whatif", "critical-path", "hang", "trigger", "snapshot", "report"):
        assert f".venv/bin/stepdoctor {name} " in text
    assert "[--no-stalls R] [--op NAME=xF]" in text and "not by `trigger`, `snapshot`, `demo`, `report`" in text


def test_readme_mcp_tool_list_is_fresh():
    from stepdoctor.server.gendocs import readme_with_tools

    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert text == readme_with_tools(text), "README.md's MCP tool list is stale: run `make docs`"
    assert "`diagnose_hang`" in text and "`what_if`" in text


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


def _import_graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (module level, in functions and under TYPE_CHECKING alike)."""
    skip = {".venv", "tests", ".git", "__pycache__"}
    mods: dict[str, Path] = {}
    for path in REPO.rglob("*.py"):
        rel = path.relative_to(REPO)
        if not set(rel.parts) & skip:
            mods[".".join(("stepdoctor", *rel.with_suffix("").parts)).removesuffix(".__init__")] = path
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        pkg = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = ".".join(pkg.split(".")[: len(pkg.split(".")) - node.level + 1]) if node.level else ""
                target = ".".join(x for x in (base, node.module or "") if x)
                targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in mods else target for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                while t not in mods and "." in t:
                    t = t.rsplit(".", 1)[0]
                if t in mods and t != mod:
                    graph[mod].add(t)
    return graph


KNOWN_CIRCLES: list[set[str]] = []


def test_no_import_circles():
    graph = _import_graph()
    reach = {m: _reach(graph, m) for m in graph}
    circles: list[set[str]] = []
    for m in graph:
        if m in reach[m] and (c := {x for x in reach[m] if m in reach[x]} | {m}) not in circles:
            circles.append(c)
    assert [sorted(c) for c in circles if c not in KNOWN_CIRCLES] == []


# The layers, bottom first: a module may import its own layer and those below, never one above. Within a
# layer, packages are peers (knowledge and compare read the checks and below, not each other's answers).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("stepdoctor", "stepdoctor.analysis", "stepdoctor.analysis.timeline", "stepdoctor.analysis.units",
     "stepdoctor.analysis.errors", "stepdoctor.analysis.files", "stepdoctor.analysis.thresholds",
     "stepdoctor.analysis.machine", "stepdoctor.analysis.severity", "stepdoctor.analysis.text",
     "stepdoctor.analysis.models", "stepdoctor.capture"),
    ("stepdoctor.analysis.ingest",),
    ("stepdoctor.analysis.store",),
    ("stepdoctor.analysis.build",),
    ("stepdoctor.analysis.metrics", "stepdoctor.analysis.hang"),
    ("stepdoctor.analysis.replay",),
    ("stepdoctor.analysis.checks",),
    ("stepdoctor.analysis.compare", "stepdoctor.knowledge"),
    ("stepdoctor.tools",),
    ("stepdoctor.server",),
    ("stepdoctor.main", "stepdoctor.__main__", "stepdoctor.evals"),
)


def _layer(mod: str) -> int:
    """The layer of a module: that of the longest layer prefix naming it."""
    best, level = -1, -1
    for i, names in enumerate(LAYERS):
        for n in names:
            if (mod == n or mod.startswith(n + ".")) and len(n) > best:
                best, level = len(n), i
    assert level >= 0, f"{mod} is in no layer: add its package to LAYERS"
    return level


def test_layers_read_downward_only():
    graph = _import_graph()
    up = sorted(f"{m} (layer {_layer(m)}) imports {t} (layer {_layer(t)})"
                for m, ts in graph.items() for t in ts if _layer(t) > _layer(m))
    assert up == []


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), list(graph[start])
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo += graph[m]
    return seen


def test_every_catalog_check_is_registered_once():
    contract = REPO / "docs" / "contract.md"
    text = contract.read_text(encoding="utf-8").split("## Check catalog", 1)[1].split("\n## ", 1)[0]
    ids = set(re.findall(r"^\| `([a-z0-9-]+)` \|", text, re.M))
    assert ids, "no check catalog in docs/contract.md"
    assert set(registry()) == ids


@pytest.mark.parametrize("cid", sorted(registry()))
def test_check_class_declares_its_metadata(cid):
    """The class is the only record of a check: a missing or unknown attribute fails here."""
    cls = registry()[cid]
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", cid)
    assert cls.title and cls.fires_when and cls.description, f"{cid}: title, fires_when, description"
    assert cls.dimension in ("compute", "communication", "memory", "free"), f"{cid} declares no dimension"
    assert cls.vendors and set(cls.vendors) <= {*VENDORS, "mtia"}, cid
    assert set(cls.frameworks) <= set(FRAMEWORKS), cid
    assert set(cls.needs_by_vendor) <= set(cls.vendors), cid
    table = all_thresholds()
    assert set(cls.thresholds) <= set(table), f"{cid} names unknown thresholds"
    path = Path(sys.modules[cls.__module__].__file__ or "")
    assert path.stem == cid.replace("-", "_"), f"{cid} lives in {path.stem}.py"
    used = set(re.findall(r"\bT\.([a-z_0-9]+)", path.read_text(encoding="utf-8")))
    assert used <= set(cls.thresholds), f"{cid}: add {sorted(used - set(cls.thresholds))} to `thresholds`"


_MD_REF = re.compile(r"[\w./-]*\w\.md\b")
_SECTION_REF = re.compile(r"docs/(formats|rules)\.md((?:,?\s*§\s*[\d.]*\d)+)")
_HEADING = re.compile(r"^#+\s+(\d+(?:\.\d+)*)\.?\s", re.M)


def _comment_and_string_texts(path: Path) -> list[str]:
    """Comment and string-literal text of a module (code names such as `self.md` are not citations)."""
    import tokenize

    kinds = {tokenize.COMMENT, tokenize.STRING}
    if hasattr(tokenize, "FSTRING_MIDDLE"):
        kinds.add(tokenize.FSTRING_MIDDLE)
    with open(path, encoding="utf-8") as fh:
        return [t.string for t in tokenize.generate_tokens(fh.readline) if t.type in kinds]


def test_product_code_cites_only_docs_in_the_repo():
    headings = {name: set(_HEADING.findall((REPO / "docs" / f"{name}.md").read_text(encoding="utf-8")))
                for name in ("formats", "rules")}
    missing, bad_sections, scanned = [], [], 0
    for top in ("analysis", "tools", "server", "knowledge", "capture"):
        for path in (REPO / top).rglob("*.py"):
            scanned += 1
            where = path.relative_to(REPO)
            for text in _comment_and_string_texts(path):
                for ref in _MD_REF.findall(text):
                    rel = ref.lstrip("./")
                    if not any((base / rel).is_file() for base in (REPO, REPO / "docs")):
                        missing.append(f"{where}: {ref}")
                for doc, secs in _SECTION_REF.findall(text.replace("\n", " ")):
                    for sec in re.findall(r"§\s*([\d.]*\d)", secs):
                        if sec not in headings[doc]:
                            bad_sections.append(f"{where}: docs/{doc}.md §{sec}")
    assert scanned > 100
    assert not missing, f"product code cites .md files that are not in the repo: {missing}"
    assert not bad_sections, f"citations of sections that docs/formats.md / docs/rules.md do not have: {bad_sections}"


def test_fixes_are_chosen_in_the_knowledge_base_only():
    """A check states facts in its evidence; the fix YAML's `checks` / `when` / `lead_for` choose the fixes
    (knowledge.loader.fixes_for). No check module sets a finding's fixes, names a fix id, or reaches into
    another check's private members."""
    from stepdoctor.knowledge.loader import load_fixes

    ids = set(load_fixes())
    home = {cls.__name__: sys.modules[cls.__module__].__file__ for cls in registry().values()}
    for f in sorted((REPO / "analysis" / "checks").glob("*.py")):
        if f.name == "base.py":
            continue
        tree = ast.parse(f.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "fixes" and isinstance(node.ctx, ast.Store):
                raise AssertionError(f"{f.name}:{node.lineno} sets a finding's fixes")
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ids:
                raise AssertionError(f"{f.name}:{node.lineno} names the fix {node.value!r}")
            if (isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
                    and isinstance(node.value, ast.Name) and node.value.id in home
                    and Path(home[node.value.id]).name != f.name):
                raise AssertionError(f"{f.name}:{node.lineno} calls {node.value.id}.{node.attr}")


def _shape_names(node: ast.expr) -> list[str] | None:
    """The shape names a `shape=` argument can take: a literal, or literals chosen by `a if c else b`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        body, orelse = _shape_names(node.body), _shape_names(node.orelse)
        return None if body is None or orelse is None else body + orelse
    return None


def _checks_by_module() -> dict[str, list[type]]:
    """Module file name -> the checks it builds findings for: a check's own module and the private helpers
    (`_x.py`) it imports."""
    out: dict[str, list[type]] = {}
    for cls in registry().values():
        path = Path(sys.modules[cls.__module__].__file__ or "")
        out.setdefault(path.name, []).append(cls)
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1 and (node.module or "").startswith("_"):
                out.setdefault(f"{node.module}.py", []).append(cls)
    return out


def test_a_finding_says_what_its_check_templates_say():
    """A finding's title and message are its check's declared templates (`title_template` / `message_template`,
    or the `templates` entry of the `shape` it names), so each check's sentences are written, and read, in one
    place: no `finding(` call passes `title=` / `message=`, every shape it names is declared, a call without a
    shape has the plain templates to render, and no declared shape is left unused."""
    owners = _checks_by_module()
    problems: list[str] = []
    used: dict[str, set[str]] = {}
    for f in sorted((REPO / "analysis" / "checks").glob("*.py")):
        if f.name == "base.py":
            continue
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "finding"):
                continue
            where, kw = f"{f.name}:{node.lineno}", {k.arg: k.value for k in node.keywords}
            checks = owners.get(f.name, [])
            if {"title", "message"} & set(kw):
                problems.append(f"{where} passes {sorted({'title', 'message'} & set(kw))}: declare templates")
                continue
            if not checks:
                problems.append(f"{where} builds a finding for no check that imports its module")
            if "shape" not in kw:
                problems += [f"{where}: {c.id} has no title_template / message_template" for c in checks
                             if not (c.title_template and c.message_template)]
                continue
            shapes = _shape_names(kw["shape"])
            if shapes is None:
                problems.append(f"{where}: shape= is no literal (nor a choice between literals)")
                continue
            for c in checks:
                used.setdefault(c.id, set()).update(shapes)
                problems += [f"{where}: {c.id} declares no shape {s!r}" for s in shapes if s not in c.templates]
    for cid, cls in sorted(registry().items()):
        problems += [f"{cid}: shape {s!r} is declared and never used" for s in sorted(set(cls.templates) -
                                                                                      used.get(cid, set()))]
        problems += [f"{cid}: shape {s!r} has an empty template" for s, pair in cls.templates.items()
                     if len(pair) != 2 or not all(pair)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("cid", sorted(registry()))
def test_a_description_names_its_thresholds_and_writes_no_value(cid):
    """A threshold's value lives in analysis/thresholds.py only: a check's description names it as
    `{threshold}` (filled by Check.describe, which the docs and `explain` print), never as a number."""
    cls = registry()[cid]
    text = cls.describe()   # every placeholder is one of the check's thresholds
    prose = re.sub(r"\{[^}]*\}", "", cls.description)
    numbers = set(re.findall(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.]\d)", prose))
    for name in cls.thresholds:
        v = getattr(T, name).value
        written = {f"{v:g}", f"{v * 100:g}"} if v < 1 else {f"{v:g}"}
        assert not numbers & written, f"{cid}: {sorted(numbers & written)} is {name}: write {{{name}}}"
    assert "{" not in text


@pytest.mark.parametrize("cid", sorted(registry()))
def test_a_check_declares_its_evidence_as_one_typed_record(cid):
    """A finding's evidence is its check's own Evidence model (in the check's module): its rank maps are the
    fields typed dict[int, ...], each entry model says what weighs it, and every golden answer's evidence is
    exactly that model's JSON (validated and written back, key for key)."""
    from checkrun import GOLDEN, rounded

    cls = registry()[cid]
    model = cls.evidence
    assert issubclass(model, Evidence) and model is not Evidence, f"{cid}: no evidence model"
    assert model.__module__ == cls.__module__, f"{cid}: its evidence model lives in {model.__module__}"
    maps = model.rank_maps()
    assert model.primary is None or model.primary in maps, f"{cid}: primary {model.primary} is no rank map"
    for name, entries in maps.items():
        for entry in entries:
            assert issubclass(entry, Entry) and entry.weighs_by in entry.model_fields, \
                f"{cid}: the {entry.__name__} entries of {name} say nothing of what weighs them (weighs_by)"
    goldens = sorted((GOLDEN / cid).glob("*.json"))
    assert goldens
    for path in goldens:
        for f in json.loads(path.read_text(encoding="utf-8")):
            assert rounded(model.model_validate(f["evidence"]).dump()) == f["evidence"], path.name


def test_every_check_has_its_test_file():
    have = {p.stem.removeprefix("test_").replace("_", "-") for p in (REPO / "tests" / "checks").glob("test_*.py")}
    missing = sorted(set(registry()) - have)
    assert not missing, f"checks without tests/checks/test_<id>.py: {missing}"
    stray = sorted(have - set(registry()))
    assert not stray, f"tests/checks/test_<id>.py of no registered check: {stray}"
    golden = REPO / "tests" / "checks" / "golden"
    without = sorted(c for c in have if not list((golden / c).glob("*.json")))
    assert not without, f"checks whose test file compares no golden answer (tests/checks/golden/<id>/): {without}"


def test_every_package_folder_is_installed():
    """A wheel holds the packages pyproject lists, not the folders on disk: a package missing from the list
    works in the editable install of `make test` and is absent from a real one."""
    import tomllib

    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]["packages"])
    skip = {".venv", "tests", ".git", "__pycache__"}
    on_disk = {".".join(("stepdoctor", *p.parent.relative_to(REPO).parts)) for p in REPO.rglob("__init__.py")
               if not set(p.relative_to(REPO).parts) & skip}
    assert on_disk - listed == set()
    assert listed - on_disk == set()


def test_a_format_name_is_written_only_in_its_registry():
    """`analysis/ingest/formats.py` is the one place a format's name is spelled: elsewhere code reads the
    registry (a literal `"kineto"` or an `f"ascend_{fw}_text"` would be a second, silent definition)."""
    from stepdoctor.analysis.ingest.formats import FORMATS

    home = REPO / "analysis" / "ingest" / "formats.py"
    skip = {".venv", "tests", ".git", "__pycache__", "evals"}
    written = []
    for path in REPO.rglob("*.py"):
        if set(path.relative_to(REPO).parts) & skip or path == home:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            pieces = [node] if isinstance(node, ast.Constant) else []
            if isinstance(node, ast.JoinedStr):  # f"ascend_{fw}_text": the name built from its parts
                pieces = [v for v in node.values if isinstance(v, ast.Constant)]
                if any(str(v.value).endswith("ascend_") for v in pieces):
                    written.append(f"{path.relative_to(REPO)}:{node.lineno}")
                continue
            if any(isinstance(v.value, str) and v.value in FORMATS for v in pieces):
                written.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert written == []


def test_every_registered_format_has_its_reader():
    from stepdoctor.analysis.ingest.formats import FORMATS, ascend_export, export_kind, is_ascend

    for fmt in FORMATS.values():
        assert callable(fmt.read_rank()), fmt.name
        assert is_ascend(fmt.name) == (fmt.vendor == "ascend")
    assert sorted(f.name for f in FORMATS.values() if f.streams) == ["ascend_ms_text", "ascend_pt_text"]
    for framework in ("pytorch", "mindspore"):
        for kind in ("text", "db"):
            name = ascend_export(framework, kind)
            assert (FORMATS[name].framework, export_kind(name)) == (framework, kind)
    assert export_kind("kineto") is None and is_ascend(None) and not is_ascend("kineto")
