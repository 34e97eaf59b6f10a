"""Profile references for the MCP tools: a path under the roots or an id from load_profile, one opened
Profile per path (a lock per path: two concurrent loads ingest once)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path

from mcp.server.mcpserver.exceptions import ToolError

from ..analysis.build import discard
from ..analysis.errors import ProfileError
from ..analysis.ingest.discover import MSPROF_OUTPUT_DIR, OUTPUT_DIR, discover
from ..analysis.store import IngestOptions, Profile
from ..tools import api
from .roots import Roots

logger = logging.getLogger("stepdoctor.mcp")

# --------------------------------------------------------------------------------------------------------
# Allowed roots and the profile registry
# --------------------------------------------------------------------------------------------------------


def profile_id_of(prof: Profile) -> str:
    """A short id: the head of the store fingerprint (the cache file name), stable across restarts."""
    return prof.db_path.stem[:12]


ProgressCb = Callable[[int, int, str], None]


class ProfileRegistry:
    """profile id -> path, and path -> opened Profile, shared by all tool calls (thread-safe)."""

    def __init__(self, roots: Roots, ingest: IngestOptions | None = None) -> None:
        self.roots = roots
        self.ingest = ingest or IngestOptions.from_environment()   # built once, by the server
        self._lock = threading.Lock()
        self._path_locks: dict[Path, threading.Lock] = {}
        self._by_path: dict[Path, Profile] = {}
        self._ids: dict[str, Path] = {}

    def load(
        self, path: Path, *, progress: ProgressCb | None = None, reopen: bool = False
    ) -> tuple[str, Profile]:
        """Open (ingesting once) a resolved path. One lock per path: a second caller waits, then reuses."""
        with self._lock:
            lock = self._path_locks.setdefault(path, threading.Lock())
        with lock:
            prof = None if reopen else self._by_path.get(path)
            if prof is None:
                self._check_reads(path)
                prof = api.load(str(path), self.ingest.but(progress=progress))
                with self._lock:
                    self._by_path[path] = prof
                    self._ids[profile_id_of(prof)] = path
            return profile_id_of(prof), prof

    def _check_reads(self, path: Path) -> None:
        """The links check over what the readers will read: PATH's tree, and the folder above it that
        discovery reads for a file inside a rank folder (its trace_view.json, its DB, ASCEND_PROFILER_OUTPUT/)."""
        self.roots.check_tree(path)
        if path.is_dir() and path.name not in (OUTPUT_DIR, MSPROF_OUTPUT_DIR):
            return   # discovery reads only under a folder it is given, except a deliverables folder's rank
        try:
            sources = discover(path).sources
        except ProfileError:
            return   # the load says what is wrong with it
        for src in sources:
            where = src.path.resolve()
            if where == path or where.is_relative_to(path):
                continue
            if not self.roots.contains(where):
                raise ToolError(f"{path} is read as part of {where}, which is outside the allowed roots "
                                f"({self.roots.text()})")
            self.roots.check_tree(where)

    def drop(self, prof: Profile) -> None:
        """Forget a loaded profile and delete its cache database (found damaged): the next call reads the
        profile again."""
        with self._lock:
            for path, held in list(self._by_path.items()):
                if held is prof:
                    del self._by_path[path]
        discard(prof)

    def known_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._ids)

    def by_id(self, profile_id: str) -> Profile:
        pid = profile_id.strip()
        with self._lock:
            path = self._ids.get(pid)
        if path is None:
            known = self.known_ids()
            raise ToolError(
                f"unknown profile_id {profile_id!r}; loaded ids: {', '.join(known) or 'none'}; "
                "call load_profile(path) first (ids last while the server runs)"
            )
        return self.load(path)[1]

    def get(self, path: str | None, profile_id: str | None, *, what: str = "profile") -> Profile:
        """The Profile for a tool's `path` / `profile_id` arguments."""
        if path and profile_id:
            raise ToolError(f"give either path or profile_id for the {what}, not both")
        if profile_id:
            return self.by_id(profile_id)
        if path:
            return self.load(self.roots.resolve(path, what))[1]
        raise ToolError(
            f"give the {what}: path (a profile folder or Kineto trace under {self.roots.text()}) "
            "or profile_id (from load_profile)"
        )

    def ref(self, value: str) -> Profile:
        """A profile given as one string that is either a loaded profile_id or a path (compare_runs)."""
        with self._lock:
            is_id = value.strip() in self._ids
        return self.by_id(value) if is_id else self.load(self.roots.resolve(value))[1]


