-- stepdoctor normalized profile schema (one DuckDB database per profile).
--
-- Both vendors land in these tables; checks and metrics read only these tables.
-- Conventions:
--   * every time point is integer nanoseconds on the rank's own clock (`*_ns`), every duration `dur_ns`;
--   * sizes are bytes (`*_bytes`), bandwidth is GB/s (= bytes/ns), frequency MHz;
--   * `rank` is the global rank id; `step` is the ProfilerStep number as printed (`ProfilerStep#N` -> N),
--     NULL when an event lies outside every step;
--   * a column a format does not provide is NULL, never a made-up value (checks treat NULL as unknown).

-- One row per rank: where it came from and what the device is.
CREATE TABLE ranks (
    rank            INTEGER PRIMARY KEY,  -- global rank id
    source_path     VARCHAR NOT NULL,     -- the rank directory or trace file
    format          VARCHAR NOT NULL,     -- a format name of analysis/ingest/formats.py (FORMATS)
    vendor          VARCHAR NOT NULL,     -- ascend | cuda | rocm | mtia | cpu
    framework       VARCHAR,              -- pytorch | mindspore
    framework_version VARCHAR,            -- torch_npu / torch / mindspore version string when recorded
    device_name     VARCHAR,              -- e.g. Ascend910B, NVIDIA A100-SXM4-40GB
    device_id       INTEGER,              -- local device index
    world_size      INTEGER,              -- as recorded by the profiler (may exceed the ranks present)
    ai_core_num     INTEGER,              -- Ascend: AI cube cores (info.json ai_core_num); GPU: SM count
    aiv_num         INTEGER,              -- Ascend: AI vector cores; NULL on GPU
    rated_freq_mhz  DOUBLE,               -- Ascend: aic_frequency from info.json
    profiler_level  VARCHAR,              -- Ascend: Level0/1/2
    with_stack      BOOLEAN,              -- call stacks were recorded
    time_origin_ns  BIGINT                -- absolute epoch ns of the rank's first event (for cross-rank alignment)
);

-- Steps. Host window = the ProfilerStep annotation; device window = the span the device spends on the step.
CREATE TABLE steps (
    rank            INTEGER NOT NULL,
    step            INTEGER NOT NULL,     -- ProfilerStep number
    start_ns        BIGINT NOT NULL,      -- host step start
    end_ns          BIGINT NOT NULL,      -- host step end
    device_start_ns BIGINT,               -- start of the device window used by the breakdown
    device_end_ns   BIGINT,               -- end of the device window used by the breakdown
    kept            BOOLEAN NOT NULL DEFAULT TRUE  -- FALSE for a step a peer tool drops (Kineto: the last one)
);

-- Device work: kernels, AI Core / AI CPU tasks, memcpy/memset, collectives' device kernels.
CREATE TABLE device_ops (
    rank            INTEGER NOT NULL,
    step            INTEGER,
    name            VARCHAR NOT NULL,     -- kernel / task name
    op_type         VARCHAR,              -- Ascend `Type` (MatMulV2); GPU: NULL or derived family
    category        VARCHAR NOT NULL,     -- compute | communication | memory | sync | other
    task_type       VARCHAR,              -- Ascend Accelerator Core / Task Type (AI_CORE, AI_CPU, MIX_AIC...); GPU: kernel | gpu_memcpy | gpu_memset | cuda_sync
    stream_id       BIGINT,
    start_ns        BIGINT NOT NULL,
    dur_ns          BIGINT NOT NULL,
    correlation_id  BIGINT,               -- links to host_ops.correlation_id (launch)
    block_dim       INTEGER,              -- Ascend Block Dim / Block Num; GPU: grid blocks
    mix_block_dim   INTEGER,
    op_state        VARCHAR,              -- Ascend OP State (static/dynamic); NULL when the column is absent
    input_shapes    VARCHAR,              -- "4096,1000;1000,4000" (tensors split by ';')
    input_dtypes    VARCHAR,              -- "DT_BF16;DT_BF16"
    input_formats   VARCHAR,
    output_shapes   VARCHAR,
    output_dtypes   VARCHAR,
    aic_mac_ratio   DOUBLE,               -- Ascend pipe utilisation ratios (0..1), NULL when not collected
    aic_scalar_ratio DOUBLE,
    aic_mte1_ratio  DOUBLE,
    aic_mte2_ratio  DOUBLE,
    aic_fixpipe_ratio DOUBLE,
    aiv_vec_ratio   DOUBLE,
    aiv_scalar_ratio DOUBLE,
    aiv_mte2_ratio  DOUBLE,
    aiv_mte3_ratio  DOUBLE,
    size_bytes      BIGINT,               -- memcpy/memset bytes; NCCL message bytes when recorded
    collective      VARCHAR,              -- NCCL/HCCL collective name when known (allreduce, sendrecv...)
    group_name      VARCHAR,              -- communication group / process group
    hta_kept        BOOLEAN               -- Kineto: HTA 0.5.0's breakdown counts this op (a stream op, launched
                                          -- before a dropped last step); NULL for the other formats
);

-- Host work: framework ops, runtime / CANN API calls, annotations, python functions, GC.
CREATE TABLE host_ops (
    rank            INTEGER NOT NULL,
    step            INTEGER,
    name            VARCHAR NOT NULL,     -- aten::mm, AscendCL@aclopCompileAndExecute, cudaLaunchKernel, ProfilerStep#3 ...
    category        VARCHAR NOT NULL,     -- cpu_op | python_function | user_annotation | runtime | driver | cann | gc | dataloader | other
    tid             BIGINT,
    start_ns        BIGINT NOT NULL,
    dur_ns          BIGINT NOT NULL,
    correlation_id  BIGINT,               -- runtime launch -> device op
    external_id     BIGINT,               -- Kineto External id (links runtime call to its cpu_op)
    depth           INTEGER,              -- nesting depth on its thread (0 = outermost), computed at ingest
    input_dims      VARCHAR,              -- record_shapes
    input_types     VARCHAR,
    call_stack      VARCHAR,              -- frames joined by ';' when with_stack was on
    collective      VARCHAR,              -- record_param_comms: Collective name
    msg_bytes       BIGINT                -- record_param_comms: input message size in bytes when derivable
);

-- Communication operators (one HCCL/NCCL collective or p2p op instance on one rank).
CREATE TABLE comm_ops (
    rank            INTEGER NOT NULL,
    step            INTEGER,
    name            VARCHAR NOT NULL,     -- hcom_allReduce__100_0_1 / ncclDevKernel_AllReduce...
    op_type         VARCHAR,              -- allreduce | allgather | reducescatter | broadcast | send | receive | alltoall | ...
    group_name      VARCHAR,
    start_ns        BIGINT NOT NULL,
    elapse_ns       BIGINT NOT NULL,      -- whole op time on this rank
    transit_ns      BIGINT,               -- time moving data
    wait_ns         BIGINT,               -- time waiting for peers
    sync_ns         BIGINT,               -- synchronization part of the wait
    idle_ns         BIGINT,
    size_bytes      BIGINT,               -- total bytes moved by this op on this rank, when known
    peer_rank       INTEGER               -- send / receive: the other side's global rank, when the profile says it
);

-- Bandwidth of a comm op per transport (communication.json "Communication Bandwidth Info").
CREATE TABLE comm_bandwidth (
    rank            INTEGER NOT NULL,
    step            INTEGER,
    op_name         VARCHAR NOT NULL,
    group_name      VARCHAR,
    transport       VARCHAR NOT NULL,     -- SDMA | RDMA | HCCS | PCIE | SIO | NVLINK ...
    size_bytes      BIGINT NOT NULL,
    transit_ns      BIGINT NOT NULL,
    bandwidth_gbps  DOUBLE,               -- as reported (GB/s)
    large_packet_ratio DOUBLE
);

-- Packet size histogram per op and transport ("Size Distribution").
CREATE TABLE comm_packets (
    rank            INTEGER NOT NULL,
    step            INTEGER,
    op_name         VARCHAR NOT NULL,
    transport       VARCHAR NOT NULL,
    packet_bytes    BIGINT NOT NULL,      -- packet size of this bucket
    count           BIGINT NOT NULL,
    total_ns        BIGINT NOT NULL
);

-- Device-side tasks of comm ops (HCCL Memcpy / Reduce / Notify tasks) with their link.
CREATE TABLE comm_tasks (
    rank            INTEGER NOT NULL,
    step            INTEGER,
    op_name         VARCHAR,              -- the enclosing hcom_* op
    name            VARCHAR NOT NULL,     -- Memcpy, Reduce_Inline, Notify_Wait ...
    start_ns        BIGINT NOT NULL,
    dur_ns          BIGINT NOT NULL,
    size_bytes      BIGINT,
    transport       VARCHAR,              -- SDMA | RDMA | LOCAL
    link_type       VARCHAR,              -- HCCS | PCIE | ON_CHIP | ROCE ...
    src_rank        INTEGER,
    dst_rank        INTEGER,
    bandwidth_gbps  DOUBLE
);

-- Point-to-point links (communication_matrix.json), global ranks.
CREATE TABLE links (
    rank            INTEGER NOT NULL,     -- the rank whose file reported it
    step            INTEGER,
    op_name         VARCHAR NOT NULL,
    group_name      VARCHAR,
    src_rank        INTEGER NOT NULL,
    dst_rank        INTEGER NOT NULL,
    transport       VARCHAR,
    size_bytes      BIGINT,
    transit_ns      BIGINT,
    bandwidth_gbps  DOUBLE
);

-- Environment variables recorded with the profile ('' = recorded as unset).
CREATE TABLE env_vars (
    rank            INTEGER NOT NULL,
    name            VARCHAR NOT NULL,
    value           VARCHAR
);

-- Free-form metadata (distributed args, parallel groups, profiler config): key -> JSON text.
CREATE TABLE metadata (
    rank            INTEGER NOT NULL,
    key             VARCHAR NOT NULL,
    value_json      VARCHAR
);

-- Allocator records (memory_record.csv / Kineto [memory] events).
CREATE TABLE memory_records (
    rank            INTEGER NOT NULL,
    ts_ns           BIGINT NOT NULL,
    component       VARCHAR,
    allocated_bytes BIGINT,
    reserved_bytes  BIGINT,
    active_bytes    BIGINT
);

-- Device frequency samples (a step function: each value holds until the next sample).
CREATE TABLE freq_samples (
    rank            INTEGER NOT NULL,
    ts_ns           BIGINT NOT NULL,
    freq_mhz        DOUBLE NOT NULL
);

-- Vendor-computed per-step breakdown as the profiler wrote it (step_trace_time.csv), for cross-checks.
CREATE TABLE vendor_step_trace (
    rank            INTEGER NOT NULL,
    step            INTEGER,
    computing_ns    BIGINT,
    comm_not_overlapped_ns BIGINT,
    overlapped_ns   BIGINT,
    communication_ns BIGINT,
    free_ns         BIGINT,
    stage_ns        BIGINT,
    bubble_ns       BIGINT,
    preparing_ns    BIGINT
);

-- Data pipeline operators (MindSpore minddata, PyTorch DataLoader workers when known).
CREATE TABLE dataset_ops (
    rank            INTEGER NOT NULL,
    op_id           INTEGER,
    op_type         VARCHAR NOT NULL,     -- MapOp, BatchOp, ImageFolderOp ...
    num_workers     INTEGER,
    output_queue_size INTEGER,
    output_queue_usage_rate DOUBLE,       -- 0..1 mean fill of the output queue
    avg_cpu_pct     DOUBLE,               -- mean CPU utilisation of the op's workers, percent
    parent_id       INTEGER
);

-- Step-level queue / iteration info (MindSpore host/device queue, iteration interval ...).
CREATE TABLE step_phases (
    rank            INTEGER NOT NULL,
    step            INTEGER NOT NULL,
    phase           VARCHAR NOT NULL,     -- iteration_interval | fp_and_bp | tail | fp | bp | data_wait ...
    dur_ns          BIGINT NOT NULL
);

-- What ingest skipped, lost or guessed (surfaced as `warnings` in every output).
CREATE TABLE ingest_warnings (
    rank            INTEGER,
    path            VARCHAR,
    message         VARCHAR NOT NULL
);

-- Which optional sources each rank had: checks declare what they need from here.
CREATE TABLE capabilities (
    rank            INTEGER NOT NULL,
    name            VARCHAR NOT NULL      -- e.g. kernel_details, op_state, pipe_ratios, block_dim, freq, gc, comm_json, ...
);

-- Per-rank summaries, computed where the rank is parsed (analysis/store/summaries.py) from the rows above,
-- so cross-rank answers read ranks x steps rows instead of every event (docs/scale.md).

-- The breakdown of each `steps` row in integer ns (the definitions: analysis/metrics/breakdown.py).
-- W = the device window the breakdown measured (torch_npu's on Ascend; the host window where unknown).
CREATE TABLE step_breakdown (
    rank            INTEGER NOT NULL,
    step            INTEGER NOT NULL,     -- as in steps
    kept            BOOLEAN NOT NULL,     -- as in steps
    start_ns        BIGINT NOT NULL,      -- host step start (steps.start_ns)
    end_ns          BIGINT NOT NULL,      -- host step end
    window_start_ns BIGINT NOT NULL,      -- W start
    window_end_ns   BIGINT NOT NULL,      -- W end
    window_start_known BOOLEAN NOT NULL,  -- W starts at device work (FALSE: the host start, Preparing unknown)
    has_device      BOOLEAN NOT NULL,     -- the rank has device ops (FALSE: every duration below is unknown)
    busy_ns         BIGINT NOT NULL,      -- |union(all device ops) ∩ W|
    compute_ns      BIGINT NOT NULL,      -- |union(compute ops) ∩ W|
    communication_ns BIGINT NOT NULL,     -- |union(communication ops) ∩ W|
    compute_or_comm_ns BIGINT NOT NULL,   -- |union(compute and communication ops) ∩ W|
    bubble_ns       BIGINT                -- receive-op time starting in the host step (pipeline bubble); NULL: unknown
);

-- Device ops per (rank, step, name, category): top kernels are a GROUP BY over this.
CREATE TABLE kernel_totals (
    rank            INTEGER NOT NULL,
    step            INTEGER,              -- device_ops.step (NULL: outside every step)
    name            VARCHAR NOT NULL,     -- device_ops.name
    category        VARCHAR NOT NULL,     -- device_ops.category
    count           BIGINT NOT NULL,      -- ops
    total_ns        BIGINT NOT NULL,      -- sum of dur_ns
    max_ns          BIGINT NOT NULL       -- longest dur_ns
);

-- The training script's own time of every iteration, profiled or not (meta/step_times_rank<N>.json beside the
-- traces: ingest/discover/sidecars.py), for judging an impact against the step the user runs unprofiled.
CREATE TABLE step_times (
    rank            INTEGER NOT NULL,
    step            INTEGER NOT NULL,     -- the iteration's index in the script (ProfilerStep#N for profiled ones)
    step_ms         DOUBLE NOT NULL,
    profiled        BOOLEAN NOT NULL,     -- the profiler was active in it
    source          VARCHAR NOT NULL      -- the file it was read from
);

-- Views (named views the checks, the replay and the query tool read; no data of their own).

-- The kept steps' windows: the host window (start_ns, end_ns) and the device window the breakdown uses
-- (w0, w1; the host window where a step has none).
CREATE VIEW kept_step_windows AS
SELECT rank, step, start_ns, end_ns, coalesce(device_start_ns, start_ns) AS w0,
       coalesce(device_end_ns, end_ns) AS w1
FROM steps WHERE kept;

-- Device ops by kind. A query that wants one kind names its view, so the kinds are defined here once.
-- The device working: every op but the waits on a stream / event (category 'sync').
CREATE VIEW device_work AS
SELECT * FROM device_ops WHERE category <> 'sync';

-- Compute kernels / tasks (not communication, memory copies or waits).
CREATE VIEW compute_kernels AS
SELECT * FROM device_ops WHERE category = 'compute';

-- Communication kernels / tasks (NCCL, HCCL, RCCL collectives and p2p on the device).
CREATE VIEW comm_kernels AS
SELECT * FROM device_ops WHERE category = 'communication';

-- Ascend AI Core tasks (cube, vector and mixed ones): the tasks that report pipe ratios and a block dim.
CREATE VIEW ai_core_tasks AS
SELECT * FROM device_ops WHERE task_type IN ('AI_CORE', 'AI_VECTOR_CORE', 'MIX_AIC', 'MIX_AIV');

-- Host calls into the runtime, driver or CANN: the calls that launch device work, copy, allocate or wait.
CREATE VIEW host_api_calls AS
SELECT * FROM host_ops WHERE category IN ('runtime', 'driver', 'cann');

-- A device op with the host API call that launched it (the same rank and correlation id); an op launched
-- by no recorded call is absent, one id on several calls gives one row per call.
CREATE VIEW kernel_launches AS
SELECT d.rank, d.step, d.name, d.op_type, d.category, d.stream_id, d.start_ns, d.dur_ns, d.correlation_id,
       h.name AS api, h.category AS api_category, h.tid, h.start_ns AS launch_ns, h.dur_ns AS launch_dur_ns,
       h.external_id, h.step AS launch_step
FROM device_ops d JOIN host_api_calls h ON h.rank = d.rank AND h.correlation_id = d.correlation_id;

-- Ascend communication ops with their SDMA transfer (communication.json "Communication Bandwidth Info"),
-- those that moved bytes in a measured time.
CREATE VIEW sdma_transfers AS
SELECT o.rank, o.step, o.name, o.group_name, o.start_ns, o.elapse_ns, b.size_bytes, b.transit_ns,
       b.bandwidth_gbps
FROM comm_ops o JOIN comm_bandwidth b ON b.rank = o.rank AND b.op_name = o.name
     AND b.step IS NOT DISTINCT FROM o.step AND upper(b.transport) = 'SDMA'
WHERE b.size_bytes > 0 AND b.transit_ns > 0;
