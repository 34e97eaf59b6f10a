"""Find the first cause of a hang from every rank's Flight Recorder dump: a wait-for graph across all process
groups.

Each rank's entries are its program order across groups (record_id). Per rank:
  * an entry is complete when its state is `completed` (NCCL), else when its group's `pg_status` (mapped from
    the rank's local index to the group's name) says its seq completed, else when the recorder retired it
    (Gloo); otherwise it is pending, or unknown where none of these is written;
  * the rank is blocked at its first pending collective in program order (at its last entry where completion
    is unknown), and free when every entry completed: then it is running, or stuck outside any collective.
Per blocked instance (group, seq) the members are classified: issued it (the same op and shapes, or another:
a mismatch), never issued it (their last seq in the group is lower), or unknown (no dump). A member that never
issued it and is free is a first cause (it is stuck elsewhere); one that is itself blocked is followed to the
instance it waits in. Causes are: `missing` (free ranks others wait for), `mismatch` (the minority of the
members that issued another op or other shapes; no minority on a tie), `stuck` (every member issued it and
some never completed it: NCCL records completion), `unknown` (every member with a dump issued it and waits; the
ranks without a dump are where the cause may be), `deadlock` (ranks that wait for each other with no cause
among them). Every other blocked instance is a consequence of the causes it leads to, and its ranks are
victims, never culprits. Linear in entries plus the blocked instances.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from ..units import NS_PER_MS
from .frdump import DumpSet, Entry, RankDump
from .groups import PGroup, build_groups
from .models import Consequence, Divergence, RankPosition

Inst = tuple[str, int]   # (group key, collective seq)


@dataclass
class _Rank:
    rank: int
    by_inst: dict[Inst, list[Entry]]            # coalesced ops share one seq
    top: dict[str, int]                          # group -> highest seq issued (entries, or pg_status)
    done: dict[str, int | None]                  # group -> highest seq completed (None: not recorded)
    blocked: Inst | None = None
    order: list[Inst] = field(default_factory=list)


def _complete(e: Entry, d: RankDump, tracks: bool) -> bool | None:
    """Finished on this rank: completed (NCCL), retired (the recorder let it go: Gloo's only sign; a Gloo
    `pg_status` can lag one collective behind a retired entry), or counted completed by `pg_status`."""
    if e.state == "completed" or e.retired is True:
        return True
    st = d.status.get(e.group)
    if st is not None and st.completed is not None and not e.is_p2p:
        return e.seq <= st.completed
    if tracks:
        return False
    return e.retired


def _most(a: int | None, b: int) -> int:
    return b if a is None else max(a, b)


P2P = "|p2p|"   # in an instance key: (group key + P2P + "src->dst", k), the k-th op between the two ranks


def _p2p_key(d: RankDump, e: Entry, key: str, groups: dict[str, PGroup], count: dict[str, int]) -> Inst | None:
    """The k-th send src->dst of a group is the k-th recv at dst from src: one instance of both. The peer in
    profiling_name is the group's rank: the group's sorted members map it to the global rank."""
    if e.peer_local is None:
        return None
    members = sorted(groups[key].ranks) if key in groups else []
    peer = members[e.peer_local] if 0 <= e.peer_local < len(members) else e.peer_local
    src, dst = (d.rank, peer) if ":send" in e.op else (peer, d.rank)
    pair = f"{key}{P2P}{src}->{dst}"
    count[pair] = count.get(pair, 0) + 1
    return pair, count[pair]


def _rank_state(d: RankDump, keyof: dict[tuple[int, str], str], groups: dict[str, PGroup]) -> _Rank:
    tracks = any(e.state in ("started", "completed") for e in d.entries)
    pairs: dict[str, int] = {}
    by_inst: dict[Inst, list[Entry]] = defaultdict(list)
    top: dict[str, int] = {}
    done: dict[str, int | None] = {}
    order: list[Inst] = []
    blocked: Inst | None = None
    unknown_last: Inst | None = None
    for e in d.entries:
        key = keyof[(d.rank, e.group)]
        if e.is_p2p:
            got = _p2p_key(d, e, key, groups, pairs)
            if got is None:
                continue
            inst = got
            key = got[0]
        else:
            inst = (key, e.seq)
        seq = inst[1]
        if inst not in by_inst:
            order.append(inst)
        by_inst[inst].append(e)
        top[key] = max(top.get(key, seq), seq)
        c = _complete(e, d, tracks)
        if c:
            done[key] = _most(done.get(key), seq)
        elif c is None:
            unknown_last = inst
            done.setdefault(key, None)
        elif blocked is None:
            blocked = inst
    for name, st in d.status.items():
        key = keyof.get((d.rank, name), name)
        if st.enqueued is not None and st.enqueued > top.get(key, 0):
            top[key] = st.enqueued
        if st.completed is not None:   # -1: tracked, nothing completed yet
            done[key] = _most(done.get(key), st.completed)
    if blocked is None and unknown_last is not None and order and order[-1] == unknown_last:
        blocked = unknown_last   # nothing says it completed, and it is the rank's last collective
    return _Rank(d.rank, by_inst, top, done, blocked, order)


@dataclass
class _Cause:
    kind: str
    inst: Inst
    ranks: list[int]
    unknown: list[int] = field(default_factory=list)
    sides: dict[tuple[str, str], list[int]] = field(default_factory=dict)


class _Analysis:
    def __init__(self, ds: DumpSet, world: set[int]):
        self.ds = ds
        self.groups, keyof = build_groups(ds, world)
        self.ranks = {r: _rank_state(d, keyof, self.groups) for r, d in ds.dumps.items()}
        for st in self.ranks.values():   # each send/recv pair is a group of its two ranks
            for key in st.top:
                if P2P in key and key not in self.groups:
                    base, pair = key.split(P2P)
                    src, dst = (int(x) for x in pair.split("->"))
                    g = self.groups.get(base)
                    self.groups[key] = PGroup(key, base, g.desc if g else "", sorted({src, dst}), True,
                                              f"{g.label if g else 'group ' + base} send {src}->{dst}")
        self.failed = self._failed_with_absent()
        self.pending: dict[Inst, list[int]] = defaultdict(list)
        for r in sorted(self.ranks):
            if (b := self.ranks[r].blocked) is not None:
                self.pending[b].append(r)
        self.causes: dict[Inst, list[_Cause]] = {}
        self.waits_on: dict[Inst, list[int]] = {}

    def _failed_with_absent(self) -> set[int]:
        """Free ranks whose last collective is one of a group with a member that left no dump, and that is
        still pending on another member: it did not complete, it failed (Gloo retires a collective that
        raised when a peer died). Such a rank is blocked there, a victim of the absent rank, not stuck."""
        failed = set()
        for r, st in self.ranks.items():
            if st.blocked is not None or not st.order:
                continue
            inst = st.order[-1]
            g = self.groups.get(inst[0])
            if g is None or all(m in self.ranks for m in g.ranks):
                continue
            if any(self.ranks[m].blocked == inst for m in g.ranks if m in self.ranks and m != r) or \
                    any(self.ranks[m].top.get(inst[0], 0) < inst[1] for m in g.ranks if m in self.ranks):
                st.blocked = inst
                failed.add(r)
        return failed

    def _sig(self, r: int, inst: Inst) -> tuple[str, str] | None:
        es = self.ranks[r].by_inst.get(inst)
        if not es:
            return None
        if P2P in inst[0]:   # a send and its recv differ in name by design: their shapes must agree
            return "send/recv", " + ".join(e.input_sizes for e in es)
        return " + ".join(e.op for e in es), " + ".join(e.input_sizes for e in es)

    def classify(self, inst: Inst) -> None:
        key, seq = inst
        g = self.groups.get(key)
        members = g.ranks if g else self.pending[inst]
        issued, never, no_dump = [], [], []
        for m in members:
            if m not in self.ranks:
                no_dump.append(m)
            elif self.ranks[m].top.get(key, 0) >= seq:
                issued.append(m)
            else:
                never.append(m)
        causes: list[_Cause] = []
        sigs = {m: s for m in issued if (s := self._sig(m, inst)) is not None}
        counts = Counter(sigs.values())
        if len(counts) > 1:
            (major, n1), (_, n2) = counts.most_common(2)
            sides = {s: sorted(m for m in sigs if sigs[m] == s) for s in counts}
            odd = sorted(m for m in sigs if sigs[m] != major) if n1 > n2 else []
            causes.append(_Cause("mismatch", inst, odd, sides=sides))
        free = [m for m in never if self.ranks[m].blocked is None]
        if free:
            causes.append(_Cause("missing", inst, free))
        self.waits_on[inst] = never
        if not causes and not never:
            tracked = [m for m in issued if self.ranks[m].done.get(key) is not None]
            finished = [m for m in tracked if (self.ranks[m].done.get(key) or -1) >= seq and m not in self.failed]
            if no_dump:
                causes.append(_Cause("unknown", inst, [], unknown=no_dump))
            elif tracked and finished:
                causes.append(_Cause("stuck", inst, sorted(set(issued) - set(finished))))
            elif tracked and len(tracked) == len(issued):
                # issued by every member, completed by none: the collective itself does not finish; with one
                # member that member is the one stuck, with more no rank is to blame over another
                causes.append(_Cause("stuck", inst, sorted(issued) if len(issued) == 1 else []))
        if causes:
            self.causes[inst] = causes

    def run(self) -> None:
        for inst in self.pending:
            self.classify(inst)


def _frames(e: Entry | None) -> list[str]:
    if e is None:
        return []
    return [f"{name} ({file.rsplit('/', 1)[-1]}:{line})" for name, file, line in e.frames]


def _leads_to(a: _Analysis) -> dict[Inst, set[Inst]]:
    """For every blocked instance, the cause instances it waits on, directly or through other blocked ranks."""
    memo: dict[Inst, set[Inst]] = {}
    on_stack: set[Inst] = set()

    def visit(inst: Inst) -> set[Inst]:
        if inst in memo:
            return memo[inst]
        if inst in on_stack:
            return set()
        on_stack.add(inst)
        out = {inst} if inst in a.causes else set()
        for m in a.waits_on.get(inst, []):
            b = a.ranks[m].blocked
            if b is not None and b != inst:
                out |= visit(b)
        on_stack.discard(inst)
        memo[inst] = out
        return out

    for inst in a.pending:
        visit(inst)
    return memo


def _deadlocks(a: _Analysis, leads: dict[Inst, set[Inst]]) -> None:
    """Blocked instances that lead to no cause wait in a cycle: one `deadlock` cause per cycle found."""
    seen: set[Inst] = set()
    for inst in sorted(a.pending):
        if leads.get(inst) or inst in seen:
            continue
        path: list[Inst] = []
        cur: Inst | None = inst
        while cur is not None and cur not in path and cur not in seen:
            path.append(cur)
            nxt = [a.ranks[m].blocked for m in a.waits_on.get(cur, []) if a.ranks[m].blocked is not None]
            cur = nxt[0] if nxt else None
        seen.update(path)
        if cur is not None and cur in path:
            cycle = path[path.index(cur):]
            ranks = sorted({r for i in cycle for r in a.pending[i]})
            a.causes[cycle[0]] = [_Cause("deadlock", cycle[0], ranks)]
            for i in path:
                leads[i] = {cycle[0]}


def _created(a: _Analysis, inst: Inst) -> int:
    ts = [e.created_ns for r in a.ranks.values() for e in r.by_inst.get(inst, []) if e.created_ns]
    return min(ts, default=0)


def _position(a: _Analysis, r: int, inst: Inst) -> RankPosition:
    st = a.ranks[r]
    key = inst[0]
    top = st.top.get(key)
    last = st.by_inst.get((key, top)) if top is not None else None
    here = st.by_inst.get(inst)
    last_any = st.by_inst.get(st.order[-1]) if st.order else None
    return RankPosition(rank=r, last_issued_seq=top, last_issued_op=last[0].op if last else None,
                        last_completed_seq=st.done.get(key), state=here[0].state if here else None,
                        stack=_frames((here or last or last_any or [None])[0]))


def _op(a: _Analysis, inst: Inst, c: _Cause) -> str:
    if c.sides:
        return max(c.sides.items(), key=lambda kv: len(kv[1]))[0][0]
    for r in a.ranks.values():
        if inst in r.by_inst:
            return " + ".join(e.op for e in r.by_inst[inst])
    return "?"


def _label(a: _Analysis, key: str) -> str:
    g = a.groups.get(key)
    return g.label if g else f"group {key}"


def _waited(a: _Analysis, inst: Inst, waiting: list[int], now_ns: int | None) -> float | None:
    created = [e.created_ns for r in waiting for e in a.ranks[r].by_inst.get(inst, [])[:1] if e.created_ns]
    return round((now_ns - min(created)) / NS_PER_MS, 3) if created and now_ns else None


def _who(ranks: list[int]) -> str:
    shown = ", ".join(map(str, ranks[:8])) + (f" and {len(ranks) - 8} more" if len(ranks) > 8 else "")
    return f"rank {shown}" if len(ranks) == 1 else f"ranks {shown}"


def _message(a: _Analysis, c: _Cause, op: str, waiting: list[int], waited: float | None) -> str:
    key, seq = c.inst
    where = f"{_label(a, key)} #{seq}" if P2P in key else f"{_label(a, key)} collective #{seq}"
    ranks = ", ".join(map(str, c.ranks))
    wait = f" for at least {waited / 1000:.1f} s" if waited and waited >= 100 else ""
    if c.kind == "missing":
        last = "; ".join(f"rank {r} last issued #{a.ranks[r].top.get(key, 0)} there and completed every "
                         f"collective it issued" for r in c.ranks[:4])
        return (f"{where} ({op}): {_who(c.ranks)} never issued it while {len(waiting)} rank(s) wait in it{wait} "
                f"({last}: stuck outside any collective).")
    if c.kind == "mismatch":
        parts = "; ".join(f"{_who(rs)} issued {s[0]} {s[1]}"
                          for s, rs in sorted(c.sides.items(), key=lambda kv: -len(kv[1])))
        if not c.ranks:
            return (f"{where}: the members disagree in equal numbers ({parts}): the dumps cannot tell which side "
                    "is wrong; the code that issues them (the stacks) does.")
        major = max(c.sides.items(), key=lambda kv: len(kv[1]))[0]
        odd = "; ".join(f"{_who(rs)} issued {sg[0]} {sg[1]}" for sg, rs in sorted(c.sides.items(), key=lambda kv: -len(kv[1]))
                        if sg != major)
        return f"{where}: the others issued {major[0]} {major[1]}, but {odd}."
    if c.kind == "stuck" and not c.ranks:
        return (f"{where} ({op}): every member issued it and none completed it: the collective itself does not "
                "finish (the network or the communication library); its logs or the timeout dump tell more.")
    if c.kind == "stuck":
        done = "; ".join(f"rank {r} last completed #{a.ranks[r].done.get(key)}" for r in c.ranks[:4])
        return f"{where} ({op}): rank(s) {ranks} issued it and never completed it ({done})."
    if c.kind == "unknown":
        return (f"{where} ({op}): every rank with a dump issued it and waits{wait}; rank(s) "
                f"{', '.join(map(str, c.unknown))} of the group left no dump, so the cause is most likely there "
                "(a dead or stuck process): its dump, log or a stack snapshot would tell.")
    return (f"{where} ({op}): ranks {ranks} wait for each other in a cycle (a deadlock: the order of collectives "
            "differs between them); their stacks show which call comes first.")


def _program_order(a: _Analysis, causes: list[tuple[int, Divergence]]) -> list[tuple[int, Divergence]]:
    """Causes in the order the ranks issue their collectives: clocks of different ranks do not order two
    collectives that no rank shares, but every rank's record order does order the kinds of group (the
    description) within a step: where the ranks issue TENSOR #4 before DATA #4, a rank stuck before both owes
    TENSOR #4 first. A pair is ordered by the majority of the ranks that issued both kinds at that seq;
    unordered pairs keep the time order."""
    if len(causes) < 2:
        return causes
    want = {(d.group_desc, d.seq) for _, d in causes if d.group_desc}
    rank_pos: list[dict[tuple[str, int], int]] = []
    for st in a.ranks.values():
        pos: dict[tuple[str, int], int] = {}
        for n, inst in enumerate(st.order):
            g = a.groups.get(inst[0])
            k = (g.desc if g else "", inst[1])
            if k in want and k not in pos:
                pos[k] = n
        rank_pos.append(pos)

    def wins(x: Divergence) -> int:
        kx = (x.group_desc, x.seq)
        n = 0
        for _, y in causes:
            ky = (y.group_desc, y.seq)
            if ky == kx:
                continue
            both = [p for p in rank_pos if kx in p and ky in p]
            n += sum(p[kx] < p[ky] for p in both) > len(both) / 2
        return n

    ranked = sorted(enumerate(causes), key=lambda ic: (-wins(ic[1][1]), ic[0]))
    return [c for _, c in ranked]


def find_divergences(ds: DumpSet, world: set[int] | None = None) -> tuple[list[Divergence], list[Consequence],
                                                                         list[int]]:
    """(first causes earliest first, consequences, ranks a group names that have no dump). `world`: every
    rank known to exist (dump files read or not, and the ranks between them)."""
    a = _Analysis(ds, world or set(ds.dumps))
    a.run()
    leads = _leads_to(a)
    _deadlocks(a, leads)
    times = [t for d in ds.dumps.values() for e in d.entries for t in (e.created_ns, e.completed_ns) if t]
    now_ns = max(times) if times else None
    no_dump = sorted({r for g in a.groups.values() for r in g.ranks if r not in ds.dumps})
    causes: list[tuple[int, Divergence]] = []
    index: dict[tuple[str, int], int] = {}
    for inst, cs in a.causes.items():
        for c in cs:
            waiting = [r for r in a.pending[inst] if r not in c.ranks]
            op = _op(a, inst, c)
            waited = _waited(a, inst, waiting, now_ns)
            g = a.groups.get(inst[0])
            div = Divergence(group=inst[0], group_name=_label(a, inst[0]), seq=inst[1], op=op, kind=c.kind,
                             ranks=c.ranks, waiting_ranks=waiting, waited_ms=waited,
                             positions=[_position(a, r, inst) for r in c.ranks],
                             message=_message(a, c, op, waiting, waited), unknown_ranks=c.unknown,
                             group_desc=g.desc if g else "", group_ranks=g.ranks if g else [])
            causes.append((_created(a, inst), div))
    causes.sort(key=lambda x: (x[0], x[1].group, x[1].seq))
    causes = _program_order(a, causes)
    divs: list[Divergence] = []
    cons: list[Consequence] = []
    first_of: dict[tuple[str, tuple[int, ...], tuple[int, ...]], int] = {}
    for _, d in causes:
        who = (d.kind, tuple(d.ranks), tuple(d.unknown_ranks))
        same = first_of.get(who) if d.kind in ("missing", "unknown") else None
        if same is None:   # one cause per stuck (or absent) rank set: its other groups wait for the same ranks
            first_of[who] = len(divs)
            index.setdefault((d.group, d.seq), len(divs))
            divs.append(d)
            continue
        index.setdefault((d.group, d.seq), same)
        cons.append(Consequence(group=d.group, group_name=d.group_name, seq=d.seq, op=d.op,
                                waiting_ranks=d.waiting_ranks, waits_for=d.ranks or d.unknown_ranks,
                                caused_by=[same],
                                message=f"{d.group_name} #{d.seq}: {_who(d.waiting_ranks)} wait for "
                                        f"{_who(d.ranks or d.unknown_ranks)} too: the same cause as {same + 1}."))
    for inst, ranks in sorted(a.pending.items(), key=lambda kv: _created(a, kv[0])):
        if inst in a.causes:
            continue
        of = sorted({index[c] for c in leads.get(inst, set()) if c in index})
        on = a.waits_on.get(inst, [])
        label = _label(a, inst[0])
        via = "; ".join(f"rank {m} waits in {_label(a, b[0])} #{b[1]}" for m in on[:3]
                        if (b := a.ranks[m].blocked) is not None)
        cons.append(Consequence(group=inst[0], group_name=label, seq=inst[1], op=_op(a, inst, _Cause("", inst, [])),
                                waiting_ranks=ranks, waits_for=on, caused_by=of,
                                message=f"{label} #{inst[1]}: rank(s) {', '.join(map(str, ranks[:8]))} wait for "
                                        f"rank(s) {', '.join(map(str, on[:8])) or '?'}"
                                        + (f" ({via})" if via else "")
                                        + (f": a consequence of cause {', '.join(str(i + 1) for i in of)}"
                                           if of else "") + "."))
    return divs, cons, no_dump
