"""One place maps stepdoctor's errors to exit codes: bad input (ProfileError) and argument mistakes (UsageError)
are distinct types, both one line and exit 2 on the CLI; anything else is a bug, still one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from stepdoctor.analysis.errors import ProfileError, StepdoctorError, UsageError, exit_code
from stepdoctor.tools import api, cli

EXAMPLE = Path(__file__).resolve().parents[1] / "examples"


def test_exit_codes_live_in_one_table() -> None:
    assert exit_code(ProfileError("x.json", "truncated")) == 2
    assert exit_code(UsageError("unknown check 'nosuch'")) == 2
    assert exit_code(KeyboardInterrupt()) == 130
    assert exit_code(RuntimeError("a bug")) == 2
    assert not issubclass(UsageError, ProfileError) and issubclass(UsageError, StepdoctorError)
    assert str(ProfileError("a/b.csv", "missing column Step")) == "a/b.csv: missing column Step"


def _example() -> Path:
    found = sorted(p for p in EXAMPLE.iterdir() if p.is_dir()) if EXAMPLE.is_dir() else []
    if not found:
        pytest.skip("no bundled example profile in this checkout")
    return found[0]


def test_argument_mistakes_are_usage_errors_not_profile_errors(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("STEPDOCTOR_CACHE_DIR", str(tmp_path))
    prof = _example()
    with pytest.raises(UsageError, match="unknown check 'nosuch'; the checks are "):
        api.issues(str(prof), checks=["nosuch"])
    with pytest.raises(UsageError, match="--top must be at least 1"):
        api.top_kernels(str(prof), top=0)


def test_cli_prints_one_line_and_exits_2(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("STEPDOCTOR_CACHE_DIR", str(tmp_path))
    assert cli.main(["issues", str(_example()), "--check", "nosuch"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stepdoctor: error: unknown check 'nosuch'") and err.count("\n") == 1
    assert cli.main(["issues", str(tmp_path / "missing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("stepdoctor: error: ") and err.count("\n") == 1 and "Traceback" not in err


REAL_ET = Path(__file__).resolve().parent / "data" / "real_et" / "benchmark_simple_add_et.json.gz"
REAL_KINETO = Path(__file__).resolve().parent / "data" / "real_capture" / "rank0.1795742042582367183.pt.trace.json.gz"


def test_an_execution_trace_is_named_and_refused_in_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    """HTA's real ExecutionTraceObserver file (tests/data/real_et): passed alone or as the only file of a
    folder, one line that names it and says what to pass; beside a Kineto trace, the Kineto trace is read."""
    monkeypatch.setenv("STEPDOCTOR_CACHE_DIR", str(tmp_path / "cache"))
    for path in (REAL_ET, REAL_ET.parent):
        assert cli.main(["breakdown", str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert "a PyTorch execution trace" in err and "pass the Kineto trace" in err
    both = tmp_path / "run"
    both.mkdir()
    (both / REAL_ET.name).write_bytes(REAL_ET.read_bytes())
    (both / REAL_KINETO.name).write_bytes(REAL_KINETO.read_bytes())
    assert cli.main(["breakdown", str(both), "--format", "json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert (out["profile"]["format"], out["profile"]["ranks"], out["profile"]["steps"]) == ("kineto", [0], [44, 45])
    assert not any("execution" in w for w in out["warnings"])
