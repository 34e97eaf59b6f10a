"""Refusals: a folder holding several unrelated runs, or something that is not a profile, gets one line that
says what was found and what to pass instead."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ...errors import ProfileError
from ...files import read_bytes
from .content import (
    EXECUTION_TRACE,
    KINETO_NAME_RE,
    MS_LEGACY_RE,
    OUTPUT_DIR,
    ascend_rank,
    json_kind,
    kineto_rank,
    kineto_world_size,
    msprof_rank,
)


def refuse_unrelated_runs(root: Path, ascend: list[Path], legacy: list[Path], kineto: list[Path],
                           bare: list[Path], msprof: list[Path]) -> None:
    """A folder holding several runs (different kinds of profile, the same rank in different folders, or
    copied-out deliverables that say nothing of their rank) is not one cluster: one line listing the runs,
    so the user passes one."""
    runs: dict[Path, str] = {}
    for m in msprof:
        runs.setdefault(m.parent, "msprof")
    loose = [d for d in ascend if not (d / OUTPUT_DIR).is_dir() and ascend_rank(d)[0] is None]
    for d in ascend:
        runs.setdefault(d if d in loose else d.parent, "Ascend")
    for t in bare:
        runs.setdefault(t.parent, "Ascend trace")
    for d in legacy:
        runs.setdefault(d, "MindSpore profiler")
    for f in kineto:
        runs.setdefault(f.parent, "Kineto")
    # one folder holding two kinds of profile (a GPU trace beside an Ascend rank folder) is two runs
    kinds = {m.parent: "msprof" for m in msprof}
    for d in ascend:
        kinds.setdefault(d if d in loose else d.parent, "Ascend")
    mixed = sorted({f.parent for f in kineto if f.parent in kinds and kinds[f.parent] != "Kineto"})
    if mixed:
        where = mixed[0]
        raise ProfileError(root, f"holds two kinds of profile in {where.relative_to(root) if where != root else '.'}: "
                                 f"{kinds[where]} rank folders and Kineto traces "
                                 f"({', '.join(f.name for f in kineto if f.parent == where)[:300]}), not one job; "
                                 "pass one of them")
    if len(runs) < 2:
        return
    ranks: dict[int, set[Path]] = {}
    for d in ascend:
        r, _, _ = ascend_rank(d)
        if r is not None:
            ranks.setdefault(r, set()).add(d.parent)
    for d in legacy:
        for n in os.listdir(d):
            if m := MS_LEGACY_RE.match(n):
                ranks.setdefault(int(m.group(1)), set()).add(d)
    kineto_ranks: list[int | None] = []
    for f in kineto if len({f.parent for f in kineto}) > 1 else []:
        try:
            r, _ = kineto_rank(f)
        except ProfileError:
            r = None
        kineto_ranks.append(r)
        if r is not None:
            ranks.setdefault(r, set()).add(f.parent)
    msprof_ranks = [msprof_rank(m)[0] for m in msprof] if len({m.parent for m in msprof}) > 1 else []
    for m, r in zip(msprof, msprof_ranks, strict=False):
        if r is not None:
            ranks.setdefault(r, set()).add(m.parent)
    # traces in different folders that do not say their rank cannot be told apart from separate runs
    # ranks of one job agree on the world size where their metadata states it
    sizes = {w for d in ascend if (w := _world_size(d)) is not None}
    clash = any(len(v) > 1 for v in ranks.values()) or len(loose) > 1 or None in kineto_ranks + msprof_ranks \
        or len(sizes) > 1
    if len(set(runs.values())) > 1 or clash:
        here = ", ".join(d.name for d in ascend if d.parent == root)   # rank folders directly in root
        listed = "; ".join(f"{k.relative_to(root) if k != root else here or '.'} ({v})"
                           for k, v in sorted(runs.items()))
        raise ProfileError(root, f"holds {len(runs)} separate runs, not one job: {listed[:600]}; pass one of them")


def refuse_mixed_kineto(root: Path, files: list[Path], ranks: list[int | None], hows: list[str]) -> None:
    """Kineto traces in one folder that cannot be the ranks of one job, refused with one line listing them:
    traces that state different world sizes, a trace of a one-process run (world size 1) beside others, two or
    more traces that say nothing of their rank (re-running into one tensorboard_trace_handler folder), or one
    rank twice (two runs of a job, or two profiling windows of one run). Merging them would make a fake
    multi-rank job whose "slow rank" is another run."""
    if len(files) < 2:
        return
    worlds = [kineto_world_size(f) for f in files]
    stated = {w for w in worlds if w is not None}
    unknown = [f for f, r in zip(files, ranks, strict=True) if r is None]
    seen: dict[int, list[Path]] = {}
    for f, r in zip(files, ranks, strict=True):
        if r is not None:
            seen.setdefault(r, []).append(f)
    twice = {r: fs for r, fs in seen.items() if len(fs) > 1}
    why = ("they state different world sizes" if len(stated) > 1 else
           "a one-process run (world size 1) is not a rank of a job" if 1 in stated else
           "they do not say their rank (no distributedInfo, no rank in the file name)" if len(unknown) > 1 else
           f"rank {min(twice)} has {len(twice[min(twice)])} traces" if twice else "")
    if not why:
        return

    def label(f: Path, w: int | None, r: int | None, how: str) -> str:
        parts = [f"rank {r} ({how})" if r is not None else "no rank", f"world size {w}" if w else "no world size"]
        return f"{f.relative_to(root) if f != root else f.name} ({', '.join(parts)})"

    listed = "; ".join(label(f, w, r, h) for f, w, r, h in zip(files, worlds, ranks, hows, strict=True))
    raise ProfileError(root, f"holds {len(files)} Kineto traces that are not the ranks of one job ({why}): "
                             f"{listed[:600]}; pass one run's traces (one per rank)")


def nothing_found(p: Path) -> str:
    names = set(os.listdir(p))
    if {"cluster_step_trace_time.csv", "cluster_communication.json"} & names:
        return ("msprof-analyze's cluster_analysis_output, not a profile: pass the folder holding the rank folders "
                "(*_ascend_pt) it was made from")
    if "profiler_metadata.json" in names and not any(n.endswith((".csv", ".db")) for n in names):
        return ("only torch_npu's profiler_metadata.json (the run description), no profile data: pass the rank "
                "folder that holds ASCEND_PROFILER_OUTPUT/")
    if any(n.startswith("op_summary") and n.endswith(".csv") for n in names):
        return ("only msprof op_summary CSVs (per-operator totals, no timeline): pass the PROF_* folder or "
                "the folder holding mindstudio_profiler_output/")
    if names and all((p / n).is_file() and (p / n).stat().st_size == 0 for n in names):
        return "every file here is empty (0 bytes): nothing to read"
    if any(KINETO_NAME_RE.search(n) and (p / n).is_file() and json_kind(p / n) == "execution_trace" for n in names):
        return f"only {EXECUTION_TRACE}"
    return ("no recognizable profile: no torch_npu / MindSpore rank folder (ASCEND_PROFILER_OUTPUT/, "
            "profiler_info_N.json), MindSpore profiler folder, msprof PROF_* folder or msprof_*.db, or Kineto "
            "trace (.json/.json.gz) found")


def _world_size(d: Path) -> int | None:
    """The world size a torch_npu / MindSpore rank folder states: profiler_metadata.json
    distributed_args.world_size, else profiler_info*.json rank_size; None when neither says."""
    for name, path in (("profiler_metadata.json", ("distributed_args", "world_size")), ("", ("rank_size",))):
        files = [d / name] if name else sorted(d.glob("profiler_info*.json"))
        for f in files:
            try:
                v = json.loads(read_bytes(f))
            except (OSError, ValueError):
                continue
            for key in path:
                v = v.get(key) if isinstance(v, dict) else None
            if isinstance(v, int | str) and str(v).isdigit() and int(v) > 0:
                return int(v)
    return None
