"""`IngestOptions`: how a front end wants its profiles ingested and kept, as one object.

The CLI builds it once from its flags, the MCP server once from its options; `open_profile` and
`build_database` take it whole, so no option travels as a loose parameter, a process-wide default or an
environment variable written at run time. Every engine builds the same database, so nothing here enters
the cache key.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

Engine = Literal["here", "pool", "ray"]
ENGINES: tuple[Engine, ...] = ("here", "pool", "ray")
ProgressFn = Callable[[int, int, str], None]


@dataclass(frozen=True)
class IngestOptions:
    cache_dir: Path | None = None       # None: $STEPDOCTOR_CACHE_DIR, else the user cache (`cache.cache_root`)
    workers: int | None = None          # pool parse workers (None: as the CPUs and memory allow)
    engine: Engine | None = None        # who parses the ranks on a cache miss (None: chosen by the input's size)
    ray_address: str | None = None      # engine "ray": the cluster (None: RAY_ADDRESS, else a local one)
    progress: ProgressFn | None = None  # (done, total, what) after each rank
    fork: bool = False                  # the caller controls its whole state: fork it for the ingest process
    background: Callable[[], None] | None = None   # work to run in a thread beside the ingest (the CLI's imports)
    memory_mb: int | None = None        # DuckDB memory limit of the analysis connection (None: DuckDB's own)

    def __post_init__(self) -> None:
        if self.engine is not None and self.engine not in ENGINES:
            raise ValueError(f"unknown ingest engine {self.engine!r} (one of {', '.join(ENGINES)})")

    def but(self, **changes: Any) -> IngestOptions:
        """These options with some fields changed."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_environment(cls, **fields: Any) -> IngestOptions:
        """The options a front end starts from: `fields`, and the memory limit from
        STEPDOCTOR_ANALYSIS_MEMORY_MB where it is set (read once, here)."""
        mb = os.environ.get("STEPDOCTOR_ANALYSIS_MEMORY_MB", "").strip()
        if mb.isdigit() and "memory_mb" not in fields:
            fields["memory_mb"] = int(mb)
        if fields.get("cache_dir") is not None:
            fields["cache_dir"] = Path(fields["cache_dir"])
        return cls(**fields)
