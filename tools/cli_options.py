"""The CLI commands of the tool catalog, made from its rows as the MCP signatures are: one subcommand per
row, one option per argument of its model (spelt as the field's `Cli` metadata says, read as its type says),
the profile as PATH (or `--profile` where it is optional), and the row's CLI-only options. Running one asks
the catalog (`ask` / `ask_path`, which keeps answers beside the store) and prints through the row's `show`."""

from __future__ import annotations

import argparse
import types
import typing
from functools import partial
from typing import Any

from pydantic.fields import FieldInfo

from . import catalog
from .arguments import Cli, csv_ints
from .catalog import Tool
from .cli_show import emit

PROFILE_HELP = ("profile: a rank folder (*_ascend_pt, *_ascend_ms, any folder with ASCEND_PROFILER_OUTPUT/), a "
                "folder of ranks, a MindSpore profiler/ folder, a Kineto trace (.json/.json.gz) or a folder of traces")
# dests the parser sets itself: an argument of that name would be overwritten
_TAKEN = frozenset({"command", "func", "format", "debug", "ray", "load"})


def _cli(info: FieldInfo) -> Cli:
    return next((x for x in info.metadata if isinstance(x, Cli)), Cli())


def _bare(annotation: Any) -> Any:
    """The field's type without `None` and `Annotated` (list[int], int, str, bool, a Literal, dict)."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is typing.Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            rest = [x for x in typing.get_args(annotation) if x is not type(None)]
            annotation = rest[0] if len(rest) == 1 else annotation
            if len(rest) != 1:
                return annotation
        else:
            return annotation


def _is_int_list(t: Any) -> bool:
    return typing.get_origin(t) is list and _bare(typing.get_args(t)[0]) is int


def _kwargs(name: str, info: FieldInfo, cli: Cli) -> dict[str, Any]:
    """argparse's keywords for one field, and its help: the CLI's wording or the field's description, with
    the form (comma-separated, repeatable) and the default said."""
    t = _bare(info.annotation)
    kw: dict[str, Any] = {}
    hint = ""
    if cli.parse is None and t is bool:
        kw["action"] = "store_true"
    elif cli.repeat:
        kw["action"] = "append"
        hint = " (repeatable)"
    elif typing.get_origin(t) is typing.Literal:
        kw["choices"] = list(typing.get_args(t))
    elif cli.nargs is not None and _is_int_list(t):
        kw["type"] = int
    elif cli.parse is None and _is_int_list(t):
        hint = " (comma-separated, e.g. 0,3)"
        kw["metavar"] = "N,N"
    elif cli.parse is None and t is int:
        kw["type"] = int
        kw["metavar"] = "N"
    for key in ("nargs", "const", "metavar"):
        if getattr(cli, key) is not None:
            kw[key] = getattr(cli, key)
    if not info.is_required() and info.default not in (None, False) and "action" not in kw:
        hint += f" (default {info.default})"
    kw["help"] = (cli.help or info.description or name) + hint
    return kw



def add_command(sub: argparse._SubParsersAction, tool: Tool, parents: list[argparse.ArgumentParser]) -> None:
    """The subcommand answering `tool`'s question."""
    s = sub.add_parser(tool.cli, parents=parents, help=tool.cli_help)
    if tool.profile == "required":
        s.add_argument("path", help=PROFILE_HELP)
    for name, info in tool.args.model_fields.items():
        cli = _cli(info)
        if cli.mcp_only:
            continue
        if name in _TAKEN | {"required": {"path"}, "optional": {"profile"}}.get(tool.profile, set()):
            raise ValueError(f"{tool.name}: argument {name!r} is a name the CLI parser uses itself")
        kw = _kwargs(name, info, cli)
        if cli.flags == ():   # a positional: its name is its dest
            if not info.is_required() and "nargs" not in kw:
                kw["nargs"] = "?"
            s.add_argument(name, **kw)
        else:
            flags = cli.flags or (f"--{name.replace('_', '-')}",)
            s.add_argument(*flags, dest=name, required=info.is_required(), **kw)
    if tool.profile == "optional":
        s.add_argument("--profile", help=f"the profile whose findings the answer uses ({PROFILE_HELP})")
    for opt in tool.cli_options:
        if opt.flag:
            s.add_argument(*opt.flags, action="store_true", help=opt.help)
        else:
            s.add_argument(*opt.flags, choices=list(opt.choices) if opt.choices else None, help=opt.help)
    s.set_defaults(func=partial(run, tool))


def values(tool: Tool, a: argparse.Namespace) -> dict[str, Any]:
    """The question's arguments from the command line: each field as its `Cli` parses it (a comma list of
    ints as ints), one not given left to the model's default; a field the CLI does not spell (the budget's
    `limit`) is None: the CLI prints every row."""
    out: dict[str, Any] = {}
    for name, info in tool.args.model_fields.items():
        cli = _cli(info)
        if cli.mcp_only:
            out.setdefault(name, None)
            continue
        raw = getattr(a, name)
        if raw is None and cli.parse is None:
            continue   # not given: the model's default
        if cli.parse is not None:
            value = cli.parse(raw)
            if cli.also:
                value, *more = value
                out.update(zip(cli.also, more, strict=True))
        elif _is_int_list(_bare(info.annotation)) and cli.nargs is None and not cli.repeat:
            value = csv_ints(raw)
        else:
            value = raw
        out[name] = value
    for opt in tool.cli_options:
        if opt.to_answer:
            out[opt.dest] = getattr(a, opt.dest)
    return out


def ask(command: str, prof, load=None, **opts):
    """Answer through the command's catalog entry, the one the MCP tool uses. The options are taken as
    argparse typed them (no MCP bounds: the CLI prints every row; the catalog functions check them with
    messages that name the CLI options); those that are not arguments (`apply`) go to the function.
    `load` opens the profiles an argument names (compare's runs) with the command's ingest options."""
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


def run(tool: Tool, a: argparse.Namespace) -> int:
    """Answer the command's question through the catalog and print it."""
    opts = values(tool, a)
    if tool.profile == "required":
        out = ask_path(tool.cli, a.path, a.load, **opts)
    else:
        path = getattr(a, "profile", None) if tool.profile == "optional" else None
        out = ask(tool.cli, a.load(path) if path else None, a.load, **opts)
    if tool.show is not None:
        return tool.show(out, a)
    emit(out, a.format)
    return 0


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser,
             debug_only: argparse.ArgumentParser) -> None:
    """Every catalog row with a CLI command: the options of --format / --debug / --ray (`common`) for the
    questions about profiles and dumps, --debug alone for those acting on this machine's jobs."""
    for tool in catalog.TOOLS:
        if tool.cli:
            add_command(sub, tool, [common] if tool.mcp else [debug_only])
