"""Find the ranks in a PATH and tell their format.

Accepted PATHs (cli-contract.md): one `*_ascend_pt` / `*_ascend_ms` directory, a folder holding many of
them (searched to depth 6), a MindSpore <= 2.3 `profiler/` folder, one Kineto trace file
(`.json`, `.json.gz`, `.pt.trace.json`), or a folder of Kineto files.

Rank ids: Ascend from `profiler_info_{rank}.json` (then the DB file suffix); Kineto from
`distributedInfo.rank` in the file head (compact JSON too), else from the file name, else a unique
placeholder with a warning. Two Ascend directories for the same rank: the newest timestamp wins, with a
warning (msprof-analyze does the same).
"""

from __future__ import annotations

import gzip
import os
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from .base import ProfileError, RankSource

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"

MAX_DEPTH = 6
_ASCEND_SUFFIXES = ("_ascend_pt", "_ascend_ms")
_INFO_RE = re.compile(r"^profiler_info_(\d+)\.json$")
_DB_RE = re.compile(r"^ascend_(pytorch|mindspore)_profiler(?:_(\d+))?\.db$")
_MS_LEGACY_RE = re.compile(r"^step_trace_raw_(\d+)_detail_time\.csv$")
_KINETO_NAME_RE = re.compile(r"\.(json|json\.gz)$")
_DIST_RANK_RE = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)', re.S)
_FILE_RANK_RE = re.compile(r"rank[-_]?(\d+)", re.I)
_HEAD_BYTES = 1 << 20
_STRING_TS_RE = re.compile(rb'"ts"\s*:\s*"\d')


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
    if p.is_file():
        if _KINETO_NAME_RE.search(p.name):
            kind = json_kind(p)
            if kind == "ascend_trace":
                return _ascend([p.parent], p)
            if kind is None:
                raise ProfileError(p, "not a trace: neither a Kineto trace (an object with traceEvents) nor an "
                                      "Ascend trace_view.json; pass the profile folder")
            return _kineto([p], p)
        if m := _DB_RE.match(p.name):
            if p.parent.name == "ASCEND_PROFILER_OUTPUT":
                return _ascend([p.parent.parent], p)
            # a DB export copied out of its rank directory: the file itself is the rank
            src = RankSource(path=p, format=f"ascend_{'ms' if m.group(1) == 'mindspore' else 'pt'}_db",
                             rank=int(m.group(2)) if m.group(2) is not None else None, rank_how=p.name)
            warnings: list[str] = []
            if src.rank is None:
                _assign_placeholders({}, [src], warnings, "no rank in the DB file name")
            return Discovery(p, "ascend", [src], warnings)
        raise ProfileError(p, "not a profile: expected a Kineto trace (.json/.json.gz) or a profile directory")
    if not os.access(p, os.R_OK | os.X_OK):
        raise ProfileError(p, "directory is not readable")
    if p.name == OUTPUT_DIR:   # ASCEND_PROFILER_OUTPUT given directly means its rank folder
        p = p.parent

    ascend_dirs: list[Path] = []
    legacy_dirs: list[Path] = []
    kineto_files: list[Path] = []
    bare_traces: list[Path] = []
    for root, dirs, files, depth in _walk(p):
        if _is_ascend_rank(root, dirs, files):
            ascend_dirs.append(root)
            dirs.clear()  # never descend into a rank directory
            continue
        if any(_MS_LEGACY_RE.match(f) for f in files):
            legacy_dirs.append(root)
            # MindSpore 2.4 writes the run twice: these flat files plus rank-*_ascend_ms/ children in the new
            # layout. Only the flat files have iteration interval / fp_and_bp / tail, so the children are not
            # ranks of their own (the legacy reader warns that it skipped them).
            dirs[:] = [d for d in dirs if not d.endswith("_ascend_ms")]
        if depth <= 1:
            for f in files:
                if _KINETO_NAME_RE.search(f):
                    kind = json_kind(root / f)
                    if kind == "kineto":
                        kineto_files.append(root / f)
                    elif kind == "ascend_trace":
                        bare_traces.append(root / f)
    _refuse_unrelated_runs(p, ascend_dirs, legacy_dirs, kineto_files, bare_traces)
    if ascend_dirs:
        return _ascend(ascend_dirs, p)
    if legacy_dirs:
        return _mindspore_legacy(legacy_dirs, p)
    if kineto_files:
        return _kineto(sorted(kineto_files), p)
    if bare_traces:
        return _ascend([t.parent for t in bare_traces[:1]], p)
    raise ProfileError(p, _nothing_found(p))


# Files a torch_npu rank folder's ASCEND_PROFILER_OUTPUT/ (or a bare deliverables folder) holds.
_DELIVERABLES = ("trace_view.json", "kernel_details.csv", "step_trace_time.csv", "communication.json")


def _is_ascend_rank(root: Path, dirs: list[str], files: list[str]) -> bool:
    """A torch_npu / MindSpore rank folder, whatever it is called: `*_ascend_pt` / `*_ascend_ms`, or a
    folder with ASCEND_PROFILER_OUTPUT/ beside profiler_info_N.json or holding a DB export or deliverables."""
    if root.name.endswith(_ASCEND_SUFFIXES):
        return True
    if OUTPUT_DIR not in dirs:
        # the deliverables copied out of a rank folder: kernel_details.csv / step_trace_time.csv beside
        # nothing that makes it another kind of folder
        return bool({"kernel_details.csv", "step_trace_time.csv"} & set(files)) and \
            "cluster_step_trace_time.csv" not in files
    if any(_INFO_RE.match(f) for f in files):
        return True
    try:
        inside = os.listdir(root / OUTPUT_DIR)
    except OSError:
        return False
    return any(_DB_RE.match(n) or n in _DELIVERABLES for n in inside)


def json_kind(path: Path) -> str | None:
    """What a .json / .json.gz file is, from its first bytes: "kineto" (an object with traceEvents),
    "ascend_trace" (torch_npu's trace_view.json: an array of events with Ascend process names), or None."""
    try:
        head = read_head(path, 1 << 16)
    except ProfileError:
        return "kineto" if path.name.endswith(".gz") else None   # a damaged trace: the reader says how
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"{"):
        return "kineto" if b'"traceEvents"' in head or b'"schemaVersion"' in head or not head.strip(b"{ \n") \
            else None
    if text.startswith(b"["):
        # torch_npu writes ts as a string of µs ("1704161511420306.491"); its tracks are named Ascend
        # Hardware, CANN, Overlap Analysis; AscendCL@ / torch_to_npu name its API calls and flows
        markers = (b"Ascend Hardware", b"CANN", b"Overlap Analysis", b"AscendCL@", b"torch_to_npu")
        return "ascend_trace" if any(m in head for m in markers) or _STRING_TS_RE.search(head) else None
    return "kineto" if not text else None   # an empty file: the reader reports it


def _refuse_unrelated_runs(root: Path, ascend: list[Path], legacy: list[Path], kineto: list[Path],
                           bare: list[Path]) -> None:
    """A folder holding several runs (different kinds of profile, the same rank in different folders, or
    copied-out deliverables that say nothing of their rank) is not one cluster: one line listing the runs,
    so the user passes one."""
    runs: dict[Path, str] = {}
    loose = [d for d in ascend if not (d / OUTPUT_DIR).is_dir() and _ascend_rank(d)[0] is None]
    for d in ascend:
        runs.setdefault(d if d in loose else d.parent, "Ascend")
    for t in bare:
        runs.setdefault(t.parent, "Ascend trace")
    for d in legacy:
        runs.setdefault(d, "MindSpore profiler")
    for f in kineto:
        runs.setdefault(f.parent, "Kineto")
    if len(runs) < 2:
        return
    ranks: dict[int, set[Path]] = {}
    for d in ascend:
        r, _, _ = _ascend_rank(d)
        if r is not None:
            ranks.setdefault(r, set()).add(d.parent)
    for d in legacy:
        for n in os.listdir(d):
            if m := _MS_LEGACY_RE.match(n):
                ranks.setdefault(int(m.group(1)), set()).add(d)
    clash = any(len(v) > 1 for v in ranks.values()) or len(loose) > 1
    if len(set(runs.values())) > 1 or clash:
        listed = "; ".join(f"{k.relative_to(root) if k != root else '.'} ({v})" for k, v in sorted(runs.items()))
        raise ProfileError(root, f"holds {len(runs)} separate runs, not one job: {listed[:600]}; pass one of them")


def _nothing_found(p: Path) -> str:
    names = set(os.listdir(p))
    if {"cluster_step_trace_time.csv", "cluster_communication.json"} & names:
        return ("msprof-analyze's cluster_analysis_output, not a profile: pass the folder holding the rank folders "
                "(*_ascend_pt) it was made from")
    if names and all((p / n).is_file() and (p / n).stat().st_size == 0 for n in names):
        return "every file here is empty (0 bytes): nothing to read"
    return ("no recognizable profile: no torch_npu / MindSpore rank folder (ASCEND_PROFILER_OUTPUT/, "
            "profiler_info_N.json), MindSpore profiler folder or Kineto trace (.json/.json.gz) found")


def _walk(top: Path):
    """os.walk limited to MAX_DEPTH levels, sorted for determinism, skipping unreadable dirs."""
    base_depth = len(top.parts)
    for root, dirs, files in os.walk(top, onerror=None, followlinks=False):
        r = Path(root)
        depth = len(r.parts) - base_depth
        dirs.sort()
        if depth >= MAX_DEPTH:
            dirs.clear()
        yield r, dirs, sorted(files), depth


def _ascend_rank(d: Path) -> tuple[int | None, str, str]:
    """(rank, how, format) of one *_ascend_pt/_ms dir."""
    framework = "ms" if d.name.endswith("_ascend_ms") else "pt"
    rank: int | None = None
    how = ""
    try:
        names = sorted(os.listdir(d))
    except OSError as e:
        raise ProfileError(d, f"cannot list directory ({e.strerror})") from None
    for n in names:
        if m := _INFO_RE.match(n):
            rank, how = int(m.group(1)), n
            break
    out = d / "ASCEND_PROFILER_OUTPUT"
    fmt = f"ascend_{framework}_text"
    if out.is_dir():
        for n in sorted(os.listdir(out)):
            if m := _DB_RE.match(n):
                fmt = f"ascend_{framework}_db"
                if rank is None and m.group(2) is not None:
                    rank, how = int(m.group(2)), n
    return rank, how, fmt


def _timestamp_of(d: Path) -> int:
    """The 17-digit timestamp msprof-analyze keys on: 3rd field from the end split on '_'."""
    parts = d.name.split("_")
    if len(parts) >= 3 and parts[-3].isdigit():
        return int(parts[-3])
    return int(d.stat().st_mtime_ns)


def _ascend(dirs: list[Path], root: Path) -> Discovery:
    warnings: list[str] = []
    by_rank: dict[int, RankSource] = {}
    unknown: list[RankSource] = []
    kinds = set()
    for d in sorted(dirs):
        rank, how, fmt = _ascend_rank(d)
        kinds.add(fmt.split("_")[1])
        src = RankSource(path=d, format=fmt, rank=rank, rank_how=how, extra={"timestamp": _timestamp_of(d)})
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


def _mindspore_legacy(dirs: list[Path], root: Path) -> Discovery:
    sources: list[RankSource] = []
    warnings: list[str] = []
    seen: set[int] = set()
    for d in sorted(dirs):
        for n in sorted(os.listdir(d)):
            if (m := _MS_LEGACY_RE.match(n)) and int(m.group(1)) not in seen:
                r = int(m.group(1))
                seen.add(r)
                sources.append(RankSource(path=d, format="mindspore_legacy", rank=r, rank_how=n))
    return Discovery(root, "mindspore_legacy", sorted(sources, key=lambda s: s.rank or 0), warnings)


def read_head(path: Path, n: int = _HEAD_BYTES) -> bytes:
    """The first n bytes of a trace, decompressed when gzip; raises ProfileError on a corrupt gzip."""
    try:
        with open(path, "rb") as f:
            magic = f.read(2)
            f.seek(0)
            if magic == b"\x1f\x8b":
                with gzip.GzipFile(fileobj=f) as g:
                    return g.read(n)
            return f.read(n)
    except (OSError, EOFError, zlib.error) as e:
        raise ProfileError(path, f"cannot read: corrupt or truncated gzip ({e})") from None


def kineto_rank(path: Path) -> tuple[int | None, str]:
    """Rank of a Kineto file: distributedInfo.rank in the head, else the file name."""
    head = read_head(path)
    if m := _DIST_RANK_RE.search(head):
        return int(m.group(1)), "distributedInfo.rank"
    if m := _FILE_RANK_RE.search(path.name):
        return int(m.group(1)), "file name"
    return None, ""


def _kineto(files: list[Path], root: Path) -> Discovery:
    warnings: list[str] = []
    by_rank: dict[int, RankSource] = {}
    unknown: list[RankSource] = []
    for f in files:
        rank, how = kineto_rank(f)
        src = RankSource(path=f, format="kineto", rank=rank, rank_how=how)
        if rank is None:
            unknown.append(src)
        elif rank in by_rank:
            warnings.append(f"rank {rank}: two traces ({by_rank[rank].path.name}, {f.name}); "
                            f"the second gets a placeholder rank")
            unknown.append(src)
        else:
            by_rank[rank] = src
    _assign_placeholders(by_rank, unknown, warnings, "no distributedInfo.rank and no rank in the file name")
    return Discovery(root, "kineto", [by_rank[r] for r in sorted(by_rank)], warnings)


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
