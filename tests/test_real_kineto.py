"""Kineto reader on the real traces (/work/shared/data/real/kineto and gpu-h100/*/traces).

Every folder: `issues` and `breakdown` exit 0. Key numbers are checked against values computed here from
the raw JSON with the standard json module and Decimal (no code of the reader): the step numbers, a step's
step_ms (its ProfilerStep#N duration), compute_ms and communication_ms (the union of the step's kernel
intervals, a kernel belonging to the step whose ProfilerStep holds its launch call), and kernel counts.
"""

from __future__ import annotations

import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from conftest import SHARED, need
from stepdoctor.analysis import build
from stepdoctor.analysis.metrics.breakdown import compute_breakdown
from stepdoctor.tools.cli import main as cli_main

REAL = SHARED / "real"
KINETO_REAL = ["kineto-docs-h100-sync-after", "kineto-docs-h100-sync-before", "kineto-tb-resnet50-nw0",
               "kineto-tb-resnet50-nw4", "param-linear-1gpu", "param-resnet-1gpu", "tracelens-b200-eager",
               "tracelens-bert-small-h100", "tracelens-bert-small-mi300", "tracelens-mi210-gpu-only",
               "tracelens-mi300-compile-triton", "tracelens-mi300-resnet-actckpt", "tracelens-mi300-xdit-sd35"]
H100_RUNS = ["attn_math", "clean", "compiled", "dataloader_bound", "ddp1", "empty_cache", "fp32_no_tf32",
             "gc_pause", "gloo2_straggler", "host_bound", "pageable_h2d", "sync_heavy"]
ALL = [REAL / "kineto" / n for n in KINETO_REAL] + [REAL / "gpu-h100" / n / "traces" for n in H100_RUNS]
_STEP = re.compile(r"ProfilerStep\s*#\s*(\d+)")
# the raw-side notion of a communication kernel, written independently of comm_kinds.py
_RAW_COMM = re.compile(r"^nccl|ncclDevKernel|multimem_all_reduce", re.I)


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as fh:
        doc = json.load(fh, parse_float=Decimal)
    return doc["traceEvents"] if isinstance(doc, dict) else doc


def _ns(v) -> int:
    return int(Decimal(v).scaleb(3).to_integral_value())


def _union_ms(iv: list[tuple[int, int]]) -> float:
    total, end = 0, None
    for s, e in sorted(iv):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total / 1e6


def _raw_step(evs: list[dict], step: int) -> dict[str, float | int]:
    """step_ms, compute_ms, communication_ms and the kernel count of one step, from the raw events."""
    host = [e for e in evs if e.get("ph") == "X" and _STEP.fullmatch(str(e.get("name", "")))
            and e.get("cat") not in ("gpu_user_annotation", "kernel", "Kernel")
            and int(_STEP.fullmatch(e["name"]).group(1)) == step]
    s0 = _ns(host[0]["ts"])
    s1 = s0 + _ns(host[0]["dur"])
    launch = {e["args"]["correlation"]: _ns(e["ts"]) for e in evs
              if e.get("ph") == "X" and e.get("cat") in ("cuda_runtime", "Runtime", "cuda_driver")
              and isinstance(e.get("args"), dict) and "correlation" in e["args"]}
    comp, comm = [], []
    for e in evs:
        if e.get("ph") != "X" or e.get("cat") not in ("kernel", "Kernel"):
            continue
        t = launch.get(e.get("args", {}).get("correlation"))
        if t is None or not s0 <= t < s1:
            continue
        iv = (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))
        (comm if _RAW_COMM.search(e["name"]) else comp).append(iv)
    return {"step_ms": (s1 - s0) / 1e6, "compute_ms": _union_ms(comp), "communication_ms": _union_ms(comm),
            "kernels": len(comp) + len(comm)}


def _trace(folder: Path) -> Path:
    return sorted(p for p in folder.iterdir() if ".json" in p.name)[0]


@pytest.mark.parametrize("folder", ALL, ids=lambda p: p.parent.name if p.name == "traces" else p.name)
@pytest.mark.parametrize("command", ["issues", "breakdown"])
def test_cli_exits_zero(folder: Path, command: str, capsys) -> None:
    assert cli_main([command, str(need(folder)), "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)


def _rows(folder: Path) -> dict[tuple[int, int], object]:
    prof = build.open_profile(need(folder))
    return {(r.rank, r.step): r for r in compute_breakdown(prof)}


# (folder, the steps a breakdown shows: the last profiled step is dropped as HTA does, steps to recompute)
CASES = [
    (REAL / "kineto" / "kineto-tb-resnet50-nw0", [5, 6, 7, 8, 9], [5, 8]),
    (REAL / "kineto" / "kineto-tb-resnet50-nw4", [5, 6, 7, 8, 9], [6]),
    (REAL / "kineto" / "tracelens-mi300-resnet-actckpt", [15, 16], [15]),
    (REAL / "gpu-h100" / "clean" / "traces", [4, 5, 6], [4, 6]),
    (REAL / "gpu-h100" / "ddp1" / "traces", [4, 5, 6], [5]),
]


@pytest.mark.parametrize("folder,steps,check", CASES, ids=lambda v: v.parent.name if isinstance(v, Path) and
                         v.name == "traces" else (v.name if isinstance(v, Path) else None))
def test_steps_and_step_numbers_match_the_raw_trace(folder: Path, steps: list[int], check: list[int]) -> None:
    rows = _rows(folder)
    assert sorted({r for r, _ in rows}) == [0]
    assert sorted(s for _, s in rows) == steps
    evs = _events(_trace(folder))
    for step in check:
        raw, got = _raw_step(evs, step), rows[(0, step)]
        assert got.step_ms == pytest.approx(raw["step_ms"], abs=1e-6)
        assert got.compute_ms == pytest.approx(raw["compute_ms"], abs=1e-6)
        assert got.communication_ms == pytest.approx(raw["communication_ms"], abs=1e-6)


def test_b200_symm_mem_all_reduce_is_communication() -> None:
    folder = need(REAL / "kineto" / "tracelens-b200-eager")
    prof = build.open_profile(folder)
    cats = dict(prof.rows("SELECT category, count(*) FROM device_ops WHERE name LIKE '%multimem_all_reduce%' "
                          "GROUP BY category"))
    raw = [e for e in _events(_trace(folder)) if e.get("cat") == "kernel"]
    n_multimem = sum("multimem_all_reduce" in e["name"] for e in raw)
    assert n_multimem > 0 and cats == {"communication": n_multimem}
    assert prof.rows("SELECT count(*) FROM device_ops WHERE task_type = 'kernel'")[0][0] == len(raw)
    # communication_ms covers at least the union of the symm-mem and NCCL kernels of the trace
    comm = [(_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"])) for e in raw if _RAW_COMM.search(e["name"])]
    (row,) = compute_breakdown(prof)
    assert row.communication_ms >= _union_ms(comm) - 1e-6 > 1.0


@pytest.mark.parametrize("name", ["kineto-tb-resnet50-nw0", "param-resnet-1gpu", "tracelens-mi300-xdit-sd35"])
def test_kernel_count_and_exact_ns_starts(name: str) -> None:
    folder = need(REAL / "kineto" / name)
    prof = build.open_profile(folder)
    raw = [e for e in _events(_trace(folder)) if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel")]
    got = np.array(sorted(r[0] for r in prof.rows("SELECT start_ns FROM device_ops WHERE task_type = 'kernel'")))
    assert got.tolist() == sorted(_ns(e["ts"]) for e in raw)


def test_stepless_trace_leaves_leading_initialisation_out() -> None:
    """param-linear-1gpu: ~1 s of cuBLAS / context initialisation (a long cudaFree) before the first GPU
    work. The one step starts at the first device op's launch call; what starts before it has no step."""
    folder = need(REAL / "kineto" / "param-linear-1gpu")
    evs = [e for e in _events(_trace(folder)) if e.get("ph") == "X" and "ts" in e]
    dev = [e for e in evs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    first = min(dev, key=lambda e: _ns(e["ts"]))
    corr = first["args"]["correlation"]
    launch = min(_ns(e["ts"]) for e in evs if e.get("cat") == "cuda_runtime" and e["args"].get("correlation") == corr)
    # the end: the last host or device event (the profiler's own `Trace` span is not one)
    end = max(_ns(e["ts"]) + _ns(e["dur"]) for e in evs if e.get("cat") in (
        "cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function", "kernel", "gpu_memcpy",
        "gpu_memset"))
    prof = build.open_profile(folder)
    assert prof.rows("SELECT step, start_ns, end_ns FROM steps") == [(0, launch, end)]
    frees = prof.rows("SELECT step FROM host_ops WHERE name = 'cudaFree' AND start_ns < ?", [launch])
    assert frees and all(s is None for (s,) in frees)
    (row,) = compute_breakdown(prof)
    assert row.step_ms == pytest.approx((end - launch) / 1e6, abs=1e-6)
    assert any("initialisation" in w for w in prof.warnings)


_HOST_CATS = ("cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "python_function")


def test_stepless_trace_leaves_initialisation_inside_the_first_iteration_out() -> None:
    """param-resnet-1gpu: no ProfilerStep, one `Optimizer.step#SGD.step` annotation per iteration (30), and
    a 788 ms cudaFree inside the first forward (cuDNN's first convolution), after GPU work began: longer
    than a whole later iteration, so the one step starts where the first optimizer step ends. What starts
    before it has no step, the device window starts at the first op launched in the step, and the warning
    says how the window was chosen."""
    folder = need(REAL / "kineto" / "param-resnet-1gpu")
    evs = [e for e in _events(_trace(folder)) if e.get("ph") == "X" and "ts" in e]
    opt = sorted(_ns(e["ts"]) + _ns(e["dur"]) for e in evs if e["name"] == "Optimizer.step#SGD.step")
    assert len(opt) == 30
    win0 = opt[0]
    end = max(_ns(e["ts"]) + _ns(e["dur"]) for e in evs if e.get("cat") in (
        *_HOST_CATS, "kernel", "gpu_memcpy", "gpu_memset"))
    prof = build.open_profile(folder)
    assert prof.rows("SELECT step, start_ns, end_ns FROM steps") == [(0, win0, end)]
    longest = max((e for e in evs if e["name"] == "cudaFree"), key=lambda e: e["dur"])
    assert _ns(longest["ts"]) < win0 and longest["dur"] / 1e3 == pytest.approx(788.488)
    assert prof.rows("SELECT step FROM host_ops WHERE name = 'cudaFree' AND start_ns = ?",
                     [_ns(longest["ts"])]) == [(None,)]
    launches = {e["args"]["correlation"]: _ns(e["ts"]) for e in evs
                if e.get("cat") == "cuda_runtime" and "correlation" in e.get("args", {})}
    dev = [e for e in evs if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    d0 = min(_ns(e["ts"]) for e in dev if launches.get(e["args"].get("correlation"), _ns(e["ts"])) >= win0)
    assert prof.rows("SELECT device_start_ns FROM steps") == [(d0,)]
    (row,) = compute_breakdown(prof)
    assert row.step_ms == pytest.approx((end - win0) / 1e6, abs=1e-6)
    median = float(np.median(np.diff(opt))) / 1e6
    assert median < longest["dur"] / 1e3
    (w,) = [w for w in prof.warnings if "initialisation" in w]
    assert "first of 30 training iterations" in w and "cudaFree 788.5 ms" in w and f"median {median:.1f} ms" in w


@pytest.mark.parametrize("damage", ["gzip_cut", "json_cut"])
def test_damaged_file_keeps_the_events_before_the_damage(damage: str, tmp_path: Path) -> None:
    """A gzip cut short or a JSON cut mid-event keeps the events read before the damage, with a warning
    that counts them; a file damaged before any event is read still fails (exit 2)."""
    src = _trace(need(REAL / "kineto" / "kineto-tb-resnet50-nw0"))
    data = src.read_bytes()
    out = tmp_path / "run" / ("worker0.pt.trace.json.gz" if damage == "gzip_cut" else "worker0.pt.trace.json")
    out.parent.mkdir()
    out.write_bytes(data[: len(data) // 3] if damage == "gzip_cut" else gzip.decompress(data)[:6_000_000])
    prof = build.open_profile(out.parent)
    (warning,) = [w for w in prof.warnings if "is damaged" in w]
    kept = int(re.search(r"the (\d+) host and device events", warning).group(1))
    stored = prof.rows("SELECT (SELECT count(*) FROM host_ops) + (SELECT count(*) FROM device_ops)")[0][0]
    assert kept > 1000 and stored <= kept
    assert [s for (s,) in prof.rows("SELECT step FROM steps ORDER BY step")][:2] == [5, 6]
    out.write_bytes(data[:200] if damage == "gzip_cut" else gzip.decompress(data)[:200])
    assert cli_main(["breakdown", str(out.parent)]) == 2


def test_gloo_collectives_are_host_side_comm_ops() -> None:
    """gloo2_straggler: each `gloo:all_reduce` host annotation is a comm op with the host start and
    duration (ns from the numeral text), per rank and step, so cross-rank checks can match them."""
    folder = need(REAL / "gpu-h100" / "gloo2_straggler" / "traces")
    prof = build.open_profile(folder)
    got = sorted(prof.rows("SELECT rank, start_ns, elapse_ns, op_type FROM comm_ops WHERE name = 'gloo:all_reduce'"))
    want = []
    for rank, path in enumerate(sorted(p for p in folder.iterdir() if ".json" in p.name)):
        doc_rank = json.loads(gzip.decompress(path.read_bytes()))["distributedInfo"]["rank"]
        want += [(doc_rank, _ns(e["ts"]), _ns(e["dur"]), "allreduce") for e in _events(path)
                 if e.get("cat") == "user_annotation" and e.get("name") == "gloo:all_reduce"]
        assert rank in (0, 1)
    assert got == sorted(want) and len(got) == 24
