"""The files through which the ranks of one job agree on which steps to capture.

RUN_DIR/.stepdoctor/ holds, per rank, `rank_<N>.step`: the rank's current step as 8 bytes (little-endian
int64), overwritten in place every step (one pwrite), and `trigger.json`, written atomically (rename):
{"id": str, "at_step": int, "steps": int, "reason": str}. A capture starts at step `at_step` on every rank,
so ranks of a synchronous job (which are within a step of each other) capture the same steps: `at_step` is
the highest step any rank has reported plus LEAD_STEPS. Each rank handles each trigger id once.
"""

from __future__ import annotations

import json
import os
import struct
import time
import uuid
from pathlib import Path
from typing import Any

LEAD_STEPS = 2   # steps between a trigger and its first captured step: ranks see the file within one step
_STEP = struct.Struct("<q")


def state_dir(run_dir: str | Path) -> Path:
    return Path(run_dir) / ".stepdoctor"


class Heartbeat:
    """One rank's current step, written in place (8 bytes) so a trigger can tell where the job is."""

    def __init__(self, run_dir: str | Path, rank: int) -> None:
        d = state_dir(run_dir)
        d.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(d / f"rank_{rank}.step", os.O_RDWR | os.O_CREAT, 0o644)

    def beat(self, step: int) -> None:
        os.pwrite(self._fd, _STEP.pack(step), 0)

    def close(self) -> None:
        os.close(self._fd)


def highest_step(run_dir: str | Path) -> int | None:
    """The highest step any rank reported, or None when no rank has."""
    best = None
    for p in state_dir(run_dir).glob("rank_*.step"):
        data = p.read_bytes()
        if len(data) >= _STEP.size:
            step = _STEP.unpack_from(data)[0]
            best = step if best is None else max(best, step)
    return best


def write_trigger(run_dir: str | Path, steps: int, reason: str, at_step: int | None = None) -> dict[str, Any]:
    """Ask every rank to capture `steps` steps from `at_step` (default: the highest reported step + LEAD_STEPS)."""
    d = state_dir(run_dir)
    d.mkdir(parents=True, exist_ok=True)
    if at_step is None:
        top = highest_step(run_dir)
        at_step = (top if top is not None else 0) + LEAD_STEPS
    doc = {"id": uuid.uuid4().hex[:12], "at_step": at_step, "steps": steps, "reason": reason,
           "time": time.time()}
    tmp = d / f"trigger.json.tmp-{os.getpid()}"
    tmp.write_text(json.dumps(doc))
    os.replace(tmp, d / "trigger.json")
    return doc


class TriggerWatch:
    """Sees a new trigger file cheaply: one stat per call, the file read only when its mtime changed."""

    def __init__(self, run_dir: str | Path) -> None:
        self.path = state_dir(run_dir) / "trigger.json"
        self._mtime: int | None = None
        self._seen: set[str] = set()
        if self.path.exists():   # a trigger older than this process is not for it
            doc = self._read()
            if doc:
                self._seen.add(doc["id"])
            self._mtime = self.path.stat().st_mtime_ns

    def _read(self) -> dict[str, Any] | None:
        try:
            doc = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return None
        ok = isinstance(doc, dict) and isinstance(doc.get("id"), str) and isinstance(doc.get("at_step"), int)
        return doc if ok else None

    def poll(self) -> dict[str, Any] | None:
        """A trigger not handled before, once; else None."""
        try:
            mtime = self.path.stat().st_mtime_ns
        except OSError:
            return None
        if mtime == self._mtime:
            return None
        self._mtime = mtime
        doc = self._read()
        if doc is None or doc["id"] in self._seen:
            return None
        self._seen.add(doc["id"])
        return doc
