"""Every threshold stepdoctor uses, in one table, each with the source it came from.

Checks read `T.<name>.value`; nothing else in the code base hard-codes a threshold. The docs page
`docs/checks.md` is generated from this table.
"""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class Threshold:
    value: float
    unit: str
    source: str
    meaning: str


MSPROF = "msprof-analyze 26.2.0 advisor"


@dataclass(frozen=True)
class _Table:
    # priorities
    priority_high_pct: Threshold = Threshold(5.0, "% of step", f"{MSPROF} priority rule", "impact share for high")
    priority_medium_pct: Threshold = Threshold(3.0, "% of step", f"{MSPROF} priority rule",
                                               "impact share for medium")
    # slow rank
    slow_rank_gap_pct: Threshold = Threshold(
        5.0, "% of mean step", f"{MSPROF} SlowRankAnalyzer (max-min)/mean > 5 %",
        "a dimension's spread across ranks that counts as uneven")
    slow_rank_robust_z: Threshold = Threshold(
        3.5, "robust z (MAD)", "Iglewicz & Hoaglin modified z-score; traceml straggler policy uses median too",
        "how far above the median a rank must be to be named")
    slow_rank_dim_excess_pct: Threshold = Threshold(
        10.0, "% of the dimension's median", "stepdoctor; traceml straggler policy warns at 10 % over the median",
        "how much more of a dimension a rank must spend than the median rank")
    slow_rank_min_excess_pct: Threshold = Threshold(
        0.5, "% of mean step", "stepdoctor (keeps negligible differences from being named)",
        "minimum excess over the median, as share of step, for a rank to be named")
    # stragglers by arrival at collectives (analysis/metrics/collectives.py)
    straggler_dixon_alpha: Threshold = Threshold(
        0.05, "significance", "Dixon (1951) Q test r10, used for 3-10 ranks; msprof-analyze uses 3-sigma beyond",
        "significance level of the per-collective test that the last rank arrived abnormally late")
    straggler_sigma: Threshold = Threshold(
        3.0, "standard deviations", f"{MSPROF} slow rank 3-sigma rule",
        "beyond 10 ranks, how far below the other ranks' mean wait the last arriver's wait must be")
    replay_max_error_pct: Threshold = Threshold(
        2.0, "% of step", "OSDI'25 straggler analysis (ByteDance-Seed/StragglerAnalysis): null-replay error "
        "0.5-1.9 % on its traces", "a step whose null replay misses its measured time by more is not used")
    replay_t_alpha: Threshold = Threshold(
        0.05, "one-sided p", "Student's paired t test (3 or more replayed steps), Bonferroni over the ranks tested",
        "a rank is named only when its own time exceeds its peers' median at this significance")
    replay_extra_work_share: Threshold = Threshold(
        0.5, "share", "stepdoctor (op counts do not move with the host's load; half: the extra ops are the larger "
        "part of the excess, not a small side effect of noise)",
        "a rank whose excess own time is at least this share of ops its peers do not run, in every step, "
        "stands out without the noise test")
    whatif_min_slowdown: Threshold = Threshold(
        1.03, "S", "OSDI'25 straggler analysis: decomposition only above S = 1.03",
        "below this the job runs at its ideal: no verdict of a slow worker or stage")
    straggler_min_wait_ms: Threshold = Threshold(
        0.2, "ms", "stepdoctor (keeps launch jitter, tens of µs, from counting as a late arrival)",
        "the median wait of the other ranks at a collective for its last arriver to count as late")
    straggler_last_share: Threshold = Threshold(
        0.25, "share of collectives", "stepdoctor; HTA reports the share of collectives each rank is last",
        "share of its matched collectives a rank must arrive last at (significantly) to be named")
    straggler_chance_factor: Threshold = Threshold(
        1.5, "x the chance share 1/n", "stepdoctor (with n ranks one of them is last at every collective, each at "
        "1/n of them by chance: two ranks need a clear majority, not a quarter)",
        "a rank must also arrive last at this multiple of 1/n of its collectives, n the ranks taking part")
    # pipeline stage imbalance
    stage_imbalance_pct: Threshold = Threshold(
        10.0, "% of the fastest stage's compute", f"{MSPROF} pipeline-parallel stage analysis (stage_time per stage)",
        "how much more compute per step a stage must have than the lightest stage to be named")
    stage_equal_step_pct: Threshold = Threshold(
        5.0, "% of the median step", "stepdoctor (ranks of one job that wait for each other end their steps together)",
        "spread of the ranks' median step times under which ranks of unequal compute are waiting for each other")
    # slow link
    slow_link_ratio: Threshold = Threshold(
        0.8, "x median bandwidth", "stepdoctor; msprof-analyze slow link has no threshold (prints min/avg/max)",
        "a link below this fraction of its transport's median bandwidth is slow")
    # env vars
    aclnn_cache_limit_min: Threshold = Threshold(10000, "ops", f"{MSPROF} environment_variable rule",
                                                 "ACLNN_CACHE_LIMIT below this is flagged")
    # host / schedule
    dataloader_ms: Threshold = Threshold(10.0, "ms", f"{MSPROF} dataloader.yaml", "one dataloader event")
    gc_ms: Threshold = Threshold(1.0, "ms", f"{MSPROF} gc.yaml", "one GC event")
    conjectured_gc_free_ms: Threshold = Threshold(200.0, "ms", f"{MSPROF} conjectured_gc.yaml",
                                                  "free gap with no host activity")
    conjectured_gc_acl_time_ratio: Threshold = Threshold(0.01, "ratio", f"{MSPROF} conjectured_gc.yaml",
                                                         "host API time / gap")
    conjectured_gc_acl_count_per_us: Threshold = Threshold(0.0001, "events/us", f"{MSPROF} conjectured_gc.yaml",
                                                           "host API events per µs of gap")
    op_compile_count: Threshold = Threshold(20, "per step", f"{MSPROF} MAX_OP_COMPILE_NUM",
                                            "aclopCompileAndExecute calls")
    syncbn_count: Threshold = Threshold(20, "per step", f"{MSPROF} sync_batchnorm.yaml", "SyncBatchNorm calls")
    sync_co_occurrence: Threshold = Threshold(0.5, "ratio", f"{MSPROF} synchronize.yaml",
                                              "syncs right after a launch / launches")
    memory_api_total_ms: Threshold = Threshold(10.0, "ms per step", f"{MSPROF} memory.yaml",
                                               "total of one allocator API")
    host_bound_free_pct: Threshold = Threshold(
        10.0, "% of step", "stepdoctor; XProf/tb-profiler flag device idle >= 10 % as input/host bound",
        "device idle share that makes host-bound plausible")
    host_bound_late_launch_pct: Threshold = Threshold(
        50.0, "% of idle", "stepdoctor; HTA idle_time_breakdown host_wait category",
        "share of device idle caused by late launches")
    # compute
    aicpu_task_us: Threshold = Threshold(20.0, "us", f"{MSPROF} aicpu_analysis", "AICPU task duration")
    no_bound_ratio: Threshold = Threshold(0.8, "ratio", f"{MSPROF} config.ini operator_bound_ratio",
                                          "a pipe ratio above this means bound")
    no_bound_min_us: Threshold = Threshold(20.0, "us", f"{MSPROF} operator_no_bound_analysis",
                                           "only ops longer than this")
    freq_drop: Threshold = Threshold(0.05, "ratio", f"{MSPROF} config.ini frequency_threshold",
                                     "mean drop below rated frequency")
    cube_align: Threshold = Threshold(256, "elements", f"{MSPROF} aicore_performance.yaml",
                                      "matmul inner axis alignment")
    fa_align: Threshold = Threshold(128, "elements", f"{MSPROF} aicore_performance.yaml",
                                    "flash attention head dim / seq alignment")
    cube_min_mib: Threshold = Threshold(
        100.0, "MiB per step", f"{MSPROF} ai_core_performance_checker CUBE_OPERATOR_MEMORY_SIZE_MB",
        "matmul kernels moving less are not judged for alignment")
    cube_bound_mac: Threshold = Threshold(0.8, "ratio", f"{MSPROF} aicore_performance.yaml",
                                          "cube kernel counts as mac-bound")
    cube_bound_mte2: Threshold = Threshold(0.95, "ratio", f"{MSPROF} aicore_performance.yaml",
                                           "cube kernel counts as mte2-bound")
    fa_bound_mte2: Threshold = Threshold(0.8, "ratio", f"{MSPROF} aicore_performance.yaml",
                                         "flash attention counts as mte2-bound")
    fa_bound_vec: Threshold = Threshold(0.75, "ratio", f"{MSPROF} aicore_performance.yaml",
                                        "flash attention forward counts as vector-bound")
    fa_grad_bound_fixpipe: Threshold = Threshold(0.75, "ratio", f"{MSPROF} aicore_performance.yaml",
                                                 "flash attention grad counts as fixpipe-bound")
    fp32_share_pct: Threshold = Threshold(
        50.0, "% of matmul/conv time", "stepdoctor; MindSpore perf guide case 2 (fp32 MatMul dominated forward)",
        "float32 share of matmul / conv / attention time")
    affinity_min_occurrences: Threshold = Threshold(1, "count", f"{MSPROF} timeline_fusion_ops",
                                                    "occurrences of a fusible aten sequence")
    # communication
    small_packet_sdma_mb: Threshold = Threshold(16.0, "MB", f"{MSPROF} packet.yaml", "SDMA small packet")
    small_packet_rdma_mb: Threshold = Threshold(1.0, "MB", f"{MSPROF} packet.yaml", "RDMA small packet")
    small_packet_ratio: Threshold = Threshold(0.2, "ratio", f"{MSPROF} packet.yaml", "share of small packets")
    nccl_small_msg_mb: Threshold = Threshold(
        1.0, "MB", "stepdoctor; NCCL reaches bus bandwidth above ~1-4 MB messages (nccl-tests)",
        "GPU collective message considered small")
    contention_sdma_gbps: Threshold = Threshold(14.4, "GB/s", f"{MSPROF} bandwidth_contention.yaml (0.8 x 18)",
                                                "SDMA bandwidth while overlapping matmul")
    byte_align: Threshold = Threshold(512, "bytes", f"{MSPROF} byte_alignment.yaml", "SDMA task size alignment")
    retransmission_ms: Threshold = Threshold(4000, "ms", f"{MSPROF} rdma_analysis.yaml",
                                             "single RDMA transit")
    exposed_tail_pct: Threshold = Threshold(
        3.0, "% of step", "stepdoctor; MindSpore perf guide case 3 (tail 6.15 ms of AllReduce)",
        "non-overlapped comm after the last compute, share of step")
    collective_stall_share: Threshold = Threshold(
        0.5, "share of the op's time", "stepdoctor; msprof-analyze's communication.json splits each op into "
        "transit, wait and idle time (its wait ratio rule flags waiting ops)",
        "how much of a collective's time after its last profiled member arrived must move no data for it to "
        "count as stalled")
    # host / GPU conjectured GC
    conjectured_gc_gpu_silence_ms: Threshold = Threshold(
        10.0, "ms", "stepdoctor; a gen-2 CPython collection of a training heap takes tens of ms while a training "
        "loop emits host events every few µs-ms", "host gap with no event on any thread, inside a step")
    conjectured_gc_gpu_device_idle_ratio: Threshold = Threshold(
        0.5, "ratio", "stepdoctor", "share of such a host gap the device must be idle")
    conjectured_gc_fixed_stall_spread: Threshold = Threshold(
        0.02, "ratio", "stepdoctor; a timed wait (time.sleep, a timeout) repeats to within 0.1 ms, while a CPython "
        "collection's length follows the objects it traverses and its trigger the allocations since the last one",
        "(max - min) / median of the longest host silence of every kept step (at least 3) below which it is a "
        "fixed per-step stall, not GC")
    host_bound_stall_share: Threshold = Threshold(
        0.5, "ratio", "stepdoctor", "share of a late-launch gap covered by GC/alloc/compile/dataloader/silence "
        "to charge it to those instead of launch overhead")
    fp32_speedup: Threshold = Threshold(
        2.0, "x", "stepdoctor, conservative (MindSpore perf guide case 2 measured 4.9x on the forward; bf16/fp16 "
        "tensor-core / cube peak is 8-16x fp32)", "kernel speedup assumed when fp32 matmul/conv/attention "
        "move to bf16/fp16")
    dataloader_workers_headroom: Threshold = Threshold(
        1.25, "ratio", "stepdoctor", "spare pipeline throughput in the proposed worker count")
    tail_proposed_buckets: Threshold = Threshold(
        4, "count", "stepdoctor (MindSpore perf guide case 3 split into 2 groups)",
        "gradient buckets in the proposed fusion split")
    minddata_worker_cpu_high_pct: Threshold = Threshold(
        75.0, "% per worker", "MindSpore BottleneckAnalyzer (profiler/parser/minddata_analyzer.py)",
        "a dataset op whose workers are saturated")
    minddata_child_fuller: Threshold = Threshold(
        0.1, "usage fraction", "MindInsight minddata_pipeline_analyser", "input queue fuller than output by")
    minddata_leaf_queue_low: Threshold = Threshold(
        0.6, "usage fraction", "MindInsight minddata_pipeline_analyser", "a slow reader (leaf op) queue usage")
    minddata_host_queue_empty: Threshold = Threshold(
        0.3, "ratio", "MindInsight DEVICE_QUEUE_EMPTY_WARNING_THRESHOLD", "host queue empty share: data bound")
    # GPU host side
    h2d_pageable_ms: Threshold = Threshold(1.0, "ms per step", "stepdoctor; PyTorch pin_memory guidance",
                                           "pageable host-to-device copy time")
    sync_call_ms: Threshold = Threshold(1.0, "ms per step", "stepdoctor; HTA cuda_sync / critical path",
                                        "host time blocked in stream/device synchronize")
    sync_idle_ms: Threshold = Threshold(
        0.5, "ms per step", "stepdoctor; HTA idle_time_breakdown: idle after a sync returns is host-caused",
        "device idle that follows the synchronize calls of a step, inside that step")
    sync_idle_count: Threshold = Threshold(
        4, "per step", "stepdoctor; one loss.item() per step is normal logging, a sync per layer scales with depth "
        "and hides behind the profiler's own host cost", "syncs leaving the device idle: severity at least medium")
    memory_api_gpu_step_pct: Threshold = Threshold(
        3.0, "% of step", "stepdoctor; the msprof-analyze medium priority share, applied per step: PyTorch's "
        "caching allocator never calls cudaMalloc/cudaFree in steady state", "one allocator API's time in a step")
    compare_hidden_compute_pct: Threshold = Threshold(
        10.0, "% of base compute", "stepdoctor; a profiled channels_last regression grew device compute 68% "
        "while the host-bound profiled step shrank", "compute growth a compare names although the step did not grow")


T = _Table()


def all_thresholds() -> dict[str, Threshold]:
    return {f.name: getattr(T, f.name) for f in fields(T)}
