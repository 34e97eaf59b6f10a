"""compare on generated base/target pairs with one planted change: the verdict names that change first.

Every pair shares the seed, so the target is the base plus exactly the plant (unplanted numbers come out
byte-identical). Expected numbers are computed from the written files themselves (kernel_details.csv,
step_trace_time.csv, communication.json, trace_view.json, profiler_metadata.json, the Kineto traces), not
from stepdoctor, so a wrong attribution or a wrong number fails. The verdict prints ms with one decimal:
a printed number is checked against the file value within 0.05 ms (its rounding) plus 1 µs.

Also: cross-vendor (Kineto H100 vs an Ascend rank) against msprof-analyze's own NPU-vs-GPU compare,
uneven world sizes / step counts, and a rank that is not in a profile.
"""

from __future__ import annotations

import csv
import json
import re
import statistics
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import SHARED, need
from stepdoctor.analysis.build import open_profile
from stepdoctor.analysis.compare import sides
from stepdoctor.analysis.errors import UsageError
from stepdoctor.analysis.store import IngestOptions, Profile
from stepdoctor.evals.generate import Plant, Scenario, write_profile
from stepdoctor.tools.compare import compare_runs
from stepdoctor.tools.models import Comparison, EnvChange

SEED = 11
PRINTED = 0.05 + 1e-3   # one printed decimal (ms) plus 1 µs of file rounding

# name -> (vendor, plants, ranks, steps); a target is its base plus one plant
SCENARIOS: dict[str, tuple[str, list[Plant], int, int]] = {
    "asc-base": ("ascend", [], 4, 2),
    "asc-slow-all": ("ascend", [Plant("slow-rank", ranks=[0, 1, 2, 3], params={"factor": 1.4})], 4, 2),
    "asc-slow-r3": ("ascend", [Plant("slow-rank", ranks=[3], params={"factor": 1.4})], 4, 2),
    "asc-compile": ("ascend", [Plant("op-compile")], 4, 2),
    "asc-link": ("ascend", [Plant("slow-link")], 4, 2),
    # the env pair keeps a baseline problem on both sides: only the change may be reported
    "asc-gc": ("ascend", [Plant("gc-pause")], 4, 2),
    "asc-gc-env": ("ascend", [Plant("gc-pause"),
                              Plant("env-var", params={"name": "ACLNN_CACHE_LIMIT", "value": ""})], 4, 2),
    "asc-2r3s": ("ascend", [], 2, 3),
    "asc-sync": ("ascend", [Plant("sync-stream")], 4, 2),
    "asc-loader": ("ascend", [Plant("slow-dataloader")], 4, 2),
    "kin-base": ("kineto", [], 4, 2),
    "kin-h2d": ("kineto", [Plant("h2d-pageable")], 4, 2),
    "kin-sync": ("kineto", [Plant("sync-stream")], 4, 2),
    "kin-slow-r3": ("kineto", [Plant("slow-rank", ranks=[3], params={"factor": 1.4})], 4, 2),
}


class Gen:
    """Generated profiles: the written directory and the opened (cached) profile of each scenario."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cache = root / "cache"
        self._open: dict[str, Profile] = {}

    def path(self, name: str) -> Path:
        p = self.root / name
        if not p.exists():
            vendor, plants, ranks, steps = SCENARIOS[name]
            write_profile(Scenario(vendor, ranks=ranks, steps=steps, seed=SEED, plants=plants), p)
        return p

    def prof(self, name: str) -> Profile:
        if name not in self._open:
            self._open[name] = open_profile(self.path(name), IngestOptions(cache_dir=self.cache))
        return self._open[name]

    def compare(self, base: str, target: str, **kw) -> Comparison:
        return compare_runs(self.prof(base), self.prof(target), **kw)


@pytest.fixture(scope="module")
def gen(tmp_path_factory: pytest.TempPathFactory) -> Gen:
    return Gen(tmp_path_factory.mktemp("planted"))


# ---------------------------------------------------------------------------------------------------------
# reading the generated files directly (the ground truth)

def _rank_dirs(path: Path) -> dict[int, Path]:
    return {int(next(d.glob("profiler_info_*.json")).stem.rsplit("_", 1)[1]): d
            for d in sorted(path.glob("*_ascend_pt"))}


def _csv(d: Path, name: str) -> list[dict[str, str]]:
    with open(d / "ASCEND_PROFILER_OUTPUT" / name, newline="") as f:
        return list(csv.DictReader(f))


def kernel_ms(path: Path, ranks: list[int] | None = None) -> dict[str, float]:
    """Device time per op type (kernel_details.csv), ms per (rank, step) over the chosen ranks."""
    tot: dict[str, float] = defaultdict(float)
    n = 0
    for rank, d in _rank_dirs(path).items():
        if ranks is not None and rank not in ranks:
            continue
        rows = _csv(d, "kernel_details.csv")
        n += len({r["Step Id"] for r in rows})
        for r in rows:
            tot[r["Type"]] += float(r["Duration(us)"]) / 1000
    return {k: v / n for k, v in tot.items()}


def shapes(path: Path, op_type: str) -> int:
    return len({r["Input Shapes"] for d in _rank_dirs(path).values() for r in _csv(d, "kernel_details.csv")
                if r["Type"] == op_type})


def step_trace(path: Path) -> dict[tuple[int, int], dict[str, float]]:
    """torch_npu's own overlap analysis (step_trace_time.csv), ms, per (rank, step)."""
    return {(rank, int(r["Step"])): {k: float(v) / 1000 for k, v in r.items() if k not in ("Device_id", "Step")}
            for rank, d in _rank_dirs(path).items() for r in _csv(d, "step_trace_time.csv")}


def st_delta(base: Path, target: Path, col: str, ranks: list[int] | None = None) -> dict[int, float]:
    """Per-rank mean over steps of target - base for one step_trace_time.csv column."""
    b, t = step_trace(base), step_trace(target)
    out = {}
    for rank in sorted({r for r, _ in b}):
        if ranks is None or rank in ranks:
            keys = [k for k in b if k[0] == rank]
            out[rank] = statistics.mean(t[k][col] - b[k][col] for k in keys)
    return out


def trace_view(path: Path, rank: int) -> list[dict]:
    d = _rank_dirs(path)[rank]
    return json.loads((d / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").read_text())


def kineto_step1(path: Path, rank: int) -> tuple[dict, list[dict]]:
    """ProfilerStep#1 of a generated Kineto rank and the events that start inside it. Kineto keeps one step
    fewer than it records (HTA drops the last, possibly truncated, step), so of 2 steps only #1 counts."""
    ev = json.loads((path / f"rank{rank}.pt.trace.json").read_text())["traceEvents"]
    step = next(e for e in ev if e.get("name") == "ProfilerStep#1")
    inside = [e for e in ev if "dur" in e and step["ts"] <= e["ts"] < step["ts"] + step["dur"]]
    return step, inside


def printed(verdict: str, label: str) -> float:
    """The signed ms printed right after `label` in the verdict."""
    m = re.search(re.escape(label) + r"(?: \(\d+ shapes\))? \(?([+-]\d+\.\d) ms", verdict)
    assert m, (label, verdict)
    return float(m.group(1))


def first_cause(verdict: str) -> str:
    """What the verdict names first after its dimension: the text after the first ': '."""
    return verdict.split(": ", 1)[1]


# ---------------------------------------------------------------------------------------------------------
# (1) slower kernels

def test_slower_kernels_on_all_ranks_name_matmul_first(gen: Gen) -> None:
    b, t = gen.path("asc-base"), gen.path("asc-slow-all")
    kb, kt = kernel_ms(b), kernel_ms(t)
    assert kt["MatMulV2"] / kb["MatMulV2"] == pytest.approx(1.4, rel=1e-4)     # the plant, as written
    delta = {k: kt[k] - kb[k] for k in kb}
    assert max(delta, key=delta.__getitem__) == "MatMulV2"                      # the largest cause in the files
    c = gen.compare("asc-base", "asc-slow-all")
    assert c.delta_ms == pytest.approx(statistics.mean(st_delta(b, t, "Stage").values()), abs=2e-3)
    compute = statistics.mean(st_delta(b, t, "Computing").values())
    assert c.breakdown_delta.compute_ms == pytest.approx(compute, abs=2e-3)
    assert c.breakdown_delta.communication_ms == pytest.approx(0.0, abs=0.01)
    assert c.verdict.startswith(f"step time {c.delta_ms:+.1f} ms (+{c.delta_pct:.1f}%), mostly compute")
    assert printed(c.verdict, "mostly compute") == pytest.approx(compute, abs=PRINTED)
    # MatMulV2 is keyed by (type, shapes) for msprof parity; the verdict names the type, all shapes summed
    assert first_cause(c.verdict).startswith(f"MatMulV2 ({shapes(b, 'MatMulV2')} shapes) +")
    assert printed(c.verdict, "MatMulV2") == pytest.approx(delta["MatMulV2"], abs=PRINTED)
    rows = [ch for ch in c.top_changes if ch.kind == "kernel" and ch.name.startswith("MatMulV2 [")]
    assert all(ch.target_ms == pytest.approx(1.4 * ch.base_ms, rel=1e-3) for ch in rows) and rows
    assert not c.findings and not c.env_changes


def test_slow_rank_names_the_rank_and_its_kernels_not_the_collective_its_peers_wait_in(gen: Gen) -> None:
    b, t = gen.path("asc-base"), gen.path("asc-slow-r3")
    c = gen.compare("asc-base", "asc-slow-r3")
    comm = st_delta(b, t, "Communication(Not Overlapped)")
    compute = st_delta(b, t, "Computing")
    # the trap: averaged over ranks, communication grew more than compute (ranks 0-2 wait for rank 3)
    assert c.breakdown_delta.communication_ms == pytest.approx(statistics.mean(comm.values()), abs=2e-3)
    assert c.breakdown_delta.communication_ms > 2 * c.breakdown_delta.compute_ms > 0
    assert c.verdict.startswith(f"step time {c.delta_ms:+.1f} ms (+{c.delta_pct:.1f}%), mostly rank 3 compute (")
    assert printed(c.verdict, "mostly rank 3 compute") == pytest.approx(compute[3], abs=PRINTED)
    assert printed(c.verdict, "its peers wait") == pytest.approx(statistics.median([comm[r] for r in (0, 1, 2)]),
                                                                   abs=PRINTED)
    d3 = {k: v - kernel_ms(b, [3])[k] for k, v in kernel_ms(t, [3]).items()}
    assert max(d3, key=d3.__getitem__) == "MatMulV2"
    assert first_cause(c.verdict).startswith("MatMulV2 (")
    assert printed(c.verdict, "MatMulV2") == pytest.approx(d3["MatMulV2"], abs=PRINTED)
    assert [(f.check, f.subject, f.ranks) for f in c.findings] == [("slow-rank", "compute", [3])]
    assert c.verdict.endswith(f"; new finding: {c.findings[0].title}")


# ---------------------------------------------------------------------------------------------------------
# (2) an environment variable removed, step time unchanged

def test_env_var_removed_is_named_first_when_step_time_is_unchanged(gen: Gen) -> None:
    b, t = gen.path("asc-gc"), gen.path("asc-gc-env")
    env_b = json.loads((_rank_dirs(b)[0] / "profiler_metadata.json").read_text())["ENV_VARIABLES"]
    env_t = json.loads((_rank_dirs(t)[0] / "profiler_metadata.json").read_text())["ENV_VARIABLES"]
    assert (env_b["ACLNN_CACHE_LIMIT"], env_t["ACLNN_CACHE_LIMIT"]) == ("100000", "")
    assert set(st_delta(b, t, "Stage").values()) == {0.0}                  # the plant does not move time
    c = gen.compare("asc-gc", "asc-gc-env")
    assert c.delta_ms == 0.0 and abs(c.delta_pct) < sides.NOISE_PCT
    assert c.verdict.startswith("step time +0.0 ms (+0.0%), within noise; "
                                "environment changed: ACLNN_CACHE_LIMIT 100000 -> unset; new: ACLNN_CACHE_LIMIT")
    assert c.env_changes == [EnvChange(name="ACLNN_CACHE_LIMIT", base="100000", target="")]
    assert [(f.check, f.subject, f.ranks) for f in c.findings] == [("env-var", "ACLNN_CACHE_LIMIT", [0, 1, 2, 3])]
    assert not c.gone_findings                    # the baseline gc-pause is on both sides: neither new nor gone
    assert c.findings[0].fixes and c.next_step == f"stepdoctor explain {c.findings[0].fixes[0]}"
    assert all(ch.delta_ms == 0 and ch.count_base == ch.count_target for ch in c.top_changes)


# ---------------------------------------------------------------------------------------------------------
# (3) more op compiles

def test_op_compiles_name_the_compile_api_with_its_calls_and_dimension(gen: Gen) -> None:
    b, t = gen.path("asc-base"), gen.path("asc-compile")
    name = "AscendCL@aclopCompileAndExecute"
    per = defaultdict(list)
    for rank in range(4):
        for e in trace_view(t, rank):
            if e.get("name") == name:
                per[rank].append(e["dur"] / 1000)
        assert not any(e.get("name") == name for e in trace_view(b, rank))
    calls = {r: len(v) / 2 for r, v in per.items()}                         # 2 steps
    assert calls == {0: 25, 1: 25, 2: 25, 3: 25}
    ms = statistics.mean(sum(v) / 2 for v in per.values())
    c = gen.compare("asc-base", "asc-compile")
    assert c.delta_ms == pytest.approx(statistics.mean(st_delta(b, t, "Stage").values()), abs=1e-3)
    assert abs(c.delta_pct) < sides.NOISE_PCT
    f = c.findings[0]
    assert [(x.check, x.subject) for x in c.findings] == [("op-compile", name)]
    assert c.verdict == (f"step time +0.0 ms (+0.0%), within noise; new: {f.title}, in free: {name} "
                         f"0 -> 25 calls/step, {ms:+.1f} ms")
    top = c.top_changes[0]
    assert (top.kind, top.name, top.count_base, top.count_target, top.change) == ("api", name, 0, 25, "added")
    assert top.target_ms == pytest.approx(ms, abs=1e-3) and ms == pytest.approx(25 * 0.3)


# ---------------------------------------------------------------------------------------------------------
# (4) a slower link

def _hccs(path: Path, rank: int) -> float:
    """A rank's HCCS bandwidth over all its steps (GB/s): transit size over transit time, communication.json."""
    j = json.loads((_rank_dirs(path)[rank] / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
    tot = [s["collective"]["Total Op Info"]["Communication Bandwidth Info"]["HCCS"] for s in j.values()]
    return sum(x["Transit Size(MB)"] for x in tot) / sum(x["Transit Time(ms)"] for x in tot)


def _elapse(path: Path) -> float:
    """Collective op time per (rank, step), ms, from communication.json."""
    vals = []
    for d in _rank_dirs(path).values():
        j = json.loads((d / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
        vals += [sum(op["Communication Time Info"]["Elapse Time(ms)"] for k, op in s["collective"].items()
                     if k != "Total Op Info") for s in j.values()]
    return statistics.mean(vals)


def test_slow_link_names_communication_and_the_slow_rank_link(gen: Gen) -> None:
    b, t = gen.path("asc-base"), gen.path("asc-link")
    bw = {r: _hccs(t, r) for r in range(4)}
    assert bw[3] == pytest.approx(6.7, rel=0.01) and min(bw[r] for r in (0, 1, 2)) > 19
    comm = statistics.mean(st_delta(b, t, "Communication(Not Overlapped)").values())
    c = gen.compare("asc-base", "asc-link")
    assert c.breakdown_delta.communication_ms == pytest.approx(comm, abs=2e-3)
    assert c.breakdown_delta.compute_ms == pytest.approx(0.0, abs=1e-3)
    assert c.verdict.startswith(f"step time {c.delta_ms:+.1f} ms (+{c.delta_pct:.1f}%), mostly communication (")
    assert printed(c.verdict, "mostly communication") == pytest.approx(comm, abs=PRINTED)
    # the collective every rank waits longer in, then the link that made it slow
    assert first_cause(c.verdict).startswith("allreduce @")
    assert printed(c.verdict, first_cause(c.verdict).split(" +")[0]) == pytest.approx(
        _elapse(t) - _elapse(b), abs=PRINTED)
    link = next(f for f in c.findings if f.check == "slow-link")
    assert link.ranks == [3] and f"new finding: {link.title}" in c.verdict
    assert "rank 3" in link.title and "6.7 GB/s" in link.title
    assert link.evidence["rank_transport_bandwidth"][0]["bandwidth_gbps"] == pytest.approx(bw[3], rel=1e-3)
    assert "rank 3 compute" not in c.verdict    # every rank's own work is unchanged: nobody is "late"


# ---------------------------------------------------------------------------------------------------------
# host-side plants: the new call is named, not the framework op that waits around it

def _calls_per_step(path: Path, name: str) -> tuple[float, float]:
    """Mean calls and ms per (rank, step) of host events named `name` (or starting with it), trace_view.json."""
    ev = [e for r in _rank_dirs(path) for e in trace_view(path, r) if e.get("name", "").startswith(name)]
    n = len(_rank_dirs(path)) * len({k[1] for k in step_trace(path)})
    return len(ev) / n, sum(e["dur"] for e in ev) / 1000 / n


def test_stream_syncs_name_the_sync_call_not_the_matmul_that_waits_in_it(gen: Gen) -> None:
    b, t = gen.path("asc-base"), gen.path("asc-sync")
    name = "AscendCL@aclrtSynchronizeStream"
    (nb, mb), (nt, mt) = _calls_per_step(b, name), _calls_per_step(t, name)
    c = gen.compare("asc-base", "asc-sync")
    free = statistics.mean(st_delta(b, t, "Free").values())
    # the generator's Free runs to the end of the host step, torch_npu's (and the breakdown's) stops at the
    # last kernel or collective: the deltas agree to 1 %
    assert c.breakdown_delta.free_ms == pytest.approx(free, rel=0.01)
    assert c.verdict.startswith(f"step time {c.delta_ms:+.1f} ms (+{c.delta_pct:.1f}%), mostly free (")
    assert printed(c.verdict, "mostly free") == pytest.approx(free, abs=PRINTED)
    # aten::mm grows more (+19 ms: the syncs run inside it) but its call count is unchanged
    mm = next(ch for ch in c.top_changes if ch.name == "aten::mm")
    assert mm.delta_ms > mt - mb and mm.count_base == mm.count_target
    assert first_cause(c.verdict).startswith(f"{name} {mt - mb:+.1f} ms, {nb:.0f} -> {nt:.0f} calls/step")
    assert (nb, nt) == (1, 70)
    assert "sync-stream" in {f.check for f in c.findings}


def test_new_sync_calls_are_named_the_same_on_either_vendor(gen: Gen) -> None:
    """The same plant on a GPU trace: cudaStreamSynchronize after every launch, with no host op gaining calls.
    A sync wait is an effect of what it waits for, unless new calls of it came with no new host code issuing
    them: then they are the cause, as on Ascend above (the real sync_heavy job, whose syncs a new aten op
    issues, keeps that op as its cause: test_real_compare.py)."""
    name = "cudaStreamSynchronize"
    c = gen.compare("kin-base", "kin-sync")
    sync = next(ch for ch in c.top_changes if ch.name == name)
    assert (sync.count_base, sync.count_target) == (1, 70) and sync.delta_ms > 0
    # the device-side marker of the waits (cuda_sync `Stream Sync`) is the memory part; the host calls, not
    # the aten::mm that holds them with the same call count, are the free part's cause
    free = c.verdict.split("also free")[1]
    assert free.split(": ", 1)[1].startswith(f"{name} {sync.delta_ms:+.1f} ms, 1 -> 70 calls/step"), c.verdict
    assert "aten::mm" not in c.verdict
    assert "sync-stream" in {f.check for f in c.findings}


def test_slow_dataloader_names_host_time_and_the_loader(gen: Gen) -> None:
    b, t = gen.path("asc-base"), gen.path("asc-loader")
    name = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    (nb, _), (nt, mt) = _calls_per_step(b, name), _calls_per_step(t, name)
    assert (nb, nt, mt) == (0, 1, pytest.approx(15.0))
    c = gen.compare("asc-base", "asc-loader")
    # host = step time outside the device window; on Ascend that is torch_npu's "Preparing" (the loader
    # runs before the first kernel)
    prep = statistics.mean(st_delta(b, t, "Preparing").values())
    assert c.verdict.startswith(f"step time {c.delta_ms:+.1f} ms (+{c.delta_pct:.1f}%), mostly host (")
    assert printed(c.verdict, "mostly host") == pytest.approx(prep, abs=PRINTED)
    assert first_cause(c.verdict).startswith(f"{name} {mt:+.1f} ms, 0 -> 1 calls/step")
    assert [f.check for f in c.findings] == ["slow-dataloader"]


# ---------------------------------------------------------------------------------------------------------
# Kineto pairs

def test_kineto_pageable_h2d_names_memory_and_the_pageable_copy(gen: Gen) -> None:
    b, t = gen.path("kin-base"), gen.path("kin-h2d")
    name = "Memcpy HtoD (Pageable -> Device)"
    copies = {r: [e for e in kineto_step1(t, r)[1] if e["name"] == name] for r in range(4)}
    assert {r: len(v) for r, v in copies.items()} == {0: 2, 1: 2, 2: 2, 3: 2}
    ms = statistics.mean(sum(e["dur"] for e in v) / 1000 for v in copies.values())
    step = statistics.mean(kineto_step1(t, r)[0]["dur"] - kineto_step1(b, r)[0]["dur"] for r in range(4)) / 1000
    c = gen.compare("kin-base", "kin-h2d")
    assert c.delta_ms == pytest.approx(step, abs=2e-3)
    # no compute / communication / free change: the step grew by device time spent copying alone
    assert abs(c.breakdown_delta.compute_ms) < 0.01 and abs(c.breakdown_delta.communication_ms) < 0.01
    assert c.verdict.startswith(f"step time {c.delta_ms:+.1f} ms (+{c.delta_pct:.1f}%), mostly memory (")
    assert printed(c.verdict, "mostly memory") == pytest.approx(step, abs=0.1)
    assert first_cause(c.verdict).startswith(f"{name} {ms:+.1f} ms, 0 -> 2 calls/step")
    assert [f.check for f in c.findings] == ["h2d-pageable"]
    assert c.verdict.endswith(f"; new finding: {c.findings[0].title}")
    top = c.top_changes[0]
    assert (top.kind, top.name, top.count_base, top.count_target) == ("kernel", name, 0, 2)
    assert top.target_ms == pytest.approx(ms, abs=1e-3)


def test_kineto_slow_rank_names_the_rank_and_its_gemm(gen: Gen) -> None:
    b, t = gen.path("kin-base"), gen.path("kin-slow-r3")
    delta: dict[str, float] = defaultdict(float)
    for path, sign in ((b, -1), (t, 1)):
        for e in kineto_step1(path, 3)[1]:
            if e.get("cat") == "kernel" and not e["name"].startswith("nccl"):
                delta[e["name"]] += sign * e["dur"] / 1000
    top = max(delta, key=delta.__getitem__)
    c = gen.compare("kin-base", "kin-slow-r3")
    assert c.verdict.startswith(f"step time {c.delta_ms:+.1f} ms (+{c.delta_pct:.1f}%), mostly rank 3 compute (")
    assert c.breakdown_delta.communication_ms > c.breakdown_delta.compute_ms > 0   # the trap, as on Ascend
    own = sum(v for v in delta.values())
    assert printed(c.verdict, "mostly rank 3 compute") == pytest.approx(own, abs=0.1)
    assert "gemm" in top and printed(c.verdict, top) == pytest.approx(delta[top], abs=PRINTED)
    # three gemm variants grew by the same 0.4 x; the verdict lists them (largest first, ties in any order)
    named = first_cause(c.verdict).split(";")[0]
    assert top in named and named.startswith("ampere_bf16_s16816gemm")
    assert [(f.check, f.subject, f.ranks) for f in c.findings] == [("slow-rank", "compute", [3])]


# ---------------------------------------------------------------------------------------------------------
# nothing changed, uneven runs, bad input

def test_identical_runs_name_no_cause(gen: Gen) -> None:
    c = compare_runs(gen.prof("asc-base"), open_profile(gen.path("asc-base"), IngestOptions(cache_dir=gen.cache)))
    assert c.verdict == "step time +0.0 ms (+0.0%), within noise; no op changed"
    assert c.delta_ms == 0 and not c.findings and not c.env_changes and not c.config_changes


def test_four_ranks_two_steps_against_two_ranks_three_steps_compares_the_common_ranks(gen: Gen) -> None:
    b, t = gen.path("asc-base"), gen.path("asc-2r3s")
    c = gen.compare("asc-base", "asc-2r3s")
    assert c.base.ranks == c.target.ranks == [0, 1]
    assert (c.base.steps, c.target.steps) == ([1, 2], [1, 2, 3])
    assert "ranks differ (base [0, 1, 2, 3], target [0, 1]); compared the 2 common rank(s)" in c.notes
    assert "step counts differ (2 vs 3); values are per-step means" in c.notes
    # per-step means over the common ranks only, from step_trace_time.csv
    sb, stt = step_trace(b), step_trace(t)
    assert c.base.step_ms == pytest.approx(statistics.mean(v["Stage"] for (r, _), v in sb.items() if r < 2), abs=1e-3)
    assert c.target.step_ms == pytest.approx(statistics.mean(v["Stage"] for v in stt.values()), abs=1e-3)
    assert len(c.per_rank) == 2
    assert EnvChange(name="world_size", base="4", target="2") in c.config_changes
    assert "world_size 4 -> 2" in c.verdict


def test_rank_missing_from_one_side_is_a_one_line_usage_error(gen: Gen) -> None:
    with pytest.raises(UsageError) as e:
        gen.compare("asc-base", "asc-2r3s", rank=3)
    msg = str(e.value)
    assert "\n" not in msg and "rank 3 not in profile; ranks are 0, 1" in msg and "asc-2r3s" in msg
    c = gen.compare("asc-base", "asc-2r3s", rank=1)                 # a rank both have still compares
    assert c.base.ranks == c.target.ranks == [1]


# ---------------------------------------------------------------------------------------------------------
# cross-vendor: Kineto H100 vs one Ascend rank, against msprof-analyze's NPU-vs-GPU compare

GPU = SHARED / "ascend" / "gpu" / "gpu_trace.pt.trace.json"
NPU0 = SHARED / "ascend" / "cluster4" / "node0_40000_20250101120000100_ascend_pt"
MSPROF = SHARED / "ascend" / "msprof-analyze-output" / "compare_npu_rank0_vs_gpu.json"


def test_cross_vendor_compares_by_family_and_matches_msprof_compare(gen: Gen) -> None:
    gpu, npu = open_profile(need(GPU), IngestOptions(cache_dir=gen.cache)), open_profile(need(NPU0), IngestOptions(cache_dir=gen.cache))
    c = compare_runs(gpu, npu, top=40)
    assert c.cross_vendor
    assert any("names are not matched one to one" in n for n in c.notes)
    fam = {ch.name: ch for ch in c.top_changes if ch.kind == "family"}
    assert set(fam) == {"matmul", "attention", "vector", "communication"}   # neither side has copies
    assert {ch.kind for ch in c.top_changes} <= {"family", "api", "op"}     # no device op matched by name
    assert [ch.kind for ch in c.top_changes[:4]] == ["family"] * 4

    ref = json.loads(MSPROF.read_text())
    rows = {r[0].strip(): r for r in ref["OverallMetrics"]["rows"] if isinstance(r[0], str)}
    # msprof-analyze sums the whole profile; we report per-step means. Both sides hold identical steps:
    # the NPU rank 2 kept steps, the GPU trace 2 ProfilerSteps of which HTA's rule keeps the first
    # (the last may be cut off), so msprof's totals are 2 x our per-step values on both sides.
    n_gpu = len(gpu.info.steps) + len(gpu.info.dropped_steps)
    n_npu = len(npu.info.steps)
    assert (n_gpu, n_npu, c.base.steps, c.target.steps) == (2, 2, [1], [1, 2])
    for fam_name, label in (("matmul", "Matmul"), ("attention", "Flash Attention (Forward)"), ("vector", "Vector")):
        r = rows[label]   # Index, base ms, ratio, number, target ms, ratio, number, diff ms, diff ratio
        ch = fam[fam_name]
        assert ch.base_ms * n_gpu == pytest.approx(r[1], abs=0.01), fam_name
        assert ch.target_ms * n_npu == pytest.approx(r[4], abs=0.01), fam_name
        assert (ch.count_base * n_gpu, ch.count_target * n_npu) == (r[3], r[6]), fam_name
    comp = rows["Computing Time"]
    assert c.base.compute_ms * n_gpu == pytest.approx(comp[1], abs=0.01)           # 19.36 ms
    assert c.target.compute_ms * n_npu == pytest.approx(comp[4], abs=0.01)         # 37.24 ms
    # NPU: not-overlapped communication is the same quantity as msprof's "Uncovered Communication Time".
    assert c.target.communication_ms * n_npu == pytest.approx(rows["Uncovered Communication Time"][4], abs=0.01)
    # GPU: the four NCCL kernels of a step run after the device window HTA gives step 1 (their launches
    # precede the trace, so HTA's rule puts them in no iteration) and the breakdown shows 0 ms; msprof counts
    # them (5.6 ms). The family table counts every device op of the step, as msprof does, so it agrees.
    nccl = next(r for r in ref["CommunicationCompare"]["rows"] if r[0] == 1)
    assert fam["communication"].base_ms * n_gpu == pytest.approx(nccl[4] / 1000, abs=0.01)
    assert fam["communication"].count_base * n_gpu == nccl[3]
    assert fam["communication"].target_ms == pytest.approx(c.target.communication_ms, abs=0.01)   # no overlap
    # Free / E2E are not compared: msprof's E2E is the device span of the whole profile (436 ms), ours the
    # host ProfilerStep (2 x 225 ms), and its free time is that span minus busy time.
    assert "vendor cuda -> ascend" in c.verdict
