"""What a file or folder is, by its content: the recognisers and rank readers behind `discover()`.

Each recogniser looks at names inside a folder and at a file's first bytes (JSON head, SQLite header), never at
the folder's own name alone, so a rank folder copied under any name is still found.
"""

from __future__ import annotations

import json
import os
import re
import zlib
from pathlib import Path

from ...errors import ProfileError
from ...files import Unreadable, open_regular, read_bytes
from ..formats import KINETO, ascend_export, export_kind

OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
MSPROF_OUTPUT_DIR = "mindstudio_profiler_output"
MAX_DEPTH = 6
_ASCEND_SUFFIXES = ("_ascend_pt", "_ascend_ms")
INFO_RE = re.compile(r"^profiler_info_(\d+)\.json$")
DB_RE = re.compile(r"^ascend_(pytorch|mindspore)_profiler(?:_(\d+))?\.db$")
MS_LEGACY_RE = re.compile(r"^step_trace_raw_(\d+)_detail_time\.csv$")
KINETO_NAME_RE = re.compile(r"\.(json|json\.gz)$")
_DIST_RANK_RE = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)', re.S)
_FILE_RANK_RE = re.compile(r"rank[-_]?(\d+)", re.I)
_DIST_WORLD_RE = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"world_size"\s*:\s*(\d+)', re.S)
MSPROF_DB_RE = re.compile(r"^msprof_[\w.-]*\.db$")
_SQLITE_MAGIC = b"SQLite format 3\x00"
_HEAD_BYTES = 1 << 20
_STRING_TS_RE = re.compile(rb'"ts"\s*:\s*"\d')


# Files a torch_npu rank folder's ASCEND_PROFILER_OUTPUT/ (or a bare deliverables folder) holds.
_DELIVERABLES = ("trace_view.json", "kernel_details.csv", "step_trace_time.csv", "communication.json")


def walk(top: Path):
    """os.walk limited to MAX_DEPTH levels, sorted for determinism, skipping unreadable dirs."""
    base_depth = len(top.parts)
    for root, dirs, files in os.walk(top, onerror=None, followlinks=False):
        r = Path(root)
        depth = len(r.parts) - base_depth
        dirs.sort()
        if depth >= MAX_DEPTH:
            dirs.clear()
        yield r, dirs, sorted(files), depth


def listdir(d: Path) -> list[str]:
    try:
        return os.listdir(d)
    except OSError:
        return []


def is_ascend_rank(root: Path, dirs: list[str], files: list[str]) -> bool:
    """A torch_npu / MindSpore rank folder, whatever it is called: `*_ascend_pt` / `*_ascend_ms`, or a
    folder with ASCEND_PROFILER_OUTPUT/ beside profiler_info_N.json or holding a DB export or deliverables."""
    if root.name.endswith(_ASCEND_SUFFIXES):
        return True
    if OUTPUT_DIR not in dirs:
        # the deliverables copied out of a rank folder: kernel_details.csv / step_trace_time.csv beside
        # nothing that makes it another kind of folder
        return bool({"kernel_details.csv", "step_trace_time.csv"} & set(files)) and \
            "cluster_step_trace_time.csv" not in files
    if any(INFO_RE.match(f) for f in files):
        return True
    try:
        inside = os.listdir(root / OUTPUT_DIR)
    except OSError:
        return False
    return any(DB_RE.match(n) or n in _DELIVERABLES for n in inside) or sqlite_db(root / OUTPUT_DIR) is not None


def is_msprof_rank(root: Path, dirs: list[str], files: list[str]) -> bool:
    """A raw msprof collection (one process): `PROF_*` with device_*/ or host/ data, or any folder holding the
    exported mindstudio_profiler_output/."""
    if MSPROF_OUTPUT_DIR in dirs:
        return True
    return root.name.startswith("PROF_") and (
        any(d.startswith("device_") or d == "host" for d in dirs) or any(MSPROF_DB_RE.match(f) for f in files))


def sqlite_db(out: Path) -> Path | None:
    """A torch_npu / MindSpore DB export in OUTPUT_DIR that is recognised by its SQLite header, whatever its
    extension (copies renamed to .dat exist), when no `*.db` of the usual name is there."""
    try:
        names = sorted(os.listdir(out))
    except OSError:
        return None
    for n in names:
        if n.startswith(("ascend_pytorch_profiler", "ascend_mindspore_profiler")) and _is_sqlite(out / n):
            return out / n
    return None


def _is_sqlite(path: Path) -> bool:
    try:
        with open_regular(path) as f:
            return f.read(16) == _SQLITE_MAGIC
    except OSError:
        return False


def _json_int(path: Path, key: str) -> int | None:
    """A non-negative integer (or digit string) at the top level of a JSON object file; None otherwise."""
    try:
        obj = json.loads(read_bytes(path))
    except (OSError, ValueError):
        return None
    v = obj.get(key) if isinstance(obj, dict) else None
    if isinstance(v, str) and v.strip().isdigit():
        return int(v)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 0 else None


def ascend_rank(d: Path) -> tuple[int | None, str, str]:
    """(rank, how, format) of one *_ascend_pt/_ms dir."""
    framework = "mindspore" if d.name.endswith("_ascend_ms") else "pytorch"
    rank: int | None = None
    how = ""
    try:
        names = sorted(os.listdir(d))
    except OSError as e:
        raise ProfileError(d, f"cannot list directory ({e.strerror})") from None
    for n in names:
        if m := INFO_RE.match(n):
            rank, how = int(m.group(1)), n
            break
    if rank is None:   # profiler_info.json (single card) or profiler_metadata.json carry rank_id, maybe a string
        for n in [n for n in names if n.startswith("profiler_info") and n.endswith(".json")] + \
                 ["profiler_metadata.json"]:
            if n in names and (r := _json_int(d / n, "rank_id")) is not None:
                rank, how = r, f"{n} rank_id"
                break
    out = d / "ASCEND_PROFILER_OUTPUT"
    fmt = ascend_export(framework, "text")
    if out.is_dir():
        listed = sorted(os.listdir(out))
        text_beside = any(n in _DELIVERABLES for n in listed)
        for n in listed:
            if m := DB_RE.match(n):
                # a DB named like an export that is no SQLite file, beside a text export: the text is read
                # (the reader of the text export names the DB it left out); alone, the DB reader says why
                if text_beside and not _is_sqlite(out / n):
                    continue
                fmt = ascend_export(framework, "db")
                if rank is None and m.group(2) is not None:
                    rank, how = int(m.group(2)), n
        if export_kind(fmt) == "text" and (db := sqlite_db(out)) is not None:
            fmt = ascend_export("mindspore" if db.name.startswith("ascend_mindspore") else "pytorch", "db")
    return rank, how, fmt


def msprof_rank(p: Path) -> tuple[int | None, str]:
    """rank_id of an msprof collection from device_*/info.json.* (−1 or absent: unknown). The device id in the
    folder name is not the rank."""
    if p.is_dir():
        for info in sorted(p.glob("device_*/info.json.*")) + sorted(p.glob("*/device_*/info.json.*")):
            if info.name.endswith(".done"):
                continue
            if (r := _json_int(info, "rank_id")) is not None:
                return r, f"{info.parent.name}/{info.name}"
    return None, ""


def timestamp_of(d: Path) -> int:
    """The 17-digit timestamp msprof-analyze keys on: 3rd field from the end split on '_'."""
    parts = d.name.split("_")
    if len(parts) >= 3 and parts[-3].isdigit():
        return int(parts[-3])
    return int(d.stat().st_mtime_ns)


# A PyTorch execution trace holds the operator graph, not a timeline: it is recorded beside a Kineto trace.
EXECUTION_TRACE = ("a PyTorch execution trace (ExecutionTraceObserver: schema and nodes, the operator graph "
                   "without a timeline), not a profile: pass the Kineto trace recorded with it (torch.profiler, "
                   "e.g. tensorboard_trace_handler's *.pt.trace.json)")


def json_kind(path: Path) -> str | None:
    """What a .json / .json.gz file is, from its first bytes: "kineto" (an object with traceEvents),
    "ascend_trace" (torch_npu's trace_view.json: an array of events with Ascend process names),
    "execution_trace" (PyTorch's ExecutionTraceObserver graph: an object with schema and nodes, no timeline),
    or None."""
    try:
        head = read_head(path, 1 << 16)
    except ProfileError:
        return KINETO if path.name.endswith(".gz") else None   # a damaged trace: the reader says how
    except OSError:
        return KINETO   # unreadable (outside the roots once opened, no permission): the reader says so
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if text.startswith(b"{"):
        if b'"traceEvents"' in head or b'"schemaVersion"' in head or not head.strip(b"{ \n"):
            return KINETO
        return "execution_trace" if b'"nodes"' in head and b'"schema"' in head else None
    if text.startswith(b"["):
        # torch_npu writes ts as a string of µs ("1704161511420306.491"); its tracks are named Ascend
        # Hardware, CANN, Overlap Analysis; AscendCL@ / torch_to_npu name its API calls and flows
        markers = (b"Ascend Hardware", b"CANN", b"Overlap Analysis", b"AscendCL@", b"torch_to_npu")
        return "ascend_trace" if any(m in head for m in markers) or _STRING_TS_RE.search(head) else None
    return KINETO if not text else None   # an empty file: the reader reports it


def read_head(path: Path, n: int = _HEAD_BYTES) -> bytes:
    """The first n bytes of a trace, decompressed when gzip. A gzip cut short or damaged after its start gives
    what it decompressed up to there (the rank and format are near the top; the reader says what was lost);
    raises ProfileError only when not one byte decompresses, files.Unreadable when it is not to be read."""
    try:
        with open_regular(path) as f:
            magic = f.read(2)
            f.seek(0)
            if magic != b"\x1f\x8b":
                return f.read(n)
            d = zlib.decompressobj(wbits=31)
            out = bytearray()
            try:
                while len(out) < n:
                    chunk = f.read(1 << 16)
                    if not chunk:
                        break
                    out += d.decompress(chunk, n - len(out))
                    while d.unconsumed_tail and len(out) < n:
                        out += d.decompress(d.unconsumed_tail, n - len(out))
            except zlib.error as e:
                if not out:
                    raise ProfileError(path, f"cannot read: corrupt or truncated gzip ({e})") from None
            if not out and not d.eof:
                raise ProfileError(path, "cannot read: corrupt or truncated gzip (no data before its end)")
            return bytes(out[:n])
    except Unreadable:
        raise   # not a regular file, outside the roots: callers tell it from damage
    except OSError as e:
        raise ProfileError(path, f"cannot read: {e}") from None


def kineto_world_size(path: Path) -> int | None:
    """distributedInfo.world_size in a Kineto file's head, or None."""
    try:
        head = read_head(path)
    except (ProfileError, OSError):
        return None
    m = _DIST_WORLD_RE.search(head)
    return int(m.group(1)) if m else None


def kineto_rank(path: Path) -> tuple[int | None, str]:
    """Rank of a Kineto file: distributedInfo.rank in the head, else the file name (a file whose head cannot be
    read at all is still its rank's: the reader reports the damage, and the other ranks go on)."""
    try:
        head = read_head(path)
    except (ProfileError, OSError):
        head = b""
    if m := _DIST_RANK_RE.search(head):
        return int(m.group(1)), "distributedInfo.rank"
    if m := _FILE_RANK_RE.search(path.name):
        return int(m.group(1)), "file name"
    return None, ""
