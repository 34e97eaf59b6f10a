"""`stepdoctor report`: one self-contained HTML file per profile.

Everything is inline (CSS, SVG charts, no script, no font or CDN), so the file opens offline and can be
attached to a ticket. The numbers come from the tool catalog (`tools/api.py`, `tools/compare.py`) and the
fix texts from the knowledge base; this module only lays them out:

- overview: the profile header, mean step time per rank, the breakdown per rank as a stacked bar chart
  (compute, exposed communication, free, other — they add up to the step time) and two rank × step
  heatmaps (compute and free);
- findings by priority (high / medium / low colours), each with its evidence, fixes (title and the code
  edit template of the knowledge base) and message;
- top kernels, environment audit, communication links, warnings;
- with `compare_base`: the comparison (verdict, deltas, top changes).

The charts and findings carry stable `id` / `data-*` attributes (`svg#chart-breakdown`,
`svg#heatmap-compute`, `svg#heatmap-free`, `section.finding[data-check][data-severity]`,
`table#table-kernels` ...) so tests and scripts can find them.
"""

from __future__ import annotations

import logging
import os
import statistics
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from .. import __version__
from ..analysis.ingest.base import ProfileError
from ..analysis.metrics.breakdown import BreakdownRow, per_step, standing_out
from ..analysis.models import Finding
from ..analysis.store import Profile
from . import api
from . import models as m

logger = logging.getLogger(__name__)

SEVERITY_COLOURS = {"high": "#B5495B", "medium": "#fcaf17", "low": "#65c294"}
# Stacked bar segments; together they are the host step time.
SEGMENTS: list[tuple[str, str, str]] = [
    ("compute", "compute", "#3b6ea8"),
    ("comm", "communication not overlapped", "#e07b39"),
    ("free", "free (device idle)", "#a9b4c2"),
    ("other", "other (host lead-in, memory / sync ops)", "#8c6bb1"),
]
HEAT_COLOURS = {"compute": (204, 102, 0), "free": (181, 73, 91)}   # above the median; below: BELOW_MEDIAN_RGB
MAX_CHART_RANKS = 128  # more ranks than this: those that stand out are drawn (_rank_selection)
MAX_HEAT_STEPS = 60
TOP_KERNELS = 15
TOP_LINKS = 20


# ------------------------------------------------------------------------------------------------------
# Chart geometry (computed here, written out by the template so every string is escaped)
# ------------------------------------------------------------------------------------------------------


@dataclass
class Rect:
    x: float
    y: float
    w: float
    h: float
    fill: str
    title: str
    key: str = ""
    label: str = ""
    label_fill: str = "#1d232b"


@dataclass
class Text:
    x: float
    y: float
    text: str
    anchor: str = "start"
    size: int = 11
    cls: str = ""


@dataclass
class Chart:
    id: str
    title: str
    width: int
    height: int
    rects: list[Rect] = field(default_factory=list)
    texts: list[Text] = field(default_factory=list)
    lines: list[tuple[float, float, float, float]] = field(default_factory=list)
    legend: list[tuple[str, str]] = field(default_factory=list)
    note: str = ""
    data: dict[str, str] = field(default_factory=dict)


def _nice_max(v: float) -> float:
    """A round axis maximum >= v (1, 2, 2.5, 5 x 10^k)."""
    if v <= 0:
        return 1.0
    import math

    exp = 10 ** math.floor(math.log10(v))
    for f in (1, 2, 2.5, 5, 10):
        if f * exp >= v:
            return f * exp
    return 10 * exp


def _rank_selection(totals: list[BreakdownRow]) -> tuple[list[BreakdownRow], int]:
    """The ranks a chart draws (`standing_out`, at most MAX_CHART_RANKS) and how many it leaves out."""
    kept = standing_out(totals, MAX_CHART_RANKS)
    return kept, len(totals) - len(kept)


def breakdown_chart(totals: list[BreakdownRow]) -> Chart | None:
    """Horizontal stacked bars, one per rank: mean ms per step of compute / exposed comm / free / other."""
    rows, omitted = _rank_selection(totals)
    if not rows or all(t.step_ms is None for t in rows):
        return None
    means = []
    for t in rows:
        step = per_step(t.step_ms, t.steps) or 0.0
        comp = per_step(t.compute_ms, t.steps) or 0.0
        comm = per_step(t.comm_not_overlapped_ms, t.steps) or 0.0
        free = per_step(t.free_ms, t.steps) or 0.0
        other = max(step - comp - comm - free, 0.0)
        means.append((t.rank, step, {"compute": comp, "comm": comm, "free": free, "other": other}))
    top = _nice_max(max(max(step, sum(seg.values())) for _, step, seg in means))
    left, right, bar_h, gap, top_pad = 70, 30, 18, 6, 34
    width = 960
    plot_w = width - left - right
    height = top_pad + len(means) * (bar_h + gap) + 40
    ch = Chart(
        id="chart-breakdown",
        title="Mean time per step by rank (ms)",
        width=width,
        height=height,
        legend=[(label, colour) for _, label, colour in SEGMENTS],
        data={"ranks": str(len(means)), "max-ms": f"{top:g}"},
    )
    scale = plot_w / top
    for i, (rank, step, seg) in enumerate(means):
        y = top_pad + i * (bar_h + gap)
        ch.texts.append(Text(left - 8, y + bar_h * 0.72, f"rank {rank}", anchor="end"))
        x = float(left)
        for key, label, colour in SEGMENTS:
            w = seg[key] * scale
            if w <= 0:
                continue
            ch.rects.append(Rect(x, y, w, bar_h, colour, f"rank {rank} {label}: {seg[key]:.3f} ms", key=key))
            x += w
        ch.texts.append(Text(x + 4, y + bar_h * 0.72, f"{step:.2f}", size=10, cls="value"))
    axis_y = top_pad + len(means) * (bar_h + gap)
    ch.lines.append((left, axis_y, left + plot_w, axis_y))
    for k in range(5):
        v = top * k / 4
        x = left + v * scale
        ch.lines.append((x, top_pad - 4, x, axis_y))
        ch.texts.append(Text(x, axis_y + 14, f"{v:g}", anchor="middle", size=10))
    if omitted:
        ch.note = f"{omitted} rank(s) nearest the median not drawn; the table lists every rank"
    return ch


# Colour for cells below the median (faster / less idle than the typical rank).
BELOW_MEDIAN_RGB = (76, 120, 168)
# The colour scale spans at least +-10% of the median: differences of a few hundredths of a percent
# (synchronous training equalises step time) stay white instead of spanning the whole scale.
MIN_HEAT_SPAN = 0.10


def _heat_colour(rgb: tuple[int, int, int], t: float) -> str:
    """White -> rgb as t goes 0 -> 1."""
    t = min(max(t, 0.0), 1.0)
    r, g, b = (round(255 + (c - 255) * t) for c in rgb)
    return f"#{r:02x}{g:02x}{b:02x}"


def _deviation_colour(rgb: tuple[int, int, int], dev: float, span: float) -> tuple[str, float]:
    """(fill, |t|) of a cell `dev` (fraction above the median; negative below) on a scale of +-span."""
    t = max(-1.0, min(1.0, dev / span))
    return _heat_colour(rgb if t >= 0 else BELOW_MEDIAN_RGB, abs(t)), abs(t)


def heatmap(rows: list[BreakdownRow], metric: str, totals: list[BreakdownRow]) -> Chart | None:
    """Ranks (rows) x steps (columns); colour = deviation of `metric` (compute or free, ms) from the median
    cell, white at the median, the metric's colour above it, blue below, on a symmetric scale of at least
    +-MIN_HEAT_SPAN that is drawn beside the map."""
    attr = f"{metric}_ms"
    ranks = [t.rank for t in _rank_selection(totals)[0]]
    steps = sorted({r.step for r in rows if r.step is not None})[:MAX_HEAT_STEPS]
    vals = {(r.rank, r.step): getattr(r, attr) for r in rows}
    present = [v for (rk, st), v in vals.items() if v is not None and rk in ranks and st in steps]
    if not ranks or not steps or not present:
        return None
    lo, hi = min(present), max(present)
    med = statistics.median(present)
    span = max(MIN_HEAT_SPAN, *(abs(v - med) / med for v in present)) if med > 0 else 1.0
    cell_w = max(min(720 // len(steps), 90), 14)
    cell_h = 22 if len(ranks) <= 32 else 12
    left, top_pad = 70, 36
    width = left + cell_w * len(steps) + 170
    height = max(top_pad + cell_h * len(ranks) + 20, top_pad + 252)  # room for the colour scale
    rgb = HEAT_COLOURS[metric]
    ch = Chart(id=f"heatmap-{metric}", title=f"{metric.capitalize()} time per rank and step: deviation from "
               f"the median {med:.2f} ms", width=width, height=height,
               data={"metric": metric, "ranks": str(len(ranks)), "steps": str(len(steps)), "min-ms": f"{lo:.3f}",
                     "max-ms": f"{hi:.3f}", "median-ms": f"{med:.3f}", "span-pct": f"{span * 100:.1f}"})
    for j, st in enumerate(steps):
        ch.texts.append(Text(left + (j + 0.5) * cell_w, top_pad - 8, f"step {st}" if cell_w >= 50 else str(st),
                             anchor="middle", size=10))
    for i, rk in enumerate(ranks):
        y = top_pad + i * cell_h
        ch.texts.append(Text(left - 8, y + cell_h * 0.7, f"rank {rk}", anchor="end", size=10 if cell_h < 20 else 11))
        for j, st in enumerate(steps):
            v = vals.get((rk, st))
            fill, t = ("#eeeeee", 0.0) if v is None else _deviation_colour(rgb, (v - med) / med if med else 0.0,
                                                                          span)
            dev = "" if v is None or not med else f" ({(v - med) / med * 100:+.1f}% vs median)"
            label = f"{v:.2f}" if v is not None and cell_w >= 50 and cell_h >= 20 else ""
            ch.rects.append(Rect(left + j * cell_w, y, cell_w - 1, cell_h - 1, fill,
                                 f"rank {rk} step {st}: {'n/a' if v is None else f'{v:.3f} ms'}{dev}",
                                 key=f"{rk}:{st}", label=label, label_fill="#ffffff" if t > 0.6 else "#1d232b"))
    _deviation_scale(ch, left + cell_w * len(steps) + 24, top_pad, rgb, med, span)
    return ch


def _deviation_scale(ch: Chart, sx: float, top: float, rgb: tuple[int, int, int], med: float, span: float) -> None:
    """The colour scale: +span at the top, the median (white) in the middle, -span at the bottom."""
    n = 21
    for k in range(n):
        dev = span * (1 - 2 * k / (n - 1))
        ch.rects.append(Rect(sx, top + k * 10, 14, 10, _deviation_colour(rgb, dev, span)[0],
                             f"scale {dev * 100:+.0f}%"))
    ch.texts.append(Text(sx + 20, top + 9, f"+{span * 100:.0f}% ({med * (1 + span):.2f} ms)", size=10))
    ch.texts.append(Text(sx + 20, top + 10 * (n // 2) + 8, f"median {med:.2f} ms", size=10))
    ch.texts.append(Text(sx + 20, top + 10 * n - 1, f"-{span * 100:.0f}% ({med * (1 - span):.2f} ms)", size=10))


# ------------------------------------------------------------------------------------------------------
# Fix texts from the knowledge base
# ------------------------------------------------------------------------------------------------------


@dataclass
class FixView:
    id: str
    title: str
    before: str | None = None
    after: str | None = None
    env: list[str] = field(default_factory=list)
    known: bool = True
    shown_in: int | None = None  # finding number whose card already shows this fix's code edit


def _fix_views(ids: list[str], framework: str | None, n: int, seen: dict[str, int]) -> list[FixView]:
    """Title and code-edit template of each fix id; an id the knowledge base lacks is still shown.

    A fix shared by several findings (e.g. shape alignment) shows its template once, in the first
    finding; later cards point back to it, which keeps the report readable.
    """
    try:
        from ..knowledge.loader import get_fix
    except ImportError:
        return [FixView(id=i, title=i, known=False) for i in ids]
    out = []
    for fid in ids:
        try:
            fix = get_fix(fid)
        except KeyError:
            out.append(FixView(id=fid, title=fid, known=False))
            continue
        if fid in seen:
            out.append(FixView(id=fix.id, title=fix.title, shown_in=seen[fid]))
            continue
        seen[fid] = n
        edits = list(fix.code_edit)
        edit = next((e for e in edits if e.framework == framework), None) or (edits[0] if edits else None)
        env = [f"{e.name}={e.value}" if e.value is not None else f"unset {e.name}" for e in fix.env]
        out.append(
            FixView(
                id=fix.id,
                title=fix.title,
                before=edit.before if edit else None,
                after=edit.after if edit else None,
                env=env,
            )
        )
    return out


@dataclass
class EvidenceItem:
    key: str
    text: str = ""
    rows: list[tuple[str, str]] = field(default_factory=list)  # nested: per rank, per op ...


def _fmt(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, str):
        return v if v else "''"
    if isinstance(v, list):
        head = ", ".join(_fmt(x) for x in v[:12])
        return head + (f", … ({len(v)})" if len(v) > 12 else "")
    if isinstance(v, dict):
        return "; ".join(f"{k}={_fmt(x)}" for k, x in list(v.items())[:16])
    return str(v)


def _evidence_items(ev: dict[str, Any]) -> list[EvidenceItem]:
    """Evidence as rows; a dict of dicts (per rank) or a list of dicts (per op) becomes a nested table."""
    out = []
    for k, v in ev.items():
        if isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):
            out.append(EvidenceItem(str(k), rows=[(str(sk), _fmt(sv)) for sk, sv in list(v.items())[:32]]))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            out.append(EvidenceItem(str(k), rows=[(str(i), _fmt(x)) for i, x in enumerate(v[:32], 1)]))
        else:
            out.append(EvidenceItem(str(k), text=_fmt(v)))
    return out


# ------------------------------------------------------------------------------------------------------
# Rendering
# ------------------------------------------------------------------------------------------------------


def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("stepdoctor.tools", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )

    def ms(x: float | None, nd: int = 2) -> str:
        return "–" if x is None else f"{x:,.{nd}f}"

    def ints(xs: list[int]) -> str:
        if not xs:
            return "all"
        if len(xs) > 2 and xs == list(range(xs[0], xs[-1] + 1)):
            return f"{xs[0]}–{xs[-1]}"
        return ", ".join(map(str, xs[:16])) + (f", … ({len(xs)})" if len(xs) > 16 else "")

    env.filters["ms"] = ms
    env.filters["ints"] = ints
    return env


def _safe(label: str, fn: Any, warnings: list[str]) -> Any:
    """A report section that fails must not lose the whole report; it becomes a warning instead."""
    try:
        return fn()
    except ProfileError as e:
        warnings.append(f"{label}: {e}")
    except Exception as e:  # a bug in one section: keep the others, say which one is missing
        logger.warning("report section %s failed: %s: %s", label, type(e).__name__, e)
        logger.debug("report section %s", label, exc_info=True)
        warnings.append(f"{label}: not available ({type(e).__name__}: {e})")
    return None


def render_report(profile: api.ProfileRef, compare_base: api.ProfileRef | None = None) -> str:
    """The report HTML as a string."""
    prof = api.load(profile)
    section_warnings: list[str] = []
    bd: m.Breakdown | None = _safe("breakdown", lambda: api.breakdown(prof), section_warnings)
    rep: m.IssueReport | None = _safe("issues", lambda: api.issues(prof), section_warnings)
    kernels: m.TopKernels | None = _safe(
        "top kernels", lambda: api.top_kernels(prof, top=TOP_KERNELS), section_warnings
    )
    env_audit: m.EnvAudit | None = _safe("environment audit", lambda: api.env_audit(prof), section_warnings)
    links: m.SlowLinks | None = _safe(
        "links", lambda: api.slow_links(prof, limit=TOP_LINKS), section_warnings
    )
    comparison = None
    if compare_base is not None:

        def run_compare() -> Any:
            try:
                from . import compare
            except ImportError:
                raise ProfileError(None, "the compare module is not available in this build") from None
            return compare.compare_runs(compare_base, prof)

        comparison = _safe("comparison", run_compare, section_warnings)

    findings: list[Finding] = rep.findings if rep else []
    framework = prof.info.framework
    seen_fixes: dict[str, int] = {}
    finding_views = [
        {
            "n": i,
            "f": f,
            "evidence": _evidence_items(f.evidence),
            "fixes": _fix_views(f.fixes, framework, i, seen_fixes),
            "colour": SEVERITY_COLOURS[f.severity],
        }
        for i, f in enumerate(findings, 1)
    ]
    by_sev = {s: [v for v in finding_views if v["f"].severity == s] for s in SEVERITY_COLOURS}

    charts: list[Chart] = []
    heatmaps: list[Chart] = []
    rank_rows: list[dict[str, Any]] = []
    if bd is not None:
        if (c := breakdown_chart(bd.totals)) is not None:
            charts.append(c)
        for metric in ("compute", "free"):
            if (h := heatmap(bd.rows, metric, bd.totals)) is not None:
                heatmaps.append(h)
        for t in bd.totals:
            rank_rows.append(
                {
                    "rank": t.rank,
                    "steps": t.steps,
                    "step": per_step(t.step_ms, t.steps),
                    "compute": per_step(t.compute_ms, t.steps),
                    "comm": per_step(t.communication_ms, t.steps),
                    "exposed": per_step(t.comm_not_overlapped_ms, t.steps),
                    "free": per_step(t.free_ms, t.steps),
                }
            )
    warnings = list(dict.fromkeys([*prof.warnings, *(rep.warnings if rep else []), *section_warnings]))
    env_rows = []
    if env_audit is not None:
        order = {"bad": 0, "unknown": 1, "ok": 2}
        for v in sorted(env_audit.variables, key=lambda v: (order[v.status], v.name)):
            vals = sorted({x if x else "unset" for x in v.values_by_rank.values()})
            env_rows.append({"var": v, "vals": vals})

    return (
        _env()
        .get_template("report.html.j2")
        .render(
            version=__version__,
            info=prof.info,
            findings=finding_views,
            by_severity=by_sev,
            severity_colours=SEVERITY_COLOURS,
            charts=charts,
            heatmaps=heatmaps,
            rank_rows=rank_rows,
            kernels=kernels,
            env_rows=env_rows,
            links=links,
            comparison=comparison,
            warnings=warnings,
            not_applicable=(rep.not_applicable if rep else {}),
            segments=SEGMENTS,
        )
    )


def _inside(p: Path, d: Path) -> bool:
    return p == d or p.is_relative_to(d)


def _protected_dirs(prof: Profile) -> list[Path]:
    """Folders the report must not be written into: the profile folder and every rank folder in it."""
    dirs = []
    if prof.path.is_dir():
        dirs.append(prof.path.resolve())
    try:
        for (src,) in prof.rows("SELECT DISTINCT source_path FROM ranks"):
            sp = Path(src).resolve()
            if sp.is_dir():
                dirs.append(sp)
    except Exception:  # the ranks table is part of every store; a failure here must not block the report
        logger.debug("could not list rank folders", exc_info=True)
    return dirs


def write_report(
    profile: api.ProfileRef, out_path: str | Path, compare_base: api.ProfileRef | None = None
) -> Path:
    """Write the self-contained HTML report of `profile` to `out_path` (atomically) and return the path.

    Raises ProfileError when `out_path` lies inside the profile (a rank folder or the profile folder):
    the report never writes into the profile, whose files are the input (a new file there would also
    change the profile's fingerprint). For a single trace file, only overwriting the trace is refused.
    """
    prof = api.load(profile)
    out = Path(out_path).expanduser()
    out = (out.parent.resolve() / out.name) if out.parent.exists() else out.resolve()
    if out.exists() and out.is_dir():
        raise ProfileError(out, "is a directory; give the report file name, e.g. -o report.html")
    for d in _protected_dirs(prof):
        if _inside(out, d):
            raise ProfileError(
                out, f"refusing to write the report inside the profile folder {d}; choose a path outside it"
            )
    if prof.path.is_file() and out == prof.path.resolve():
        raise ProfileError(out, "refusing to overwrite the profile's trace file")
    html = render_report(prof, compare_base)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ProfileError(out.parent, f"cannot create the folder ({e.strerror})") from None
    # temp file in the same folder + rename: a reader never sees half a report, a crash leaves the old one
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    except OSError as e:
        raise ProfileError(out.parent, f"cannot write here ({e.strerror})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(html)
            fh.flush()
            os.fsync(fh.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; a report is an ordinary file
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
