"""Pydantic schema of one knowledge-base fix (one YAML file in `knowledge/fixes/`).

Every model forbids extra fields so a typo in a YAML key fails at load time instead of being ignored.
Validation is strict about the things other parts of stepdoctor rely on: the id is kebab-case and
equals the file stem, every check id is a registered check class (`analysis/checks/`), every `verify` entry
names a stepdoctor command, and every code-edit template renders to Python that parses once its
`${param}` placeholders are filled with their defaults.
"""

from __future__ import annotations

import ast
import functools
import re
import string
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from ..analysis.checks.base import Check, registry

Vendor = Literal["ascend", "cuda", "rocm", "any"]
Framework = Literal["pytorch", "mindspore", "any"]

# The edit kinds the package `knowledge/edit/` implements; `template` means "show before/after, edit by hand".
EditKind = Literal[
    "add_kwargs",  # add / adjust keyword arguments of matching calls
    "replace_callee",  # swap the called function (e.g. torch.optim.AdamW -> torch_npu.optim.NpuFusedAdamW)
    "unwrap_call",  # replace `wrapper(x)` by `x` (e.g. convert_sync_batchnorm(model) -> model)
    "remove_call",  # delete call statements inside loops (e.g. torch.cuda.empty_cache())
    "insert_before_loop",  # insert statements before the outermost training loop
    "insert_after_import",  # insert statements right after `import <module>`
    "env",  # set / unset the fix's `env` variables in shell scripts and os.environ
    "remove_sync_guard",  # delete per-step `if not <tensor check>: raise` / `assert <tensor check>` (a sync)
    "unwrap_with",  # replace `with ctx(...):` by its body (e.g. a forced SDPA math backend)
    "set_attribute",  # set `a.b.c = value` where the file assigns another literal (e.g. allow_tf32 = False)
    "periodic_in_loop",  # statements before the training loop + `if step % every == 0:` ones at its end
    "template",  # no automatic edit
]
EDIT_KINDS: tuple[str, ...] = get_args(EditKind)

# `verify` entries start with one of these stepdoctor commands (docs/contract.md).
VERIFY_COMMANDS: tuple[str, ...] = ("issues", "breakdown", "slow-ranks", "slow-links", "kernels", "env", "compare")

KEBAB_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
QUALNAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")
# A sentence ends with . ! or ? followed by whitespace; e.g. / i.e. / etc. / vs. do not end one.
_SENTENCE_END_RE = re.compile(r"(?<!\be\.g)(?<!\bi\.e)(?<!\betc)(?<!\bvs)[.!?](?=\s+\S)")

ParamValue = int | float | bool | str | list[Any] | dict[str, Any] | None
EvidenceValue = bool | int | float | str


@functools.cache
def check_catalog() -> dict[str, type[Check]]:
    """The check classes by id (the registry is complete once every check module is imported)."""
    return registry()


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def placeholders(template: str) -> set[str]:
    """The `${name}` / `$name` placeholders of a string.Template source."""
    names: set[str] = set()
    for match in string.Template.pattern.finditer(template):
        name = match.group("named") or match.group("braced")
        if name:
            names.add(name)
    return names


def render_template(template: str, params: dict[str, Any]) -> str:
    """Fill `${name}` placeholders with Python literals (`repr`), so a parameter can never inject code."""
    return string.Template(template).substitute({k: repr(v) for k, v in params.items()})


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


class KwargSpec(_Strict):
    """One keyword argument an `add_kwargs` / `replace_callee` edit ensures on a call.

    Decision for an existing keyword whose value is a literal: kept when it satisfies `ok_min` /
    `ok_values` (or equals the rendered `value` when neither is given), replaced otherwise. A value that
    is not a literal (a variable, an expression) is kept and reported, since its runtime value is unknown.
    When the caller passes the parameter the value refers to, the caller's number wins (replace if it
    differs): a finding that computed `num_parallel_workers=12` means 12.
    """

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    value: str = Field(description="Python expression source; `${param}` placeholders allowed")
    ok_min: float | None = Field(default=None, description="an existing numeric literal >= this is kept")
    ok_values: list[Any] | None = Field(default=None, description="existing literal values that are kept")
    keep_existing: bool = Field(default=False, description="any existing value is kept (user-tuned)")
    only_if_positive: str | None = Field(
        default=None, description="add only when this other keyword is a positive int literal after the edit"
    )
    only_if_changed: str | None = Field(
        default=None,
        description="add only when the same edit adds or changes this other keyword (listed before it)",
    )


class Locate(_Strict):
    """What the AST matcher looks for. `description` says it in words for people and docs."""

    description: str = Field(min_length=10)
    calls: list[str] = Field(
        default_factory=list, description="fully qualified callee names (aliases resolved)"
    )
    methods: list[str] = Field(default_factory=list, description="method names on any receiver, e.g. `map`")
    require_imports_any: list[str] = Field(
        default_factory=list, description="the module must import one of these top-level packages"
    )
    min_args: int = Field(default=0, ge=0, description="method calls need at least this many arguments")
    in_loop: bool = Field(default=False, description="only calls inside a for / while body")
    skip_first_arg: list[str] = Field(
        default_factory=list, description="skip calls whose first argument is one of these string literals"
    )
    skip_receivers: list[str] = Field(
        default_factory=list, description="skip method calls whose receiver name contains one of these words"
    )
    after_import: str | None = Field(default=None, description="insert_after_import: the anchor module")
    present_if_calls: list[str] = Field(
        default_factory=list, description="qualified calls whose presence means the fix is already in place"
    )
    attributes: list[str] = Field(
        default_factory=list, description="set_attribute: dotted assignment targets (aliases resolved)"
    )
    arg_names: list[str] = Field(
        default_factory=list, description="unwrap_with: only contexts whose arguments name one of these"
    )
    kwarg_equals: dict[str, ParamValue] = Field(
        default_factory=dict, description="add_kwargs: only calls whose keyword has this literal value"
    )

    @field_validator("calls", "present_if_calls")
    @classmethod
    def _qualnames(cls, values: list[str]) -> list[str]:
        for value in values:
            if not QUALNAME_RE.match(value):
                raise ValueError(f"not a dotted Python name: {value!r}")
        return values


class CodeEdit(_Strict):
    """One code change, for one framework, as before/after templates plus what the editor needs."""

    framework: Framework
    kind: EditKind
    before: str = Field(min_length=1, description="code as it typically looks before the fix")
    after: str = Field(min_length=1, description="the same code after the fix")
    locate: Locate
    kwargs: list[KwargSpec] = Field(default_factory=list)
    remove_kwargs: list[str] = Field(
        default_factory=list, description="keywords dropped when the call changes"
    )
    replacements: dict[str, str] = Field(default_factory=dict, description="replace_callee: old -> new name")
    statements: list[str] = Field(default_factory=list, description="insert kinds: Python statements")
    comment: str | None = Field(default=None, description="comment line placed above inserted statements")
    imports: list[str] = Field(
        default_factory=list, description="modules to import when the edit changes code"
    )
    params: dict[str, ParamValue] = Field(default_factory=dict, description="defaults for ${placeholders}")
    requires_params: list[str] = Field(
        default_factory=list, description="skip unless the caller passes these"
    )
    unless_params: list[str] = Field(default_factory=list, description="skip when the caller passes these")
    satisfied_by_kwargs: list[str] = Field(
        default_factory=list, description="a matching call carrying one of these keywords is already fixed"
    )
    assign_value: str | None = Field(default=None, description="set_attribute: the Python literal to assign")
    periodic: list[str] = Field(
        default_factory=list, description="periodic_in_loop: statements run every `params.every` steps"
    )
    skip_if_matched: bool = Field(
        default=False, description="skip when an earlier edit item of the same fix found its place"
    )

    @model_validator(mode="after")
    def _consistent(self) -> CodeEdit:
        kind = self.kind
        need_calls = kind in (
            "add_kwargs", "replace_callee", "unwrap_call", "remove_call", "remove_sync_guard", "unwrap_with"
        )
        if need_calls and not (self.locate.calls or self.locate.methods):
            raise ValueError(f"{kind} edit needs locate.calls or locate.methods")
        if kind == "set_attribute" and not (self.locate.attributes and self.assign_value):
            raise ValueError("set_attribute edit needs locate.attributes and assign_value")
        if kind == "add_kwargs" and not self.kwargs:
            raise ValueError("add_kwargs edit needs kwargs")
        if kind == "replace_callee":
            if not self.replacements:
                raise ValueError("replace_callee edit needs replacements")
            for old, new in self.replacements.items():
                if not (QUALNAME_RE.match(old) and QUALNAME_RE.match(new)):
                    raise ValueError(f"replacement names must be dotted names: {old!r} -> {new!r}")
        if kind == "periodic_in_loop" and not (self.periodic and isinstance(self.params.get("every"), int)):
            raise ValueError("periodic_in_loop edit needs periodic statements and an int params.every")
        if kind in ("insert_before_loop", "insert_after_import") and not self.statements:
            raise ValueError(f"{kind} edit needs statements")
        if kind == "insert_after_import" and not self.locate.after_import:
            raise ValueError("insert_after_import edit needs locate.after_import")
        known = set(self.params) | set(self.requires_params)
        sources = [k.value for k in self.kwargs] + list(self.statements) + list(self.periodic)
        for source in sources:
            missing = placeholders(source) - known
            if missing:
                raise ValueError(
                    f"placeholders without a default or requires_params entry: {sorted(missing)}"
                )
        # Render with defaults (and a stand-in for required params) and parse: a template that cannot
        # produce valid Python is a bug in the knowledge base, not something to discover in a user's file.
        sample: dict[str, Any] = {name: [1] for name in self.requires_params} | dict(self.params)
        for spec in self.kwargs:
            _parse_or_raise(render_template(spec.value, sample), "eval", f"kwarg {spec.name}")
        for statement in [*self.statements, *self.periodic]:
            _parse_or_raise(render_template(statement, sample), "exec", "statement")
        return self


def _parse_or_raise(source: str, mode: Literal["eval", "exec"], what: str) -> None:
    try:
        ast.parse(source, mode=mode)
    except SyntaxError as exc:
        raise ValueError(f"{what} does not parse as Python: {source!r} ({exc.msg})") from None


class EnvVar(_Strict):
    """An environment variable a fix sets (`value`) or unsets (`value: null`)."""

    name: str
    value: str | None = Field(description="value to set; null means unset")
    note: str = Field(min_length=5)
    ok_values: list[str] = Field(
        default_factory=list, description="existing values that already count as fixed"
    )
    at_least: int | None = Field(default=None, description="an existing integer >= this counts as fixed")
    option: bool = Field(
        default=False, description="value is one `key:value` option of a comma-separated list"
    )

    def satisfied_by(self, current: str | None) -> bool:
        """Whether a variable's current value (None = unset) already satisfies the fix."""
        if self.value is None:
            return current is None or current in self.ok_values
        if current is None:
            return False
        if current == self.value or current in self.ok_values:
            return True
        if self.at_least is not None and current.strip().isdigit():
            return int(current) >= self.at_least
        if self.option:
            return self.value.replace(" ", "") in [o.strip().replace(" ", "") for o in current.split(",")]
        return False

    @field_validator("name")
    @classmethod
    def _env_name(cls, value: str) -> str:
        if not ENV_NAME_RE.match(value):
            raise ValueError(f"not an environment variable name: {value!r}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> EnvVar:
        if self.at_least is not None and (self.value is None or not self.value.isdigit()):
            raise ValueError("at_least needs an integer value")
        if self.option and (self.value is None or ":" not in self.value or "," in self.value):
            raise ValueError("option needs a single `key:value` value")
        return self


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
