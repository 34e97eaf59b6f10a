"""Tools over the knowledge base: explain a check / fix / finding, list fixes, suggest code edits."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from ..analysis.checks.base import registry
from ..analysis.errors import ProfileError, UsageError
from ..analysis.models import Finding
from ..knowledge.edit.kinds import edit_record
from . import api
from .models import EditSuggestion, Explanation, FixList, FixSummary


def _kb():
    from ..knowledge import loader

    return loader


def _dump(x: Any) -> Any:
    if isinstance(x, BaseModel):
        return x.model_dump(mode="json")
    if isinstance(x, list):
        return [_dump(i) for i in x]
    return x


def _fix_explanation(fix_id: str, finding: Finding | None = None) -> Explanation:
    fix = _kb().get_fix(fix_id)
    return Explanation(id=fix.id, kind="fix", title=fix.title, why=fix.why, steps=list(fix.steps),
                       code_edit=[edit_record(e) for e in fix.code_edit], verify=_verify_text(fix.verify),
                       references=_dump(list(fix.references)), finding=finding, fixes=[fix.id],
                       expected_gain=_dump(fix.expected_gain), env=_dump(list(fix.env)))


def _verify_text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, list | tuple):
        return "; ".join(str(_dump(x)) for x in v)
    return str(_dump(v))


def _check_explanation(check_id: str, finding: Finding | None = None) -> Explanation:
    reg = registry()
    cls = reg[check_id]
    fixes = finding.fixes if finding is not None else _kb().fixes_for(check_id)
    steps = []
    if fixes:
        first = _kb().get_fix(fixes[0])
        steps = list(first.steps)
    why = cls.describe() or (cls.__doc__ or "").strip().split("\n\n")[0]
    return Explanation(id=check_id, kind="check", title=finding.title if finding else cls.title, why=why, steps=steps,
                       code_edit=None, verify=f"stepdoctor issues PROFILE --check {check_id}", references=[],
                       finding=finding, fixes=fixes)


def explain(id: str, *, profile: api.ProfileRef | None = None, finding: int | None = None) -> Explanation:
    """A check id or a fix id; with a profile and a 1-based finding number, that finding's own numbers."""
    f: Finding | None = None
    if profile is not None:
        rep = api.issues(profile)
        if finding is None:
            matches = [x for x in rep.findings if x.check == id or id in x.fixes]
            if not matches:
                raise UsageError(f"no finding for {id} in {rep.profile.path}; "
                                         f"{len(rep.findings)} findings (see `stepdoctor issues`)")
            f = matches[0]
        else:
            by_number = {n: x for n, x in rep.numbered() if n is not None}
            if finding not in by_number:
                raise UsageError(f"finding {finding} does not exist; the profile has {len(rep.findings)} "
                                         "findings (numbered from 1, as `stepdoctor issues` lists them)")
            f = by_number[finding]
            if id not in (f.check, *f.fixes):
                raise UsageError(f"finding {finding} is {f.check} ({f.title}), not {id}")
    reg = registry()
    if id in reg:
        return _check_explanation(id, f)
    try:
        return _fix_explanation(id, f)
    except KeyError as e:
        raise UsageError(str(e).strip("'\"")) from None


def _value_text(v: Any) -> str:
    """An evidence value or a knowledge-base field as a person reads it (no Python reprs)."""
    if isinstance(v, dict):
        if set(v) >= {"text"}:
            return str(v["text"]) + (f" (source: {v['source']})" if v.get("source") else "")
        if set(v) >= {"title", "url"}:
            return f"[{v['title']}]({v['url']})"
        return ", ".join(f"{k} {_value_text(x)}" for k, x in v.items())
    if isinstance(v, list | tuple):
        return ", ".join(_value_text(x) for x in v)
    if isinstance(v, float):
        return f"{v:,.3f}".rstrip("0").rstrip(".")
    return str(v)


def verify_commands(verify: str | None, profile: str | None) -> list[str]:
    """The knowledge base's verify entries ("issues PATH --check gc-pause", "breakdown PATH free_ms") as
    commands a person can paste: `stepdoctor` in front, the profile's path for PATH, the metric to compare
    after it as a comment."""
    out = []
    for entry in (verify or "").split(";"):
        words = entry.strip().split()
        if not words:
            continue
        if words[0] == "stepdoctor":
            words = words[1:]
        where = profile or "PROFILE"
        args = [where if w in ("PATH", "PROFILE") else w for w in words]
        metric = [w for w in args[1:] if w.endswith("_ms") and not w.startswith("-")]
        cmd = " ".join(w for w in args if w not in metric)
        out.append(f"stepdoctor {cmd}" + (f"   # compare {', '.join(metric)}" if metric else ""))
    return out


def explanation_markdown(e: Explanation, *, mcp: bool = False, profile: str | None = None) -> str:
    """The explanation as markdown. `mcp`: point to the MCP tools (explain(id=...)) instead of the CLI."""
    lines = [f"# {e.title}", "", f"`{e.id}` ({e.kind})", ""]
    if e.finding is not None:
        f = e.finding
        lines += [f"**Finding** ({f.severity}): {f.message}", ""]
        if f.ranks:
            lines.append(f"- ranks: {', '.join(map(str, f.ranks))}")
        if f.steps:
            lines.append(f"- steps: {', '.join(map(str, f.steps))}")
        if f.impact_ms is not None:
            lines.append(f"- impact: {f.impact_ms:.2f} ms per step ({f.impact_pct or 0:.1f}% of the mean step)")
        for k, v in f.evidence.items():
            if v not in (None, [], {}, ""):
                lines.append(f"- {k.replace('_', ' ')}: {_value_text(v)}")
        lines.append("")
    lines += ["## Why", "", e.why, ""]
    if e.steps:
        lines += ["## What to do", ""] + [f"{i}. {s}" for i, s in enumerate(e.steps, 1)] + [""]
    if e.fixes and e.kind == "check":
        how = (lambda x: f"explain(id='{x}')") if mcp else (lambda x: f"stepdoctor explain {x}")
        lines += ["## Fixes", ""] + [f"- `{x}` ({how(x)})" for x in e.fixes] + [""]
    if e.expected_gain:
        lines += ["## Expected gain", "", _value_text(e.expected_gain), ""]
    if e.verify:
        cmds = verify_commands(e.verify, profile)
        if mcp:
            lines += ["## Verify", "", "Re-profile, then run list_issues / breakdown on the new profile "
                      "(as these commands do):", ""]
        else:
            lines += ["## Verify", "", "Re-profile, then:", ""]
        lines += ["```", *cmds, "```", ""]
    if e.references:
        lines += ["## References", ""] + [f"- {_value_text(r)}" for r in e.references] + [""]
    return "\n".join(lines)


def list_fixes(*, check: str | None = None, vendor: str | None = None, limit: int | None = None) -> FixList:
    fixes = []
    loaded = _kb().load_fixes().values()
    if check and not any(check in f.checks for f in loaded):
        from ..analysis.checks.base import registry

        known = sorted(set(registry()) | {c for f in loaded for c in f.checks})
        if check not in known:
            raise UsageError(f"unknown check {check!r}; the checks are {', '.join(known)}")
    for f in loaded:
        vendors = list(f.applies_to.vendor)
        if check and check not in f.checks:
            continue
        if vendor and vendor != "any" and vendor not in vendors and "any" not in vendors:
            continue
        fixes.append(FixSummary(id=f.id, title=f.title, vendors=vendors, frameworks=list(f.applies_to.framework),
                                checks=list(f.checks)))
    fixes.sort(key=lambda x: x.id)
    total = len(fixes)
    if limit is not None:
        fixes = fixes[:limit]
    return FixList(fixes=fixes, total=total, truncated=len(fixes) < total)


def suggest_edit(code_path: str | Path, *, fix: str | None = None, profile: api.ProfileRef | None = None,
                 apply: bool = False) -> EditSuggestion:
    """A unified diff applying one fix (or every fix a profile's findings point to) to a training script.

    With a profile, every fix of every finding is tried, findings in priority order and each finding's fixes
    in its own order; a fix is applied where the code matches it (the others report "no place" or "already
    applied"), each on the text the previous one produced. The finding's own numbers
    (`evidence.fix_params`, and the flagged variable for env-var findings) fill the fix's parameters; the
    first finding that names a parameter wins. Only `apply=True` writes, and then the message names the
    backup; a suggestion never claims to have changed the file.
    """
    from ..knowledge import edit

    p = Path(code_path)
    if not p.is_file():
        raise ProfileError(p, "no such file")
    fix_ids: list[str] = []
    params: dict[str, Any] = {}
    env_names: list[str] = []
    if fix:
        try:
            _kb().get_fix(fix)
        except KeyError as e:
            raise UsageError(str(e).strip("'\"")) from None
        fix_ids = [fix]
    else:
        rep = api.issues(profile)  # type: ignore[arg-type]
        for f in rep.findings:
            if not f.fixes:
                continue
            if f.check == "env-var" and f.subject:
                env_names.append(f.subject)
            fix_ids += [i for i in f.fixes if i not in fix_ids]
            found = f.evidence.get("fix_params", {}) if isinstance(f.evidence, dict) else {}
            params.update({k: v for k, v in found.items() if k not in params})
        if not fix_ids:
            return EditSuggestion(path=str(p), fixes=[], changed=False, diff="",
                                  messages=["the profile's findings point to no fix"])
    if env_names:
        params["env"] = env_names
    try:
        res = edit.suggest_edits_for_fixes(p, fix_ids, params=params or None)
    except (ValueError, FileNotFoundError) as e:
        raise ProfileError(p, str(e)) from None
    out = EditSuggestion(path=str(p), fixes=fix_ids, changed=res.changed, diff=res.diff or "",
                         messages=[m for m in [res.message] if m], template=res.template)
    if apply and res.changed:
        backup = edit.apply_edit(res, backup=True)
        out.applied = True
        out.backup = str(backup) if backup else None
        out.messages.append(f"wrote {p}" + (f" (the original is kept in {backup})" if backup else ""))
    elif apply:
        out.messages.append(f"nothing to write: {p} is left as it was")
    return out
