"""Which Ray node holds a rank's files: the host a profile names, matched against the nodes the cluster reports.

A rank's host comes from what the profiler wrote, never from a guess:
* Kineto's `tensorboard_trace_handler` names a trace `<worker>.<ts>.pt.trace.json[.gz]`, whose default worker
  name is `<host>_<pid>` (scripts often put the rank where the pid was: `vm_0.1795….pt.trace.json.gz`);
* torch_npu / MindSpore name a rank folder `<host>_<pid>_<ts>_ascend_pt` / `_ascend_ms` (the same default
  worker name, then the timestamp); a DB export inside it is looked up by its folder. A worker name the user
  set replaces `<host>_<pid>` (older torch_npu) or `<host>` (newer), so it names a host only by coincidence
  with a node: the pin is then harmless, as every pin is soft;
* a `hostname` / `host` that discovery put in `RankSource.extra` wins over the names.
A name without the `_<digits>` worker suffix (`rank0_ascend_pt`, `rank-3.json`) names no host.

A node answers to (most deliberate first; the first level with an alive node that has CPUs decides):
1. the label `stepdoctor/host` (`ray start --labels stepdoctor/host=<name>`) or a custom resource
   `stepdoctor-host:<name>` (`ray start --resources '{"stepdoctor-host:<name>": 1}'`, any amount; one per name,
   so a node can hold several hosts' files; Ray's documented flag, where `--labels` is still a hidden one): for
   nodes whose host name is not the trainer's (containers, KubeRay pods) or that hold another host's files;
2. its node name (`ray start --node-name`), its host name (`NodeManagerHostname`, also its first DNS label, so
   `node-b` matches `node-b.cluster.local` both ways) and its address (`NodeManagerAddress`).
Names compare case-insensitively. When several nodes answer to one host (several raylets on one machine), that
host's ranks are dealt among them in turn. A host no node answers to is scheduled as Ray pleases.

No Ray import here: the engine hands `ray.nodes()` in, so this is testable with the dicts Ray reports.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..ingest.base import RankSource

HOST_LABEL = "stepdoctor/host"
HOST_RESOURCE = "stepdoctor-host:"  # + the host name
KINETO_FILE_RE = re.compile(r"^(?P<host>.+)_\d+\.\d+\.pt\.trace\.json(\.gz)?$")
# The timestamp: YYYYmmddHHMMSS, then milliseconds as torch_npu versions write them ("123", ".123" or none).
ASCEND_DIR_RE = re.compile(r"^(?P<host>.+)_\d+_\d{14}(\.?\d{3})?_ascend_(pt|ms)$")


def host_of_name(name: str) -> str | None:
    """The host in a profiler's file or folder name (see the module docstring), else None."""
    m = KINETO_FILE_RE.match(name) or ASCEND_DIR_RE.match(name)
    return m.group("host") if m else None


def rank_host(src: RankSource) -> str | None:
    """The host whose disk a rank's files were written on, as the profile names it; None when it names none."""
    for key in ("hostname", "host"):
        value = src.extra.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()
    path = Path(src.path)
    for p in (path, path.parent):  # a DB export or a trace file inside its rank folder
        host = host_of_name(p.name)
        if host:
            return host
    return None


def _short(name: str) -> str:
    """A host name's first DNS label; an IP address stays whole."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return name.split(".", 1)[0]
    return name


@dataclass
class NodeIndex:
    """Alive nodes that can run a task (CPU > 0), by the names they answer to (lower case): node ids."""

    by_label: dict[str, list[str]] = field(default_factory=dict)  # the label or the custom resources
    by_name: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def from_ray_nodes(cls, nodes: Iterable[Mapping[str, Any]]) -> NodeIndex:
        """From `ray.nodes()`: dicts with NodeID, Alive, NodeName, NodeManagerHostname, NodeManagerAddress,
        Resources and Labels."""
        index = cls()
        for node in nodes:
            if not node.get("Alive") or not (node.get("Resources") or {}).get("CPU"):
                continue
            nid = str(node["NodeID"])
            label = (node.get("Labels") or {}).get(HOST_LABEL)
            if label:
                _add(index.by_label, label, nid)
            for res in node.get("Resources") or {}:
                if res.startswith(HOST_RESOURCE) and len(res) > len(HOST_RESOURCE):
                    _add(index.by_label, res[len(HOST_RESOURCE):], nid)
            names = {node.get("NodeName"), node.get("NodeManagerHostname"), node.get("NodeManagerAddress")}
            for name in names - {None, ""}:
                _add(index.by_name, str(name), nid)
                _add(index.by_name, _short(str(name)), nid)
        return index

    def nodes_for(self, host: str) -> list[str]:
        """The node ids answering to `host` (its full name first, then its first DNS label); [] for none."""
        for table in (self.by_label, self.by_name):
            for key in dict.fromkeys((host.lower(), _short(host).lower())):
                if key in table:
                    return table[key]
        return []


def _add(table: dict[str, list[str]], name: str, node_id: str) -> None:
    ids = table.setdefault(name.lower(), [])
    if node_id not in ids:
        ids.append(node_id)


@dataclass
class Placement:
    """Where each rank was meant to run and where it ran (indexes into the discovered sources)."""

    hosts: list[str | None]            # the host each rank's files name
    targets: list[str | None]          # the node id a rank was pinned to (soft), None: Ray's choice
    ran_on: dict[int, str] = field(default_factory=dict)  # source index -> node id its task ran on

    @property
    def placed(self) -> int:
        """Ranks pinned to a node by locality."""
        return sum(t is not None for t in self.targets)

    @property
    def local(self) -> int:
        """Pinned ranks whose task ran on the node they were pinned to."""
        return sum(self.ran_on.get(i) == t for i, t in enumerate(self.targets) if t is not None)

    def summary(self) -> str:
        named = sum(h is not None for h in self.hosts)
        return (f"locality: {len(self.hosts)} ranks, {named} name a host, {self.placed} pinned to the node "
                f"holding it, {self.local} ran there")


def place(sources: Sequence[RankSource], nodes: Iterable[Mapping[str, Any]]) -> Placement:
    """Each rank's node: the host its files name, matched against `nodes` (`ray.nodes()`); the ranks of a host
    that several nodes answer to are dealt among those nodes in turn."""
    index = NodeIndex.from_ray_nodes(nodes)
    hosts = [rank_host(s) for s in sources]
    dealt: dict[str, int] = {}
    targets: list[str | None] = []
    for host in hosts:
        ids = index.nodes_for(host) if host else []
        if not ids:
            targets.append(None)
            continue
        key = host.lower()  # type: ignore[union-attr]
        k = dealt.get(key, 0)
        dealt[key] = k + 1
        targets.append(ids[k % len(ids)])
    return Placement(hosts, targets)


def interleaved(targets: Sequence[str | None]) -> list[int]:
    """Source indexes in submission order: one per target node in turn (ranks left to Ray count as one more
    node), so the in-flight window holds work for every node instead of queueing behind one busy node."""
    groups: dict[str | None, list[int]] = {}
    for i, t in enumerate(targets):
        groups.setdefault(t, []).append(i)
    order: list[int] = []
    for k in range(max((len(g) for g in groups.values()), default=0)):
        order.extend(g[k] for g in groups.values() if k < len(g))
    return order
