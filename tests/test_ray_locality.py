"""Locality: a rank whose files name a host runs on the Ray node answering to that host (soft: a rank whose node
is gone still runs), ranks naming no known host run where Ray puts them, and the store is the local one.

The cluster (as in test_ray.py) is a head and a second node on this machine, one CPU each; the second node
carries the label `stepdoctor/host=node-b`, the name its ranks' files give. Both raylets report this machine's
host name, so ranks named after it are dealt between the two."""

from __future__ import annotations

import importlib.util
import socket
from functools import partial
from pathlib import Path

import pytest

from conftest import SHARED, need
from stepdoctor.analysis import build, store
from stepdoctor.analysis.build.locality import (
    HOST_LABEL,
    HOST_RESOURCE,
    NodeIndex,
    host_of_name,
    interleaved,
    place,
    rank_host,
)
from stepdoctor.analysis.ingest.base import RankSource, table_columns
from stepdoctor.analysis.ingest.discover import discover
from stepdoctor.analysis.store import IngestOptions

REAL = SHARED / "real"
GLOO2 = REAL / "gpu-h100" / "gloo2_straggler" / "traces"
HAS_RAY = importlib.util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAS_RAY, reason="ray is not installed (pip install -e '.[dev]')")


@pytest.mark.parametrize("name, host", [
    ("vm_0.1795736822135944433.pt.trace.json.gz", "vm"),              # tensorboard_trace_handler, gzip
    ("node-b.dc1.example.com_48213.1700000000123.pt.trace.json", "node-b.dc1.example.com"),
    ("gpu_host_7_1234.99.pt.trace.json", "gpu_host_7"),                # underscores in the host name
    ("node-b_123_20250109073508123_ascend_pt", "node-b"),              # torch_npu's rank folder
    ("worker3_77_20240101000000000_ascend_ms", "worker3"),             # MindSpore's
    ("gpu-3_77_20240101000000_ascend_pt", "gpu-3"), ("gpu-3_77_20240101000000.123_ascend_pt", "gpu-3"),
    ("myrun_20240101000000123_ascend_pt", None),                       # a worker name without the pid
    ("rank0_ascend_pt", None), ("rank0.pt.trace.json", None), ("sampled_rank-7.json", None),
    ("ascend_pytorch_profiler_0.db", None),
])
def test_the_host_a_profiler_file_name_gives(name, host):
    assert host_of_name(name) == host


def test_a_db_export_takes_the_host_of_its_rank_folder_and_discovery_extra_wins(tmp_path):
    folder = tmp_path / "node-7_4242_20250109073508123_ascend_pt" / "ASCEND_PROFILER_OUTPUT"
    db = folder / "ascend_pytorch_profiler_3.db"
    assert rank_host(RankSource(path=db.parent.parent, format="ascend_db", rank=3)) == "node-7"
    assert rank_host(RankSource(path=tmp_path / "x" / "node-7_1.2.pt.trace.json", format="kineto")) == "node-7"
    named = RankSource(path=tmp_path / "rank0.json", format="kineto", extra={"hostname": "gpu-12"})
    assert rank_host(named) == "gpu-12"


def test_real_kineto_traces_name_the_host_they_were_recorded_on():
    disc = discover(need(GLOO2))  # worker_name=f"{socket.gethostname()}_{RANK}" on the machine "vm"
    assert [(s.rank, rank_host(s)) for s in disc.sources] == [(0, "vm"), (1, "vm")]
    asc = discover(need(REAL / "ascend" / "msinsight-pt-db-l1"))  # folders renamed rank{N}_ascend_pt: no host
    assert [rank_host(s) for s in asc.sources] == [None, None]


def _node(nid: str, host: str, addr: str, cpus: float = 4, alive: bool = True, hosts: tuple[str, ...] = (),
          **labels: str) -> dict:
    resources = {**({"CPU": cpus} if cpus else {}), **{f"{HOST_RESOURCE}{h}": 1.0 for h in hosts}}
    return {"NodeID": nid, "Alive": alive, "NodeName": addr, "NodeManagerHostname": host,
            "NodeManagerAddress": addr, "Resources": resources, "Labels": labels}


NODES = [
    _node("a1", "gpu-a.dc1.example.com", "10.0.0.1"),
    _node("a2", "gpu-a.dc1.example.com", "10.0.0.1"),            # a second raylet on gpu-a
    _node("b", "pod-7f9c", "10.0.0.2", **{HOST_LABEL: "gpu-b"}),  # a pod whose label names its trainer host
    _node("dead", "gpu-c", "10.0.0.3", alive=False),
    _node("head", "gpu-d", "10.0.0.4", cpus=0),                   # a head that runs no tasks
    _node("nfs", "store-1", "10.0.0.5", hosts=("gpu-e", "gpu-f")),  # holds two hosts' files (custom resources)
]


def test_nodes_answer_to_label_host_name_short_name_and_address():
    index = NodeIndex.from_ray_nodes(NODES)
    assert index.nodes_for("GPU-A") == ["a1", "a2"]                   # short name, any case
    assert index.nodes_for("gpu-a.dc1.example.com") == ["a1", "a2"]
    assert index.nodes_for("gpu-a.other.net") == ["a1", "a2"]         # first DNS label both ways
    assert index.nodes_for("10.0.0.1") == ["a1", "a2"] and index.nodes_for("10") == []
    assert index.nodes_for("gpu-b") == ["b"] and index.nodes_for("pod-7f9c") == ["b"]
    assert index.nodes_for("gpu-c") == [] and index.nodes_for("gpu-d") == [] and index.nodes_for("gpu-z") == []
    assert index.nodes_for("gpu-e") == index.nodes_for("GPU-F") == index.nodes_for("store-1") == ["nfs"]


def test_place_deals_a_hosts_ranks_among_its_nodes_and_leaves_unknown_hosts_to_ray(tmp_path):
    names = ["gpu-a_1.5.pt.trace.json", "gpu-a_2.5.pt.trace.json", "gpu-a_3.5.pt.trace.json",
             "gpu-b_1.5.pt.trace.json", "gpu-c_1.5.pt.trace.json", "rank5.pt.trace.json"]
    srcs = [RankSource(path=tmp_path / n, format="kineto", rank=r) for r, n in enumerate(names)]
    p = place(srcs, NODES)
    assert p.hosts == ["gpu-a", "gpu-a", "gpu-a", "gpu-b", "gpu-c", None]
    assert p.targets == ["a1", "a2", "a1", "b", None, None]
    assert p.placed == 4 and p.local == 0
    p.ran_on.update({0: "a1", 1: "a1", 2: "a1", 3: "b", 5: "a2"})
    assert p.local == 3
    assert interleaved(p.targets) == [0, 1, 3, 4, 2, 5]  # a1, a2, b, Ray's, then a1 and Ray's again


@pytest.fixture(scope="module")
def cluster():
    if not HAS_RAY:
        pytest.skip("ray is not installed (pip install -e '.[dev]')")
    import ray
    from ray.cluster_utils import Cluster

    args = {"num_cpus": 1, "object_store_memory": 80 << 20}
    c = Cluster(initialize_head=True, head_node_args={**args, "include_dashboard": False})
    node_b = c.add_node(**args, labels={HOST_LABEL: "node-b"})
    ray.init(address=c.address, log_to_driver=False, logging_level="WARNING")
    c.wait_for_nodes()
    yield c, c.head_node.node_id, node_b.node_id
    ray.shutdown()
    c.shutdown()


def _renamed(folder: Path, files: list[Path], hosts: list[str]) -> Path:
    """Links to `files`, each named as tensorboard_trace_handler names a trace written on that host."""
    folder.mkdir(parents=True)
    for i, (f, host) in enumerate(zip(files, hosts, strict=True)):
        (folder / f"{host}_{1000 + i}.17000000{i}.pt.trace.json{'.gz' if f.name.endswith('.gz') else ''}"
         ).symlink_to(f)
    return folder


def _build_with_placement(monkeypatch, prof: Path, cache: Path):
    """The store built through Ray (as `open_profile(IngestOptions(engine="ray"))` builds it) and the engine's placement."""
    from stepdoctor.analysis.build import ray_engine

    seen = []
    monkeypatch.setattr(ray_engine, "build_with_ray", partial(ray_engine.build_with_ray, on_placement=seen.append))
    build.forget_opened()
    prof_ray = build.open_profile(prof, IngestOptions(cache_dir=cache, engine="ray"))
    assert len(seen) == 1 and not prof_ray.from_cache
    return prof_ray, seen[0]


def _assert_same_store(a: store.Profile, prof: Path, cache: Path) -> None:
    """`a` equals the store built here, table for table (multisets: EXCEPT ALL both ways)."""
    build.forget_opened()
    b = build.open_profile(prof, IngestOptions(cache_dir=cache, engine="here"))
    import duckdb

    con = duckdb.connect()
    con.execute(f"ATTACH '{a.db_path}' AS a (READ_ONLY)")
    con.execute(f"ATTACH '{b.db_path}' AS b (READ_ONLY)")
    rows = 0
    for t in table_columns():
        rows += con.execute(f"SELECT count(*) FROM a.{t}").fetchone()[0]
        for x, y in (("a", "b"), ("b", "a")):
            q = f"SELECT count(*) FROM (SELECT * FROM {x}.{t} EXCEPT ALL SELECT * FROM {y}.{t})"
            assert con.execute(q).fetchone()[0] == 0, (t, x, y)
    con.close()
    assert rows > 1_000 and a.info == b.info and a.warnings == b.warnings


@needs_ray
def test_a_rank_runs_on_the_node_its_files_name_and_an_unknown_host_still_runs(cluster, tmp_path, monkeypatch):
    _, head, node_b = cluster
    files = sorted(need(GLOO2).glob("*.pt.trace.json.gz"))
    prof = _renamed(tmp_path / "prof", files, ["node-b", "no-such-host"])
    via_ray, p = _build_with_placement(monkeypatch, prof, tmp_path / "ray")
    assert via_ray.info.ranks == [0, 1]
    assert p.hosts == ["node-b", "no-such-host"] and p.targets == [node_b, None]
    assert p.ran_on[0] == node_b and p.ran_on[1] in (head, node_b)
    assert (p.placed, p.local) == (1, 1)
    _assert_same_store(via_ray, prof, tmp_path / "here")


@needs_ray
def test_ranks_named_after_this_machine_are_dealt_between_its_two_raylets(cluster, tmp_path, monkeypatch):
    """Six generated ranks: three on node-b by its label, three by the host name both raylets report."""
    from stepdoctor.evals.generate import Scenario, write_kineto_profile

    _, head, node_b = cluster
    gen = write_kineto_profile(Scenario(vendor="kineto", ranks=6, steps=2, seed=3, plants=[]), tmp_path / "gen",
                               events_per_rank=300)
    here = socket.gethostname()
    files = [gen / f"rank{r}.pt.trace.json" for r in range(6)]
    prof = _renamed(tmp_path / "prof", files, ["node-b", here] * 3)
    via_ray, p = _build_with_placement(monkeypatch, prof, tmp_path / "ray")
    assert via_ray.info.ranks == list(range(6))
    assert [p.targets[i] for i in (0, 2, 4)] == [node_b] * 3
    assert sorted(p.targets[i] for i in (1, 3, 5)).count(head) in (1, 2)  # dealt in turn over both raylets
    assert (p.placed, p.local) == (6, 6)
    assert [p.ran_on[i] for i in (0, 2, 4)] == [node_b] * 3
    _assert_same_store(via_ray, prof, tmp_path / "here")


@needs_ray
def test_a_rank_whose_node_is_gone_runs_elsewhere(cluster, tmp_path, monkeypatch):
    """The cluster listed node-c (named by a custom resource) alive, then node-c went away before its rank ran:
    soft affinity runs it on a node that is still there, and the store is whole."""
    import ray

    c, head, node_b = cluster
    node_c = c.add_node(num_cpus=1, object_store_memory=80 << 20, resources={f"{HOST_RESOURCE}node-c": 1})
    c.wait_for_nodes()
    listed = ray.nodes()
    c.remove_node(node_c)
    monkeypatch.setattr(ray, "nodes", lambda: listed)  # the stale view a driver can hold
    files = sorted(need(GLOO2).glob("*.pt.trace.json.gz"))
    prof = _renamed(tmp_path / "prof", files, ["node-c", "node-b"])
    via_ray, p = _build_with_placement(monkeypatch, prof, tmp_path / "ray")
    assert via_ray.info.ranks == [0, 1] and not any("skipped" in w for w in via_ray.warnings)
    assert p.targets == [node_c.node_id, node_b]
    assert p.ran_on[0] in (head, node_b) and p.ran_on[1] == node_b
    assert (p.placed, p.local) == (2, 1)
    _assert_same_store(via_ray, prof, tmp_path / "here")
