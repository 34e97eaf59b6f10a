"""The code-edit kinds: one module per kind, each a model with a literal `kind`, its own fields and rules,
and its handler (`apply`). `CodeEdit` is their union discriminated by `kind`: a fix's YAML item is parsed
straight into the model of its kind, so adding a kind is one module and one member of the union below.
"""

from __future__ import annotations

from typing import Annotated, Any, get_args, get_origin

from pydantic import Field

from .add_kwargs import AddKwargs
from .base import EditBase, KwargSpec, Locate
from .env import Env
from .insert_after_import import InsertAfterImport
from .insert_before_loop import InsertBeforeLoop
from .periodic_in_loop import PeriodicInLoop
from .remove_call import RemoveCall
from .remove_sync_guard import RemoveSyncGuard
from .replace_callee import ReplaceCallee
from .set_attribute import SetAttribute
from .template import Template
from .unwrap_call import UnwrapCall
from .unwrap_with import UnwrapWith

CodeEdit = Annotated[
    AddKwargs
    | ReplaceCallee
    | UnwrapCall
    | RemoveCall
    | InsertBeforeLoop
    | InsertAfterImport
    | Env
    | RemoveSyncGuard
    | UnwrapWith
    | SetAttribute
    | PeriodicInLoop
    | Template,
    Field(discriminator="kind"),
]
KIND_MODELS: tuple[type[EditBase], ...] = get_args(get_args(CodeEdit)[0])
EDIT_KINDS: tuple[str, ...] = tuple(get_args(m.model_fields["kind"].annotation)[0] for m in KIND_MODELS)


def _empty(annotation: Any) -> Any:
    """The value that stands for "not set" in a field of this type: [], {}, False or None."""
    kind = get_origin(annotation) or annotation
    return [] if kind is list else {} if kind is dict else False if kind is bool else None


# Every field any kind declares, with the value a kind that lacks it stands for: a dumped edit carries all
# of them, so a client reading `edit["kwargs"]` of any kind finds the empty list it always found.
_ALL_FIELDS: dict[str, Any] = {
    name: _empty(field.annotation) for model in KIND_MODELS for name, field in model.model_fields.items()
}


def edit_record(edit: EditBase) -> dict[str, Any]:
    """The JSON form of one edit item, with the fields of other kinds at their empty values."""
    return {**_ALL_FIELDS, **edit.model_dump(mode="json")}


__all__ = ["EDIT_KINDS", "KIND_MODELS", "CodeEdit", "EditBase", "KwargSpec", "Locate", "edit_record"]
