"""Find where the ranks of a hung job diverge: Flight Recorder entries matched across ranks per process group
and collective sequence id.

Algorithm, per process group (members from `pg_config`, else the ranks that recorded it):
  1. per rank, the collectives it issued (seq -> entry) and the highest seq issued;
  2. mismatch: the first seq recorded by every member (ring buffers may have dropped early entries) where
     the members disagree on the op or the input shapes; the minority is named;
  3. missing: the first seq some member never issued (its highest seq is below the others'); those are named;
  4. stuck: every member issued the last seq, and some completed it while others did not (NCCL records
     completion; Gloo does not, so a Gloo group is never called stuck);
the earliest of 2-3 (or 4) is the group's divergence. Groups are reported earliest first by the time the
divergent collective was created, since a hang in one group stalls the groups that follow it.
Ranks without a dump are listed as unknown, never counted as missing from a collective. Linear in entries.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from ..units import NS_PER_MS
from .frdump import DumpSet, Entry, RankDump
from .models import Divergence, RankPosition


@dataclass
class _Member:
    rank: int
    by_seq: dict[int, Entry]
    top: int | None
    last_completed: int | None


def _frames(e: Entry | None) -> list[str]:
    if e is None:
        return []
    return [f"{name} ({file.rsplit('/', 1)[-1]}:{line})" for name, file, line in e.frames]


def _members(ds: DumpSet, gid: str) -> tuple[list[int], list[_Member]]:
    named: list[int] | None = None
    for d in ds.dumps.values():
        g = d.groups.get(gid)
        if g is not None and g.ranks:
            named = g.ranks
            break
    members: list[_Member] = []
    ranks = named if named is not None else sorted(
        r for r, d in ds.dumps.items() if any(e.group == gid for e in d.entries))
    for r in ranks:
        d = ds.dumps.get(r)
        if d is None:
            continue
        by_seq = {e.seq: e for e in d.entries if e.group == gid and not e.is_p2p}
        done = d.last_completed.get(gid)
        if done is None:
            seqs = [s for s, e in by_seq.items() if e.state == "completed"]
            done = max(seqs) if seqs else None
        members.append(_Member(r, by_seq, max(by_seq) if by_seq else None, done))
    return ranks, members


def _position(m: _Member, seq: int) -> RankPosition:
    e = m.by_seq.get(seq)
    last = m.by_seq.get(m.top) if m.top is not None else None
    return RankPosition(rank=m.rank, last_issued_seq=m.top, last_issued_op=last.op if last else None,
                        last_completed_seq=m.last_completed, state=e.state if e else None,
                        stack=_frames(e or last))


def _mismatch(members: list[_Member]) -> tuple[int, list[_Member], str] | None:
    common = set.intersection(*(set(m.by_seq) for m in members)) if members else set()
    for seq in sorted(common):
        keys = {m.rank: (m.by_seq[seq].op, m.by_seq[seq].input_sizes) for m in members}
        counts = Counter(keys.values())
        if len(counts) > 1:
            major, _ = counts.most_common(1)[0]
            return seq, [m for m in members if keys[m.rank] != major], major[0]
    return None


def _divergence(gid: str, name: str, members: list[_Member], now_ns: int | None) -> Divergence | None:
    if not members:
        return None
    tops = [m.top if m.top is not None else 0 for m in members]
    found: tuple[str, int, list[_Member], str] | None = None
    if len(members) > 1 and (mm := _mismatch(members)) is not None:
        found = ("mismatch", mm[0], mm[1], mm[2])
    if min(tops) < max(tops):
        seq = min(tops) + 1
        if found is None or seq < found[1]:
            late = [m for m in members if (m.top or 0) < seq]
            op = next(m.by_seq[seq].op for m in members if seq in m.by_seq)
            found = ("missing", seq, late, op)
    if found is None:
        seq = max(tops)
        tracked = [m for m in members if m.last_completed is not None]   # Gloo records no completion
        done = [m for m in tracked if m.last_completed >= seq]
        if tracked and len(done) < len(members):
            stuck = [m for m in members if m not in done]
            found = ("stuck", seq, stuck, members[0].by_seq[seq].op if seq in members[0].by_seq else "?")
    if found is None:
        return None
    kind, seq, culprits, op = found
    bad = {m.rank for m in culprits}
    waiting = [m for m in members if m.rank not in bad and seq in m.by_seq]
    created = [m.by_seq[seq].created_ns for m in waiting if m.by_seq[seq].created_ns]
    waited = (now_ns - min(created)) / NS_PER_MS if created and now_ns else None
    return Divergence(group=gid, group_name=name, seq=seq, op=op, kind=kind, ranks=sorted(bad),
                      waiting_ranks=sorted(m.rank for m in waiting),
                      waited_ms=round(waited, 3) if waited is not None else None,
                      positions=[_position(m, seq) for m in culprits],
                      message=_message(kind, name, seq, op, culprits, len(waiting), waited))


def _message(kind: str, group: str, seq: int, op: str, culprits: list[_Member], waiting: int,
             waited_ms: float | None) -> str:
    ranks = ", ".join(str(m.rank) for m in culprits)
    wait = f" for at least {waited_ms / 1000:.1f} s" if waited_ms and waited_ms >= 100 else ""
    if kind == "missing":
        last = "; ".join(f"rank {m.rank} last issued seq {m.top}" for m in culprits[:4])
        return (f"{group} collective #{seq} ({op}): rank(s) {ranks} never issued it while {waiting} rank(s) "
                f"wait in it{wait} ({last}).")
    if kind == "mismatch":
        theirs = "; ".join(f"rank {m.rank} issued {m.by_seq[seq].op} {m.by_seq[seq].input_sizes}"
                           for m in culprits[:4])
        return f"{group} collective #{seq}: the others issued {op}, but {theirs}."
    done = "; ".join(f"rank {m.rank} last completed #{m.last_completed}" for m in culprits[:4])
    return f"{group} collective #{seq} ({op}): rank(s) {ranks} issued it and never completed it ({done})."


def _group_names(dumps: dict[int, RankDump]) -> dict[str, str]:
    names: dict[str, str] = {}
    for d in dumps.values():
        for gid, g in d.groups.items():
            names.setdefault(gid, g.name)
    return names


def find_divergences(ds: DumpSet) -> tuple[list[Divergence], list[int]]:
    """(divergences earliest first, ranks named by a group that have no dump)."""
    names = _group_names(ds.dumps)
    times = [t for d in ds.dumps.values() for e in d.entries for t in (e.created_ns, e.completed_ns) if t]
    now_ns = max(times) if times else None
    out: list[tuple[int, Divergence]] = []
    no_dump: set[int] = set()
    for gid in sorted(names):
        ranks, members = _members(ds, gid)
        no_dump.update(r for r in ranks if r not in ds.dumps)
        div = _divergence(gid, names[gid], members, now_ns)
        if div is not None:
            first = [m.by_seq[div.seq].created_ns for m in members if div.seq in m.by_seq]
            out.append((min((t for t in first if t), default=0), div))
    out.sort(key=lambda x: x[0])
    return [d for _, d in out], sorted(no_dump)
