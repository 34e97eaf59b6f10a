"""Every tool's arguments, one pydantic model each: the MCP input schema and the CLI's options.

Both front ends are made from these models (`server/mcp_tools.py` builds the MCP signatures,
`tools/cli_options.py` the argparse options). A field says how the CLI spells it with a `Cli` in its
`Annotated` metadata when the default (`--name-with-dashes`, read as its type says) is not how the CLI has
always spelt it; the MCP schema ignores that metadata.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..analysis.errors import UsageError

Severity = Literal["high", "medium", "low"]
VendorArg = Literal["ascend", "cuda", "rocm", "any"]

# Bounds on what one call may ask for (a request is read whole before it is validated; these keep what it
# makes the tool compute proportional to the profile, not to the request).
MAX_ITEMS = 16384     # ranks or steps named in one filter: more than any job has
MAX_TEXT = 4096       # a path, id or op name
MAX_OPS = 64          # op scalings of one what-if

Items = Annotated[list[int], Field(max_length=MAX_ITEMS)]
Text = Annotated[str, Field(max_length=MAX_TEXT)]


@dataclass(frozen=True)
class Cli:
    """How the CLI spells one argument, where the field's name and type do not say it.

    flags: the option strings ("--top"; () for a positional); parse: the field's value from what argparse
    read (None: argparse's value as is); repeat: the option may be given again (argparse collects a list);
    nargs / const / metavar: as argparse takes them; also: further fields the parsed value fills (`parse`
    returns a tuple, the field first); mcp_only: not a CLI option of its own; budget: read by the tool's
    budget only, never by its answer (the `limit` of a tool whose CLI prints every row: the CLI leaves it
    None, and a kept answer holds for any value); help: the CLI's wording, else the field's description."""

    flags: tuple[str, ...] | None = None
    parse: Callable[[Any], Any] | None = None
    repeat: bool = False
    nargs: int | str | None = None
    const: Any = None
    metavar: str | tuple[str, ...] | None = None
    also: tuple[str, ...] = ()
    mcp_only: bool = False
    budget: bool = False
    help: str | None = None


MCP_ONLY = Cli(mcp_only=True)
BUDGET = Cli(mcp_only=True, budget=True)
POSITIONAL = Cli(flags=())


def csv_ints(text: str | None) -> list[int] | None:
    """`0,3` -> [0, 3] (the CLI's form of a list of ranks or steps)."""
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"expected comma-separated integers, got {text!r}") from None


def _at_median(what: str) -> Callable[[list[str] | None], list[int] | None]:
    """`--rank 7=median` (repeatable): 'median' is the one target the replay answers today."""
    def parse(specs: list[str] | None) -> list[int] | None:
        out = []
        for spec in specs or []:
            key, _, target = spec.partition("=")
            if target not in ("", "median") or not key.strip().isdigit():
                raise UsageError(f"--{what} takes N=median (e.g. --{what} 7=median), got {spec!r}")
            out.append(int(key))
        return out or None

    return parse


def _repeated_ranks(specs: list[str] | None) -> list[int] | None:
    """`--no-stalls 3` (repeatable, or 3,5)."""
    out = []
    for spec in specs or []:
        for part in spec.split(","):
            if not part.strip().isdigit():
                raise UsageError(f"--no-stalls takes a rank (e.g. --no-stalls 3), got {spec!r}")
            out.append(int(part))
    return out or None


def _op_factors(specs: list[str] | None) -> dict[str, float] | None:
    """`--op NAME=xF` (repeatable): the op's time times F (x0.5: twice as fast)."""
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
    return out or None


def _comm_at_median(value: str | None) -> bool:
    if value not in (None, "median"):
        raise UsageError(f"--comm takes 'median', got {value!r}")
    return value == "median"


def _rank_pair(pair: list[str] | None) -> tuple[int | None, int | None]:
    if pair is None:
        return None, None
    try:
        return int(pair[0]), int(pair[1])
    except ValueError:
        raise UsageError(f"--rank-vs takes two ranks, got {' '.join(pair)!r}") from None


class Args(BaseModel):
    """Base of every tool's arguments: unknown names are errors, never ignored."""

    model_config = ConfigDict(extra="forbid", defer_build=True)   # validators built on first use (the CLI never validates)


class IssuesArgs(Args):
    min_severity: Severity = Field("low", description="lowest severity to list")
    checks: Annotated[list[Text] | None, Cli(flags=("--check",), repeat=True, metavar="ID")] = Field(
        None, max_length=256, description="only these check ids (e.g. slow-rank)")
    ranks: Annotated[Items | None, Cli(flags=("--rank",))] = Field(
        None, description="only findings on these ranks")
    limit: Annotated[int, BUDGET] = Field(20, ge=1, le=100, description="max findings returned")


class BreakdownArgs(Args):
    ranks: Annotated[Items | None, Cli(flags=("--rank",))] = Field(None, description="only these ranks")
    steps: Annotated[Items | None, Cli(flags=("--step",))] = Field(
        None, description="only these steps (ProfilerStep numbers)")
    limit: Annotated[int, BUDGET] = Field(64, ge=1, le=2000, description="max (rank, step) rows returned")


class SlowRanksArgs(Args):
    limit: Annotated[int, BUDGET] = Field(20, ge=1, le=200, description="max slow ranks listed per dimension")


class SlowLinksArgs(Args):
    limit: Annotated[int, Cli(flags=("--top",))] = Field(20, ge=1, le=500, description="max links returned, "
                                                             "slowest first")


class TopKernelsArgs(Args):
    rank: int | None = Field(None, description="only this rank (default: all ranks)")
    step: int | None = Field(None, description="only this step (default: all kept steps)")
    by: Literal["name", "type"] = Field(
        "name", description="group by kernel name or by op type (Ascend Type, e.g. MatMulV2)")
    limit: Annotated[int, Cli(flags=("--top",))] = Field(20, ge=1, le=200, description="max kernels returned")


class EnvAuditArgs(Args):
    status: Literal["ok", "bad", "unknown"] | None = Field(
        None, description="only variables with this status (bad = costs performance)")
    limit: Annotated[int, BUDGET] = Field(50, ge=1, le=500, description="max variables returned (bad first)")


class CompareArgs(Args):
    base: Annotated[Text, POSITIONAL] = Field(description="the reference run: a profile path (over MCP: under "
                                              "the roots, or a profile_id)")
    target: Annotated[Text | None, Cli(flags=(), nargs="?", help="the run to explain (omit with --rank-vs)")] = \
        Field(None, description="the run to explain (path or profile_id); omit it with rank_a / rank_b to "
              "compare two ranks of base")
    rank: int | None = Field(None, description="compare this rank only")
    step: int | None = Field(None, description="compare this step only")
    rank_a: Annotated[int | None, Cli(flags=("--rank-vs",), nargs=2, metavar=("A", "B"), parse=_rank_pair,
                                      also=("rank_b",), help="inside BASE: rank B (slow) against rank A")] = \
        Field(None, description="rank-vs-rank: the reference rank of base")
    rank_b: Annotated[int | None, MCP_ONLY] = Field(None, description="rank-vs-rank: the rank to explain "
                                                    "(the slow one)")
    limit: Annotated[int, Cli(flags=("--top",))] = Field(15, ge=1, le=100, description="max op/kernel changes "
                                                         "returned")


class ExplainArgs(Args):
    id: Annotated[Text, POSITIONAL] = Field(description="a check id (e.g. 'slow-rank', 'env-var') or a fix id "
                                            "(e.g. 'aclnn-cache-limit')")
    finding: int | None = Field(None, ge=1, description="finding number of the given profile, as the issues "
                                "listing numbers it")


class ListFixesArgs(Args):
    check: Text | None = Field(None, description="only fixes for this check id, e.g. 'env-var'")
    vendor: VendorArg | None = Field(None, description="only fixes that apply to this vendor")
    limit: Annotated[int, MCP_ONLY] = Field(50, ge=1, le=200, description="max fixes returned")


class SuggestEditArgs(Args):
    code_path: Annotated[Text, POSITIONAL] = Field(description="the training script to patch: a .py file, or "
                                                   "a launch .sh for environment fixes (over MCP: under the "
                                                   "server's roots)")
    fix: Text | None = Field(None, description="a fix id to apply, e.g. 'aclnn-cache-limit'")


class WhatIfArgs(Args):
    ranks_at_median: Annotated[Items | None, Cli(flags=("--rank",), repeat=True, metavar="R=median",
                                                 parse=_at_median("rank"))] = Field(
        None, description="these ranks at their peers' median")
    stages_at_median: Annotated[Items | None, Cli(flags=("--stage",), repeat=True, metavar="S=median",
                                                  parse=_at_median("stage"))] = Field(
        None, description="these pipeline stages at the median")
    comm_at_median: Annotated[bool, Cli(flags=("--comm",), nargs="?", const="median", metavar="median",
                                        parse=_comm_at_median)] = Field(
        False, description="transfer times at each collective's median")
    no_stalls: Annotated[Items | None, Cli(repeat=True, metavar="R", parse=_repeated_ranks)] = Field(
        None, description="these ranks without data loading and untraced gaps")
    ops: Annotated[dict[Text, float] | None, Cli(flags=("--op",), repeat=True, metavar="NAME=xF",
                                                 parse=_op_factors)] = Field(
        None, max_length=MAX_OPS, description="op name -> factor on its time (0.5: twice as fast)")


class CriticalPathArgs(Args):
    step: int | None = Field(None, description="the step (default: the slowest replayed one)")


class HangArgs(Args):
    path: Annotated[Text, POSITIONAL] = Field(
        description="folder under the server's roots holding the Flight Recorder dumps (<prefix><rank>, e.g. "
        "nccl_trace_rank_0) and/or `py-spy dump --json` files, one per rank")


class TriggerArgs(Args):
    run_dir: Annotated[Text, POSITIONAL] = Field(description="the run_dir given to stepdoctor.capture.StepWatch")
    steps: int = Field(3, ge=1, description="steps to capture")


class SnapshotArgs(Args):
    pids: Annotated[Items, Cli(flags=(), nargs="+", metavar="PID")] = Field(
        min_length=1, description="process ids (the rank is read from each one's RANK)")
    output: Annotated[Text, Cli(flags=("-o", "--output"))] = Field(
        description="folder to write pyspy_rank_<N>.json files into")


@dataclass(frozen=True)
class CliOption:
    """An option only the CLI has (not an argument of the question): `--fail-on` sets the exit code,
    `--apply` writes the edit. `to_answer`: its value goes to the answering function as a keyword."""

    flags: tuple[str, ...]
    help: str
    choices: tuple[str, ...] | None = None
    flag: bool = False              # a switch (store_true)
    to_answer: bool = False

    @property
    def dest(self) -> str:
        return self.flags[-1].lstrip("-").replace("-", "_")
