"""stepdoctor.capture.StepWatch with a stand-in profiler: slowdown triggers, exact K steps, one capture per
slowdown, `stepdoctor trigger` across several processes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import ClassVar

import pytest

from stepdoctor.capture import StepWatch
from stepdoctor.capture.trigger import LEAD_STEPS, write_trigger


class FakeRecorder:
    log: ClassVar[list[tuple]] = []

    def __init__(self, out_dir: Path, rank: int, first_step: int, steps: int) -> None:
        out_dir.mkdir(parents=True, exist_ok=True)
        self.first, self.steps, self.calls = first_step, steps, 0
        FakeRecorder.log.append(("init", rank, first_step, steps))

    def start(self) -> None:
        FakeRecorder.log.append(("start", self.first))

    def step(self) -> None:
        self.calls += 1

    def stop(self) -> None:
        FakeRecorder.log.append(("stop", self.calls))


def run_loop(tmp: Path, times: list[float], **kw) -> StepWatch:
    clock = iter([sum(times[:i]) for i in range(len(times) + 1)])
    FakeRecorder.log = []
    w = StepWatch(tmp, recorder=FakeRecorder, analyze=False, rank=0, world_size=1, clock=lambda: next(clock),
                  **kw)
    for _ in range(len(times) + 1):
        w.step()
    return w


def test_a_30pct_slowdown_triggers_within_two_steps_and_captures_exactly_k(tmp_path: Path):
    times = [0.100] * 30 + [0.130] * 30          # the slowdown begins at step 30
    w = run_loop(tmp_path, times, capture_steps=3)
    assert len(w.captures) == 1                   # a lasting slowdown is captured once
    cap = w.captures[0]
    trigger = json.loads((tmp_path / ".stepdoctor" / "trigger.json").read_text())
    # the first slow step is measured by call 32 of step(); the trigger is written at call at_step - LEAD
    decided_at = trigger["at_step"] - LEAD_STEPS
    assert 32 <= decided_at <= 33                 # within 2 steps of the slowdown
    assert cap.first_step == trigger["at_step"]
    assert "above the baseline" in cap.reason
    assert cap.steps == 3 and cap.started_late_by == 0
    assert FakeRecorder.log[-1] == ("stop", 4)    # one warm-up + exactly K captured steps
    assert (cap.folder / ".done_rank_0").exists()


def test_noise_below_the_threshold_never_triggers(tmp_path: Path):
    times = [0.100, 0.115, 0.095, 0.110] * 15
    w = run_loop(tmp_path, times)
    assert w.captures == []


def test_one_long_step_triggers_with_max_step_s(tmp_path: Path):
    times = [0.1] * 3 + [2.5] + [0.1] * 10
    w = run_loop(tmp_path, times, max_step_s=1.0, capture_steps=2)
    assert len(w.captures) == 1 and "took 2.500 s" in w.captures[0].reason


def test_without_torch_and_without_a_recorder_it_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from stepdoctor.capture import CaptureUnavailable, watch

    monkeypatch.setattr(watch, "torch_available", lambda: False)
    with pytest.raises(CaptureUnavailable, match="pip install torch"):
        StepWatch(tmp_path)


WORKER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from test_capture import FakeRecorder
    from stepdoctor.capture import StepWatch
    run, rank = Path(sys.argv[1]), int(sys.argv[2])
    w = StepWatch(run, recorder=FakeRecorder, analyze=False, rank=rank, world_size=3)
    (run / f"ready_{{rank}}").write_text("")
    for _ in range(300):
        time.sleep(0.05)   # a step long enough that a loaded machine's scheduling cannot eat the 2-step lead
        w.step()
        if w.captures:
            break
    w.close()
    c = w.captures[0] if w.captures else None
    print(json.dumps(None if c is None else [c.id, c.first_step, c.steps, c.started_late_by]))
""")


def test_stepdoctor_trigger_captures_the_same_steps_on_every_process(tmp_path: Path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER.format(tests=str(Path(__file__).parent)))
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path), str(r)], stdout=subprocess.PIPE,
                              text=True) for r in range(3)]
    import time

    while len(list(tmp_path.glob("ready_*"))) < 3:
        time.sleep(0.05)
    time.sleep(0.3)
    out = subprocess.run([sys.executable, "-m", "stepdoctor", "trigger", str(tmp_path),
                          "--steps", "2"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    results = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert all(r is not None for r in results), results
    assert len({(r[0], r[1], r[2]) for r in results}) == 1     # same trigger, same first step, same K
    assert all(r[3] == 0 for r in results)


def test_an_old_trigger_is_not_taken_by_a_new_process(tmp_path: Path):
    write_trigger(tmp_path, steps=2, reason="left from an earlier run", at_step=1)
    w = run_loop(tmp_path, [0.1] * 10)
    assert w.captures == []


REAL = Path(__file__).parent / "data" / "real_capture"


def test_the_real_h100_capture_holds_exactly_the_triggered_steps():
    cap = json.loads((REAL / "capture.json").read_text())["captures"][0]
    assert (cap["first_step"], cap["steps"], cap["late"]) == (44, 3, 0)
    over = json.loads((REAL / "overhead.json").read_text())
    assert over["share_of_step_pct"] < 1.0
    from stepdoctor.tools import api

    trace = next(REAL.glob("*.pt.trace.json.gz"))
    b = api.breakdown(str(trace))
    assert b.profile.steps == [44, 45] and b.profile.dropped_steps == [46]
    assert all(r.compute_ms and r.compute_ms > 30 for r in b.rows)   # 13 layers on the GPU each step
