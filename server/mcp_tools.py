"""The MCP face of the tool catalog: one adapter registers every `tools.catalog.TOOLS` entry, and a budget per
tool keeps its answer small (top-k, evidence trimmed to the ranks that weigh most, a capped text).

The adapter's signature is built from the entry's argument model, so the input schema a client sees is the
model's (types, defaults, bounds, descriptions), plus `path` / `profile_id` for tools that read a profile.
"""

from __future__ import annotations

import inspect
import threading
from collections.abc import Callable
from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, ToolAnnotations
from pydantic import BaseModel, Field

from ..analysis.checks.base import registry
from ..analysis.metrics.breakdown import standing_out
from ..analysis.models import SEVERITY_ORDER
from ..analysis.replay.models import WhatIf
from ..analysis.store import Profile, is_damaged_cache
from ..tools import catalog
from ..tools import models as m
from ..tools.live import render_hang
from . import answers as a
from .registry import ProfileRegistry, profile_id_of
from .roots import Roots

PATH_HELP = ("Profile under the server's roots: a rank folder, a folder of ranks, or a Kineto trace (.json / "
             ".json.gz) or folder of traces. Give path or profile_id.")
ID_HELP = "profile_id returned by load_profile (faster than path)."

# Catalog calls computing at once (each holds what its question derives from a loaded profile: a what-if's
# copy of the replay, a comparison's second profile); further calls wait up to CATALOG_WAIT_S, then are
# refused in one line.
CATALOG_IN_FLIGHT = 4
CATALOG_WAIT_S = 120.0

# What an MCP answer is: (bounded structure, text for the model, how to ask for less when the text is cut).
Shaped = tuple[BaseModel, str, str]
Budget = Callable[[BaseModel, Any, str], Shaped]


def _issues(rep: m.IssueReport, args: catalog.IssuesArgs, pid: str) -> Shaped:
    # The full report was computed once (no filter): filters apply here, and the numbers shown are the
    # positions in that report (`numbered`), the `finding=N` explain takes.
    cut = SEVERITY_ORDER[args.min_severity]
    wanted = set(args.checks or [])
    ranks = set(args.ranks or [])
    picked = [(i, f) for i, f in rep.numbered()
              if SEVERITY_ORDER[f.severity] <= cut and (not wanted or f.check in wanted)
              and (args.ranks is None or ranks & set(f.ranks))]
    shown = picked[: args.limit]
    out = rep.model_copy(update={
        "findings": [a.trim_evidence(f, a.EVIDENCE_RANKS) for _, f in shown],
        "total": len(picked), "truncated": len(shown) < len(picked), "numbers": [i for i, _ in shown]})
    return out, a.text_issues(out, pid), "lower limit or raise min_severity"


def _breakdown(b: m.Breakdown, args: catalog.BreakdownArgs, pid: str) -> Shaped:
    totals, warnings = b.totals, b.warnings
    if len(totals) > args.limit:  # a large cluster: the per-rank totals, too, stay within the limit
        totals = standing_out(totals, args.limit)
        warnings = [*warnings, f"totals: the {args.limit} of {len(b.totals)} ranks that stand out (largest "
                    "distance from the median in step, compute, exposed communication or free time); pass "
                    "ranks=[...] for others"]
    out = a.BreakdownResult(profile=b.profile, rows=b.rows[: args.limit], totals=totals, warnings=warnings,
                            total=len(b.rows), truncated=len(b.rows) > args.limit)
    return out, a.text_breakdown(out), "pass ranks=[...] to see fewer ranks"


def _slow_ranks(s: m.SlowRanks, args: catalog.SlowRanksArgs, pid: str) -> Shaped:
    n = args.limit
    cut = any(len(d.slow) > n or len(d.late_arrivals) > n for d in s.dimensions)
    dims = [d.model_copy(update={"slow": d.slow[:n], "late_arrivals": d.late_arrivals[:n]}) for d in s.dimensions]
    total = sum(len(d.slow) + len(d.late_arrivals) for d in s.dimensions)
    out = a.SlowRanksResult(profile=s.profile, dimensions=dims, findings=s.findings, warnings=s.warnings,
                            total=total, truncated=cut)
    return out, a.text_slow_ranks(out), "lower limit"


def _env_audit(e: m.EnvAudit, args: catalog.EnvAuditArgs, pid: str) -> Shaped:
    order = {"bad": 0, "unknown": 1, "ok": 2}
    vs = sorted((v for v in e.variables if args.status is None or v.status == args.status),
                key=lambda v: (order[v.status], v.name))
    shown, warnings = vs[: args.limit], e.warnings
    if any(len(v.values_by_rank) > a.EVIDENCE_RANKS for v in shown):  # a large cluster
        shown = [a.trimmed_variable(v) for v in shown]
        warnings = [*warnings, f"values_by_rank: at most {a.EVIDENCE_RANKS} ranks per variable, those of its "
                    "rarest values; `stepdoctor env --format json` lists every rank"]
    out = a.EnvAuditResult(profile=e.profile, variables=shown, warnings=warnings, total=len(vs),
                           truncated=len(vs) > args.limit)
    return out, a.text_env(out), "pass status='bad' or lower limit"


def _explain(exp: m.Explanation, args: catalog.ExplainArgs, pid: str) -> Shaped:
    from ..tools.knowledge_tools import explanation_markdown

    if exp.finding is not None:
        exp = exp.model_copy(update={"finding": a.trim_evidence(exp.finding, a.EXPLAIN_RANKS)})
    return exp, explanation_markdown(exp, mcp=True), "read the structured content"


def _suggest_edit(res: m.EditSuggestion, args: catalog.SuggestEditArgs, pid: str) -> Shaped:
    lines = [res.diff or "(no change: the code already has the fix, or no spot to edit was found)"]
    lines += [f"- {msg}" for msg in res.messages[:10]]
    if not res.diff and res.template:
        lines.append(f"Edit by hand:\n{res.template}")
    return res, "\n".join(lines), "pass fix= to get one fix at a time"


def _issues_question(prof: Profile | None, args: catalog.IssuesArgs) -> catalog.IssuesArgs:
    """list_issues asks the catalog for the whole report (one run of the checks; `_issues` filters it and
    numbers the findings in it), after checking the filters it will apply."""
    known = registry()
    bad = [c for c in args.checks or [] if c not in known]
    if bad:
        raise ToolError(f"unknown check {bad[0]!r}; the checks are {', '.join(known)}")
    have = prof.info.ranks if prof is not None else []
    missing = sorted(set(args.ranks or []) - set(have))
    if missing:
        raise ToolError(f"rank {missing[0]} not in profile; ranks are {', '.join(map(str, have))}")
    return catalog.IssuesArgs()


def _what_if_text(w: WhatIf) -> str:
    err = max((x.error_pct for x in w.replay.steps), default=0.0)
    lines = [f"Verdict: {w.verdict}",
             f"null replay: {len(w.replay.steps)} step(s), worst error {err:.2f}% (limit {w.replay.max_error_pct:g}%)"
             + (f"; not used: steps {w.replay.abstained_steps} ({w.replay.reason})" if w.replay.abstained_steps
                else "")]
    lines += [f"- if {sc.change}: {sc.predicted_step_ms:.2f} ms per step ({sc.delta_ms:+.2f} ms)"
              for sc in w.scenarios[:10]]
    if w.slowdown:
        top = sorted(w.slowdown.by_rank.items(), key=lambda kv: -kv[1])[:5]
        lines.append(f"S = {w.slowdown.S:.3f}; by rank (top): " + ", ".join(f"{r}: {v:.3f}" for r, v in top))
    return "\n".join(lines)


def _plain(text: Callable[[Any], str], narrow: str) -> Budget:
    """A tool whose catalog answer is already bounded by its `limit` argument."""
    return lambda out, args, pid: (out, text(out), narrow)


# Where the MCP question differs from the user's arguments (the budget then narrows the answer).
QUESTIONS: dict[str, Callable[[Any, Any], catalog.Args]] = {"list_issues": _issues_question}

BUDGETS: dict[str, Budget] = {
    "list_issues": _issues,
    "breakdown": _breakdown,
    "slow_ranks": _slow_ranks,
    "slow_links": _plain(a.text_slow_links, "lower limit"),
    "top_kernels": _plain(a.text_kernels, "lower limit or pass rank / step"),
    "env_audit": _env_audit,
    "compare_runs": _plain(a.text_comparison, "lower limit or pass rank / step"),
    "explain": _explain,
    "list_fixes": _plain(a.text_fixes, "pass check or vendor, or lower limit"),
    "suggest_edit": _suggest_edit,
    "what_if": _plain(_what_if_text, "pass ranks_at_median or stages_at_median for one scenario"),
    "diagnose_hang": _plain(render_hang, "see divergences[] and stacks in the structured content"),
    "critical_path": _plain(lambda cp: cp.summary + "\n" + "\n".join(
        f"- {lk.kind} rank {lk.rank}: {lk.ms:.2f} ms ({lk.share_pct:.1f}%)" for lk in cp.links[:12]), "pass step"),
}


def _output_model(tool: catalog.Tool) -> type[BaseModel]:
    """The model of the structured content: the budget's `*Result` (with total / truncated) or the catalog's."""
    shaped = {"breakdown": a.BreakdownResult, "slow_ranks": a.SlowRanksResult, "env_audit": a.EnvAuditResult}
    return shaped.get(tool.name, tool.output)


def _parameters(tool: catalog.Tool) -> list[inspect.Parameter]:
    """The adapter's parameters: the argument model's fields (annotation, bounds, description, default)
    after path / profile_id for tools that read a profile."""
    kw = inspect.Parameter.KEYWORD_ONLY
    params = []
    if tool.profile != "none":
        params += [
            inspect.Parameter("path", kw, default=None, annotation=Annotated[str | None, Field(description=PATH_HELP)]),
            inspect.Parameter("profile_id", kw, default=None,
                              annotation=Annotated[str | None, Field(description=ID_HELP)]),
        ]
    for name, info in tool.args.model_fields.items():
        ann = Annotated[(info.annotation, *info.metadata, Field(description=info.description))]  # type: ignore[valid-type]
        default = inspect.Parameter.empty if info.is_required() else info.default
        params.append(inspect.Parameter(name, kw, default=default, annotation=ann))
    # required arguments first, so the generated docs and schemas list them first
    return sorted(params, key=lambda p: p.default is not inspect.Parameter.empty)


def register_catalog(server: MCPServer, reg: ProfileRegistry, roots: Roots, annotations: ToolAnnotations,
                     output_schemas: bool) -> None:
    """Register every catalog entry served over MCP; all of them share one bound on calls in flight."""
    in_flight = threading.BoundedSemaphore(CATALOG_IN_FLIGHT)
    for tool in catalog.MCP_TOOLS:
        _register(server, tool, reg, roots, annotations, output_schemas, in_flight)


def _register(server: MCPServer, tool: catalog.Tool, reg: ProfileRegistry, roots: Roots,
              annotations: ToolAnnotations, output_schemas: bool, in_flight: threading.BoundedSemaphore) -> None:
    budget = BUDGETS[tool.name]

    def call(**kw: Any) -> CallToolResult:
        if not in_flight.acquire(timeout=CATALOG_WAIT_S):
            raise ToolError(f"server busy: {CATALOG_IN_FLIGHT} tool calls computing for over {CATALOG_WAIT_S:g} s; "
                            "try again")
        try:
            used: list[Profile] = []
            try:
                return answer(used, **kw)
            except Exception as e:   # a damaged cache database found while answering: read the profiles again
                if not is_damaged_cache(e) or not used:
                    raise
                for prof in used:
                    reg.drop(prof)
                return answer([], **kw)
        finally:
            in_flight.release()

    def answer(used: list[Profile], **kw: Any) -> CallToolResult:
        path, pid = (kw.pop("path", None), kw.pop("profile_id", None)) if tool.profile != "none" else (None, None)
        for field in tool.paths:
            kw[field] = str(roots.resolve(kw[field], "code file"))
        for field in tool.folders:
            folder = roots.resolve(kw[field], "dump folder")
            roots.check_tree(folder)
            kw[field] = str(folder)
        args = tool.args(**kw)
        with a.catalog_errors():
            prof: Profile | None = None
            if tool.profile == "required" or (tool.profile == "optional" and (path or pid)):
                prof = reg.get(path, pid)
                used.append(prof)

            def ref(value: str) -> Profile:
                other = reg.ref(value)
                used.append(other)
                return other

            ask = QUESTIONS.get(tool.name)
            asked = ask(prof, args) if ask else args
            # a question answered before on these files (by this server, another, or the CLI) is a lookup
            out = catalog.kept_answer(tool, prof.db_path, asked) if prof is not None else None
            if out is None:
                out = tool.answer(prof, asked, ref)
                if prof is not None:
                    catalog.keep_answer(tool, prof.db_path, asked, out)
            shaped, text, narrow = budget(out, args, profile_id_of(prof) if prof is not None else "")
        return a.result(shaped, text, narrow)

    params = _parameters(tool)
    ret = Annotated[CallToolResult, _output_model(tool)]
    call.__signature__ = inspect.Signature(params, return_annotation=ret)  # type: ignore[attr-defined]
    call.__annotations__ = {p.name: p.annotation for p in params} | {"return": ret}
    call.__name__ = call.__qualname__ = tool.name
    server.add_tool(call, name=tool.name, title=tool.title, description=tool.description,
                    annotations=annotations, structured_output=None if output_schemas else False)
    if isinstance(names := getattr(server, "arg_names", None), dict):
        names[tool.name] = [p.name for p in params]


