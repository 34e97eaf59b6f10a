"""The errors stepdoctor reports to a person, and the exit code of each: one place for both.

Every error here is one line meant for the user (no traceback); anything else that escapes a command is a bug
and is reported as one line too, with `--debug` for the traceback (tools/cli.py).
"""

from __future__ import annotations

from pathlib import Path


class StepdoctorError(Exception):
    """Base of the errors stepdoctor reports as one line; `exit_code` is the CLI's exit status for it."""

    exit_code = 2


class ProfileError(StepdoctorError):
    """Bad input: the message is one line naming the file and what is wrong."""

    def __init__(self, path: str | Path | None, problem: str) -> None:
        self.path = str(path) if path is not None else None
        self.problem = problem
        super().__init__(f"{self.path}: {problem}" if self.path else problem)


class UsageError(StepdoctorError):
    """A mistake in the arguments (an unknown check id, a rank or step the profile lacks, options that do not
    go together): exit 2, as argparse's own usage errors."""


def exit_code(exc: BaseException) -> int:
    """The CLI exit status for `exc`: its own for stepdoctor's errors, 130 for an interrupt, else 2."""
    if isinstance(exc, StepdoctorError):
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return 2
