"""A profile is one DuckDB database, built once per distinct input and cached (see docs/scale.md).

Modules: cache (where databases live, the input fingerprint), parse (one rank through its reader), writer
(inserting typed columns in row groups), options (how a front end wants profiles ingested), summaries and
answers (what is kept beside the events), profile (the read-only Profile every analysis reads). Building and
opening a database, with its engines, is the package beside this one, `analysis/build/`.

This package imports neither duckdb nor pandas nor pydantic at the top, so a parse worker that imports it
stays small; they are imported where they are used.
"""

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
from .options import ENGINES, Engine, IngestOptions, ProgressFn
from .parse import Parts, Sink, parse_rank, read_source, reader
from .profile import Profile, analysis_config, is_damaged_cache, profile_info

__all__ = [
    "ENGINES",
    "Engine",
    "IngestOptions",
    "Listing",
    "Parts",
    "Profile",
    "ProgressFn",
    "Sink",
    "analysis_config",
    "cache_root",
    "fingerprint",
    "input_listing",
    "input_stats",
    "is_damaged_cache",
    "parse_rank",
    "profile_info",
    "read_source",
    "reader",
    "reader_version",
    "remove_stale_temporaries",
    "version_stamp",
]
