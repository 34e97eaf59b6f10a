"""Reader for the Ascend SQLite DB exports: torch_npu `ascend_pytorch_profiler_{rank}.db` and MindSpore
`ascend_mindspore_profiler_{rank}.db` (mindspore-format-and-db.md §7, ascend-format-and-advisor-rules.md §2.2).

Both files are the CANN `msprof_*.db` (STRING_IDS, TASK, COMPUTE_TASK_INFO, TASK_PMU_INFO, COMMUNICATION_OP,
COMMUNICATION_TASK_INFO, CANN_API, AICORE_FREQ, ENUM_* ...) renamed and moved into `ASCEND_PROFILER_OUTPUT/`;
torch_npu adds its framework tables (PYTORCH_API, CONNECTION_IDS, PYTORCH_CALLCHAINS, STEP_TIME, GC_RECORD,
MEMORY_RECORD, META_DATA, RANK_DEVICE_MAP). The file is opened read-only through the `file:...?mode=ro` URI,
so nothing is ever written next to the profile.

Conventions of the DB: every time is integer ns (kept exact: values are fetched as Python ints, never through
float), every string is an INTEGER id into STRING_IDS, enumerations live in ENUM_* tables (with built-in
fallbacks from the doc when a table is missing), bandwidth is B/s, memory bytes, frequency MHz,
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
derived as §7.4 describes, in this order, and a warning says which way was used:
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

from __future__ import annotations

import contextlib
import itertools
import json
import re
import sqlite3
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from .ascend_common import DTYPE_BYTES, collective_of, group_hash
from .base import ProfileError, RankSource, RankTables

DB_RE = re.compile(r"^ascend_(pytorch|mindspore)_profiler(?:_(\d+))?\.db$")
OUTPUT_DIR = "ASCEND_PROFILER_OUTPUT"
# Comm-analyzer twins of communication.json / step_trace_time.csv written beside the main DB.
ANALYSIS_DBS = ("analysis.db", "communication_analyzer.db")
TEXT_DELIVERABLES = ("trace_view.json", "kernel_details.csv", "step_trace_time.csv", "op_statistic.csv",
                     "communication.json", "communication_matrix.json", "operator_details.csv")
# Largest start gap between an analysis.db CommAnalyzerTime row and its COMMUNICATION_OP (measured 13.4 µs on
# msinsight-pt-db-l1; the ops of one step are >= 2 ms apart there).
COMM_MATCH_NS = 100_000.0
REQUIRED_TABLES = ("STRING_IDS", "TASK")
# Tables a default capture has (torch_npu system-test list); their absence is worth a warning.
EXPECTED_TABLES = {
    "pytorch": ("COMPUTE_TASK_INFO", "CANN_API", "PYTORCH_API", "STEP_TIME", "META_DATA", "AICORE_FREQ"),
    "mindspore": ("COMPUTE_TASK_INFO", "CANN_API"),
    # a raw msprof DB (msprof_*.db) has no framework layer: no PYTORCH_API, STEP_TIME or META_DATA
    "msprof": ("COMPUTE_TASK_INFO", "CANN_API"),
}
COMM_MB = 1_000_000          # communication.json / analysis.db "MB" are 10^6 bytes
INVALID_ID = 4294967295      # msprof's "no value" for 32-bit ids (Context ID, Model ID ...)

# Fallbacks for the ENUM_* tables (mindspore-format-and-db.md §7.2), used when a DB lacks the table.
ENUM_API_TYPE = {20000: "acl", 15000: "model", 10000: "node", 5500: "communication", 5000: "runtime",
                 50001: "op", 50002: "queue", 50003: "trace", 50004: "mstx"}
ENUM_HCCL_DATA_TYPE = {0: "INT8", 1: "INT16", 2: "INT32", 3: "FP16", 4: "FP32", 5: "INT64", 6: "UINT64",
                       7: "UINT8", 8: "UINT16", 9: "UINT32", 10: "FP64", 11: "BFP16", 12: "INT128",
                       65534: "N/A", 65535: "INVALID_TYPE"}
ENUM_HCCL_LINK_TYPE = {0: "ON_CHIP", 1: "HCCS", 2: "PCIE", 3: "ROCE", 4: "SIO", 5: "HCCS_SW",
                       6: "STANDARD_ROCE", 7: "RESERVED"}
ENUM_HCCL_TRANSPORT_TYPE = {0: "SDMA", 1: "RDMA", 2: "LOCAL"}
ENUM_HCCL_RDMA_TYPE = {0: "RDMA_SEND_NOTIFY", 1: "RDMA_SEND_PAYLOAD", 2: "RDMA_PAYLOAD_PREPARE",
                       3: "RDMA_PAYLOAD_CHECK", 4: "RDMA_PAYLOAD_ACK", 5: "RDMA_SEND_OP"}
ENUM_DEFAULTS = {"ENUM_API_TYPE": ENUM_API_TYPE, "ENUM_HCCL_DATA_TYPE": ENUM_HCCL_DATA_TYPE,
                 "ENUM_HCCL_LINK_TYPE": ENUM_HCCL_LINK_TYPE, "ENUM_HCCL_TRANSPORT_TYPE": ENUM_HCCL_TRANSPORT_TYPE,
                 "ENUM_HCCL_RDMA_TYPE": ENUM_HCCL_RDMA_TYPE}
# CANN API level -> the prefix the text export (trace_view "CANN" process) and msprof-analyze give the name.
API_PREFIX = {"acl": "AscendCL@", "runtime": "Runtime@", "node": "Node@", "model": "Model@"}
PIPE_RATIOS = ("aic_mac_ratio", "aic_scalar_ratio", "aic_mte1_ratio", "aic_mte2_ratio", "aic_fixpipe_ratio",
               "aiv_vec_ratio", "aiv_scalar_ratio", "aiv_mte2_ratio", "aiv_mte3_ratio")
_DATA_WAIT_RE = re.compile(r"getnext|dequeue", re.I)
_INIT_DATA_RE = re.compile(r"initdata", re.I)
_DIGITS_RE = re.compile(r"(\d+)")
_INT_OR_NONE = frozenset({int, type(None)})
_STR_OR_NONE = frozenset({str, type(None)})
_STEP_MSG_RE = re.compile(r"(?:ProfilerStep#|\bstep[\s_#:=-]*)(\d+)", re.I)






# --------------------------------------------------------------------------------------------------------
# Rank-directory metadata shared by the DB and text layouts (profiler_info, profiler_metadata, info.json)


@dataclass
class RankMeta:
    """What the rank directory says about itself, outside ASCEND_PROFILER_OUTPUT."""

    framework_version: str | None = None
    profiler_level: str | None = None
    with_stack: bool | None = None
    world_size: int | None = None
    device_name: str | None = None
    device_id: int | None = None
    ai_core_num: int | None = None
    aiv_num: int | None = None
    rated_freq_mhz: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)     # profiler_metadata.json
    info: dict[str, Any] = field(default_factory=dict)         # profiler_info_{rank}.json


def _load_json(path: Path, tables: RankTables) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        tables.warn(f"{path.name}: unreadable JSON ({e}); ignored")
        return None


def _to_int(v: Any) -> int | None:
    if type(v) is int:  # INTEGER cells, most of them
        return v
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return None


# "No rank" as the DB export writes it: UINT32_MAX in COMMUNICATION_TASK_INFO.srcRank / dstRank (a task
# with no peer, e.g. a local reduce), and -1 / UINT64_MAX elsewhere.
_RANK_SENTINELS = frozenset({-1, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF})


def _rank_or_none(v: Any) -> int | None:
    r = _to_int(v)
    return None if r is None or r in _RANK_SENTINELS else r


def _to_float(v: Any) -> float | None:
    if type(v) is float:  # REAL cells
        return v
    if type(v) is int:  # NUMERIC cells holding a whole number (float(str(v)) is the same float)
        return float(v)
    try:
        return float(str(v).strip())
    except (TypeError, ValueError):
        return None


def _floats(values: list[Any]) -> list[float | None]:
    """`_to_float` of each value."""
    return [v if type(v) is float else float(v) if type(v) is int else _to_float(v) for v in values]


def _ms_ns(v: Any) -> int | None:
    """Milliseconds (REAL or text) -> integer ns."""
    f = _to_float(v)
    return None if f is None else round(f * 1_000_000)


def _ms_ns_column(values: list[Any]) -> list[int | None]:
    """`_ms_ns` of each value, a column at a time (`_floats`)."""
    return [None if f is None else round(f * 1_000_000) for f in _floats(values)]


def _step_number(s: Any) -> int | None:
    """The step number in a step text ("step3", "3", 3), None when it has no digits."""
    m = _DIGITS_RE.search(str(s or ""))
    return int(m.group(1)) if m else None


def _enum_tail(v: Any) -> str | None:
    """'ProfilerLevel.Level1' -> 'Level1' (MindSpore writes enum reprs into profiler_info)."""
    return None if v in (None, "") else str(v).rsplit(".", 1)[-1]


def read_rank_meta(rank_dir: Path, tables: RankTables) -> RankMeta:
    """profiler_info_{rank}.json, profiler_metadata.json and PROF_*/device_*/info.json.* of one rank dir."""
    meta = RankMeta()
    if not rank_dir.is_dir():
        return meta
    infos = sorted(rank_dir.glob("profiler_info*.json"))
    if infos and isinstance(info := _load_json(infos[0], tables), dict):
        meta.info = info
        meta.framework_version = info.get("torch_npu_version") or info.get("ms_version")
        cfg = info.get("config") or {}
        exp = cfg.get("experimental_config") or {}
        common = cfg.get("common_config") or {}
        params = info.get("profiler_parameters") or {}          # MindSpore ≥ 2.5
        meta.profiler_level = _enum_tail(exp.get("_profiler_level") or params.get("profiler_level"))
        ws = common.get("with_stack", params.get("with_stack"))
        meta.with_stack = bool(ws) if ws is not None else None
        meta.world_size = _to_int(info.get("rank_size"))
    md_path = rank_dir / "profiler_metadata.json"
    if md_path.is_file() and isinstance(md := _load_json(md_path, tables), dict):
        meta.metadata = md
    for dev_info in sorted(rank_dir.glob("PROF_*/device_*/info.json.*")):
        if dev_info.name.endswith(".done"):
            continue
        if isinstance(di := _load_json(dev_info, tables), dict):
            devs = di.get("DeviceInfo") or [{}]
            d0 = devs[0] if devs else {}
            meta.device_name = di.get("platform_version") or meta.device_name
            meta.ai_core_num = _to_int(d0.get("ai_core_num"))
            meta.aiv_num = _to_int(d0.get("aiv_num"))
            meta.rated_freq_mhz = _to_float(d0.get("aic_frequency"))
            meta.device_id = _to_int(d0.get("id"))
            if meta.device_id is None and (m := re.search(r"device_(\d+)", str(dev_info.parent.name))):
                meta.device_id = int(m.group(1))
            break
    return meta


# --------------------------------------------------------------------------------------------------------
# SQLite access


def _ro_uri(path: Path, immutable: bool = False) -> str:
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
    return uri + "&immutable=1" if immutable else uri


@contextlib.contextmanager
def open_ro(path: Path) -> Iterator[sqlite3.Connection]:
    """Open an SQLite file read-only; ProfileError (one line) when it is not an SQLite database.

    `mode=ro` never creates a journal; if the directory is read-only and the DB was left in WAL mode the open
    fails, and `immutable=1` (no locking, no -shm file) is the fallback.
    """
    con: sqlite3.Connection | None = None
    last: Exception | None = None
    for immutable in (False, True):
        try:
            con = sqlite3.connect(_ro_uri(path, immutable), uri=True)
            con.execute("SELECT count(*) FROM sqlite_master").fetchone()
            break
        except sqlite3.DatabaseError as e:  # OperationalError is a subclass
            last = e
            if con is not None:
                con.close()
            con = None
            if "not a database" in str(e) or "malformed" in str(e):
                break
    if con is None:
        raise ProfileError(path, f"not a readable SQLite database ({last})")
    try:
        yield con
    finally:
        con.close()


class Db:
    """One open export: table/column lookup, STRING_IDS decoding, enums, exact-int fetches."""

    def __init__(self, con: sqlite3.Connection, path: Path) -> None:
        self.con = con
        self.path = path
        self.tables: dict[str, set[str]] = {}
        for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"):
            cols = {r[1] for r in con.execute(f'PRAGMA table_info("{name}")')}
            self.tables[name] = cols
        self._strings: dict[int, str] | None = None
        self._enums: dict[str, dict[int, str]] = {}
        self.damaged: set[str] = set()      # tables whose rows could not be read

    def has(self, table: str) -> bool:
        return table in self.tables

    def count(self, table: str) -> int:
        if not self.has(table):
            return 0
        try:
            return int(self.con.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
        except sqlite3.DatabaseError:
            self.damaged.add(table)
            return 0

    def col(self, table: str, *names: str) -> str | None:
        """First of `names` the table has (schema drift: blockNum | blockDim ...)."""
        cols = self.tables.get(table, set())
        return next((n for n in names if n in cols), None)

    @property
    def strings(self) -> dict[int, str]:
        if self._strings is None:
            self._strings = dict(self.con.execute("SELECT id, value FROM STRING_IDS")) if self.has(
                "STRING_IDS") else {}
        return self._strings

    def s(self, v: Any) -> str | None:
        """Decode one STRING_IDS reference (ints); text already stored as text passes through."""
        if v is None:
            return None
        if isinstance(v, int):
            return self.strings.get(v)
        return str(v)

    def texts(self, values: list[Any], post: Any = None) -> list[Any]:
        """`s` of each value (then `post` of it), once per distinct value: string ids repeat on every row."""
        return _mapped(values, self.s if post is None else lambda v: post(self.s(v)))

    def enum(self, table: str) -> dict[int, str]:
        if table not in self._enums:
            out = dict(ENUM_DEFAULTS.get(table, {}))
            if self.has(table) and {"id", "name"} <= self.tables[table]:
                out.update({int(i): str(n) for i, n in self.con.execute(f'SELECT id, name FROM "{table}"')})
            self._enums[table] = out
        return self._enums[table]

    def fetch(self, table: str, wanted: dict[str, tuple[str, ...]], where: str = "",
              order: str = "") -> dict[str, list[Any]]:
        """Columns of a table as Python lists (exact ints), keyed by our alias; absent columns -> all None."""
        present = {alias: self.col(table, *names) for alias, names in wanted.items()}
        sel = [f'"{c}"' for c in present.values() if c]
        if not self.has(table) or not sel:
            return {a: [] for a in wanted}
        sql = f'SELECT {", ".join(sel)} FROM "{table}" {where} {order}'
        try:
            rows = self.con.execute(sql).fetchall()
        except sqlite3.DatabaseError:
            # a damaged table (malformed pages) costs only its own rows; run() warns once with the count
            self.damaged.add(table)
            return {a: [] for a in wanted}
        cols = list(zip(*rows, strict=False)) if rows else [() for _ in sel]
        out: dict[str, list[Any]] = {}
        i = 0
        for alias, c in present.items():
            if c:
                out[alias] = list(cols[i])
                i += 1
            else:
                out[alias] = [None] * len(rows)
        return out


def find_db(src: RankSource) -> tuple[Path, Path, str]:
    """(db file, rank dir, framework) for a discovered source (a rank dir, or the .db file itself)."""
    p = src.path
    if p.is_file():
        m = DB_RE.match(p.name)
        rank_dir = p.parent.parent if p.parent.name == OUTPUT_DIR else p.parent
        return p, rank_dir, (m.group(1) if m else "pytorch")
    out = p / OUTPUT_DIR
    cands = sorted(out.glob("ascend_*_profiler*.db")) if out.is_dir() else []
    cands = [c for c in cands if DB_RE.match(c.name)]
    if not cands:
        raise ProfileError(p, f"no ascend_{{pytorch,mindspore}}_profiler_{{rank}}.db in {OUTPUT_DIR}/")
    # several exports in one dir: the one named for this rank, else the first
    pick = next((c for c in cands if (m := DB_RE.match(c.name)) and m.group(2) is not None
                 and src.rank is not None and int(m.group(2)) == src.rank), cands[0])
    return pick, p, DB_RE.match(pick.name).group(1)  # type: ignore[union-attr]


# --------------------------------------------------------------------------------------------------------
# Helpers over arrays


def _i64(values: list[Any]) -> pd.arrays.IntegerArray:
    return pd.array(values, dtype="Int64")


def _assign_steps(t: np.ndarray, w0: np.ndarray, w1: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Step id of each time t: the window [w0, w1) containing it (windows sorted, disjoint), else -1."""
    if w0.size == 0 or t.size == 0:
        return np.full(t.shape, -1, dtype=np.int64)
    i = np.searchsorted(w0, t, side="right") - 1
    ic = np.clip(i, 0, None)
    ok = (i >= 0) & (t < w1[ic])
    return np.where(ok, ids[ic], -1)


def _steps_or_na(a: np.ndarray) -> pd.arrays.IntegerArray:
    return pd.array([None if x < 0 else int(x) for x in a], dtype="Int64")


def nesting_depth(tid: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Depth of each interval among the intervals of its thread (0 = outermost).

    Algorithm: per thread, sort by (start, -end) and keep a stack of open ends; pop ends ≤ the next start;
    the stack height is the depth. O(n log n).
    """
    n = tid.size
    depth = np.zeros(n, dtype=np.int64)
    order = np.lexsort((-end, start, tid))
    stack: list[int] = []
    cur_tid = None
    for k in order:
        if tid[k] != cur_tid:
            stack.clear()
            cur_tid = tid[k]
        s = start[k]
        while stack and stack[-1] <= s:
            stack.pop()
        depth[k] = len(stack)
        stack.append(end[k])
    return depth


def _mapped(values: list[Any], fn: Any) -> list[Any]:
    """fn of each value, computed once per distinct value when they are all int / None or all str / None
    (mixed kinds are mapped one by one: 1 == 1.0 == True would share an entry)."""
    kinds = set(map(type, values))
    if kinds <= _INT_OR_NONE or kinds <= _STR_OR_NONE:
        table = {v: fn(v) for v in set(values)}
        return list(map(table.__getitem__, values))
    return [fn(v) for v in values]


def _group_id(g: Any) -> str | None:
    """The group id of a group name cell as communication*.json keys it (`group_hash`); None when empty."""
    return group_hash(str(g)) if g else None


def _or_empty(v: str | None) -> str:
    return v or ""


def _clean_text(v: str | None) -> str | None:
    """Shapes/dtypes as torch_npu stores them ('4096,4000;\\r\\n1000'): one line, no CSV quotes."""
    if v is None:
        return None
    return v.replace("\r", "").replace("\n", "").strip().strip('"')


# --------------------------------------------------------------------------------------------------------
# The reader


@dataclass
class _Steps:
    """Step windows (host), sorted by start; `first` = device start per step for derived steps."""

    ids: np.ndarray
    start: np.ndarray
    end: np.ndarray
    how: str                               # STEP_TIME | MSTX | repetition | getnext | whole | ""
    first: np.ndarray | None = None

    @property
    def empty(self) -> bool:
        return self.ids.size == 0


def read_rank(src: RankSource) -> RankTables:
    """Parse one rank's DB export into normalized tables (see the module docstring for the mapping)."""
    db_path, rank_dir, framework = find_db(src)
    tables = RankTables(src.rank if src.rank is not None else 0)
    try:
        with open_ro(db_path) as con:
            db = Db(con, db_path)
            missing = [t for t in REQUIRED_TABLES if not db.has(t)]
            if missing:
                raise ProfileError(db_path, f"missing required table(s) {', '.join(missing)}: not an Ascend "
                                            f"profiler DB export")
            reader = DbReader(db, tables, rank_dir, framework, src)
            reader.run()
            if db.damaged:
                tables.warn(f"{db_path.name}: {len(db.damaged)} table(s) unreadable (damaged file), their rows "
                            f"lost: {', '.join(sorted(db.damaged))}")
    except (ProfileError, sqlite3.DatabaseError) as e:
        # the main DB is unusable: the step table in analysis.db still gives the rank's breakdown
        only = _step_table_only(db_path, rank_dir, framework, src)
        if only is None:
            raise e if isinstance(e, ProfileError) else ProfileError(db_path, f"damaged SQLite file ({e})") from e
        return only
    return tables


def _step_table_only(db_path: Path, rank_dir: Path, framework: str, src: RankSource) -> RankTables | None:
    """A rank from analysis.db's StepTraceTime alone (when the main DB is unreadable); None without one."""
    path = next((db_path.parent / n for n in ANALYSIS_DBS if (db_path.parent / n).is_file()), None)
    if path is None:
        return None
    tables = RankTables(src.rank if src.rank is not None else 0)
    try:
        with open_ro(path) as con:
            adb = Db(con, path)
            reader = DbReader(adb, tables, rank_dir, framework, src)
            reader._step_trace_time(adb)
    except (ProfileError, sqlite3.DatabaseError):
        return None
    if not tables.count("vendor_step_trace"):
        return None
    tables.warn(f"{db_path.name}: unreadable (damaged SQLite file); the rank keeps only the step table of "
                f"{path.name} ({tables.count('vendor_step_trace')} step row(s)), no timeline")
    meta = read_rank_meta(rank_dir, tables)
    tables.add("ranks", source_path=str(rank_dir), format=src.format, vendor="ascend",
               framework=None if framework == "msprof" else framework, framework_version=meta.framework_version,
               device_name=meta.device_name, device_id=meta.device_id, world_size=meta.world_size,
               profiler_level=meta.profiler_level)
    return tables


class DbReader:
    def __init__(self, db: Db, tables: RankTables, rank_dir: Path, framework: str, src: RankSource) -> None:
        self.db = db
        self.t = tables
        self.rank_dir = rank_dir
        self.framework = framework
        self.src = src
        self.name = db.path.name
        self.t_min: int | None = None
        self.opaque: dict[str, int] = {}     # opaque id text -> its dense negative BIGINT (see _ids)

    def seen(self, starts: Any) -> None:
        """Track the earliest start over everything emitted (ranks.time_origin_ns)."""
        arr = np.asarray(starts, dtype=np.int64)
        if arr.size:
            m = int(arr.min())
            self.t_min = m if self.t_min is None else min(self.t_min, m)

    def _extend(self, table: str, cols: dict[str, Any]) -> None:
        self.seen(cols["start_ns"])
        self.t.extend(table, cols)

    def warn(self, msg: str) -> None:
        self.t.warn(f"{self.name}: {msg}")

    def _ids(self, values: list[Any]) -> pd.arrays.IntegerArray:
        """Opaque link ids (connection / correlation) as BIGINT: an int in int64 range stays itself, anything
        else (a text id, an int beyond int64) gets a dense negative id of its own, the same one wherever it
        appears on this rank (ids in the DB are >= 0, so the two ranges never meet)."""
        out: list[int | None] = []
        for v in values:
            if v is None or v is pd.NA or (isinstance(v, float) and v != v):
                out.append(None)
            elif isinstance(v, (int, np.integer)) and 0 <= int(v) < 2**63:
                out.append(int(v))
            else:
                out.append(self.opaque.setdefault(str(v), -1 - len(self.opaque)))
        return _i64(out)

    # ---- orchestration ---------------------------------------------------------------------------------
    def run(self) -> None:
        db, t = self.db, self.t
        self._preflight()
        meta = read_rank_meta(self.rank_dir, t)
        self._meta_tables(meta)
        cann = self._cann_api()
        host_steps = self._step_time()
        compute = self._compute_tasks()
        comm = self._comm_ops()
        sub = self._comm_subtasks(comm)
        other = self._other_tasks(compute, sub)
        phases_done: set[str] = set()
        if self.framework == "mindspore":
            phases_done = self._ms_extras()
        steps = host_steps if not host_steps.empty else self._derive_steps(compute, comm, other)
        conn_start = dict(zip(cann["conn"], cann["start"], strict=False)) if cann else {}
        if comm is not None and cann:
            # a collective's connectionId is a launch link only when it leads to an HCCL-level API
            types = self.db.enum("ENUM_API_TYPE")
            hccl = {c for c, ty in zip(cann["conn"], cann["type"], strict=False)
                    if types.get(ty, "") in ("communication", "hccl")}
            comm["conn"] = [c if c in hccl else None for c in comm["conn"]]
        for df in (compute, other):
            if df is not None:
                df["step"] = self._step_of_tasks(df, steps, conn_start)
        if comm is not None:
            comm["step"] = _assign_steps(comm["start"].to_numpy(np.int64), steps.start, steps.end, steps.ids)
        if sub is not None and comm is not None:
            step_by_op = dict(zip(comm["op_id"], comm["step"], strict=False))
            sub["step"] = np.array([step_by_op.get(o, -1) if o is not None else -1 for o in sub["op_id"]],
                                   dtype=np.int64)
        self._emit_steps(steps, compute, [d for d in (compute, comm, other) if d is not None], phases_done)
        dev_conns = self._device_connections()
        if cann:
            self._emit_cann(cann, steps, dev_conns)
        self._framework_and_gc(steps, dev_conns)
        self._emit_compute(compute)
        self._emit_other(other)
        self._emit_comm(comm, sub)
        self._analysis_db(comm)
        self._freq()
        self._memory()
        self._ranks_row(meta)
        if db.count("TASK") == 0:
            t.warn(f"{self.name}: table TASK is empty: no device activity recorded (partial result)")

    def _preflight(self) -> None:
        db = self.db
        for table in EXPECTED_TABLES.get(self.framework, ()):
            if not db.has(table):
                self.warn(f"table {table} missing (partial result)")
            elif db.count(table) == 0:
                self.warn(f"table {table} is empty (partial result)")
        out = self.rank_dir / OUTPUT_DIR
        text = [n for n in TEXT_DELIVERABLES if (out / n).is_file()]
        if text:
            self.t.warn(f"{out.name}/ holds both the DB export {self.name} and text files ({', '.join(text)}); "
                        "read the DB (exact ns), ignored the text files")

    # ---- metadata ------------------------------------------------------------------------------------
    def _meta_tables(self, meta: RankMeta) -> None:
        db, t = self.db, self.t
        md: dict[str, Any] = {}
        env: dict[str, Any] = {}
        if db.has("META_DATA") and {"name", "value"} <= db.tables["META_DATA"]:
            for name, value in db.con.execute("SELECT name, value FROM META_DATA"):
                name = str(db.s(name))
                value = db.s(value)
                try:
                    parsed = json.loads(value) if value is not None else None
                except ValueError:
                    parsed = value
                if name == "ENV_VARIABLES" and isinstance(parsed, dict):
                    env.update(parsed)  # torch_npu writes it twice (process env + profiler_metadata): merge
                else:
                    md[name] = parsed
        # profiler_metadata.json in the rank dir fills what META_DATA lacks (older exports, MindSpore)
        for k, v in meta.metadata.items():
            if k == "ENV_VARIABLES" and isinstance(v, dict):
                for ek, ev in v.items():
                    env.setdefault(ek, ev)
            else:
                md.setdefault(k, v)
        for name, value in env.items():
            t.add("env_vars", name=str(name), value="" if value is None else str(value))
        if env:
            t.has("env")
        # the profiler's configuration, as the text reader records it
        info = meta.info
        for key, val in (("config", info.get("config")), ("profiler_parameters", info.get("profiler_parameters")),
                         *((k, info.get(k)) for k in ("cann_version", "jit_level", "rank_size"))):
            if val not in (None, {}, ""):
                md.setdefault(key, val)
        pgi = md.get("parallel_group_info")
        if isinstance(pgi, dict):
            groups = {group_hash(str(name)): {"group_name": str(name), "pg_name": g.get("group_name"),
                                              "global_ranks": [r for r in (_to_int(x) for x in
                                                                           g.get("global_ranks") or [])
                                                               if r is not None]}
                      for name, g in pgi.items() if isinstance(g, dict)}
            if groups:
                md.setdefault("comm_groups", groups)
        for k, v in md.items():
            t.add("metadata", key=str(k), value_json=json.dumps(v, sort_keys=True, default=str))
        self.md = md
        if meta.world_size is None:
            da = md.get("distributed_args")
            if isinstance(da, dict):
                meta.world_size = _to_int(da.get("world_size"))

    # ---- CANN API -------------------------------------------------------------------------------------
    def _cann_api(self) -> dict[str, list[Any]] | None:
        db = self.db
        if not db.has("CANN_API"):
            return None
        d = db.fetch("CANN_API", {"start": ("startNs",), "end": ("endNs",), "type": ("type",),
                                  "tid": ("globalTid",), "conn": ("connectionId",), "name": ("name",)})
        if not d["start"]:
            return None
        types = db.enum("ENUM_API_TYPE")
        names = []
        for ty, nm in zip(d["type"], d["name"], strict=False):
            level = types.get(ty, "") if ty is not None else ""
            names.append(API_PREFIX.get(level, "") + (db.s(nm) or ""))
        d["name"] = names
        return d

    def _device_connections(self) -> set[int]:
        """Connection ids that reach device work (TASK, COMMUNICATION_OP): the launch links.

        Every CANN API has a connectionId in the DB, but only a launch's id reappears on a device task; the
        others would be links to nothing (the text export has none for them either).
        """
        out: set[int] = set()
        for table in ("TASK", "COMMUNICATION_OP"):
            if self.db.col(table, "connectionId"):
                out.update(r[0] for r in self.db.con.execute(
                    f"SELECT DISTINCT connectionId FROM {table} WHERE connectionId IS NOT NULL"))
        return out

    def _emit_cann(self, d: dict[str, list[Any]], steps: _Steps, dev_conns: set[int]) -> None:
        start = np.array(d["start"], dtype=np.int64)
        end = np.array(d["end"], dtype=np.int64)
        gtid = np.array([x or 0 for x in d["tid"]], dtype=np.int64)
        tid = gtid & 0xFFFFFFFF
        self._extend("host_ops", {
            "step": _steps_or_na(_assign_steps(start, steps.start, steps.end, steps.ids)),
            "name": d["name"], "category": ["cann"] * start.size, "tid": _i64(tid.tolist()),
            "start_ns": _i64(start.tolist()), "dur_ns": _i64((end - start).tolist()),
            "correlation_id": self._ids([c if c in dev_conns else None for c in d["conn"]]),
            "depth": _i64(nesting_depth(gtid, start, end).tolist()),
        })
        self.t.has("host_ops", "cann_api")
        if any(c in dev_conns for c in d["conn"]):
            self.t.has("correlation")

    # ---- framework side (torch_npu) -------------------------------------------------------------------
    def _step_time(self) -> _Steps:
        db = self.db
        empty = _Steps(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64), "")
        if not db.has("STEP_TIME"):
            return empty
        d = db.fetch("STEP_TIME", {"id": ("id",), "start": ("startNs",), "end": ("endNs",)}, order="ORDER BY 2")
        rows = [(int(i), int(s), int(e)) for i, s, e in zip(d["id"], d["start"], d["end"], strict=False)
                if i is not None and s is not None and e is not None]
        if not rows:
            return empty
        ids, st, en = (np.array(c, dtype=np.int64) for c in zip(*rows, strict=False))
        return _Steps(ids, st, en, "STEP_TIME")

    def _framework_and_gc(self, steps: _Steps, dev_conns: set[int]) -> None:
        """PYTORCH_API and GC_RECORD -> host_ops; depth over both (one Python thread, as in the trace)."""
        parts = [p for p in (self._pytorch_api(dev_conns), self._gc()) if p is not None]
        if not parts:
            return
        cols = {k: [x for p in parts for x in p[k]] for k in parts[0] if all(k in p for p in parts)}
        for k in ("input_dims", "input_types", "call_stack", "correlation_id"):
            cols[k] = [x for p in parts for x in p.get(k, [None] * len(p["name"]))]
        start = np.array(cols.pop("start"), dtype=np.int64)
        end = np.array(cols.pop("end"), dtype=np.int64)
        gtid = np.array(cols.pop("gtid"), dtype=np.int64)
        self._extend("host_ops", {
            **cols, "step": _steps_or_na(_assign_steps(start, steps.start, steps.end, steps.ids)),
            "tid": _i64((gtid & 0xFFFFFFFF).tolist()), "start_ns": _i64(start.tolist()),
            "dur_ns": _i64((end - start).tolist()), "correlation_id": self._ids(cols["correlation_id"]),
            "depth": _i64(nesting_depth(gtid, start, end).tolist()),
        })

    def _pytorch_api(self, dev_conns: set[int]) -> dict[str, list[Any]] | None:
        db, t = self.db, self.t
        if not db.has("PYTORCH_API"):
            return None
        d = db.fetch("PYTORCH_API", {"start": ("startNs",), "end": ("endNs",), "tid": ("globalTid",),
                                     "conn": ("connectionId",), "name": ("name",), "dtypes": ("inputDtypes",),
                                     "shapes": ("inputShapes",), "chain": ("callchainId",), "type": ("type",)})
        if not d["start"]:
            self.warn("table PYTORCH_API is empty (no framework ops)")
            return None
        keep = [i for i, (s0, e0) in enumerate(zip(d["start"], d["end"], strict=False))
                if s0 is not None and e0 is not None]
        if len(keep) < len(d["start"]):
            self.warn(f"PYTORCH_API: {len(d['start']) - len(keep)} rows without start/end skipped")
            d = {k: [v[i] for i in keep] for k, v in d.items()}
        types = db.enum("ENUM_API_TYPE")
        names = db.texts(d["name"], _or_empty)
        cats = [_framework_category(nm, types.get(ty, "") if ty is not None else "")
                for nm, ty in zip(names, d["type"], strict=False)]
        # connectionId -> CONNECTION_IDS rows; the first one that reaches a device task is the launch link
        # (ProfilerStep annotations never take one, as in the text export)
        corr: list[int | None] = [None] * len(names)
        if db.has("CONNECTION_IDS") and any(c is not None for c in d["conn"]):
            links: dict[int, list[int]] = {}
            for cid, conn in db.con.execute("SELECT id, connectionId FROM CONNECTION_IDS"):
                links.setdefault(cid, []).append(conn)
            for i, c in enumerate(d["conn"]):
                cands = sorted(x for x in links.get(c, ()) if x in dev_conns)
                corr[i] = cands[0] if cands and cats[i] != "user_annotation" else None
        stacks: dict[int, str] = {}
        if db.has("PYTORCH_CALLCHAINS") and any(c is not None for c in d["chain"]):
            frames: dict[int, list[tuple[int, str]]] = {}
            for cid, stack, depth in db.con.execute("SELECT id, stack, stackDepth FROM PYTORCH_CALLCHAINS"):
                frames.setdefault(cid, []).append((depth or 0, db.s(stack) or ""))
            stacks = {k: ";".join(f for _, f in sorted(v)) for k, v in frames.items()}
            t.has("with_stack", "call_stack")
        t.has("host_ops", "framework_ops")
        if "dataloader" in cats:
            t.has("dataloader")
        return {
            # PYTORCH_API times are TEXT columns in torch_npu's schema: int() keeps them exact
            "start": [int(x) for x in d["start"]], "end": [int(x) for x in d["end"]],
            "gtid": [x or 0 for x in d["tid"]], "name": names, "category": cats, "correlation_id": corr,
            "input_dims": db.texts(d["shapes"], _clean_text), "input_types": db.texts(d["dtypes"], _clean_text),
            "call_stack": [stacks.get(c) if c is not None else None for c in d["chain"]],
        }

    def _gc(self) -> dict[str, list[Any]] | None:
        db = self.db
        if not db.has("GC_RECORD"):
            return None
        d = db.fetch("GC_RECORD", {"start": ("startNs",), "end": ("endNs",), "tid": ("globalTid",)})
        self.t.has("gc")   # the table exists only with gc_detect_threshold: no row = no GC, not unknown
        if not d["start"]:
            return None
        n = len(d["start"])
        return {"start": d["start"], "end": d["end"], "gtid": [x or 0 for x in d["tid"]], "name": ["GC"] * n,
                "category": ["gc"] * n}

    # ---- device side ----------------------------------------------------------------------------------
    def _compute_tasks(self) -> pd.DataFrame | None:
        db = self.db
        if not db.has("COMPUTE_TASK_INFO"):
            return None
        c = db.col
        bd = c("COMPUTE_TASK_INFO", "blockNum", "blockDim")
        mbd = c("COMPUTE_TASK_INFO", "mixBlockNum", "mixBlockDim")
        fields = {"name": "name", "op_type": "opType", "task_type": "taskType", "block_dim": bd,
                  "mix_block_dim": mbd, "op_state": c("COMPUTE_TASK_INFO", "opState"),
                  "input_shapes": "inputShapes", "input_dtypes": "inputDataTypes",
                  "input_formats": "inputFormats", "output_shapes": "outputShapes",
                  "output_dtypes": "outputDataTypes", "hf32": c("COMPUTE_TASK_INFO", "hf32Eligible")}
        present = {k: v for k, v in fields.items() if v and v in db.tables["COMPUTE_TASK_INFO"]}
        tcols = {"start": "startNs", "end": "endNs", "stream": "streamId", "conn": "connectionId",
                 "gtid": "globalTaskId", "task_id": "taskId", "ctx": "contextId", "rt_type": "taskType"}
        tpresent = {k: v for k, v in tcols.items() if v in db.tables["TASK"]}
        sel = [f'T."{v}"' for v in tpresent.values()] + [f'C."{v}"' for v in present.values()]
        sql = (f"SELECT {', '.join(sel)} FROM COMPUTE_TASK_INFO C JOIN TASK T ON T.globalTaskId = "
               "C.globalTaskId ORDER BY T.startNs")
        rows = db.con.execute(sql).fetchall()
        if not rows:
            if db.count("COMPUTE_TASK_INFO") == 0:
                self.warn("table COMPUTE_TASK_INFO is empty (no compute kernels)")
            return None
        keys = list(tpresent) + list(present)
        cols = list(zip(*rows, strict=False))
        df = pd.DataFrame({k: pd.Series(list(v), dtype=object) for k, v in zip(keys, cols, strict=False)})
        for k in ("name", "op_type", "task_type", "op_state", "input_shapes", "input_dtypes", "input_formats",
                  "output_shapes", "output_dtypes"):
            if k in df:
                df[k] = db.texts(df[k].tolist(), _clean_text)
            else:
                df[k] = None
        for k in ("block_dim", "mix_block_dim"):
            if k not in df:
                df[k] = None
        df["name"] = df["name"].fillna("")
        df["category"] = "compute"
        self._pmu(df)
        return df

    def _pmu(self, df: pd.DataFrame) -> None:
        """Pivot TASK_PMU_INFO (globalTaskId, name, value) into the pipe-ratio columns."""
        db = self.db
        for r in PIPE_RATIOS:
            df[r] = np.nan
        if not db.has("TASK_PMU_INFO") or "gtid" not in df:
            return
        wanted = {k: v for k, v in db.strings.items() if v and v.strip().lower() in PIPE_RATIOS}
        if not wanted:
            return
        ids = ",".join(str(k) for k in wanted)
        rows = db.con.execute(f"SELECT globalTaskId, name, value FROM TASK_PMU_INFO WHERE name IN ({ids})")
        vals: dict[str, dict[int, float]] = {}
        of_id = {k: vals.setdefault(v.strip().lower(), {}) for k, v in wanted.items()}  # name id -> its column
        for gid, nm, val in rows:
            of_id[nm][gid] = float(val) if val is not None else np.nan
        vals = {r: m for r, m in vals.items() if m}
        for r, m in vals.items():
            df[r] = df["gtid"].map(m).astype(float)
        if vals:
            self.t.has("pipe_ratios")
            self.t.add("metadata", key="kernel_metrics", value_json=json.dumps("PipeUtilization"))

    def _comm_ops(self) -> pd.DataFrame | None:
        db = self.db
        if not db.has("COMMUNICATION_OP"):
            return None
        d = db.fetch("COMMUNICATION_OP", {"name": ("opName",), "start": ("startNs",), "end": ("endNs",),
                                          "conn": ("connectionId",), "group": ("groupName",), "op_id": ("opId",),
                                          "dtype": ("dataType",), "count": ("count",), "op_type": ("opType",),
                                          "alg": ("algType",)}, order="ORDER BY startNs")
        if not d["start"]:
            return None      # a single-card run has no collectives: nothing to say
        dtypes = db.enum("ENUM_HCCL_DATA_TYPE")
        df = pd.DataFrame({k: pd.Series(v, dtype=object) for k, v in d.items()})
        df["name"] = db.texts(d["name"], _or_empty)
        df["op_type_raw"] = db.texts(d["op_type"])
        df["group"] = db.texts(d["group"], _group_id)
        df["dtype"] = [dtypes.get(x) if isinstance(x, int) else db.s(x) for x in d["dtype"]]
        df["size"] = [c * DTYPE_BYTES[t] if isinstance(c, int) and t in DTYPE_BYTES else None
                      for c, t in zip(d["count"], df["dtype"], strict=False)]
        df["collective"] = [collective_of(r or n) for r, n in zip(df["op_type_raw"], df["name"], strict=False)]
        df["category"] = "communication"
        return df

    def _comm_subtasks(self, comm: pd.DataFrame | None) -> pd.DataFrame | None:
        db = self.db
        if not db.has("COMMUNICATION_TASK_INFO"):
            return None
        ci = db.tables["COMMUNICATION_TASK_INFO"]
        want = {"name": "name", "gtid": "globalTaskId", "op_id": "opId", "size": "size",
                "transport": "transportType", "link": "linkType", "src": "srcRank", "dst": "dstRank",
                "bw": "bandwidth", "task_type": "taskType"}
        present = {k: v for k, v in want.items() if v in ci}
        sel = ["T.startNs", "T.endNs"] + [f'C."{v}"' for v in present.values()]
        rows = db.con.execute(f"SELECT {', '.join(sel)} FROM COMMUNICATION_TASK_INFO C JOIN TASK T ON "
                              "T.globalTaskId = C.globalTaskId ORDER BY T.startNs").fetchall()
        if not rows:
            return None
        keys = ["start", "end", *present]
        cols = list(zip(*rows, strict=False))
        df = pd.DataFrame({k: pd.Series(list(v), dtype=object) for k, v in zip(keys, cols, strict=False)})
        for k in want:
            if k not in df:
                df[k] = None
        tr, lk = db.enum("ENUM_HCCL_TRANSPORT_TYPE"), db.enum("ENUM_HCCL_LINK_TYPE")
        df["name"] = db.texts(df["name"].tolist(), _or_empty)
        df["transport"] = _mapped(df["transport"].tolist(), lambda x: tr.get(x) if isinstance(x, int) else db.s(x))
        df["link"] = _mapped(df["link"].tolist(), lambda x: lk.get(x) if isinstance(x, int) else db.s(x))
        op_names = dict(zip(comm["op_id"], comm["name"], strict=False)) if comm is not None else {}
        df["op_name"] = [op_names.get(o) for o in df["op_id"]]
        return df

    def _other_tasks(self, compute: pd.DataFrame | None, sub: pd.DataFrame | None) -> pd.DataFrame | None:
        """TASK rows that are neither compute kernels nor HCCL sub-tasks: memcpy, event waits, ..."""
        db = self.db
        known = ["COMPUTE_TASK_INFO", "COMMUNICATION_TASK_INFO", "COMMUNICATION_SCHEDULE_TASK_INFO"]
        excl = " ".join(f"AND globalTaskId NOT IN (SELECT globalTaskId FROM {k})" for k in known if db.has(k))
        d = db.fetch("TASK", {"start": ("startNs",), "end": ("endNs",), "stream": ("streamId",),
                              "conn": ("connectionId",), "gtid": ("globalTaskId",), "rt_type": ("taskType",)},
                     where=f"WHERE 1=1 {excl}", order="ORDER BY startNs")
        if not d["start"]:
            return None
        df = pd.DataFrame({k: pd.Series(v, dtype=object) for k, v in d.items()})
        df["task_type"] = db.texts(d["rt_type"], _or_empty)
        df["name"] = df["task_type"]
        memcpy: dict[int, int] = {}
        if db.has("MEMCPY_INFO") and {"globalTaskId", "size"} <= db.tables["MEMCPY_INFO"]:
            memcpy = {g: s for g, s in db.con.execute("SELECT globalTaskId, size FROM MEMCPY_INFO")}
        df["size"] = [memcpy.get(g) for g in df["gtid"]]
        info = db.has("COMPUTE_TASK_INFO")
        df["category"] = [db_task_category(tt, g in memcpy, info) for tt, g in zip(df["task_type"], df["gtid"],
                                                                                  strict=False)]
        return df

    def _step_of_tasks(self, df: pd.DataFrame, steps: _Steps, conn_start: dict[Any, int]) -> np.ndarray:
        start = df["start"].to_numpy(np.int64)
        if steps.how not in ("STEP_TIME", "MSTX") or not conn_start:
            return _assign_steps(start, steps.start, steps.end, steps.ids)
        host = np.array([conn_start.get(c, s) if c is not None else s for c, s in
                         zip(df["conn"], start, strict=False)], dtype=np.int64)
        by_host = _assign_steps(host, steps.start, steps.end, steps.ids)
        by_dev = _assign_steps(start, steps.start, steps.end, steps.ids)
        return np.where(by_host >= 0, by_host, by_dev)

    # ---- MindSpore: steps without STEP_TIME --------------------------------------------------------------
    def _derive_steps(self, compute: pd.DataFrame | None, comm: pd.DataFrame | None,
                      other: pd.DataFrame | None) -> _Steps:
        db = self.db
        parts = [d[["start", "end"]] for d in (compute, comm, other) if d is not None and len(d)]
        if not parts:
            self.warn("no STEP_TIME and no device tasks: no steps")
            return _Steps(np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.int64), "")
        allt = pd.concat(parts, ignore_index=True)
        t0 = int(allt["start"].astype("int64").min())
        t1 = int(allt["end"].astype("int64").max())
        what = "no STEP_TIME table" if self.framework == "mindspore" or not db.has("STEP_TIME") else \
            "STEP_TIME is empty"
        # (a) mstx ranges naming a step
        if db.has("MSTX_EVENTS"):
            d = db.fetch("MSTX_EVENTS", {"start": ("startNs",), "end": ("endNs",), "msg": ("message",)})
            win = []
            for s, e, m in zip(d["start"], d["end"], d["msg"], strict=False):
                mm = _STEP_MSG_RE.search(db.s(m) or "")
                if mm and s is not None and e is not None and e > s:
                    win.append((int(mm.group(1)), int(s), int(e)))
            if win:
                win.sort(key=lambda w: w[1])
                ids, st, en = (np.array(c, dtype=np.int64) for c in zip(*win, strict=False))
                self.warn(f"{what}: steps are the {len(win)} MSTX ranges that name a step")
                return _Steps(ids, st, en, "MSTX")
        # (b) and (c) rely on graph-mode repetition: MindSpore only; torch_npu without steps gets (d)
        if self.framework == "mindspore" and compute is not None and len(compute):
            seq = compute.sort_values("start", kind="stable")
            names = seq["name"].tolist()
            starts = seq["start"].astype("int64").to_numpy()
            # (b) repetition of the first kernel (a leading InitDataSetQueue skipped)
            k0 = 0
            while k0 < len(names) and _INIT_DATA_RE.search(names[k0] or ""):
                k0 += 1
            if k0 < len(names):
                first = names[k0]
                occ = [i for i in range(k0, len(names)) if names[i] == first]
                if len(occ) >= 2 and min(np.diff([*occ, len(names)])) >= 2:
                    self.warn(f"{what}: {len(occ)} steps derived from the repetition of the first kernel "
                              f"'{first}' (MindSpore 2.x timeline rule)")
                    return self._steps_from_starts(starts[occ], seq, allt, "repetition")
            # (c) GetNext / dequeue tasks of sink mode
            occ = [i for i, n in enumerate(names) if _DATA_WAIT_RE.search(n or "")]
            if len(occ) >= 2:
                self.warn(f"{what}: {len(occ)} steps derived from the GetNext/dequeue tasks (sink mode)")
                return self._steps_from_starts(starts[occ], seq, allt, "getnext")
        # (d) the whole collection as step 0
        if db.has("SESSION_TIME_INFO"):
            d = db.fetch("SESSION_TIME_INFO", {"s": ("startTimeNs",), "e": ("endTimeNs",)})
            if d["s"] and d["s"][0] is not None and d["e"][0] is not None:
                t0, t1 = min(t0, int(d["s"][0])), max(t1, int(d["e"][0]))
        self.warn(f"{what}: no step markers found; the whole collection is one step 0")
        return _Steps(np.array([0]), np.array([t0]), np.array([t1]), "whole")

    @staticmethod
    def _steps_from_starts(bounds: np.ndarray, compute: pd.DataFrame, allt: pd.DataFrame, how: str) -> _Steps:
        """Steps cut at `bounds` (start ns of each step's first kernel) over every device task.

        Step k holds the tasks (compute, collectives, others) starting in [bounds[k], bounds[k+1]); it ends at
        the latest end among them (a collective can outlast the last kernel); its host window is [previous
        step's end, own end]. `first` = its forward start: the first compute task that is not a data fetch
        (GetNext / dequeue / InitDataSetQueue), as MindSpore's fp_point, so interval = fp − window start.
        """
        n = bounds.size
        st = allt["start"].astype("int64").to_numpy()
        en = allt["end"].astype("int64").to_numpy()
        seg = np.searchsorted(bounds, st, side="right") - 1
        last = bounds.copy()
        ok = seg >= 0
        np.maximum.at(last, seg[ok], en[ok])
        cst = compute["start"].astype("int64").to_numpy()
        names = compute["name"].fillna("").astype(str)
        fetch = (names.str.contains(_DATA_WAIT_RE) | names.str.contains(_INIT_DATA_RE)).to_numpy()
        cseg = np.searchsorted(bounds, cst, side="right") - 1
        first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
        okc = (cseg >= 0) & ~fetch
        np.minimum.at(first, cseg[okc], cst[okc])
        first = np.where(first == np.iinfo(np.int64).max, bounds, first)
        win0 = np.concatenate(([bounds[0]], last[:-1]))
        return _Steps(np.arange(1, n + 1, dtype=np.int64), win0, last, how, first)

    # ---- emit -----------------------------------------------------------------------------------------
    def _emit_steps(self, steps: _Steps, comp: pd.DataFrame | None, devs: list[pd.DataFrame],
                    phases_done: set[str]) -> None:
        t = self.t
        if steps.empty:
            return
        first: dict[int, int] = {}
        for df in devs:
            sub = df[df["step"] >= 0]
            if len(sub):
                g = sub.groupby("step")["start"].min()
                for s, v in g.items():
                    first[int(s)] = min(first.get(int(s), int(v)), int(v))
        for sid, s0, s1 in zip(steps.ids, steps.start, steps.end, strict=False):
            d0 = first.get(int(sid))
            t.add("steps", step=int(sid), start_ns=int(s0), end_ns=int(s1),
                  device_start_ns=d0, device_end_ns=int(s1) if d0 is not None else None, kept=True)
        t.has("steps")
        if steps.how in ("repetition", "getnext"):
            dev_first = steps.first if steps.first is not None else steps.start
            if "iteration_interval" not in phases_done:
                for k in range(1, steps.ids.size):
                    t.add("step_phases", step=int(steps.ids[k]), phase="iteration_interval",
                          dur_ns=int(dev_first[k] - steps.start[k]))
            if comp is not None and "data_wait" not in phases_done:
                waits = comp[comp["name"].fillna("").str.contains(_DATA_WAIT_RE) & (comp["step"] >= 0)]
                if len(waits):
                    dur = (waits["end"].astype("int64") - waits["start"].astype("int64"))
                    for s, v in dur.groupby(waits["step"]).sum().items():
                        t.add("step_phases", step=int(s), phase="data_wait", dur_ns=int(v))
            t.has("step_phases")

    def _emit_compute(self, df: pd.DataFrame | None) -> None:
        if df is None:
            return
        t = self.t
        start = df["start"].astype("int64")
        self._extend("device_ops", {
            "step": _steps_or_na(df["step"].to_numpy()), "name": df["name"].tolist(),
            "op_type": df["op_type"].tolist(), "category": ["compute"] * len(df),
            "task_type": df["task_type"].tolist(),
            "stream_id": _i64(df["stream"].tolist() if "stream" in df else [None] * len(df)),
            "start_ns": _i64(start.tolist()), "dur_ns": _i64((df["end"].astype("int64") - start).tolist()),
            "correlation_id": self._ids(df["conn"].tolist() if "conn" in df else [None] * len(df)),
            "block_dim": _i64([_to_int(x) for x in df["block_dim"]]),
            "mix_block_dim": _i64([_to_int(x) for x in df["mix_block_dim"]]),
            "op_state": df["op_state"].tolist(), "input_shapes": df["input_shapes"].tolist(),
            "input_dtypes": df["input_dtypes"].tolist(), "input_formats": df["input_formats"].tolist(),
            "output_shapes": df["output_shapes"].tolist(), "output_dtypes": df["output_dtypes"].tolist(),
            **{r: df[r].tolist() for r in PIPE_RATIOS},
        })
        t.has("device_ops", "kernel_details")
        if df["block_dim"].notna().any():
            t.has("block_dim")
        if df["op_state"].notna().any():
            t.has("op_state")
        if df["input_dtypes"].notna().any():
            t.has("dtypes")
        if df["input_shapes"].notna().any():
            t.has("shapes")

    def _emit_other(self, df: pd.DataFrame | None) -> None:
        if df is None:
            return
        start = df["start"].astype("int64")
        self._extend("device_ops", {
            "step": _steps_or_na(df["step"].to_numpy()), "name": df["name"].tolist(),
            "category": df["category"].tolist(), "task_type": df["task_type"].tolist(),
            "stream_id": _i64(df["stream"].tolist()), "start_ns": _i64(start.tolist()),
            "dur_ns": _i64((df["end"].astype("int64") - start).tolist()),
            "correlation_id": self._ids(df["conn"].tolist()), "size_bytes": _i64(df["size"].tolist()),
        })

    def _emit_comm(self, comm: pd.DataFrame | None, sub: pd.DataFrame | None) -> None:
        t = self.t
        if comm is not None:
            start = comm["start"].astype("int64")
            dur = comm["end"].astype("int64") - start
            steps = _steps_or_na(comm["step"].to_numpy())
            self._extend("device_ops", {
                "step": steps, "name": comm["name"].tolist(), "op_type": comm["op_type_raw"].tolist(),
                "category": ["communication"] * len(comm), "task_type": ["HCCL"] * len(comm),
                "start_ns": _i64(start.tolist()), "dur_ns": _i64(dur.tolist()),
                "correlation_id": self._ids(comm["conn"].tolist()), "size_bytes": _i64(comm["size"].tolist()),
                "collective": comm["collective"].tolist(), "group_name": comm["group"].tolist(),
            })
            # op names repeat every step: the analyzer rows are matched on (name, group) + nearest start
            # (name, group) -> [(start ns, step or -1, index)]
            self.comm_index: dict[tuple[str, str | None], list[tuple[int, int, int]]] = {}
            for i, (n, g, s0, sp) in enumerate(zip(comm["name"], comm["group"], start, comm["step"].to_numpy(),
                                                   strict=False)):
                self.comm_index.setdefault((n, g), []).append((int(s0), int(sp), i))
            self.comm_extra: dict[int, dict[str, int | None]] = {}
            self.comm_rows = {
                "step": steps, "name": comm["name"].tolist(), "op_type": comm["collective"].tolist(),
                "group_name": comm["group"].tolist(), "start_ns": _i64(start.tolist()),
                "elapse_ns": _i64(dur.tolist()), "size_bytes": _i64(comm["size"].tolist()),
            }
            t.has("comm_ops")
        if sub is not None:
            start = sub["start"].astype("int64")
            bw = [float(b) / 1e9 if b is not None else None for b in sub["bw"]]  # B/s -> GB/s (= bytes/ns)
            t.extend("comm_tasks", {
                # without COMMUNICATION_OP (a raw msprof DB) the tasks have no op and so no step
                "step": _steps_or_na(sub["step"].to_numpy()) if "step" in sub else _i64([None] * len(sub)),
                "op_name": sub["op_name"].tolist(), "name": sub["name"].tolist(),
                "start_ns": _i64(start.tolist()), "dur_ns": _i64((sub["end"].astype("int64") - start).tolist()),
                "size_bytes": _i64(_mapped(sub["size"].tolist(), _to_int)), "transport": sub["transport"].tolist(),
                "link_type": sub["link"].tolist(), "src_rank": _i64(_mapped(sub["src"].tolist(), _rank_or_none)),
                "dst_rank": _i64(_mapped(sub["dst"].tolist(), _rank_or_none)), "bandwidth_gbps": bw,
            })
            t.has("comm_tasks")

    # ---- analysis.db: communication.json / matrix / step_trace_time twins --------------------------------
    def _analysis_db(self, comm: pd.DataFrame | None) -> None:
        t = self.t
        extra: dict[int, dict[str, int | None]] = {}
        # beside the DB (also when the DB was copied out of its rank dir)
        path = next((self.db.path.parent / n for n in ANALYSIS_DBS if (self.db.path.parent / n).is_file()), None)
        if path is not None:
            try:
                with open_ro(path) as con:
                    adb = Db(con, path)
                    extra = self._comm_analyzer(adb)
                    self._step_trace_time(adb)
            except ProfileError as e:
                t.warn(f"{path.name}: {e.problem}; communication details skipped")
        if comm is not None:
            rows = self.comm_rows
            for key in ("transit_ns", "wait_ns", "sync_ns", "idle_ns"):
                rows[key] = _i64([extra.get(i, {}).get(key) for i in range(len(comm))])
            # bytes moved from the analyzer when it has them, else the message size (count x dtype)
            rows["size_bytes"] = _i64([extra.get(i, {}).get("size_bytes", m) for i, m in
                                       enumerate(rows["size_bytes"].tolist())])
            t.extend("comm_ops", rows)

    def _comm_analyzer(self, adb: Db) -> dict[int, dict[str, int | None]]:
        """comm_bandwidth, comm_packets and links from analysis.db (the twins of communication*.json), and per
        comm op (index into the DB's comm ops) its transit / wait / sync / idle ns and bytes moved.

        Built as columns: the Matrix table has a row per op and link (48k rows on an 8-rank 100k-event rank),
        where one `RankTables.add` per row was half of the rank's read time. Step, group and rank texts
        repeat on every row and are converted once per distinct value (`_mapped`)."""
        t = self.t
        extra: dict[int, dict[str, int | None]] = {}
        index = getattr(self, "comm_index", {})

        by_step: dict[tuple[str, str | None, Any], int] = {}     # (op, group, step text) -> comm op index
        if adb.has("CommAnalyzerTime"):
            d = adb.fetch("CommAnalyzerTime", {"op": ("hccl_op_name",), "group": ("group_name",),
                                               "start": ("start_timestamp",), "transit": ("transit_time",),
                                               "wait": ("wait_time",), "sync": ("synchronization_time",),
                                               "idle": ("idle_time",), "step": ("step",)})
            for op, grp, st, tr, wa, sy, idl, stp in zip(d["op"], _mapped(d["group"], _group_id),
                                                         _floats(d["start"]), d["transit"], d["wait"], d["sync"],
                                                         d["idle"], d["step"], strict=False):
                cands = index.get((str(op), grp), [])
                sn = _step_number(stp)
                if sn is not None and any(c[1] == sn for c in cands):
                    cands = [c for c in cands if c[1] == sn]
                if st is None or not cands:
                    continue
                # start_timestamp (µs as REAL) is the analyzer's own op start: on torch_npu 2.x DB exports it
                # trails COMMUNICATION_OP.startNs by ~13 µs, so the nearest op of the same name, group and
                # step within COMM_MATCH_NS is the one (names repeat only across steps)
                gap, i = min((abs(s0 - st * 1000.0), i) for s0, _, i in cands)
                if gap <= COMM_MATCH_NS:
                    extra[i] = {"transit_ns": _ms_ns(tr), "wait_ns": _ms_ns(wa), "sync_ns": _ms_ns(sy),
                                "idle_ns": _ms_ns(idl)}
                    by_step[(str(op), grp, stp)] = i
        if adb.has("CommAnalyzerBandwidth"):
            d = adb.fetch("CommAnalyzerBandwidth", {
                "op": ("hccl_op_name",), "group": ("group_name",), "transport": ("transport_type",),
                "size": ("transit_size",), "time": ("transit_time",), "bw": ("bandwidth",),
                "lpr": ("large_packet_ratio",), "pkt": ("package_size",), "count": ("count",),
                "total": ("total_duration",), "step": ("step",)})
            seen: set[tuple[Any, ...]] = set()
            moved: dict[int, dict[str, int]] = {}   # comm op index -> transport -> bytes
            bands: list[tuple[Any, ...]] = []
            packets: list[tuple[Any, ...]] = []
            sizes, transits, pkts = _floats(d["size"]), _ms_ns_column(d["time"]), _floats(d["pkt"])
            groups, step_nos = _mapped(d["group"], _group_id), _mapped(d["step"], _step_number)
            for k, (op_v, tr_v, stp) in enumerate(zip(d["op"], d["transport"], d["step"], strict=False)):
                op = str(op_v)
                if op.lower().startswith("total"):
                    continue
                size, transit = sizes[k], transits[k]
                if not size and not transit:
                    continue     # transports the op did not use (as the text reader skips them)
                grp = groups[k]
                transport = str(tr_v)
                key = (op, grp, tr_v, stp)
                if key not in seen:
                    seen.add(key)
                    size_bytes = round((size or 0.0) * COMM_MB)
                    if (i := by_step.get((op, grp, stp))) is not None:
                        moved.setdefault(i, {})[transport.upper()] = size_bytes
                    bands.append((step_nos[k], op, grp, transport, size_bytes, transit or 0,
                                  _to_float(d["bw"][k]), _to_float(d["lpr"][k])))
                pkt = pkts[k]
                if pkt is not None and d["count"][k] is not None:
                    packets.append((step_nos[k], op, transport, round(pkt * COMM_MB), int(float(d["count"][k])),
                                    _ms_ns(d["total"][k]) or 0))
            if bands:
                t.extend("comm_bandwidth", dict(zip(("step", "op_name", "group_name", "transport", "size_bytes",
                                                     "transit_ns", "bandwidth_gbps", "large_packet_ratio"),
                                                    map(list, zip(*bands, strict=True)), strict=True)))
            if packets:
                t.extend("comm_packets", dict(zip(("step", "op_name", "transport", "packet_bytes", "count",
                                                   "total_ns"), map(list, zip(*packets, strict=True)), strict=True)))
            if seen:
                t.has("comm_json")
            # bytes moved by an op = SDMA (the on-node total, else HCCS + PCIE + SIO) + RDMA, as from the JSON
            for i, sz in moved.items():
                onnode = sz.get("SDMA", sum(sz.get(k, 0) for k in ("HCCS", "PCIE", "SIO")))
                extra.setdefault(i, {})["size_bytes"] = onnode + sz.get("RDMA", 0)
        if adb.has("CommAnalyzerMatrix"):
            d = adb.fetch("CommAnalyzerMatrix", {
                "op": ("hccl_op_name",), "group": ("group_name",), "src": ("src_rank",), "dst": ("dst_rank",),
                "transport": ("transport_type",), "size": ("transit_size",), "time": ("transit_time",),
                "bw": ("bandwidth",), "step": ("step",)})
            src, dst = _mapped(d["src"], _rank_or_none), _mapped(d["dst"], _rank_or_none)  # (TEXT columns)
            keep = [a is not None and b is not None for a, b in zip(src, dst, strict=True)]
            if not all(keep):
                d = {c: list(itertools.compress(v, keep)) for c, v in d.items()}
                src, dst = list(itertools.compress(src, keep)), list(itertools.compress(dst, keep))
            if src:
                t.extend("links", {
                    "step": _mapped(d["step"], _step_number), "op_name": _mapped(d["op"], str),
                    "group_name": _mapped(d["group"], _group_id), "src_rank": src, "dst_rank": dst,
                    "transport": d["transport"],
                    "size_bytes": [None if f is None else round(f * COMM_MB) for f in _floats(d["size"])],
                    "transit_ns": _ms_ns_column(d["time"]),
                    "bandwidth_gbps": _floats(d["bw"])})
                t.has("comm_matrix")
        return extra

    def _step_trace_time(self, adb: Db) -> None:
        if not adb.has("StepTraceTime"):
            return
        d = adb.fetch("StepTraceTime", {"step": ("step",), "computing": ("computing",),
                                        "cno": ("communication_not_overlapped",), "ov": ("overlapped",),
                                        "comm": ("communication",), "free": ("free",), "stage": ("stage",),
                                        "bubble": ("bubble",), "prep": ("preparing",)})

        def us(v: Any) -> int | None:
            f = _to_float(v)
            return None if f is None else round(f * 1000)

        for k in range(len(d["step"])):
            st = d["step"][k]
            m = re.search(r"(\d+)", str(st)) if st not in (None, "") else None
            self.t.add("vendor_step_trace", step=int(m.group(1)) if m else None,
                       computing_ns=us(d["computing"][k]), comm_not_overlapped_ns=us(d["cno"][k]),
                       overlapped_ns=us(d["ov"][k]), communication_ns=us(d["comm"][k]), free_ns=us(d["free"][k]),
                       stage_ns=us(d["stage"][k]), bubble_ns=us(d["bubble"][k]), preparing_ns=us(d["prep"][k]))
        if d["step"]:
            self.t.has("vendor_step_trace")

    # ---- counters, memory, ranks ----------------------------------------------------------------------
    def _freq(self) -> None:
        d = self.db.fetch("AICORE_FREQ", {"ts": ("timestampNs",), "freq": ("freq",)}, order="ORDER BY 1")
        if d["ts"]:
            self.t.extend("freq_samples", {"ts_ns": _i64(d["ts"]), "freq_mhz": [float(f) for f in d["freq"]]})
            self.t.has("freq")

    def _memory(self) -> None:
        db = self.db
        d = db.fetch("MEMORY_RECORD", {"component": ("component",), "ts": ("timestamp", "timestampNs"),
                                       "alloc": ("totalAllocated",), "res": ("totalReserved",),
                                       "act": ("totalActive",)}, order="ORDER BY 2")
        if d["ts"]:
            self.t.extend("memory_records", {
                "ts_ns": _i64(d["ts"]), "component": [db.s(c) for c in d["component"]],
                "allocated_bytes": _i64(d["alloc"]), "reserved_bytes": _i64(d["res"]),
                "active_bytes": _i64(d["act"])})
            self.t.has("memory")

    def _ranks_row(self, meta: RankMeta) -> None:
        db = self.db
        device_id = meta.device_id
        if db.has("RANK_DEVICE_MAP"):
            row = db.con.execute("SELECT deviceId FROM RANK_DEVICE_MAP LIMIT 1").fetchone()
            if row and row[0] is not None and int(row[0]) >= 0:
                device_id = int(row[0])
        if device_id is None and db.col("TASK", "deviceId"):
            row = db.con.execute("SELECT min(deviceId) FROM TASK").fetchone()
            device_id = int(row[0]) if row and row[0] is not None else None
        device_name = meta.device_name
        if device_name is None and db.has("NPU_INFO") and db.col("NPU_INFO", "name"):
            row = db.con.execute("SELECT name FROM NPU_INFO LIMIT 1").fetchone()
            device_name = db.s(row[0]) if row else None
        if meta.ai_core_num is not None:
            self.t.has("core_counts")
        if meta.rated_freq_mhz:
            self.t.has("rated_freq")
        if self.t_min is not None:
            self.t.has("trace")      # a host/device timeline, the DB twin of trace_view.json
        self.t.add("ranks", source_path=str(self.rank_dir), format=self.src.format, vendor="ascend",
                   framework=None if self.framework == "msprof" else self.framework, framework_version=meta.framework_version, device_name=device_name,
                   device_id=device_id, world_size=meta.world_size, ai_core_num=meta.ai_core_num,
                   aiv_num=meta.aiv_num, rated_freq_mhz=meta.rated_freq_mhz, profiler_level=meta.profiler_level,
                   with_stack=meta.with_stack, time_origin_ns=self.t_min)

    # ---- MindSpore-only files beside the DB ------------------------------------------------------------
    def _ms_extras(self) -> set[str]:
        from .mindspore_extra import read_ms_extras_impl

        return read_ms_extras_impl(self.rank_dir, self.t)


def _framework_category(name: str, api_type: str) -> str:
    """host_ops.category of a PYTORCH_API row (by ENUM_API_TYPE level, then by name)."""
    if api_type == "trace":
        return "python_function"
    if api_type == "mstx":
        return "user_annotation"
    if api_type == "queue":
        return "other"
    if name.startswith("ProfilerStep#"):
        return "user_annotation"
    if "dataloader" in name.lower():
        return "dataloader"
    return "cpu_op"


def db_task_category(task_type: str, is_memcpy: bool, compute_info: bool) -> str:
    """device_ops.category of a TASK row that is neither a kernel nor an HCCL sub-task. `compute_info`:
    the export has COMPUTE_TASK_INFO."""
    tt = task_type.upper()
    if tt.startswith(("KERNEL_AI", "KERNEL_MIX", "AI_CORE", "AI_VECTOR", "AI_CPU", "MIX_", "FFTS")):
        # torch_npu's Computing is the COMPUTE_TASK_INFO tasks alone: an AI_CORE task without a row there
        # is HCCL's own kernel (it spans a COMMUNICATION_OP exactly) or a runtime helper, and as compute it
        # would count a collective as computing. Without the table, the task type is all there is.
        return "other" if compute_info else "compute"
    if is_memcpy or "MEMCPY" in tt or "MEMSET" in tt or "DMA" in tt:
        return "memory"
    if "EVENT" in tt or "NOTIFY" in tt or "WAIT" in tt or "RECORD" in tt or "BARRIER" in tt:
        return "sync"
    return "other"
