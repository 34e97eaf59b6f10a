"""The HTML report: rendered for cluster4, parsed with html.parser, and loaded in headless Chromium.

The numbers asserted are the planted problems of cluster4 (rank 0 idles ~250 ms at the end of step 2,
rank 3 computes ~1.4x slower, ASCEND_LAUNCH_BLOCKING=1, a slow link of rank 2).
"""

from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

import pytest

from conftest import CLUSTER4, KINETO, need
from stepdoctor.analysis.errors import ProfileError
from stepdoctor.tools import api
from stepdoctor.tools.report import SEVERITY_COLOURS, write_report

RANK0 = CLUSTER4 / "node0_40000_20250101120000100_ascend_pt"
RANK3 = CLUSTER4 / "node0_40003_20250101120000103_ascend_pt"
VOID = {"meta", "link", "br", "hr", "img", "input", "col", "area", "base", "source", "wbr"}


@dataclass
class Node:
    tag: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: str = ""

    def all_text(self) -> str:
        return self.text + "".join(c.all_text() for c in self.children)

    def iter(self):
        yield self
        for c in self.children:
            yield from c.iter()

    def find_all(self, tag: str | None = None, **attrs: str) -> list[Node]:
        out = []
        for n in self.iter():
            if tag is not None and n.tag != tag:
                continue
            if all(
                (n.attrs.get(k.replace("_", "-")) or "") == v
                or (k == "class_" and v in (n.attrs.get("class") or "").split())
                for k, v in attrs.items()
            ):
                out.append(n)
        return out

    def by_id(self, ident: str) -> Node:
        found = [n for n in self.iter() if n.attrs.get("id") == ident]
        assert len(found) == 1, f"expected one element #{ident}, found {len(found)}"
        return found[0]


class TreeBuilder(HTMLParser):
    """A small DOM from html.parser; fails on mismatched tags, which also checks the markup is well formed."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#root", {})
        self.stack = [self.root]

    def handle_starttag(self, tag, attrs):
        node = Node(tag, {k: v or "" for k, v in attrs})
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Node(tag, {k: v or "" for k, v in attrs}))

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        assert self.stack[-1].tag == tag, f"</{tag}> closes <{self.stack[-1].tag}>"
        self.stack.pop()

    def handle_data(self, data):
        self.stack[-1].children.append(Node("#text", {}, text=data))


def parse(html: str) -> Node:
    b = TreeBuilder()
    b.feed(html)
    b.close()
    assert len(b.stack) == 1, f"unclosed <{b.stack[-1].tag}>"
    return b.root


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, Node]:
    out = tmp_path_factory.mktemp("report") / "cluster4.html"
    path = write_report(need(CLUSTER4), out)
    html = path.read_text(encoding="utf-8")
    return path, html, parse(html)


def _rows(table: Node) -> list[list[str]]:
    return [
        [td.all_text().strip() for td in tr.find_all("td")]
        for tr in table.find_all("tr")
        if tr.find_all("td")
    ]


def test_overview_and_breakdown_chart(report):
    _, _, dom = report
    assert dom.by_id("profile-path").all_text() == str(CLUSTER4)
    chart = dom.by_id("chart-breakdown")
    assert chart.tag == "svg" and chart.attrs["data-ranks"] == "4"
    comp = chart.find_all("rect", data_key="compute")
    free = chart.find_all("rect", data_key="free")
    assert len(comp) == 4 and len(free) == 4
    # rank 3's compute bar is ~1.4x the others; rank 0's idle tail after its last kernel (250 ms, 125 ms per
    # step) is outside torch_npu's device window: its "other" bar carries it
    widths = [float(r.attrs["width"]) for r in comp]
    assert widths[3] / widths[0] == pytest.approx(1.4, abs=0.05)
    other = chart.find_all("rect", data_key="other")
    other_ms = [float(re.search(r": ([\d.]+) ms", r.find_all("title")[0].all_text()).group(1)) for r in other]
    assert other_ms[0] - other_ms[1] == pytest.approx(125.0, abs=5.0)
    ranks = _rows(dom.by_id("table-ranks"))
    assert [r[0] for r in ranks] == ["0", "1", "2", "3"]
    assert float(ranks[0][2]) == pytest.approx(225.0, abs=1.0) and float(ranks[1][2]) == pytest.approx(
        100.0, abs=1.0
    )
    assert float(ranks[3][3]) == pytest.approx(26.1, abs=0.5)
    for r in ranks:   # step = compute + comm not overlapped + free + other (issue 24: tables that add up)
        assert float(r[2]) == pytest.approx(sum(float(x) for x in r[3:7]), abs=0.002)
    assert float(ranks[0][6]) - float(ranks[1][6]) == pytest.approx(125.0, abs=5.0)   # rank 0's idle tail


def test_heatmaps(report):
    _, _, dom = report
    comp = dom.by_id("heatmap-compute")
    free = dom.by_id("heatmap-free")
    for h in (comp, free):
        assert h.tag == "svg" and h.attrs["data-ranks"] == "4" and h.attrs["data-steps"] == "2"
        assert {r.attrs["data-key"] for r in h.find_all("rect") if "data-key" in r.attrs} == {
            f"{r}:{s}" for r in range(4) for s in (1, 2)
        }
    assert float(comp.attrs["data-max-ms"]) == pytest.approx(26.2, abs=0.5)  # rank 3
    # the idle heatmap counts the whole host step: rank 0's idle tail after its last kernel shows
    cell = free.find_all("rect", data_key="0:2")[0]
    assert float(re.search(r"([\d.]+) ms", cell.all_text()).group(1)) > 300
    assert cell.attrs["fill"] == "#b5495b"  # the hottest cell takes the full colour


def test_findings_by_priority_with_evidence_and_fixes(report):
    _, _, dom = report
    rep = api.issues(CLUSTER4)
    cards = dom.find_all("section", class_="finding")
    assert len(cards) == rep.total == len(rep.findings)
    assert [c.attrs["data-check"] for c in cards] == [f.check for f in rep.findings]
    first = cards[0]
    assert (first.attrs["data-check"], first.attrs["data-severity"]) == ("slow-rank", "high")
    assert (first.attrs["data-ranks"], first.attrs["data-steps"]) == ("0", "2")
    assert float(first.attrs["data-impact-ms"]) == pytest.approx(125.0, abs=5.0)
    for c in cards:
        assert SEVERITY_COLOURS[c.attrs["data-severity"]] in c.attrs["style"]
    severities = [c.attrs["data-severity"] for c in cards]
    assert severities == sorted(severities, key=["high", "medium", "low"].index)
    assert {"high", "medium", "low"} <= set(severities)
    ev = {tr.attrs["data-key"]: tr.all_text() for tr in first.find_all("tr") if "data-key" in tr.attrs}
    assert "250" in ev["excess_ms"]
    # a fix's code edit is shown once, in the first finding that needs it; later cards link back to it
    shown = [(c, d) for c in cards for d in c.find_all("div", data_fix="ascend-launch-blocking-off")]
    assert len(shown) >= 2
    (owner, fix), rest = shown[0], shown[1:]
    pres = [p.all_text() for p in fix.find_all("pre")]
    assert "export ASCEND_LAUNCH_BLOCKING=1" in pres[0] and "unset ASCEND_LAUNCH_BLOCKING" in pres[1]
    for _, d in rest:
        assert not d.find_all("pre") and d.find_all("a")[0].attrs["href"] == f"#{owner.attrs['id']}"
    assert any(c.attrs["data-subject"] == "ASCEND_LAUNCH_BLOCKING" for c, _ in shown)
    counts = {
        c.attrs["data-severity"]: int(c.attrs["data-count"])
        for c in dom.by_id("summary-cards").find_all("div", class_="card")
        if "data-severity" in c.attrs
    }
    assert counts == {s: severities.count(s) for s in ("high", "medium", "low")}


def test_tables_env_links_kernels_warnings(report):
    _, _, dom = report
    env = {r[0]: r for r in _rows(dom.by_id("table-env"))}
    assert env["ASCEND_LAUNCH_BLOCKING"][1:3] == ["bad", "1"]
    assert env["HCCL_ALGO"][2] == "level0:NA;level1:ring"
    links = _rows(dom.by_id("table-links"))
    assert links[0][0] == "2" and float(links[0][3]) < 0.5 * float(links[0][4])
    kernels = _rows(dom.by_id("table-kernels"))
    top = next(r for r in kernels if r[1] == "MatMulV2")
    assert top[3] == "64"
    assert dom.find_all("section", id="warnings")


def test_self_contained_and_escaped(report, tmp_path: Path):
    _, html, dom = report
    assert html.startswith("<!doctype html>")
    assert "<script" not in html.lower() and "@import" not in html and "url(" not in html
    for n in dom.iter():
        for attr in ("src", "href"):
            v = n.attrs.get(attr, "")
            assert not v or v.startswith("#"), f"external reference {attr}={v}"
    # profile strings are data: C++ kernel names with <...> arrive escaped and parse as text
    out = write_report(need(KINETO / "trace_filter"), tmp_path / "kineto.html")
    khtml = out.read_text(encoding="utf-8")
    assert "&lt;c10::Half" in khtml and "<c10::Half" not in khtml
    parse(khtml)


def test_never_writes_into_the_profile_and_writes_atomically(tmp_path: Path):
    prof_dir = tmp_path / "run"
    shutil.copytree(need(RANK0), prof_dir / RANK0.name)
    for target in (prof_dir / "report.html", prof_dir / RANK0.name / "ASCEND_PROFILER_OUTPUT" / "r.html"):
        with pytest.raises(ProfileError, match="refusing to write the report inside the profile"):
            write_report(prof_dir, target)
        assert not target.exists()
    out_dir = tmp_path / "out"
    out = write_report(prof_dir, out_dir / "r.html")
    first = out.read_text(encoding="utf-8")
    out.write_text("old")
    write_report(prof_dir, out)  # overwrite in place
    assert out.read_text(encoding="utf-8") == first
    assert sorted(p.name for p in out_dir.iterdir()) == ["r.html"]  # no temp file left behind
    assert out.stat().st_mode & 0o644 == 0o644


def test_compare_section(tmp_path: Path):
    out = write_report(need(RANK3), tmp_path / "cmp.html", compare_base=RANK0)
    dom = parse(out.read_text(encoding="utf-8"))
    sec = dom.by_id("comparison")
    assert float(sec.attrs["data-delta-ms"]) == pytest.approx(-125.0, abs=2.0)
    assert "step time -125.0 ms" in sec.find_all("p", class_="verdict")[0].all_text()
    sides = _rows(dom.by_id("table-compare-sides"))
    assert float(sides[2][1]) == pytest.approx(7.5, abs=1.0)  # compute delta: rank 3 computes slower
    changes = _rows(dom.by_id("table-compare-changes"))
    assert changes[0][1].startswith("MatMulV2") and float(changes[0][4]) > 2.0


def test_charts_of_a_large_cluster_draw_the_slowest_ranks():
    """300 ranks: the bar chart and heatmaps draw 128 of them, those that stand out first, and say so."""
    from stepdoctor.analysis.metrics.breakdown import BreakdownRow
    from stepdoctor.tools.report import MAX_CHART_RANKS, breakdown_chart, heatmap

    rows = [
        BreakdownRow(
            rank=r,
            step=s,
            step_ms=100.0 + (50.0 if r == 299 else r % 7),
            compute_ms=40.0 + r % 5,
            communication_ms=10.0,
            comm_not_overlapped_ms=5.0,
            overlapped_ms=5.0,
            free_ms=30.0,
        )
        for r in range(300)
        for s in (1, 2)
    ]
    from stepdoctor.analysis.metrics.breakdown import totals

    tot = totals(rows)
    chart = breakdown_chart(tot)
    assert chart is not None and chart.data["ranks"] == str(MAX_CHART_RANKS) == "128"
    assert "172 rank(s) nearest the median not drawn" in chart.note
    labels = [t.text for t in chart.texts if t.text.startswith("rank ")]
    assert "rank 299" in labels and len(labels) == 128
    h = heatmap(rows, "compute", tot)
    assert h is not None and h.data["ranks"] == "128" and h.data["steps"] == "2"
    assert float(h.data["max-ms"]) == 44.0 and float(h.data["min-ms"]) == 40.0


def test_a_large_synchronous_cluster_draws_the_rank_that_computes_slower():
    """1,024 ranks with the same step time (synchronous training): the one rank that computes 8 ms slower
    (and idles 8 ms less) is drawn, however the ties in step time fall."""
    from stepdoctor.analysis.metrics.breakdown import BreakdownRow, totals
    from stepdoctor.tools.report import breakdown_chart, heatmap

    rows = [
        BreakdownRow(rank=r, step=s, step_ms=73.8 + (0.01 if r % 3 == 0 else 0.0),
                     compute_ms=30.0 + (8.0 if r == 1023 else (r % 5) * 0.01), communication_ms=10.0,
                     comm_not_overlapped_ms=5.0, overlapped_ms=5.0, free_ms=30.0 - (8.0 if r == 1023 else 0.0))
        for r in range(1024)
        for s in (1, 2)
    ]
    tot = totals(rows)
    chart = breakdown_chart(tot)
    labels = [t.text for t in chart.texts if t.text.startswith("rank ")]
    assert "rank 1023" in labels and len(labels) == 128
    assert "896 rank(s) nearest the median not drawn" in chart.note
    h = heatmap(rows, "compute", tot)
    assert float(h.data["max-ms"]) == 38.0  # rank 1023's compute is in the heatmap


# ---------------------------------------------------------------------------------------------------------
# Real browser
# ---------------------------------------------------------------------------------------------------------


def _chromium() -> str:
    found = shutil.which("chromium") or ("/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else None)
    if found:
        return found
    if os.geteuid() != 0:
        pytest.skip("chromium is not installed and installing it needs root (apt-get install -y chromium)")
    res = subprocess.run(
        ["apt-get", "install", "-y", "chromium"],
        capture_output=True,
        text=True,
        timeout=1200,
        env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
    )
    if res.returncode != 0 or not Path("/usr/bin/chromium").exists():
        pytest.skip(f"apt-get install chromium failed: {res.stderr.strip()[-300:]}")
    return "/usr/bin/chromium"


def _chrome_args(binary: str, profile_dir: Path) -> list[str]:
    return [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile_dir}",
    ]


@pytest.mark.browser
@pytest.mark.slow
def test_chromium_renders_the_report(report, tmp_path: Path):
    path, _, dom = report
    binary = _chromium()
    # the screenshot first: it is the artifact a person looks at, also when an assertion below fails
    shot = tmp_path / "report.png"
    res = subprocess.run(
        [
            *_chrome_args(binary, tmp_path / "ud"),
            f"--screenshot={shot}",
            "--window-size=1400,2400",
            path.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0 and shot.exists(), res.stderr[-2000:]
    head = shot.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", head[16:24]) == (1400, 2400)
    assert shot.stat().st_size > 50_000  # a blank page compresses to a few KB

    res = subprocess.run(
        [*_chrome_args(binary, tmp_path / "ud2"), "--dump-dom", path.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 0, res.stderr[-2000:]
    live = parse(res.stdout)
    assert len(live.find_all("svg")) >= 3
    for ident in (
        "chart-breakdown",
        "heatmap-compute",
        "heatmap-free",
        "table-ranks",
        "table-kernels",
        "finding-1",
    ):
        live.by_id(ident)
    assert len(live.find_all("section", class_="finding")) == len(dom.find_all("section", class_="finding"))
    assert len(live.by_id("chart-breakdown").find_all("rect", data_key="compute")) == 4


def test_heatmap_colours_deviation_from_the_median_not_min_to_max():
    """45.37 vs 45.39 ms (0.04%) must not look like darkest vs lightest; the scale names the median."""
    from stepdoctor.analysis.metrics.breakdown import BreakdownRow, totals
    from stepdoctor.tools.report import heatmap

    rows = [BreakdownRow(rank=r, step=1, step_ms=100.0, compute_ms=45.37 + 0.02 * (r % 2), communication_ms=1.0,
                         comm_not_overlapped_ms=1.0, overlapped_ms=0.0, free_ms=10.0) for r in range(8)]
    h = heatmap(rows, "compute", totals(rows))
    fills = {r.fill for r in h.rects if r.key}
    for f in fills:   # every cell within 1% of white
        assert all(int(f[i:i + 2], 16) >= 250 for i in (1, 3, 5)), fills
    assert float(h.data["span-pct"]) == 10.0 and float(h.data["median-ms"]) == pytest.approx(45.38, abs=0.01)
    assert any(t.text.startswith("median 45.38 ms") for t in h.texts)
    rows[0].compute_ms = 60.0   # one rank 32% above: full colour, the scale grows to +-32%
    h = heatmap(rows, "compute", totals(rows))
    hot = next(r for r in h.rects if r.key == "0:1")
    assert hot.fill == "#cc6600" and float(h.data["span-pct"]) == pytest.approx(32.2, abs=0.2)


def test_timeline_of_one_step_shows_the_late_rank_and_the_waiting_rank(tmp_path: Path):
    """gloo2_straggler (real H100 run, 2 ranks; rank 1 sleeps 50 ms per step on the host): one row per rank
    on one axis aligned on the collectives' ends; rank 0 spends its step waiting in the all-reduce, rank 1
    arrives last and idles; the two host step windows are ~50 ms apart."""
    from conftest import SHARED

    prof = need(SHARED / "real" / "gpu-h100" / "gloo2_straggler")
    out = write_report(prof, tmp_path / "gloo.html")
    dom = parse(out.read_text(encoding="utf-8"))
    tl = dom.by_id("chart-timeline")
    assert tl.attrs["data-ranks"] == "2" and tl.attrs["data-aligned"] == "true"
    assert tl.attrs["data-stragglers"] == "1" and tl.attrs["data-step"] in ("4", "5", "6")
    assert 150.0 < float(tl.attrs["data-span-ms"]) < 170.0  # a ~105 ms step, the ranks ~50 ms apart
    labels = [t.all_text() for t in tl.find_all("text")]
    assert "rank 1 (arrives last)" in labels and "rank 0 (waits)" in labels
    totals = [re.search(r"compute ([\d.]+), comm ([\d.]+).*idle ([\d.]+)", t) for t in labels]
    (c0, m0, i0), (c1, m1, i1) = [tuple(map(float, x.groups())) for x in totals if x]
    assert c0 == pytest.approx(5.35, abs=0.2) and c1 == pytest.approx(5.35, abs=0.2)
    assert m0 > m1 + 20.0   # rank 0 waits in the all-reduce for rank 1
    assert i1 > i0 + 20.0   # rank 1's device idles through its 50 ms sleep
    assert tl.find_all("rect", data_key="0:comm") and tl.find_all("rect", data_key="1:idle")


def test_timeline_of_cluster4_names_the_straggler_the_slow_rank_and_the_waiters(report):
    """cluster4 step 2 (the slowest): rank 0 idles ~250 ms at its end (slow in free), rank 3 computes slower
    and arrives last at every all-reduce, ranks 1 and 2 wait; the axis ticks are round."""
    _, _, dom = report
    tl = dom.by_id("chart-timeline")
    assert tl.attrs["data-step"] == "2" and tl.attrs["data-ranks"] == "4" and tl.attrs["data-aligned"] == "true"
    labels = [t.all_text() for t in tl.find_all("text")]
    assert {"rank 0 (slow)", "rank 1 (waits)", "rank 2 (waits)", "rank 3 (arrives last)"} \
        <= set(labels)
    # the timeline's totals are over the host step window, and say so (the breakdown's step may be another)
    assert "host step 350.0 ms: compute 18.6, comm 5.2, idle 326.2" in labels
    assert [x for x in labels if x.endswith(" ms") and x[0].isdigit()] == ["0 ms", "100 ms", "200 ms", "300 ms"]


def test_compare_report_on_real_h100_runs_shows_readable_kernel_names(tmp_path: Path):
    """attn_math against clean (real H100): the verdict is an overview card; kernel and op names are shown as
    tables show them (at most NAME_WIDTH characters, the full C++ signature in the title), not 500-character
    signatures wrapping over ten lines."""
    from conftest import SHARED
    from stepdoctor.tools.report import NAME_WIDTH

    h100 = need(SHARED / "real" / "gpu-h100")
    out = write_report(h100 / "attn_math", tmp_path / "cmp.html", compare_base=h100 / "clean")
    dom = parse(out.read_text(encoding="utf-8"))
    card = dom.by_id("card-compare")
    assert card.find_all("b")[0].all_text() == "+35.78 ms" and card.attrs["href"] == "#comparison"
    cells = [td for t in ("table-compare-changes", "table-kernels") for td in dom.by_id(t).find_all("td", class_="name")]
    assert len(cells) >= 20
    assert all(len(td.all_text()) <= NAME_WIDTH for td in cells)
    assert max(len(td.attrs["title"]) for td in cells) > 300        # the full signatures are kept
    shown = [td.all_text() for td in dom.by_id("table-compare-changes").find_all("td", class_="name")]
    assert len(set(shown)) == len(shown)                             # two instantiations never look the same
    assert dom.by_id("card-straggler").find_all("b")[0].all_text() == "one rank"


def test_no_timeline_for_one_rank(tmp_path: Path):
    out = write_report(need(RANK0), tmp_path / "one.html")
    assert not parse(out.read_text(encoding="utf-8")).find_all("svg", id="chart-timeline")


LAYOUT_PROBE = """<script>
document.body.setAttribute("data-sections", Array.from(document.querySelectorAll("main > section"))
  .map(s => s.id).join(","));
const tl = document.getElementById("chart-timeline");
if (tl) {
  const vb = tl.viewBox.baseVal, box = tl.getBoundingClientRect();
  document.body.setAttribute("data-timeline-out", Array.from(tl.querySelectorAll("text, rect"))
    .filter(e => { const b = e.getBBox(); return b.x < -0.5 || b.x + b.width > vb.width + 0.5; }).length);
  document.body.setAttribute("data-timeline-fits", box.right <= document.documentElement.clientWidth + 0.5
    && box.width > 300);
}
document.body.setAttribute("data-clipped", Array.from(document.querySelectorAll("pre"))
  .filter(p => p.scrollWidth > p.clientWidth + 1).length);
document.body.setAttribute("data-pres", document.querySelectorAll("pre").length);
document.body.setAttribute("data-height", document.documentElement.scrollHeight);
</script>"""


@pytest.mark.browser
@pytest.mark.slow
def test_chromium_lays_the_report_out_top_down_without_clipped_code(tmp_path: Path):
    """With a comparison: overview, comparison, findings, then the tables; code boxes wrap (nothing
    overflows its box) at a laptop's width; the heatmap scale is drawn."""
    from stepdoctor.tools.report import render_report

    binary = _chromium()
    html = render_report(need(CLUSTER4), compare_base=need(CLUSTER4))
    page = tmp_path / "probe.html"
    page.write_text(html.replace("</body>", LAYOUT_PROBE + "</body>"))
    res = subprocess.run([*_chrome_args(binary, tmp_path / "ud"), "--window-size=1000,2000",
                          "--virtual-time-budget=2000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    body = parse(res.stdout).find_all("body")[0]
    order = body.attrs["data-sections"].split(",")
    assert order[:3] == ["overview", "comparison", "findings"], order
    assert order.index("kernels") > order.index("findings")
    assert int(body.attrs["data-pres"]) > 0 and body.attrs["data-clipped"] == "0"
    assert "median" in parse(res.stdout).by_id("heatmap-compute").all_text()
    # the timeline is drawn, every label and bar inside its box, the box inside the page
    assert body.attrs["data-timeline-out"] == "0" and body.attrs["data-timeline-fits"] == "true"
    # 31 findings: low ones folded, code edits open on the first finding only (issue 24: ~19,000 px)
    assert int(body.attrs["data-height"]) < 14_000   # 11,300 px at 1,000 px wide


def test_timeline_of_a_large_cluster_draws_the_straggler_in_a_late_step(tmp_path: Path):
    """64 generated ranks, rank 5 starts 7.5 ms late in 5 of 8 steps: at most 16 rows, the straggler among
    them, the step one it is late in, the axis aligned on the collectives."""
    from stepdoctor.evals.generate import stragglers as gen
    from stepdoctor.tools.report import stragglers
    from stepdoctor.tools.report_timeline import MAX_TIMELINE_RANKS, step_timeline

    prof = gen.open_store(gen.build(tmp_path, 64, "late", culprit=5, steps=8, late_steps=5))
    bd = api.breakdown(prof)
    findings = api.issues(prof, checks=["slow-rank"]).findings
    late = stragglers(findings)
    assert late == [5]
    steps = next(f.steps for f in findings if f.ranks == [5])
    ch = step_timeline(prof, bd.rows, bd.totals, late, {5}, steps)
    assert ch is not None and int(ch.data["ranks"]) <= MAX_TIMELINE_RANKS and ch.data["aligned"] == "true"
    assert int(ch.data["step"]) in steps and "arrives late in" in ch.title
    labels = [t.text for t in ch.texts if t.text.startswith("rank ")]
    assert "rank 5 (arrives last)" in labels and all(x.endswith("(waits)") for x in labels if "rank 5 " not in x)


def test_timeline_aligns_torch_npu_level0_ranks_on_their_hccl_kernels():
    """msinsight text Level0 (real Atlas A2, 2 ranks on one host): no communication.json, so no comm_ops; the
    hcom_allReduce__868_k_1 kernels carry the same name on both ranks and end within 20 µs (one host clock),
    so the shift found is that small and the axis is aligned."""
    from conftest import SHARED
    from stepdoctor.tools.report_timeline import clock_offsets, step_timeline

    prof = api.load(need(SHARED / "real" / "ascend" / "msinsight-pt-text-l0"))
    assert prof.rows("SELECT count(*) FROM comm_ops") == [(0,)]
    offsets, aligned = clock_offsets(prof, [0, 1], 50)
    assert aligned and offsets[0] == 0 and abs(offsets[1]) < 20_000
    bd = api.breakdown(prof)
    ch = step_timeline(prof, bd.rows, bd.totals, [])
    assert ch.data["aligned"] == "true" and ch.data["step"] == "50"
