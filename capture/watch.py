"""StepWatch: one call per training step; captures K steps with the profiler when step time rises.

    watch = StepWatch("runs/exp7")         # once, on every rank (torchrun's RANK / WORLD_SIZE are read)
    for batch in loader:
        ...; optimizer.step()
        watch.step()                       # at the end of every step

Algorithm: the time between two calls is the step time. The baseline is the median of the last
`baseline_steps` normal step times (at least `min_baseline_steps` before anything fires). A capture is asked
for when `sustain_steps` steps in a row are `rise_pct` % above the baseline, when one step exceeds
`max_step_s`, or when `stepdoctor trigger RUN_DIR` writes a trigger. Any of these writes the trigger file
(capture.trigger), which every rank polls, so all ranks capture the same steps [at_step, at_step + K) after
one warm-up step. After a capture the baseline starts afresh from the new level: a lasting slowdown is
captured once. Captured steps never enter the baseline (the profiler slows them).

Per step, without a capture: one clock read, one 8-byte pwrite, one stat, a median of at most
`baseline_steps` floats (see evals/bench for the measured cost).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .recorders import CaptureUnavailable, Recorder, TorchRecorder, torch_available
from .trigger import Heartbeat, TriggerWatch, write_trigger

RecorderFactory = Callable[[Path, int, int, int], Recorder]   # (out_dir, rank, first_step, steps)


@dataclass
class Capture:
    id: str
    reason: str
    first_step: int          # first captured (active) step
    steps: int
    folder: Path
    started_late_by: int = 0  # steps this rank began after `first_step` (it saw the trigger too late)


class StepWatch:
    def __init__(self, run_dir: str | Path, *, rise_pct: float = 20.0, sustain_steps: int = 2,
                 max_step_s: float | None = None, capture_steps: int = 3, baseline_steps: int = 20,
                 min_baseline_steps: int = 5, analyze: bool = True, rank: int | None = None,
                 world_size: int | None = None, recorder: RecorderFactory | None = None,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        if recorder is None and not torch_available():
            raise CaptureUnavailable("stepdoctor.capture needs torch to record a capture: pip install torch "
                                     "(and torch_npu on Ascend)")
        self.run_dir = Path(run_dir)
        self.rank = int(os.environ.get("RANK", "0")) if rank is None else rank
        self.world_size = int(os.environ.get("WORLD_SIZE", "1")) if world_size is None else world_size
        self.rise = 1.0 + rise_pct / 100.0
        self.sustain, self.max_step_s, self.k = sustain_steps, max_step_s, capture_steps
        self.min_baseline, self.analyze = min_baseline_steps, analyze
        self._baseline: deque[float] = deque(maxlen=baseline_steps)
        self._recorder = recorder or TorchRecorder
        self._clock = clock
        self._last: float | None = None
        self._slow_run = 0
        self.step_num = 0                 # the step about to run
        self.captures: list[Capture] = []
        self._pending: dict[str, Any] | None = None
        self._active: tuple[Capture, Recorder, int] | None = None   # capture, recorder, step() calls left
        self._heart = Heartbeat(self.run_dir, self.rank)
        self._triggers = TriggerWatch(self.run_dir)

    # -- the per-step call ---------------------------------------------------------------------------

    def step(self) -> None:
        """Call at the end of every training step."""
        now = self._clock()
        dt = None if self._last is None else now - self._last
        self._last = now
        self.step_num += 1
        self._heart.beat(self.step_num)
        if self._active is not None:
            self._advance()
        elif dt is not None:
            self._observe(dt)
        if (doc := self._triggers.poll()) is not None and self._active is None:
            self._pending = doc
        if self._pending is not None and self._active is None and self.step_num >= self._pending["at_step"] - 1:
            self._begin(self._pending)
            self._pending = None

    def _observe(self, dt: float) -> None:
        ready = len(self._baseline) >= self.min_baseline
        base = statistics.median(self._baseline) if ready else None
        slow = base is not None and dt > base * self.rise
        self._slow_run = self._slow_run + 1 if slow else 0
        if not slow:
            self._baseline.append(dt)
        reason = None
        if self.max_step_s is not None and dt > self.max_step_s:
            reason = f"step {self.step_num - 1} took {dt:.3f} s > {self.max_step_s} s"
        elif self._slow_run >= self.sustain and base is not None:
            reason = (f"{self._slow_run} steps {dt / base * 100 - 100:.0f}% above the baseline "
                      f"{base * 1000:.1f} ms (threshold {self.rise * 100 - 100:.0f}%)")
        if reason is not None and self._pending is None:
            self._pending = write_trigger(self.run_dir, self.k, reason)
            self._triggers.poll()   # our own trigger: already pending here
            self._slow_run = 0

    # -- capturing -----------------------------------------------------------------------------------

    def _begin(self, doc: dict[str, Any]) -> None:
        first = doc["at_step"]
        late = max(0, self.step_num + 1 - first)   # the warm-up step is step_num; active from step_num + 1
        folder = self.run_dir / f"capture-{doc['id']}"
        cap = Capture(doc["id"], str(doc.get("reason", "")), first + late, int(doc.get("steps", self.k)),
                      folder, late)
        rec = self._recorder(folder, self.rank, self.step_num, cap.steps)
        rec.start()
        self._active = (cap, rec, cap.steps + 1)   # one warm-up step, then the captured ones

    def _advance(self) -> None:
        cap, rec, left = self._active  # type: ignore[misc]
        rec.step()
        left -= 1
        if left > 0:
            self._active = (cap, rec, left)
            return
        rec.stop()
        self._active = None
        self.captures.append(cap)
        self._baseline.clear()   # the level after a capture is the new normal: captured once
        self._slow_run = 0
        self._last = None        # the step that ran the export is not a step time
        (cap.folder / f".done_rank_{self.rank}").write_text(str(self.step_num))
        if self.analyze and self.rank == 0:
            self._spawn_analysis(cap)

    def _spawn_analysis(self, cap: Capture) -> None:
        """`issues` and the HTML report of the capture, beside it, in a detached process that waits for every
        rank's trace (never in the training process)."""
        subprocess.Popen([sys.executable, "-m", "stepdoctor.capture.analyze", str(cap.folder),
                          "--ranks", str(self.world_size)], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

    def close(self) -> None:
        if self._active is not None:
            self._active[1].stop()
            self._active = None
        self._heart.close()
