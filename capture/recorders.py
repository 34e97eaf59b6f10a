"""The profilers a capture runs: torch.profiler on CUDA / ROCm / CPU, torch_npu.profiler on Ascend, with the
settings stepdoctor reads well (one warm-up step, record_shapes, gzip'd Kineto traces or the Ascend text
export, one trace per rank in the capture folder). torch is imported only when a capture starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol


class CaptureUnavailable(RuntimeError):
    """Capture needs torch (and torch_npu on Ascend); the message says what to install."""


class Recorder(Protocol):
    def start(self) -> None: ...
    def step(self) -> None: ...
    def stop(self) -> None: ...


def torch_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


class TorchRecorder:
    """torch.profiler (or torch_npu.profiler where torch_npu is installed) with schedule wait 0, warmup 1,
    active `steps`; its ProfilerStep numbers are the job's step numbers (first = the warm-up step)."""

    def __init__(self, out_dir: Path, rank: int, first_step: int, steps: int) -> None:
        try:
            import torch
        except ImportError as e:  # pragma: no cover - exercised where torch is absent
            raise CaptureUnavailable("stepdoctor.capture needs torch: pip install torch") from e
        out_dir.mkdir(parents=True, exist_ok=True)
        try:
            import torch_npu  # type: ignore[import-not-found]
        except ImportError:
            torch_npu = None
        prof = self._npu(torch_npu, out_dir, first_step, steps) if torch_npu else \
            self._kineto(torch, out_dir, rank, first_step, steps)
        # ProfilerStep#N numbered as the job's steps: the schedule skips the first `first_step` numbers, and
        # the action computed at construction (for step 0) is recomputed for the step it starts at
        prof.step_num = first_step
        prof.current_action = prof.schedule(first_step)
        self._prof = prof

    @staticmethod
    def _kineto(torch: Any, out_dir: Path, rank: int, first_step: int, steps: int) -> Any:
        acts = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        return torch.profiler.profile(
            activities=acts, record_shapes=True, with_stack=False,
            schedule=torch.profiler.schedule(skip_first=first_step, wait=0, warmup=1, active=steps, repeat=1),
            on_trace_ready=torch.profiler.tensorboard_trace_handler(str(out_dir), worker_name=f"rank{rank}",
                                                                    use_gzip=True))

    @staticmethod
    def _npu(torch_npu: Any, out_dir: Path, first_step: int, steps: int) -> Any:
        prof = torch_npu.profiler
        cfg = prof._ExperimentalConfig(profiler_level=prof.ProfilerLevel.Level1,
                                       aic_metrics=prof.AiCMetrics.PipeUtilization,
                                       export_type=prof.ExportType.Text)
        return prof.profile(activities=[prof.ProfilerActivity.CPU, prof.ProfilerActivity.NPU],
                            record_shapes=True, experimental_config=cfg,
                            schedule=prof.schedule(skip_first=first_step, wait=0, warmup=1, active=steps,
                                                   repeat=1),
                            on_trace_ready=prof.tensorboard_trace_handler(str(out_dir)))

    def start(self) -> None:
        self._prof.start()

    def step(self) -> None:
        self._prof.step()

    def stop(self) -> None:
        self._prof.stop()
