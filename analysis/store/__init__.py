"""A profile is one DuckDB database, built once per distinct input and cached (see docs/scale.md).

Modules: cache (where databases live, the input fingerprint), parse (one rank through its reader), writer
(inserting typed columns in row groups), wire / children / forks / pool (the local engine: child processes
talking in framed pickles), ray_engine (one Ray task per rank, imported only when asked for), build (which
engine runs), profile (open_profile and the read-only Profile).

This package imports neither duckdb nor pandas nor pydantic at the top, so a parse worker that imports it
stays small; they are imported where they are used.
"""

from .build import PARALLEL_MIN_BYTES, build_database, build_here
from .cache import (
    Listing,
    cache_root,
    fingerprint,
    input_listing,
    input_stats,
    reader_version,
    remove_stale_temporaries,
    version_stamp,
)
from .forks import fork_safe, reap_exiting, release_forked, settle
from .options import ENGINES, Engine, IngestOptions, ProgressFn
from .parse import READERS, STREAMING, Parts, Sink, parse_rank, read_source, reader
from .profile import (
    Profile,
    cached_database,
    discard,
    discard_opened,
    forget_opened,
    is_damaged_cache,
    open_profile,
    profile_info,
)

__all__ = [
    "ENGINES",
    "PARALLEL_MIN_BYTES",
    "READERS",
    "STREAMING",
    "Engine",
    "IngestOptions",
    "Listing",
    "Parts",
    "Profile",
    "ProgressFn",
    "Sink",
    "build_database",
    "build_here",
    "cache_root",
    "cached_database",
    "discard",
    "discard_opened",
    "fingerprint",
    "forget_opened",
    "fork_safe",
    "input_listing",
    "input_stats",
    "is_damaged_cache",
    "open_profile",
    "parse_rank",
    "profile_info",
    "read_source",
    "reader",
    "reader_version",
    "reap_exiting",
    "release_forked",
    "remove_stale_temporaries",
    "settle",
    "version_stamp",
]
