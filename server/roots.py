"""The folders the MCP server may read, and the checks that keep every read inside them.

A path is resolved (symlinks followed) and must lie under a root. Links are refused unless the server was
started with --allow-links: a symbolic link anywhere in the profile tree, and a regular file with more than
one hard link (st_nlink > 1), which could be a second name for a file outside the roots. Paths with a NUL
byte or longer than the system allows are refused with one line before any filesystem call.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from mcp.server.mcpserver.exceptions import ToolError

from ..analysis.errors import ProfileError

MAX_PATH_CHARS = 4096   # Linux PATH_MAX
MAX_NAME_CHARS = 255    # NAME_MAX


class Roots:
    def __init__(self, roots: Iterable[str | Path] | None = None, *, allow_links: bool = False) -> None:
        given = [Path(r).expanduser() for r in (roots or [])]
        dirs = [p.resolve() for p in given] or [Path.cwd().resolve()]
        for d in dirs:
            if not d.is_dir():
                raise ProfileError(d, "--root must be an existing directory")
        self.dirs: list[Path] = list(dict.fromkeys(dirs))
        self.allow_links = allow_links

    def text(self) -> str:
        return ", ".join(str(d) for d in self.dirs)

    def contains(self, p: Path) -> bool:
        return any(p == d or p.is_relative_to(d) for d in self.dirs)

    @staticmethod
    def _well_formed(raw: str, what: str) -> str:
        text = raw.strip()
        if "\x00" in text:
            raise ToolError(f"the {what} path contains a NUL byte; give a plain path")
        if len(text) > MAX_PATH_CHARS or any(len(part) > MAX_NAME_CHARS for part in text.split("/")):
            raise ToolError(f"the {what} path is longer than the system allows ({MAX_PATH_CHARS} characters, "
                            f"{MAX_NAME_CHARS} per name)")
        return text

    def resolve(self, raw: str, what: str = "profile") -> Path:
        """An existing path under a root, or a ToolError naming the roots."""
        if not raw or not raw.strip():
            raise ToolError(f"empty path; give a {what} path under the allowed roots ({self.text()})")
        p = Path(self._well_formed(raw, what)).expanduser()
        if not p.is_absolute():
            # Hosts start servers in their own working directory, so relative paths mean "under the root".
            p = self.dirs[0] / p
        try:
            linked = p.is_symlink()
            p = p.resolve()
        except (OSError, RuntimeError) as e:   # a loop of links, a name the system refuses
            raise ToolError(f"cannot resolve the {what} path: {e.strerror or type(e).__name__}") from None
        if not self.contains(p):
            raise ToolError(f"{raw} is outside the allowed roots ({self.text()}); give a path under one of them "
                            "(the server was started with these --root folders)")
        if not p.exists():
            raise ToolError(f"no {what} at {p}; the allowed roots are {self.text()}")
        if linked and not self.allow_links:
            raise ToolError(f"{raw} is a symbolic link; links are refused (start the server with --allow-links "
                            "to follow links that stay under the roots)")
        self._check_file(p)
        return p

    def _check_file(self, q: Path) -> None:
        if self.allow_links:
            return
        st = q.lstat()
        if q.is_file() and not q.is_symlink() and st.st_nlink > 1:
            raise ToolError(f"{q} has {st.st_nlink} hard links; it may be another name for a file outside the "
                            "roots, so it is refused (start the server with --allow-links to allow it)")

    def check_tree(self, p: Path) -> None:
        """Refuse a folder holding links: symlinks leading outside the roots always, any link unless
        --allow-links (the readers would follow them)."""
        if not p.is_dir():
            return
        for root, dirs, files in os.walk(p):
            for name in (*dirs, *files):
                q = Path(root) / name
                if q.is_symlink():
                    target = q.resolve()
                    if not self.contains(target):
                        raise ToolError(f"{q} links outside the allowed roots ({self.text()})")
                    if not self.allow_links:
                        raise ToolError(f"{q} is a symbolic link; links are refused (start the server with "
                                        "--allow-links to follow links that stay under the roots)")
                elif name in files:
                    self._check_file(q)
