"""The process group of a collective the profile does not name (gloo traces): each family of disjoint groups the
ranks list is a candidate matching, and each collective takes the one under which its members keep the
invariant (no member ends before the last one starts). A TP x DP grid has two families of the same size."""

from __future__ import annotations

import json

import pandas as pd

from stepdoctor.analysis.metrics.coll_groups import families, split_ungrouped

MS = 1_000_000

# what torch 2.13 writes in distributedInfo.pg_config for 4 ranks, DP groups made first ([0,2], [1,3]: names 1
# and 2), then TP groups ([0,1], [2,3]: names 3 and 4); each rank lists the groups it is in
_PG = {0: [("0", [0, 1, 2, 3]), ("1", [0, 2]), ("3", [0, 1])],
       1: [("0", [0, 1, 2, 3]), ("2", [1, 3]), ("3", [0, 1])],
       2: [("0", [0, 1, 2, 3]), ("1", [0, 2]), ("4", [2, 3])],
       3: [("0", [0, 1, 2, 3]), ("2", [1, 3]), ("4", [2, 3])]}


def _sql(query: str) -> pd.DataFrame:
    assert "distributedInfo" in query
    rows = [(r, json.dumps({"backend": "gloo", "rank": r, "world_size": 4, "pg_config": [
        {"pg_name": n, "pg_desc": "default_pg" if n == "0" else "undefined", "ranks": rs} for n, rs in pgs]}))
        for r, pgs in _PG.items()]
    return pd.DataFrame(rows, columns=["rank", "value_json"])


def test_two_families_of_one_size_are_told_apart():
    assert families(_sql) == [{0: 0, 2: 0, 1: 1, 3: 1}, {0: 0, 1: 0, 2: 1, 3: 1}]


def test_each_collective_takes_the_grouping_its_timing_allows():
    """k = 1 is a TP all_reduce that rank 3 reaches 10 ms late (only its TP peer, rank 2, waits); k = 2 a DP
    all_reduce that rank 2 reaches 18 ms after rank 0 (only its DP peer waits). Matched as one world group, or
    both by one family, one of them breaks the invariant; each by its own family, none does."""
    rows = [  # rank, k, start ms, end ms
        (0, 1, 0, 1), (1, 1, 0, 1), (2, 1, 0, 11), (3, 1, 10, 11),
        (0, 2, 2, 21), (2, 2, 20, 21), (1, 2, 12, 13), (3, 2, 12, 13),
    ]
    df = pd.DataFrame([{"rank": r, "g": "", "coll": "allreduce", "cnt": 2, "k": k, "step": 1, "start_ns": s * MS,
                        "dur_ns": (e - s) * MS} for r, k, s, e in rows])
    out = split_ungrouped(df, _sql)
    out["inst"] = out.groupby(["coll", "cnt", "part", "k"]).ngroup()
    members = {(int(k), tuple(sorted(g["rank"]))) for (k, _), g in out.groupby(["k", "inst"])}
    assert members == {(1, (0, 1)), (1, (2, 3)), (2, (0, 2)), (2, (1, 3))}


def test_named_groups_and_a_job_without_families_keep_their_rows():
    df = pd.DataFrame([{"rank": r, "g": "pg1", "coll": "allreduce", "cnt": 1, "k": 1, "step": 1, "start_ns": 0, "dur_ns": MS}
                       for r in range(4)])
    assert split_ungrouped(df, _sql)["part"].tolist() == [-1, -1, -1, -1]
    world_only = pd.DataFrame(columns=["rank", "value_json"])
    loose = df.assign(g="")
    assert split_ungrouped(loose, lambda q: world_only)["part"].tolist() == [-1, -1, -1, -1]
