"""Group the ranks of a hung job by the Python stack of their main thread, and name the ranks whose stack
differs from the majority.

Inputs:
  * `py-spy dump --json --pid PID`, one file per rank (a list of threads, each with `thread_name`, `owns_gil`,
    `active` and `frames` [{name, filename, line, ...}], innermost first). The rank is the integer after
    "rank" in the file name, else the file's trailing integer; the main thread is the one named
    MainThread, else the first.
  * the `stacks_<time>.txt` files torch.distributed.debug's server writes: per rank a section
    "=== Rank N: <address> ===" holding Python's faulthandler dump ('Thread 0x... (most recent call
    first):' then '  File "f.py", line 12 in name'); the main thread is the one whose outermost frame is
    `<module>`, else the last thread listed (faulthandler lists it last).
Two ranks are alike when their main threads have the same (function, file, line) frames.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from ..files import Unreadable, open_regular, read_bytes, read_text
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


_RANK_SECTION = re.compile(r"^=== Rank (\d+):.*===$", re.M)
_THREAD = re.compile(r"^(?:Current thread|Thread) 0x[0-9a-f]+ \(most recent call first\):$", re.M)
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<name>.+)$', re.M)


def debug_server_stacks(text: str) -> dict[int, list[str]]:
    """rank -> main-thread frames ('function (file:line)', innermost first) of a debug-server stacks dump."""
    out: dict[int, list[str]] = {}
    marks = list(_RANK_SECTION.finditer(text))
    for i, m in enumerate(marks):
        body = text[m.end():marks[i + 1].start() if i + 1 < len(marks) else len(text)]
        threads = [t for t in _THREAD.split(body)[1:]]
        stacks = [[f"{f['name'].strip()} ({f['file'].rsplit('/', 1)[-1]}:{f['line']})" for f in _FRAME.finditer(t)]
                  for t in threads]
        stacks = [st for st in stacks if st]
        if stacks:
            main = next((st for st in stacks if st[-1].startswith("<module> ")), stacks[-1])
            out[int(m.group(1))] = main
    return out


def stack_files(folders: list[Path]) -> list[Path]:
    """The py-spy JSON files in `folders`: a JSON list whose head names threads."""
    out = []
    for folder in folders:
        for p in sorted(folder.glob("*.json")):
            try:
                with open_regular(p) as f:
                    head = f.read(4096)
            except Unreadable:   # a FIFO or device named like a stack file: reported by group_stacks
                out.append(p)
                continue
            except OSError:
                continue
            if head.lstrip().startswith(b"[") and b'"thread_id"' in head:
                out.append(p)
        for p in sorted(folder.glob("*.txt")):   # the debug server's dumps: the newest one is read
            try:
                with open_regular(p) as f:
                    if f.read(64).startswith(b"=== Rank "):
                        out.append(p)
            except OSError:
                continue
    return out


def group_stacks(files: list[Path]) -> StackReport:
    by_stack: dict[tuple[str, ...], list[int]] = defaultdict(list)
    bad: list[str] = []
    dumps = sorted(p for p in files if p.suffix == ".txt")
    if dumps:   # periodic dumps: the newest shows where the ranks are now
        try:
            for rank, frames in debug_server_stacks(read_text(dumps[-1], errors="replace")).items():
                by_stack[tuple(frames)].append(rank)
        except OSError as e:
            bad.append(f"{dumps[-1]}: {e.strerror}")
    for p in (p for p in files if p.suffix != ".txt"):
        rank = _rank_of(p)
        try:
            frames = _main_thread(json.loads(read_bytes(p)))
        except OSError as e:
            bad.append(f"{p}: cannot be read ({e.strerror or 'I/O error'})")
            continue
        except (ValueError, RecursionError):
            bad.append(f"{p}: not a py-spy JSON stack file (not valid JSON)")
            continue
        if rank is None or frames is None:
            bad.append(f"{p}: no rank in the file name or no thread in the file")
            continue
        by_stack[tuple(_frame_text(f) for f in frames if isinstance(f, dict))].append(rank)
    groups = sorted((StackGroup(ranks=sorted(r), frames=list(k)) for k, r in by_stack.items()),
                    key=lambda g: (-len(g.ranks), g.ranks))
    tie = len(groups) > 1 and len(groups[0].ranks) == len(groups[1].ranks)
    outliers = groups[1:] if len(groups) > 1 and not tie else []
    return StackReport(groups=groups, outliers=outliers, unreadable=bad, tie=tie)
