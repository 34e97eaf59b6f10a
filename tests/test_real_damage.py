"""A damaged file costs only what it holds: each kind of damage, applied to a copy of a real profile
(evals/generate/damage.py; the shared data is never written), run through `stepdoctor breakdown --format json`
in a subprocess. Outcome: exit 0 with the damaged rank kept and one warning naming the file and what was lost,
the other rank's numbers unchanged; or exit 2 with one line on stderr, no traceback, when nothing usable is
left. Cases a reader does not meet yet are strict xfails that name the reader and the problem."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, SHARED, need
from stepdoctor.evals.generate.damage import DAMAGES, damage

REAL = SHARED / "real"
TEXT = REAL / "ascend" / "msinsight-pt-text-l0"       # 2 ranks, full text export with trace_view.json
SERVER = REAL / "ascend" / "msinsight-server-fixtures"  # test_rank_0 has communication.json
DB = REAL / "ascend" / "msinsight-pt-db-l0"
GLOO = REAL / "gpu-h100" / "gloo2_straggler" / "traces"
DOCS = REAL / "kineto" / "kineto-docs-h100-sync-before"
OUT1 = "rank1_ascend_pt/ASCEND_PROFILER_OUTPUT/"
RANK1_GZ = "vm_1.1795736822148655725.pt.trace.json.gz"
CLI = [str(REPO / ".venv" / "bin" / "stepdoctor")] if (REPO / ".venv" / "bin" / "stepdoctor").exists() else \
    [sys.executable, "-m", "stepdoctor"]


@dataclass(frozen=True)
class Case:
    kind: str
    src: Path
    rel: str                         # the damaged file, relative to the copy
    ranks: list[int] | None          # ranks kept (exit 0), None: exit 2
    says: str                        # regex: the one warning naming the file (exit 0) or the stderr line (exit 2)
    column: str | None = None
    parts: tuple[str, ...] = ()
    xfail: str = ""                  # the reader and its problem, when it does not meet the outcome yet

    @property
    def id(self) -> str:
        return f"{self.kind}-{self.src.name}-{Path(self.rel).name}"


SRV = ("test_rank_0", "test_rank_1")
CASES = [
    Case("truncate", TEXT, OUT1 + "trace_view.json", [0, 1],
         r"rank 1: ASCEND_PROFILER_OUTPUT/trace_view\.json: truncated: the file ends at byte 904000 .*skipped; "
         r"no host ops, steps"),
    Case("truncate", TEXT, OUT1 + "kernel_details.csv", [0, 1],
         r"rank 1: ASCEND_PROFILER_OUTPUT/kernel_details\.csv: 1 of 96 rows without a name, start or duration "
         r"skipped"),
    Case("empty", TEXT, OUT1 + "trace_view.json", [0, 1],
         r"rank 1: ASCEND_PROFILER_OUTPUT/trace_view\.json: empty file \(0 bytes\): skipped; no host ops"),
    Case("empty", TEXT, OUT1 + "step_trace_time.csv", [0, 1],
         r"rank 1: ASCEND_PROFILER_OUTPUT/step_trace_time\.csv: empty file \(0 bytes\).*skipped"),
    Case("missing", TEXT, OUT1 + "trace_view.json", [0, 1],
         r"rank 1: ASCEND_PROFILER_OUTPUT/trace_view\.json: missing: no host ops, steps, launch links"),
    Case("missing", TEXT, OUT1 + "kernel_details.csv", [0, 1],
         r"rank 1: ASCEND_PROFILER_OUTPUT/kernel_details\.csv: missing: kernel types, block dims"),
    Case("missing", TEXT, OUT1 + "step_trace_time.csv", [0, 1],
         r"rank 1: ASCEND_PROFILER_OUTPUT/step_trace_time\.csv: missing: the vendor per-step breakdown"),
    Case("missing", TEXT, "rank1_ascend_pt/profiler_info_1.json", [0, 1],
         r"rank1_ascend_pt: no profiler_info_\{rank\}\.json; using placeholder rank 1"),
    Case("missing", SERVER, "test_rank_0/ASCEND_PROFILER_OUTPUT/communication.json", [0, 1],
         r"rank 0: ASCEND_PROFILER_OUTPUT/communication\.json: missing", parts=SRV),
    Case("bad_utf8", TEXT, OUT1 + "kernel_details.csv", [0, 1],
         r"rank 1: ASCEND_PROFILER_OUTPUT/kernel_details\.csv: .*(UTF-8|utf-8)"),
    Case("bad_utf8", TEXT, OUT1 + "trace_view.json", [0, 1],
         r"rank 1: ASCEND_PROFILER_OUTPUT/trace_view\.json: invalid JSON .*skipped; no host ops"),
    Case("short_row", TEXT, OUT1 + "step_trace_time.csv", [0, 1],
         r"rank 1: ASCEND_PROFILER_OUTPUT/step_trace_time\.csv: .*row"),
    Case("short_row", TEXT, OUT1 + "kernel_details.csv", [0, 1],
         r"rank 1: ASCEND_PROFILER_OUTPUT/kernel_details\.csv: 1 of 191 rows without a name, start or duration "
         r"skipped"),
    Case("missing_column", TEXT, OUT1 + "step_trace_time.csv", [0, 1],
         r"rank 1: ASCEND_PROFILER_OUTPUT/step_trace_time\.csv: missing required columns: Free", column="Free"),
    Case("trailing_garbage", TEXT, OUT1 + "trace_view.json", [0, 1],
         r"rank 1: ASCEND_PROFILER_OUTPUT/trace_view\.json: .*skipped; no host ops"),
    Case("truncate", SERVER, "test_rank_0/ASCEND_PROFILER_OUTPUT/communication.json", [0, 1],
         r"rank 0: ASCEND_PROFILER_OUTPUT/communication\.json: invalid JSON \(Input data was truncated\); skipped",
         parts=SRV),
    Case("trailing_garbage", SERVER, "test_rank_0/ASCEND_PROFILER_OUTPUT/communication.json", [0, 1],
         r"rank 0: ASCEND_PROFILER_OUTPUT/communication\.json: invalid JSON \(.*trailing characters.*\); skipped",
         parts=SRV),
    Case("corrupt_db", DB, OUT1 + "analysis.db", [0, 1],
         r"rank 1: analysis\.db: not a readable SQLite database \(file is not a database\); communication details "
         r"skipped"),
    Case("corrupt_db", DB, OUT1 + "ascend_pytorch_profiler_1.db", [0, 1],
         # the rank keeps the step table of analysis.db beside the damaged DB
         r"rank 1: ascend_pytorch_profiler_1\.db: unreadable \(damaged SQLite file\); the rank keeps only the step "
         r"table of analysis\.db \(1 step row\(s\)\), no timeline"),
    Case("gz_cut", GLOO, RANK1_GZ, [0, 1],   # the events decompressed before the cut are kept
         r"rank 1: vm_1\.1795736822148655725\.pt\.trace\.json\.gz is damaged \(corrupt gzip \(Compressed file "
         r"ended.*\): the \d+ host and device events read before the damage are kept"),
    Case("gz_head", GLOO, RANK1_GZ, [0, 1],   # cut before its first step: the other rank is whole, this one says so
         r"rank 1: no ProfilerStep#N annotation before the damage: its events belong to no analysed step"),
    Case("truncate", DOCS, "before_fix_trace.json", None,
         r"before_fix_trace\.json: invalid JSON: truncated \(the data ends at byte 7881 inside an unfinished value\)"),
    Case("empty", DOCS, "before_fix_trace.json", None, r"before_fix_trace\.json: empty file"),
    Case("trailing_garbage", DOCS, "before_fix_trace.json", [0],   # the whole document precedes the garbage
         r"before_fix_trace\.json is damaged \(invalid JSON: trailing characters at byte 15764\): the \d+ host and "
         r"device events read before the damage are kept"),
]


def _breakdown(path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "STEPDOCTOR_CACHE_DIR": str(path.parent / "cache")}
    return subprocess.run([*CLI, "breakdown", str(path), "--format", "json"], capture_output=True, text=True,
                          env=env, timeout=600)


_BASELINE: dict[Path, dict[int, list[dict]]] = {}


def _rows_by_rank(out: str) -> dict[int, list[dict]]:
    rows: dict[int, list[dict]] = {}
    for r in json.loads(out)["rows"]:
        rows.setdefault(r["rank"], []).append(r)
    return rows


def _baseline(case: Case, tmp: Path) -> dict[int, list[dict]]:
    """Rows of the undamaged copy (same layout as the damaged one)."""
    key = case.src
    if key not in _BASELINE:
        dest = tmp / "clean" / "p"
        if case.parts:
            dest.mkdir(parents=True)
            for part in case.parts:
                shutil.copytree(case.src / part, dest / part)
        else:
            shutil.copytree(case.src, dest)
        r = _breakdown(dest)
        assert r.returncode == 0, r.stderr
        _BASELINE[key] = _rows_by_rank(r.stdout)
    return _BASELINE[key]


def test_every_damage_kind_is_covered():
    assert {c.kind for c in CASES} == set(DAMAGES)


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=c.xfail)]
                                               if c.xfail else []) for c in CASES])
def test_damage_costs_only_what_the_file_holds(case: Case, tmp_path: Path):
    dest = tmp_path / "damaged" / "p"
    damage(case.kind, need(case.src), dest, case.rel, case.column, list(case.parts) or None)
    r = _breakdown(dest)
    assert "Traceback" not in r.stderr
    if case.ranks is None:
        line = r.stderr.replace(str(dest), "P")
        assert r.returncode == 2 and r.stdout == "" and line.count("\n") == 1 and line.startswith("stepdoctor: "), \
            r.stderr
        assert re.search(case.says, line), line
        return
    assert r.returncode == 0 and r.stderr == "", r.stderr
    out = json.loads(r.stdout)
    assert out["profile"]["ranks"] == case.ranks
    named = [w for w in out["warnings"] if re.search(case.says, w)]
    assert len(named) == 1, [w for w in out["warnings"] if Path(case.rel).name in w]
    # the undamaged rank lost nothing: its breakdown is the clean copy's
    rows, clean = _rows_by_rank(r.stdout), _baseline(case, tmp_path)
    other = 0 if "rank1" in case.rel or case.rel == RANK1_GZ else 1
    if len(case.ranks) == 1 and other not in case.ranks:
        return   # a one-rank profile: nothing else to compare
    assert rows.get(other) == clean[other]
    damaged = 1 - other
    if case.src == GLOO:   # a Kineto rank is its one file: the steps read before the cut, device events or not
        assert (damaged in rows) == (case.kind == "gz_cut")
        return
    if damaged in case.ranks and "step_trace_time" not in case.rel and "profiler_info" not in case.rel:
        # the damaged rank keeps its per-step breakdown from what was readable (the step table, or the trace)
        assert damaged in rows and all(x["compute_ms"] is not None for x in rows[damaged])
