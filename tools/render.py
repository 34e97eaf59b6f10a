"""Terminal tables and Markdown for the tool outputs.

Every model is first turned into plain tables (title, header, rows); the same tables then print as a
rich table on a terminal or as Markdown (for chat, PR comments and `--format markdown`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from . import models as m


@dataclass
class Table:
    title: str
    header: list[str]
    rows: list[list[Any]]
    note: str = ""


def _f(x: Any, nd: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    if isinstance(x, list):
        return ",".join(map(str, x)) if len(x) <= 8 else f"{','.join(map(str, x[:8]))},… ({len(x)})"
    return str(x)


def _profile_line(p: Any) -> str:
    steps = _f(p.steps)
    return (f"{p.path}  [{p.format}]  ranks {_f(p.ranks)}  steps {steps}"
            + (f"  world size {p.world_size}" if p.world_size else ""))


def tables_for(model: BaseModel) -> list[Table]:
    """Plain tables for one output model."""
    if isinstance(model, m.Breakdown):
        cols = ["rank", "step", "step_ms", "compute_ms", "communication_ms", "comm_not_overlapped_ms", "overlapped_ms",
                "free_ms", "bubble_ms"]
        rows = [[_f(getattr(r, c)) for c in cols] for r in model.rows]
        tot = [[_f(r.rank), _f(r.steps)] + [_f(getattr(r, c)) for c in cols[2:]] for r in model.totals]
        return [Table("Breakdown per rank and step (ms)", cols, rows),
                Table("Totals per rank (ms)", ["rank", "steps", *cols[2:]], tot)]
    if isinstance(model, m.IssueReport):
        rows = [[i + 1, f.severity, f.check, _f(f.ranks), _f(f.steps), f.subject, _f(f.impact_ms),
                 _f(f.impact_pct), f.title, ", ".join(f.fixes[:2])] for i, f in enumerate(model.findings)]
        out = [Table(f"{len(model.findings)} finding(s)", ["#", "severity", "check", "ranks", "steps", "subject",
                                                         "impact_ms", "impact_%", "title", "fixes"], rows)]
        if model.not_applicable:
            out.append(Table("Checks not applicable", ["check", "why"],
                             [[k, v] for k, v in sorted(model.not_applicable.items())]))
        return out
    if isinstance(model, m.SlowRanks):
        out = []
        for d in model.dimensions:
            rows = [[e.rank, _f(e.steps), _f(e.value_ms), _f(e.excess_ms), _f(e.excess_pct, 1), e.cause]
                    for e in d.slow]
            rows += [[e.rank, _f(e.steps), _f(e.value_ms), f"-{_f(e.excess_ms)}", "late arrival", e.cause]
                     for e in d.late_arrivals]
            out.append(Table(f"{d.name}: median {_f(d.median_ms)} ms, spread {_f(d.spread_pct)}% of step",
                             ["rank", "steps", "value_ms", "excess_ms", "excess_%", "cause"], rows,
                             note="no slow rank" if not rows else ""))
        return out
    if isinstance(model, m.SlowLinks):
        rows = [[lk.src, lk.dst, lk.transport, _f(lk.bandwidth_gbps), _f(lk.median_gbps), _f(lk.size_mb),
                 _f(lk.time_ms, 3)] for lk in model.links]
        out = [Table(f"Links, slowest first ({model.total} in all)", ["src", "dst", "transport", "GB/s",
                                                                     "median GB/s", "MB", "ms"], rows)]
        out += tables_for(m.IssueReport(profile=model.profile, findings=model.findings))[:1]
        return out
    if isinstance(model, m.TopKernels):
        rows = [[k.name[:60], k.op_type or "-", k.core_type or "-", k.count, _f(k.total_ms, 3), _f(k.mean_ms, 4),
                 _f(k.max_ms, 4), _f(k.share_pct), _f(k.ranks), "; ".join(k.input_shapes[:1])] for k in model.kernels]
        return [Table(f"Top {len(model.kernels)} of {model.total} device ops by {model.by}",
                      ["name", "op_type", "core", "count", "total_ms", "mean_ms", "max_ms", "share_%", "ranks",
                       "input shapes"], rows)]
    if isinstance(model, m.Comparison):
        b, t, d = model.base, model.target, model.breakdown_delta
        head = [["step_ms", _f(b.step_ms), _f(t.step_ms), _f(model.delta_ms)],
                ["compute_ms", _f(b.compute_ms), _f(t.compute_ms), _f(d.compute_ms)],
                ["comm_not_overlapped_ms", _f(b.communication_ms), _f(t.communication_ms), _f(d.communication_ms)],
                ["free_ms", _f(b.free_ms), _f(t.free_ms), _f(d.free_ms)]]
        out = [Table(f"Verdict: {model.verdict}", ["per step (ms)", "base", "target", "delta"], head)]
        out.append(Table(f"Top changes ({len(model.top_changes)} of {model.total_changes})",
                         ["kind", "name", "base_ms", "target_ms", "delta_ms", "calls base", "calls target", "change"],
                         [[c.kind, c.name[:70], _f(c.base_ms, 3), _f(c.target_ms, 3), _f(c.delta_ms, 3),
                           _f(c.count_base, 1), _f(c.count_target, 1), c.change] for c in model.top_changes]))
        if model.env_changes or model.config_changes:
            out.append(Table("Environment and setup changes", ["name", "base", "target"],
                             [[e.name, e.base or "unset", e.target or "unset"]
                              for e in [*model.env_changes, *model.config_changes]]))
        if model.findings or model.gone_findings:
            out.append(Table("Findings new in the target / gone", ["", "severity", "check", "ranks", "title"],
                             [["new", f.severity, f.check, _f(f.ranks), f.title] for f in model.findings]
                             + [["gone", f.severity, f.check, _f(f.ranks), f.title] for f in model.gone_findings]))
        if model.notes:
            out.append(Table("Notes", ["note"], [[n] for n in model.notes]))
        return out
    if isinstance(model, m.EnvAudit):
        rows = []
        for v in model.variables:
            vals = sorted({x or "" for x in v.values_by_rank.values()})
            shown = " | ".join(repr(x) if x else "unset" for x in vals)
            rows.append([v.name, v.status, shown, v.recommended or "-"])
        return [Table("Environment audit", ["variable", "status", "value(s)", "recommended"], rows)]
    return []


def render_table(model: BaseModel) -> None:
    from rich.console import Console
    from rich.table import Table as RichTable

    console = Console()
    prof = getattr(model, "profile", None)
    if prof is not None:
        console.print(f"[bold]{_profile_line(prof)}[/bold]")
    if isinstance(model, m.Comparison):
        console.print(f"[bold]base[/bold] {model.base.path}  [bold]target[/bold] {model.target.path}")
        if model.next_step:
            console.print(f"next: {model.next_step}")
    for t in tables_for(model):
        rt = RichTable(title=t.title, title_justify="left", show_lines=False)
        for h in t.header:
            rt.add_column(h, overflow="fold")
        for r in t.rows:
            rt.add_row(*[str(x) for x in r])
        console.print(rt)
        if t.note:
            console.print(f"  {t.note}")
    if isinstance(model, m.IssueReport):
        for i, f in enumerate(model.findings, 1):
            if f.severity != "low":
                console.print(f"[bold]{i}.[/bold] {f.message}")
    _print_warnings(getattr(model, "warnings", []), console.print)


def _print_warnings(warnings: Iterable[str], out) -> None:
    ws = list(warnings)
    if ws:
        out("warnings:")
        for w in ws:
            out(f"  - {w}")


def render_markdown(model: BaseModel) -> str:
    lines: list[str] = []
    prof = getattr(model, "profile", None)
    if prof is not None:
        lines += [f"**Profile** `{prof.path}` ({prof.format}); ranks {_f(prof.ranks)}; steps {_f(prof.steps)}", ""]
    for t in tables_for(model):
        lines += [f"### {t.title}", ""]
        if t.rows:
            lines.append("| " + " | ".join(t.header) + " |")
            lines.append("|" + "---|" * len(t.header))
            for r in t.rows:
                lines.append("| " + " | ".join(str(x).replace("|", "\\|") for x in r) + " |")
        if t.note:
            lines.append(t.note)
        lines.append("")
    if isinstance(model, m.IssueReport):
        for i, f in enumerate(model.findings, 1):
            lines.append(f"{i}. **{f.severity}** `{f.check}` — {f.message}"
                         + (f" Fixes: {', '.join(f'`{x}`' for x in f.fixes)}." if f.fixes else ""))
        lines.append("")
    ws = getattr(model, "warnings", [])
    if ws:
        lines += ["**Warnings**", ""] + [f"- {w}" for w in ws] + [""]
    return "\n".join(lines)
