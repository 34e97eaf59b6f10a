"""Process state of the ingest: when this process may be forked, the children released to exit on their own,
and the threads started beside an ingest.

A fork copies whatever a process holds; it is safe only while the process runs one thread and has opened no
database (`fork_safe`). An ingest process marks the pipes its forks must not inherit in NOT_FOR_FORKS.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

from .. import files, one_blas_thread
from ..store.writer import database_opened


def child_env() -> dict[str, str]:
    """The environment of a new child interpreter: one BLAS thread, this process's file confinement."""
    return files.child_environment(dict(one_blas_thread(dict(os.environ))))


class ForkedProcess:
    """What Child uses of subprocess.Popen, for a child made with os.fork()."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(0.005)
        return self.returncode  # type: ignore[return-value]

    def kill(self) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)


# Children whose work is done and whose results are in, left to exit on their own: a process with much
# memory mapped takes a noticeable time to exit, and nothing needs to wait for it (the ingest process reaps
# its workers after it has reported; a host reaps the ingest process in a thread, or, when it asked for
# fork=True, in `settle()` or not at all: a zombie until a short-lived program exits).
_EXITING: list[Any] = []


def release(proc: Any) -> None:
    """A child (Popen or ForkedProcess) whose results are in: reaped later by `settle()` or `reap_exiting()`."""
    _EXITING.append(proc)


def reap_exiting(timeout: float = 30.0) -> int:
    """Wait for the released children; one still alive after `timeout` seconds is killed (it can only be
    stuck: its input is closed and its results were received). Returns how many were reaped."""
    n = 0
    while _EXITING:
        proc = _EXITING.pop()
        n += 1
        with contextlib.suppress(ChildProcessError, OSError):
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return n


# File descriptors a forked parse worker must not keep: the ingest process's pipe to its parent and the
# other workers' pipes (a worker holding another's stdin would keep it from ever seeing its end).
NOT_FOR_FORKS: set[int] = set()


def _single_threaded() -> bool:
    """One OS thread in this process (C threads included, where /proc tells), else one Python thread."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return threading.active_count() == 1


def fork_safe() -> bool:
    """One thread and no database written here: nothing a fork could break (DuckDB may be imported: the
    Ascend reader needs it; an open database has threads and locks that a fork would copy mid-use, and a
    read-only one opened by `open_profile` must be closed first: see `Profile.reopen`)."""
    return hasattr(os, "fork") and not database_opened() and _single_threaded()


def host_may_fork() -> bool:
    """In a process whose whole state its program controls (the CLI asks with `fork=True`), not itself an
    ingest process: it may be forked for the ingest process, which then starts with everything this
    process has imported instead of importing it again in a new interpreter."""
    return not NOT_FOR_FORKS and fork_safe()


def may_fork() -> bool:
    """In an ingest process (it holds pipes kept out of forks) that has not opened its database yet: its
    parse workers are forked. A forked worker starts in milliseconds with the readers loaded, where a new
    interpreter imports them again (pandas and DuckDB for Ascend); later workers (replacing one that died)
    are new interpreters."""
    return bool(NOT_FOR_FORKS) and fork_safe()


_THREADS: list[threading.Thread] = []  # started by start_background / run_in_thread: joined by settle()


def start_background(work: Callable[[], None] | None) -> None:
    if work is not None:
        run_in_thread(work, "background")


def run_in_thread(work: Callable[[], None], name: str) -> None:
    t = threading.Thread(target=work, name=name, daemon=True)
    _THREADS.append(t)
    t.start()


def settle() -> None:
    """Wait for the threads `open_profile` started here (the caller's `background` work, imports) and reap
    the children released since that have exited, without waiting for the others. A host that asked for
    `fork=True` calls it before forking again; the work joined is what it needs next anyway."""
    while _THREADS:
        _THREADS.pop().join()
    for proc in list(_EXITING):
        with contextlib.suppress(ChildProcessError, OSError):
            if proc.poll() is None:
                continue
        _EXITING.remove(proc)


def release_forked(pid: int) -> None:
    """A forked child whose results are in: reaped by `settle()` or `reap_exiting()` once it has exited."""
    release(ForkedProcess(pid))
