"""A real triggered capture: a small transformer trains on one GPU with StepWatch; from step SLOW_AT on, every
step does 30% more work (extra layers run), and StepWatch must capture exactly K steps of it with the real
torch.profiler. Also measures StepWatch's idle cost per call. Writes into OUT:
  capture/ (the traces), capture.json (what StepWatch recorded), overhead.json.

Run: PYTHONPATH=<folder holding a `stepdoctor` link to the repo> python capture_demo.py OUT
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch
from torch import nn

from stepdoctor.capture import StepWatch

STEPS, SLOW_AT, K = 70, 40, 3


def model_and_data(device: str) -> tuple[nn.Module, torch.Tensor]:
    d, batch = (512, 16) if device == "cuda" else (64, 2)   # the CPU run only checks the flow
    layer = nn.TransformerEncoderLayer(d, 8, 4 * d, batch_first=True)
    m = nn.TransformerEncoder(layer, 13).to(device)
    return m, torch.randn(batch, 256, d, device=device)


def train(run: Path, device: str) -> tuple[StepWatch, list[float]]:
    m, x = model_and_data(device)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)
    watch = StepWatch(run, capture_steps=K, analyze=False, rank=0, world_size=1)
    times, t = [], time.perf_counter()
    for step in range(STEPS):
        n = 13 if step >= SLOW_AT else 10      # 30% more layers from SLOW_AT on
        h = x
        for layer in m.layers[:n]:
            h = layer(h)
        h.float().pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        watch.step()
        now = time.perf_counter()
        times.append(now - t)
        t = now
    watch.close()
    return watch, times


def overhead(run: Path) -> dict:
    w = StepWatch(run / "overhead", analyze=False, rank=0, world_size=1, rise_pct=1e9,
                  recorder=lambda *a: None)
    n = 20000
    t0 = time.perf_counter()
    for _ in range(n):
        w.step()
    per_call = (time.perf_counter() - t0) / n
    return {"calls": n, "per_call_us": per_call * 1e6}


def main() -> None:
    out = Path(sys.argv[1])
    run = out / "run"
    w, times = train(run, "cuda" if torch.cuda.is_available() else "cpu")
    caps = [{"id": c.id, "reason": c.reason, "first_step": c.first_step, "steps": c.steps,
             "late": c.started_late_by, "files": sorted(p.name for p in c.folder.iterdir())}
            for c in w.captures]
    (out / "capture.json").write_text(json.dumps({"slow_at": SLOW_AT, "captures": caps}, indent=1))
    ov = overhead(run)
    normal = sorted(times[5:SLOW_AT])[len(times[5:SLOW_AT]) // 2]
    ov.update(step_ms_median_before_slowdown=normal * 1e3, share_of_step_pct=ov["per_call_us"] / 1e3 / normal / 10,
              step_ms=[round(x * 1e3, 3) for x in times])
    (out / "overhead.json").write_text(json.dumps(ov, indent=1))
    print(json.dumps(caps), json.dumps(ov), torch.__version__)


if __name__ == "__main__":
    main()
