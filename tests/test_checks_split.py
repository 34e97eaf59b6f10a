"""The checks split between this process and a forked helper (`run_checks(fork=True)`, the CLI's way).

Each case runs in a fresh interpreter (a test process has threads and open databases: it may not fork)
with one BLAS thread, as the CLI runs; it prints what happened as one JSON line.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CLUSTER4, KINETO, need
from stepdoctor.analysis import store
from stepdoctor.analysis.checks.base import registry

N_CHECKS = len(registry())   # derived: adding a check changes no test

SPLIT = r"""
import json, os, sys, threading
from stepdoctor.analysis.checks import _split, base
from stepdoctor.tools import api

path, cache, mode, log = sys.argv[1:5]
prof = api.load(path, cache_dir=cache)
parent = os.getpid()
forked = []
run_split = _split.run_split
def spy(*a, **k):
    r = run_split(*a, **k)
    forked.append(r is not None)
    return r
_split.run_split = spy
run_one = base._run_one
def logged(ctx, cid, cls):
    if mode == "helper-dies" and os.getpid() != parent:
        os._exit(3)  # the helper dies on the first check it takes, before reporting anything
    if mode == "helper-hangs" and os.getpid() != parent:
        import time
        time.sleep(3600)
    with open(log, "a") as f:
        f.write(f"{os.getpid()} {cid}\n")
    return run_one(ctx, cid, cls)
base._run_one = logged
_split.HELPER_PATIENCE_S = 0.5
if mode == "one-cpu":  # an affinity mask or a CPU quota of one CPU
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
if mode == "threaded":  # a second thread: this process may not fork
    stop = threading.Event()
    threading.Thread(target=stop.wait, daemon=True).start()
serial = api.issues(prof).model_dump_json()
open(log, "w").close()
split = api.issues(prof, fork=True).model_dump_json()
after = prof.rows("SELECT count(*) FROM ranks")[0][0]  # this process's connection was reopened
print(json.dumps({"forked": forked, "same": serial == split, "parent": parent, "ranks": after,
                  "findings": len(json.loads(split)["findings"])}))
"""


def _run(prof_dir: Path, tmp_path: Path, mode: str, cached: bool = True) -> tuple[dict, list[tuple[int, str]]]:
    """`cached`: the profile's database is built here first, so the child opens it from the cache."""
    log = tmp_path / "ran.txt"
    if cached:
        store.open_profile(prof_dir, cache_dir=tmp_path / "cache").close()
    out = subprocess.run([sys.executable, "-c", SPLIT, str(prof_dir), str(tmp_path / "cache"), mode, str(log)],
                         capture_output=True, text=True, timeout=300, env=store._child_env())
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    ran = [(int(pid), cid) for pid, cid in (ln.split() for ln in log.read_text().splitlines())]
    return got, ran


@pytest.mark.parametrize("data", ["cluster4", "kineto"])
def test_split_checks_run_once_each_in_two_processes_and_report_what_a_serial_run_reports(tmp_path, data):
    prof_dir = need(CLUSTER4) if data == "cluster4" else need(KINETO / "trace_filter")
    got, ran = _run(prof_dir, tmp_path, "normal")
    assert got["forked"] == [True]
    assert got["same"], "the split report differs from the serial one"
    assert got["findings"] > (20 if data == "cluster4" else 0)
    assert got["ranks"] == (4 if data == "cluster4" else 2)
    ids = [cid for _, cid in ran]
    assert len(ids) == len(set(ids)) == N_CHECKS, "each check exactly once"
    pids = {pid for pid, _ in ran}
    assert len(pids) == 2 and got["parent"] in pids, "the helper took checks too"


@pytest.mark.parametrize("mode", ["helper-dies", "helper-hangs"])
def test_checks_a_dead_or_stuck_helper_took_are_run_by_the_caller(tmp_path, mode):
    got, ran = _run(need(CLUSTER4), tmp_path, mode)
    assert got["forked"] == [True] and got["same"]
    assert sorted(cid for _, cid in ran) == sorted({cid for _, cid in ran}) and len(ran) == N_CHECKS
    assert {pid for pid, _ in ran} == {got["parent"]}


def test_a_process_with_a_second_thread_runs_the_checks_itself(tmp_path):
    got, ran = _run(need(CLUSTER4), tmp_path, "threaded")
    assert got["forked"] == [False] and got["same"] and got["ranks"] == 4
    assert {pid for pid, _ in ran} == {got["parent"]} and len(ran) == N_CHECKS


def test_a_process_that_wrote_a_database_runs_the_checks_itself(tmp_path):
    """A small profile is ingested in the host itself (store.PARALLEL_MIN_BYTES): a process that has
    opened a database for writing is never forked (store.fork_safe)."""
    got, ran = _run(need(CLUSTER4), tmp_path, "normal", cached=False)
    assert got["forked"] == [False] and got["same"]
    assert {pid for pid, _ in ran} == {got["parent"]} and len(ran) == N_CHECKS


def test_one_usable_cpu_runs_the_checks_here(tmp_path):
    """With one usable CPU the helper would only take turns with this process: none is forked."""
    got, ran = _run(need(CLUSTER4), tmp_path, "one-cpu")
    assert got["forked"] == [False] and got["same"] and got["ranks"] == 4
    assert {pid for pid, _ in ran} == {got["parent"]} and len(ran) == N_CHECKS
