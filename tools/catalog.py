"""The tool catalog: every question stepdoctor answers, defined once.

A `Tool` names the MCP tool and the CLI command that answer the same question, its typed arguments (a
pydantic model: the MCP input schema, and what the CLI fills from its options), whether it reads a
profile, and the one function that answers. The CLI dispatches its commands through `answer`; the MCP
server registers every entry (`server/mcp_tools.py`) and adds only what a model's context needs: top-k
limits, evidence trimming and a short text. Both front ends therefore give the same numbers for one entry.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..analysis.errors import ProfileError, UsageError
from ..analysis.hang import HangReport
from ..analysis.replay.models import CriticalPath, WhatIf
from . import models as m

if TYPE_CHECKING:   # the catalog is read before any profile is opened (a kept answer needs no more)
    from ..analysis.store import Profile

Severity = Literal["high", "medium", "low"]
VendorArg = Literal["ascend", "cuda", "rocm", "any"]
# Turns a profile reference (a path, or over MCP a profile_id) into an opened profile.
Resolve = Callable[[str], "Profile"]


# Bounds on what one call may ask for (a request is read whole before it is validated; these keep what it
# makes the tool compute proportional to the profile, not to the request).
MAX_ITEMS = 16384     # ranks or steps named in one filter: more than any job has
MAX_TEXT = 4096       # a path, id or op name
MAX_OPS = 64          # op scalings of one what-if

Items = Annotated[list[int], Field(max_length=MAX_ITEMS)]
Text = Annotated[str, Field(max_length=MAX_TEXT)]


class Args(BaseModel):
    """Base of every tool's arguments: unknown names are errors, never ignored."""

    model_config = ConfigDict(extra="forbid", defer_build=True)   # validators built on first use (the CLI never validates)


class IssuesArgs(Args):
    min_severity: Severity = Field("low", description="lowest severity to list")
    checks: list[Text] | None = Field(None, max_length=256, description="only these check ids, e.g. ['slow-rank']")
    ranks: Items | None = Field(None, description="only findings on these ranks")
    limit: int = Field(20, ge=1, le=100, description="max findings returned")


class BreakdownArgs(Args):
    ranks: Items | None = Field(None, description="only these ranks")
    steps: Items | None = Field(None, description="only these steps (ProfilerStep numbers)")
    limit: int = Field(64, ge=1, le=2000, description="max (rank, step) rows returned")


class SlowRanksArgs(Args):
    limit: int = Field(20, ge=1, le=200, description="max slow ranks listed per dimension")


class SlowLinksArgs(Args):
    limit: int = Field(20, ge=1, le=500, description="max links returned, slowest first")


class TopKernelsArgs(Args):
    rank: int | None = Field(None, description="only this rank (default: all ranks)")
    step: int | None = Field(None, description="only this step (default: all kept steps)")
    by: Literal["name", "type"] = Field(
        "name", description="group by kernel name or by op type (Ascend Type, e.g. MatMulV2)")
    limit: int = Field(20, ge=1, le=200, description="max kernels returned")


class EnvAuditArgs(Args):
    status: Literal["ok", "bad", "unknown"] | None = Field(
        None, description="only variables with this status (bad = costs performance)")
    limit: int = Field(50, ge=1, le=500, description="max variables returned (bad first)")


class CompareArgs(Args):
    base: Text = Field(description="the reference run: a profile path under the roots or a profile_id")
    target: Text | None = Field(None, description="the run to explain (path or profile_id); omit it with "
                               "rank_a / rank_b to compare two ranks of base")
    rank: int | None = Field(None, description="compare this rank only")
    step: int | None = Field(None, description="compare this step only")
    rank_a: int | None = Field(None, description="rank-vs-rank: the reference rank of base")
    rank_b: int | None = Field(None, description="rank-vs-rank: the rank to explain (the slow one)")
    limit: int = Field(15, ge=1, le=100, description="max op/kernel changes returned")


class ExplainArgs(Args):
    id: Text = Field(description="a check id (e.g. 'slow-rank', 'env-var') or a fix id (e.g. 'aclnn-cache-limit')")
    finding: int | None = Field(None, ge=1, description="finding number (1-based, as list_issues lists them) "
                                "of the given profile")


class ListFixesArgs(Args):
    check: Text | None = Field(None, description="only fixes for this check id, e.g. 'env-var'")
    vendor: VendorArg | None = Field(None, description="only fixes that apply to this vendor")
    limit: int = Field(50, ge=1, le=200, description="max fixes returned")


class SuggestEditArgs(Args):
    code_path: Text = Field(description="the training script (a .py or launch .sh file) to patch, under the "
                           "server's roots")
    fix: Text | None = Field(None, description="a fix id to apply, e.g. 'aclnn-cache-limit'")


class WhatIfArgs(Args):
    ranks_at_median: Items | None = Field(None, description="these ranks at their peers' median")
    stages_at_median: Items | None = Field(None, description="these pipeline stages at the median")
    comm_at_median: bool = Field(False, description="transfer times at each collective's median")
    no_stalls: Items | None = Field(None, description="these ranks without data loading and untraced gaps")
    ops: dict[Text, float] | None = Field(None, max_length=MAX_OPS, description="op name -> factor on its time (0.5: twice as fast)")


class CriticalPathArgs(Args):
    step: int | None = Field(None, description="the step (default: the slowest replayed one)")


class HangArgs(Args):
    path: Text = Field(description="folder under the server's roots holding the Flight Recorder dumps "
                       "(<prefix><rank>, e.g. nccl_trace_rank_0) and/or `py-spy dump --json` files, one per rank")


class TriggerArgs(Args):
    run_dir: Text = Field(description="the run_dir given to stepdoctor.capture.StepWatch")
    steps: int = Field(3, ge=1, description="steps to capture")


class SnapshotArgs(Args):
    pids: Items = Field(min_length=1, description="process ids (the rank is read from each one's RANK)")
    output: Text = Field(description="folder to write pyspy_rank_<N>.json files into")


ProfileUse = Literal["required", "optional", "none"]


@dataclass(frozen=True)
class Tool:
    """One question: its names in both front ends, its typed arguments and the function that answers."""

    name: str                   # the MCP tool name
    cli: str | None             # the CLI command answering the same question (None: MCP only)
    title: str
    description: str            # what a model reads in tools/list; the first sentence heads docs/tools.md
    args: type[Args]
    output: type[BaseModel]     # what `answer` returns (the CLI's JSON)
    profile: ProfileUse         # does the tool read a profile (path / profile_id over MCP, PATH on the CLI)
    answer: Callable[..., BaseModel]   # (profile or None, args, resolve) -> the catalog's pydantic model
    paths: tuple[str, ...] = ()        # arguments naming files the MCP server must find under its roots
    folders: tuple[str, ...] = ()      # arguments naming folders the MCP server reads (under its roots, whole)
    mcp: bool = True                   # served over MCP (False: a CLI command acting on this machine's jobs)
    keep: bool = False                 # the answer depends on the profile's files and the arguments only: the
    #                                    CLI keeps it beside the store (analysis/store/answers.py)


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
    return _api().env_audit(prof)


def _compare(prof: None, a: CompareArgs, resolve: Resolve) -> BaseModel:
    from . import compare

    if a.target is None:
        if a.rank_a is None or a.rank_b is None:
            raise UsageError("give target (a second run), or rank_a and rank_b to compare two ranks of base")
        return compare.compare_ranks(resolve(a.base), a.rank_a, a.rank_b, top=a.limit)
    if a.rank_a is not None or a.rank_b is not None:
        raise UsageError("rank_a / rank_b compare two ranks of one run: omit target, or use rank")
    return compare.compare_runs(resolve(a.base), resolve(a.target), rank=a.rank, step=a.step, top=a.limit)


def _explain(prof: Profile | None, a: ExplainArgs, resolve: Resolve) -> BaseModel:
    from . import knowledge_tools

    if a.finding is not None and prof is None:
        raise UsageError("finding=N needs the profile: pass path or profile_id")
    return knowledge_tools.explain(a.id, profile=prof, finding=a.finding)


def _list_fixes(prof: None, a: ListFixesArgs, resolve: Resolve) -> BaseModel:
    from . import knowledge_tools

    return knowledge_tools.list_fixes(check=a.check, vendor=a.vendor, limit=a.limit)


def _suggest_edit(prof: Profile | None, a: SuggestEditArgs, resolve: Resolve, *, apply: bool = False) -> BaseModel:
    from . import knowledge_tools

    if a.fix is None and prof is None:
        raise UsageError("give fix (a fix id from list_fixes) or a profile (path / profile_id)")
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


TOOLS: tuple[Tool, ...] = (
    Tool("list_issues", "issues", "List issues by priority",
         "Run every applicable check and return the findings, sorted by severity then time lost per step. "
         "Each finding names the check, ranks, steps, subject, impact_ms (per step), evidence and fix ids. "
         "Next: explain(check id, profile_id, finding=N) for one finding; suggest_edit for a patch.",
         IssuesArgs, m.IssueReport, "required", _issues, keep=True),
    Tool("breakdown", "breakdown", "Step time breakdown",
         "Per rank and step: step, compute, communication (exposed and overlapped) and free time, in ms. "
         "Returns one row per (rank, step) (capped at limit) and per-rank totals over the steps.",
         BreakdownArgs, m.Breakdown, "required", _breakdown, keep=True),
    Tool("slow_ranks", "slow-ranks", "Slow ranks",
         "Ranks slower than their peers in compute, communication or free time, with steps and causes. "
         "Per dimension: the median, the spread across ranks, the slow ranks (excess ms and %), and for "
         "communication the late arrivals (ranks that wait least because the others wait for them).",
         SlowRanksArgs, m.SlowRanks, "required", _slow_ranks, keep=True),
    Tool("slow_links", "slow-links", "Slow communication links",
         "Communication links (src->dst per transport) with bandwidth against their transport's median. "
         "Slowest first, with size, time and steps; findings for links clearly below their peers.",
         SlowLinksArgs, m.SlowLinks, "required", _slow_links, keep=True),
    Tool("top_kernels", "kernels", "Top device kernels",
         "Device ops by total time: count, total / mean / max ms, share of device time and of the step, "
         "input shapes; top `limit`, with total and truncated.",
         TopKernelsArgs, m.TopKernels, "required", _top_kernels, keep=True),
    Tool("env_audit", "env", "Environment variable audit",
         "Environment variables recorded with the profile, per rank: ok / bad / unknown, with the "
         "recommended value and the finding for bad ones. Kineto traces record no environment.",
         EnvAuditArgs, m.EnvAudit, "required", _env_audit, keep=True),
    Tool("compare_runs", "compare", "Compare two runs",
         "Why step time changed from base to target: delta, attribution to compute / communication / free, "
         "top kernel/op changes, environment and config changes, new findings, and a one-sentence verdict "
         "naming the largest cause. With rank_a and rank_b (and no target): rank b vs rank a.",
         CompareArgs, m.Comparison, "none", _compare),
    Tool("explain", "explain", "Explain a check, a fix or a finding",
         "Explain a check or a fix from the curated knowledge base: why it costs time, the steps to fix it, "
         "the code edit, how to verify. With a profile and finding=N, explains that finding with its numbers.",
         ExplainArgs, m.Explanation, "optional", _explain),
    Tool("list_fixes", "fixes", "List fixes",
         "Fixes in the knowledge base (id, title, vendors, checks they answer), optionally for one check or "
         "vendor. Next: explain(fix id) or the resource stepdoctor://fixes/{fix_id}.",
         ListFixesArgs, m.FixList, "none", _list_fixes),
    Tool("suggest_edit", "suggest-edit", "Suggest a code edit (diff only)",
         "A unified diff that applies a fix (or every fix the profile's findings point to) to the user's "
         "code. Never writes: show the diff to the user, who applies it. Give fix, or a profile.",
         SuggestEditArgs, m.EditSuggestion, "optional", _suggest_edit, paths=("code_path",)),
    Tool("what_if", "whatif", "What-if replay across ranks",
         "Replay each step across ranks (steps whose null replay is off by >2% are not used); predict step time "
         "with ranks, stages or communication at the median. No changes: the ideal job, slowdown S, a verdict.",
         WhatIfArgs, WhatIf, "required", _what_if, keep=True),
    Tool("critical_path", "critical-path", "Critical path across ranks",
         "The chain of work across ranks that sets a step's end (compute, transfer after the last arrival, "
         "tail, late start), each link with its rank and share of the step.",
         CriticalPathArgs, CriticalPath, "required", _critical_path, keep=True),
    Tool("diagnose_hang", "hang", "Diagnose a hung job",
         "Where the ranks of a hung job diverge: the process group, the first collective some ranks never "
         "issued (or issued differently, or never completed), those ranks with their stacks, and the ranks "
         "whose stack differs from the majority.",
         HangArgs, HangReport, "none", _hang, folders=("path",)),
    Tool("trigger", "trigger", "Capture steps of a running job",
         "Ask every rank's StepWatch in the run folder to capture the next steps (a profiler trace per rank).",
         TriggerArgs, m.TriggerResult, "none", _trigger, mcp=False),
    Tool("snapshot", "snapshot", "Stack snapshots of local processes",
         "Take py-spy stack snapshots of local processes (by PID), one file per rank, for diagnose_hang.",
         SnapshotArgs, m.SnapshotResult, "none", _snapshot, mcp=False),
)
MCP_TOOLS: tuple[Tool, ...] = tuple(t for t in TOOLS if t.mcp)

BY_NAME: dict[str, Tool] = {t.name: t for t in TOOLS}
BY_CLI: dict[str, Tool] = {t.cli: t for t in TOOLS if t.cli}


def _question(tool: Tool, args: Args) -> dict[str, Any]:
    return {"tool": tool.name, "args": args.model_dump(mode="json")}


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
