"""Inputs made to hurt, on copies of real profiles (the shared data is never written): files that never end
(FIFOs), reads that never end (a DB view over an endless recursive CTE, a header of a million columns, a
pickle whose values expand 2**40-fold), values too big to hold, names that are not UTF-8, junk entries, an
empty trace, and a file swapped for a link to outside the roots between the check and the read. Each
finishes within its bound; the damaged part is lost with a warning that says so, the rest answers as before,
or one line and exit 2 when nothing is left."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import REPO, SHARED, need

REAL = SHARED / "real"
GLOO = REAL / "gpu-h100" / "gloo2_straggler" / "traces"
TEXT = REAL / "ascend" / "msinsight-pt-text-l0"
DB = REAL / "ascend" / "msinsight-pt-db-l0"
HANG = REPO / "tests" / "data" / "real_hang" / "stuck"
CLI = [str(REPO / ".venv" / "bin" / "stepdoctor")] if (REPO / ".venv" / "bin" / "stepdoctor").exists() else \
    [sys.executable, "-m", "stepdoctor"]
BOUND_S = 60


def run(tmp: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "STEPDOCTOR_CACHE_DIR": str(tmp / "cache")}
    t0 = time.monotonic()
    r = subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=BOUND_S)
    return r, time.monotonic() - t0


def breakdown(tmp: Path, path: Path) -> dict:
    r, _ = run(tmp, "breakdown", str(path), "--format", "json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def rows_of(out: dict, rank: int) -> list[dict]:
    return [r for r in out["rows"] if r["rank"] == rank]


def one_line_exit_2(r: subprocess.CompletedProcess[str], says: str) -> None:
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert says in r.stderr, r.stderr


@pytest.fixture
def gloo(tmp_path: Path) -> tuple[Path, dict]:
    """A copy of the two-rank gloo job and its clean breakdown."""
    dest = tmp_path / "gloo"
    shutil.copytree(need(GLOO), dest)
    return dest, breakdown(tmp_path / "clean", dest)


def _rank1(folder: Path) -> Path:
    return sorted(folder.iterdir())[-1]


def test_a_fifo_in_place_of_a_rank_costs_that_rank(tmp_path: Path, gloo):
    dest, clean = gloo
    f = _rank1(dest)
    f.unlink()
    os.mkfifo(f)
    out = breakdown(tmp_path, dest)
    assert sorted({r["rank"] for r in out["rows"]}) == [0] and rows_of(out, 0) == rows_of(clean, 0)
    assert any(f"{f.name}: a FIFO, not a regular file: not read" in w for w in out["warnings"])
    r, _ = run(tmp_path, "breakdown", str(f))
    one_line_exit_2(r, "a FIFO, not a regular file: not read")


def test_a_broken_link_named_like_a_trace_costs_nothing(tmp_path: Path, gloo):
    dest, clean = gloo
    (dest / "rank9.pt.trace.json").symlink_to(tmp_path / "nowhere")
    out = breakdown(tmp_path, dest)
    assert out["rows"] == clean["rows"]
    assert f"{dest / 'rank9.pt.trace.json'}: a broken link, not a regular file: not read" in out["warnings"]


def test_a_fifo_among_stack_files_is_reported_and_the_hang_still_diagnosed(tmp_path: Path):
    dest = tmp_path / "stuck"
    shutil.copytree(HANG, dest)
    (dest / "stacks" / "pyspy_rank_3.json").unlink()
    os.mkfifo(dest / "stacks" / "pyspy_rank_3.json")
    r, took = run(tmp_path, "hang", str(dest))
    assert r.returncode == 0 and took < BOUND_S, r.stderr
    assert "pyspy_rank_3.json: cannot be read (a FIFO, not a regular file: not read)" in r.stdout
    assert "default_pg #5 gloo:all_reduce: missing, ranks [5]" in r.stdout


def test_a_db_view_over_an_endless_recursive_cte_is_not_read(tmp_path: Path):
    dest = tmp_path / "db"
    shutil.copytree(need(DB), dest)
    db = next(dest.rglob("ascend_pytorch_profiler_*.db"))
    con = sqlite3.connect(db)
    cols = ", ".join(f"t.{r[1]}" for r in con.execute("PRAGMA table_info(TASK)"))
    con.execute("ALTER TABLE TASK RENAME TO TASK_OLD")
    con.execute("CREATE VIEW TASK AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
                f"SELECT {cols} FROM n, TASK_OLD t")
    con.commit()
    con.close()
    out = breakdown(tmp_path, dest)
    assert any("TASK is a view, not a table: not read" in w for w in out["warnings"])


def test_a_header_of_a_million_columns_is_not_read(tmp_path: Path):
    dest = tmp_path / "text"
    shutil.copytree(need(TEXT), dest)
    clean = breakdown(tmp_path / "clean", dest)
    k = sorted(dest.rglob("kernel_details.csv"))[-1]
    header = k.read_text(encoding="utf-8").splitlines()[0]
    k.write_text(header + "".join(f",c{i}" for i in range(10**6)) + "\n", encoding="utf-8")
    r, took = run(tmp_path, "breakdown", str(dest), "--format", "json")
    assert r.returncode == 0 and took < BOUND_S, r.stderr
    warnings = json.loads(r.stdout)["warnings"]
    assert any("kernel_details.csv: not a readable CSV (1000" in w and "over the 4096 a profiler CSV has" in w
               for w in warnings), warnings
    assert rows_of(json.loads(r.stdout), 0) == rows_of(clean, 0)


@pytest.mark.parametrize("where", ["input_sizes", "process_group", "pg_config"])
def test_a_billion_laughs_dump_costs_its_rank(tmp_path: Path, where: str):
    dest = tmp_path / "stuck"
    shutil.copytree(HANG, dest)
    p = dest / "fr" / "gloo_fr_trace_rank_1"
    doc = pickle.loads(p.read_bytes())
    laughs: list = []
    for _ in range(40):
        laughs = [laughs, laughs]
    if where == "pg_config":
        doc["pg_config"] = {"0": {"name": laughs, "desc": laughs, "ranks": laughs}}
    else:
        for e in doc["entries"]:
            e[where] = laughs
    p.write_bytes(pickle.dumps(doc))
    assert p.stat().st_size < 100_000
    r, took = run(tmp_path, "hang", str(dest))
    assert r.returncode == 0 and took < 20, r.stderr
    assert "gloo_fr_trace_rank_1: its values expand past what the file holds" in r.stdout
    assert "default_pg #5 gloo:all_reduce: missing, ranks [5]" in r.stdout


def test_a_40_mb_kernel_name_is_cut_not_fatal(tmp_path: Path, gloo):
    dest, clean = gloo
    f = _rank1(dest)
    doc = json.loads(gzip.decompress(f.read_bytes()))
    kernel = next(e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel")
    kernel["name"] = "k" * 40_000_000
    f.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    out = breakdown(tmp_path, dest)
    assert any("device_ops.name: 1 value(s) longer than 1,048,576 characters cut there" in w
               for w in out["warnings"])
    assert rows_of(out, 0) == rows_of(clean, 0) and rows_of(out, 1) == rows_of(clean, 1)


def test_names_that_are_not_utf8(tmp_path: Path, gloo):
    dest, clean = gloo
    f = _rank1(dest)
    f.rename(dest / os.fsdecode(b"x\xff" + os.fsencode(f.name)))
    out = breakdown(tmp_path, dest)
    assert rows_of(out, 1) == rows_of(clean, 1)
    text = tmp_path / "text"
    shutil.copytree(need(TEXT), text)
    rank = sorted(p for p in text.iterdir() if p.is_dir())[-1]
    rank.rename(text / os.fsdecode(b"r\xff\xfe_ascend_pt"))
    out = breakdown(tmp_path / "t", text)
    assert sorted({r["rank"] for r in out["rows"]}) == [0, 1]


def test_bytes_that_are_not_utf8_inside_a_trace_cost_the_names_they_are_in(tmp_path: Path, gloo):
    dest, clean = gloo
    f = _rank1(dest)
    raw = gzip.decompress(f.read_bytes())
    at = raw.index(b'"cat": "kernel", "name": "', len(raw) // 2) + len(b'"cat": "kernel", "name": "')
    f.write_bytes(gzip.compress(raw[:at] + b"\xff\xfe" + raw[at:], compresslevel=1))
    out = breakdown(tmp_path, dest)
    assert rows_of(out, 1) == rows_of(clean, 1)
    assert any("2 byte sequence(s) that are not UTF-8 read as U+FFFD" in w for w in out["warnings"]), out["warnings"]


def test_junk_entries_cost_themselves(tmp_path: Path, gloo):
    dest, clean = gloo
    f = sorted(dest.iterdir())[0]
    doc = json.loads(gzip.decompress(f.read_bytes()))
    doc["traceEvents"][5:5] = [1, "x", None, [1, 2], {"ph": "X"}]
    f.write_bytes(gzip.compress(json.dumps(doc).encode(), compresslevel=1))
    out = breakdown(tmp_path, dest)
    assert any("4 entries of traceEvents are not events" in w for w in out["warnings"])
    assert rows_of(out, 0) == rows_of(clean, 0)


def test_a_trace_with_no_events_is_a_lost_rank(tmp_path: Path, gloo):
    dest, _ = gloo
    f = _rank1(dest)
    f.unlink()
    empty = dest / "rank1.pt.trace.json"
    empty.write_text('{"schemaVersion": 1, "distributedInfo": {"rank": 1, "world_size": 2}, "traceEvents": []}')
    out = breakdown(tmp_path, dest)
    assert sorted({r["rank"] for r in out["rows"]}) == [0]
    assert any("rank1.pt.trace.json: no events" in w for w in out["warnings"])
    r, _ = run(tmp_path, "breakdown", str(empty))
    one_line_exit_2(r, "no events: its traceEvents holds no complete event with a time")


CONFINED = r"""
import json, sys
from pathlib import Path
from stepdoctor.analysis import files
from stepdoctor.analysis.store import IngestOptions
from stepdoctor.analysis.build import open_profile
import os
root, cache = Path(sys.argv[1]), Path(sys.argv[2])
files.confine([root])
assert "STEPDOCTOR_CONFINED_ROOTS" not in os.environ   # children get it in their own environment only
prof = open_profile(root / "gloo", IngestOptions(cache_dir=cache, engine=sys.argv[3]))
print(json.dumps({"ranks": prof.info.ranks, "warnings": prof.warnings}))
"""


@pytest.mark.parametrize("engine", ["here", "pool"])
def test_a_file_swapped_for_a_link_to_outside_is_refused_when_opened(tmp_path: Path, gloo, engine: str):
    """What a rename race leaves (a checked file that is a link to outside by the time it is read): the
    reader's open refuses it, whatever the check before said; in this process, and in the parse workers the
    pool starts (new interpreters, told the roots in the environment they start with)."""
    dest, _ = gloo
    root = dest.parent
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    f = _rank1(dest)
    shutil.move(f, outside / f.name)
    f.symlink_to(outside / f.name)
    r = subprocess.run([sys.executable, "-c", CONFINED, str(root), str(tmp_path / "cache"), engine],
                       capture_output=True, text=True, timeout=BOUND_S)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got["ranks"] == [0]
    assert any("outside the allowed roots when opened" in w for w in got["warnings"]), got["warnings"]
    shutil.rmtree(outside)


def test_a_db_that_is_no_sqlite_file_beside_a_text_export_costs_nothing(tmp_path: Path):
    dest = tmp_path / "text"
    shutil.copytree(need(TEXT), dest)
    clean = breakdown(tmp_path / "clean", dest)
    (dest / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_1.db").write_bytes(
        os.urandom(5000))
    out = breakdown(tmp_path, dest)
    assert rows_of(out, 1) == rows_of(clean, 1)
    assert "rank1_ascend_pt: ascend_pytorch_profiler_1.db is not an SQLite database (damaged or not an export); " \
           "the text export beside it is read" in out["warnings"]


def test_a_deeply_nested_trace_view_costs_that_file(tmp_path: Path):
    dest = tmp_path / "text"
    shutil.copytree(need(TEXT), dest)
    clean = breakdown(tmp_path / "clean", dest)
    t = dest / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    t.write_text("[" * 200_000 + "]" * 200_000)
    r, took = run(tmp_path, "breakdown", str(dest), "--format", "json")
    assert r.returncode == 0 and took < BOUND_S, r.stderr
    out = json.loads(r.stdout)
    assert rows_of(out, 0) == rows_of(clean, 0) and sorted({x["rank"] for x in out["rows"]}) == [0, 1]
    assert any("trace_view.json: invalid JSON" in w and "skipped" in w for w in out["warnings"])


def test_nesting_past_the_decoder_depth_in_a_kineto_trace_is_damage_not_a_crash(tmp_path: Path):
    """Found by evals/fuzz.py: 200,000 opening brackets inside a lone trace gave `RecursionError` as the
    message. It is damage at the first long run of brackets: one line, exit 2 (nothing before it is usable)."""
    src = need(REAL / "kineto" / "kineto-docs-h100-sync-before" / "before_fix_trace.json")
    raw = src.read_bytes()
    at = raw.index(b"{", len(raw) // 2)
    bad = tmp_path / "before_fix_trace.json"
    bad.write_bytes(raw[:at] + b"[" * 200_000 + b"1" + b"]" * 200_000 + raw[at:])
    r, _ = run(tmp_path, "breakdown", str(bad))
    one_line_exit_2(r, f"invalid JSON: nested too deeply at byte {at}")
    assert "RecursionError" not in r.stderr
