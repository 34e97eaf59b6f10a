"""slow-link: the link below its peers' bandwidth is named by its ranks; a profile without link data says so in one
line; the golden answer on cluster4."""

from __future__ import annotations

from checkrun import assert_golden

from conftest import need
from stepdoctor.tools import api


def test_cluster4_slow_link_names_rank2(cluster4):
    sl = api.slow_links(cluster4)
    assert sl.links[0].src == 2 or sl.links[0].dst == 2
    assert sl.links[0].bandwidth_gbps < 0.8 * sl.links[0].median_gbps
    assert [f.ranks for f in sl.findings] == [[2]]
    f = sl.findings[0]
    assert f.evidence["links"] and all(2 in (lk["src"], lk["dst"]) for lk in f.evidence["links"])


def test_no_empty_table_is_printed(tmp_path):
    """gloo2_straggler has no link-level data and no environment: one line each says so, no header over no
    rows (issue 24: empty tables with "no slow rank" under them)."""
    import os
    import subprocess
    import sys

    from conftest import SHARED

    prof = str(need(SHARED / "real" / "gpu-h100" / "gloo2_straggler"))
    env = {**os.environ, "STEPDOCTOR_CACHE_DIR": str(tmp_path)}
    outs = {cmd: subprocess.run([sys.executable, "-m", "stepdoctor", cmd, prof], capture_output=True,
                                text=True, env=env, timeout=300).stdout for cmd in ("slow-links", "env")}
    assert "┏" not in outs["slow-links"] and "┏" not in outs["env"]
    assert "no link-level communication data in this" in outs["slow-links"]
    assert "0 finding(s): no check fired" in outs["slow-links"]
    assert "Environment audit: no environment variables recorded" in outs["env"]


def test_slow_link_on_cluster4_is_its_golden_answer(cluster4):
    assert_golden("slow-link", "cluster4", api.issues(cluster4, checks=["slow-link"]).findings)
