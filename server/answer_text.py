"""The short text each MCP tool returns beside its structured content (what the model reads; the structure
carries everything), within TEXT_CAP once `answers.result` has cut it."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from ..analysis.hang import HangReport
from ..analysis.models import SEVERITY_ORDER, Finding, ProfileInfo
from ..analysis.replay.models import CriticalPath, WhatIf
from ..tools import models as m
from ..tools.knowledge_tools import explanation_markdown
from ..tools.live import render_hang
from ..tools.render import render_markdown
from .lean import mcp_hint
from .results import LoadedProfile

FINDING_HEAD = re.compile(r"^\S+\. \[(?:high|medium|low)\] ", re.M)


def findings_shown(text: str) -> int:
    """Findings `text_issues` printed whole in a cut text: a head line followed by its message line."""
    lines = text.splitlines()
    heads = [i for i, ln in enumerate(lines) if FINDING_HEAD.match(ln)]
    return sum(1 for i in heads if i + 1 < len(lines) and lines[i + 1].startswith("   "))


def _f(x: float | None, nd: int = 2) -> str:
    return "-" if x is None else f"{x:,.{nd}f}"


def _ints(xs: list[int], n: int = 12) -> str:
    if not xs:
        return "-"
    if len(xs) > 2 and xs == list(range(xs[0], xs[-1] + 1)):
        return f"{xs[0]}-{xs[-1]}"
    head = ",".join(map(str, xs[:n]))
    return head if len(xs) <= n else f"{head},… ({len(xs)})"


def _clip(s: str, n: int = 160) -> str:
    """Kernel names and causes can be kilobytes (C++ templates); the text needs only their head."""
    return s if len(s) <= n else s[: n - 1] + "…"


def _profile_line(p: ProfileInfo) -> str:
    who = "/".join(x for x in (p.vendor, p.framework) if x)
    return (
        f"{p.path} [{p.format}{'; ' + who if who else ''}]: ranks {_ints(p.ranks)}, steps {_ints(p.steps)}"
        + (f", world size {p.world_size}" if p.world_size else "")
    )


def _warnings_text(ws: list[str], n: int = 5) -> list[str]:
    if not ws:
        return []
    out = [f"Warnings ({len(ws)}):"] + [f"- {w}" for w in ws[:n]]
    if len(ws) > n:
        out.append(f"- … {len(ws) - n} more in structured content")
    return out


def _finding_line(i: int | str, f: Finding) -> str:
    where = []
    if f.ranks:
        where.append(f"rank {_ints(f.ranks)}")
    if f.steps:
        where.append(f"step {_ints(f.steps)}")
    impact = (
        f"{_f(f.impact_ms)} ms per step"
        + (f" ({_f(f.impact_pct, 1)}% of step)" if f.impact_pct is not None else "")
        if f.impact_ms is not None else "impact unknown"
    )
    msg = _clip(f.message, 400)
    fixes = f" Fixes: {', '.join(f.fixes[:3])}." if f.fixes else ""
    return (
        f"{i}. [{f.severity}] {f.check}"
        + (f" ({f.subject})" if f.subject else "")
        + f" — {', '.join(where) or 'all ranks'} — {impact}\n   {msg}{fixes}"
    )


# --------------------------------------------------------------------------------------------------------
# Text summaries (what the model reads; the structure carries everything)
# --------------------------------------------------------------------------------------------------------


def text_loaded(r: LoadedProfile) -> str:
    lines = [
        f"Loaded profile_id {r.profile_id}: {_profile_line(r.profile)}"
        + ("; from cache" if r.from_cache else "; ingested now")
    ]
    lines += _warnings_text(r.warnings)
    lines += ["Next:"] + [f"- {s}" for s in r.next_steps]
    return "\n".join(lines)


def text_issues(rep: m.IssueReport, pid: str) -> str:
    """Each finding under its number in the unfiltered report (`IssueReport.numbered`), the `finding=N`
    that explain takes."""
    counts = {s: sum(f.severity == s for f in rep.findings) for s in SEVERITY_ORDER}
    head = (
        f"{rep.total} finding(s) in {_profile_line(rep.profile)}"
        + (f" — showing {len(rep.findings)}" if rep.truncated else "")
        + f" ({', '.join(f'{n} {s}' for s, n in counts.items() if n)})"
    )
    lines = [head]
    lines += [
        _finding_line(n if n is not None else "-", f) for n, f in rep.numbered()
    ]
    if rep.not_applicable:
        na = "; ".join(f"{k} ({v})" for k, v in sorted(rep.not_applicable.items())[:8])
        more = len(rep.not_applicable) - 8
        lines.append(f"Not applicable: {na}" + (f"; … {more} more" if more > 0 else ""))
    lines += _warnings_text(rep.warnings)
    first = next(((n, f) for n, f in rep.numbered() if n is not None), None)
    if first is not None:
        lines.append(
            f'Next: explain(id="{first[1].check}", profile_id="{pid}", finding={first[0]}) for the evidence '
            f"and fix of finding {first[0]} (numbers are those explain takes); "
            "suggest_edit(code_path, fix=...) for a patch."
        )
    return "\n".join(lines)


def text_breakdown(b: m.Breakdown) -> str:
    lines = [
        f"Step breakdown, mean per step (ms) — {_profile_line(b.profile)}",
        "rank | steps | step | compute | comm | comm exposed | overlapped | free",
    ]
    for t in b.totals:
        n = t.steps or 1

        def mean(x: float | None, n: int = n) -> str:
            return _f(None if x is None else x / n)

        lines.append(
            f"{t.rank} | {t.steps} | {mean(t.step_ms)} | {mean(t.compute_ms)} | "
            f"{mean(t.communication_ms)} | {mean(t.comm_not_overlapped_ms)} | {mean(t.overlapped_ms)} | "
            f"{mean(t.free_ms)}"
        )
    lines.append(
        f"{len(b.rows)} of {b.total} (rank, step) rows in structured content"
        + (" (truncated: pass ranks / steps / limit)" if b.truncated else "")
    )
    lines += _warnings_text(b.warnings)
    return "\n".join(lines)


def text_slow_ranks(s: m.SlowRanks) -> str:
    """Per dimension the median rank and the ranks beyond it, each with its baseline in ms (no percentage:
    over a median of 0.25 ms one says nothing); then the stragglers and who waits for them."""
    lines = [f"Slow ranks — {_profile_line(s.profile)}"]
    for d in s.dimensions:
        named = [e.rank for e in d.slow]
        lines.append(f"{d.name}: median rank {_f(d.median_ms)} ms per step, spread {_f(d.spread_pct, 1)}% of step; "
                     + (f"slower: rank {_ints(named)}" if named else "no rank beyond the median"))
        for e in d.slow:
            lines.append(
                f"- rank {e.rank} steps {_ints(e.steps)}: {_f(e.value_ms)} ms against a median of "
                f"{_f(e.median_ms)} ms (+{_f(e.excess_ms)} ms) — {_clip(e.cause)}"
            )
        for e in d.late_arrivals:
            lines.append(f"- rank {e.rank} steps {_ints(e.steps)}: {_f(e.value_ms)} ms against a median of "
                         f"{_f(e.median_ms)} ms — {_clip(e.cause)}")
    for v in s.ranks:
        if v.verdict == "straggler":
            lines.append(f"Straggler: rank {v.rank} arrives last at {v.arrived_last} of {v.matched_collectives} "
                         f"collectives; the others wait {_f(v.wait_caused_per_step_ms)} ms per step for it")
    waiting = [v.rank for v in s.ranks if v.verdict == "waits"]
    if waiting:
        lines.append(f"Only waiting for the straggler(s): rank {_ints(waiting)}")
    lines += [_finding_line(i, f) for i, f in enumerate(s.findings, 1)]
    lines += _warnings_text(s.warnings)
    return "\n".join(lines)


def text_slow_links(s: m.SlowLinks) -> str:
    lines = [
        f"{s.total} link(s), slowest first{f' (showing {len(s.links)})' if s.truncated else ''} — "
        f"{_profile_line(s.profile)}",
        "src->dst | transport | GB/s | median GB/s | MB | ms | steps",
    ]
    lines += [
        f"{lk.src}->{lk.dst} | {lk.transport} | {_f(lk.bandwidth_gbps)} | {_f(lk.median_gbps)} | "
        f"{_f(lk.size_mb)} | {_f(lk.time_ms, 3)} | {_ints(lk.steps)}"
        for lk in s.links
    ]
    lines += [_finding_line(i, f) for i, f in enumerate(s.findings, 1)]
    lines += _warnings_text(s.warnings)
    return "\n".join(lines)


def text_kernels(k: m.TopKernels) -> str:
    lines = [
        f"Top {len(k.kernels)} of {k.total} device ops by {k.by} — {_profile_line(k.profile)}",
        "name | op_type | core | count | total ms | mean ms | max ms | share % | % of step",
    ]
    for x in k.kernels:
        lines.append(
            f"{_clip(x.name, 80)} | {x.op_type or '-'} | {x.core_type or '-'} | {x.count} | "
            f"{_f(x.total_ms, 3)} | "
            f"{_f(x.mean_ms, 4)} | {_f(x.max_ms, 4)} | {_f(x.share_pct)} | {_f(x.step_share_pct)}"
        )
    lines += _warnings_text(k.warnings)
    return "\n".join(lines)


def text_env(e: m.EnvAudit) -> str:
    bad = [v for v in e.variables if v.status == "bad"]
    lines = [f"{e.total} environment variable(s), {len(bad)} bad shown first — {_profile_line(e.profile)}"]
    for v in e.variables:
        vals = sorted({x if x else "unset" for x in v.values_by_rank.values()})
        shown = " | ".join(vals[:4]) + (f" | … ({len(vals)} values)" if len(vals) > 4 else "")
        rec = f" (recommended: {v.recommended})" if v.recommended and v.status == "bad" else ""
        lines.append(f"- {v.name} = {shown}: {v.status}{rec}")
    lines += _warnings_text(e.warnings)
    return "\n".join(lines)


def text_comparison(c: m.Comparison) -> str:
    lines = [
        f"Verdict: {c.verdict}",
        f"base {c.base.path}: step {_f(c.base.step_ms)} ms; "
        f"target {c.target.path}: step {_f(c.target.step_ms)} ms",
        f"delta compute {_f(c.breakdown_delta.compute_ms)} ms, communication "
        f"{_f(c.breakdown_delta.communication_ms)} ms, free {_f(c.breakdown_delta.free_ms)} ms",
    ]
    if c.top_changes:
        lines.append(f"Top changes ({len(c.top_changes)} of {c.total_changes}; ms per step):")
        lines += [
            f"- {ch.kind} {_clip(ch.name, 80)}: {_f(ch.base_ms, 3)} -> {_f(ch.target_ms, 3)} "
            f"({ch.delta_ms:+.3f}), "
            f"calls {ch.count_base:g} -> {ch.count_target:g}"
            for ch in c.top_changes
        ]
    if c.env_changes:
        lines.append(
            "Environment changes: "
            + "; ".join(f"{e.name}: {e.base or 'unset'} -> {e.target or 'unset'}" for e in c.env_changes[:10])
        )
    if c.findings:
        lines.append("New findings in the target:")
        lines += [_finding_line(i, f) for i, f in enumerate(c.findings[:5], 1)]
    lines += [f"Note: {n}" for n in c.notes[:5]]
    if c.next_step:
        lines.append(f"Next: {mcp_hint(c.next_step)}")
    lines += _warnings_text(c.warnings)
    return "\n".join(lines)


def text_fixes(fl: m.FixList) -> str:
    lines = [f"{fl.total} fix(es)" + (f", showing {len(fl.fixes)}" if len(fl.fixes) < fl.total else "")]
    for f in fl.fixes:
        vendors = ",".join(getattr(f, "vendors", []) or [])
        checks = ",".join(getattr(f, "checks", []) or [])
        lines.append(f"- {f.id}: {f.title} [{vendors}; checks {checks}]")
    lines.append(
        "Next: explain(id=<fix id>) for the steps and code edit; resource stepdoctor://fixes/<fix id>."
    )
    return "\n".join(lines)


def text_what_if(w: WhatIf) -> str:
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


def text_critical_path(cp: CriticalPath) -> str:
    return cp.summary + "\n" + "\n".join(f"- {lk.kind} rank {lk.rank}: {lk.ms:.2f} ms ({lk.share_pct:.1f}%)"
                                          for lk in cp.links[:12])


def text_edit(res: m.EditSuggestion) -> str:
    lines = [res.diff or "(no change: the code already has the fix, or no spot to edit was found)"]
    lines += [f"- {msg}" for msg in res.messages[:10]]
    if not res.diff and res.template:
        lines.append(f"Edit by hand:\n{res.template}")
    return "\n".join(lines)


# The text of each answer, by the answer's model (a catalog output is one of these).
TEXTS: dict[type[BaseModel], Callable[[Any], str]] = {
    m.Breakdown: text_breakdown, m.SlowRanks: text_slow_ranks, m.SlowLinks: text_slow_links,
    m.TopKernels: text_kernels, m.EnvAudit: text_env, m.Comparison: text_comparison, m.FixList: text_fixes,
    m.Explanation: lambda e: explanation_markdown(e, mcp=True), m.EditSuggestion: text_edit,
    WhatIf: text_what_if, CriticalPath: text_critical_path, HangReport: render_hang, LoadedProfile: text_loaded,
}


def text_of(model: BaseModel, pid: str) -> str:
    """The short text of one answer (`pid`: the profile_id its next steps name)."""
    if isinstance(model, m.IssueReport):
        return text_issues(model, pid)
    text = TEXTS.get(type(model))
    return text(model) if text is not None else render_markdown(model)   # a new tool's model: its tables
