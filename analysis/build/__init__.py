"""Building and opening a profile's database, beside the store it writes.

Modules: open (open_profile: the cache database reused or built, the read-only Profile memoised per
database), engine (which engine parses the ranks, and the serial one), pool / children / wire / forks (the
local engine: child processes talking in framed pickles, forked where this process may be), ray_engine and
locality (one Ray task per rank, pinned to the node holding its files; Ray is imported only when asked for).

Reads the store (parse, writer, cache, options, Profile) and the ingest; nothing in the store reads it.
"""

from .engine import PARALLEL_MIN_BYTES, build_database, build_here
from .forks import fork_safe, reap_exiting, release_forked, settle
from .open import cached_database, discard, discard_opened, forget_opened, open_profile, usable_cache

__all__ = [
    "PARALLEL_MIN_BYTES",
    "build_database",
    "build_here",
    "cached_database",
    "discard",
    "discard_opened",
    "forget_opened",
    "fork_safe",
    "open_profile",
    "reap_exiting",
    "release_forked",
    "settle",
    "usable_cache",
]
