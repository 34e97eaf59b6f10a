"""The CLI commands that are not catalog questions (report, mcp) and the options every command shares. The
catalog's commands are made from its rows (`tools/cli_options.py`). Each handler imports its modules lazily
so `stepdoctor breakdown` never pays for jinja2 or the MCP SDK."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..analysis.errors import ProfileError
from .cli_options import PROFILE_HELP

FORMATS = ("table", "json", "markdown")


def cmd_report(a: argparse.Namespace) -> int:
    from .report import write_report

    out = Path(a.output)
    if not out.parent.is_dir():
        raise ProfileError(out.parent, "no such folder for the report (create it first)")
    prof = a.load(a.path)
    write_report(prof, out, compare_base=a.load(a.compare) if a.compare else None)
    print(f"wrote {out}")
    return 0


def add_ray_flag(parser: argparse.ArgumentParser) -> None:
    """`--ray [ADDRESS]`: the profiles the command opens are ingested through Ray (`cli.ingest_options`)."""
    parser.add_argument("--ray", nargs="?", const="", metavar="ADDRESS", help="parse the ranks in Ray tasks on a "
                        "cluster (ADDRESS, else RAY_ADDRESS, else a local Ray); needs `pip install ray`")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """The commands that are not catalog questions: report, mcp."""
    debug_only = argparse.ArgumentParser(add_help=False)
    debug_only.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    s = sub.add_parser("report", parents=[debug_only], help="write a self-contained HTML report")
    add_ray_flag(s)
    s.add_argument("path", help=PROFILE_HELP)
    s.add_argument("-o", "--output", required=True, help="the .html file to write (its folder must exist)")
    s.add_argument("--compare", help="a base profile to compare against (the report adds the comparison)")
    s.set_defaults(func=cmd_report)

    s = sub.add_parser("mcp", add_help=False, help="run the MCP server (the options of stepdoctor-mcp; "
                       "`stepdoctor mcp --help` lists them)")
    s.add_argument("mcp_args", nargs=argparse.REMAINDER)
    s.set_defaults(func=None)   # never parsed: `cli.main` hands `mcp ARGS` to the server before parsing
