"""slow-link: links, or a rank's links of one transport, with clearly lower bandwidth than their peers.

Data: `links` (communication_matrix.json: src->dst per op) and `comm_bandwidth` (communication.json:
per rank, op and transport). Bandwidth of a link or of a (rank, transport) = Σ bytes / Σ transit time
over all its ops, the advisor's definition (GB/s = bytes/ns). A link is slow when it is below
T.slow_link_ratio × the median bandwidth of the links of the same transport (msprof-analyze prints only
min/avg/max, with no threshold and no rank). LOCAL (on-chip) links are compared only with each other.

Findings group slow links by the rank they have in common: when one rank is an endpoint of most slow
links, that rank's NIC/link/SDMA engine is the suspect and the finding names it. impact_ms = extra
transit time against the median bandwidth, per step.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pandas as pd

from ..models import Finding
from ..thresholds import T
from ..units import BYTES_PER_MB, NS_PER_MS
from .base import Check, CheckContext, register
from .evidence import Evidence, Record


@dataclass
class LinkStat:
    src: int
    dst: int
    transport: str
    bandwidth_gbps: float
    median_gbps: float
    size_mb: float
    time_ms: float
    steps: list[int]

    @property
    def ratio(self) -> float:
        return self.bandwidth_gbps / self.median_gbps if self.median_gbps else 1.0


def link_stats(ctx: CheckContext) -> list[LinkStat]:
    """Every src->dst link with its bandwidth and the median of its transport, slowest first (once per context)."""
    return ctx.once(_link_stats)


def _link_stats(ctx: CheckContext) -> list[LinkStat]:
    df = ctx.sql("SELECT src_rank, dst_rank, transport, sum(size_bytes) AS b, sum(transit_ns) AS t, "
                 "list(DISTINCT step ORDER BY step) AS steps FROM links WHERE src_rank <> dst_rank "
                 "GROUP BY ALL HAVING sum(transit_ns) > 0")
    if df.empty:
        return []
    df["gbps"] = df["b"] / df["t"]
    out = []
    # a 64-rank profile has ~4k links: columns as Python lists, not itertuples / numpy scalars per row,
    # keep this once-per-context table cheap (the same floats, so the same rounding)
    for transport, g in df.groupby("transport"):
        med = round(float(g["gbps"].median()), 4)
        name = str(transport)
        for src, dst, gbps, b, t, steps in zip(g["src_rank"].tolist(), g["dst_rank"].tolist(), g["gbps"].tolist(),
                                               g["b"].tolist(), g["t"].tolist(), _step_lists(g["steps"]), strict=True):
            out.append(LinkStat(int(src), int(dst), name, round(float(gbps), 4), med, round(float(b) / BYTES_PER_MB, 4),
                                round(float(t) / NS_PER_MS, 4), steps))
    return sorted(out, key=lambda s: (s.ratio, s.src, s.dst))


def _step_lists(col: pd.Series) -> list[list[int]]:
    """Each link's steps as ints, without NULL / NaN."""
    lists = col.tolist()
    try:
        flat = np.concatenate(lists) if lists else None
    except (TypeError, ValueError):   # not arrays: the per-link path below handles (or rejects) them
        flat = None
    # an integer result means no link has a NULL / NaN step (those make it object or float): then one
    # conversion and slices replace a Python filter per link
    if flat is not None and flat.dtype.kind in "iu":
        values = flat.tolist()
        ends = np.cumsum([len(x) for x in lists]).tolist()
        return [values[e - len(x):e] for x, e in zip(lists, ends, strict=True)]
    return [[int(s) for s in x if s is not None and s == s] for x in lists]


def rank_transport_stats(ctx: CheckContext) -> pd.DataFrame:
    """Per (rank, transport) bandwidth from communication.json and the median over ranks."""
    df = ctx.sql("SELECT rank, transport, sum(size_bytes) AS b, sum(transit_ns) AS t FROM comm_bandwidth "
                 "WHERE size_bytes > 0 GROUP BY ALL HAVING sum(transit_ns) > 0")
    if df.empty:
        return df
    df["gbps"] = df["b"] / df["t"]
    df["median_gbps"] = df.groupby("transport")["gbps"].transform("median")
    return df


class SlowLinkRecord(Record):
    """One slow src->dst link."""

    src: int
    dst: int
    bandwidth_gbps: float
    median_gbps: float
    size_mb: float
    time_ms: float


class TransportBandwidth(Record):
    """One of the named rank's transports below the ratio (communication.json)."""

    transport: str
    bandwidth_gbps: float
    median_gbps: float


class SlowLinkEvidence(Evidence):
    """Two shapes: slow links of one transport (`links`, `rank_transport_bandwidth`, `impact_method`), or one
    rank's transport from communication.json (`bandwidth_gbps` ... `source`, no `impact_method`)."""

    primary = None   # no map keyed by rank: the links are src->dst pairs
    # (in the order the JSON has always written them, in either shape)
    transport: str
    bandwidth_gbps: float | None = None
    median_gbps: float | None = None
    size_mb: float | None = None
    time_ms: float | None = None
    threshold_ratio: float
    links: list[SlowLinkRecord] | None = None   # the slowest 20
    rank_transport_bandwidth: list[TransportBandwidth] | None = None   # the named rank's, [] when none is named
    source: str | None = None


@register
class SlowLinkCheck(Check):
    id = "slow-link"
    dimension = "communication"
    title = "Slow link"
    fires_when = (
        "a link or a rank's links have clearly lower bandwidth than their peers; `subject` = "
        '`"src->dst"` or transport'
    )
    thresholds = ("slow_link_ratio",)
    needs = ("comm_json",)
    vendors = ("ascend",)
    description = (
        'Links (communication matrix) and per-rank transports (communication.json) whose bandwidth is below '
        '{slow_link_ratio} x the median of the same transport; names the rank and the links.'
    )

    evidence = SlowLinkEvidence
    # `slowest` is the slowest link (LinkStat); `culprit` the rank at most of its transport's slow links' ends
    # (`hits` of them), `rank_transports` that rank's own slow transports (TRANSPORT_CLAUSE each)
    templates: ClassVar[dict[str, tuple[str, str]]] = {
        "rank_transport": (   # communication.json: one rank's transport, no slow link names it
            "rank {rank} {transport} bandwidth {gbps:.1f} GB/s vs {median:.1f} GB/s median",
            "Rank {rank} moves {transport} data at {gbps:.1f} GB/s, below {slow_link_ratio:.0%} of the median "
            "{median:.1f} GB/s of all ranks.",
        ),
        "rank_links": (
            "rank {culprit}'s {transport} links run at {slowest.bandwidth_gbps:.1f} GB/s vs "
            "{slowest.median_gbps:.1f} GB/s median",
            "{n_links} {transport} link(s) run below {slow_link_ratio:.0%} of the median {slowest.median_gbps:.1f} "
            "GB/s; slowest {slowest.src}->{slowest.dst} at {slowest.bandwidth_gbps:.1f} GB/s; rank {culprit} is an "
            "endpoint of {hits} of them{rank_transports}.",
        ),
        "links": (   # no rank is common to most of them
            "{n_links} slow {transport} links",
            "{n_links} {transport} link(s) run below {slow_link_ratio:.0%} of the median {slowest.median_gbps:.1f} "
            "GB/s; slowest {slowest.src}->{slowest.dst} at {slowest.bandwidth_gbps:.1f} GB/s.",
        ),
    }

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        out: list[Finding] = []
        thr = T.slow_link_ratio.value
        n_steps = max(len(ctx.steps_of()), 1)
        slow_links = [s for s in link_stats(ctx) if s.transport != "LOCAL" and s.ratio < thr]
        rt = rank_transport_stats(ctx)
        slow_rt = rt[rt["gbps"] < thr * rt["median_gbps"]] if not rt.empty else rt
        blamed: set[int] = set()
        by_transport: dict[str, list[LinkStat]] = {}
        for s in slow_links:
            by_transport.setdefault(s.transport, []).append(s)
        for transport, links in sorted(by_transport.items()):
            finding, culprit = self._links_finding(ctx, transport, links, slow_rt, thr, n_steps)
            out.append(finding)
            if culprit is not None:
                blamed.add(culprit)
        for r in slow_rt.itertuples(index=False):
            # the same rank already named through its links: one problem, one finding
            if int(r.rank) in blamed:
                continue
            extra_ms = (float(r.t) - float(r.b) / float(r.median_gbps)) / NS_PER_MS / n_steps
            out.append(self.finding(
                ctx, shape="rank_transport", subject=str(r.transport), ranks=[int(r.rank)],
                impact_ms=max(extra_ms, 0.0),
                evidence=SlowLinkEvidence(
                    transport=str(r.transport), bandwidth_gbps=round(float(r.gbps), 4),
                    median_gbps=round(float(r.median_gbps), 4), size_mb=round(float(r.b) / BYTES_PER_MB, 4),
                    time_ms=round(float(r.t) / NS_PER_MS, 4), threshold_ratio=thr,
                    source="communication.json bandwidth per transport"),
                words={"rank": int(r.rank), "gbps": float(r.gbps), "median": float(r.median_gbps)}))
        return out

    def _links_finding(self, ctx: CheckContext, transport: str, links: list[LinkStat], slow_rt: pd.DataFrame,
                       thr: float, n_steps: int) -> tuple[Finding, int | None]:
        """The finding of one transport's slow links (slowest first), and the rank it names, if any."""
        ends = Counter([s.src for s in links] + [s.dst for s in links])
        rank, hits = ends.most_common(1)[0]
        culprit = rank if hits >= max(2, (len(links) + 1) // 2) or len(links) == 1 else None
        extra_ms = sum(s.size_mb * 1e6 / (s.bandwidth_gbps * 1e6) * (1 - s.ratio) for s in links if s.bandwidth_gbps
                       ) / n_steps
        ranks = [culprit] if culprit is not None else sorted({s.src for s in links} | {s.dst for s in links})
        subject = f"{links[0].src}->{links[0].dst}" if len(links) == 1 else transport
        # the same rank's per-transport bandwidth (communication.json) backs the link evidence
        rank_level = [] if culprit is None or slow_rt.empty else [
            TransportBandwidth(transport=str(r.transport), bandwidth_gbps=round(float(r.gbps), 4),
                               median_gbps=round(float(r.median_gbps), 4))
            for r in slow_rt[slow_rt["rank"] == culprit].itertuples(index=False)]
        if len(links) > 1 and rank_level:
            # name the engine the profiler reports bandwidth for (SDMA / RDMA), as msprof-analyze does
            engines = [x.transport for x in rank_level if x.transport in ("SDMA", "RDMA")]
            subject = engines[0] if engines else rank_level[0].transport
        finding = self.finding(
            ctx, shape="links" if culprit is None else "rank_links", subject=subject, ranks=ranks,
            steps=sorted({st for s in links for st in s.steps}), impact_ms=extra_ms,
            evidence=SlowLinkEvidence(
                transport=transport, threshold_ratio=thr,
                links=[SlowLinkRecord(src=s.src, dst=s.dst, bandwidth_gbps=s.bandwidth_gbps, median_gbps=s.median_gbps,
                                      size_mb=s.size_mb, time_ms=s.time_ms) for s in links[:20]],
                rank_transport_bandwidth=rank_level,
                impact_method="extra transit time vs the median bandwidth, per step"),
            words={"slowest": links[0], "n_links": len(links), "culprit": culprit, "hits": hits,
                   "rank_transports": "".join(TRANSPORT_CLAUSE.format_map(x.model_dump()) for x in rank_level)})
        return finding, culprit


# one of the named rank's slow transports (communication.json), in the message of its links
TRANSPORT_CLAUSE = ("; its {transport} bandwidth is {bandwidth_gbps:.1f} GB/s against {median_gbps:.1f} GB/s on the "
                    "other ranks")
