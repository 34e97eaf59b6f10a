"""Terminal and Markdown rendering: tables fit the terminal, long kernel names stay readable and distinct."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys

import pytest

from conftest import CLUSTER4, need
from stepdoctor.analysis.metrics.names import display_name, display_names, short_name
from stepdoctor.tools import render
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
    assert render._f([0, 1, 2, 3, 7, 9, 10]) == "0-3,7,9-10"
    assert render._f(list(range(1024))) == "0-1023"
    assert render._f([5]) == "5"
    assert render._f(list(range(0, 40, 2))) == "0,2,4,6,8,… (20)"
    assert render._f(["a", "b"]) == "a,b"


def _lines(table: Table, width: int) -> list[str]:
    from rich.console import Console

    out = io.StringIO()
    Console(file=out, width=width, color_system=None).print(fit_table(table, width))
    return out.getvalue().splitlines()


def _issue_tables(tmp_path):
    from stepdoctor.analysis.store import open_profile
    from stepdoctor.tools import api

    report = api.issues(open_profile(need(CLUSTER4), cache_dir=tmp_path))
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
    from stepdoctor.analysis.store import open_profile
    from stepdoctor.tools import api

    prof = open_profile(need(CLUSTER4), cache_dir=tmp_path)
    per_step = render.tables_for(api.breakdown(prof))[0]
    assert {r[per_step.header.index("bubble_ms")] for r in per_step.rows} == {"-"}  # not known on this profile
    lines = _lines(per_step, 80)
    assert max(map(len, lines)) <= 80
    head = "\n".join(lines[:5])
    assert "bubble" not in head and "overlap" in head and "compute" in head
    assert "time" in head and "comm not" in head and "_ms" not in head  # readable headers, unit in the title
    row = next(ln for ln in lines if "310.93" in ln)
    assert row.rstrip().endswith("310.93 │")  # free_ms of rank 0, step 2: right-aligned


def test_cli_tables_fit_80_columns_when_piped(tmp_path):
    env = {**{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
           "STEPDOCTOR_CACHE_DIR": str(tmp_path)}
    res = subprocess.run([sys.executable, "-m", "stepdoctor.tools.cli", "issues", str(need(CLUSTER4))],
                         capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    table = [ln for ln in res.stdout.splitlines() if ln[:1] in "┏┃┡│└"]
    assert table and max(map(len, table)) <= 80
    assert "slow-dataloader" in res.stdout and "fixes: " in res.stdout  # fixes listed under each finding


def test_markdown_keeps_every_column_and_shortens_names():
    t = Table("Top changes", ["name", "delta_ms"], [[CTA5, "8.563"], [WARP5, "3.097"]], names=("name",))
    md = "\n".join(render.markdown_tables([t]))
    assert "| name | delta_ms |" in md
    rows = [ln for ln in md.splitlines() if ln.startswith("| split")]
    assert len(rows) == 2 and rows[0] != rows[1] and all(len(r) < 120 for r in rows)
