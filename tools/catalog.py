"""The tool catalog: every question stepdoctor answers, defined once.

A `Tool` names the MCP tool and the CLI command that answer the same question, its typed arguments (a
pydantic model in `tools/arguments.py`: the MCP input schema and the CLI's options), whether it reads a
profile, the one function that answers, the budget that cuts the answer to its `limit` for a model's
context (`tools/budgets.py`) and how the CLI prints it. The CLI's commands (`tools/cli_options.py`) and the
MCP tools (`server/mcp_tools.py`, which adds only the short text) are both made from the rows, so both
front ends give the same numbers for one entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel

from ..analysis.errors import ProfileError, UsageError
from . import budgets, cli_show
from .arguments import (
    Args,
    BreakdownArgs,
    Cli,
    CliOption,
    CompareArgs,
    CriticalPathArgs,
    EnvAuditArgs,
    ExplainArgs,
    HangArgs,
    IssuesArgs,
    ListFixesArgs,
    SlowLinksArgs,
    SlowRanksArgs,
    SnapshotArgs,
    SuggestEditArgs,
    TopKernelsArgs,
    TriggerArgs,
    WhatIfArgs,
)

if TYPE_CHECKING:   # the catalog is read before any profile is opened (a kept answer needs no more)
    from ..analysis.store import Profile

# Turns a profile reference (a path, or over MCP a profile_id) into an opened profile.
Resolve = Callable[[str], "Profile"]
# An answer cut to what a model's context takes (tools/budgets.py): the answer's own model, `total` /
# `truncated` set.
Budget = Callable[[Any, Any], BaseModel]


ProfileUse = Literal["required", "optional", "none"]


@dataclass(frozen=True)
class Tool:
    """One question: its names in both front ends, its typed arguments, the function that answers, what its
    answer is cut to for a model's context, and how the CLI prints it. Adding a tool is its arguments model
    (tools/arguments.py), its function and its row here: the MCP signature and the CLI command are made
    from the row."""

    name: str                   # the MCP tool name
    cli: str | None             # the CLI command answering the same question (None: MCP only)
    title: str
    description: str            # what a model reads in tools/list; the first sentence heads docs/tools.md
    args: type[Args]
    result: type[BaseModel] | str   # what `answer` returns (the CLI's JSON), as "module:Model" (relative to
    #                                 this package), imported on use: building the CLI's parser imports none
    profile: ProfileUse         # does the tool read a profile (path / profile_id over MCP, PATH on the CLI)
    answer: Callable[..., BaseModel]   # (profile or None, args, resolve) -> the catalog's pydantic model
    paths: tuple[str, ...] = ()        # arguments naming files the MCP server must find under its roots
    folders: tuple[str, ...] = ()      # arguments naming folders the MCP server reads (under its roots, whole)
    mcp: bool = True                   # served over MCP (False: a CLI command acting on this machine's jobs)
    keep: bool = False                 # the answer depends on the profile's files and the arguments only: the
    #                                    CLI keeps it beside the store (analysis/store/answers.py)
    budget: Budget | None = None       # MCP: the answer cut to its `limit` (None: `answer` honours the limit)
    narrow: str = "lower limit"        # MCP: how to ask for less when the text is cut
    cli_help: str = ""                 # the command's line in `stepdoctor --help`
    show: Callable[..., int] | None = None   # CLI: prints the answer, returns the exit code (None: as --format)
    cli_options: tuple[CliOption, ...] = ()  # options only the CLI has

    @cached_property
    def output(self) -> type[BaseModel]:
        """The answer's model (imported here when the row names it by "module:Model", so reading the catalog
        does not import the hang or replay stacks)."""
        if isinstance(self.result, str):
            module, _, name = self.result.partition(":")
            return getattr(import_module(module, __package__), name)
        return self.result


def _api():
    """tools.api, imported on first use: it loads the analysis (pandas, DuckDB, the checks)."""
    from . import api

    return api


def _issues(prof: Profile, a: IssuesArgs, resolve: Resolve) -> BaseModel:
    return _api().issues(prof, min_severity=a.min_severity, checks=a.checks, ranks=a.ranks)


def _breakdown(prof: Profile, a: BreakdownArgs, resolve: Resolve) -> BaseModel:
    return _api().breakdown(prof, ranks=a.ranks, steps=a.steps)


def _slow_ranks(prof: Profile, a: SlowRanksArgs, resolve: Resolve) -> BaseModel:
    return _api().slow_ranks(prof)


def _slow_links(prof: Profile, a: SlowLinksArgs, resolve: Resolve) -> BaseModel:
    return _api().slow_links(prof, limit=a.limit)


def _top_kernels(prof: Profile, a: TopKernelsArgs, resolve: Resolve) -> BaseModel:
    return _api().top_kernels(prof, rank=a.rank, step=a.step, top=a.limit, by=a.by)


def _env_audit(prof: Profile, a: EnvAuditArgs, resolve: Resolve) -> BaseModel:
    return _api().env_audit(prof, status=a.status)


def _compare(prof: None, a: CompareArgs, resolve: Resolve) -> BaseModel:
    from . import compare

    if a.target is None:
        if a.rank_a is None or a.rank_b is None:
            raise UsageError("give a second run (TARGET), or two ranks of the base run to compare (--rank-vs A "
                             "B; over MCP rank_a and rank_b)")
        return compare.compare_ranks(resolve(a.base), a.rank_a, a.rank_b, top=a.limit)
    if a.rank_a is not None or a.rank_b is not None:
        raise UsageError("--rank-vs (rank_a / rank_b) compares two ranks of one run: omit TARGET, or use "
                         "--rank (rank)")
    return compare.compare_runs(resolve(a.base), resolve(a.target), rank=a.rank, step=a.step, top=a.limit)


def _explain(prof: Profile | None, a: ExplainArgs, resolve: Resolve) -> BaseModel:
    from . import knowledge_tools

    if a.finding is not None and prof is None:
        raise UsageError("a finding number (--finding N) needs its profile: --profile PATH (over MCP path "
                         "or profile_id)")
    return knowledge_tools.explain(a.id, profile=prof, finding=a.finding)


def _list_fixes(prof: None, a: ListFixesArgs, resolve: Resolve) -> BaseModel:
    from . import knowledge_tools

    return knowledge_tools.list_fixes(check=a.check, vendor=a.vendor, limit=a.limit)


def _suggest_edit(prof: Profile | None, a: SuggestEditArgs, resolve: Resolve, *, apply: bool = False) -> BaseModel:
    from . import knowledge_tools

    if a.fix is None and prof is None:
        raise UsageError("give a fix id (--fix ID, from `stepdoctor fixes`) or a profile (--profile PATH; "
                         "over MCP path or profile_id)")
    if Path(a.code_path).is_dir():
        raise ProfileError(a.code_path, "is a folder: pass the training script (a .py or launch .sh file)")
    return knowledge_tools.suggest_edit(a.code_path, fix=a.fix, profile=prof, apply=apply)


def _what_if(prof: Profile, a: WhatIfArgs, resolve: Resolve) -> BaseModel:
    return _api().what_if(prof, ranks_at_median=a.ranks_at_median, stages_at_median=a.stages_at_median,
                       comm_at_median=a.comm_at_median, no_stalls=a.no_stalls, ops=a.ops)


def _critical_path(prof: Profile, a: CriticalPathArgs, resolve: Resolve) -> BaseModel:
    return _api().critical_path(prof, step=a.step)


def _hang(prof: None, a: HangArgs, resolve: Resolve) -> BaseModel:
    from . import live

    return live.hang(a.path)


def _trigger(prof: None, a: TriggerArgs, resolve: Resolve) -> BaseModel:
    from . import live

    return live.trigger(a.run_dir, a.steps)


def _snapshot(prof: None, a: SnapshotArgs, resolve: Resolve) -> BaseModel:
    from . import live

    return live.snapshot(a.pids, a.output)


FAIL_ON = CliOption(("--fail-on",), "exit 1 when a finding of this severity or worse is reported",
                    choices=("high", "medium", "low"))
APPLY = CliOption(("--apply",), "write the change (keeps a .bak backup)", flag=True, to_answer=True)

TOOLS: tuple[Tool, ...] = (
    Tool("list_issues", "issues", "List issues by priority",
         "Run every applicable check and return the findings, sorted by severity then time lost per step. "
         "Each finding names the check, ranks, steps, subject, impact_ms (per step), evidence and fix ids. "
         "Next: explain(check id, profile_id, finding=N) for one finding; suggest_edit for a patch.",
         IssuesArgs, ".models:IssueReport", "required", _issues, keep=True, budget=budgets.issues,
         narrow="lower limit or raise min_severity", cli_help="every applicable check, findings by priority",
         show=cli_show.issues, cli_options=(FAIL_ON,)),
    Tool("breakdown", "breakdown", "Step time breakdown",
         "Per rank and step: step, compute, communication (exposed and overlapped) and free time, in ms. "
         "Returns one row per (rank, step) (capped at limit) and per-rank totals over the steps.",
         BreakdownArgs, ".models:Breakdown", "required", _breakdown, keep=True, budget=budgets.breakdown,
         narrow="pass ranks=[...] to see fewer ranks", cli_help="per rank and step: compute / communication / free"),
    Tool("slow_ranks", "slow-ranks", "Slow ranks",
         "Ranks slower than their peers in compute, communication or free time, with steps and causes. "
         "Per dimension: the median, the spread across ranks, the slow ranks (excess ms and %), and for "
         "communication the late arrivals (ranks that wait least because the others wait for them).",
         SlowRanksArgs, ".models:SlowRanks", "required", _slow_ranks, keep=True, budget=budgets.slow_ranks,
         cli_help="ranks slower than their peers, with steps and causes"),
    Tool("slow_links", "slow-links", "Slow communication links",
         "Communication links (src->dst per transport) with bandwidth against their transport's median. "
         "Slowest first, with size, time and steps; findings for links clearly below their peers.",
         SlowLinksArgs, ".models:SlowLinks", "required", _slow_links, keep=True, cli_help="links with low bandwidth"),
    Tool("top_kernels", "kernels", "Top device kernels",
         "Device ops by total time: count, total / mean / max ms, share of device time and of the step, "
         "input shapes; top `limit`, with total and truncated.",
         TopKernelsArgs, ".models:TopKernels", "required", _top_kernels, keep=True,
         narrow="lower limit or pass rank / step", cli_help="top device ops"),
    Tool("env_audit", "env", "Environment variable audit",
         "Environment variables recorded with the profile, per rank: ok / bad / unknown, with the "
         "recommended value and the finding for bad ones. Kineto traces record no environment.",
         EnvAuditArgs, ".models:EnvAudit", "required", _env_audit, keep=True, budget=budgets.env_audit,
         narrow="pass status='bad' or lower limit", cli_help="environment variable audit across ranks"),
    Tool("compare_runs", "compare", "Compare two runs",
         "Why step time changed from base to target: delta, attribution to compute / communication / free, "
         "top kernel/op changes, environment and config changes, new findings, and a one-sentence verdict "
         "naming the largest cause. With rank_a and rank_b (and no target): rank b vs rank a.",
         CompareArgs, ".models:Comparison", "none", _compare, narrow="lower limit or pass rank / step",
         cli_help="why did step time change between two runs (or ranks)"),
    Tool("explain", "explain", "Explain a check, a fix or a finding",
         "Explain a check or a fix from the curated knowledge base: why it costs time, the steps to fix it, "
         "the code edit, how to verify. With a profile and finding=N, explains that finding with its numbers.",
         ExplainArgs, ".models:Explanation", "optional", _explain, budget=budgets.explain, narrow="read the structured "
         "content", cli_help="explain a check id or a fix id", show=cli_show.explain),
    Tool("list_fixes", "fixes", "List fixes",
         "Fixes in the knowledge base (id, title, vendors, checks they answer), optionally for one check or "
         "vendor. Next: explain(fix id) or the resource stepdoctor://fixes/{fix_id}.",
         ListFixesArgs, ".models:FixList", "none", _list_fixes, narrow="pass check or vendor, or lower limit",
         cli_help="list knowledge-base fixes", show=cli_show.fixes),
    Tool("suggest_edit", "suggest-edit", "Suggest a code edit (diff only)",
         "A unified diff that applies a fix (or every fix the profile's findings point to) to the user's "
         "code. Never writes: show the diff to the user, who applies it. Give fix, or a profile.",
         SuggestEditArgs, ".models:EditSuggestion", "optional", _suggest_edit, paths=("code_path",),
         narrow="pass fix= to get one fix at a time", cli_help="a unified diff applying a fix to training code",
         show=cli_show.suggest_edit, cli_options=(APPLY,)),
    Tool("what_if", "whatif", "What-if replay across ranks",
         "Replay each step across ranks (steps whose null replay is off by >2% are not used); predict step time "
         "with ranks, stages or communication at the median. No changes: the ideal job, slowdown S, a verdict.",
         WhatIfArgs, "..analysis.replay.models:WhatIf", "required", _what_if, keep=True,
         narrow="pass ranks_at_median or stages_at_median for one scenario",
         cli_help="replay the steps across ranks: what if a rank, a stage or communication ran at the median "
         "(without flags: the ideal job and the slowdown)"),
    Tool("critical_path", "critical-path", "Critical path across ranks",
         "The chain of work across ranks that sets a step's end (compute, transfer after the last arrival, "
         "tail, late start), each link with its rank and share of the step.",
         CriticalPathArgs, "..analysis.replay.models:CriticalPath", "required", _critical_path, keep=True,
         narrow="pass step", cli_help="the chain of work across ranks that sets a step's end, each link with "
         "its share of the step"),
    Tool("diagnose_hang", "hang", "Diagnose a hung job",
         "Where the ranks of a hung job diverge: the process group, the first collective some ranks never "
         "issued (or issued differently, or never completed), those ranks with their stacks, and the ranks "
         "whose stack differs from the majority.",
         HangArgs, "..analysis.hang.models:HangReport", "none", _hang, folders=("path",),
         narrow="see divergences[] and stacks in the structured content", cli_help="where the ranks of a hung "
         "job diverge (Flight Recorder dumps, py-spy stack snapshots)", show=cli_show.hang),
    Tool("trigger", "trigger", "Capture steps of a running job",
         "Ask every rank's StepWatch in the run folder to capture the next steps (a profiler trace per rank).",
         TriggerArgs, ".models:TriggerResult", "none", _trigger, mcp=False,
         cli_help="ask every rank's StepWatch in RUN_DIR to capture steps now", show=cli_show.trigger),
    Tool("snapshot", "snapshot", "Stack snapshots of local processes",
         "Take py-spy stack snapshots of local processes (by PID), one file per rank, for diagnose_hang.",
         SnapshotArgs, ".models:SnapshotResult", "none", _snapshot, mcp=False,
         cli_help="take py-spy stack snapshots of local processes (by PID) for `hang`", show=cli_show.snapshot),
)
MCP_TOOLS: tuple[Tool, ...] = tuple(t for t in TOOLS if t.mcp)

BY_NAME: dict[str, Tool] = {t.name: t for t in TOOLS}
BY_CLI: dict[str, Tool] = {t.cli: t for t in TOOLS if t.cli}


def _question(tool: Tool, args: Args) -> dict[str, Any]:
    """The question a kept answer answers: the tool and its arguments, less those only its budget reads (the
    CLI's every-row answer and an MCP call with a `limit` share it)."""
    budget_only = {name for name, info in tool.args.model_fields.items()
                   if any(isinstance(x, Cli) and x.budget for x in info.metadata)}
    return {"tool": tool.name, "args": args.model_dump(mode="json", exclude=budget_only)}


def kept_answer(tool: Tool, db: Path, args: Args) -> BaseModel | None:
    """The answer kept beside the store for this question (`analysis/store/answers.py`), or None: the tool
    does not keep its answers, none is kept, or the kept one does not read as the tool's output."""
    if not tool.keep:
        return None
    from ..analysis.store import answers

    text = answers.read(db, _question(tool, args))
    if text is None:
        return None
    try:
        return tool.output.model_validate_json(text)
    except ValueError:   # written by other code than the digest says, or cut short: answered anew
        return None


def keep_answer(tool: Tool, db: Path, args: Args, out: BaseModel) -> None:
    """Keep `out` as the answer to this question on the profile whose database is `db` (tools that keep)."""
    if tool.keep:
        from ..analysis.store import answers

        answers.keep(db, _question(tool, args), out.model_dump_json())


def answer(command: str, prof: Profile | None, args: Args, resolve: Resolve | None = None, **opts: Any) -> BaseModel:
    """Answer one question by its CLI command or MCP tool name (the same entry either way)."""
    tool = BY_CLI.get(command) or BY_NAME[command]
    if not isinstance(args, tool.args):
        raise TypeError(f"{tool.name} takes {tool.args.__name__}, not {type(args).__name__}")
    return tool.answer(prof, args, resolve or _api().load, **opts)
