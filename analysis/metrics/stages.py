"""Pipeline stages of a job, from what the profile holds (first source that assigns 2+ stages wins):
  * MindSpore's cluster files (`ascend_cluster_analyse_pipeline-parallel_{stages}_{ranks}_{rank}.csv`,
    metadata `cluster_analyse`): MindSpore places stage_device_num = ranks / stages consecutive ranks per
    stage, so stage = rank // (ranks / stages);
  * a pipeline process group in Kineto's `distributedInfo.pg_config` or torch_npu's `parallel_group_info`
    (a group whose name/description says pipeline / pp): a rank's stage is its position in that group;
  * send / receive partners, when nothing names the pipeline (`stages_from_p2p`): the point-to-point edges
    (src -> dst of send/receive links and tasks: Ascend communication.json / matrix, the DB's task table; the
    peers of Kineto send / recv ops, `comm_ops.peer_rank`) or, on Kineto, the process groups that carry
    send/recv (their rank lists in `pg_config`; the world group only when no smaller group carries any
    collective, since then every rank may be its own stage). Pipeline partners form chains (each rank talks to
    the stage before and after it); every chain must be a simple path and all chains the same length. A
    chain's first stage is the end whose first point-to-point op in a step is a send (stage 0 sends
    activations before it receives anything; the last stage receives first), else the end with the lower rank.
Stages are 0-based here; findings and the what-if name them from 1 ("stage 1 of 2" is the first).
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any, Protocol


class StageSource(Protocol):
    """What stage inference reads: a check's context, or a profile with its ranks (`of_profile`)."""

    all_ranks: list[int]

    def sql(self, query: str, params: list | None = None) -> Any: ...


class _ProfileSource:
    def __init__(self, prof: Any, ranks: list[int]) -> None:
        self.sql = prof.sql
        self.all_ranks = ranks


def of_profile(prof: Any) -> tuple[dict[int, int], int, str] | None:
    """`stage_of_ranks` of an opened profile (its ranks from the ranks table)."""
    ranks = [int(r) for (r,) in prof.rows("SELECT DISTINCT rank FROM ranks ORDER BY rank")]
    return stage_of_ranks(_ProfileSource(prof, ranks))


def stage_of_ranks(ctx: StageSource) -> tuple[dict[int, int], int, str] | None:
    """rank -> stage (0-based), the number of stages, and where the assignment came from."""
    md = ctx.sql("SELECT rank, key, value_json FROM metadata WHERE key IN "
                 "('cluster_analyse', 'distributedInfo', 'parallel_group_info')")
    ranks = set(ctx.all_ranks)
    by_key: dict[str, list[tuple[int, object]]] = defaultdict(list)
    shared: dict[tuple, dict] = {}
    for rank, key, value in md.itertuples(index=False):
        try:
            by_key[key].append((int(rank), _share_groups(json.loads(value), shared)))
        except (TypeError, ValueError):
            continue
    for _rank, v in by_key.get("cluster_analyse", []):
        if isinstance(v, dict) and v.get("stage_num") and v.get("rank_size"):
            per = int(v["rank_size"]) // int(v["stage_num"])
            if per > 0:
                stages = {r: r // per for r in ranks}
                return stages, int(v["stage_num"]), "MindSpore pipeline-parallel cluster files"
    stages: dict[int, int] = {}
    n_stages = 0
    for _rank, v in by_key.get("distributedInfo", []) + by_key.get("parallel_group_info", []):
        for g in _pipeline_groups(v):
            for i, r in enumerate(g):
                if r in ranks:
                    stages[r] = i
            n_stages = max(n_stages, len(g))
    if n_stages >= 2 and len(set(stages.values())) >= 2:
        return stages, n_stages, "pipeline process groups"
    return stages_from_p2p(ctx, by_key.get("distributedInfo", []))


_P2P_NAME = "(lower(op_name) LIKE '%send%' OR lower(op_name) LIKE '%receive%' OR lower(op_name) LIKE '%recv%')"
_P2P_TYPES = "('send', 'receive', 'sendrecv')"


def stages_from_p2p(ctx: StageSource, dist: list[tuple[int, object]]) -> tuple[dict[int, int], int, str] | None:
    """rank -> stage from point-to-point partners (see the module doc), or None when they do not form equal
    simple chains of 2+ ranks."""
    edges: set[tuple[int, int]] = set()
    for table in ("links", "comm_tasks"):
        df = ctx.sql(f"SELECT DISTINCT src_rank, dst_rank FROM {table} WHERE src_rank IS NOT NULL AND dst_rank "
                     f"IS NOT NULL AND src_rank <> dst_rank AND {_P2P_NAME}")
        edges |= {(int(a), int(b)) for a, b in df.itertuples(index=False)}
    df = ctx.sql(f"SELECT DISTINCT rank, peer_rank FROM comm_ops WHERE op_type IN {_P2P_TYPES} "
                 "AND peer_rank IS NOT NULL AND peer_rank <> rank")
    edges |= {(int(a), int(b)) for a, b in df.itertuples(index=False)}
    how = "send/receive partners"
    if not edges:
        chains = _p2p_groups(ctx, dist)
        how = "process groups carrying send/recv"
    else:
        chains = p2p_chains(edges)
    if not chains or len({len(c) for c in chains}) != 1 or len(chains[0]) < 2:
        return None
    first = _first_p2p(ctx)
    stages: dict[int, int] = {}
    for c in chains:
        if first.get(c[-1]) == "send" and first.get(c[0]) != "send":
            c = c[::-1]
        for i, r in enumerate(c):
            stages[r] = i
    ranks = set(ctx.all_ranks)
    stages = {r: s for r, s in stages.items() if r in ranks}
    if len(set(stages.values())) < 2:
        return None
    return stages, len(chains[0]), how


def p2p_chains(edges: set[tuple[int, int]]) -> list[list[int]] | None:
    """The undirected partner graph's components as paths from their lower-rank end; None when one is not a
    simple path (a rank with 3+ partners, or a ring as interleaved schedules make: no first stage to find)."""
    adj: dict[int, set[int]] = defaultdict(set)
    for a, b in edges:
        adj[a].add(b)
        adj[b].add(a)
    if any(len(v) > 2 for v in adj.values()):
        return None
    seen: set[int] = set()
    out: list[list[int]] = []
    for start in sorted(adj):
        if start in seen or len(adj[start]) != 1:
            continue
        path, prev, cur = [start], None, start
        while True:
            nxt = [x for x in adj[cur] if x != prev]
            if not nxt:
                break
            prev, cur = cur, nxt[0]
            path.append(cur)
        seen |= set(path)
        out.append(path)
    return out if seen == set(adj) else None


def _p2p_groups(ctx: StageSource, dist: list[tuple[int, object]]) -> list[list[int]] | None:
    """Kineto: the rank lists (in group order) of the process groups that carry send/recv ops."""
    df = ctx.sql(f"SELECT DISTINCT group_name FROM comm_ops WHERE op_type IN {_P2P_TYPES} AND group_name IS NOT NULL")
    names = {str(g) for g in df["group_name"]}
    if not names:
        return None
    members: dict[str, list[int]] = {}
    world = 0
    for _rank, v in dist:
        if not isinstance(v, dict):
            continue
        world = max(world, int(v.get("world_size") or 0))
        for g in v.get("pg_config") or []:
            if isinstance(g, dict) and str(g.get("pg_name")) in names and isinstance(g.get("ranks"), list):
                members[str(g["pg_name"])] = [int(r) for r in g["ranks"]]
    groups = list({tuple(rs): rs for rs in members.values() if len(rs) >= 2}.values())
    if not groups:
        return None
    if any(len(rs) == world for rs in groups):
        others = ctx.sql(f"SELECT count(*) AS n FROM comm_ops WHERE op_type NOT IN {_P2P_TYPES} AND group_name "
                         f"IS NOT NULL AND group_name NOT IN ({','.join('?' * len(members))})", list(members))
        if len(groups) > 1 or int(others["n"].iloc[0]) > 0:
            return None   # the world group beside data-parallel groups: ranks share it, it orders no stages
    flat = [r for rs in groups for r in rs]
    return groups if len(flat) == len(set(flat)) else None


def _first_p2p(ctx: StageSource) -> dict[int, str]:
    """rank -> the op type (send / receive) its steps most often begin their point-to-point ops with."""
    df = ctx.sql("SELECT rank, step, arg_min(op_type, start_ns) AS first FROM comm_ops "
                 f"WHERE op_type IN {_P2P_TYPES} AND step IS NOT NULL GROUP BY rank, step")
    votes: dict[int, list[str]] = defaultdict(list)
    for r, _s, f in df.itertuples(index=False):
        votes[int(r)].append(str(f))
    return {r: max(sorted(set(v)), key=v.count) for r, v in votes.items()}


def _share_groups(v: object, shared: dict[tuple, dict]) -> object:
    """A decoded distributedInfo / parallel_group_info whose group dicts are shared with the ranks that list an
    equal group (equal in what is read here: names, description, rank lists). Every rank lists every group,
    each with its ranks, so keeping each rank's own copies would hold ranks x world size ints."""
    if not isinstance(v, dict):
        return v

    def one(g: object) -> object:
        if not isinstance(g, dict):
            return g
        rs = g.get("ranks", g.get("global_ranks"))
        key = (str(g.get("pg_name")), str(g.get("pg_desc")), str(g.get("group_name")), repr(rs))
        return shared.setdefault(key, g)

    if isinstance(v.get("pg_config"), list):
        v["pg_config"] = [one(g) for g in v["pg_config"]]
    else:
        for k, g in v.items():
            v[k] = one(g)
    return v


def _pipeline_groups(v: object) -> list[list[int]]:
    """Rank lists of pipeline groups in distributedInfo (pg_config) or torch_npu parallel_group_info."""
    groups: list[dict] = []
    if isinstance(v, dict) and isinstance(v.get("pg_config"), list):
        groups = [g for g in v["pg_config"] if isinstance(g, dict)]
    elif isinstance(v, dict):
        groups = [g for g in v.values() if isinstance(g, dict)]
    out = []
    for g in groups:
        label = f"{g.get('pg_desc', '')} {g.get('group_name', '')}".lower()
        rs = g.get("ranks", g.get("global_ranks"))
        words = label.split()
        if ("pipe" in label or (bool(words) and words[0] in ("pp", "pp_group"))) and isinstance(rs, list):
            out.append([int(r) for r in rs])
    return out
