"""Process groups by their identity across every rank's dump.

A group is its name (torch gives it the same name on every member) and, where `split_group` made several groups
under one name, its ranks too; the description ("TENSOR_MODEL_PARALLEL_GROUP") is a label many groups share,
never an identity. Members come from `pg_config` where a dump says them, else from the ranks that recorded the
group: a member that recorded nothing in a group it belongs to is then not seen, which is why `pg_config` is
preferred.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from .frdump import DumpSet


@dataclass
class PGroup:
    key: str              # identity: the name, or "name@ranks" where one name covers several rank sets
    name: str
    desc: str
    ranks: list[int]
    ranks_known: bool     # from pg_config; False: the ranks that recorded it
    label: str = ""       # for messages: the description, with the name where the description is shared


def _label(desc: str, name: str, shared: bool) -> str:
    if not desc or desc in ("undefined", name):
        return f"group {name}"
    return f"{desc} (group {name})" if shared else desc


def build_groups(ds: DumpSet, world: set[int] | None = None) -> tuple[dict[str, PGroup], dict[tuple[int, str], str]]:
    """(group key -> group, (rank, group name) -> group key for every group a rank recorded or configures).
    `world`: every rank the job is known to have (with a dump or not)."""
    sets: dict[str, set[frozenset[int]]] = defaultdict(set)
    descs: dict[str, Counter[str]] = defaultdict(Counter)
    for d in ds.dumps.values():
        for name, cfg in d.configs.items():
            if cfg.ranks:
                sets[name].add(frozenset(cfg.ranks))
            if cfg.desc:
                descs[name][cfg.desc] += 1
        for e in d.entries:
            if e.desc:
                descs[e.group][e.desc] += 1
    keyof: dict[tuple[int, str], str] = {}
    known: dict[str, frozenset[int]] = {}
    seen: dict[str, set[int]] = defaultdict(set)
    for r, d in ds.dumps.items():
        names = set(d.configs) | {e.group for e in d.entries} | set(d.status)
        for name in names:
            options = sets.get(name, set())
            own = d.configs.get(name)
            mine = frozenset(own.ranks) if own and own.ranks else \
                next((s for s in options if r in s), None) if len(options) > 1 else next(iter(options), None)
            key = name if len(options) <= 1 or mine is None else f"{name}@{','.join(map(str, sorted(mine)))}"
            keyof[(r, name)] = key
            if mine is not None:
                known[key] = mine
            if name in d.configs or any(e.group == name for e in d.entries) or name in d.status:
                seen[key].add(r)
    by_desc = Counter(descs[k.split("@")[0]].most_common(1)[0][0] for k in seen if descs[k.split("@")[0]])
    out: dict[str, PGroup] = {}
    for key, recorded in seen.items():
        name = key.split("@")[0]
        desc = descs[name].most_common(1)[0][0] if descs[name] else ""
        ranks = sorted(known[key]) if key in known else sorted(recorded)
        out[key] = PGroup(key, name, desc, ranks, key in known, _label(desc, name, by_desc[desc] > 1))
    _place_absent(out, set(ds.dumps), world or set())
    return out, keyof


def _place_absent(groups: dict[str, PGroup], dumped: set[int], world: set[int]) -> None:
    """Ranks without a dump recorded nothing, so a group known only from its recorders lacks them. Where the
    dumps do not list members (Gloo), they are put back when it is certain: the default group holds the whole
    world, and where the groups sharing a description all have k members but one, which has k - n, and n
    absent ranks are in no group of that description, those n belong to it."""
    absent = world - dumped
    if not absent:
        return
    for g in groups.values():
        if not g.ranks_known and g.name == "0" and g.desc in ("default_pg", ""):
            g.ranks = sorted(set(g.ranks) | absent)
    by_desc: dict[str, list[PGroup]] = defaultdict(list)
    for g in groups.values():
        if g.desc and g.name != "0":
            by_desc[g.desc].append(g)
    for siblings in by_desc.values():
        if len(siblings) < 2 or any(g.ranks_known for g in siblings):
            continue
        size = Counter(len(g.ranks) for g in siblings).most_common(1)[0][0]
        short = [g for g in siblings if len(g.ranks) < size]
        free = sorted(absent - {r for g in siblings for r in g.ranks})
        if len(short) == 1 and size - len(short[0].ranks) == len(free):
            short[0].ranks = sorted(short[0].ranks + free)
