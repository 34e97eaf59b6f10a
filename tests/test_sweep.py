"""The robustness sweep (evals/sweep.py) runs the real CLI per profile and classifies what a user would see."""

from __future__ import annotations

import subprocess
from pathlib import Path

from stepdoctor.evals import sweep

DATA = Path(__file__).resolve().parent / "data"


def test_sweep_runs_the_cli_on_each_entry(tmp_path: Path) -> None:
    """A real Kineto trace is read by both commands; HTA's real execution trace is refused in one line."""
    (tmp_path / "et.json.gz").write_bytes((DATA / "real_et" / "benchmark_simple_add_et.json.gz").read_bytes())
    run = tmp_path / "run"
    run.mkdir()
    trace = DATA / "real_capture" / "rank0.1795742042582367183.pt.trace.json.gz"
    (run / trace.name).write_bytes(trace.read_bytes())
    got = {(Path(o.path).name, o.command): o for o in sweep.sweep(tmp_path)}
    assert {k: (o.status, o.exit_code) for k, o in got.items()} == {
        ("et.json.gz", "issues"): ("refused", 2), ("et.json.gz", "breakdown"): ("refused", 2),
        ("run", "issues"): ("ok", 0), ("run", "breakdown"): ("ok", 0)}
    assert "a PyTorch execution trace" in got["et.json.gz", "issues"].error
    assert sweep.entries(tmp_path, files=True) == [tmp_path / "et.json.gz", run / trace.name]


def test_a_traceback_or_several_error_lines_is_broken(monkeypatch, tmp_path: Path) -> None:
    def fake(stderr: str, code: int, stdout: str = ""):
        return lambda *a, **k: subprocess.CompletedProcess(a[0], code, stdout, stderr)

    cases = [("Traceback (most recent call last):\n  ...\nKeyError: 'x'\n", 1, "", "broken"),
             ("stepdoctor: error: a.json: first\nsecond line\n", 2, "", "broken"),
             ("stepdoctor: error: a.json: not a trace\n", 2, "", "refused"),
             ("", 0, "not json", "broken"),
             ("", 0, '{"findings": [{"severity": "high"}, {"severity": "low"}]}', "ok")]
    for stderr, code, stdout, status in cases:
        monkeypatch.setattr(sweep.subprocess, "run", fake(stderr, code, stdout))
        o = sweep.run_one(tmp_path, "issues", 5)
        assert o.status == status, (stderr, code)
        if status == "ok":
            assert o.severities == {"high": 1, "low": 1}
    assert sweep.main([str(tmp_path)]) == 0   # an empty folder: no run, nothing broken
