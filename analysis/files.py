"""The one way the readers open an input file: regular files only, and, where a front end confines reading
to root folders (the MCP server's --root), only files that are under a root at the moment they are opened.

Why at open time: a check of the path before the read can be raced (a file renamed to a symlink to outside
the root between the check and the open). Here the file is opened first (never blocking: a FIFO would
wait for a writer forever), then the opened descriptor is checked: its type with fstat, its real location
with the kernel's own name for the descriptor (/proc/self/fd), its link count for hard links. A symbolic
link whose target stays under a root is harmless here (the server's root check refuses links up front).
What fails raises `Unreadable`, an OSError, so every reader's existing "this file is unreadable" path loses that file
alone, with its warning.

Confinement is per process. The processes that open rank files for it get it explicitly: a fork holds it
already, a new interpreter finds it in the environment it is started with (`child_environment`, read when
this module is imported there; this process's own environment is never written), a Ray task takes it as an
argument (`current()`, `confine(*...)`).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path
from typing import IO, Any

_ENV = "STEPDOCTOR_CONFINED_ROOTS"   # set only in the environment a child process is started with
_KINDS = {stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFDIR: "a directory"}


class Unreadable(OSError):
    """An input that is not read: not a regular file, or outside the roots. str() is one line."""

    def __init__(self, path: str | os.PathLike[str], why: str) -> None:
        super().__init__(errno.EPERM, why, os.fspath(path))
        self.why = why

    def __str__(self) -> str:
        return self.why


class _Confinement:
    def __init__(self) -> None:
        self.roots: list[str] | None = None
        self.allow_links = False
        raw = os.environ.get(_ENV)
        if raw:
            with_links, roots = json.loads(raw)
            self.set(roots, bool(with_links))

    def set(self, roots: list[str] | None, allow_links: bool) -> None:
        self.roots = [os.path.realpath(r) for r in roots] if roots is not None else None
        self.allow_links = allow_links

    def admits(self, real: str) -> bool:
        return self.roots is None or any(real == r or real.startswith(r.rstrip("/") + "/") for r in self.roots)


_CONFINED = _Confinement()


def confine(roots: list[str | os.PathLike[str]] | None, allow_links: bool = False) -> None:
    """From now on this process (and the processes its ingest starts) opens inputs only under `roots` (None:
    anywhere)."""
    _CONFINED.set([os.fspath(r) for r in roots] if roots is not None else None, allow_links)


def current() -> tuple[list[str] | None, bool]:
    """This process's confinement as `confine` takes it (roots, allow_links), for a task run elsewhere."""
    return (list(_CONFINED.roots) if _CONFINED.roots is not None else None), _CONFINED.allow_links


def child_environment(env: dict[str, str]) -> dict[str, str]:
    """`env` for a new interpreter started to read inputs for this process: with this process's confinement
    (or without any, where this process has none)."""
    out = {k: v for k, v in env.items() if k != _ENV}
    if _CONFINED.roots is not None:
        out[_ENV] = json.dumps([_CONFINED.allow_links, _CONFINED.roots])
    return out


def kind_of(mode: int) -> str:
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def _check(fd: int, path: str | os.PathLike[str]) -> None:
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise Unreadable(path, f"{kind_of(st.st_mode)}, not a regular file: not read")
    if _CONFINED.roots is None:
        return
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        real = os.path.realpath(path)
    if not _CONFINED.admits(real):
        raise Unreadable(path, "outside the allowed roots when opened (a link or a rename): not read")
    if not _CONFINED.allow_links and st.st_nlink > 1:
        raise Unreadable(path, "a hard link (the file may also be elsewhere): not read without --allow-links")


def open_regular(path: str | os.PathLike[str], mode: str = "rb", **kw: Any) -> IO[Any]:
    """`open(path, mode)` for reading an input: Unreadable unless it is a regular file (under the roots)."""
    if any(c in mode for c in "wax+"):
        raise ValueError("open_regular opens inputs for reading only")
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        _check(fd, path)
        os.set_blocking(fd, True)
        return os.fdopen(fd, mode, **kw)
    except BaseException:
        os.close(fd)
        raise


def read_bytes(path: str | os.PathLike[str]) -> bytes:
    with open_regular(path) as f:
        return f.read()


def read_text(path: str | os.PathLike[str], encoding: str = "utf-8", errors: str = "strict") -> str:
    with open_regular(path, "r", encoding=encoding, errors=errors) as f:
        return f.read()


def by_descriptor(f: IO[Any], path: str | os.PathLike[str]) -> str:
    """A name for the file `f` (opened by open_regular) that a library opening files by name (DuckDB) can
    open: the kernel's /proc/self/fd/N, which is the checked file even if the path was swapped since, and is
    UTF-8 whatever the file's own name; the path itself where /proc is absent."""
    fd_dir = "/proc/self/fd"
    return f"{fd_dir}/{f.fileno()}" if os.path.isdir(fd_dir) else os.fspath(path)


def not_regular(path: str | os.PathLike[str]) -> str | None:
    """Why `path` is not a regular file (following links: "a FIFO", "a broken link" ...), or None when it is;
    without opening it: for listings."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "a broken link" if os.path.islink(path) else "unreadable"
    return None if stat.S_ISREG(mode) else kind_of(mode)


def display(path: str | os.PathLike[str] | Path) -> str:
    """A path as text that can always be encoded: bytes of a non-UTF-8 name (legal on Linux) as \\xNN."""
    s = os.fspath(path)
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return os.fsencode(s).decode("utf-8", "backslashreplace")
