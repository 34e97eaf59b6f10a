"""Run a command and sample the whole process tree's memory and CPU while it runs (psutil): the measurement
the ingest and issues benchmarks share."""

from __future__ import annotations

import json
import resource
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SAMPLE_S = 0.05
# The process tree is listed every TREE_S only: psutil finds children by reading every process of the machine,
# which at SAMPLE_S cost the sampler ~5 % of a core, taken from the measured multi-process ingest (the
# single-process floor runs beside it on the other core). Parse workers live as long as the ingest, so the
# tree rarely changes; each known process's memory and CPU are still read every SAMPLE_S.
TREE_S = 0.25


@dataclass
class Sampled:
    result: dict[str, Any]
    wall_s: float                      # child's lifetime as seen from here (imports included)
    peak_proc_b: int
    peak_tree_b: int
    cpu_s: float                       # user+system of every process of the tree
    per_pid_cpu: dict[int, float] = field(default_factory=dict)
    peak_by_role: dict[str, int] = field(default_factory=dict)  # largest RSS of each kind of process
    cpu_by_role: dict[str, float] = field(default_factory=dict)  # CPU s of each kind of process (sampled)


def _role(p: Any, root_pid: int) -> str:
    """What a sampled process is: the measured child itself, or one of stepdoctor's children (its one child
    is the ingest process, a fork of it as in the CLI or a new interpreter; parse workers are the ingest
    process's children)."""
    if p.pid == root_pid:
        return "measuring process"
    try:
        ppid = p.ppid()
        if ppid == root_pid:
            return "ingest process"
        if p.parent().ppid() == root_pid:
            return "parse worker"
    except Exception:  # gone meanwhile
        return "other"
    return "other child"


def run_sampled(cmd: list[str], env: dict[str, str] | None = None, phase_file: Path | None = None) -> Sampled:
    """Run `cmd`, sampling its process tree. With `phase_file` (which the child writes when its ranks are
    all stored), the measuring process's peak is split into before and after that point."""
    import psutil

    t0 = time.perf_counter()
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    root = psutil.Process(proc.pid)
    peak_proc = peak_tree = 0
    cpu: dict[int, float] = {}
    roles: dict[int, str] = {}
    by_role: dict[str, int] = {}
    procs: list[Any] = []
    listed = 0.0
    while proc.poll() is None:
        if time.perf_counter() - listed >= TREE_S:
            listed = time.perf_counter()
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.Error:
                procs = []
        total = 0
        for p in procs:
            try:
                rss = p.memory_info().rss
                ct = p.cpu_times()
            except psutil.Error:
                continue
            total += rss
            peak_proc = max(peak_proc, rss)
            cpu[p.pid] = ct.user + ct.system
            role = roles.setdefault(p.pid, _role(p, proc.pid))
            key = role
            if role == "measuring process" and phase_file is not None:
                key += " after ingest (open, breakdown)" if phase_file.exists() else " during ingest"
            by_role[key] = max(by_role.get(key, 0), rss)
        peak_tree = max(peak_tree, total)
        time.sleep(SAMPLE_S)
    out, err = proc.communicate()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:4])} failed ({proc.returncode}):\n{err[-3000:]}")
    # CPU: the sampled per-process totals miss up to one interval per process; the rusage of waited-for
    # descendants misses processes nobody waited for. Take the larger.
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    waited = (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime)
    result = json.loads(out.strip().splitlines()[-1])
    cpu_by_role: dict[str, float] = {}
    for pid, c in cpu.items():
        cpu_by_role[roles.get(pid, "other")] = cpu_by_role.get(roles.get(pid, "other"), 0.0) + c
    return Sampled(result, wall, peak_proc, peak_tree, max(sum(cpu.values()), waited), cpu, by_role, cpu_by_role)
