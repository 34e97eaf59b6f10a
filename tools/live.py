"""Commands for a job that runs or hangs: `hang PATH` (Flight Recorder dumps and stack snapshots) and
`trigger RUN_DIR` (ask every rank's StepWatch to capture K steps)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..analysis.errors import ProfileError, UsageError

if TYPE_CHECKING:   # the hang stack is imported by the hang command only, not by every command's start-up
    from ..analysis.hang import HangReport


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


def cmd_hang(a: argparse.Namespace) -> int:
    from ..analysis.hang import diagnose_hang

    r = diagnose_hang(a.path)
    if a.format == "json":
        print(r.model_dump_json(indent=2))
    else:
        print(render_hang(r))
    return 0


def cmd_trigger(a: argparse.Namespace) -> int:
    from ..capture.trigger import state_dir, write_trigger

    run = Path(a.run_dir)
    if not state_dir(run).is_dir():
        raise ProfileError(run, "no StepWatch has run here (no .stepdoctor/ folder): pass the run_dir given to "
                                "StepWatch")
    if a.steps < 1:
        raise UsageError(f"--steps must be at least 1, got {a.steps}")
    doc = write_trigger(run, a.steps, "asked by `stepdoctor trigger`")
    print(f"trigger {doc['id']}: every rank captures steps {doc['at_step']}..{doc['at_step'] + a.steps - 1} "
          f"into {run / ('capture-' + doc['id'])}")
    return 0


def register(sub: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    s = sub.add_parser("hang", parents=[common], help="where the ranks of a hung job diverge (Flight Recorder "
                       "dumps, py-spy stack snapshots)")
    s.add_argument("path", help="folder holding the dumps (<prefix><rank>) and/or py-spy --json stack files")
    s.set_defaults(func=cmd_hang)
    s = sub.add_parser("trigger", help="ask every rank's StepWatch in RUN_DIR to capture steps now")
    s.add_argument("run_dir", help="the run_dir given to stepdoctor.capture.StepWatch")
    s.add_argument("--steps", type=int, default=3, help="steps to capture (default 3)")
    s.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    s.set_defaults(func=cmd_trigger)
    s = sub.add_parser("snapshot", help="take py-spy stack snapshots of local processes (by PID) for `hang`")
    s.add_argument("pid", type=int, nargs="+", help="process ids (the rank is read from each one's RANK)")
    s.add_argument("-o", "--output", required=True, help="folder to write pyspy_rank_<N>.json files into")
    s.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    s.set_defaults(func=cmd_snapshot)


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


def cmd_snapshot(a: argparse.Namespace) -> int:
    import shutil
    import subprocess

    # py-spy installed in the same environment as stepdoctor is found without that environment on PATH
    pyspy = shutil.which("py-spy") or shutil.which("py-spy", path=str(Path(sys.executable).parent))
    if pyspy is None:
        raise ProfileError(None, "py-spy is not installed: pip install py-spy (it reads another process's "
                                 "Python stack; root or ptrace permission is needed)")
    out = Path(a.output)
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    for i, pid in enumerate(a.pid):
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
    if len(failed) == len(a.pid):
        raise ProfileError(None, f"no snapshot taken ({failed[0]})")
    print(f"{len(a.pid) - len(failed)} stack snapshot(s) in {out}; `stepdoctor hang {out}` compares them")
    for f in failed:
        print(f"warning: {f}")
    return 0
