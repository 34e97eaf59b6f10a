"""stepdoctor.capture: the training-loop hook that records K steps with the profiler when step time rises
(or when `stepdoctor trigger RUN_DIR` asks), then runs `issues` on them. Needs torch only to record."""

from __future__ import annotations

from .recorders import CaptureUnavailable
from .trigger import write_trigger
from .watch import Capture, StepWatch

__all__ = ["Capture", "CaptureUnavailable", "StepWatch", "write_trigger"]
