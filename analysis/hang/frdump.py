"""Read PyTorch Flight Recorder dumps (NCCL and Gloo process groups; torch_npu's HCCL recorder writes the same
keys, version "2.4" with `hccl_comm_state`, to TORCH_HCCL_DEBUG_INFO_TEMP_FILE<rank>) into plain records, one
per rank.

A dump is the pickle (or JSON, from `_dump_fr_trace_json`) of a dict with `version`, `pg_config`, `pg_status`
and `entries`. Files are named `<prefix><rank>`: the prefix is TORCH_FR_DUMP_TEMP_FILE or, before torch 2.8,
TORCH_NCCL_DEBUG_INFO_TEMP_FILE (default `/tmp/nccl_trace_rank_`), so the rank is the trailing integer.

The pickle is untrusted input: it is read by an unpickler that builds only dicts, lists, tuples, sets and
scalars and refuses every global, so a crafted dump cannot run code.

Version differences handled here (all read as the same record):
  * the collective sequence number is `collective_seq_id` (>= 2.3) or `seq_id` (older);
  * `process_group` is a (gid, name) pair, or absent (older: `pg_id` only);
  * `pg_config` maps a group id to {name, desc, ranks}, with `ranks` a list or its text ("[0, 1]"); older dumps
    map a name to {desc, ranks} or hold no config at all;
  * `state` is scheduled / started / completed; Gloo never leaves `scheduled` (completion is not recorded).
"""

from __future__ import annotations

import io
import json
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_RANK_RE = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)(?:\.json|\.pkl|\.pickle)?$")


class _SafeUnpickler(pickle.Unpickler):
    """Builds containers and scalars only: any class reference in the stream is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"refused global {module}.{name}")


@dataclass(frozen=True)
class Entry:
    """One recorded collective or p2p op of one rank. Times are ns since the epoch (None where not recorded)."""

    group: str            # process group id as written (`process_group[0]` / `pg_id`)
    group_name: str       # `process_group[1]` ("default_pg", a user's name), else the id
    seq: int              # collective_seq_id, or p2p_seq_id for p2p ops
    is_p2p: bool
    op: str               # profiling_name, e.g. "nccl:all_reduce"
    state: str            # scheduled | started | completed
    created_ns: int | None
    completed_ns: int | None
    input_sizes: str      # canonical text of the input shapes, for comparison across ranks
    frames: tuple[tuple[str, str, int], ...]   # (function, file, line), innermost first


@dataclass
class Group:
    gid: str
    name: str
    ranks: list[int] | None   # None where the dump does not say


@dataclass
class RankDump:
    rank: int
    path: Path
    version: str
    entries: list[Entry]
    groups: dict[str, Group]
    last_completed: dict[str, int] = field(default_factory=dict)   # group -> seq from pg_status


@dataclass
class DumpSet:
    """Every rank's dump found in a folder, and what could not be read (file, problem)."""

    dumps: dict[int, RankDump]
    unreadable: list[tuple[str, str]]


def _load(path: Path) -> dict[str, Any]:
    data = path.read_bytes()
    if not data:
        raise ValueError("empty file")
    doc = json.loads(data) if data.lstrip()[:1] == b"{" else _SafeUnpickler(io.BytesIO(data)).load()
    if not isinstance(doc, dict) or "entries" not in doc:
        raise ValueError("not a Flight Recorder dump (no 'entries')")
    return doc


def _ranks(v: Any) -> list[int] | None:
    if isinstance(v, str):
        v = [int(x) for x in re.findall(r"-?\d+", v)]
    if isinstance(v, (list, tuple)) and all(isinstance(x, int) for x in v):
        return [int(x) for x in v]
    return None


def _groups(doc: dict[str, Any]) -> dict[str, Group]:
    out: dict[str, Group] = {}
    cfg = doc.get("pg_config") or {}
    if isinstance(cfg, dict):
        for key, val in cfg.items():
            if isinstance(val, dict):
                out[str(key)] = Group(str(key), str(val.get("desc") or val.get("name") or key),
                                      _ranks(val.get("ranks")))
    return out


def _frames(raw: Any) -> tuple[tuple[str, str, int], ...]:
    if not isinstance(raw, list):
        return ()
    return tuple((str(f.get("name", "")), str(f.get("filename", "")), int(f.get("line") or 0))
                 for f in raw if isinstance(f, dict))


def _entry(e: dict[str, Any]) -> Entry | None:
    pg = e.get("process_group")
    group = str(pg[0]) if isinstance(pg, (list, tuple)) and pg else str(e.get("pg_id", "0"))
    name = str(pg[1]) if isinstance(pg, (list, tuple)) and len(pg) > 1 and pg[1] else group
    is_p2p = bool(e.get("is_p2p", False))
    seq = e.get("p2p_seq_id") if is_p2p else e.get("collective_seq_id", e.get("seq_id"))
    if not isinstance(seq, int):
        return None
    return Entry(group=group, group_name=name, seq=seq, is_p2p=is_p2p, op=str(e.get("profiling_name", "?")),
                 state=str(e.get("state", "scheduled")), created_ns=e.get("time_created_ns"),
                 completed_ns=e.get("time_discovered_completed_ns"),
                 input_sizes=repr(e.get("input_sizes")), frames=_frames(e.get("frames")))


def read_dump(path: Path, rank: int) -> RankDump:
    """One rank's dump. Raises ValueError / pickle.UnpicklingError / OSError on an unreadable file."""
    doc = _load(path)
    entries = [x for e in doc["entries"] if isinstance(e, dict) and (x := _entry(e)) is not None]
    groups = _groups(doc)
    for e in entries:   # a group with entries but no config (older dumps), or a config without a name
        g = groups.setdefault(e.group, Group(e.group, e.group_name, None))
        if g.name in ("", g.gid) and e.group_name != e.group:
            g.name = e.group_name
    last: dict[str, int] = {}
    status = doc.get("pg_status") or {}
    if isinstance(status, dict):
        for gid, st in status.items():
            if isinstance(st, dict) and isinstance(st.get("last_completed_collective"), int):
                last[str(gid)] = st["last_completed_collective"]
    return RankDump(rank, path, str(doc.get("version", "?")), entries, groups, last)


def dump_files(folder: Path) -> list[dict[int, Path]]:
    """The candidate dump sets in `folder`: rank -> file for each file-name prefix followed by an integer
    (the rank). JSON stack snapshots are not candidates."""
    by_prefix: dict[str, dict[int, Path]] = {}
    for p in sorted(folder.iterdir()):
        # the prefix may be empty: torch_npu's TORCH_HCCL_DEBUG_INFO_TEMP_FILE=/tmp/ writes /tmp/<rank>
        if (m := _RANK_RE.match(p.name)) and p.is_file() and _looks_like_dump(p):
            by_prefix.setdefault(m.group("prefix"), {})[int(m.group("rank"))] = p
    return list(by_prefix.values())


def _looks_like_dump(path: Path) -> bool:
    """A pickle (protocol 2+ starts with 0x80; an empty file is a dump that failed to write) or a JSON object
    naming the dump's keys near its start; anything else (traces, logs) is not read."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return False
    if not head or head[:1] == b"\x80":
        return True
    return head.lstrip()[:1] == b"{" and (b'"entries"' in head or b'"pg_config"' in head)


def read_dumps(files: dict[int, Path]) -> DumpSet:
    dumps: dict[int, RankDump] = {}
    bad: list[tuple[str, str]] = []
    for rank, path in files.items():
        try:
            dumps[rank] = read_dump(path, rank)
        except Exception as e:  # arbitrary bytes make the unpickler raise anything
            bad.append((str(path), f"{type(e).__name__}: {e}"[:200]))
    return DumpSet(dumps, bad)
