"""Answers kept beside a profile's cached database: a repeated question on an unchanged profile is a lookup.

A kept answer is the JSON a tool returned. It is found by
  * the database it was computed from, whose name holds the input's fingerprint and the readers' version
    (`cache.py`): a changed input or reader is another database, so its answers are not found;
  * the question: the tool and its arguments, as JSON;
  * the code that computes answers (`code_version`: every .py, .yaml and .sql of analysis/, knowledge/ and
    tools/), so an upgrade or a local edit of a check, a fix or a threshold answers anew;
  * the environment variables that can change an answer (STEPDOCTOR_*, but the cache's location and size, the
    worker count, the memory cap and the MCP token).
It lives in `<database>.answers/` and is removed with its database (`cache.keep_one_per_place`, `cache.trim`);
an answer whose database is gone is never read.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

from .cache import answers_dir, touch

_PACKAGES = ("analysis", "knowledge", "tools")
_CODE = (".py", ".yaml", ".sql")
# environment variables that say where the cache is or how the work runs, not what an answer holds
_NOT_IN_KEY = frozenset({"STEPDOCTOR_CACHE_DIR", "STEPDOCTOR_CACHE_MAX_MB", "STEPDOCTOR_WORKERS",
                         "STEPDOCTOR_MCP_TOKEN", "STEPDOCTOR_ANALYSIS_MEMORY_MB"})


@functools.cache
def code_version() -> str:
    """A digest of the package's code and knowledge files (content, not dates)."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for pkg in _PACKAGES:
        for f in sorted((root / pkg).rglob("*")):
            if f.suffix in _CODE and "__pycache__" not in f.parts:
                h.update(f.relative_to(root).as_posix().encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def _file(db: Path, question: dict[str, Any]) -> Path:
    env = {k: v for k, v in os.environ.items() if k.startswith("STEPDOCTOR_") and k not in _NOT_IN_KEY}
    key = json.dumps({"question": question, "code": code_version(), "env": env}, sort_keys=True, default=str)
    return answers_dir(db) / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.json"


def read(db: Path, question: dict[str, Any]) -> str | None:
    """The kept answer to `question` on the profile whose database is `db`, or None."""
    if not db.is_file():
        return None
    try:
        text = _file(db, question).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    touch(db)   # a hit on the answer is a use of the database (the cache trims the least recently used)
    return text


def keep(db: Path, question: dict[str, Any], text: str) -> None:
    """Keep `text` as the answer to `question`; a cache that cannot be written keeps nothing (the answer
    stands without it)."""
    if not db.is_file():
        return
    target = _file(db, question)
    tmp = target.with_name(f"{target.name}.tmp-{os.getpid()}")
    try:
        target.parent.mkdir(exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
