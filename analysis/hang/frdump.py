"""Read PyTorch Flight Recorder dumps (NCCL and Gloo process groups; torch_npu's HCCL recorder writes the same
keys, version "2.4" with `hccl_comm_state`, to TORCH_HCCL_DEBUG_INFO_TEMP_FILE<rank>) into plain records, one
per rank.

A dump is the pickle (or JSON, from `_dump_fr_trace_json`) of a dict with `version`, `pg_config`, `pg_status`
and `entries`. Files are named `<prefix><rank>`: the prefix is TORCH_FR_DUMP_TEMP_FILE or, before torch 2.8,
TORCH_NCCL_DEBUG_INFO_TEMP_FILE (default `/tmp/nccl_trace_rank_`), so the rank is the trailing integer.

The pickle is untrusted input: it is read by an unpickler that builds only dicts, lists, tuples, sets and
scalars and refuses every global, so a crafted dump cannot run code.

Identity of a process group: its name (`process_group[0]` of an entry, the key of `pg_config`), which torch
makes the same on every member; `pg_id` of an entry and the keys of `pg_status` are the rank's own local
index (ProcessGroup uid), different across ranks, and are mapped to the name through the entries' (`pg_id`,
`process_group`) pairs before use. Descriptions (`process_group[1]`, `desc`) are labels shared by many groups.

Version differences handled here (all read as the same record):
  * the collective sequence number is `collective_seq_id` (>= 2.3) or `seq_id` (older);
  * `process_group` is a (name, desc) pair, or absent (older: `pg_id` only, then the group is that id);
  * `pg_config` maps a group name to {name, desc, ranks}, with `ranks` a list or its text ("[0, 1]"); older
    dumps map a name to {desc, ranks} or hold no config at all; Gloo's generic recorder writes one entry keyed
    '' that says nothing reliable (ranks '[]' on some ranks), which is not used;
  * `state` is scheduled / started / completed; Gloo never leaves `scheduled`, but sets `retired` when the
    work finished, and `pg_status` (local index -> last enqueued / started / completed seq) is kept by both.
"""

from __future__ import annotations

import functools
import io
import json
import pickle
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..files import open_regular, read_bytes

_RANK_RE = re.compile(r"^(?P<prefix>.*?)(?P<rank>\d+)(?:\.json|\.pkl|\.pickle)?$")
_P2P_RE = re.compile(r":(?P<kind>send|recv)\s+(?P<a>-?\d+)\s*(?:->|<-)\s*(?P<b>-?\d+)")


class DumpError(ValueError):
    """A file that is not a readable dump; the message says what is wrong in words, for a warning."""


class _SafeUnpickler(pickle.Unpickler):
    """Builds containers and scalars only: any class reference in the stream is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise DumpError(f"the pickle refers to code ({module}.{name}); refused, not run")


@dataclass(frozen=True)
class Entry:
    """One recorded collective or p2p op of one rank. Times are ns since the epoch (None where not recorded)."""

    record: int           # record_id: the rank's program order across all its groups
    group: str            # process group name (`process_group[0]`; `pg_id` in dumps without it)
    desc: str             # `process_group[1]` ("default_pg", "TENSOR_MODEL_PARALLEL_GROUP", ...), else ""
    local: str | None     # the rank's own index of the group (`pg_id`), the key of its `pg_status`
    seq: int              # collective_seq_id, or p2p_seq_id for p2p ops
    is_p2p: bool
    op: str               # profiling_name, e.g. "nccl:all_reduce", "nccl:send 0->1"
    state: str            # scheduled | started | completed
    retired: bool | None  # the recorder let go of the work (finished, or failed); None where not written
    created_ns: int | None
    completed_ns: int | None
    input_sizes: str      # canonical text of the input shapes, for comparison across ranks
    frames: tuple[tuple[str, str, int], ...]   # (function, file, line), innermost first
    peer_local: int | None = None   # p2p: the other side, as a rank of the group (profiling_name "send a->b")

    @property
    def signature(self) -> tuple[str, str]:
        return self.op, self.input_sizes


@dataclass
class GroupConfig:
    name: str
    desc: str
    ranks: list[int] | None   # None where the dump does not say


@dataclass
class Status:
    enqueued: int | None
    started: int | None
    completed: int | None


@dataclass
class RankDump:
    rank: int
    path: Path
    version: str
    entries: list[Entry]                       # in record_id order
    configs: dict[str, GroupConfig]            # group name -> what this rank's pg_config says
    status: dict[str, Status] = field(default_factory=dict)   # group name -> pg_status (mapped from local)
    notes: list[str] = field(default_factory=list)             # what in this file could not be used


@dataclass
class DumpSet:
    """Every rank's dump found, and what could not be read (file, problem in words)."""

    dumps: dict[int, RankDump]
    unreadable: list[tuple[str, str]]


def _load(path: Path) -> dict[str, Any]:
    data = read_bytes(path)
    if not data:
        raise DumpError("empty file (the dump was never written, or was cut at 0 bytes)")
    try:
        doc = json.loads(data) if data.lstrip()[:1] == b"{" else _SafeUnpickler(io.BytesIO(data)).load()
    except DumpError:
        raise
    except RecursionError:
        raise DumpError("nested too deeply to be a Flight Recorder dump") from None
    except (EOFError, pickle.UnpicklingError, ValueError, IndexError, KeyError, TypeError,
            AttributeError, MemoryError, OverflowError, UnicodeDecodeError) as e:
        kind = "JSON" if data.lstrip()[:1] == b"{" else "pickle"
        cut = " (cut short?)" if isinstance(e, EOFError) or "truncated" in str(e) else ""
        raise DumpError(f"not a readable {kind} dump{cut}") from None
    if _expands_past(doc, 4 * len(data) + 100_000):
        raise DumpError("its values expand past what the file holds (one list shared at many places, a "
                        "'billion laughs' pickle): not read")
    if not isinstance(doc, dict) or "entries" not in doc:
        raise DumpError("not a Flight Recorder dump (no 'entries')")
    if not isinstance(doc["entries"], list):
        raise DumpError(f"'entries' is a {type(doc['entries']).__name__}, not a list")
    return doc


def _expands_past(doc: Any, budget: int) -> bool:
    """Whether `doc` read as a tree (every shared object counted at each place it appears, as the code after
    this reads it) has more than `budget` values. A pickle shares objects by reference, so 40 levels of
    `a = [a, a]` take a few hundred bytes and 2**40 values; a real dump's tree is about its size in bytes.
    Iterative: depth costs no stack."""
    todo, seen = [doc], 0
    while todo:
        v = todo.pop()
        seen += 1
        if seen > budget:
            return True
        if isinstance(v, dict):
            todo.extend(v.keys())
            todo.extend(v.values())
        elif isinstance(v, list | tuple | set | frozenset):
            todo.extend(v)
    return False


def _int(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"-?\d+", v.strip()):
        return int(v)
    return None


@functools.lru_cache(maxsize=4096)
def _ranks_text(v: str) -> tuple[int, ...]:
    """Every member of a group writes the same text: parsed once (a 1,024-rank default group per dump)."""
    return tuple(int(x) for x in re.findall(r"-?\d+", v))


def _ranks(v: Any) -> list[int] | None:
    if isinstance(v, str):
        return list(_ranks_text(v)) or None
    if isinstance(v, (list, tuple)) and v and all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        return [int(x) for x in v]
    return None


def _configs(doc: dict[str, Any]) -> dict[str, GroupConfig]:
    out: dict[str, GroupConfig] = {}
    cfg = doc.get("pg_config") or {}
    if isinstance(cfg, dict):
        for key, val in cfg.items():
            if isinstance(val, dict) and str(key) != "":
                out[str(key)] = GroupConfig(str(key), str(val.get("desc") or ""), _ranks(val.get("ranks")))
    return out


def _frames(raw: Any) -> tuple[tuple[str, str, int], ...]:
    if not isinstance(raw, list):
        return ()
    return tuple((str(f.get("name", "")), str(f.get("filename", "")), _int(f.get("line")) or 0)
                 for f in raw if isinstance(f, dict))


def _entry(e: dict[str, Any], i: int) -> Entry | None:
    pg = e.get("process_group")
    local = str(e["pg_id"]) if _int(e.get("pg_id")) is not None else None
    group = str(pg[0]) if isinstance(pg, (list, tuple)) and pg and pg[0] is not None else (local or "0")
    desc = str(pg[1]) if isinstance(pg, (list, tuple)) and len(pg) > 1 and pg[1] else ""
    is_p2p = bool(e.get("is_p2p", False))
    seq = _int(e.get("p2p_seq_id") if is_p2p else e.get("collective_seq_id", e.get("seq_id")))
    if seq is None:
        return None
    op = str(e.get("profiling_name", "?"))
    peer = None
    if is_p2p and (m := _P2P_RE.search(op)):
        peer = int(m.group("b"))   # "send me->peer", "recv me<-peer"
    retired = e.get("retired")
    return Entry(record=_int(e.get("record_id")) if _int(e.get("record_id")) is not None else i,
                 group=group, desc=desc, local=local, seq=seq, is_p2p=is_p2p, op=op,
                 state=str(e.get("state", "scheduled")), retired=retired if isinstance(retired, bool) else None,
                 created_ns=_int(e.get("time_created_ns")), completed_ns=_int(e.get("time_discovered_completed_ns")),
                 input_sizes=repr(e.get("input_sizes")), frames=_frames(e.get("frames")), peer_local=peer)


def _status(doc: dict[str, Any], entries: list[Entry], notes: list[str]) -> dict[str, Status]:
    """pg_status keyed by group name: each local key is mapped through the entries that carry both."""
    raw = doc.get("pg_status") or {}
    if not isinstance(raw, dict):
        return {}
    local_to_name: dict[str, str] = {}
    for e in entries:
        if e.local is not None:
            local_to_name.setdefault(e.local, e.group)
    out: dict[str, Status] = {}
    unmapped = 0
    for key, st in raw.items():
        if not isinstance(st, dict):
            continue
        name = local_to_name.get(str(key))
        s = Status(_int(st.get("last_enqueued_collective")), _int(st.get("last_started_collective")),
                   _int(st.get("last_completed_collective")))
        if name is None:
            # a group this rank recorded nothing in: its status says where it is only if it issued nothing
            unmapped += s.enqueued is not None and s.enqueued > 0
            continue
        out[name] = s
    if unmapped:
        notes.append(f"{unmapped} pg_status entr{'y' if unmapped == 1 else 'ies'} name a local group index "
                     "with no recorded collective (ring buffer dropped them?): not used")
    return out


def read_dump(path: Path, rank: int) -> RankDump:
    """One rank's dump. Raises DumpError (the problem in words) or OSError on an unreadable file."""
    doc = _load(path)
    entries: list[Entry] = []
    bad = 0
    for i, e in enumerate(doc["entries"]):
        x = _entry(e, i) if isinstance(e, dict) else None
        if x is None:
            bad += 1
        else:
            entries.append(x)
    entries.sort(key=lambda e: e.record)
    notes = [f"{bad} of {len(doc['entries'])} entries have no sequence id or are not records: skipped"] if bad \
        else []
    status = _status(doc, entries, notes)
    return RankDump(rank, path, str(doc.get("version", "?")), entries, _configs(doc), status, notes)


def rank_of_file(name: str) -> int | None:
    """The rank a dump file's name ends with (`<prefix><rank>`, optionally .json / .pkl / .pickle)."""
    m = _RANK_RE.match(name)
    return int(m.group("rank")) if m else None


def dump_files(folder: Path) -> dict[str, dict[int, Path]]:
    """The candidate dumps in `folder`: file-name prefix -> {rank: file} (the rank is the trailing integer).
    JSON stack snapshots are not candidates; only regular files are opened."""
    by_prefix: dict[str, dict[int, Path]] = {}
    for p in sorted(folder.iterdir()):
        # the prefix may be empty: torch_npu's TORCH_HCCL_DEBUG_INFO_TEMP_FILE=/tmp/ writes /tmp/<rank>
        if (m := _RANK_RE.match(p.name)) and p.is_file() and not p.is_symlink() and _looks_like_dump(p):
            by_prefix.setdefault(m.group("prefix"), {})[int(m.group("rank"))] = p
    return by_prefix


def _looks_like_dump(path: Path) -> bool:
    """A pickle (protocol 2+ starts with 0x80; an empty file is a dump that failed to write) or a JSON object
    naming the dump's keys near its start; anything else (traces, logs) is not read."""
    try:
        with open_regular(path) as f:
            head = f.read(1 << 16)
    except OSError:
        return False
    if not head or head[:1] == b"\x80":
        return True
    return head.lstrip()[:1] == b"{" and (b'"entries"' in head or b'"pg_config"' in head)


def read_dumps(files: dict[int, Path]) -> DumpSet:
    dumps: dict[int, RankDump] = {}
    bad: list[tuple[str, str]] = []
    for rank, path in sorted(files.items()):
        try:
            dumps[rank] = read_dump(path, rank)
        except DumpError as e:
            bad.append((str(path), str(e)))
        except OSError as e:
            bad.append((str(path), f"cannot be read ({e.strerror or 'I/O error'})"))
        except Exception:  # arbitrary bytes: the file is lost, never the others
            bad.append((str(path), "not a readable Flight Recorder dump"))
    return DumpSet(dumps, bad)
