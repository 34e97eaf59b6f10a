"""The local ingest engine: one ingest process owns the database being built and feeds ranks, one at a
time, to parse workers (children.py), inserting what comes back as it arrives (writer.py).

The ingest process is a fresh interpreter (`python -c`: no fork of a threaded host, no re-run of an
unguarded `__main__`), except for a caller that controls its whole state and asks for `fork=True` (the
CLI): while it runs one thread and has no database open it is forked, so the ingest process starts at once
with what the caller has loaded. Parse workers are forked from the ingest process after it imported the
readers and before it opens the database (`forks.may_fork`), as many as the usable CPUs and the available
memory allow for the largest rank (`machine.plan_workers`). The caller only waits, passing progress on.
"""

from __future__ import annotations

import collections
import contextlib
import importlib
import selectors
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from ..errors import ProfileError
from ..ingest.base import RankSource
from ..ingest.discover import Discovery
from ..store.options import ProgressFn
from ..store.parse import reader
from ..store.writer import Writer, connect_for_writing
from .children import Child, parse_main
from .forks import NOT_FOR_FORKS, host_may_fork, may_fork, reap_exiting, run_in_thread, start_background
from .wire import readable, recv, send

if TYPE_CHECKING:
    import duckdb



def ingest_main(inp: BinaryIO, out: BinaryIO) -> None:
    """Ingest process: build the database described by the J frame. It answers H (started), then P
    frames (progress), and last S (ranks stored, errors) or E (why the build failed)."""
    NOT_FOR_FORKS.add(out.fileno())  # its parse workers are forked from it: they must not hold this
    frame = recv(inp)
    if frame is None:
        return
    job = frame[1]
    send(out, b"H", None)
    cons: list[duckdb.DuckDBPyConnection] = []

    def open_writer() -> Writer:
        con, rows = connect_for_writing(Path(job["db"]))
        cons.append(con)
        return Writer(con, rows)

    # The readers are imported once here, before the workers are forked, so each worker starts with them
    # loaded (the Ascend reader pulls in pandas and DuckDB, otherwise imported again by each). A reader that
    # cannot be imported is left to fail in the worker, where it becomes that rank's one-line error.
    for fmt in sorted({s.format for s in job["sources"]}):
        with contextlib.suppress(ProfileError):
            reader(fmt)
    try:
        try:
            writer, stored, errors = run_workers(job["sources"], job["workers"], open_writer,
                                                  lambda d, n, label: send(out, b"P", (d, n, label)))
            writer.finish([*job["warnings"], *(f"rank skipped: {e}" for e in errors)])
        finally:
            for con in cons:
                con.close()
    except Exception as e:  # reported to the parent, which raises it
        send(out, b"E", f"{type(e).__name__}: {e}")
        raise SystemExit(1) from None
    send(out, b"S", (stored, errors))
    reap_exiting()  # the parse workers, after the parent has its answer


def run_workers(sources: list[RankSource], workers: int, open_writer: Callable[[], Writer],
                progress: Callable[[int, int, str], None]) -> tuple[Writer, int, list[str]]:
    """Hand the ranks to `workers` parse workers, one at a time each; insert each block of rows as it
    arrives: from a worker, the frames it has ready, then from whichever worker is ready. A worker that
    sends a parsed rank has its frames ready one after the other and is read to its rank's end while
    the others parse (reading frames from all senders in turn keeps every worker waiting on this one
    process); a worker that streams a rank's tables as it reads them (`RankTables.stream`) sends a frame
    now and then, and waiting for its next one would stall the others. A rank's blocks arrive in order,
    each a run of rows. The database is opened (`open_writer`) once the workers are started, while they
    parse their first ranks. A worker that dies, or whose rank fails after it sent rows, fails its rank
    (the rows it sent are removed); a dead one is replaced. Returns (writer, ranks stored, errors).
    """
    pool = _Workers(sources, progress)
    try:
        for _ in range(max(1, min(workers, len(sources)))):
            pool.start()
        pool.writer = open_writer()
        pool.run()
    finally:
        for w in pool.children:
            w.kill()
    return pool.writer, pool.stored, pool.errors


class _Workers:
    """The state of `run_workers`: the ranks left, the parse workers, what was stored or failed."""

    def __init__(self, sources: list[RankSource], progress: Callable[[int, int, str], None]) -> None:
        self.n = len(sources)
        self.todo = collections.deque(sources)
        self.progress = progress
        self.stored = self.done = self.startup_failures = 0
        self.errors: list[str] = []
        self.sel = selectors.DefaultSelector()
        self.children: list[Child] = []
        self.writer: Writer

    def start(self) -> None:
        w = Child(parse_main, fork=may_fork())
        self.children.append(w)
        self.sel.register(w.out, selectors.EVENT_READ, w)
        self.assign(w)

    def assign(self, w: Child) -> None:
        w.task = self.todo.popleft() if self.todo else None
        w.rank, w.refused = None, False
        if w.task is None or not w.send(b"T", w.task):
            w.close_input()  # no more work (or it is gone): it exits, its EOF is handled in run()

    def finished(self, label: Any, err: str | None) -> None:
        if err:
            self.errors.append(err)
        else:
            self.stored += 1
        self.done += 1
        self.progress(self.done, self.n, f"rank {label}")

    def receive(self, w: Child, task: RankSource) -> bool | None:
        """Handle one frame of `w`'s task: None when more follow (D: rows), True when the task is over (R),
        False when `w` died first."""
        writer = self.writer
        frame = recv(w.out)
        if frame is None:
            if w.rank is not None and not w.refused:
                writer.abort(w.rank)  # the rows it had sent
            return False
        kind, obj = frame
        if kind == b"D":
            r, table, cols = obj
            if w.rank is None:
                w.rank, w.refused = r, not writer.claim(r)
            if not w.refused:
                writer.data(r, table, cols)
            return None
        r, info, err = obj  # R: the task is over
        if err is None:
            if w.rank is None:
                w.rank, w.refused = r, not writer.claim(r)
            if w.refused:
                err = f"{task.path}: rank {r} was already read from another source"
            elif (why := writer.done(r, *info)) is not None:
                err = f"{task.path}: {why}"
        elif w.rank is not None and not w.refused:
            writer.abort(w.rank)  # it failed after sending tables it had finished
        self.finished(r, err)
        w.finished += 1
        return True

    def run(self) -> None:
        while self.sel.get_map():
            for key, _ in self.sel.select():
                w: Child = key.data
                got = self.receive(w, w.task) if w.task is not None else False
                while got is None and readable(w.out):  # (see run_workers)
                    got = self.receive(w, w.task)  # type: ignore[arg-type]
                if got is None:
                    continue
                if got:
                    self.assign(w)
                    if w.task is None:  # nothing left for it: its exit is not waited for
                        self.sel.unregister(w.out)
                        w.release()
                    continue
                self.sel.unregister(w.out)  # EOF: done with its tasks, or died
                if w.task is None:
                    w.close()
                    continue
                self.died(w)

    def died(self, w: Child) -> None:
        """A worker ended before its task was over: the task fails; replace it, unless none can start."""
        assert w.task is not None
        why = w.death()
        w.close()
        self.finished(w.task.rank, f"{w.task.path}: cannot parse: the parse worker died ({why})")
        self.startup_failures += not w.finished
        if self.startup_failures >= 3 and not self.stored:  # workers cannot even start: give up
            while self.todo:
                src = self.todo.popleft()
                self.finished(src.rank, f"{src.path}: cannot parse: the parse worker died ({why})")
        elif self.todo:
            self.start()


def _preload() -> None:
    with contextlib.suppress(Exception):  # a failing import fails again where it is used, with its message
        importlib.import_module("duckdb")
        importlib.import_module("..models", __package__)


def build_in_children(disc: Discovery, out: Path, workers: int, progress: ProgressFn | None,
                       fork: bool = False, background: Callable[[], None] | None = None
                       ) -> tuple[int, list[str]] | None:
    """Build the database in an ingest process with `workers` parse workers; (ranks stored, errors), or None
    when no child interpreter could start here (the caller then builds in this process)."""
    # Forked, the ingest process starts at once with what this process has loaded; it imports the readers
    # itself while `background` (the CLI: pandas, the checks, the models) runs here on the other core
    # (importing them here first and forking after leaves a core idle meanwhile: slower).
    child = Child(ingest_main, fork=fork and host_may_fork())
    start_background(background)
    # this process opens the database next, with DuckDB and the pydantic header model: load them while it
    # only waits for the child
    run_in_thread(_preload, "preload")
    started = False
    result = failure = None
    try:
        if child.send(b"J", {"db": str(out), "sources": disc.sources, "workers": workers,
                             "warnings": list(disc.warnings)}):
            child.close_input()
            while (frame := recv(child.out)) is not None:
                kind, obj = frame
                if kind == b"H":
                    started = True
                elif kind == b"P":
                    if progress:
                        progress(*obj)
                elif kind == b"S":
                    result = obj
                    break  # the database is complete and closed: the child's exit is not waited for
                elif kind == b"E":
                    failure = obj
        if result is None:
            why = failure or f"the ingest process died ({child.death()})"
            if not started:  # no child interpreter could run here (embedded Python, odd sys.executable...)
                child.kill()
                for p in (out, Path(f"{out}.wal")):
                    p.unlink(missing_ok=True)
                return None
            raise RuntimeError(f"ingest failed: {why}")
        child.release()
        if not fork:  # a host that asked for fork=True may fork again (settle() reaps then)
            threading.Thread(target=reap_exiting, daemon=True).start()
    finally:
        child.kill()
    return result
