"""Answers kept beside the store (analysis/store/answers.py): the CLI answers a repeated question on unchanged
files, code and settings from the kept answer without opening the profile, and anew as soon as any of them
changes. Run through the real CLI in a child process, on a copy of the bundled 4-rank Ascend example."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from stepdoctor.analysis.store import IngestOptions, answers, cache

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "cluster4"


def _cli(*args: str, cache_dir: Path, **env: str) -> subprocess.CompletedProcess:
    run_env = {**os.environ, "STEPDOCTOR_CACHE_DIR": str(cache_dir), **env}
    return subprocess.run([sys.executable, "-m", "stepdoctor", *args], capture_output=True, text=True,
                          env=run_env, check=True)


@pytest.fixture
def job(tmp_path: Path) -> Path:
    dst = tmp_path / "job"
    shutil.copytree(EXAMPLE, dst)
    return dst


def _kept(cache_dir: Path) -> list[Path]:
    return sorted(f for db in cache_dir.glob("*.duckdb") for f in cache.answers_dir(db).glob("*.json"))


def test_a_repeated_question_is_answered_from_the_kept_answer(job, tmp_path):
    c = tmp_path / "cache"
    first = _cli("issues", str(job), "--format", "json", cache_dir=c).stdout
    (kept,) = _kept(c)
    assert json.loads(kept.read_text()) == json.loads(first)
    # mark the kept answer: the next run prints the mark, so it read the answer and not the profile
    marked = json.loads(kept.read_text())
    marked["findings"][0]["title"] = "KEPT-ANSWER-MARK"
    kept.write_text(json.dumps(marked))
    again = json.loads(_cli("issues", str(job), "--format", "json", cache_dir=c).stdout)
    assert again["findings"][0]["title"] == "KEPT-ANSWER-MARK"
    # the table is rendered from the same kept answer
    assert "KEPT-ANSWER-MARK" in _cli("issues", str(job), cache_dir=c, COLUMNS="200").stdout
    # other arguments are another question
    other = json.loads(_cli("issues", str(job), "--format", "json", "--min-severity", "high", cache_dir=c).stdout)
    assert all(f["title"] != "KEPT-ANSWER-MARK" for f in other["findings"]) and len(_kept(c)) == 2


def test_changed_files_or_settings_answer_anew(job, tmp_path):
    c = tmp_path / "cache"
    _cli("breakdown", str(job), "--format", "json", cache_dir=c)
    (kept,) = _kept(c)
    marked = json.loads(kept.read_text())
    marked["rows"][0]["step_ms"] = -12345.0
    kept.write_text(json.dumps(marked))

    def first_step_ms(**env: str) -> float:
        return json.loads(_cli("breakdown", str(job), "--format", "json", cache_dir=c, **env).stdout)["rows"][0]["step_ms"]

    assert first_step_ms() == -12345.0
    # a setting that can change an answer is part of the question
    assert first_step_ms(STEPDOCTOR_ANYTHING="1") > 0
    assert first_step_ms() == -12345.0
    # a changed input file is another database: the old one goes, and its answers with it
    f = next(job.rglob("step_trace_time.csv"))
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 10**9))
    assert first_step_ms() > 0
    dbs = sorted(c.glob("*.duckdb"))
    assert len(dbs) == 1 and sorted({p.parent for p in _kept(c)}) == [cache.answers_dir(dbs[0])]


def test_a_damaged_kept_answer_is_answered_anew(job, tmp_path):
    c = tmp_path / "cache"
    want = json.loads(_cli("slow-ranks", str(job), "--format", "json", cache_dir=c).stdout)
    (kept,) = _kept(c)
    kept.write_text(kept.read_text()[: len(kept.read_text()) // 2])
    assert json.loads(_cli("slow-ranks", str(job), "--format", "json", cache_dir=c).stdout) == want
    assert json.loads(kept.read_text()) == want   # and kept whole again


def test_the_key_holds_the_code_version(tmp_path, monkeypatch):
    db = tmp_path / "x-0.duckdb"
    db.write_bytes(b"")
    q = {"tool": "list_issues", "args": {}}
    answers.keep(db, q, "{}")
    assert answers.read(db, q) == "{}"
    monkeypatch.setattr(answers, "code_version", lambda: "another")
    assert answers.read(db, q) is None
    # no database, no answer (a kept answer never outlives the store it was computed from)
    monkeypatch.undo()
    db.unlink()
    assert answers.read(db, q) is None


def test_trimming_the_cache_takes_the_answers_with_their_database(tmp_path, monkeypatch):
    old, new = (tmp_path / f"{c * 12}-{c * 32}.duckdb" for c in "ab")
    for db in (old, new):
        db.write_bytes(b"x" * 1000)
        answers.keep(db, {"q": 1}, "{}")
    os.utime(old, ns=(1, 1))
    monkeypatch.setattr(cache, "max_cache_bytes", lambda: 1500)
    assert cache.trim(tmp_path, new) == 1
    assert not cache.answers_dir(old).exists() and cache.answers_dir(new).is_dir()


def test_the_unprofiled_step_times_beside_the_traces_are_input(tmp_path):
    """meta/step_times_rank<N>.json is read by the checks (the unprofiled step an impact is judged against), not
    by a reader: the fingerprint covers it, so editing it makes a new database and no kept answer is reused."""
    from stepdoctor.analysis.ingest.discover import discover

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "data" / "real_cpu" / "ddp2_clean", run)
    traces = run / "traces"

    def fp() -> str:
        d = discover(traces)
        return cache.fingerprint(d, cache.input_listing(d))

    before = fp()
    meta = run / "meta" / "step_times_rank1.json"
    d = json.loads(meta.read_text())
    d["step_ms"][-1] += 1.0
    meta.write_text(json.dumps(d))
    assert fp() != before
    meta.unlink()
    assert fp() not in (before,)


@pytest.mark.anyio
async def test_the_mcp_server_answers_from_the_kept_answer_too(job, tmp_path):
    """A question the CLI (or an earlier server) answered is a lookup for a new server on the same cache, and
    the server keeps what it computes for the CLI."""
    from mcp import Client

    from stepdoctor.server.app import create_server

    c = tmp_path / "cache"
    _cli("issues", str(job), "--format", "json", cache_dir=c)
    (kept,) = _kept(c)
    marked = json.loads(kept.read_text())
    marked["findings"][0]["title"] = "KEPT-ANSWER-MARK"
    kept.write_text(json.dumps(marked))
    async with Client(create_server([job], cache_dir=c), raise_exceptions=True) as client:
        pid = (await client.call_tool("load_profile", {"path": str(job)})).structured_content["profile_id"]
        r = await client.call_tool("list_issues", {"profile_id": pid})
        assert r.structured_content["findings"][0]["title"] == "KEPT-ANSWER-MARK"
        await client.call_tool("slow_ranks", {"profile_id": pid})
    assert len(_kept(c)) == 2   # the server kept its slow-ranks answer beside the CLI's


def test_a_damaged_step_times_file_costs_only_its_rank(tmp_path):
    """meta/step_times_rank1.json cut short: rank 1's unprofiled step is unknown (a warning), rank 0's is kept."""
    from stepdoctor.analysis.metrics.idle import profiler_overhead
    from stepdoctor.tools import api

    run = tmp_path / "run"
    shutil.copytree(Path(__file__).parent / "data" / "real_cpu" / "ddp2_clean", run)
    meta = run / "meta" / "step_times_rank1.json"
    meta.write_text(meta.read_text()[:40])
    prof = api.load(run / "traces", IngestOptions(cache_dir=tmp_path / "c"))
    assert any("step_times_rank1.json: not read as step times" in w for w in prof.warnings)
    assert profiler_overhead(prof, 1) is None
    ov = profiler_overhead(prof, 0)
    assert ov is not None and 30 < ov["unprofiled_step_ms"] < 60 and ov["source"].endswith("step_times_rank0.json")
