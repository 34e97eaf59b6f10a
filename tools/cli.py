"""`stepdoctor` command line (docs/contract.md). Exit codes: 0 ok, 1 high findings with --fail-on, 2 error.

Errors are one line on stderr naming the file and the problem; no traceback unless --debug.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from ..analysis import one_blas_thread

one_blas_thread(os.environ)  # before numpy is imported (next line): see build.open_profile(IngestOptions(fork=True))

from ..analysis.errors import ProfileError, StepdoctorError, exit_code  # noqa: E402
from .commands import FORMATS, add_ray_flag  # noqa: E402

if TYPE_CHECKING:
    from ..analysis.store import Profile
    from ..analysis.store.options import IngestOptions


def _progress():
    """A rich progress bar on a terminal for multi-rank ingests; nothing when piped."""
    if not sys.stderr.isatty():
        return None
    from rich.progress import Progress

    state: dict = {}

    def cb(done: int, total: int, what: str) -> None:
        if "p" not in state:
            state["p"] = Progress(transient=True, console=None)
            state["p"].start()
            state["t"] = state["p"].add_task("ingesting ranks", total=total)
        state["p"].update(state["t"], completed=done, description=f"ingested {what}")
        if done >= total:
            state["p"].stop()

    return cb


def _import_api() -> None:
    with contextlib.suppress(Exception):  # a failing import fails again, with its message, where it is used
        importlib.import_module(f"{__package__}.catalog")
        from ..analysis.checks.base import registry

        registry()  # every check module
        from ..knowledge.loader import load_fixes

        load_fixes()  # the fix files (YAML + validation)


def ingest_options(a: argparse.Namespace) -> IngestOptions:
    """The one options object of this command's ingests: from the environment and `--ray`."""
    from ..analysis.store.options import IngestOptions

    ray = getattr(a, "ray", None)
    return IngestOptions.from_environment(engine="ray" if ray is not None else None, ray_address=ray or None,
                                          fork=True)


def loader(options: IngestOptions) -> Callable[[str], Profile]:
    """Opens PATH for the command. The analysis modules (pandas, the checks, the pydantic models, the fix
    files) are loaded in a thread meanwhile, started once the ingest process runs: this process is forked
    for it (it controls its whole state and runs one thread until then), so no new interpreter starts, and
    the ingest process imports the readers on one core while this thread imports on the other."""
    def load(path: str) -> Profile:
        from ..analysis.build import open_profile

        background = None if f"{__package__}.catalog" in sys.modules else _import_api
        return open_profile(path, options.but(progress=_progress(), background=background))

    return load


def cmd_demo(a: argparse.Namespace) -> int:
    root = Path(__file__).resolve().parent.parent / "examples"
    ex = root / "cluster4"
    if not ex.exists():
        raise ProfileError(ex, "bundled example profile missing from this installation")
    print(f"stepdoctor demo on the bundled example {ex}\n")
    prof = a.load(str(ex))
    from .cli_options import ask
    from .cli_show import emit

    emit(ask("breakdown", prof), "table")
    print()
    emit(ask("issues", prof), "table")
    try:
        from .report import write_report
    except ImportError:
        return 0
    out = Path(a.output) if a.output else Path.cwd() / "stepdoctor-demo-report.html"
    write_report(prof, out)
    print(f"\nHTML report written to {out}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--format", choices=FORMATS, default="table", help="output format (default: table)")
    common.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    add_ray_flag(common)
    debug_only = argparse.ArgumentParser(add_help=False)
    debug_only.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    p = argparse.ArgumentParser(prog="stepdoctor", description="Why is this training step slow? Diagnose Ascend "
                                "(torch_npu, MindSpore) and Kineto (GPU) profiles.")
    p.add_argument("--version", action="version", version=f"stepdoctor {_version()}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    from . import cli_options, commands  # the catalog's questions: one command per row, made from it

    cli_options.register(sub, common, debug_only)
    s = sub.add_parser("demo", parents=[debug_only], help="breakdown, issues and report on the bundled example")
    s.add_argument("-o", "--output", help="where to write the demo HTML report")
    s.set_defaults(func=cmd_demo)
    commands.register(sub, common)
    return p


def _version() -> str:
    from .. import __version__

    return __version__


def _once_more_if_the_cache_was_damaged(a: argparse.Namespace) -> int:
    """Run the command; if DuckDB finds a cached database damaged while it reads it (a failed block
    checksum), that database is deleted and the command runs again on a fresh ingest, once."""
    try:
        return a.func(a)
    except Exception as e:
        from ..analysis.build import discard_opened
        from ..analysis.store import is_damaged_cache

        if not is_damaged_cache(e) or not (dropped := discard_opened()):
            raise
        print(f"stepdoctor: warning: the cached database {dropped[0].name} was damaged "
              f"({str(e).splitlines()[0][:120]}); deleted, the profile is read again", file=sys.stderr)
        return a.func(a)


Serve = Callable[[list[str]], int]


def main(argv: list[str] | None = None, serve: Serve | None = None) -> int:
    """One CLI command; `serve` starts the MCP server for `stepdoctor mcp` (the entry point, `main.py`, passes
    it: the server is a layer above the tools)."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["mcp"]:   # one parser for `stepdoctor mcp` and `stepdoctor-mcp`
        if serve is None:
            print("stepdoctor: error: the MCP server starts through `stepdoctor mcp` or `stepdoctor-mcp`",
                  file=sys.stderr)
            return 2
        return serve(args[1:])
    parser = build_parser()
    a = parser.parse_args(argv)
    a.load = loader(ingest_options(a))   # every profile this command opens (--ray: ingested through Ray)
    try:
        rc = _once_more_if_the_cache_was_damaged(a)
    except StepdoctorError as e:
        if getattr(a, "debug", False):
            raise
        print(f"stepdoctor: error: {e}", file=sys.stderr)
        return exit_code(e)
    except KeyboardInterrupt as e:
        print("stepdoctor: interrupted", file=sys.stderr)
        return exit_code(e)
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:  # any bug still gives one line and exit 2; --debug shows the traceback
        if getattr(a, "debug", False):
            raise
        print(f"stepdoctor: error: {type(e).__name__}: {e} (rerun with --debug for the traceback)", file=sys.stderr)
        return 2
    sys.stdout.flush()
    return rc
