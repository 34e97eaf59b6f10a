"""The profile formats stepdoctor reads: one record each, and the only place a format's name is written.

A format's name is what `RankSource.format` and the `ranks.format` column hold. Its record says which
reader module reads a rank of it (`read_rank(src)`, or `read_rank(src, sink, settle)` for a reader that
streams its finished tables), the device family whose timeline rules apply, the framework, how discovery
tells it (in words, and the layout whose claim finds it), and how much memory a parse worker needs per input byte. Adding a format is one reader package
under `analysis/ingest/` and one row below.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Format:
    name: str
    reader: str                            # the module of analysis/ingest/ that reads one rank
    vendor: Literal["any", "ascend"]       # "any": the trace names its device (CUDA, ROCm, CPU only)
    framework: Literal["pytorch", "mindspore", "any"]
    detection: str                         # how `discover` tells it, in words
    layout: str                            # the layout that finds it on disk (discover/layouts.py: its claim)
    export: Literal["text", "db"] | None = None  # a torch_npu / MindSpore rank export: read from its text or DB
    streams: bool = False                  # hands a rank's finished tables on while it reads
    # A parse worker's peak private memory per input byte beyond its fixed cost (analysis/machine.py):
    # Ascend text 1.05-1.1 x measured on 8 x 400k events (evals/bench/results-2026-11-27-ingest-status.md);
    # Kineto 0.4 x on 8 x 93 MB JSON; formats that build whole-rank columns 2.5, above the 1.8-2.1 x the
    # text reader measured when it held a rank's columns whole.
    peak_per_input_byte: float = 2.5

    @property
    def ascend(self) -> bool:
        return self.vendor == "ascend"

    def read_rank(self) -> Callable[..., Any]:
        """The reader's `read_rank`, its module imported now: a reader's dependencies load only when a rank of
        its format is read, and a broken optional reader cannot break the others."""
        return importlib.import_module(f"{__package__}.{self.reader}").read_rank


_ROWS = (
    Format("kineto", "kineto", "any", "pytorch",
           "a .json / .json.gz file holding an object with traceEvents (PyTorch profiler / Kineto)", layout="traces",
           peak_per_input_byte=0.6),
    Format("ascend_pt_text", "ascend_text", "ascend", "pytorch",
           "a torch_npu rank folder (`*_ascend_pt`, or one holding ASCEND_PROFILER_OUTPUT) read from its text "
           "deliverables (trace_view.json, kernel_details.csv, communication JSON, step_trace_time.csv)",
           layout="rank_folder", export="text", streams=True, peak_per_input_byte=1.2),
    Format("ascend_ms_text", "ascend_text", "ascend", "mindspore",
           "a MindSpore >= 2.5 rank folder (`*_ascend_ms`) read from its text deliverables", layout="rank_folder",
           export="text", streams=True, peak_per_input_byte=1.2),
    Format("ascend_pt_db", "ascend_db", "ascend", "pytorch",
           "a torch_npu rank folder whose ASCEND_PROFILER_OUTPUT holds an SQLite `ascend_pytorch_profiler*.db`, "
           "or such a file on its own", layout="rank_folder", export="db"),
    Format("ascend_ms_db", "ascend_db", "ascend", "mindspore",
           "a MindSpore rank folder whose ASCEND_PROFILER_OUTPUT holds an SQLite `ascend_mindspore_profiler*.db`, "
           "or such a file on its own", layout="rank_folder", export="db"),
    Format("mindspore_legacy", "mindspore_legacy", "ascend", "mindspore",
           "MindSpore < 2.5's flat profiler folder (`*_detail_<rank>.csv`, `step_trace_raw_<rank>_*.csv`)",
           layout="legacy_folder"),
    Format("ascend_msprof", "msprof", "ascend", "any",
           "CANN msprof output: `PROF_*` with device_*/ or host/, a folder holding mindstudio_profiler_output/, "
           "or `msprof_*.db`", layout="msprof_collection"),
)
FORMATS: dict[str, Format] = {f.name: f for f in _ROWS}

# The names other modules compare with (looked up, so a renamed row fails here at import)
KINETO = FORMATS["kineto"].name
MINDSPORE_LEGACY = FORMATS["mindspore_legacy"].name
ASCEND_MSPROF = FORMATS["ascend_msprof"].name
_ASCEND_EXPORTS = {(f.framework, f.export): f.name for f in _ROWS if f.export is not None}


def ascend_export(framework: Literal["pytorch", "mindspore"], kind: Literal["text", "db"]) -> str:
    """The format of a torch_npu / MindSpore rank export read from its text deliverables or its database."""
    return _ASCEND_EXPORTS[(framework, kind)]


def is_ascend(fmt: str | None) -> bool:
    """Whether the Ascend timeline rules (torch_npu's step window and idle) apply to a rank of `fmt`; a rank
    whose format is unknown (no `ranks` row) counts as Ascend, as the breakdown's SQL has it."""
    known = FORMATS.get(fmt or "")
    return known is None or known.ascend


def has_kineto(profile_format: str) -> bool:
    """Whether a profile's format (`ProfileInfo.format`: its ranks' formats joined by '+') holds Kineto ranks."""
    return KINETO in profile_format.split("+")


def export_kind(fmt: str) -> Literal["text", "db"] | None:
    """Whether a torch_npu / MindSpore rank export of format `fmt` is read from its text or its database."""
    known = FORMATS.get(fmt)
    return known.export if known is not None else None
