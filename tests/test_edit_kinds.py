"""The edit kinds: one module per kind, its model's literal `kind` names it, its own fields only."""

from __future__ import annotations

import copy
import importlib
import pkgutil

import pytest
from pydantic import TypeAdapter, ValidationError

from stepdoctor.knowledge.edit import kinds
from stepdoctor.knowledge.edit.kinds import EDIT_KINDS, KIND_MODELS, CodeEdit, EditBase, edit_record
from stepdoctor.knowledge.loader import load_fixes

EDITS = TypeAdapter(CodeEdit)
LOCATE = {"description": "the DataLoader built for training"}


def _models_of(module) -> list[type[EditBase]]:
    return [v for v in vars(module).values()
            if isinstance(v, type) and issubclass(v, EditBase) and v is not EditBase and v.__module__ == module.__name__]


def test_each_kind_is_one_module_named_by_its_literal():
    stems = [m.name for m in pkgutil.iter_modules(kinds.__path__) if m.name != "base"]
    found = {}
    for stem in stems:
        models = _models_of(importlib.import_module(f"{kinds.__name__}.{stem}"))
        assert len(models) == 1, stem
        found[stem] = models[0]
    assert set(found) == set(EDIT_KINDS) and len(EDIT_KINDS) == 12
    assert set(found.values()) == set(KIND_MODELS)
    for stem, model in found.items():
        assert model.model_fields["kind"].annotation.__args__ == (stem,)
        # every kind the editor runs has its own handler; the shown-only kind has none
        assert (model.apply is not EditBase.apply) == model.automatic, stem


def _add_kwargs(**over):
    return {"framework": "pytorch", "kind": "add_kwargs", "before": "DataLoader(ds)",
            "after": "DataLoader(ds, num_workers=4)", "locate": {**LOCATE, "calls": ["torch.utils.data.DataLoader"]},
            "kwargs": [{"name": "num_workers", "value": "4"}], **over}


def test_a_field_the_kind_does_not_read_is_an_error():
    assert type(EDITS.validate_python(_add_kwargs())).__name__ == "AddKwargs"
    template = {"framework": "any", "kind": "template", "before": "a", "after": "b", "locate": LOCATE}
    assert EDITS.validate_python(template).automatic is False
    bad = {
        "statements on a template": {**template, "statements": ["gc.freeze()"]},
        "replacements on add_kwargs": _add_kwargs(replacements={"a.b": "c.d"}),
        "add_kwargs without kwargs": _add_kwargs(kwargs=[]),
        "add_kwargs without calls": _add_kwargs(locate=LOCATE),
        "unknown kind": _add_kwargs(kind="rewrite_everything"),
        "set_attribute without a target": {**template, "kind": "set_attribute", "assign_value": "True"},
        "set_attribute with a non-literal": {**template, "kind": "set_attribute", "assign_value": "(",
                                             "locate": {**LOCATE, "attributes": ["torch.backends.cudnn.benchmark"]}},
        "insert_after_import without its anchor": {**template, "kind": "insert_after_import",
                                                   "statements": ["import torch_npu"]},
        "periodic_in_loop without an int every": {**template, "kind": "periodic_in_loop", "statements": ["gc.disable()"],
                                                  "periodic": ["gc.collect()"], "params": {"every": "10"}},
        "replace_callee to a non-name": {**template, "kind": "replace_callee", "replacements": {"torch.optim.AdamW": "x y"},
                                         "locate": {**LOCATE, "calls": ["torch.optim.AdamW"]}},
        "a placeholder without a default": _add_kwargs(kwargs=[{"name": "num_workers", "value": "${n}"}]),
    }
    for name, data in bad.items():
        with pytest.raises(ValidationError):
            EDITS.validate_python(data)
        assert name


def test_the_json_form_keeps_every_field_of_every_kind():
    fields = {name for model in KIND_MODELS for name in model.model_fields}
    for fix in load_fixes().values():
        for edit in fix.code_edit:
            record = edit_record(edit)
            assert set(record) == fields
            assert record == {**record, **edit.model_dump(mode="json")}
    record = edit_record(EDITS.validate_python(_add_kwargs()))
    assert record["statements"] == [] and record["replacements"] == {} and record["assign_value"] is None
    assert record["skip_if_matched"] is False and record["kwargs"][0]["name"] == "num_workers"


def test_every_shipped_edit_validates_into_its_kind():
    for fix in load_fixes().values():
        for edit in fix.code_edit:
            again = EDITS.validate_python(copy.deepcopy(edit.model_dump()))
            assert type(again) is type(edit) and again == edit
