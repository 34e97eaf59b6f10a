"""`stepdoctor report`: one self-contained HTML file per profile.

Everything is inline (CSS, SVG charts, no script, no font or CDN), so the file opens offline and can be
attached to a ticket. The numbers come from the tool catalog (`tools/api.py`, `tools/compare.py` over `analysis/compare/`) and the
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
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2

from .. import __version__
from ..analysis.errors import ProfileError
from ..analysis.metrics.breakdown import per_step
from ..analysis.models import Finding
from ..analysis.store import Profile, is_damaged_cache
from ..analysis.timeline.names import display_names
from . import api
from . import models as m
from .report_charts import MAX_CHART_RANKS, SEGMENTS, breakdown_chart, compare_chart, heatmap
from .report_timeline import step_timeline
from .report_views import evidence_items, fix_views

__all__ = ["MAX_CHART_RANKS", "breakdown_chart", "heatmap", "render_report", "write_report"]

logger = logging.getLogger(__name__)

SEVERITY_COLOURS = {"high": "#B5495B", "medium": "#fcaf17", "low": "#65c294"}
TOP_KERNELS = 15
TOP_LINKS = 20
NAME_WIDTH = 90   # characters of a kernel / op name in a table cell (two lines of the cell's 62ch)


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


STRAGGLER_CHECKS = ("slow-rank", "stage-imbalance")


def straggler_card(findings: list[Finding]) -> dict[str, Any] | None:
    """The headline of a run with a straggler: the top slow-rank / stage-imbalance finding at medium or
    above. Synchronous training equalises step time across ranks, so step-time spread cannot show it."""
    for f in findings:
        if f.check in STRAGGLER_CHECKS and f.severity in ("high", "medium") and f.ranks:
            who = f.subject if f.check == "stage-imbalance" else f"rank {', '.join(map(str, f.ranks[:4]))}"
            shown = f.impact_ms is None or f"{f.impact_ms:.2f} ms per step" in f.title
            cost = "" if shown else f" · {f.impact_ms:.2f} ms per step"
            return {"ranks": f.ranks, "label": who, "detail": f"{f.title}{cost}"}
    return None


def stragglers(findings: list[Finding]) -> list[int]:
    """Ranks the slow-rank check names as arriving last at collectives (their own finding, or the arrival
    record on their compute / free finding), worst first."""
    out: list[int] = []
    for f in findings:
        if f.check == "slow-rank" and (f.evidence.get("dimension") == "arrival" or "arrival" in f.evidence):
            out += [r for r in f.ranks if r not in out]
    return out


def _safe(label: str, fn: Any, warnings: list[str]) -> Any:
    """A report section that fails must not lose the whole report; it becomes a warning instead."""
    try:
        return fn()
    except ProfileError as e:
        warnings.append(f"{label}: {e}")
    except Exception as e:  # a bug in one section: keep the others, say which one is missing
        if is_damaged_cache(e):
            raise
        logger.warning("report section %s failed: %s: %s", label, type(e).__name__, e)
        logger.debug("report section %s", label, exc_info=True)
        warnings.append(f"{label}: not available ({type(e).__name__}: {e})")
    return None


@dataclass
class Sections:
    """What the catalog tools returned for one report; a section that failed is None (see `_safe`)."""

    breakdown: m.Breakdown | None
    issues: m.IssueReport | None
    kernels: m.TopKernels | None
    env_audit: m.EnvAudit | None
    links: m.SlowLinks | None
    comparison: Any = None
    warnings: list[str] = field(default_factory=list)
    whatif: Any = None              # WhatIf, None where nothing replays
    critical: Any = None            # CriticalPath of the slowest replayed step


def _load_sections(prof: Profile, compare_base: api.ProfileRef | None) -> Sections:
    w: list[str] = []
    s = Sections(
        breakdown=_safe("breakdown", lambda: api.breakdown(prof), w),
        issues=_safe("issues", lambda: api.issues(prof), w),
        kernels=_safe("top kernels", lambda: api.top_kernels(prof, top=TOP_KERNELS), w),
        env_audit=_safe("environment audit", lambda: api.env_audit(prof), w),
        links=_safe("links", lambda: api.slow_links(prof, limit=TOP_LINKS), w),
        warnings=w,
    )
    s.whatif, s.critical = _replayed(prof, w)
    if compare_base is not None:

        def run_compare() -> Any:
            try:
                from . import compare
            except ImportError:
                raise ProfileError(None, "the compare module is not available in this build") from None
            return compare.compare_runs(compare_base, prof)

        s.comparison = _safe("comparison", run_compare, w)
    return s


def _replayed(prof: Profile, warnings: list[str]) -> tuple[Any, Any]:
    """The what-if table and the critical path, where the job replays; a job that does not replay has no such
    section (the replay says why in the what-if tool), never a failed one."""
    def both() -> tuple[Any, Any]:
        try:
            return api.what_if(prof), api.critical_path(prof)
        except ProfileError:
            return None, None
    got = _safe("what-if", both, warnings)
    return got if got is not None else (None, None)


def _path_of(prof: Profile, step: int) -> Any:
    """The critical path of a step where it replays, else None (the timeline is drawn without it)."""
    try:
        return api.critical_path(prof, step=step)
    except ProfileError:
        return None


def _finding_views(numbered: list[tuple[int | None, Finding]], framework: str | None) -> list[dict[str, Any]]:
    seen_fixes: dict[str, int] = {}
    return [
        {
            "n": i,
            "f": f,
            "evidence": evidence_items(f.evidence),
            "fixes": fix_views(f.fixes, framework, i, seen_fixes),
            "colour": SEVERITY_COLOURS[f.severity],
        }
        for i, f in numbered
    ]


def _rank_row(t: Any) -> dict[str, Any]:
    """One rank's mean per-step breakdown, in ms."""
    r = {
        "rank": t.rank,
        "steps": t.steps,
        "step": per_step(t.step_ms, t.steps),
        "compute": per_step(t.compute_ms, t.steps),
        "comm": per_step(t.communication_ms, t.steps),
        "exposed": per_step(t.comm_not_overlapped_ms, t.steps),
        "free": per_step(t.free_ms, t.steps),
    }
    parts = (r["step"], r["compute"], r["exposed"], r["free"])
    # what the step holds beyond them (host time outside the device window, memory / sync ops): the
    # row adds up to the step time, as the CLI's breakdown does; negative where the device window
    # outlasts the host step (a GPU that lags its CPU)
    r["other"] = None if None in parts else parts[0] - parts[1] - parts[2] - parts[3]
    return r


def _rank_charts(prof: Profile, bd: m.Breakdown | None, findings: list[Finding], warnings: list[str]) -> dict[str, Any]:
    """The overview's charts, heatmaps, timeline and per-rank rows (empty without a breakdown)."""
    out: dict[str, Any] = {"charts": [], "heatmaps": [], "rank_rows": [], "timeline": None}
    if bd is None:
        return out
    if (c := breakdown_chart(bd.totals)) is not None:
        out["charts"].append(c)
    slow = {r for f in findings if f.check in STRAGGLER_CHECKS for r in f.ranks}
    late = stragglers(findings)
    late_steps = next((f.steps for f in findings if late and f.check == "slow-rank" and f.ranks[:1] == late[:1]),
                      None)
    out["timeline"] = _safe("timeline", lambda: step_timeline(prof, bd.rows, bd.totals, late, slow, late_steps,
                                                              path_of=lambda step: _path_of(prof, step)), warnings)
    for metric in ("compute", "free"):
        if (h := heatmap(bd.rows, metric, bd.totals)) is not None:
            out["heatmaps"].append(h)
    out["rank_rows"] = [_rank_row(t) for t in bd.totals]
    return out


def _env_rows(env_audit: m.EnvAudit | None) -> list[dict[str, Any]]:
    if env_audit is None:
        return []
    order = {"bad": 0, "unknown": 1, "ok": 2}
    return [
        {"var": v, "vals": sorted({x if x else "unset" for x in v.values_by_rank.values()})}
        for v in sorted(env_audit.variables, key=lambda v: (order[v.status], v.name))
    ]


def render_report(profile: api.ProfileRef, compare_base: api.ProfileRef | None = None) -> str:
    """The report HTML as a string."""
    prof = api.load(profile)
    s = _load_sections(prof, compare_base)
    rep, kernels, comparison = s.issues, s.kernels, s.comparison
    findings: list[Finding] = rep.findings if rep else []
    finding_views = _finding_views(rep.numbered() if rep else [], prof.info.framework)
    by_sev = {sev: [v for v in finding_views if v["f"].severity == sev] for sev in SEVERITY_COLOURS}
    overview = _rank_charts(prof, s.breakdown, findings, s.warnings)
    dropped = [f"steps {', '.join(map(str, prof.info.dropped_steps))} left out (partial)"] \
        if prof.info.dropped_steps else []
    warnings = list(dict.fromkeys([*dropped, *prof.warnings, *(rep.warnings if rep else []), *s.warnings]))
    # kernel and op names as tables show them (analysis.timeline.names.display_names): the start and the part
    # that tells two instantiations apart, on a line or two instead of ten; the full name is the cell's title
    long_names = [k.name for k in (kernels.kernels if kernels else [])]
    long_names += [c.name for c in (comparison.top_changes if comparison else [])]
    names = dict(zip(long_names, display_names(long_names, NAME_WIDTH), strict=True))

    return (
        _env()
        .get_template("report.html.j2")
        .render(
            version=__version__,
            info=prof.info,
            findings=finding_views,
            by_severity=by_sev,
            severity_colours=SEVERITY_COLOURS,
            **overview,
            kernels=kernels,
            env_rows=_env_rows(s.env_audit),
            links=s.links,
            comparison=comparison,
            whatif=s.whatif,
            critical=s.critical,
            compare_chart=compare_chart(comparison.base, comparison.target) if comparison else None,
            straggler=straggler_card(findings),
            warnings=warnings,
            not_applicable=(rep.not_applicable if rep else {}),
            segments=SEGMENTS,
            names=names,
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
