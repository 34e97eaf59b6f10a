"""What is fixed about one rank directory before any file of it is read (`RankDesc`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..base import RankSource
from ..formats import FORMATS
from .common import OUTPUT_DIR

# The deliverables read from the output folder, by file name (`RankDesc.present`)
DELIVERABLES = ("trace_view.json", "kernel_details.csv", "step_trace_time.csv", "communication.json",
                "communication_matrix.json", "memory_record.csv", "op_statistic.csv", "api_statistic.csv",
                "operator_details.csv", "operator_memory.csv")


@dataclass(frozen=True, slots=True)
class RankDesc:
    """One rank directory: its paths, rank id, format and which of its files exist (a profile is read-only:
    what exists does not change while it is read)."""

    root: Path
    out: Path                          # ASCEND_PROFILER_OUTPUT/, or the root for a bare copy of the deliverables
    rank: int
    format: str
    framework: str                     # from the format row or the folder name; profiler_info may say otherwise
    present: frozenset[str]            # the DELIVERABLES that are files in `out`
    profiler_info: Path | None         # profiler_info_{rank}.json, else the first profiler_info*.json
    device_infos: tuple[Path, ...]     # PROF_*/device_*/info.json*, sorted

    def path(self, name: str) -> Path:
        """A deliverable's path in the output folder (whether or not it exists)."""
        return self.out / name

    def has(self, name: str) -> bool:
        return name in self.present


def describe(src: RankSource) -> RankDesc:
    """The description of a discovered rank directory (nothing is read; a path that is not a directory gives
    a description with no files, which `read` refuses)."""
    root = Path(src.path)
    out = root / OUTPUT_DIR if (root / OUTPUT_DIR).is_dir() else root
    rank = src.rank if src.rank is not None else 0
    fmt = FORMATS.get(src.format)
    ms = (fmt is not None and fmt.framework == "mindspore") or root.name.endswith("_ascend_ms")
    named = root / f"profiler_info_{rank}.json"
    infos = [named] if named.is_file() else sorted(root.glob("profiler_info*.json"))
    return RankDesc(
        root=root, out=out, rank=rank, format=src.format, framework="mindspore" if ms else "pytorch",
        present=frozenset(n for n in DELIVERABLES if (out / n).is_file()),
        profiler_info=infos[0] if infos else None,
        device_infos=tuple(sorted(p for p in root.glob("PROF_*/device_*/info.json*")
                                  if not p.name.endswith(".done"))),
    )
