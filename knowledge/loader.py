"""Load the knowledge base (`knowledge/fixes/*.yaml`) and look fixes up for findings.

`load_fixes()` reads every YAML file shipped as package data, validates it against `schema.Fix` (the id must
equal the file stem) and caches the result for the life of the process. `fixes_for()` answers "which fixes
apply to this finding", most specific first; `get_fix()` fetches one fix by id with a helpful error.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass
from importlib import resources
from importlib.resources.abc import Traversable

import yaml
from pydantic import ValidationError

from .schema import Fix, check_catalog

# libyaml's C loader when PyYAML was built with it (several times faster; every `stepdoctor issues` loads
# the fixes on its first finding). Same safe subset of YAML either way.
_SafeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

__all__ = ["FixLoadError", "fixes_dir", "fixes_for", "get_fix", "load_fixes", "subject_matches"]


class FixLoadError(ValueError):
    """A fix file is not valid YAML or does not match the schema; the message names the file."""


def fixes_dir() -> Traversable:
    """The package-data folder holding one YAML file per fix (works from a wheel or an editable install)."""
    return resources.files(__package__).joinpath("fixes")


def _load_one(entry: Traversable) -> Fix:
    stem = entry.name.removesuffix(".yaml")
    try:
        data = yaml.load(entry.read_text(encoding="utf-8"), Loader=_SafeLoader)
    except yaml.YAMLError as exc:
        raise FixLoadError(f"{entry.name}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise FixLoadError(f"{entry.name}: expected a mapping at the top level, got {type(data).__name__}")
    try:
        return Fix.model_validate(data, context={"file_stem": stem})
    except ValidationError as exc:
        raise FixLoadError(f"{entry.name}: {exc}") from None


@functools.cache
def _load_cached() -> dict[str, Fix]:
    entries = sorted((e for e in fixes_dir().iterdir() if e.name.endswith(".yaml")), key=lambda e: e.name)
    fixes = {}
    for entry in entries:
        fix = _load_one(entry)
        fixes[fix.id] = fix
    return fixes


def load_fixes() -> dict[str, Fix]:
    """All fixes by id, sorted by id. Validated once per process; each call returns a fresh dict (the
    `Fix` objects are immutable) so a caller cannot change the cache by editing the mapping."""
    return dict(_load_cached())


def get_fix(fix_id: str) -> Fix:
    """The fix with this id; `KeyError` naming the closest ids when there is none."""
    fixes = _load_cached()
    try:
        return fixes[fix_id]
    except KeyError:
        close = difflib.get_close_matches(fix_id, list(fixes), n=5, cutoff=0.5)
        # Also offer ids that share a word with the request ("gc" -> gc-freeze-..., gc-disable-...).
        words = {w for w in fix_id.lower().replace("_", "-").split("-") if len(w) > 1}
        close += [i for i in fixes if i not in close and words & set(i.split("-"))][: max(0, 5 - len(close))]
        hint = f"; did you mean: {', '.join(close)}" if close else "; run `stepdoctor fixes` to list them"
        raise KeyError(f"unknown fix id {fix_id!r}{hint}") from None


def _norm(text: str) -> str:
    return text.strip().lower()


def subject_matches(fix: Fix, subject: str | None) -> bool:
    """Whether a Finding.subject names this fix specifically.

    Case-insensitive. A dotted API name also matches on its last component in either direction, so the
    subject `torch_npu.fast_gelu` matches `fast_gelu` and `NpuFusedAdamW` matches
    `torch_npu.optim.NpuFusedAdamW`; `torch_npu.npu_swiglu` does not match `torch_npu.npu_geglu`.
    """
    if not subject:
        return False
    wanted = _norm(subject)
    wanted_last = wanted.rsplit(".", 1)[-1]
    for candidate in fix.all_subjects():
        have = _norm(candidate)
        if wanted == have or wanted == have.rsplit(".", 1)[-1] or wanted_last == have:
            return True
        if "." in wanted and "." in have and wanted_last == have.rsplit(".", 1)[-1]:
            return True
    return False


def _specificity(fix: Fix, vendor: str | None, framework: str | None) -> int:
    """2 points for naming the vendor, 1 for naming the framework (versus `any`)."""
    score = 0
    if vendor is not None and vendor in fix.applies_to.vendor:
        score += 2
    if framework is not None and framework in fix.applies_to.framework:
        score += 1
    return score


def fixes_for(
    check: str, vendor: str | None = None, framework: str | None = None, subject: str | None = None,
    evidence: dict | None = None,
) -> list[str]:
    """Ids of the fixes that answer `check` on `vendor` / `framework`, most specific first.

    Algorithm: keep fixes whose `checks` contain `check`, whose `when` conditions for it hold on the finding's
    `evidence` (None: not known, no condition applies) and whose `applies_to` matches vendor and framework
    (None = no filter, `any` in a fix matches everything). For checks whose subject names the remedy exactly
    (`env-var`: the variable; `affinity-api`: the replacement API), a given subject keeps only the fixes that
    name it — a fix for another variable would be a wrong answer — so the result can be empty. Otherwise the
    order is: the fixes that lead for this check (`lead_for`: the fix of the cause the evidence names), then
    subject match, then first-line remedies (`primary_for` contains the check), then fixes
    written for this vendor / framework before generic ones, then fixes that list `check` earlier in their
    `checks`, then id for a stable order.
    """
    checks = check_catalog()
    if check not in checks:
        raise KeyError(f"unknown check id {check!r}; known: {', '.join(sorted(checks))}")
    candidates = [
        f for f in _load_cached().values() if f.answers(check, evidence) and f.applies_to.matches(vendor, framework)
    ]
    if subject and checks[check].subject_keyed:
        candidates = [f for f in candidates if subject_matches(f, subject)]
    candidates.sort(
        key=lambda f: (
            not (evidence is not None and check in f.lead_for),
            not subject_matches(f, subject),
            check not in f.primary_for,
            -_specificity(f, vendor, framework),
            f.checks.index(check),
            f.id,
        )
    )
    return [f.id for f in candidates]


@dataclass(frozen=True)
class JobFacts:
    """What a profile says of its job that decides whether a fix can apply there (`applies_here`).
    backends: the distributed backends the job uses (empty: one process, none; None: not known). env: the
    recorded environment, variable -> the values seen across ranks (None: unset on some rank), or None where
    the profile records no environment; a variable it does not list is not known (torch_npu records a fixed
    list)."""

    backends: frozenset[str] | None = None
    env: dict[str, frozenset[str | None]] | None = None


def applies_here(fix: Fix, facts: JobFacts) -> bool:
    """False where the job shows the fix cannot help: it is about a backend the job does not use, or it only
    sets environment variables that every rank already has as the fix wants them (recorded, so known)."""
    want = fix.applies_to.backends
    if want and facts.backends is not None and not set(want) & facts.backends:
        return False
    only_env = fix.env and fix.code_edit and all(e.kind == "env" for e in fix.code_edit)
    if only_env and facts.env is not None and all(v.name in facts.env for v in fix.env):
        return any(not v.satisfied_by(cur) for v in fix.env for cur in facts.env[v.name])
    return True   # a variable the profile does not record may be set: the fix may apply
