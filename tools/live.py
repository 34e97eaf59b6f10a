"""Questions about a job that runs or hangs, answered for the catalog (`tools/catalog.py`): `hang PATH`
(Flight Recorder dumps and stack snapshots), `trigger RUN_DIR` (ask every rank's StepWatch to capture K
steps) and `snapshot PID...` (py-spy stacks of local processes). Their CLI options are in `commands`."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..analysis.errors import ProfileError, UsageError

if TYPE_CHECKING:   # the hang stack is imported by the hang command only, not by every command's start-up
    from ..analysis.hang import HangReport
    from . import models as m


def render_hang(r: HangReport) -> str:
    lines = [r.verdict, ""]
    lines.append(f"dumps read: {len(r.dump_ranks)} rank(s)"
                 + (f"; no dump: ranks {r.missing_dumps}" if r.missing_dumps else ""))
    if r.divergences:
        lines.append("first cause(s):")
    for i, d in enumerate(r.divergences, 1):
        who = f"ranks {d.ranks}" if d.ranks else (f"unknown (no dump: {d.unknown_ranks})" if d.unknown_ranks
                                                   else "not told apart")
        lines.append(f"{i}. {d.group_name} #{d.seq} {d.op}: {d.kind}, {who} "
                     f"({len(d.waiting_ranks)} waiting"
                     + (f", {d.waited_ms / 1000:.1f} s" if d.waited_ms and d.waited_ms >= 100 else "") + ")")
        for p in d.positions[:8]:
            where = f"; at {p.stack[0]}" if p.stack else ""
            lines.append(f"    rank {p.rank}: last issued #{p.last_issued_seq} {p.last_issued_op or ''}, "
                         f"last completed #{p.last_completed_seq}{where}")
    if r.consequences:
        lines.append(f"consequences ({len(r.consequences)} collective(s) where ranks wait because of the above):")
        for c in r.consequences[:8]:
            lines.append(f"- {c.message}")
        if len(r.consequences) > 8:
            lines.append(f"- and {len(r.consequences) - 8} more")
    if r.stacks:
        lines.append(f"stacks: {len(r.stacks.groups)} distinct main-thread stack(s)"
                     + (" (largest groups tie: no majority)" if r.stacks.tie else ""))
        for g in (r.stacks.groups if r.stacks.tie else r.stacks.outliers)[:8]:
            lines.append(f"- ranks {g.ranks}" + ("" if r.stacks.tie else " differ from the majority") + ": "
                         + " <- ".join(g.frames[:4]))
    lines += [f"unknown: {u}" for u in r.unknowns]
    lines += [f"warning: {w}" for w in r.warnings]
    return "\n".join(lines)


def hang(path: str) -> HangReport:
    from ..analysis.hang import diagnose_hang

    return diagnose_hang(path)


def trigger(run_dir: str, steps: int) -> m.TriggerResult:
    from ..capture.trigger import state_dir, write_trigger

    run = Path(run_dir)
    if not state_dir(run).is_dir():
        raise ProfileError(run, "no StepWatch has run here (no .stepdoctor/ folder): pass the run_dir given to "
                                "StepWatch")
    if steps < 1:
        raise UsageError(f"--steps must be at least 1, got {steps}")
    from .models import TriggerResult

    doc = write_trigger(run, steps, "asked by `stepdoctor trigger`")
    return TriggerResult(id=doc["id"], run_dir=str(run), first_step=doc["at_step"], steps=steps,
                           capture_dir=str(run / ("capture-" + doc["id"])))


def _rank_of_pid(pid: int) -> int | None:
    """RANK from the process environment (torchrun sets it), when it can be read."""
    try:
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return None
    for kv in env:
        if kv.startswith(b"RANK="):
            try:
                return int(kv[5:])
            except ValueError:
                return None
    return None


def snapshot(pids: list[int], output: str) -> m.SnapshotResult:
    import shutil
    import subprocess

    # py-spy installed in the same environment as stepdoctor is found without that environment on PATH
    pyspy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if pyspy is None:
        raise ProfileError(None, "py-spy is not installed: pip install py-spy (it reads another process's "
                                 "Python stack; root or ptrace permission is needed)")
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    written, failed = [], []
    for i, pid in enumerate(pids):
        rank = _rank_of_pid(pid)
        name = f"pyspy_rank_{rank if rank is not None else i}.json"
        r = subprocess.run([pyspy, "dump", "--json", "--pid", str(pid)], capture_output=True, text=True,
                           timeout=60)
        if r.returncode != 0 or not r.stdout.strip():
            lines = r.stderr.strip().splitlines() or ["no output"]
            why = next((ln for ln in lines if ln.lower().startswith("error")), lines[0])   # not its backtrace
            failed.append(f"pid {pid}: {why.strip()[:160]}")
            continue
        (out / name).write_text(r.stdout)
        written.append(name)
    if not written:
        raise ProfileError(None, f"no snapshot taken ({failed[0]})")
    from .models import SnapshotResult

    return SnapshotResult(output=str(out), written=written, failed=failed)
