"""How the CLI prints the answers that are not printed as `--format` says (a catalog row's `show`): each
takes the answer and the parsed command line and returns the exit code. Modules are imported on use, so
reading the catalog costs none of them."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..analysis.severity import SEVERITY_ORDER


def emit(model: Any, fmt: str) -> None:
    """Print a catalog answer as a table, JSON (docs/contract.md) or markdown."""
    from pydantic import BaseModel

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


def issues(rep: Any, a: argparse.Namespace) -> int:
    """As --format says; exit 1 with --fail-on when a finding of that severity or worse is listed."""
    emit(rep, a.format)
    if a.fail_on and any(SEVERITY_ORDER[f.severity] <= SEVERITY_ORDER[a.fail_on] for f in rep.findings):
        return 1
    return 0


def explain(exp: Any, a: argparse.Namespace) -> int:
    from . import knowledge_tools

    if a.format == "json":
        emit(exp, "json")
    else:
        print(knowledge_tools.explanation_markdown(exp, profile=a.profile))
    return 0


def fixes(fl: Any, a: argparse.Namespace) -> int:
    emit(fl.fixes if a.format == "json" else fl, a.format)  # JSON: the list (docs/contract.md)
    return 0


def suggest_edit(res: Any, a: argparse.Namespace) -> int:
    """The diff on stdout (what `patch` reads), the messages on stderr; the template when nothing was edited."""
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


def hang(r: Any, a: argparse.Namespace) -> int:
    from .live import render_hang

    print(r.model_dump_json(indent=2) if a.format == "json" else render_hang(r))
    return 0


def trigger(t: Any, a: argparse.Namespace) -> int:
    print(f"trigger {t.id}: every rank captures steps {t.first_step}..{t.first_step + t.steps - 1} "
          f"into {t.capture_dir}")
    return 0


def snapshot(r: Any, a: argparse.Namespace) -> int:
    print(f"{len(r.written)} stack snapshot(s) in {r.output}; `stepdoctor hang {r.output}` compares them")
    for f in r.failed:
        print(f"warning: {f}")
    return 0
