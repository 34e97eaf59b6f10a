"""One place maps stepdoctor's errors to exit codes: bad input (ProfileError) and argument mistakes (UsageError)
are distinct types, both one line and exit 2 on the CLI; anything else is a bug, still one line."""

from __future__ import annotations

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
