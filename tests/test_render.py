"""Terminal and Markdown rendering: tables fit the terminal, long kernel names stay readable and distinct."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from conftest import CLUSTER4, need
from stepdoctor.analysis.store import IngestOptions
from stepdoctor.analysis.timeline.names import display_name, display_names, short_name
from stepdoctor.tools import render, render_fit
from stepdoctor.tools.render import Table, fit_table

CTA5 = ("void split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<float, float, float, "
        "5ul>(at::GenericPackedTensorAccessor<float, 2ul, at::RestrictPtrTraits, int>, "
        "at::GenericPackedTensorAccessor<float, 1ul, at::RestrictPtrTraits, long>)")
CTA2 = CTA5.replace("5ul>(", "2ul>(")
WARP5 = CTA5.replace("cta_per_row", "warp_per_row")


def test_short_name_drops_templates_and_parameters():
    assert short_name(CTA5) == "split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1"
    assert short_name("Memcpy DtoD (Device -> Device)") == "Memcpy DtoD (Device -> Device)"
    assert short_name("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float> >(int)") \
        == "native::vectorized_elementwise_kernel"


def test_display_name_keeps_template_arguments_and_fits():
    assert display_name("volta_sgemm_128x32_nt", 10) == "volta_…_nt"
    assert display_name("volta_sgemm_128x32_nt", 21) == "volta_sgemm_128x32_nt"
    full = display_name(CTA5, 200)
    assert full == "split_embedding_backward_codegen_rowwise_adagrad_unweighted_kernel_cta_per_row_1<float,float,float,5ul>"
    for w in (8, 31, 48, 80):
        d = display_name(CTA5, w)
        assert len(d) <= w and "…" in d
    assert display_name(CTA5, 40).endswith("float,5ul>")  # the tail that tells instantiations apart
    # parentheses that are not a parameter list stay: anonymous namespaces, lambdas, plain names
    lam = ("void at::native::(anonymous namespace)::elementwise_kernel<128, 4, "
           "at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<float, float, float> >(at::TensorIteratorBase&, "
           "at::native::BinaryFunctor<float, float, float> const&)::{lambda(int)#1}>(int, "
           "at::native::gpu_kernel_impl_nocast::{lambda(int)#1})")
    assert display_name(lam, len(lam)) == lam  # what fits is shown whole
    assert display_name(lam, 200).startswith("at::native::elementwise_kernel<128,4,")
    assert display_name(lam, 200).endswith("{lambda(int)#1}>")
    plain = display_name("Memcpy HtoD (Pinned -> Device) with a long tail of words", 20)
    assert plain.startswith("Memcpy HtoD") and plain.endswith("words") and len(plain) == 20


def test_display_names_tell_apart_names_that_would_show_the_same():
    names = [CTA5, WARP5, CTA2, "volta_sgemm_128x32_nt"]
    for w in (31, 40, 60):
        plain = [display_name(n, w) for n in names]
        assert plain[0] == plain[1]  # the middle ellipsis hides cta/warp: the case this is for
        shown = display_names(names, w)
        assert len(set(shown)) == 4, shown
        assert all(len(s) <= w for s in shown)
        assert "cta" in shown[0] and "warp" in shown[1] and shown[3] == "volta_sgemm_128x32_nt"
    assert display_names(names, 150)[0].endswith("cta_per_row_1<float,float,float,5ul>")


def test_rank_lists_collapse_to_ranges():
    assert render.fmt_value([0, 1, 2, 3, 7, 9, 10]) == "0-3,7,9-10"
    assert render.fmt_value(list(range(1024))) == "0-1023"
    assert render.fmt_value([5]) == "5"
    assert render.fmt_value(list(range(0, 40, 2))) == "0,2,4,6,8,… (20)"
    assert render.fmt_value(["a", "b"]) == "a,b"


def _lines(table: Table, width: int) -> list[str]:
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(fit_table(table, width))
    return out.getvalue().splitlines()


def _issue_tables(tmp_path):
    from stepdoctor.analysis.build import open_profile
    from stepdoctor.tools import api

    report = api.issues(open_profile(need(CLUSTER4), IngestOptions(cache_dir=tmp_path)))
    return report, render.tables_for(report)[0]


@pytest.mark.parametrize("width", [80, 100, 160, 240])
def test_findings_table_fits_the_terminal_with_whole_check_ids(tmp_path, width):
    report, table = _issue_tables(tmp_path)
    lines = _lines(table, width)
    assert max(map(len, lines)) <= width
    body = "\n".join(lines)
    for f in report.findings:  # one finding per row, its check id never broken across lines
        assert re.search(rf"│\s*{re.escape(f.check)}\s*│", body), f.check
    header = "\n".join(lines[:4])
    assert "check" in header and "title" in header and "severity" in header
    # optional columns go first on a narrow terminal and come back on a wide one
    assert ("fixes" in header) == (width >= 240)
    assert ("subject" in header) == (width >= 160)


def test_breakdown_drops_unknown_columns_and_right_aligns_numbers(tmp_path):
    from stepdoctor.analysis.build import open_profile
    from stepdoctor.tools import api

    prof = open_profile(need(CLUSTER4), IngestOptions(cache_dir=tmp_path))
    per_step = render.tables_for(api.breakdown(prof))[0]
    # bubble is known (0: no receive ops on this Ascend profile); optional columns still give way at 80 columns
    assert {r[per_step.header.index("bubble_ms")] for r in per_step.rows} == {"0.00"}
    lines = _lines(per_step, 80)
    assert max(map(len, lines)) <= 80
    head = "\n".join(lines[:5])
    assert "overlap" in head and "compute" in head
    assert "time" in head and "comm not" in head and "_ms" not in head  # readable headers, unit in the title
    row = next(ln for ln in lines if ln.startswith("│    0 │    2 │"))
    assert "│ 350.00 │" in row and "│ 30.08 │ 296.11 │" in row   # rank 0, step 2: free, then the idle tail


def test_cli_tables_fit_the_piped_width_or_columns(tmp_path):
    """Piped (no terminal, no $COLUMNS): the findings table keeps its steps and share columns within
    render.PIPED_WIDTH; with COLUMNS=80 everything fits 80 columns, text wrapped under its number."""
    env = {**{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
           "STEPDOCTOR_CACHE_DIR": str(tmp_path)}
    cmd = [sys.executable, "-m", "stepdoctor", "issues", str(need(CLUSTER4))]
    wide = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert wide.returncode == 0, wide.stderr
    head = [ln for ln in wide.stdout.splitlines() if ln[:1] == "┃"]
    assert max(map(len, wide.stdout.splitlines())) <= render.PIPED_WIDTH
    assert "steps" in "".join(head) and "% of" in "".join(head)
    res = subprocess.run(cmd, capture_output=True, text=True, env={**env, "COLUMNS": "80"}, timeout=300)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    table = [ln for ln in lines if ln[:1] in "┏┃┡│└"]
    assert table and max(map(len, lines)) <= 80
    assert "slow-dataloader" in res.stdout and "fixes: " in res.stdout  # fixes listed under each finding
    # each finding's paragraph hangs under its number, its fixes under the first fix
    first = lines.index(next(ln for ln in lines if ln.startswith("1. Rank 0 spends")))
    fixes = next(i for i in range(first, len(lines)) if lines[i].startswith("   fixes: gc-"))
    para = lines[first:fixes]
    assert all(ln.startswith("   ") and ln[3] != " " for ln in para[1:]) and len(para) >= 2
    assert "250.05 ms more (slow in 1 of its 2 steps: 125.03 ms per step" in " ".join(ln.strip() for ln in para)
    nxt = next(i for i in range(fixes, len(lines)) if lines[i].startswith("2. "))
    assert lines[fixes + 1].startswith(" " * 10 + "slow-rank") and nxt > fixes + 1
    assert all(ln.startswith(" " * 10) and ln[10] != " " for ln in lines[fixes + 1:nxt - 1])  # then a blank line


def test_markdown_keeps_every_column_and_shortens_names():
    t = Table("Top changes", ["name", "delta_ms"], [[CTA5, "8.563"], [WARP5, "3.097"]], names=("name",))
    md = "\n".join(render.markdown_tables([t]))
    assert "| name | delta_ms |" in md
    rows = [ln for ln in md.splitlines() if ln.startswith("| split")]
    assert len(rows) == 2 and rows[0] != rows[1] and all(len(r) < 120 for r in rows)


def test_wrap_breaks_lists_before_words_and_folds_only_what_cannot_fit():
    v = "'level0:NA;level1:ring'"
    assert render_fit.wrap_text(v, 18).splitlines() == ["'level0:NA;", "level1:ring'"]  # at the list separator
    assert render_fit.wrap_text("expandable_segments:True", 22).splitlines() == ["expandable_segments:", "True"]
    # a piece wider than the line starts a line of its own before it is folded
    assert render_fit.wrap_text("set PYTORCH_NPU_ALLOC_CONF", 12).splitlines() == ["set", "PYTORCH_NPU_", "ALLOC_CONF"]
    assert render_fit.wrap_text("a\n\nb", 10) == "a\n\nb" and render_fit.wrap_text("", 10) == ""
    # a comma inside a number or a shape is not a list separator
    assert render_fit.wrap_text("transfers of 1,000,000 B", 12).splitlines() == ["transfers of", "1,000,000 B"]
    assert render_fit.wrap_text("(4,2048;4,2048)", 10).splitlines() == ["(4,2048;", "4,2048)"]


@given(st.text(alphabet=st.sampled_from("ab1_;,|:/= \n"), max_size=80), st.integers(1, 30))
def test_wrap_keeps_every_character_within_the_width(text, width):
    out = render_fit.wrap_text(text, width)
    assert all(len(line) <= width for line in out.splitlines())
    assert out.split() == [] if not text.split() else "".join(out.split()) == "".join(text.split())


def test_text_columns_share_the_width_by_need():
    assert render_fit.flex_widths({2: 10, 3: 90}, 60) == {2: 10, 3: 50}  # the short one is not wrapped
    assert render_fit.flex_widths({2: 40, 3: 90}, 60) == {2: 30, 3: 30}
    assert render_fit.flex_widths({2: 40}, 4) == {2: 8}                   # never below 8


def test_env_values_wrap_at_separators(tmp_path):
    from stepdoctor.analysis.build import open_profile
    from stepdoctor.tools import api

    lines = _lines(render.tables_for(api.env_audit(open_profile(need(CLUSTER4), IngestOptions(cache_dir=tmp_path))))[0], 80)
    assert max(map(len, lines)) <= 80
    cells = [[c.strip() for c in ln.split("│")[1:-1]] for ln in lines if ln.startswith("│")]
    algo = cells.index(next(r for r in cells if r[0] == "HCCL_ALGO"))
    assert [cells[algo][2], cells[algo + 1][2]] == ["'level0:NA;", "level1:ring'"]
    alloc = cells.index(next(r for r in cells if r[0] == "PYTORCH_NPU_ALLOC_CONF"))
    assert cells[alloc][3] + cells[alloc + 1][3] == "expandable_segments:True"  # folded: wider than its column


def test_cli_fixes_table_json_and_markdown():
    from stepdoctor.knowledge.loader import load_fixes

    ids = sorted(load_fixes())
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}

    def run(*args: str) -> str:
        res = subprocess.run([sys.executable, "-m", "stepdoctor", "fixes", *args], capture_output=True,
                             text=True, env=env, timeout=120)
        assert res.returncode == 0, res.stderr
        return res.stdout

    out = run()
    table = [ln for ln in out.splitlines() if ln[:1] in "┏┃┡│└"]
    assert max(map(len, table)) <= render.PIPED_WIDTH and out.startswith(f"{len(ids)} fixes")
    assert [ln.split("│")[1].strip() for ln in table if ln.startswith("│") and ln.split("│")[1].strip()] == ids
    listed = json.loads(run("--format", "json"))  # the contract's shape: a list of fixes
    assert [f["id"] for f in listed] == ids and {"title", "vendors", "frameworks", "checks"} <= set(listed[0])
    md = run("--check", "gc-pause", "--format", "markdown")
    assert "| id | vendors | checks | title |" in md and "| gc-freeze-before-training | any | gc-pause, slow-rank |" in md


def test_cells_titles_and_the_profile_line_are_not_read_as_markup(tmp_path):
    t = Table("ops [bold]x[/bold]", ["name", "value"], [["operator[] on [ascend_pt]", "[red]1[/red]"]])
    body = "\n".join(_lines(t, 80))
    assert "ops [bold]x[/bold]" in body and "operator[] on [ascend_pt]" in body and "[red]1[/red]" in body
    env = {**{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
           "STEPDOCTOR_CACHE_DIR": str(tmp_path)}
    res = subprocess.run([sys.executable, "-m", "stepdoctor", "breakdown", str(need(CLUSTER4))],
                         capture_output=True, text=True, env=env, timeout=300)
    lines = res.stdout.splitlines()
    head = lines[:lines.index(next(ln for ln in lines if ln.startswith("Breakdown")))]
    assert " ".join(head).split() == [str(need(CLUSTER4)), "[ascend_pt_text]", "ranks", "0-3", "steps", "1-2",
                                      "world", "size", "4"], head
    assert "world size 4" in head[-1] and max(map(len, head)) <= render.PIPED_WIDTH  # broken between fields only


def test_checks_made_for_other_vendors_are_one_row():
    """A GPU profile's issues list the Ascend-only checks as one row with their count, not a row each."""
    from stepdoctor.tools.models import IssueReport

    rep = IssueReport(profile={"path": "p", "format": "kineto", "ranks": [0], "steps": [1]}, findings=[],
                      not_applicable={"aicpu-op": "applies to ascend profiles", "slow-link": "applies to ascend profiles",
                                      "env-var": "needs env"})
    t = next(t for t in render.tables_for(rep) if t.title == "Checks not applicable")
    assert t.rows == [["env-var", "needs env"], ["2 checks", "made for ascend profiles: aicpu-op, slow-link"]]
