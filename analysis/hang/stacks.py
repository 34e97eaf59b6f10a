"""Group the ranks of a hung job by the Python stack of their main thread, and name the ranks whose stack
differs from the majority.

Input: `py-spy dump --json --pid PID` output, one file per rank (a list of threads, each with `thread_name`,
`owns_gil`, `active` and `frames` [{name, filename, line, ...}], innermost first). The rank is the integer after
"rank" in the file name, else the file's trailing integer. The main thread is the one named MainThread, else
the first thread. Two ranks are alike when their main threads have the same (function, file, line) frames.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from .models import StackGroup, StackReport

_RANK_IN_NAME = re.compile(r"rank[_-]?(\d+)", re.I)
_TRAILING_INT = re.compile(r"(\d+)(?:\.json)?$")


def _rank_of(p: Path) -> int | None:
    m = _RANK_IN_NAME.search(p.name) or _TRAILING_INT.search(p.name)
    return int(m.group(1)) if m else None


def _main_thread(threads: Any) -> list[dict[str, Any]] | None:
    if not isinstance(threads, list) or not threads:
        return None
    ts = [t for t in threads if isinstance(t, dict)]
    main = next((t for t in ts if t.get("thread_name") == "MainThread"), ts[0] if ts else None)
    frames = main.get("frames") if main else None
    return frames if isinstance(frames, list) else None


def _frame_text(f: dict[str, Any]) -> str:
    file = str(f.get("short_filename") or f.get("filename") or "?").rsplit("/", 1)[-1]
    return f"{f.get('name', '?')} ({file}:{f.get('line', '?')})"


def stack_files(folders: list[Path]) -> list[Path]:
    """The py-spy JSON files in `folders`: a JSON list whose head names threads."""
    out = []
    for folder in folders:
        for p in sorted(folder.glob("*.json")):
            try:
                with open(p, "rb") as f:
                    head = f.read(4096)
            except OSError:
                continue
            if head.lstrip().startswith(b"[") and b'"thread_id"' in head:
                out.append(p)
    return out


def group_stacks(files: list[Path]) -> StackReport:
    by_stack: dict[tuple[str, ...], list[int]] = defaultdict(list)
    bad: list[str] = []
    for p in files:
        rank = _rank_of(p)
        try:
            frames = _main_thread(json.loads(p.read_bytes()))
        except (OSError, ValueError) as e:
            bad.append(f"{p}: {type(e).__name__}: {e}"[:200])
            continue
        if rank is None or frames is None:
            bad.append(f"{p}: no rank in the file name or no thread in the file")
            continue
        by_stack[tuple(_frame_text(f) for f in frames if isinstance(f, dict))].append(rank)
    groups = sorted((StackGroup(ranks=sorted(r), frames=list(k)) for k, r in by_stack.items()),
                    key=lambda g: (-len(g.ranks), g.ranks))
    outliers = groups[1:] if len(groups) > 1 and len(groups[0].ranks) > len(groups[1].ranks) else \
        (groups if len(groups) > 1 else [])
    return StackReport(groups=groups, outliers=outliers, unreadable=bad)
