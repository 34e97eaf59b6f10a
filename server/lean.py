"""Lean structured content for MCP answers: what an assistant uses, within a budget of the text answer.

`lean(model)` is the JSON the server returns as structured content (server/answers.py `result`); the text
answer is written separately and lists what the structure holds, in short form. evals/answer_sizes.py
measures both on real profiles; tests/test_answer_sizes.py holds every tool to `structured_budget`.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel

from ..analysis.models import Finding
from ..tools import models as m

TRIMMED_KEY = "trimmed"   # the evidence key that says what an answer cut, and where to get it


# Budget of an answer's structured content (compact JSON bytes): at most STRUCTURED_RATIO times its text,
# or STRUCTURED_FLOOR (~2k tokens) when that is more: a 77-byte query answer still needs its column names,
# and a table repeats its keys on every row. The text lists what the structure holds, in short form.
# tests/test_answer_sizes.py holds every tool to it on real profiles; evals/answer_sizes.py measures it.
STRUCTURED_RATIO = 2.0
STRUCTURED_FLOOR = 8192
NAME_CAP = 120            # kernel / op names: C++ template names run to kilobytes; the head identifies them
EVIDENCE_LIST = 8         # items kept of an evidence list
EVIDENCE_TEXT = 100       # evidence strings longer than this (method notes, rules) are left to explain
COMPARE_FINDINGS = 5      # new / gone findings kept in a comparison (list_issues on either run lists all)


def structured_budget(text_bytes: int) -> int:
    return max(round(STRUCTURED_RATIO * text_bytes), STRUCTURED_FLOOR)


def lean(model: BaseModel) -> dict[str, Any]:
    """`model` as JSON for structured content, without what only repeats or bloats it:
    - optional fields at their null default are left out (required ones stay, so an output schema still
      validates);
    - names (`name` of kernels, ops, changes) cut to NAME_CAP characters with "…";
    - in every answer but `explain`, each finding's evidence is `lean_evidence` (explain gives it whole);
    - a comparison keeps COMPARE_FINDINGS new and gone findings, without evidence, and says so in `notes`."""
    data = model.model_dump(mode="json")
    whole = isinstance(model, m.Explanation)
    if isinstance(model, m.Comparison):
        data["notes"] = list(data.get("notes") or []) + [
            f"{k}: {COMPARE_FINDINGS} of {len(getattr(model, k))} shown, without evidence; list_issues and explain "
            "on the run give them all" for k in ("findings", "gone_findings") if len(getattr(model, k)) > COMPARE_FINDINGS]
        for k in ("findings", "gone_findings"):
            data[k] = data[k][:COMPARE_FINDINGS]
    _prune(model, data, whole, comparison=isinstance(model, m.Comparison))
    if isinstance(model, m.Comparison) and model.next_step:
        data["next_step"] = mcp_hint(model.next_step)   # over MCP a hint names the tool call
    return data


def _prune(obj: Any, data: Any, whole: bool, comparison: bool) -> None:
    if isinstance(obj, BaseModel):
        for name, info in type(obj).model_fields.items():
            if name not in data:
                continue
            value = getattr(obj, name)
            # only a null default: an empty list (warnings, findings) stays, clients index it
            if not info.is_required() and value is None and info.default is None:
                del data[name]
            elif name == "name" and isinstance(value, str) and len(value) > NAME_CAP:
                data[name] = value[: NAME_CAP - 1] + "…"
            elif isinstance(obj, Finding) and name == "evidence" and not whole:
                data[name] = ({TRIMMED_KEY: {"explain": "all (explain on the run holding it)"}} if comparison
                              else lean_evidence(value))
            else:
                _prune(value, data[name], whole, comparison)
    elif isinstance(obj, list | tuple) and isinstance(data, list):
        for o, d in zip(obj, data, strict=False):   # a comparison's findings are cut: zip to the shorter
            _prune(o, d, whole, comparison)
    elif isinstance(obj, dict) and isinstance(data, dict):
        for k, v in obj.items():
            if str(k) in data:
                _prune(v, data[str(k)], whole, comparison)


def lean_evidence(ev: dict[str, Any]) -> dict[str, Any]:
    """A finding's evidence for a list answer: its top-level numbers, short strings, lists of up to
    EVIDENCE_LIST scalars and maps of up to EVIDENCE_LIST scalars (values_by_rank). What describes the check
    (thresholds, rule, method, source) and tables (per rank, per step, lists of records) are left to
    `explain(id, finding=N)`; `trimmed.explain` names the tables cut. A list answer is the index, explain
    the page."""
    out: dict[str, Any] = {}
    cut: list[str] = []
    for k, v in ev.items():
        if k == TRIMMED_KEY:
            continue
        if any(w in k for w in _ABOUT_THE_CHECK):
            continue
        if _scalar(v) or (isinstance(v, list | dict) and len(v) <= EVIDENCE_LIST
                          and all(_scalar(x) for x in (v.values() if isinstance(v, dict) else v))):
            out[k] = v
        else:
            cut.append(k)
    if cut or TRIMMED_KEY in ev:
        out[TRIMMED_KEY] = {**(ev.get(TRIMMED_KEY) or {}),
                             **({"explain": ",".join(cut)} if cut else {})}
    return out


# Evidence keys that describe the check rather than the finding (its thresholds, rule, method and source):
# the same in every finding of a check, and in explain(id) and docs/checks.md.
_ABOUT_THE_CHECK = ("threshold", "rule", "method", "source")


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, bool | int | float) or (isinstance(v, str) and len(v) <= EVIDENCE_TEXT)


_CLI_EXPLAIN = re.compile(r"^stepdoctor explain (\S+)$")


def mcp_hint(step: str) -> str:
    """A catalog hint in CLI syntax ("stepdoctor explain X", what the CLI prints) as the MCP tool call."""
    hit = _CLI_EXPLAIN.match(step.strip())
    return f'explain(id="{hit.group(1)}")' if hit else step
