"""How a profile lies on disk, one record per layout: how it claims a folder of the walk, and the kinds of
source it finds there. Each format of the registry (`ingest/formats.py`) names the layout that finds it.

`discover` walks PATH once and offers every folder to the layouts in the order below; a layout that claims a
folder as its own (`exclusive`) ends the offer there, so a rank folder is never also searched for traces. When
the walk is done, the first kind found, in the order the rows list their kinds, makes the discovery. Adding a
layout is one claim function and one row here, and the builder of its kinds (`discover.BUILDERS`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ...files import display, not_regular
from ..formats import KINETO
from .content import KINETO_NAME_RE, MS_LEGACY_RE, MSPROF_DB_RE, is_ascend_rank, is_msprof_rank, json_kind

# Kineto traces and bare Ascend traces are looked for this deep: a run folder with its traces/ one level down,
# or a parent of such runs
TRACE_DEPTH = 2


@dataclass
class Claim:
    """What one walked folder holds for the layouts: found paths per layout name, whether the folder is a
    layout's own (no other layout is offered it), and notes (files named like traces that are not read)."""

    found: dict[str, list[Path]] = field(default_factory=dict)
    exclusive: bool = False
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Layout:
    name: str
    description: str
    finds: tuple[str, ...]     # the kinds of source its claims hold, in the order they make a discovery
    # (folder, its sub-folder names (prunable in place), its file names, depth) -> what it holds of this layout
    claim: Callable[[Path, list[str], list[str], int], Claim]


def _ascend_rank(root: Path, dirs: list[str], files: list[str], depth: int) -> Claim:
    if not is_ascend_rank(root, dirs, files):
        return Claim()
    dirs.clear()   # never descend into a rank folder
    return Claim({"ascend_ranks": [root]}, exclusive=True)


def _mindspore_legacy(root: Path, dirs: list[str], files: list[str], depth: int) -> Claim:
    if not any(MS_LEGACY_RE.match(f) for f in files):
        return Claim()
    # MindSpore 2.4 writes the run twice: these flat files plus rank-*_ascend_ms/ children in the new layout.
    # Only the flat files have iteration interval / fp_and_bp / tail, so the children are not ranks of their own
    # (the legacy reader warns that it skipped them); its PROF_* folders are the raw data those files came from.
    dirs[:] = [d for d in dirs if not d.endswith("_ascend_ms") and not d.startswith("PROF_")]
    return Claim({"legacy_folders": [root]}, exclusive=True)


def _msprof(root: Path, dirs: list[str], files: list[str], depth: int) -> Claim:
    if is_msprof_rank(root, dirs, files):
        dirs.clear()
        return Claim({"msprof_runs": [root]}, exclusive=True)
    return Claim({"msprof_runs": [root / f for f in files if MSPROF_DB_RE.match(f)]})


def _traces(root: Path, dirs: list[str], files: list[str], depth: int) -> Claim:
    """Kineto traces and bare Ascend trace_view.json files near the top: one head read per JSON file tells
    which (so both layouts share this claim)."""
    out = Claim({"kineto_traces": [], "ascend_traces": []})
    if depth > TRACE_DEPTH:
        return out
    for f in files:
        if not KINETO_NAME_RE.search(f):
            continue
        if why := not_regular(root / f):
            out.notes.append(f"{display(root / f)}: {why}, not a regular file: not read")
            continue
        kind = json_kind(root / f)
        if kind == KINETO:
            out.found["kineto_traces"].append(root / f)
        elif kind == "ascend_trace":
            out.found["ascend_traces"].append(root / f)
    return out


LAYOUTS: tuple[Layout, ...] = (
    Layout("rank_folder", "a torch_npu / MindSpore rank folder (text or DB export), whatever it is called",
           ("ascend_ranks",), _ascend_rank),
    Layout("legacy_folder", "a MindSpore <= 2.4 flat profiler folder", ("legacy_folders",), _mindspore_legacy),
    Layout("msprof_collection", "a raw msprof collection, or msprof_*.db files", ("msprof_runs",), _msprof),
    Layout("traces", "Kineto traces and bare Ascend trace_view.json files, to depth 2",
           ("kineto_traces", "ascend_traces"), _traces),
)
KINDS = tuple(k for x in LAYOUTS for k in x.finds)


def walk_claims(folders: Iterable[tuple[Path, list[str], list[str], int]]) -> tuple[dict[str, list[Path]], list[str]]:
    """Every folder of the walk offered to the layouts in order: the paths found per kind, and the notes."""
    found: dict[str, list[Path]] = {kind: [] for kind in KINDS}
    notes: list[str] = []
    for root, dirs, files, depth in folders:
        for layout in LAYOUTS:
            got = layout.claim(root, dirs, files, depth)
            for name, paths in got.found.items():
                found[name] += paths
            notes += got.notes
            if got.exclusive:
                break
    return found, notes
