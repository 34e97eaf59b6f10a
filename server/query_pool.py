"""The server-wide budget of the read-only SQL tool: every query runs in a worker process
(`query_worker.py`) whose resident memory is held to `process_mb`, and at most `slots` workers exist at once,
so all queries in flight together never hold more than the budget, whatever the SQL asks for.

Resident memory is what the budget counts, and no kernel limit enforces it: DuckDB allocates vectors it
never touches (a list nested 200 levels deep takes a GB of writable mappings and 100 MB resident), so the
worker's `RLIMIT_DATA` is only a backstop at WORKER_DATA_FACTOR times the cap, and the pool reads each busy
worker's resident size every POLL_S and kills it past the cap.

A query waits for a free worker (queued) until its call's wall-clock limit, which covers the whole call:
the wait, the query, and turning its rows into JSON. Past the limit, or as soon as `stop()` says the
caller went away, the worker is killed; the next query starts a fresh one. Idle workers are kept for reuse
(starting one costs a fraction of a second); a worker that ran out of memory is not reused.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

WORKER = Path(__file__).with_name("query_worker.py")
# What a worker process needs beside DuckDB's own memory limit: the interpreter and DuckDB's code, the
# rows turned into Python objects, and the JSON reply.
WORKER_BASE_MB = 256
# The worker's environment: nothing of the server's (a query could read settings derived from it).
# Two malloc arenas: each further one is memory the query cannot use.
WORKER_ENV = {"HOME": "/nonexistent", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "MALLOC_ARENA_MAX": "2"}
# The backstop on a worker's writable mappings, in multiples of its resident cap (see above).
WORKER_DATA_FACTOR = 4
# After its own interrupt a worker has this long to answer before it is killed.
GRACE_S = 2.0
POLL_S = 0.02
PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_bytes(pid: int) -> int:
    """A process's resident memory (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


class QueryFailed(Exception):
    """A query that gave no rows: `kind` is the worker's error kind, the message one line."""

    def __init__(self, kind: str, message: str = "") -> None:
        super().__init__(message or kind)
        self.kind = kind
        self.message = message


class QueryPool:
    """At most `slots` worker processes of `memory_mb` (DuckDB) + WORKER_BASE_MB (process cap) each; a call
    lasts at most `timeout_s` unless it asks for less."""

    def __init__(self, memory_mb: int, budget_mb: int, timeout_s: float) -> None:
        self.memory_mb = memory_mb
        self.timeout_s = timeout_s
        self.process_mb = memory_mb + WORKER_BASE_MB
        self.budget_mb = budget_mb
        self.slots = max(1, budget_mb // self.process_mb)
        self._free = threading.BoundedSemaphore(self.slots)
        self._idle: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()

    # ---- workers ------------------------------------------------------------------------------------
    def _spawn(self) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [sys.executable, "-I", str(WORKER), str(WORKER_DATA_FACTOR * self.process_mb)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            cwd="/", env=WORKER_ENV, close_fds=True,
        )

    def _take(self) -> subprocess.Popen[bytes]:
        with self._lock:
            while self._idle:
                proc = self._idle.pop()
                if proc.poll() is None:
                    return proc
        return self._spawn()

    def _give_back(self, proc: subprocess.Popen[bytes]) -> None:
        with self._lock:
            self._idle.append(proc)

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes]) -> None:
        proc.kill()
        proc.wait()
        for f in (proc.stdin, proc.stdout):
            if f is not None:
                f.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for proc in idle:
            self._kill(proc)

    # ---- one query ----------------------------------------------------------------------------------
    def run(self, request: dict[str, Any], timeout_s: float, stop: Callable[[], bool] | None = None) -> dict[str, Any]:
        """The worker's reply to `request` (see query_worker.answer), or QueryFailed: "busy" (no worker
        free within the limit), "timeout", "gone" (stop() said so), "memory" (the worker died)."""
        deadline = time.monotonic() + timeout_s
        while not self._free.acquire(timeout=POLL_S):
            if stop is not None and stop():
                raise QueryFailed("gone")
            if time.monotonic() > deadline:
                raise QueryFailed("busy")
        try:
            left = max(0.1, deadline - time.monotonic())
            return self._ask(self._take(), {**request, "timeout_s": left}, deadline + GRACE_S, stop)
        finally:
            self._free.release()

    def _ask(self, proc: subprocess.Popen[bytes], request: dict[str, Any], kill_at: float,
             stop: Callable[[], bool] | None) -> dict[str, Any]:
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
        except OSError:
            self._kill(proc)
            raise QueryFailed("memory") from None
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], POLL_S)
            if ready:
                break
            if stop is not None and stop():
                self._kill(proc)
                raise QueryFailed("gone")
            if time.monotonic() > kill_at:
                self._kill(proc)
                raise QueryFailed("timeout")
            if resident_bytes(proc.pid) > self.process_mb * 2**20:
                self._kill(proc)
                raise QueryFailed("memory")
        line = proc.stdout.readline()
        if not line:   # the worker died: its memory cap, or a signal
            self._kill(proc)
            raise QueryFailed("memory")
        reply: dict[str, Any] = json.loads(line)
        if reply.get("error") == "memory":
            self._kill(proc)   # its heap may stay large; a fresh worker costs little
        else:
            self._give_back(proc)
        if "error" in reply:
            raise QueryFailed(str(reply["error"]), str(reply.get("message", "")))
        return reply
