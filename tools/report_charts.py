"""The report's SVG charts, drawn as plain data (rects, texts, lines) that the template turns into inline SVG:
the per-rank breakdown bars, the rank x step heatmaps and the before/after bars of a comparison. Times in ms."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from ..analysis.metrics.breakdown import BreakdownRow, per_step, standing_out

# Stacked bar segments; together they are the host step time.
SEGMENTS: list[tuple[str, str, str]] = [
    ("compute", "compute", "#3b6ea8"),
    ("comm", "communication not overlapped", "#e07b39"),
    ("free", "free (device idle)", "#a9b4c2"),
    ("other", "other (host time outside the device window, memory / sync ops)", "#8c6bb1"),
]
HEAT_COLOURS = {"compute": (204, 102, 0), "free": (181, 73, 91)}   # above the median; below: BELOW_MEDIAN_RGB
MAX_CHART_RANKS = 128  # more ranks than this: those that stand out are drawn (_rank_selection)
MAX_HEAT_STEPS = 60


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


def nice_step(v: float, most: int = 6) -> float:
    """The smallest round tick step (1, 2, 2.5, 5 x 10^k) that cuts [0, v] into at most `most` parts."""
    if v <= 0:
        return 1.0
    import math

    exp = 10 ** math.floor(math.log10(v / most))
    for f in (1, 2, 2.5, 5, 10):
        if v / (f * exp) <= most:
            return f * exp
    return 10 * exp


def _nice_max(v: float) -> float:
    """A round axis maximum >= v: the next multiple of `nice_step(v)` (105 ms -> 120, 225 -> 250)."""
    if v <= 0:
        return 1.0
    import math

    step = nice_step(v)
    return step * math.ceil(v / step - 1e-9)


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
    tick = nice_step(top)
    for k in range(round(top / tick) + 1):
        v = tick * k
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
SCALE_MIN_H = 96   # px of the colour scale beside a heatmap of few ranks


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
    # "free": the device's idle time in the whole host step (free + before the first kernel + after the last),
    # what a person looks for; torch_npu's Free stops at the last kernel and would hide an idle tail
    attr = {"compute": "compute_ms", "free": "idle_ms"}[metric]
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
    # the colour scale is as tall as the map, at least SCALE_MIN_H (its three labels must not touch)
    scale_h = max(cell_h * len(ranks), SCALE_MIN_H)
    height = top_pad + scale_h + 24
    rgb = HEAT_COLOURS[metric]
    ch = Chart(id=f"heatmap-{metric}", title=f"{'Compute' if metric == 'compute' else 'Device idle'} time per rank "
               f"and step: deviation from the median {med:.2f} ms", width=width, height=height,
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
    _deviation_scale(ch, left + cell_w * len(steps) + 24, top_pad, scale_h, rgb, med, span)
    return ch


def _deviation_scale(ch: Chart, sx: float, top: float, h: float, rgb: tuple[int, int, int], med: float,
                     span: float) -> None:
    """The colour scale, `h` px tall: +span at the top, the median (white) in the middle, -span at the bottom."""
    n = 21
    cell = h / n
    for k in range(n):
        dev = span * (1 - 2 * k / (n - 1))
        ch.rects.append(Rect(sx, top + k * cell, 14, cell + 0.5, _deviation_colour(rgb, dev, span)[0],
                             f"scale {dev * 100:+.0f}%"))
    ch.texts.append(Text(sx + 20, top + 9, f"+{span * 100:.0f}% ({med * (1 + span):.2f} ms)", size=10))
    ch.texts.append(Text(sx + 20, top + h / 2 + 4, f"median {med:.2f} ms", size=10))
    low = min(span, 1.0)   # nothing is more than 100% below the median
    ch.texts.append(Text(sx + 20, top + h - 1, f"-{low * 100:.0f}% ({med * (1 - low):.2f} ms)", size=10))


def compare_chart(base: Any, target: Any) -> Chart | None:
    """Two stacked bars, base and target: compute, exposed communication and free per step (ms)."""
    parts = [("compute", "compute_ms", "#3b6ea8"), ("comm", "communication_ms", "#e07b39"),
             ("free", "free_ms", "#a9b4c2")]
    sides = [("base", base), ("target", target)]
    vals = {n: [getattr(sd, a) or 0.0 for _, a, _ in parts] for n, sd in sides}
    top = max((sum(v) for v in vals.values()), default=0.0)
    steps = [getattr(sd, "step_ms", None) or 0.0 for _, sd in sides]
    top = _nice_max(max(top, *steps))
    if top <= 0:
        return None
    left, bar_h, width = 70, 26, 760
    scale = (width - left - 120) / top
    ch = Chart(id="chart-compare", title="Per step, base against target (ms)", width=width, height=110,
               legend=[("compute", parts[0][2]), ("communication", parts[1][2]), ("free (device idle)", parts[2][2])],
               data={"base-ms": f"{steps[0]:.3f}", "target-ms": f"{steps[1]:.3f}"})
    for i, (name, _) in enumerate(sides):
        y = 14 + i * (bar_h + 12)
        ch.texts.append(Text(left - 8, y + bar_h * 0.65, name, anchor="end", size=11))
        x = left
        for (key, _, colour), v in zip(parts, vals[name], strict=True):
            w = v * scale
            if w > 0:
                ch.rects.append(Rect(x, y, w, bar_h, colour, f"{name} {key}: {v:.3f} ms", key=f"{name}:{key}"))
            x += w
        ch.texts.append(Text(x + 6, y + bar_h * 0.65, f"{steps[i]:.2f} ms step", size=10))
    return ch
