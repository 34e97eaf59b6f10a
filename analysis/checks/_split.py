"""Checks in two processes: this one and a forked helper, each taking the next check from a shared pipe.

The 24 checks run on one core otherwise: they are GIL-bound (pandas and numpy work on small arrays, the
queries ~0.18 s of ~0.4 s on an 8-rank profile), so threads gain nothing (two threads measured 5 %).
A forked helper starts in a millisecond with every check module loaded. The checks are handed out
dynamically: the check indexes are written into a pipe before the fork, two bytes each, and each process
reads two bytes at a time (a read of two bytes from a pipe holding an even number is atomic), so each
check runs exactly once and a long check does not leave the other process idle. Each process computes
what its checks share (`ctx.memo`, the breakdown) on its own; on bench8 (8 ranks × 40k events) the 24
checks took 0.35-0.41 s in one process and 0.24-0.27 s in two (4 alternating runs each).

The helper pickles its outcomes to a second pipe and exits; anything it did not report (it crashed, was
killed, its pickle broke) is run here afterwards, so the result never depends on the helper. Outcomes are
merged by the caller in registry order, which makes the report identical to a serial run.

Forking needs a process whose whole state its program controls (the CLI), one thread, and no DuckDB
instance: `run_split` waits for the store's background threads, closes the profile's connection (its
instance and threads end with it), forks if `store.fork_safe()`, and both processes reopen.
With one usable CPU (`machine.usable_cpus`: the affinity mask and a cgroup quota) the checks run
here, serially.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import select
import signal
import time
from collections.abc import Callable
from typing import Any

from .. import machine, store

# How long the caller waits for the helper once its own share is done (at least; else 4x that share)
HELPER_PATIENCE_S = 30.0
_INDEX_BYTES = 2  # one check index in the task pipe (all of them are written at once: at most PIPE_BUF)


def run_split(prof: store.Profile, ids: list[str], run_one: Callable[[str], Any]) -> dict[str, Any] | None:
    """`{id: run_one(id)}` for every id, computed by this process and one forked helper, each on its own
    connection to `prof` (the profile `run_one` reads); None (nothing run) when this process may not
    fork. `run_one`'s result must pickle."""
    if len(ids) < 2 or len(ids) * _INDEX_BYTES > select.PIPE_BUF or not hasattr(os, "fork") \
            or machine.usable_cpus() < 2:  # (one CPU: the helper would only take turns with this process)
        return None
    store.settle()
    tasks_r, tasks_w = os.pipe()
    res_r, res_w = os.pipe()
    pid = -1
    try:
        os.write(tasks_w, b"".join(i.to_bytes(_INDEX_BYTES, "little") for i in range(len(ids))))
        os.close(tasks_w)
        tasks_w = -1
        prof.close()
        if store.fork_safe():  # else another thread runs here: the connection is reopened at once
            with contextlib.suppress(OSError):  # no process to spare: run serially
                pid = os.fork()
            if pid == 0:
                _helper(prof, ids, run_one, tasks_r, res_r, res_w)  # never returns
        if pid < 0:
            os.close(tasks_r)
            os.close(res_r)
            return None
        os.close(res_w)
        res_w = -1
    finally:
        for fd in (tasks_w, res_w):
            if fd >= 0:
                os.close(fd)
        if pid != 0:
            prof.reopen()
    try:
        t0 = time.monotonic()
        done = {ids[i]: run_one(ids[i]) for i in _claims(tasks_r)}
        theirs = _receive(res_r, patience=max(HELPER_PATIENCE_S, 4 * (time.monotonic() - t0)))
        if theirs is None:  # stuck: what it holds is run here
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
            theirs = {}
    finally:
        os.close(tasks_r)
        os.close(res_r)
        store.release_forked(pid)
    for i, outcome in theirs.items():
        if 0 <= i < len(ids):
            done.setdefault(ids[i], outcome)
    for cid in ids:  # what the helper claimed but never reported
        if cid not in done:
            done[cid] = run_one(cid)
    return done


def _claims(fd: int) -> Any:
    while len(b := os.read(fd, _INDEX_BYTES)) == _INDEX_BYTES:
        yield int.from_bytes(b, "little")


def _receive(fd: int, patience: float) -> dict[int, Any] | None:
    """The helper's outcomes by check index; {} when its pickle is missing or broken (it died), None when
    it has sent nothing for `patience` seconds (it can only be stuck: it runs what this process runs)."""
    chunks = []
    while True:
        ready, _, _ = select.select([fd], [], [], patience)
        if not ready:
            return None
        if not (b := os.read(fd, 1 << 20)):
            break
        chunks.append(b)
    try:
        got = pickle.loads(b"".join(chunks))
    except Exception:  # a partial pickle: the helper died while writing
        return {}
    return got if isinstance(got, dict) else {}


def _helper(prof: store.Profile, ids: list[str], run_one: Callable[[str], Any], tasks_r: int, res_r: int,
            res_w: int) -> None:
    """The forked helper: run the checks it claims, send the outcomes, exit without the interpreter's
    teardown (nothing of its own to flush; its copies of the parent's objects need no freeing)."""
    code = 1
    try:
        os.close(res_r)
        prof.reopen()
        out = {i: run_one(ids[i]) for i in _claims(tasks_r)}
        data = pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)
        view = memoryview(data)
        while view:
            view = view[os.write(res_w, view):]
        code = 0
    except BaseException:  # the parent runs whatever was not reported
        pass
    finally:
        # close before exiting: the parent reads to EOF, and an exiting process's files are closed only
        # after its memory is unmapped (~0.1 s here)
        with contextlib.suppress(OSError):
            os.close(res_w)
        os._exit(code)
