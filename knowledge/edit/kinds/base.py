"""What every code-edit kind shares: the framework it is for, its before/after templates, what it locates,
the imports and parameters it brings, and the contract of its handler.

A kind is one module beside this one: a model whose literal `kind` names it, holding the fields only that
kind reads, the rules they must satisfy, and `apply`, the handler. The schema is the union of those models
discriminated by `kind` (`kinds/__init__.py`), so a YAML field a kind does not read is an error at load time.
"""

from __future__ import annotations

import ast
import re
import string
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ..pymodule import Module
    from ..text import Outcome

Framework = Literal["pytorch", "mindspore", "any"]
ParamValue = int | float | bool | str | list[Any] | dict[str, Any] | None
ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")
QUALNAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*$")


class Strict(BaseModel):
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


def parse_or_raise(source: str, mode: Literal["eval", "exec"], what: str) -> None:
    try:
        ast.parse(source, mode=mode)
    except SyntaxError as exc:
        raise ValueError(f"{what} does not parse as Python: {source!r} ({exc.msg})") from None


def dotted_names(values: list[str]) -> list[str]:
    for value in values:
        if not QUALNAME_RE.match(value):
            raise ValueError(f"not a dotted Python name: {value!r}")
    return values


class KwargSpec(Strict):
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


class Locate(Strict):
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
        return dotted_names(values)


class EnvVar(Strict):
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


class EditBase(Strict):
    """One code change, for one framework, as before/after templates plus what the editor needs.

    Subclasses declare `kind: Literal["<kind>"]` and override `apply`; `needs_calls` makes `locate.calls`
    or `locate.methods` required; `automatic` is False for a kind the editor never runs (shown only).
    """

    needs_calls: ClassVar[bool] = False
    automatic: ClassVar[bool] = True

    framework: Framework
    before: str = Field(min_length=1, description="code as it typically looks before the fix")
    after: str = Field(min_length=1, description="the same code after the fix")
    locate: Locate
    imports: list[str] = Field(
        default_factory=list, description="modules to import when the edit changes code"
    )
    params: dict[str, ParamValue] = Field(default_factory=dict, description="defaults for ${placeholders}")
    requires_params: list[str] = Field(
        default_factory=list, description="skip unless the caller passes these"
    )
    unless_params: list[str] = Field(default_factory=list, description="skip when the caller passes these")
    skip_if_matched: bool = Field(
        default=False, description="skip when an earlier edit item of the same fix found its place"
    )

    def expressions(self) -> dict[str, str]:
        """The Python expression templates the edit writes, by what they are (a keyword value)."""
        return {}

    def statement_templates(self) -> list[str]:
        """The Python statement templates the edit writes."""
        return []

    def produced(self) -> list[str]:
        """Every piece of code the edit can bring into a file: what a foreign-device test reads."""
        return [*self.statement_templates(), *self.imports, *self.expressions().values()]

    def apply(self, mod: Module, params: dict[str, Any], explicit: set[str], env: Sequence[EnvVar]) -> Outcome:
        """The edits, locations and notes of this item on `mod`; `params` holds the item's defaults under
        the caller's values, `explicit` the names the caller passed, `env` the fix's variables."""
        raise NotImplementedError(f"{type(self).__name__} is not applied automatically")

    @model_validator(mode="after")
    def _templates_render(self) -> EditBase:
        if self.needs_calls and not (self.locate.calls or self.locate.methods):
            raise ValueError(f"{getattr(self, 'kind', '?')} edit needs locate.calls or locate.methods")
        known = set(self.params) | set(self.requires_params)
        for source in [*self.expressions().values(), *self.statement_templates()]:
            missing = placeholders(source) - known
            if missing:
                raise ValueError(f"placeholders without a default or requires_params entry: {sorted(missing)}")
        # Render with defaults (and a stand-in for required params) and parse: a template that cannot
        # produce valid Python is a bug in the knowledge base, not something to discover in a user's file.
        sample: dict[str, Any] = {name: [1] for name in self.requires_params} | dict(self.params)
        for what, source in self.expressions().items():
            parse_or_raise(render_template(source, sample), "eval", what)
        for source in self.statement_templates():
            parse_or_raise(render_template(source, sample), "exec", "statement")
        return self


class CallKwargsBase(EditBase):
    """Kinds that rewrite the keyword arguments of the calls they locate."""

    needs_calls: ClassVar[bool] = True

    kwargs: list[KwargSpec] = Field(default_factory=list)
    remove_kwargs: list[str] = Field(default_factory=list, description="keywords dropped when the call changes")

    def expressions(self) -> dict[str, str]:
        return {f"kwarg {spec.name}": spec.value for spec in self.kwargs}


class InsertBase(EditBase):
    """Kinds that insert statements (with an optional comment line above them)."""

    comment: str | None = Field(default=None, description="comment line placed above inserted statements")
    statements: list[str] = Field(min_length=1, description="Python statements to insert")

    def statement_templates(self) -> list[str]:
        return list(self.statements)
