"""CLI commands beyond the per-profile views: compare, explain, fixes, suggest-edit, report, mcp.

Each handler imports its module lazily so `stepdoctor breakdown` never pays for jinja2 or the MCP SDK.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..analysis.ingest.base import ProfileError


def _emit(model, fmt: str) -> None:
    from .cli import _emit as emit

    emit(model, fmt)


def cmd_compare(a: argparse.Namespace) -> int:
    from . import compare

    if a.rank_vs:
        cmp = compare.compare_ranks(a.base, int(a.rank_vs[0]), int(a.rank_vs[1]), top=a.top)
    else:
        if not a.target:
            raise ProfileError(None, "compare needs BASE and TARGET (or BASE --rank-vs A B)")
        cmp = compare.compare_runs(a.base, a.target, rank=a.rank, step=a.step, top=a.top)
    _emit(cmp, a.format)
    return 0


def cmd_explain(a: argparse.Namespace) -> int:
    from . import knowledge_tools

    exp = knowledge_tools.explain(a.id, profile=a.profile, finding=a.finding)
    if a.format == "json":
        _emit(exp, "json")
    else:
        print(knowledge_tools.explanation_markdown(exp, profile=a.profile))
    return 0


def cmd_fixes(a: argparse.Namespace) -> int:
    from . import knowledge_tools

    fixes = knowledge_tools.list_fixes(check=a.check, vendor=a.vendor)
    _emit(fixes.fixes if a.format == "json" else fixes, a.format)  # JSON: the list (cli-contract.md)
    return 0


def cmd_suggest_edit(a: argparse.Namespace) -> int:
    from . import knowledge_tools

    if not a.fix and not a.profile:
        raise ProfileError(None, "suggest-edit needs --fix ID or --profile PATH")
    if Path(a.code_path).is_dir():
        raise ProfileError(a.code_path, "is a folder: pass the training script (a .py or launch .sh file)")
    res = knowledge_tools.suggest_edit(a.code_path, fix=a.fix, profile=a.profile, apply=a.apply)
    if a.format == "json":
        _emit(res, "json")
        return 0
    if res.diff:
        sys.stdout.write(res.diff if res.diff.endswith("\n") else res.diff + "\n")
    for msg in res.messages:
        print(msg, file=sys.stderr)
    if res.template and not res.diff:
        print(res.template)
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    from . import api
    from .report import write_report

    out = Path(a.output)
    if not out.parent.is_dir():
        raise ProfileError(out.parent, "no such folder for the report (create it first)")
    prof = api.load(a.path)
    write_report(prof, out, compare_base=a.compare)
    print(f"wrote {out}")
    return 0


def cmd_mcp(a: argparse.Namespace) -> int:
    """`stepdoctor mcp ARGS` is `stepdoctor-mcp ARGS`: one parser, so both take the same options."""
    from ..server.app import main as mcp_main

    return mcp_main(a.mcp_args)


PROFILE_HELP = ("profile: a rank folder (*_ascend_pt, *_ascend_ms, any folder with ASCEND_PROFILER_OUTPUT/), a "
                "folder of ranks, a MindSpore profiler/ folder, a Kineto trace (.json/.json.gz) or a folder of traces")


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    debug_only = argparse.ArgumentParser(add_help=False)
    debug_only.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    s = sub.add_parser("compare", parents=[common], help="why did step time change between two runs (or ranks)")
    s.add_argument("base", help="the reference run (" + PROFILE_HELP + ")")
    s.add_argument("target", nargs="?", help="the run to explain (omit with --rank-vs)")
    s.add_argument("--rank", type=int, help="compare this rank only")
    s.add_argument("--step", type=int, help="compare this step only")
    s.add_argument("--top", type=int, default=15, help="changes to list (default 15)")
    s.add_argument("--rank-vs", nargs=2, metavar=("A", "B"), help="inside BASE: rank B (slow) against rank A")
    s.set_defaults(func=cmd_compare)

    s = sub.add_parser("explain", parents=[common], help="explain a check id or a fix id")
    s.add_argument("id", help="a check id (stepdoctor fixes lists them) or a fix id")
    s.add_argument("--profile", help="explain a finding of this profile with its numbers")
    s.add_argument("--finding", type=int, help="finding number (1-based, as `issues` lists them)")
    s.set_defaults(func=cmd_explain)

    s = sub.add_parser("fixes", parents=[common], help="list knowledge-base fixes")
    s.add_argument("--check", help="only the fixes of this check id")
    s.add_argument("--vendor", choices=["ascend", "cuda", "rocm", "any"], help="only fixes for this vendor")
    s.set_defaults(func=cmd_fixes)

    s = sub.add_parser("suggest-edit", parents=[common], help="a unified diff applying a fix to training code")
    s.add_argument("code_path", help="the training script to change (.py, or a launch .sh for env fixes)")
    s.add_argument("--fix", help="the fix id to apply")
    s.add_argument("--profile", help="apply every fix the profile's findings point to")
    s.add_argument("--apply", action="store_true", help="write the change (keeps a .bak backup)")
    s.set_defaults(func=cmd_suggest_edit)

    s = sub.add_parser("report", parents=[debug_only], help="write a self-contained HTML report")
    s.add_argument("path", help=PROFILE_HELP)
    s.add_argument("-o", "--output", required=True, help="the .html file to write (its folder must exist)")
    s.add_argument("--compare", help="a base profile to compare against (the report adds the comparison)")
    s.set_defaults(func=cmd_report)

    s = sub.add_parser("mcp", add_help=False, help="run the MCP server (the options of stepdoctor-mcp; "
                       "`stepdoctor mcp --help` lists them)")
    s.add_argument("mcp_args", nargs=argparse.REMAINDER)
    s.set_defaults(func=cmd_mcp)
