"""`diagnose_hang`: a folder of Flight Recorder dumps and stack snapshots -> the `HangReport`."""

from __future__ import annotations

from pathlib import Path

from ..errors import ProfileError
from ..text import span_text
from .diagnose import find_divergences
from .frdump import DumpSet, dump_files, rank_of_file, read_dumps
from .models import Divergence, HangReport, StackReport
from .stacks import group_stacks, stack_files

MAX_DEPTH = 3   # dumps sit in the folder given or a few levels below (one folder per node or per job)


def _folders(path: Path, depth: int = 0) -> list[Path]:
    out = [path]
    if depth < MAX_DEPTH:
        try:
            subs = sorted(p for p in path.iterdir() if p.is_dir() and not p.is_symlink())
        except OSError:
            return out
        for p in subs:
            out += _folders(p, depth + 1)
    return out


def _read_all_dumps(folders: list[Path]) -> tuple[DumpSet, list[str]]:
    """Dumps of one prefix gathered over every folder (one folder per node is common); where several prefixes
    hold dumps, the one with the most ranks, then the most entries (a folder may also hold an on-demand dump of
    an idle recorder beside the one written on timeout). Notes say what was not used."""
    by_prefix: dict[str, dict[int, list[Path]]] = {}
    for folder in folders:
        for prefix, files in dump_files(folder).items():
            for rank, p in files.items():
                by_prefix.setdefault(prefix, {}).setdefault(rank, []).append(p)
    if not by_prefix:
        return DumpSet({}, []), []
    notes: list[str] = []
    sets: dict[str, DumpSet] = {}
    for prefix, ranks in by_prefix.items():
        ds = read_dumps({r: ps[0] for r, ps in ranks.items()})
        for r, ps in ranks.items():
            if len(ps) > 1:
                notes.append(f"rank {r} has {len(ps)} dumps named {prefix!r}<rank> ({', '.join(map(str, ps))}): "
                             f"only {ps[0]} was read")
        sets[prefix] = ds

    def size(ds: DumpSet) -> tuple[int, int]:
        return len(ds.dumps) + len(ds.unreadable), sum(len(d.entries) for d in ds.dumps.values())

    best_prefix = max(sets, key=lambda k: size(sets[k]))
    best = sets[best_prefix]
    for prefix, ds in sets.items():
        if prefix != best_prefix:
            files = [str(d.path) for d in ds.dumps.values()] + [f for f, _ in ds.unreadable]
            shown = ", ".join(files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
            empty = all(not d.entries for d in ds.dumps.values())
            notes.append(f"{shown}: not used" + (": a dump with no entries (a recorder that recorded nothing)"
                                                  if empty else f"; the {len(best.dumps)} dumps named "
                                                  f"{best_prefix!r}<rank> were read"))
    empty = [r for r, d in best.dumps.items() if not d.entries]
    if empty:
        one = best.dumps[empty[0]].path
        notes.append(f"{one}" + (f" and {len(empty) - 1} more dump(s)" if len(empty) > 1 else "")
                     + f": no entries (rank(s) {span_text(empty)}): their collectives are unknown")
    notes += [f"{d.path}: {n}" for d in best.dumps.values() for n in d.notes]
    return best, notes


def _world(ds: DumpSet) -> set[int]:
    """The ranks the job has as far as the files say: every dump file's rank (read or not) and the ranks
    between 0 and the highest (torchrun numbers ranks from 0 with no gap)."""
    ranks = set(ds.dumps)
    for f, _ in ds.unreadable:
        if (r := rank_of_file(Path(f).name)) is not None:
            ranks.add(r)
    return set(range(max(ranks) + 1)) if ranks else set()


_RECV = ("recv ", "irecv ", "recv_object_list ")
_TORCH_FILES = ("distributed_c10d.py", "c10d_logger.py", "tensor.py", "_ops.py")


def _user_frame(frames: list[str]) -> str:
    """The first frame outside torch.distributed's wrappers: the line of the user's code that called it."""
    return next((f for f in frames if not any(t in f for t in _TORCH_FILES)), frames[0] if frames else "?")


def _stack_of(stacks: StackReport | None, ranks: list[int]) -> str:
    if not stacks:
        return ""
    for g in stacks.groups:
        if set(ranks) & set(g.ranks) and g.frames:
            return " <- ".join(g.frames[:3])
    return ""


def _verdict(divs: list[Divergence], stacks: StackReport | None, missing: list[int], empty: bool) -> str:
    if divs:
        d = divs[0]
        where = _stack_of(stacks, d.ranks) if d.ranks else ""
        more = f" ({len(divs) - 1} more cause(s) below)" if len(divs) > 1 else ""
        return d.message.rstrip(".") + (f"; its stack: {where}" if where else "") + more + "."
    if stacks and stacks.outliers:
        g = stacks.outliers[0]
        return f"rank(s) {g.ranks} are elsewhere than the others: {' <- '.join(g.frames[:3])}."
    if stacks and stacks.groups and all(g.frames and g.frames[0].startswith(_RECV) for g in stacks.groups):
        parts = "; ".join(f"ranks {g.ranks} in {_user_frame(g.frames)}" for g in stacks.groups[:4])
        return (f"every rank waits to receive and none is sending: a point-to-point deadlock ({parts}); the "
                "send that should match one of these receives is not issued, so the schedule is wrong there.")
    if stacks and stacks.tie:
        parts = "; ".join(f"ranks {g.ranks} at {' <- '.join(g.frames[:2])}" for g in stacks.groups[:4])
        return (f"the ranks split into {len(stacks.groups)} stack groups of equal size ({parts}): no majority, "
                "so which side is wrong cannot be told from the stacks alone.")
    if missing:
        return f"no divergence among the dumps read; ranks {missing} have no dump, so the cause may be there."
    if empty:
        return "the dumps hold no collectives, so they cannot tell where the ranks diverge."
    return "no divergence found: every rank issued the same collectives in every process group."


def _unknowns(divs: list[Divergence], stacks: StackReport | None, missing: list[int], empty: bool) -> list[str]:
    out = []
    if missing:
        out.append(f"ranks {missing} left no dump: their state is unknown; their dump (or the dump written on "
                   "timeout), their log or a stack snapshot would tell")
    if empty:
        out.append("the recorder kept no entries (Gloo records no send/recv; an NCCL on-demand dump of the "
                   "generic recorder is empty): an NCCL dump, or a stack snapshot of every rank, would tell")
    if stacks and stacks.tie:
        out.append("the stack groups are equal in size: no majority to compare against; a Flight Recorder dump "
                   "(with send/recv entries under NCCL) or the code at those lines would tell")
    for d in divs:
        if d.kind == "mismatch" and not d.ranks:
            out.append(f"{d.group_name} #{d.seq}: equal numbers of ranks issued different ops: the stacks or the "
                       "code that issues them would tell which side is wrong")
    return out


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
    divs, cons, missing = find_divergences(ds, _world(ds)) if ds.dumps else ([], [], [])
    stacks = group_stacks(sfiles) if sfiles else None
    empty = bool(ds.dumps) and all(not d.entries for d in ds.dumps.values())
    warnings = [f"{f}: {why}; that rank's collectives are unknown" for f, why in ds.unreadable] + notes
    if missing:
        warnings.append(f"ranks {missing} are in a process group but have no dump: their state is unknown")
    if stacks:
        warnings += stacks.unreadable
    culprits = sorted({r for d in divs for r in d.ranks + d.unknown_ranks})
    if (not ds.dumps or empty) and stacks and stacks.outliers:   # stacks speak only where no dump does
        culprits = sorted({r for g in stacks.outliers for r in g.ranks})
    return HangReport(path=str(p), dump_ranks=sorted(ds.dumps), missing_dumps=missing,
                      unreadable=[f"{f}: {w}" for f, w in ds.unreadable], divergences=divs, stacks=stacks,
                      verdict=_verdict(divs, stacks, missing, empty), warnings=warnings, consequences=cons,
                      culprits=culprits, unknowns=_unknowns(divs, stacks, missing, empty))
