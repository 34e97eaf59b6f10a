"""Pydantic schema of one knowledge-base fix (one YAML file in `knowledge/fixes/`).

Every model forbids extra fields so a typo in a YAML key fails at load time instead of being ignored.
Validation is strict about the things other parts of stepdoctor rely on: the id is kebab-case and
equals the file stem, every check id is a registered check class (`analysis/checks/`), every `verify` entry
names a stepdoctor command, and every code-edit template renders to Python that parses once its
`${param}` placeholders are filled with their defaults.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from ..analysis.checks.base import Check, registry
from .edit.kinds import CodeEdit
from .edit.kinds.base import EnvVar, Framework
from .edit.kinds.base import Strict as _Strict

Vendor = Literal["ascend", "cuda", "rocm", "any"]


# `verify` entries start with one of these stepdoctor commands (docs/contract.md).
VERIFY_COMMANDS: tuple[str, ...] = ("issues", "breakdown", "slow-ranks", "slow-links", "kernels", "env", "compare",
                                    "whatif", "critical-path")

KEBAB_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
# A sentence ends with . ! or ? followed by whitespace; e.g. / i.e. / etc. / vs. do not end one.
_SENTENCE_END_RE = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)[.!?](?=\s+\S)")

EvidenceValue = bool | int | float | str


@functools.cache
def check_catalog() -> dict[str, type[Check]]:
    """The check classes by id (the registry is complete once every check module is imported)."""
    return registry()


def count_sentences(text: str) -> int:
    """Count sentences with the `_SENTENCE_END_RE` heuristic (the last sentence needs no follower)."""
    text = " ".join(text.split())
    if not text:
        return 0
    return len(_SENTENCE_END_RE.findall(text)) + 1


class AppliesTo(_Strict):
    """Where a fix applies. `any` matches every vendor / framework."""

    vendor: list[Vendor] = Field(min_length=1)
    framework: list[Framework] = Field(min_length=1)
    versions: str | None = Field(
        default=None, description="version constraints in words, e.g. 'torch_npu >= 2.1'"
    )
    backends: list[Literal["nccl", "rccl", "hccl", "gloo"]] | None = Field(
        default=None, description="the distributed backends the fix is about (an NCCL setting means nothing to a "
        "single-GPU or gloo run); none: any job"
    )

    def matches(self, vendor: str | None, framework: str | None) -> bool:
        """True when the fix applies to `vendor` and `framework` (None = do not filter on it)."""
        ok_vendor = vendor is None or "any" in self.vendor or vendor in self.vendor
        ok_framework = framework is None or "any" in self.framework or framework in self.framework
        return ok_vendor and ok_framework


class ExpectedGain(_Strict):
    text: str = Field(min_length=5)
    source: str | None = Field(default=None, description="URL or document name the number comes from")


class Reference(_Strict):
    title: str = Field(min_length=3)
    url: str | None = None

    @field_validator("url")
    @classmethod
    def _https(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("https://"):
            raise ValueError(f"reference URLs must be https: {value!r}")
        return value


class Fix(_Strict):
    """One fix: what to change, why it helps, how to check it helped."""

    id: str
    title: str = Field(min_length=5)
    applies_to: AppliesTo
    checks: list[str] = Field(
        min_length=1, description="check ids (the check registry; docs/checks.md) this fix answers"
    )
    primary_for: list[str] = Field(
        default_factory=list,
        description="checks (among `checks`) for which this fix is a first-line remedy; "
        "lookups list those fixes first",
    )
    subjects: list[str] = Field(
        default_factory=list,
        description="Finding.subject values this fix answers most specifically (op types, replacement APIs, "
        "dimensions); env var names in `env` count automatically",
    )
    when: dict[str, dict[str, EvidenceValue | list[EvidenceValue]]] = Field(
        default_factory=dict,
        description="check id -> conditions on its finding's evidence that must all hold for this fix to answer "
        "the finding: `key: value` (equal) or `key: [values]` (one of them); a check not named here has none",
    )
    lead_for: list[str] = Field(
        default_factory=list,
        description="checks (each with a `when`) whose finding this fix leads when its conditions hold: the fix "
        "of the cause the finding names, before the check's general fixes",
    )
    why: str = Field(description="the mechanism, 2-5 sentences")
    steps: list[str] = Field(min_length=1)
    code_edit: list[CodeEdit] = Field(default_factory=list)
    env: list[EnvVar] = Field(default_factory=list)
    expected_gain: ExpectedGain
    verify: list[str] = Field(min_length=1, description="stepdoctor command + metric to re-measure")
    risks: list[str] = Field(min_length=1)
    references: list[Reference] = Field(min_length=1)

    @field_validator("id")
    @classmethod
    def _id(cls, value: str, info: ValidationInfo) -> str:
        if not KEBAB_RE.match(value):
            raise ValueError(f"fix id must be kebab-case: {value!r}")
        stem = (info.context or {}).get("file_stem")
        if stem is not None and stem != value:
            raise ValueError(f"fix id {value!r} must equal the file name stem {stem!r}")
        return value

    @field_validator("checks")
    @classmethod
    def _checks(cls, values: list[str]) -> list[str]:
        known = check_catalog()
        unknown = [v for v in values if v not in known]
        if unknown:
            raise ValueError(f"unknown check ids {unknown}; known: {sorted(known)}")
        if len(set(values)) != len(values):
            raise ValueError("duplicate check ids")
        return values

    @field_validator("why")
    @classmethod
    def _why(cls, value: str) -> str:
        n = count_sentences(value)
        if not 2 <= n <= 5:
            raise ValueError(f"`why` must be 2-5 sentences, found {n}")
        return " ".join(value.split())

    @field_validator("verify")
    @classmethod
    def _verify(cls, values: list[str]) -> list[str]:
        for value in values:
            command = value.split()[0] if value.split() else ""
            if command not in VERIFY_COMMANDS:
                raise ValueError(
                    f"verify entry must start with a stepdoctor command {VERIFY_COMMANDS}: {value!r}"
                )
            match = re.search(r"--check\s+(\S+)", value)
            if match and match.group(1) not in check_catalog():
                raise ValueError(f"verify names an unknown check: {match.group(1)!r}")
        return values

    @model_validator(mode="after")
    def _consistent(self) -> Fix:
        if not set(self.primary_for) <= set(self.checks):
            raise ValueError(
                f"primary_for must be a subset of checks: {sorted(set(self.primary_for) - set(self.checks))}"
            )
        if not set(self.when) <= set(self.checks):
            raise ValueError(f"`when` names checks this fix does not answer: {sorted(set(self.when) - set(self.checks))}")
        if not set(self.lead_for) <= set(self.when):
            raise ValueError(f"lead_for needs a `when` for each check (else it is primary_for): "
                             f"{sorted(set(self.lead_for) - set(self.when))}")
        if "affinity-api" in self.checks and not self.subjects:
            raise ValueError("a fix for affinity-api must list the replacement API names in `subjects`")
        if "env-var" in self.checks and not self.env:
            raise ValueError("a fix for env-var must list the variables in `env`")
        if any(e.kind == "env" for e in self.code_edit) and not self.env:
            raise ValueError("an `env` code edit needs `env` entries")
        frameworks = set(self.applies_to.framework)
        for edit in self.code_edit:
            if edit.framework != "any" and "any" not in frameworks and edit.framework not in frameworks:
                raise ValueError(f"code_edit framework {edit.framework!r} is outside applies_to.framework")
        names = [e.name for e in self.env]
        if len(set(names)) != len(names):
            raise ValueError("duplicate env names")
        return self

    def answers(self, check: str, evidence: dict[str, Any] | None) -> bool:
        """Whether this fix answers `check`'s finding with `evidence` (`when`; None: not known, every fix of
        the check answers)."""
        if check not in self.checks:
            return False
        if evidence is None:
            return True
        return all(_holds(evidence.get(k), v) for k, v in self.when.get(check, {}).items())

    def all_subjects(self) -> list[str]:
        """`subjects` plus the env var names: everything a Finding.subject can match exactly."""
        return [*self.subjects, *(e.name for e in self.env)]


def _holds(value: Any, want: Any) -> bool:
    """A `when` condition: the evidence value equals `want`, or one of the values of a list."""
    return value in want if isinstance(want, list) else value == want
