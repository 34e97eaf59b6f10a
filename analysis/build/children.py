"""Child processes of the local ingest: a parse worker (`parse_main`) or the ingest process (pool.py's
`ingest_main`), each a new interpreter or a fork of this process, talking in frames (wire.py) over its stdin
and stdout. A child is started with its entry function: this module knows none but its own.

A parse worker gets one RankSource at a time and answers with D frames (rank, table, columns: the typed
numpy columns of `RankTables.parts()`, in chunks of FRAME_ROWS rows) and one R frame (rank, (warnings,
capabilities) | None, error | None). A streaming reader's big tables go as D frames while it reads the next
file, so a rank's tables are never all in the worker; an R frame with an error may follow some.
"""

from __future__ import annotations

import contextlib
import gc
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, BinaryIO

from ..errors import ProfileError
from ..ingest.base import Coded, RankSource
from ..store.parse import Parts, parse_rank
from ..store.writer import FRAME_ROWS, row_count
from . import forks
from .forks import NOT_FOR_FORKS, ForkedProcess, child_env
from .wire import recv, send, widen_pipe

# What a child runs: (its stdin, its stdout) -> None, a module-level function (a new interpreter imports it
# by its module and name)
Main = Callable[[BinaryIO, BinaryIO], None]


class Child:
    """A child running `main` under `run_child`: stdin/stdout carry frames, stderr goes to a file. A new
    interpreter (`python -c`), or with fork=True a fork of this process (see may_fork)."""

    def __init__(self, main: Main, fork: bool = False) -> None:
        self.err = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self.proc: Any
        if fork:
            self._fork(main)
        else:
            # os._exit: all output is flushed and every file closed by then; the interpreter's teardown
            # (long with pandas and DuckDB loaded) would only compete with the host for a core
            code = (f"import sys; sys.path[:] = {sys.path!r}; from {main.__module__} import {main.__name__} as main; "
                    f"from {__name__} import run_child; run_child(main); import os; os._exit(0)")
            self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=self.err, bufsize=0,
                                         env=child_env(), close_fds=True)
            self.inp: BinaryIO = self.proc.stdin
            self.out: BinaryIO = self.proc.stdout
            widen_pipe(self.out.fileno())
        self.task: RankSource | None = None  # the rank it is parsing or sending
        self.finished = 0                     # tasks completed
        self.rank: int | None = None          # the rank id its task's first rows came with
        self.refused = False                  # that id was taken by another source: its rows are dropped
        self.released = False                 # see release()

    def _fork(self, main: Main) -> None:
        task_r, task_w = os.pipe()
        out_r, out_w = os.pipe()
        widen_pipe(out_w)
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the ingest process's code
            code = 1
            try:
                os.dup2(task_r, 0)
                os.dup2(out_w, 1)
                os.dup2(self.err.fileno(), 2)
                for fd in {task_r, task_w, out_r, out_w, *NOT_FOR_FORKS}:
                    if fd > 2:
                        with contextlib.suppress(OSError):
                            os.close(fd)
                run_child(main, os.fdopen(0, "rb", buffering=0, closefd=False))
                code = 0
            except BaseException:  # reported on stderr, like a dying interpreter
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        os.close(task_r)
        os.close(out_w)
        self.proc = ForkedProcess(pid)
        self.inp = os.fdopen(task_w, "wb", buffering=0)
        self.out = os.fdopen(out_r, "rb", buffering=0)
        NOT_FOR_FORKS.update((task_w, out_r, self.err.fileno()))

    def send(self, kind: bytes, obj: Any) -> bool:
        try:
            send(self.inp, kind, obj)
            return True
        except (BrokenPipeError, OSError):
            return False

    def close_input(self) -> None:
        with contextlib.suppress(OSError):
            self.inp.close()

    def death(self) -> str:
        """Why the child ended: exit status and the last line it wrote to stderr."""
        try:
            rc = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.err.seek(0)
        lines = [ln for ln in self.err.read()[-4000:].decode("utf-8", "replace").splitlines() if ln.strip()]
        how = f"killed by signal {-rc}" if rc < 0 else f"exit code {rc}"
        if rc == -9:
            how += ", out of memory?"
        return how + (f": {lines[-1].strip()}" if lines else "")

    def close(self) -> None:
        self.close_input()
        if self.proc.poll() is None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._close_files()

    def _close_files(self) -> None:
        """Our ends of its output and error files (no longer kept out of later forks)."""
        for f in (self.out, self.err):
            with contextlib.suppress(OSError, ValueError):
                NOT_FOR_FORKS.discard(f.fileno())
            with contextlib.suppress(OSError):
                f.close()

    def kill(self) -> None:
        if self.released:
            return
        if self.proc.poll() is None:
            self.proc.kill()
        self.close()

    def release(self) -> None:
        """Its work is done and received: close our ends and let it exit without waiting (forks.release)."""
        if self.released:
            return
        self.released = True
        self.close_input()
        self._close_files()
        forks.release(self.proc)


def run_child(main: Main, inp: BinaryIO | None = None) -> None:
    """Entry point of a child (see Child): its frames go to a duplicate of stdout, a stray print to stderr."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    gc.freeze()  # the imported modules never need collecting
    main(inp or sys.stdin.buffer, out)


def parse_main(inp: BinaryIO, out: BinaryIO) -> None:
    """Parse worker: for each task (a RankSource), D frames (rank, table, columns) then one R frame
    (rank, (warnings, capabilities) | None, error | None); D frames of a streaming reader's tables go as
    it reads, so an R frame with an error may follow some. Sending blocks until the ingest process has
    taken the frames in; a thread sending one rank while the next is parsed was measured no faster on
    two cores (the cores are busy either way) and holds one more rank."""

    def sink(rank: int, table: str, cols: dict[str, Any]) -> None:
        _send_table(out, rank, table, cols)

    while (frame := recv(inp)) is not None:
        src: RankSource = frame[1]
        try:
            t, parts = parse_rank(src, sink)
        except ProfileError as e:
            _send_rank(out, src.rank, [], None, str(e))  # (the ingest process removes rows sent before)
            continue
        _send_rank(out, t.rank, parts, (list(t.warnings), sorted(t.capabilities)), None)
        del t, parts


def _send_rank(out: BinaryIO, rank: int, parts: Parts, info: Any, err: str | None) -> None:
    for table, cols in parts:
        _send_table(out, rank, table, cols)
    send(out, b"R", (rank, info, err))


def _send_table(out: BinaryIO, rank: int, table: str, cols: dict[str, Any]) -> None:
    """One block of a table as D frames of at most FRAME_ROWS rows."""
    for chunk in _chunks(cols):
        send(out, b"D", (rank, table, chunk))


def _chunks(cols: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """A block of columns in slices of FRAME_ROWS rows; a slice of a coded column carries only its labels."""
    n = row_count(cols)
    if n <= FRAME_ROWS:
        yield cols
        return
    for i in range(0, n, FRAME_ROWS):
        chunk = {c: a[i:i + FRAME_ROWS] for c, a in cols.items()}
        yield {c: a.compact() if isinstance(a, Coded) and len(a.labels) > FRAME_ROWS // 8 else a
               for c, a in chunk.items()}
