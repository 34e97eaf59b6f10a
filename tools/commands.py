"""CLI commands beyond the per-profile views (compare, explain, fixes, suggest-edit, report, what-if, hang,
trigger, snapshot, mcp) and the output every command shares (`emit`).

The questions that are catalog entries (compare, explain, fixes, suggest-edit) are answered through
`tools.catalog`, as the MCP tools are. Each handler imports its modules lazily so `stepdoctor breakdown`
never pays for jinja2 or the MCP SDK.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..analysis.errors import ProfileError, UsageError

if TYPE_CHECKING:
    from pydantic import BaseModel

FORMATS = ("table", "json", "markdown")


def emit(model: BaseModel | list, fmt: str) -> None:
    """Print a catalog answer as a table, JSON (docs/contract.md) or markdown."""
    from pydantic import BaseModel  # not at the top: a cold ingest starts before pydantic is loaded

    from . import render

    if fmt == "json":
        if isinstance(model, list):
            import json

            print(json.dumps([x.model_dump(mode="json") if isinstance(x, BaseModel) else x for x in model], indent=2))
        else:
            print(model.model_dump_json(indent=2))
    elif fmt == "markdown":
        print(render.render_markdown(model) if isinstance(model, BaseModel) else model)
    else:
        render.render_table(model) if isinstance(model, BaseModel) else print(model)


def ask(command: str, prof, load=None, **opts):
    """Answer through the command's catalog entry, the one the MCP tool uses. The options are taken as
    argparse typed them (no MCP bounds: the CLI prints every row; the catalog functions check them with
    messages that name the CLI options); those that are not arguments (`apply`) go to the function.
    `load` opens the profiles an argument names (compare's runs) with the command's ingest options."""
    from . import catalog

    a, rest = _split(catalog.BY_CLI[command], opts)
    return catalog.answer(command, prof, a, load, **rest)


def _split(tool, opts: dict):
    """The options that are the tool's arguments (as its unvalidated model) and the rest."""
    args = {k: v for k, v in opts.items() if k in tool.args.model_fields}
    return tool.args.model_construct(**args), {k: v for k, v in opts.items() if k not in args}


def ask_path(command: str, path: str, load, **opts):
    """`ask` about the profile at PATH, opened by `load`. Where the catalog keeps the command's answers, a
    question asked before on the same files, code and settings is answered from the answer kept beside the
    store (`analysis/store/answers.py`) without opening the profile, and a new answer is kept."""
    from . import catalog

    tool = catalog.BY_CLI[command]
    a, rest = _split(tool, opts)
    if not tool.keep or rest:
        return catalog.answer(command, load(path), a, **rest)
    from ..analysis.build import cached_database

    db = cached_database(path)
    if db is not None and (kept := catalog.kept_answer(tool, db, a)) is not None:
        return kept
    prof = load(path)
    out = catalog.answer(command, prof, a)
    catalog.keep_answer(tool, prof.db_path, a, out)
    return out


def cmd_compare(a: argparse.Namespace) -> int:
    if a.rank_vs:
        cmp = ask("compare", None, a.load, base=a.base, rank_a=int(a.rank_vs[0]), rank_b=int(a.rank_vs[1]), limit=a.top)
    else:
        if not a.target:
            raise UsageError("compare needs BASE and TARGET (or BASE --rank-vs A B)")
        cmp = ask("compare", None, a.load, base=a.base, target=a.target, rank=a.rank, step=a.step, limit=a.top)
    emit(cmp, a.format)
    return 0


def _profile(a: argparse.Namespace, path: str | None):
    return a.load(path) if path else None


def cmd_explain(a: argparse.Namespace) -> int:
    from . import knowledge_tools

    if a.finding is not None and not a.profile:
        raise UsageError("--finding needs --profile PATH (the profile whose finding to explain)")
    exp = ask("explain", _profile(a, a.profile), id=a.id, finding=a.finding)
    if a.format == "json":
        emit(exp, "json")
    else:
        print(knowledge_tools.explanation_markdown(exp, profile=a.profile))
    return 0


def cmd_fixes(a: argparse.Namespace) -> int:
    fixes = ask("fixes", None, check=a.check, vendor=a.vendor, limit=None)
    emit(fixes.fixes if a.format == "json" else fixes, a.format)  # JSON: the list (docs/contract.md)
    return 0


def cmd_suggest_edit(a: argparse.Namespace) -> int:
    if not a.fix and not a.profile:
        raise UsageError("suggest-edit needs --fix ID or --profile PATH")
    if Path(a.code_path).is_dir():
        raise ProfileError(a.code_path, "is a folder: pass the training script (a .py or launch .sh file)")
    res = ask("suggest-edit", _profile(a, a.profile), code_path=a.code_path, fix=a.fix, apply=a.apply)
    if a.format == "json":
        emit(res, "json")
        return 0
    if res.diff:
        sys.stdout.write(res.diff if res.diff.endswith("\n") else res.diff + "\n")
    for msg in res.messages:
        print(msg, file=sys.stderr)
    if res.template and not res.diff:
        print(res.template)
    return 0


def _median_of(specs: list[str] | None, what: str) -> list[int]:
    """--rank 7=median (repeatable; 'median' is the one target the replay answers today)."""
    out = []
    for spec in specs or []:
        key, _, target = spec.partition("=")
        if target not in ("", "median") or not key.strip().isdigit():
            raise UsageError(f"--{what} takes N=median (e.g. --{what} 7=median), got {spec!r}")
        out.append(int(key))
    return out


def _ranks(specs: list[str] | None) -> list[int]:
    """--no-stalls 3 (repeatable, or 3,5)."""
    out = []
    for spec in specs or []:
        for part in spec.split(","):
            if not part.strip().isdigit():
                raise UsageError(f"--no-stalls takes a rank (e.g. --no-stalls 3), got {spec!r}")
            out.append(int(part))
    return out


def _ops(specs: list[str] | None) -> dict[str, float]:
    """--op NAME=xF (repeatable): the op's time times F (x0.5: twice as fast)."""
    out = {}
    for spec in specs or []:
        name, _, f = spec.rpartition("=")
        try:
            factor = float(f.removeprefix("x"))
        except ValueError:
            factor = -1.0
        if not name or factor < 0:
            raise UsageError(f"--op takes NAME=xF (e.g. --op aten::mm=x0.5), got {spec!r}")
        out[name] = factor
    return out


def cmd_whatif(a: argparse.Namespace) -> int:

    if a.comm not in (None, "median"):
        raise UsageError(f"--comm takes 'median', got {a.comm!r}")
    res = ask_path("whatif", a.path, a.load, ranks_at_median=_median_of(a.rank, "rank") or None,
              stages_at_median=_median_of(a.stage, "stage") or None, comm_at_median=a.comm == "median",
              no_stalls=_ranks(a.no_stalls) or None, ops=_ops(a.op) or None)
    emit(res, a.format)
    return 0


def cmd_critical_path(a: argparse.Namespace) -> int:

    emit(ask_path("critical-path", a.path, a.load, step=a.step), a.format)
    return 0


def cmd_report(a: argparse.Namespace) -> int:
    from .report import write_report

    out = Path(a.output)
    if not out.parent.is_dir():
        raise ProfileError(out.parent, "no such folder for the report (create it first)")
    prof = a.load(a.path)
    write_report(prof, out, compare_base=a.load(a.compare) if a.compare else None)
    print(f"wrote {out}")
    return 0


PROFILE_HELP = ("profile: a rank folder (*_ascend_pt, *_ascend_ms, any folder with ASCEND_PROFILER_OUTPUT/), a "
                "folder of ranks, a MindSpore profiler/ folder, a Kineto trace (.json/.json.gz) or a folder of traces")


def add_ray_flag(parser: argparse.ArgumentParser) -> None:
    """`--ray [ADDRESS]`: the profiles the command opens are ingested through Ray (`cli.ingest_options`)."""
    parser.add_argument("--ray", nargs="?", const="", metavar="ADDRESS", help="parse the ranks in Ray tasks on a "
                        "cluster (ADDRESS, else RAY_ADDRESS, else a local Ray); needs `pip install ray`")


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

    s = sub.add_parser("whatif", parents=[common], help="replay the steps across ranks: what if a rank, a stage "
                       "or communication ran at the median (without flags: the ideal job and the slowdown)")
    s.add_argument("path", help=PROFILE_HELP)
    s.add_argument("--rank", action="append", metavar="R=median", help="rank R at the median of its peers "
                   "(repeatable)")
    s.add_argument("--stage", action="append", metavar="S=median", help="pipeline stage S at the median")
    s.add_argument("--comm", nargs="?", const="median", metavar="median", help="communication at the median")
    s.add_argument("--no-stalls", action="append", metavar="R", help="rank R without its host stalls (data loading, "
                   "untraced gaps)")
    s.add_argument("--op", action="append", metavar="NAME=xF", help="op NAME taking F times its time (x0.5: twice "
                   "as fast)")
    s.set_defaults(func=cmd_whatif)

    s = sub.add_parser("critical-path", parents=[common], help="the chain of work across ranks that sets a step's "
                       "end, each link with its share of the step")
    s.add_argument("path", help=PROFILE_HELP)
    s.add_argument("--step", type=int, help="the step (default: the slowest replayed one)")
    s.set_defaults(func=cmd_critical_path)

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


def cmd_hang(a: argparse.Namespace) -> int:
    r = ask("hang", None, path=a.path)
    from .live import render_hang

    print(r.model_dump_json(indent=2) if a.format == "json" else render_hang(r))
    return 0


def cmd_trigger(a: argparse.Namespace) -> int:
    t = ask("trigger", None, run_dir=a.run_dir, steps=a.steps)
    print(f"trigger {t.id}: every rank captures steps {t.first_step}..{t.first_step + t.steps - 1} "
          f"into {t.capture_dir}")
    return 0


def cmd_snapshot(a: argparse.Namespace) -> int:
    r = ask("snapshot", None, pids=a.pid, output=a.output)
    print(f"{len(r.written)} stack snapshot(s) in {r.output}; `stepdoctor hang {r.output}` compares them")
    for f in r.failed:
        print(f"warning: {f}")
    return 0


def register_live(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    """The commands about a job that runs or hangs (`tools/live.py` answers them)."""
    s = sub.add_parser("hang", parents=[common], help="where the ranks of a hung job diverge (Flight Recorder "
                       "dumps, py-spy stack snapshots)")
    s.add_argument("path", help="folder holding the dumps (<prefix><rank>) and/or py-spy --json stack files")
    s.set_defaults(func=cmd_hang)
    s = sub.add_parser("trigger", help="ask every rank's StepWatch in RUN_DIR to capture steps now")
    s.add_argument("run_dir", help="the run_dir given to stepdoctor.capture.StepWatch")
    s.add_argument("--steps", type=int, default=3, help="steps to capture (default 3)")
    s.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    s.set_defaults(func=cmd_trigger)
    s = sub.add_parser("snapshot", help="take py-spy stack snapshots of local processes (by PID) for `hang`")
    s.add_argument("pid", type=int, nargs="+", help="process ids (the rank is read from each one's RANK)")
    s.add_argument("-o", "--output", required=True, help="folder to write pyspy_rank_<N>.json files into")
    s.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    s.set_defaults(func=cmd_snapshot)
