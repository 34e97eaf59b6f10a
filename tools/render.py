"""Terminal tables and Markdown for the tool outputs.

Every model is first turned into plain tables (title, header, rows); the same tables then print as a
rich table on a terminal or as Markdown (for chat, PR comments and `--format markdown`).

On a terminal a table is fitted to the console's width (PIPED_WIDTH columns when output is piped, unless
$COLUMNS says; left to rich, the 10-column findings table folds every cell to a few letters): short columns (ranks, numbers, check
ids) never wrap and get the width they need; the width left goes to the free-text columns
(`Table.text`) and name columns (`Table.names`: kernel and op names, C++ signatures of hundreds of
characters), narrowest first, each its need or an equal share of the rest (`render_fit.flex_widths`). Text
wraps at spaces, then inside long values at separators (`render_fit.Wrapper`); names are shortened to one line
(`display_name`). The columns in `Table.optional` are left out, first listed first, while the rest
does not fit (or always when nothing in them is known). Headers are the JSON field names made
readable (`render_fit.column_label`). Everything is printed as rich `Text`, never as markup. JSON output is
never shortened.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel

from ..analysis.replay.models import CriticalPath, WhatIf
from ..analysis.text import RANK_OK_TEXT
from . import models as m
from .render_fit import Table, column_label, fit_table, hanging, shorten_names

NAME_WIDTH = 80   # a name column's width in Markdown (no terminal to fit)
# piped output (a file, `| less`, CI logs) has no terminal width: rich's 80 would drop the findings table's
# steps and share columns; $COLUMNS still decides where it is set
PIPED_WIDTH = 120


def fmt_value(x: Any, nd: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    if isinstance(x, list):
        if x and all(type(v) is int for v in x):
            return _ranges(x)
        return ",".join(map(str, x)) if len(x) <= 8 else f"{','.join(map(str, x[:8]))},… ({len(x)})"
    return str(x)


def _ranges(ids: Sequence[int], most: int = 6) -> str:
    """Sorted ids with runs collapsed: [0, 1, 2, 3, 7, 9, 10] -> "0-3,7,9-10"; beyond `most` runs, the
    first ones and the count ("0-3,5,… (1,020)")."""
    runs: list[list[int]] = []
    for v in sorted(set(ids)):
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    parts = [str(a) if a == b else f"{a}-{b}" for a, b in runs]
    if len(parts) > most:
        return f"{','.join(parts[:most - 1])},… ({sum(b - a + 1 for a, b in runs):,})"
    return ",".join(parts)


def _dimension(d: Any) -> str:
    """A slow-ranks dimension with the breakdown field it compares where that is not `<name>_ms` (free is the
    breakdown's idle_ms, not its free_ms): the two views never show one name for two numbers."""
    col = getattr(d, "measures", None)
    return d.name if not col or col == f"{d.name}_ms" else f"{d.name} (= {column_label(col, '(ms)')})"


def _not_applicable(why: dict[str, str]) -> Table:
    """The checks that could not run, and why. Checks made for other vendors' profiles are one row ("12 checks
    made for ascend profiles"), not a row each: a GPU profile is not missing them, they are not its checks."""
    other: dict[str, list[str]] = {}
    rows = []
    for k, v in sorted(why.items()):
        if v.startswith("applies to ") and v.endswith(" profiles"):
            other.setdefault(v.removeprefix("applies to ").removesuffix(" profiles"), []).append(k)
        else:
            rows.append([k, v])
    for vendors, ids in sorted(other.items(), key=lambda x: -len(x[1])):
        rows.append([f"{len(ids)} check{'s' if len(ids) > 1 else ''}", f"made for {vendors} profiles: "
                     f"{', '.join(ids)}"])
    return Table("Checks not applicable", ["check", "why"], rows, text=("why",))


def _profile_line(p: Any, width: int) -> str:
    """Path, format, ranks, steps, world size, separated by two spaces; broken into lines of `width` only
    between those fields (a long path gets a line of its own, "world size 8" is never split)."""
    dropped = getattr(p, "dropped_steps", None)
    steps = f"steps {fmt_value(p.steps)}" + (f" (dropped {fmt_value(dropped)}: partial)" if dropped else "")
    fields = [p.path, f"[{p.format}]", f"ranks {fmt_value(p.ranks)}", steps]
    fields += [f"world size {p.world_size}"] if p.world_size else []
    miss = getattr(p, "missing_ranks", None) or []
    fields += [f"missing {'rank' if len(miss) == 1 else 'ranks'} {fmt_value(miss)}"] if miss else []
    lines = [fields[0]]
    for x in fields[1:]:
        if len(lines[-1]) + 2 + len(x) <= width:
            lines[-1] += "  " + x
        else:
            lines.append(x)
    return "\n".join(lines)


def _what_if_tables(w: WhatIf) -> list[Table]:
    rep = [[x.step, fmt_value(x.measured_ms), fmt_value(x.replayed_ms), fmt_value(x.error_pct),
            "no" if x.step in w.replay.abstained_steps else "yes"] for x in w.replay.steps]
    out = [Table(f"Null replay (steps off by more than {w.replay.max_error_pct:g}% are not used)",
                 ["step", "measured_ms", "replayed_ms", "error_%", "used"], rep, note=w.replay.reason or "")]
    for sc in w.scenarios:
        out.append(Table(f"What if: {sc.change} -> {sc.predicted_step_ms:.2f} ms per step ({sc.delta_ms:+.2f} ms)",
                         ["step", "predicted_ms", "delta_ms"],
                         [[x.step, fmt_value(x.predicted_ms), fmt_value(x.delta_ms)] for x in sc.steps]))
    if w.slowdown:
        sd = w.slowdown
        rows = [["rank", k, fmt_value(v)] for k, v in sorted(sd.by_rank.items(), key=lambda kv: -kv[1])[:8]]
        rows += [["stage", k, fmt_value(v)] for k, v in sorted(sd.by_stage.items())]
        rows += [["op type", k, fmt_value(v)] for k, v in sd.by_op_type.items()]
        out.append(Table(f"Slowdown S = {sd.S:.3f} ({sd.measured_ms:.2f} ms measured, {sd.ideal_ms:.2f} ms ideal)",
                         ["by", "which", "S"], rows, note=f"Verdict: {w.verdict}"))
    return out


def tables_for(model: BaseModel) -> list[Table]:
    """Plain tables for one output model."""
    if isinstance(model, m.Breakdown):
        # step = compute + comm not overlapped + free + other: the columns a reader adds up; communication
        # and overlapped are shown beside them (overlapped time is inside compute)
        cols = ["rank", "step", "step_ms", "compute_ms", "comm_not_overlapped_ms", "free_ms", "other_ms",
                "communication_ms", "overlapped_ms", "bubble_ms"]
        rows = [[fmt_value(_cell(r, c)) for c in cols] for r in model.rows]
        tot = [[fmt_value(r.rank), fmt_value(r.steps)] + [fmt_value(_cell(r, c)) for c in cols[2:]] for r in model.totals]
        unknown = ("overlapped_ms", "bubble_ms", "other_ms")  # not every profile has them
        return [Table("Breakdown per rank and step (ms)", cols, rows, optional=unknown),
                Table("Totals per rank (ms)", ["rank", "steps", *cols[2:]], tot, optional=unknown)]
    if isinstance(model, m.IssueReport):
        rows = [[n if n is not None else "-", f.severity, f.check, fmt_value(f.ranks), fmt_value(f.steps), f.subject,
                 fmt_value(f.impact_ms), fmt_value(f.impact_pct), f.title, ", ".join(f.fixes[:2])]
                for n, f in model.numbered()]
        out = [Table(f"{len(model.findings)} finding(s)", ["#", "severity", "check", "ranks", "steps", "subject",
                                                         "impact_ms", "impact_%", "title", "fixes"], rows,
                     text=("title",), names=("subject",), optional=("fixes", "subject", "steps", "impact_%"),
                     empty="no check fired")]
        if model.not_applicable:
            out.append(_not_applicable(model.not_applicable))
        return out
    if isinstance(model, m.SlowRanks):
        return _slow_rank_tables(model)
    if isinstance(model, WhatIf):
        return _what_if_tables(model)
    if isinstance(model, CriticalPath):
        rows = [[lk.kind, lk.rank, fmt_value(lk.collective), fmt_value(lk.start_ms), fmt_value(lk.ms),
                 fmt_value(lk.share_pct)] for lk in model.links]
        return [Table(f"Critical path of step {model.step} ({model.step_ms:.2f} ms; replay error "
                      f"{model.replay_error_pct:.2f}%)", ["link", "rank", "collective", "start_ms", "ms", "share_%"],
                      rows, note=model.summary)]
    if isinstance(model, m.SlowLinks):
        rows = [[lk.src, lk.dst, lk.transport, fmt_value(lk.bandwidth_gbps), fmt_value(lk.median_gbps), fmt_value(lk.size_mb),
                 fmt_value(lk.time_ms, 3)] for lk in model.links]
        out = [Table(f"Links, slowest first ({model.total} in all)", ["src", "dst", "transport", "GB/s",
                                                                     "median GB/s", "MB", "ms"], rows,
                     empty="no link-level communication data in this profile")]
        out += tables_for(m.IssueReport(profile=model.profile, findings=model.findings))[:1]
        return out
    if isinstance(model, m.TopKernels):
        rows = [[k.name, k.op_type or "-", k.core_type or "-", k.count, fmt_value(k.total_ms, 3), fmt_value(k.mean_ms, 4),
                 fmt_value(k.max_ms, 4), fmt_value(k.share_pct), fmt_value(k.ranks), "; ".join(k.input_shapes[:1]) or "-"]
                for k in model.kernels]
        return [Table(f"Top {len(model.kernels)} of {model.total} device ops by {model.by}",
                      ["name", "op_type", "core", "count", "total_ms", "mean_ms", "max_ms", "share_%", "ranks",
                       "input shapes"], rows, names=("name",), text=("input shapes",),
                      optional=("input shapes", "core", "op_type", "max_ms", "ranks"))]
    if isinstance(model, m.Comparison):
        b, t, d = model.base, model.target, model.breakdown_delta
        head = [["step time", fmt_value(b.step_ms), fmt_value(t.step_ms), fmt_value(model.delta_ms)],
                ["compute", fmt_value(b.compute_ms), fmt_value(t.compute_ms), fmt_value(d.compute_ms)],
                ["comm not overlapped", fmt_value(b.communication_ms), fmt_value(t.communication_ms), fmt_value(d.communication_ms)],
                ["free", fmt_value(b.free_ms), fmt_value(t.free_ms), fmt_value(d.free_ms)]]
        out = [Table("Per step (ms)", ["", "base", "target", "delta"], head)]
        out.append(Table(f"Top changes ({len(model.top_changes)} of {model.total_changes})",
                         ["kind", "name", "base_ms", "target_ms", "delta_ms", "calls base", "calls target", "change"],
                         [[c.kind, c.name, fmt_value(c.base_ms, 3), fmt_value(c.target_ms, 3), fmt_value(c.delta_ms, 3),
                           _calls(c.count_base), _calls(c.count_target), c.change] for c in model.top_changes],
                         names=("name",), optional=("kind", ("calls base", "calls target"))))
        if model.env_changes or model.config_changes:
            out.append(Table("Environment and setup changes", ["name", "base", "target"],
                             [[e.name, e.base or "unset", e.target or "unset"]
                              for e in [*model.env_changes, *model.config_changes]], text=("base", "target")))
        if model.findings or model.gone_findings:
            out.append(Table("Findings new in the target / gone", ["", "severity", "check", "ranks", "title"],
                             [["new", f.severity, f.check, fmt_value(f.ranks), f.title] for f in model.findings]
                             + [["gone", f.severity, f.check, fmt_value(f.ranks), f.title] for f in model.gone_findings],
                             text=("title",)))
        if model.notes:
            out.append(Table("Notes", ["note"], [[n] for n in model.notes], text=("note",)))
        return out
    if isinstance(model, m.EnvAudit):
        rows = []
        for v in model.variables:
            vals = sorted({x or "" for x in v.values_by_rank.values()})
            shown = " | ".join(repr(x) if x else "unset" for x in vals)
            rows.append([v.name, v.status, shown, v.recommended or "-"])
        return [Table("Environment audit", ["variable", "status", "value(s)", "recommended"], rows,
                      text=("value(s)", "recommended"), empty="no environment variables recorded")]
    if isinstance(model, m.FixList):
        rows = [[f.id, ", ".join(f.vendors), ", ".join(f.checks), f.title] for f in model.fixes]
        more = f" (first {len(model.fixes)})" if model.truncated else ""
        return [Table(f"{model.total} fixes{more}", ["id", "vendors", "checks", "title"], rows,
                      text=("checks", "title"), optional=("vendors", "checks"))]
    return generic_tables(model)


def _scalar(v: Any) -> bool:
    return v is None or isinstance(v, str | int | float | bool)


def generic_tables(model: BaseModel) -> list[Table]:
    """The tables of an answer no view above knows (a new tool's model): its plain fields as one table,
    each list of records as a table of their plain fields; nested records and maps stay for --format json."""
    out: list[Table] = []
    plain = [[name, fmt_value(v)] for name, v in model if _scalar(v) or (isinstance(v, list) and all(map(_scalar, v)))]
    if plain:
        out.append(Table(type(model).__name__, ["field", "value"], plain, text=("value",)))
    for name, v in model:
        if isinstance(v, list) and v and all(isinstance(x, BaseModel) for x in v):
            cols = [c for c, x in v[0] if _scalar(x)]
            out.append(Table(name, cols, [[fmt_value(getattr(x, c)) for c in cols] for x in v]))
    return out


def _slow_rank_tables(model: m.SlowRanks) -> list[Table]:
    """Per dimension its median and spread and the ranks named; then the ranks beyond the median with their
    baseline (ms per step, no percentage: over a median of 0.25 ms a percentage says nothing); then every
    rank that is not simply ok (straggler, waits, slow). No empty table: "none" is a cell."""
    named = {d.name: [e.rank for e in d.slow] for d in model.dimensions}
    dims = Table("Dimensions: the median rank per step (ms)", ["dimension", "median_ms", "spread_%_of_step",
                                                                "slower ranks"],
                 [[_dimension(d), fmt_value(d.median_ms), fmt_value(d.spread_pct),
                   fmt_value(named[d.name]) if named[d.name] else "none"] for d in model.dimensions])
    out = [dims]
    rows = [[d.name, e.rank, fmt_value(e.steps), fmt_value(e.value_ms), fmt_value(e.median_ms), f"+{fmt_value(e.excess_ms)}", e.cause]
            for d in model.dimensions for e in d.slow]
    rows += [[d.name, e.rank, fmt_value(e.steps), fmt_value(e.value_ms), fmt_value(e.median_ms),
              f"-{fmt_value(e.excess_ms)}", e.cause] for d in model.dimensions for e in d.late_arrivals]
    if rows:
        out.append(Table("Ranks beyond the median, in the steps named (ms per step)",
                         ["dimension", "rank", "steps", "value_ms", "median_ms", "excess_ms", "cause"], rows,
                         text=("cause",)))
    verdicts = [v for v in model.ranks if v.verdict != "ok"]
    if verdicts:
        ok = len(model.ranks) - len(verdicts)
        out.append(Table("Ranks by verdict", ["rank", "verdict", "arrived last", "others wait ms/step", "why"],
                         [[v.rank, v.verdict + (f" for {fmt_value(v.waits_for)}" if v.waits_for else ""),
                           f"{v.arrived_last} of {v.matched_collectives}" if v.arrived_last else "-",
                           fmt_value(v.wait_caused_per_step_ms) if v.arrived_last else "-",
                           v.finding or v.cause] for v in verdicts],
                         note=f"{ok} other rank(s): {RANK_OK_TEXT}" if ok else "",
                         text=("why",)))
    elif model.ranks:
        dims.note = f"all {len(model.ranks)} ranks ok: {RANK_OK_TEXT}"
    return out


def _cell(r: Any, col: str) -> Any:
    """A breakdown cell; `other_ms` is what the step holds beyond compute, exposed communication and free
    (preparing before the first device task, host time outside the device window), so the row adds up."""
    if col != "other_ms":
        return getattr(r, col)
    parts = (r.step_ms, r.compute_ms, r.comm_not_overlapped_ms, r.free_ms)
    if any(x is None for x in parts):
        return None
    other = parts[0] - parts[1] - parts[2] - parts[3]
    return other if abs(other) >= 0.005 else 0.0


def _calls(x: float | None) -> str:
    """Calls per step: whole counts without decimals."""
    return fmt_value(x, 0 if x is None or float(x).is_integer() else 1)


def render_table(model: BaseModel) -> None:
    from rich.console import Console
    from rich.text import Text

    # Everything printed is Text, never a str: rich would read "[ascend_pt]" in a profile line or a
    # "[...]" in a path or a kernel name as markup and drop it.
    console = Console(width=None if sys.stdout.isatty() or os.environ.get("COLUMNS") else PIPED_WIDTH)
    prof = getattr(model, "profile", None)
    if prof is not None:
        console.print(Text(_profile_line(prof, console.width), style="bold"))
    if isinstance(model, m.Comparison):
        console.print(Text.assemble(("base", "bold"), f" {model.base.path}  ", ("target", "bold"),
                                    f" {model.target.path}"))
        console.print(Text(f"Verdict: {model.verdict}"), style="bold")
        if model.next_step:
            console.print(Text(f"next: {model.next_step}"))
    for t in tables_for(model):
        if not t.rows:   # a header over no rows reads as a failure; one line says what is empty
            console.print(Text(f"{t.title}: {t.empty}"))
        else:
            console.print(fit_table(t, console.width))
        if t.note:
            console.print(Text(f"  {t.note}"))
    if isinstance(model, m.IssueReport):
        for n, f in model.numbered():
            if f.severity != "low":
                head = f"{n if n is not None else '-'}. "
                console.print(Text.assemble((head, "bold"), hanging(f.message, len(head), console.width)))
                if f.fixes:
                    head = " " * len(head) + "fixes: "
                    console.print(Text(head + hanging(", ".join(f.fixes), len(head), console.width)))
    _print_warnings(getattr(model, "warnings", []), console)


def _print_warnings(warnings: Iterable[str], console: Any) -> None:
    """Each warning as a hanging "  - " item; as plain Text, since a warning quotes file names and cells
    that may hold rich markup ("[red]")."""
    from rich.text import Text

    ws = list(warnings)
    if ws:
        console.print("warnings:")
        for w in ws:
            console.print(Text("  - " + hanging(w, 4, console.width)))


def render_markdown(model: BaseModel) -> str:
    lines: list[str] = []
    prof = getattr(model, "profile", None)
    if prof is not None:
        lines += [f"**Profile** `{prof.path}` ({prof.format}); ranks {fmt_value(prof.ranks)}; steps {fmt_value(prof.steps)}", ""]
    if isinstance(model, m.Comparison):
        lines += [f"**Verdict:** {model.verdict}", ""] + ([f"Next: `{model.next_step}`", ""] if model.next_step else [])
    lines += markdown_tables(tables_for(model))
    if isinstance(model, m.IssueReport):
        for n, f in model.numbered():
            lines.append(f"{n if n is not None else '-'}. **{f.severity}** `{f.check}` — {f.message}"
                         + (f" Fixes: {', '.join(f'`{x}`' for x in f.fixes)}." if f.fixes else ""))
        lines.append("")
    ws = getattr(model, "warnings", [])
    if ws:
        lines += ["**Warnings**", ""] + [f"- {w}" for w in ws] + [""]
    return "\n".join(lines)


def markdown_tables(tables: Iterable[Table]) -> list[str]:
    """Markdown lines of tables: every column, names shortened to NAME_WIDTH (`display_names`)."""
    lines: list[str] = []
    for t in tables:
        lines += [f"### {t.title}", ""]
        if not t.rows:
            lines.append(t.empty[:1].upper() + t.empty[1:] + ".")
        else:
            cells = [[str(x) for x in r] for r in t.rows]
            shorten_names(t, cells, NAME_WIDTH)
            lines.append("| " + " | ".join(t.header) + " |")
            lines.append("|" + "---|" * len(t.header))
            for r in cells:
                lines.append("| " + " | ".join(x.replace("|", "\\|") for x in r) + " |")
        if t.note:
            lines.append(t.note)
        lines.append("")
    return lines
