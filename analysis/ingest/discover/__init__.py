"""Find the ranks in a PATH and tell their format, by content rather than by folder name.

Kinds (searched to depth 6): torch_npu / MindSpore rank folders, whatever they are called (profiler_info_N.json
or a DB export / deliverables in ASCEND_PROFILER_OUTPUT/, `*_ascend_pt` / `*_ascend_ms`; DB exports also found by
their SQLite header when renamed); MindSpore <= 2.3 flat `profiler/` folders (step_trace_raw_*); raw msprof
(`PROF_*` with device_*/ or host/, a folder holding mindstudio_profiler_output/, `msprof_*.db`: format
ascend_msprof); a bare Ascend trace_view.json (an event array with Ascend tracks / string timestamps); Kineto
traces (a JSON object with traceEvents, .json or .json.gz, to depth 2). ASCEND_PROFILER_OUTPUT/ or
mindstudio_profiler_output/ given directly means the folder above it.

Rank ids: Ascend from `profiler_info_{rank}.json`, else `rank_id` in profiler_info / profiler_metadata.json
(a string too), else the DB file suffix; msprof from `rank_id` in device_*/info.json.*; Kineto from
`distributedInfo.rank` in the file head (compact JSON too), else from the file name. The device id is never
the rank. Otherwise a unique placeholder with a warning. Two Ascend directories for the same rank in one folder:
the newest timestamp wins, with a warning (msprof-analyze does the same). A folder holding several unrelated
runs (different kinds, a rank id repeated across sub-folders, rank-less traces in different folders, different
stated world sizes) is refused with one line listing them (runs.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import ProfileError
from ...files import display, not_regular
from ..base import RankSource
from ..formats import ASCEND_MSPROF, FORMATS, KINETO, MINDSPORE_LEGACY, ascend_export, export_kind
from .content import (
    DB_RE,
    EXECUTION_TRACE,
    INFO_RE,
    KINETO_NAME_RE,
    MS_LEGACY_RE,
    MSPROF_DB_RE,
    MSPROF_OUTPUT_DIR,
    OUTPUT_DIR,
    ascend_rank,
    json_kind,
    kineto_rank,
    listdir,
    msprof_rank,
    read_head,
    sqlite_db,
    timestamp_of,
    walk,
)
from .layouts import KINDS, walk_claims
from .runs import nothing_found, refuse_mixed_kineto, refuse_unrelated_runs

__all__ = ["MSPROF_OUTPUT_DIR", "OUTPUT_DIR", "Discovery", "discover", "json_kind", "kineto_rank", "read_head"]


@dataclass
class Discovery:
    path: Path
    kind: str                                   # ascend | mindspore_legacy | kineto
    sources: list[RankSource]
    warnings: list[str] = field(default_factory=list)


def discover(path: str | Path) -> Discovery:
    """Classify PATH and list its ranks. Raises ProfileError when nothing recognizable is there."""
    p = Path(path).expanduser()
    if not p.exists():
        raise ProfileError(p, "no such file or directory")
    if not p.is_dir() and (why := not_regular(p)):
        raise ProfileError(p, f"{why}, not a regular file: not read")
    if p.is_file():
        if p.name in ("profiler_metadata.json",) or INFO_RE.match(p.name):
            raise ProfileError(p, f"{p.name} is torch_npu's run description, not a trace: pass the rank folder "
                                  "that holds it beside ASCEND_PROFILER_OUTPUT/")
        if MSPROF_DB_RE.match(p.name):
            return _msprof([p], p)
        if KINETO_NAME_RE.search(p.name):
            kind = json_kind(p)
            if kind == "ascend_trace":
                return _ascend([p.parent], p)
            if kind == "execution_trace":
                raise ProfileError(p, EXECUTION_TRACE)
            if kind is None:
                raise ProfileError(p, "not a trace: neither a Kineto trace (an object with traceEvents) nor an "
                                      "Ascend trace_view.json; pass the profile folder")
            return _kineto([p], p)
        if m := DB_RE.match(p.name):
            if p.parent.name == "ASCEND_PROFILER_OUTPUT":
                return _ascend([p.parent.parent], p)
            # a DB export copied out of its rank directory: the file itself is the rank
            src = RankSource(path=p, format=ascend_export("mindspore" if m.group(1) == "mindspore" else "pytorch", "db"),
                             rank=int(m.group(2)) if m.group(2) is not None else None, rank_how=p.name)
            warnings: list[str] = []
            if src.rank is None:
                _assign_placeholders({}, [src], warnings, "no rank in the DB file name")
            return Discovery(p, "ascend", [src], warnings)
        raise ProfileError(p, "not a profile: expected a Kineto trace (.json/.json.gz) or a profile directory")
    if not os.access(p, os.R_OK | os.X_OK):
        raise ProfileError(p, "directory is not readable")
    if p.name in (OUTPUT_DIR, MSPROF_OUTPUT_DIR):   # a deliverables folder given directly means its rank folder
        p = p.parent

    found, special = walk_claims(walk(p))
    refuse_unrelated_runs(p, found["ascend_ranks"], found["legacy_folders"], found["kineto_traces"],
                          found["ascend_traces"], found["msprof_runs"])
    kind = next((k for k in KINDS if found[k]), None)
    if kind is None:
        raise ProfileError(p, nothing_found(p) + (f" ({'; '.join(special)})" if special else ""))
    disc = BUILDERS[kind](found[kind], p)
    disc.warnings[:0] = special
    return disc


def _ascend(dirs: list[Path], root: Path) -> Discovery:
    warnings: list[str] = []
    by_rank: dict[int, RankSource] = {}
    unknown: list[RankSource] = []
    kinds = set()
    for d in sorted(dirs):
        rank, how, fmt = ascend_rank(d)
        kinds.add(FORMATS[fmt].framework)
        if export_kind(fmt) == "text":   # a DB name ascend_rank passed over: not an SQLite file
            warnings += [f"{display(d.name)}: {n} is not an SQLite database (damaged or not an export); the text "
                         "export beside it is read" for n in sorted(listdir(d / OUTPUT_DIR)) if DB_RE.match(n)]
        # a DB export not named *.db (found by its SQLite header): the reader is given the file itself
        renamed = sqlite_db(d / OUTPUT_DIR) if export_kind(fmt) == "db" and not any(
            DB_RE.match(n) for n in listdir(d / OUTPUT_DIR)) else None
        src = RankSource(path=renamed or d, format=fmt, rank=rank, rank_how=how,
                         extra={"timestamp": timestamp_of(d)})
        if rank is None:
            unknown.append(src)
            continue
        if (prev := by_rank.get(rank)) is not None:
            newer, older = (src, prev) if src.extra["timestamp"] >= prev.extra["timestamp"] else (prev, src)
            warnings.append(f"rank {rank}: two profiles ({older.path.name}, {newer.path.name}); "
                            f"kept the newest {newer.path.name}")
            by_rank[rank] = newer
        else:
            by_rank[rank] = src
    if len(kinds) > 1:
        warnings.append("both torch_npu (_ascend_pt) and MindSpore (_ascend_ms) profiles found; analysed together")
    _assign_placeholders(by_rank, unknown, warnings, "no profiler_info_{rank}.json")
    return Discovery(root, "ascend", [by_rank[r] for r in sorted(by_rank)], warnings)


def _msprof(found: list[Path], root: Path) -> Discovery:
    """Raw msprof collections (PROF_* folders, mindstudio_profiler_output/ parents, msprof_*.db files)."""
    warnings: list[str] = []
    by_rank: dict[int, RankSource] = {}
    unknown: list[RankSource] = []
    for f in sorted(found):
        rank, how = msprof_rank(f)
        src = RankSource(path=f, format=ASCEND_MSPROF, rank=rank, rank_how=how)
        if rank is None or rank in by_rank:
            unknown.append(src)
        else:
            by_rank[rank] = src
    if len(found) > 1 and unknown:
        # collections that do not say their rank (or repeat one) cannot be told from separate runs
        listed = "; ".join(str(f.relative_to(root)) if f != root else "." for f in sorted(found))
        raise ProfileError(root, f"holds {len(found)} msprof collections that are not ranks of one job (no or "
                                 f"repeated rank_id): {listed[:600]}; pass one of them")
    _assign_placeholders(by_rank, unknown, warnings, "no rank_id in device_*/info.json")
    return Discovery(root, ASCEND_MSPROF, [by_rank[r] for r in sorted(by_rank)], warnings)


def _mindspore_legacy(dirs: list[Path], root: Path) -> Discovery:
    sources: list[RankSource] = []
    warnings: list[str] = []
    seen: set[int] = set()
    for d in sorted(dirs):
        for n in sorted(os.listdir(d)):
            if (m := MS_LEGACY_RE.match(n)) and int(m.group(1)) not in seen:
                r = int(m.group(1))
                seen.add(r)
                sources.append(RankSource(path=d, format=MINDSPORE_LEGACY, rank=r, rank_how=n))
    return Discovery(root, MINDSPORE_LEGACY, sorted(sources, key=lambda s: s.rank or 0), warnings)


def _kineto(files: list[Path], root: Path) -> Discovery:
    warnings: list[str] = []
    by_rank: dict[int, RankSource] = {}
    unknown: list[RankSource] = []
    found = [kineto_rank(f) for f in files]
    refuse_mixed_kineto(root, files, [r for r, _ in found], [h for _, h in found])
    for f, (rank, how) in zip(files, found, strict=True):
        src = RankSource(path=f, format=KINETO, rank=rank, rank_how=how)
        if rank is None:
            unknown.append(src)
        elif rank in by_rank:
            warnings.append(f"rank {rank}: two traces ({by_rank[rank].path.name}, {f.name}); "
                            f"the second gets a placeholder rank")
            unknown.append(src)
        else:
            by_rank[rank] = src
    _assign_placeholders(by_rank, unknown, warnings, "no distributedInfo.rank and no rank in the file name")
    return Discovery(root, KINETO, [by_rank[r] for r in sorted(by_rank)], warnings)


def _bare_trace(traces: list[Path], root: Path) -> Discovery:
    """Bare Ascend trace_view.json files: the folder of the first is read as one rank folder."""
    return _ascend([t.parent for t in traces[:1]], root)


def _kineto_sorted(files: list[Path], root: Path) -> Discovery:
    return _kineto(sorted(files), root)


# The discovery each kind of source found by the layouts (layouts.py) makes; every kind has its builder.
BUILDERS = {"ascend_ranks": _ascend, "legacy_folders": _mindspore_legacy, "msprof_runs": _msprof,
            "kineto_traces": _kineto_sorted, "ascend_traces": _bare_trace}


def _assign_placeholders(by_rank: dict[int, RankSource], unknown: list[RankSource],
                         warnings: list[str], why: str) -> None:
    """Give rank-less sources unique ids after the known ones, saying so."""
    nxt = max(by_rank, default=-1) + 1
    for src in unknown:
        while nxt in by_rank:
            nxt += 1
        src.rank, src.rank_how = nxt, "placeholder"
        by_rank[nxt] = src
        warnings.append(f"{src.path.name}: {why}; using placeholder rank {nxt}")
