"""The CLI contract: bad input gives one line naming the file and the problem, exit 2, no traceback."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLUSTER4, KINETO, need


def run(*args: str, cache: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "STEPDOCTOR_CACHE_DIR": str(cache)}
    return subprocess.run([sys.executable, "-m", "stepdoctor", *args], capture_output=True, text=True,
                          env=env, timeout=300)


def assert_one_line_error(res: subprocess.CompletedProcess, *needles: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr
    for n in needles:
        assert n in lines[0], (n, lines[0])


def _kineto_trace(tmp_path: Path) -> Path:
    """A small valid Kineto trace (uncompressed) to damage."""
    src = need(KINETO / "trace_filter" / "sampled_rank-0.json.gz")
    out = tmp_path / "rank0.json"
    out.write_bytes(gzip.decompress(src.read_bytes()))
    return out


def test_missing_path(tmp_path):
    assert_one_line_error(run("breakdown", str(tmp_path / "nope"), cache=tmp_path / "c"), "nope",
                          "no such file or directory")


def test_no_recognizable_profile(tmp_path):
    d = tmp_path / "empty"
    d.mkdir()
    (d / "notes.txt").write_text("hello")
    assert_one_line_error(run("issues", str(d), cache=tmp_path / "c"), str(d), "no recognizable profile")


def test_truncated_json(tmp_path):
    """A trace cut in half keeps the events before the cut, with a warning that counts them."""
    f = _kineto_trace(tmp_path)
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])
    r = run("breakdown", str(f), cache=tmp_path / "c")
    assert r.returncode == 0, r.stderr
    assert "read before the damage are kept" in r.stdout and "Traceback" not in r.stderr


def test_invalid_json(tmp_path):
    f = tmp_path / "rank0.json"
    f.write_text('{"traceEvents": [ {"ph": "X", "name": } ]}')
    assert_one_line_error(run("breakdown", str(f), cache=tmp_path / "c"), f.name)


def test_corrupt_gzip(tmp_path):
    f = tmp_path / "rank0.json.gz"
    good = gzip.compress(_kineto_trace(tmp_path).read_bytes())
    f.write_bytes(good[:40] + b"\x00" * 64 + good[104:])
    assert_one_line_error(run("breakdown", str(f), cache=tmp_path / "c"), f.name)


def test_empty_trace_file(tmp_path):
    f = tmp_path / "rank0.json"
    f.write_bytes(b"")
    assert_one_line_error(run("breakdown", str(f), cache=tmp_path / "c"), f.name, "empty")


def test_csv_missing_required_columns(tmp_path):
    root = tmp_path / "prof"
    shutil.copytree(next(need(CLUSTER4).glob("*_ascend_pt")), root / "node0_1_20250101120000100_ascend_pt")
    kd = next(root.rglob("kernel_details.csv"))
    lines = kd.read_text().splitlines()
    header = lines[0].split(",")
    keep = [i for i, h in enumerate(header) if h not in ("Name", "Duration(us)")]
    kd.write_text("\n".join(",".join(c for i, c in enumerate(ln.split(",")) if i in keep) for ln in lines[:1]) + "\n")
    # with the trace and the step table gone too, kernel_details is the only device source: its columns are
    # required
    (kd.parent / "trace_view.json").unlink()
    (kd.parent / "step_trace_time.csv").unlink()
    assert_one_line_error(run("breakdown", str(root), cache=tmp_path / "c"), "kernel_details.csv")


def test_json_output_contract(tmp_path):
    res = run("breakdown", str(need(KINETO / "trace_filter")), "--format", "json", cache=tmp_path / "c")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert set(out["profile"]) >= {"path", "format", "ranks", "steps", "world_size"}
    assert out["profile"]["ranks"] == [0, 1]
    assert {"rank", "step", "step_ms", "compute_ms", "communication_ms", "comm_not_overlapped_ms", "overlapped_ms",
            "free_ms", "bubble_ms"} <= set(out["rows"][0])
    assert isinstance(out["warnings"], list)


@pytest.mark.parametrize("fmt", ["table", "markdown"])
def test_human_formats(tmp_path, fmt):
    res = run("breakdown", str(need(KINETO / "trace_filter")), "--format", fmt, cache=tmp_path / "c")
    assert res.returncode == 0, res.stderr
    assert "551" in res.stdout


def test_python_dash_m_stepdoctor_is_the_cli():
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "stepdoctor", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "whatif" in r.stdout and "critical-path" in r.stdout and "hang" in r.stdout


def _imported(args: list[str], cache: Path) -> set[str]:
    """The modules a CLI run imports (python -X importtime, read from its stderr)."""
    env = {**os.environ, "STEPDOCTOR_CACHE_DIR": str(cache)}
    r = subprocess.run([sys.executable, "-X", "importtime", "-m", "stepdoctor", *args], capture_output=True,
                       text=True, env=env)
    return {ln.rsplit("|", 1)[-1].strip() for ln in r.stderr.splitlines() if ln.startswith("import time:")}


def test_a_command_imports_only_what_it_needs(tmp_path):
    """--help and env never load the hang stack, the report (jinja2) or the MCP SDK; a question answered from
    the answer kept beside the store loads neither pandas nor DuckDB."""
    example = str(Path(__file__).resolve().parent.parent / "examples" / "cluster4")
    heavy = {"stepdoctor.analysis.hang.report", "stepdoctor.tools.report", "jinja2", "mcp"}
    for args in (["--help"], ["env", example], ["env", example]):
        mods = _imported(args, tmp_path / "c")
        assert not heavy & mods, (args, heavy & mods)
    assert not {"pandas", "duckdb"} & mods   # the second env: a kept answer
