"""Reader for the Ascend SQLite DB exports: torch_npu `ascend_pytorch_profiler_{rank}.db` and MindSpore
`ascend_mindspore_profiler_{rank}.db` (docs/formats.md §2).

Both files are the CANN `msprof_*.db` (STRING_IDS, TASK, COMPUTE_TASK_INFO, TASK_PMU_INFO, COMMUNICATION_OP,
COMMUNICATION_TASK_INFO, CANN_API, AICORE_FREQ, ENUM_* ...) renamed and moved into `ASCEND_PROFILER_OUTPUT/`;
torch_npu adds its framework tables (PYTORCH_API, CONNECTION_IDS, PYTORCH_CALLCHAINS, STEP_TIME, GC_RECORD,
MEMORY_RECORD, META_DATA, RANK_DEVICE_MAP). The file is opened read-only through the `file:...?mode=ro` URI,
so nothing is ever written next to the profile.

Conventions of the DB: every time is integer ns (kept exact: values are fetched as Python ints, never through
float), every string is an INTEGER id into STRING_IDS, enumerations live in ENUM_* tables (with built-in
fallbacks, docs/formats.md §2.2, when a table is missing), bandwidth is B/s, memory bytes, frequency MHz,
`globalTid = pid << 32 | tid`. Columns are selected by name with fallbacks (blockNum|blockDim ...), so schema
drift between CANN versions costs a NULL column, not a crash.

The rows are the ones the text reader produces for the same profile:
* compute tasks (TASK ⋈ COMPUTE_TASK_INFO) -> device_ops category `compute`, task_type = the accelerator core
  (AI_CORE, AI_VECTOR_CORE, MIX_AIC, AI_CPU ...), PMU pipe ratios pivoted from TASK_PMU_INFO;
* COMMUNICATION_OP -> device_ops category `communication`, task_type `HCCL` (the `hcom_*` op spans) and
  comm_ops; their HCCL sub-tasks (TASK ⋈ COMMUNICATION_TASK_INFO) -> comm_tasks only;
* every other TASK row -> device_ops `memory` (memcpy), `sync` (event/notify waits) or `other`;
* CANN_API -> host_ops category `cann`, named `AscendCL@` / `Runtime@` / `Node@` / `Model@` + name as
  msprof-analyze names them (other API levels keep the bare name); PYTORCH_API -> host_ops (`cpu_op`,
  `dataloader`, `python_function`, `user_annotation` for ProfilerStep#N, `other`); GC_RECORD -> host_ops `GC`
  category `gc`; nesting depth per thread over PYTORCH_API + GC_RECORD together and over CANN_API apart (the
  trace's Python and CANN tracks);
* correlation ids are launch links only: a CANN API keeps its connectionId when a device task or collective
  has the same one; a framework op takes the first of its CONNECTION_IDS that does (never a ProfilerStep); a
  collective keeps its connectionId only when it leads to an HCCL-level CANN API;
* `analysis.db` / `communication_analyzer.db` beside the DB (the DB twin of communication.json,
  communication_matrix.json and step_trace_time.csv) -> comm_ops transit/wait/sync/idle, comm_bandwidth,
  comm_packets, links and vendor_step_trace. Communication MB there are 10^6 bytes (as in the JSON files).

Steps. torch_npu: STEP_TIME rows are the host windows. A device task belongs to the step whose host window
contains the CANN API that launched it (TASK.connectionId = CANN_API.connectionId), else the step whose window
contains its own start (device tasks lag their host step, so the start time alone mis-buckets the first
kernels of a step); collectives are bucketed by their start like torch_npu's communication analysis. Device
window = [first device task start of the step, host step end]. MindSpore DBs have no STEP_TIME; steps are
derived as docs/formats.md §2.3 describes, in this order, and a warning says which way was used:
(a) MSTX_EVENTS ranges whose message names a step (`step 3`, `ProfilerStep#3`);
(b) repetition of the first compute kernel of the graph (a leading InitDataSetQueue skipped): a step runs from
    one occurrence to the task before the next one (as MindSpore 2.x's timeline generator did);
(c) the GetNext / dequeue AI CPU tasks of dataset sink mode, each one starting a step;
(d) one step 0 covering the whole collection (SESSION_TIME_INFO or the task span), like msprof-analyze.
For (b) and (c) step n holds every device task (kernels, collectives, others) starting between its first
kernel and the next step's; its host window is [end of step n-1's last task, end of its own last task] and its
device window starts at its first task, so step time includes the wait for data, the same convention as the
MindSpore ≤ 2.3 step trace (start_point = previous end_point). step_phases get `iteration_interval` = forward
start (the first kernel that is not GetNext / dequeue / InitDataSetQueue, MindSpore's fp_point) − window
start, for steps ≥ 2 (step 1 has no previous end), and `data_wait` = the step's GetNext / dequeue task time
(in dataset sink mode the device waits for data inside that AI CPU task).

Text files beside the DB are not read (the DB is the exact-ns twin of them), with a warning saying so, except
the MindSpore-only files the DB does not carry (dataset.csv, minddata files), which `mindspore_extra` reads.
"""

from .common import (
    ANALYSIS_DBS,
    COMM_MB,
    DB_RE,
    ENUM_API_TYPE,
    ENUM_DEFAULTS,
    ENUM_HCCL_DATA_TYPE,
    ENUM_HCCL_LINK_TYPE,
    ENUM_HCCL_RDMA_TYPE,
    ENUM_HCCL_TRANSPORT_TYPE,
    INVALID_ID,
    OUTPUT_DIR,
    RankMeta,
    db_task_category,
    read_rank_meta,
)
from .db import Db, find_db, nesting_depth, open_ro
from .rank import describe_db
from .reader import read_rank, run

__all__ = [
    "ANALYSIS_DBS", "COMM_MB", "DB_RE", "ENUM_API_TYPE", "ENUM_DEFAULTS", "ENUM_HCCL_DATA_TYPE", "ENUM_HCCL_LINK_TYPE",
    "ENUM_HCCL_RDMA_TYPE", "ENUM_HCCL_TRANSPORT_TYPE", "INVALID_ID", "OUTPUT_DIR", "Db", "RankMeta",
    "db_task_category", "describe_db", "find_db", "nesting_depth", "open_ro", "read_rank", "read_rank_meta", "run",
]
