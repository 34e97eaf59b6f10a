"""Hang diagnosis from Flight Recorder dumps and stack snapshots (no profile needed; torch not needed)."""

from __future__ import annotations

from pathlib import Path

from ..errors import ProfileError
from .diagnose import find_divergences
from .frdump import DumpSet, dump_files, read_dumps
from .models import Divergence, HangReport, StackReport
from .stacks import group_stacks, stack_files

__all__ = ["HangReport", "diagnose_hang"]


MAX_DEPTH = 3   # dumps sit in the folder given or a few levels below (one folder per node or per job)


def _folders(path: Path, depth: int = 0) -> list[Path]:
    out = [path]
    if depth < MAX_DEPTH:
        for p in sorted(path.iterdir()):
            if p.is_dir() and not p.is_symlink():
                out += _folders(p, depth + 1)
    return out


def _read_all_dumps(folders: list[Path]) -> tuple[DumpSet, list[str]]:
    """The dump set under PATH with the most ranks, then the most entries (a folder may also hold an
    on-demand dump of an idle recorder beside the one written on timeout), and notes on the sets not used."""
    sets = [read_dumps(files) for folder in folders for files in dump_files(folder)]
    sets = [ds for ds in sets if ds.dumps or ds.unreadable]
    if not sets:
        return DumpSet({}, []), []

    def size(ds: DumpSet) -> tuple[int, int]:
        return len(ds.dumps) + len(ds.unreadable), sum(len(d.entries) for d in ds.dumps.values())

    best = max(sets, key=size)
    notes = [f"{d.path}: a dump with no entries (a recorder that recorded nothing), not used"
             for ds in sets if ds is not best for d in ds.dumps.values() if not d.entries]
    notes += [f"{d.path}: rank {r}'s dump holds no entries: its collectives are unknown"
              for r, d in best.dumps.items() if not d.entries]
    return best, notes


def _verdict(divs: list[Divergence], stacks: StackReport | None, missing: list[int]) -> str:
    if divs:
        d = divs[0]
        where = ""
        if stacks:
            for g in stacks.outliers:
                if set(d.ranks) & set(g.ranks) and g.frames:
                    where = f"; its stack: {' <- '.join(g.frames[:3])}"
                    break
        return d.message.rstrip(".") + where + "."
    if stacks and stacks.outliers:
        g = stacks.outliers[0]
        return f"rank(s) {g.ranks} are elsewhere than the others: {' <- '.join(g.frames[:3])}."
    if missing:
        return f"no divergence among the dumps read; ranks {missing} have no dump, so the cause may be there."
    return "no divergence found: every rank issued the same collectives in every process group."


def diagnose_hang(path: str | Path) -> HangReport:
    """Flight Recorder dumps and/or py-spy stack files under PATH -> HangReport. Raises ProfileError when
    neither is there."""
    p = Path(path).expanduser()
    if not p.is_dir():
        raise ProfileError(p, "not a folder: pass the folder holding the Flight Recorder dumps or stack files")
    folders = _folders(p)
    ds, notes = _read_all_dumps(folders)
    sfiles = stack_files(folders)
    if not ds.dumps and not sfiles:
        detail = f" ({len(ds.unreadable)} unreadable: {ds.unreadable[0][1]})" if ds.unreadable else ""
        raise ProfileError(p, f"no Flight Recorder dump (<prefix><rank>) or py-spy JSON stack file{detail}")
    divs, missing = find_divergences(ds) if ds.dumps else ([], [])
    stacks = group_stacks(sfiles) if sfiles else None
    warnings = [f"{f}: {why}; that rank's collectives are unknown" for f, why in ds.unreadable] + notes
    if missing:
        warnings.append(f"ranks {missing} are in a process group but have no dump: their state is unknown")
    return HangReport(path=str(p), dump_ranks=sorted(ds.dumps), missing_dumps=missing,
                      unreadable=[f"{f}: {w}" for f, w in ds.unreadable], divergences=divs, stacks=stacks,
                      verdict=_verdict(divs, stacks, missing), warnings=warnings)
