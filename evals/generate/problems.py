"""The catalog of plantable problems, the scenario model and the expected findings.

Every problem id equals a check id of the catalog in `cli-contract.md`, so a scorer can match what
stepdoctor reports against what was planted. A `Scenario` says which vendor format to write, how many
ranks and steps, the seed, and the `Plant`s; `expected_findings` turns it into the findings a correct
analysis must report (check, subject, ranks, steps).

Conventions used by every generator:

- ranks are 0-based global rank ids; steps are the `ProfilerStep#N` numbers, 1-based;
- `Plant.ranks is None` means the problem's default ranks: "all" for most problems, the last rank for
  problems that only show as a difference between ranks (slow rank, slow link) or that the rules
  describe on one rank (AI-core throttling, RDMA retransmission);
- `Plant.steps is None` means the default steps: all steps, except retransmission (first step only);
- an empty `subject` in an expected finding means "any subject".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

VENDORS: tuple[str, ...] = ("ascend", "kineto")
DIMENSIONS: tuple[str, ...] = ("compute", "communication", "free")

# Recommended values of the 9 variables torch_npu records (rules doc §5.3); a clean profile carries these.
CLEAN_ENV: dict[str, str] = {
    "ASCEND_GLOBAL_LOG_LEVEL": "3",
    "HCCL_RDMA_TC": "",
    "HCCL_RDMA_SL": "",
    "ACLNN_CACHE_LIMIT": "100000",
    "HOST_CACHE_CAPACITY": "20",
    "ASCEND_ENHANCE_ENABLE": "1",
    "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
    "ASCEND_LAUNCH_BLOCKING": "0",
    "HCCL_ALGO": "",
}

# The bad values of the synthetic sample cluster4 (rules doc §8.3 rows 1-4): the default env-var plant.
BAD_ENV: dict[str, str] = {
    "ASCEND_LAUNCH_BLOCKING": "1",
    "ASCEND_GLOBAL_LOG_LEVEL": "1",
    "ACLNN_CACHE_LIMIT": "",
    "HOST_CACHE_CAPACITY": "",
    "PYTORCH_NPU_ALLOC_CONF": "",
    "HCCL_ALGO": "level0:NA;level1:ring",
}

# Replacement APIs named by msprof-analyze's affinity rules for the three planted patterns.
AFFINITY_APIS: dict[str, str] = {
    "fast_gelu": "torch_npu.fast_gelu",
    "npu_add_layer_norm": "torch_npu.npu_add_layer_norm",
    "NpuFusedAdamW": "torch_npu.optim.NpuFusedAdamW",
}


@dataclass(frozen=True)
class Problem:
    """One plantable problem.

    `changes` says per vendor what the plant changes in the written files; `defaults` holds the
    parameters (units in the names), `vendor_defaults` overrides them per vendor. `may_also_fire` lists
    findings ("check" or "check:subject") that legitimately follow from the plant (a scorer should not
    count them as false positives).
    """

    check: str
    title: str
    vendors: tuple[str, ...]
    changes: dict[str, str]
    defaults: dict[str, Any] = field(default_factory=dict)
    vendor_defaults: dict[str, dict[str, Any]] = field(default_factory=dict)
    default_ranks: str = "all"  # "all" | "last"
    default_steps: str = "all"  # "all" | "first"
    may_also_fire: tuple[str, ...] = ()

    def params_for(self, vendor: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """Default parameters for `vendor`, updated with `overrides`."""
        params = dict(self.defaults)
        params.update(self.vendor_defaults.get(vendor, {}))
        params.update(overrides or {})
        return params


def _p(check: str, title: str, changes: dict[str, str], **kw: Any) -> Problem:
    return Problem(
        check=check, title=title, vendors=tuple(v for v in VENDORS if v in changes), changes=changes, **kw
    )


PROBLEMS: dict[str, Problem] = {
    p.check: p
    for p in (
        _p(
            "slow-rank",
            "one rank is slower than its peers in one dimension",
            {
                "ascend": "compute: kernel durations x factor on the chosen ranks (peers wait in the "
                "gradient AllReduce); free: an idle tail of tail_ms at the end of the chosen steps (no "
                "host or device activity); communication: extra_comm_ms of non-overlapped hcom_send p2p "
                "ops after the optimizer",
                "kineto": "compute: kernel durations x factor on the chosen ranks, so they arrive late at "
                "the NCCL AllReduce and the peers' NCCL kernels stretch while waiting; free: an idle tail; "
                "communication: extra non-overlapped NCCL SendRecv kernels after the optimizer",
            },
            defaults={"dimension": "compute", "factor": 1.4, "tail_ms": 250.0, "extra_comm_ms": 30.0},
            default_ranks="last",
            may_also_fire=("slow-rank:communication", "gc-pause"),
        ),
        _p(
            "slow-link",
            "a rank's links run at a fraction of the peers' bandwidth",
            {
                "ascend": "SDMA/HCCS Memcpy tasks of the chosen ranks run at bandwidth_gbps (peers ~19.5 "
                "GB/s); peers wait for them in every AllReduce"
            },
            defaults={"bandwidth_gbps": 6.7},
            default_ranks="last",
            may_also_fire=("exposed-comm-tail",),
        ),
        _p(
            "env-var",
            "environment variables set to values that cost performance",
            {
                "ascend": "profiler_metadata.json ENV_VARIABLES of the chosen ranks get the bad values in "
                "`vars`"
            },
            defaults={"vars": dict(BAD_ENV)},
        ),
        _p(
            "aicpu-op",
            "operators run on the AI CPU",
            {
                "ascend": "per layer and step, `per_layer` AI_CPU kernels of op_type (dur_us, DOUBLE "
                "inputs) after the forward FFN"
            },
            defaults={"op_type": "IndexPut", "dur_us": 400.0, "per_layer": 1},
        ),
        _p(
            "dynamic-shape",
            "operators are compiled for dynamic shapes",
            {"ascend": "kernel_details `OP State` = dynamic on every kernel (clean: static)"},
        ),
        _p(
            "block-dim-underuse",
            "kernels use fewer cores than the device has",
            {
                "ascend": "MatMulV2 block dim cube_block_dim (24 AI cores) and vector kernels "
                "vector_block_dim (48 vector cores); clean uses 24 / 48"
            },
            defaults={"cube_block_dim": 20, "vector_block_dim": 40},
        ),
        _p(
            "no-bound-op",
            "kernels are bound by nothing (all pipe ratios low)",
            {
                "ascend": "every PMU ratio of every kernel scaled so the largest is max_ratio (clean: one "
                ">= 0.8)"
            },
            defaults={"max_ratio": 0.6},
        ),
        _p(
            "misaligned-shape",
            "matmul / attention shapes miss the hardware alignment",
            {
                "ascend": "hidden size `hidden` and FFN sizes not multiples of 256 (MatMulV2 inner axes), "
                "FlashAttention head dim hidden/32 not a multiple of 128"
            },
            defaults={"hidden": 4000, "ffn": 11000},
        ),
        _p(
            "freq-throttle",
            "the AI-core frequency dropped below its rated value",
            {
                "ascend": "`AI Core Freq` counter at mhz on the chosen ranks and steps (rated 1800 MHz in "
                "info.json); durations unchanged unless slowdown is true"
            },
            defaults={"mhz": 1300, "slowdown": False},
            default_ranks="last",
        ),
        _p(
            "sync-stream",
            "the host synchronizes the stream after every launch",
            {
                "ascend": "AscendCL@aclrtSynchronizeStream right after each Node@launch; the host waits for "
                "each kernel, the device idles between kernels",
                "kineto": "cudaStreamSynchronize (+ cuda_sync `Stream Sync`) right after each "
                "cudaLaunchKernel; the device idles between kernels",
            },
            may_also_fire=("host-bound",),
        ),
        _p(
            "op-compile",
            "operators are compiled during training steps",
            {"ascend": "`count` AscendCL@aclopCompileAndExecute of dur_us per step, spread over the forward"},
            defaults={"count": 25, "dur_us": 300.0},
        ),
        _p(
            "sync-batchnorm",
            "SyncBatchNorm runs during training",
            {"ascend": "`count` Python `SyncBatchNorm` events per step (30 us each) in the forward"},
            defaults={"count": 25},
        ),
        _p(
            "affinity-api",
            "op sequences with a fused torch_npu replacement",
            {
                "ascend": "aten::gelu replaces npu::npu_swiglu (fast_gelu), aten::add + aten::layer_norm "
                "replace npu::npu_add_rms_norm (npu_add_layer_norm), Optimizer.step#AdamW.step replaces "
                "Optimizer.step#NpuFusedAdamW.step (NpuFusedAdamW); pick with `apis`"
            },
            defaults={"apis": list(AFFINITY_APIS)},
        ),
        _p(
            "gc-pause",
            "Python garbage collection stalls the host",
            {
                "ascend": "`count` events name/cat `GC` of dur_ms per step on the Python thread, between "
                "forward layers (clean has none; _gc_detect_threshold is 1 ms)",
                "kineto": "`count` host gaps of dur_ms per step with no event at all on the Python threads, "
                "between forward layers; the GPU drains its queue and idles (Kineto records no GC)",
            },
            defaults={"count": 3},
            vendor_defaults={"ascend": {"dur_ms": 1.5}, "kineto": {"dur_ms": 25.0}},
            may_also_fire=("host-bound",),
        ),
        _p(
            "slow-dataloader",
            "the data loader holds the step",
            {
                "ascend": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__ of dur_ms at step "
                "start (clean: _MultiProcessingDataLoaderIter, 2 ms)",
                "kineto": "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__ of dur_ms at step "
                "start (clean: _MultiProcessingDataLoaderIter, 1.5 ms)",
            },
            defaults={"dur_ms": 15.0},
        ),
        _p(
            "host-bound",
            "the device waits for the host to launch work",
            {
                "ascend": "kernel durations x kernel_scale, host time per op host_us and "
                "extra_tiny_per_layer tiny vector ops per layer pass: the device idles between launches "
                "(large Free); the small model's gradients go in one 16 MiB-per-peer AllReduce at the end "
                "of backward",
                "kineto": "same: tiny kernels, each cudaLaunchKernel starts after the previous kernel ended "
                "(HTA host_wait idle)",
            },
            defaults={"kernel_scale": 0.02, "host_us": 60.0, "extra_tiny_per_layer": 10},
            may_also_fire=("exposed-comm-tail",),
        ),
        _p(
            "small-packet",
            "collectives move packets too small to use the link bandwidth",
            {
                "ascend": "each gradient AllReduce is split into ops whose per-peer SDMA packet is "
                "packet_bytes (clean: 32 MiB per packet and op)",
                "kineto": "each DDP bucket is split into AllReduce calls of bucket_bytes (`In msg nelems` "
                "small; clean: 25 MiB buckets)",
            },
            vendor_defaults={"ascend": {"packet_bytes": 1 << 20}, "kineto": {"bucket_bytes": 1 << 20}},
        ),
        _p(
            "bandwidth-contention",
            "communication slows down while it overlaps compute",
            {
                "ascend": "SDMA Memcpy bandwidth_gbps (< 14.4 GB/s) on the AllReduce ops issued during the "
                "backward, which overlap MatMulV2 kernels (clean: ~19.5 GB/s)"
            },
            defaults={"bandwidth_gbps": 9.0},
            may_also_fire=("exposed-comm-tail",),
        ),
        _p(
            "retransmission",
            "RDMA transfers were retransmitted",
            {
                "ascend": "one AllReduce (op_index of the step) gets an RDMA Memcpy of transit_ms on the "
                "chosen ranks; every rank's op lasts > 4 s"
            },
            defaults={"transit_ms": 4200.0, "op_index": 0},
            default_ranks="last",
            default_steps="first",
            may_also_fire=("exposed-comm-tail", "slow-link"),
        ),
        _p(
            "byte-misalignment",
            "communication sizes are not multiples of 512 B",
            {
                "ascend": "the first SDMA Memcpy of every AllReduce has size_bytes (default 32 MiB + 100 B, "
                "so it is misaligned but not a small packet; 1000100 reproduces the sample)"
            },
            defaults={"size_bytes": (32 << 20) + 100},
        ),
        _p(
            "exposed-comm-tail",
            "gradient communication after backward is not overlapped",
            {
                "ascend": "all gradient AllReduce ops are issued after the last backward kernel, one after "
                "the other, and the optimizer waits for them (Communication(Not Overlapped) grows)",
                "kineto": "all NCCL AllReduce kernels run after the last backward kernel with no compute "
                "beside them",
            },
        ),
        _p(
            "memory-ops",
            "the allocator mallocs device memory inside steps",
            {
                "ascend": "`count` AscendCL@aclMallocMemInner of dur_ms per step after the first forward "
                "layer",
                "kineto": "`count` cudaMalloc runtime calls of dur_ms per step after the first forward layer",
            },
            defaults={"count": 6, "dur_ms": 2.5},
        ),
        _p(
            "h2d-pageable",
            "host-to-device copies from pageable memory",
            {
                "kineto": "the two input batch copies are `Memcpy HtoD (Pageable -> Device)` at "
                "bandwidth_gbps and block the host (clean: Pinned -> Device, 23 GB/s, non-blocking)"
            },
            defaults={"bandwidth_gbps": 6.0},
        ),
        _p(
            "fp32-compute",
            "matmul / attention time dominated by float32 kernels",
            {
                "ascend": "MatMulV2 / FlashAttention inputs FLOAT (clean DT_BF16), durations x slowdown, "
                "HF32 Eligible YES",
                "kineto": "ampere_sgemm_* / fmha_cutlassF_f32 kernels x slowdown replace "
                "ampere_bf16_s16816gemm_* / flash_fwd bf16 kernels; cpu op Input type float",
            },
            defaults={"slowdown": 2.0},
        ),
    )
}

# Subjects of the expected findings where the check has a crisp one; "" = any subject.
_FIXED_SUBJECT: dict[str, str] = {
    "slow-link": "SDMA",
    "retransmission": "RDMA",
    "sync-batchnorm": "SyncBatchNorm",
}


@dataclass
class Plant:
    """A problem planted in a scenario. `ranks` / `steps` None = the problem's defaults (see module doc)."""

    check: str
    ranks: list[int] | None = None
    steps: list[int] | None = None
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class Scenario:
    """What to generate: vendor format, world size, steps per rank, seed and planted problems."""

    vendor: str
    ranks: int = 4
    steps: int = 2
    seed: int = 0
    plants: list[Plant] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.vendor not in VENDORS:
            raise ValueError(f"vendor must be one of {VENDORS}, got {self.vendor!r}")
        if self.ranks < 1 or self.steps < 1:
            raise ValueError("ranks and steps must be >= 1")
        for plant in self.plants:
            problem = PROBLEMS.get(plant.check)
            if problem is None:
                raise ValueError(f"unknown check {plant.check!r}; known: {', '.join(PROBLEMS)}")
            if self.vendor not in problem.vendors:
                raise ValueError(
                    f"{plant.check} cannot be planted in {self.vendor} profiles "
                    f"(only {', '.join(problem.vendors)})"
                )
            for r in plant.ranks or []:
                if not 0 <= r < self.ranks:
                    raise ValueError(f"{plant.check}: rank {r} outside 0..{self.ranks - 1}")
            for s in plant.steps or []:
                if not 1 <= s <= self.steps:
                    raise ValueError(f"{plant.check}: step {s} outside 1..{self.steps}")
            dim = plant.params.get("dimension", "compute")
            if plant.check == "slow-rank" and dim not in DIMENSIONS:
                raise ValueError(f"slow-rank dimension must be one of {DIMENSIONS}, got {dim!r}")


@dataclass(frozen=True)
class ResolvedPlant:
    """A plant with its ranks, steps and parameters filled in from the problem defaults."""

    check: str
    ranks: tuple[int, ...]
    steps: tuple[int, ...]
    params: dict[str, Any]

    def hits(self, rank: int, step: int | None = None) -> bool:
        """True when the plant applies to `rank` (and `step`, when given)."""
        return rank in self.ranks and (step is None or step in self.steps)


def resolve(scenario: Scenario) -> list[ResolvedPlant]:
    """Fill in default ranks, steps and parameters of every plant of `scenario`."""
    out = []
    for plant in scenario.plants:
        problem = PROBLEMS[plant.check]
        if plant.ranks is not None:
            ranks = tuple(sorted(set(plant.ranks)))
        elif problem.default_ranks == "last":
            ranks = (scenario.ranks - 1,)
        else:
            ranks = tuple(range(scenario.ranks))
        if plant.steps is not None:
            steps = tuple(sorted(set(plant.steps)))
        elif problem.default_steps == "first":
            steps = (1,)
        else:
            steps = tuple(range(1, scenario.steps + 1))
        params = problem.params_for(scenario.vendor, plant.params)
        # CLI-friendly forms of the list / dict parameters.
        if plant.check == "env-var" and "name" in params:
            params["vars"] = {str(params.pop("name")): str(params.pop("value", ""))}
        if isinstance(params.get("apis"), str):
            params["apis"] = [a for a in params["apis"].split("+") if a]
        unknown = [a for a in params.get("apis", []) if a not in AFFINITY_APIS]
        unknown += [v for v in params.get("vars", {}) if v not in CLEAN_ENV]
        if unknown:
            raise ValueError(f"{plant.check}: unknown {', '.join(unknown)}")
        out.append(ResolvedPlant(plant.check, ranks, steps, params))
    return out


def plants_for(resolved: list[ResolvedPlant], check: str) -> list[ResolvedPlant]:
    """The resolved plants of one check."""
    return [p for p in resolved if p.check == check]


def expected_findings(scenario: Scenario) -> list[dict[str, Any]]:
    """The findings a correct analysis reports for `scenario`.

    One dict per finding: `check`, `subject` ("" = any), `ranks` (sorted global ranks), `steps` (the
    planted steps; all steps when the plant covers all of them). A clean scenario expects nothing.
    """
    all_steps = list(range(1, scenario.steps + 1))
    out: list[dict[str, Any]] = []
    for rp in resolve(scenario):
        steps = list(rp.steps) if list(rp.steps) != all_steps else all_steps
        base = {"check": rp.check, "ranks": list(rp.ranks), "steps": steps}
        if rp.check == "env-var":
            out.extend({**base, "subject": name} for name in rp.params["vars"])
        elif rp.check == "affinity-api":
            out.extend({**base, "subject": AFFINITY_APIS[api]} for api in rp.params["apis"])
        elif rp.check == "slow-rank":
            out.append({**base, "subject": rp.params["dimension"]})
        elif rp.check == "aicpu-op":
            out.append({**base, "subject": rp.params["op_type"]})
        else:
            out.append({**base, "subject": _FIXED_SUBJECT.get(rp.check, "")})
    out.sort(key=lambda f: (f["check"], f["subject"], f["ranks"]))
    return out


def parse_plant_spec(spec: str) -> Plant:
    """Parse `CHECK[:RANKS[:STEPS[:KEY=VAL,...]]]` (the CLI form).

    RANKS / STEPS are comma lists or empty (= defaults); values parse as int, float, true/false, else str.
    Examples: `slow-rank:3::dimension=free,tail_ms=300`, `env-var:::name=HCCL_ALGO,value=ring`,
    `affinity-api:::apis=fast_gelu+NpuFusedAdamW` (a `+` list).
    """
    parts = spec.split(":", 3)
    check = parts[0]

    def ints(text: str) -> list[int] | None:
        text = text.strip()
        if not text or text == "all":
            return None
        return [int(x) for x in text.split(",") if x.strip()]

    ranks = ints(parts[1]) if len(parts) > 1 else None
    steps = ints(parts[2]) if len(parts) > 2 else None
    params: dict[str, Any] = {}
    if len(parts) > 3 and parts[3].strip():
        for item in parts[3].split(","):
            key, _, raw = item.partition("=")
            params[key.strip()] = _parse_value(raw.strip())
    return Plant(check=check, ranks=ranks, steps=steps, params=params)


def _parse_value(raw: str) -> Any:
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    for cast in (int, float):
        try:
            return cast(raw)
        except ValueError:
            pass
    return raw


# What a slow rank causes elsewhere: peers waiting in the collectives (compute); an idle gap with no host
# activity, which the conjectured-GC rule reads as a GC pause (free).
_SLOW_RANK_SIDE: dict[str, tuple[str, str]] = {
    "compute": ("slow-rank", "communication"),
    "free": ("gc-pause", ""),
    "communication": ("", ""),
}


def tolerated_findings(scenario: Scenario) -> list[dict[str, Any]]:
    """Findings that legitimately follow from the plants (`Problem.may_also_fire`): a scorer should count
    them neither as hits nor as false positives. One dict per entry: `check`, `subject` ("" = any), `because`.
    """
    out: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for rp in resolve(scenario):
        for item in PROBLEMS[rp.check].may_also_fire:
            check, _, subject = item.partition(":")
            if rp.check == "slow-rank" and (check, subject) != _SLOW_RANK_SIDE[rp.params["dimension"]]:
                continue
            if (check, subject) not in seen:
                seen.add((check, subject))
                out.append({"check": check, "subject": subject, "because": rp.check})
    return out


def catalog() -> list[dict[str, Any]]:
    """The problem catalog as plain data (for docs and `python -m stepdoctor.evals.generate catalog`)."""
    return [
        {
            "check": p.check,
            "title": p.title,
            "vendors": list(p.vendors),
            "changes": p.changes,
            "defaults": {v: p.params_for(v) for v in p.vendors},
            "default_ranks": p.default_ranks,
            "default_steps": p.default_steps,
            "may_also_fire": list(p.may_also_fire),
        }
        for p in PROBLEMS.values()
    ]
