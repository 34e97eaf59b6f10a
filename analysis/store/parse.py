"""Parsing one rank: its format's reader (analysis/ingest/formats.py), its failures turned into one-line
ProfileErrors, and the rank's summaries computed from the typed columns.

This module imports neither duckdb nor pandas nor pydantic at the top, so a parse worker that imports it
stays small; a reader's own dependencies load when a rank of its format is read.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import ProfileError
from ..ingest.base import RankSource, RankTables, StoreError
from ..ingest.formats import FORMATS
from .summaries import RankSummary

if TYPE_CHECKING:
    import numpy as np


def reader(fmt: str) -> Callable[..., RankTables]:
    """The `read_rank` of format `fmt`'s reader (analysis/ingest/formats.py), or a one-line ProfileError."""
    if fmt not in FORMATS:
        raise ProfileError(None, f"no reader for format {fmt}")
    try:
        return FORMATS[fmt].read_rank()
    except ModuleNotFoundError as e:
        raise ProfileError(None, f"no reader for format {fmt} in this build ({e.name})") from None


Sink = Callable[[int, str, "dict[str, np.ndarray]"], None]


def read_source(src: RankSource, sink: Sink | None = None) -> RankTables:
    """Parse one rank; every failure becomes a ProfileError naming the file. `sink`: see `parse_rank`."""
    try:
        read = reader(src.format)  # an unknown format: its one-line ProfileError
        if sink is not None and FORMATS[src.format].streams:
            return read(src, sink, trim)
        return read(src)
    except (ProfileError, StoreError):
        raise
    except MemoryError:
        raise ProfileError(src.path, "out of memory while parsing") from None
    except Exception as e:  # a reader bug must still give the one-line error, not a traceback
        raise ProfileError(src.path, f"cannot parse: {type(e).__name__}: {e}") from None


Parts = list[tuple[str, "dict[str, np.ndarray]"]]


def parse_rank(src: RankSource, sink: Sink | None = None) -> tuple[RankTables, Parts]:
    """Parse one rank and type its columns for the insert; every failure is a ProfileError naming the file.

    `sink(rank, table, columns)`, for a reader that streams (`Format.streams`): its big tables' typed blocks as
    the reader finishes them (they are then not in the parts returned); the rank may fail after some were given.

    The parts end with the rank's summaries (`summaries.RankSummary`: its per-step breakdown and kernel
    totals), computed here from the same typed blocks, streamed or not, so every engine stores them."""
    summary = RankSummary(src.rank if src.rank is not None else -1)
    try:
        t = read_source(src, summary.tee(sink) if sink is not None else None)
        parts = list(t.parts())
        summary.rank = t.rank
        for table, cols in parts:
            summary.add(table, cols)
        return t, parts + summary.parts(t.warnings)
    except MemoryError:
        raise ProfileError(src.path, "out of memory while parsing") from None
    except ProfileError:
        raise
    except Exception as e:  # a value the schema cannot take: the rank is skipped
        raise ProfileError(src.path, f"cannot store the parsed rows: {e}") from None


class _MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                "fsmblks", "uordblks", "fordblks", "keepcost")]


_GLIBC: list[Any] = []
TRIM_MIN_FREE = 32 << 20


def trim() -> None:
    """Give the heap's free pages back to the system when at least TRIM_MIN_FREE bytes of it are free
    (glibc `mallinfo2` / `malloc_trim`; elsewhere nothing). A parse worker calls it when a streaming reader
    has dropped a big phase's columns (`RankTables.settled`): the freed blocks sit among live ones, and
    glibc only returns the top of its heap by itself. Below the threshold giving pages back costs more than
    it saves: each page given back faults again when it is reused."""
    if not _GLIBC:
        try:
            libc = ctypes.CDLL(None)
            libc.mallinfo2.restype = _MallInfo2
            _GLIBC.append((libc.mallinfo2, libc.malloc_trim))
        except (OSError, AttributeError):
            _GLIBC.append(None)
    if _GLIBC[0] is not None:
        info, malloc_trim = _GLIBC[0]
        if info().fordblks >= TRIM_MIN_FREE:
            malloc_trim(0)
