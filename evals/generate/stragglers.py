"""Multi-rank straggler and pipeline scenarios written straight into a profile store (no trace files), so
that 8 to 1,024 ranks build in a second and the cross-rank checks can be tested at scale.

`build(out, n_ranks, scenario)` writes `out/profile.duckdb` with the normalized schema
(analysis/schema.sql) and `open_store(path)` opens it as a read-only `Profile`, like `open_profile` does
for a cached ingest. Each rank runs `steps` steps of STEP_MS on a Kineto-like CUDA/PyTorch layout:

    [step start] 1 ms host launch | compute kernel (COMPUTE_MS ± jitter) | allreduce (NCCL kernel + comm op)

Every allreduce of a step ends at the same moment on every rank of its group (the last arrival + 5 ms of
transfer), so a rank that arrives late has the shortest collective, as on real hardware. Scenarios:
  * `late`: rank `culprit` starts its compute LATE_MS late with nothing traced before it (HTA's case);
  * `host`: rank `culprit` runs a data-loader fetch of HOST_MS on the host before its compute;
  * `stage`: 4 pipeline stages of n/4 consecutive ranks (pipeline process groups in `distributedInfo`);
    the last stage computes STAGE_EXTRA times longer; allreduces run within each stage's data-parallel group.
  * `stage_pg`: the same pipeline with nothing naming it: its process groups are unlabelled and only carry the
    send/recv ops (each stage but the first receives before its compute, each but the last sends after it);
  * `stage_links`: the same send/recv ops on an Ascend-like layout with no process groups, the partners in
    `links` (src -> dst), and stage 0 on the highest ranks (stage k = ranks of block 3 - k), so the stage
    order comes from which end of a chain sends first, not from rank numbers;
  * `stage_none`: the `stage` job with nothing that names or links its stages (no process groups, no send/recv),
    as a text export with only step tables and collectives gives it.
Jitter is seeded: the same call writes the same store.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

STEP_MS = 100.0
COMPUTE_MS = 40.0
LATE_MS = 7.5
HOST_MS = 20.0
STAGE_EXTRA = 1.5
XFER_MS = 5.0
SCENARIOS = ("late", "host", "stage", "stage_pg", "stage_links", "stage_none")
STAGE_SCENARIOS = ("stage", "stage_pg", "stage_links", "stage_none")
P2P_MS = 0.5
_MS = 1_000_000


def _plan(n: int, scenario: str, culprit: int, rng: np.random.Generator, steps: int,
          late_steps: int | None) -> dict[str, np.ndarray]:
    """Per (step, rank): delay before compute, compute duration and the collective group (ms / labels).
    late_steps: the culprit is late in only the first that many steps (late / host)."""
    delay = np.zeros((steps, n))
    comp = COMPUTE_MS + rng.normal(0, 0.05, (steps, n))
    group = np.zeros(n, dtype=np.int64)
    if scenario == "late":
        delay[:, culprit] = LATE_MS
    elif scenario == "host":
        delay[:, culprit] = HOST_MS
    elif scenario in STAGE_SCENARIOS:
        per = max(n // 4, 1)
        group = np.minimum(np.arange(n) // per, 3)
        if scenario == "stage_links":
            group = 3 - group
        comp[:, group == 3] *= STAGE_EXTRA
    else:
        raise ValueError(f"scenario must be one of {SCENARIOS}, not {scenario!r}")
    if late_steps is not None:
        delay[late_steps:, :] = 0.0
    return {"delay": delay, "comp": comp, "group": group}


def _tables(n: int, scenario: str, culprit: int, steps: int, seed: int,
            late_steps: int | None) -> dict[str, pd.DataFrame]:
    rng = np.random.default_rng(seed)
    p = _plan(n, scenario, culprit, rng, steps, late_steps)
    ranks = np.arange(n)
    st, dev, comm, host = [], [], [], []
    for s in range(steps):
        t0 = s * STEP_MS
        c0 = t0 + 1.0 + p["delay"][s]
        c1 = c0 + p["comp"][s]
        end = np.zeros(n)
        for g in np.unique(p["group"]):
            m = p["group"] == g
            end[m] = c1[m].max() + XFER_MS
        st.append(pd.DataFrame({"rank": ranks, "step": s + 1, "start_ns": int(t0 * _MS),
                                "end_ns": int((t0 + STEP_MS) * _MS)}))
        dev.append(pd.DataFrame({"rank": ranks, "step": s + 1, "name": "sm90_xmma_gemm_bf16", "category": "compute",
                                 "task_type": "kernel", "stream_id": 7, "start_ns": (c0 * _MS).astype(np.int64),
                                 "dur_ns": ((c1 - c0) * _MS).astype(np.int64)}))
        dev.append(pd.DataFrame({"rank": ranks, "step": s + 1, "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                                 "category": "communication", "task_type": "kernel", "stream_id": 20,
                                 "start_ns": (c1 * _MS).astype(np.int64), "dur_ns": ((end - c1) * _MS).astype(np.int64),
                                 "collective": "allreduce", "group_name": [f"dp{g}" for g in p["group"]]}))
        comm.append(pd.DataFrame({"rank": ranks, "step": s + 1, "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL",
                                  "op_type": "allreduce", "group_name": [f"dp{g}" for g in p["group"]],
                                  "start_ns": (c1 * _MS).astype(np.int64),
                                  "elapse_ns": ((end - c1) * _MS).astype(np.int64)}))
        host.append(pd.DataFrame({"rank": ranks, "step": s + 1, "name": f"ProfilerStep#{s + 1}",
                                  "category": "user_annotation", "tid": 1, "start_ns": int(t0 * _MS),
                                  "dur_ns": int(STEP_MS * _MS), "depth": 0}))
        if scenario in ("stage_pg", "stage_links"):
            comm.append(_p2p_ops(p["group"], s + 1, c0, c1, scenario))
        if scenario == "host" and (late_steps is None or s < late_steps):
            host.append(pd.DataFrame({"rank": [culprit], "step": s + 1, "category": "dataloader", "tid": 1,
                                      "name": "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__",
                                      "start_ns": int((t0 + 1.0) * _MS), "dur_ns": int(HOST_MS * _MS), "depth": 1}))
    per = max(n // 4, 1)

    def pp(r: int) -> list[dict]:
        label = {"stage": {"pg_name": "pp", "pg_desc": "PIPELINE_MODEL_PARALLEL_GROUP"},
                 "stage_pg": {"pg_name": f"{n + r % per}", "pg_desc": "undefined"}}.get(scenario)
        return [{**label, "ranks": [r % per + k * per for k in range(4)]}] if label else []

    md = [{"rank": r, "key": "distributedInfo", "value_json": json.dumps({
        "backend": "nccl", "rank": r, "world_size": n, "pg_config": pp(r)})}
          for r in range(n) if scenario not in ("stage_links", "stage_none")]
    links = pd.DataFrame(columns=["rank", "step", "op_name", "src_rank", "dst_rank"])
    if scenario == "stage_links":
        src = [r for r in range(n) if p["group"][r] < 3]
        dst = [int(np.flatnonzero((p["group"] == p["group"][r] + 1) & (ranks % per == r % per))[0]) for r in src]
        links = pd.DataFrame({"rank": src, "step": 1, "op_name": "hcom_send__1_0_1", "src_rank": src,
                              "dst_rank": dst})
    return {"links": links,
            "ranks": pd.DataFrame({"rank": ranks, "source_path": [f"rank{r}" for r in ranks], "format": "kineto",
                                   "vendor": "cuda", "framework": "pytorch", "device_name": "NVIDIA H100",
                                   "world_size": n}),
            "steps": pd.concat(st), "device_ops": pd.concat(dev), "comm_ops": pd.concat(comm),
            "host_ops": pd.concat(host), "metadata": pd.DataFrame(md),
            "capabilities": pd.DataFrame({"rank": np.repeat(ranks, 3),
                                          "name": np.tile(["steps", "kernels", "comm"], n)})}


def _p2p_ops(stage: np.ndarray, step: int, c0: np.ndarray, c1: np.ndarray, scenario: str) -> pd.DataFrame:
    """One step's send/recv ops: a stage > 0 receives just before its compute, a stage < 3 sends after it."""
    ranks = np.arange(stage.size)
    per = max(stage.size // 4, 1)
    recv, send = ranks[stage > 0], ranks[stage < 3]
    group = (lambda r: [f"{stage.size + x % per}" for x in r]) if scenario == "stage_pg" else (lambda r: None)
    return pd.DataFrame({
        "rank": np.concatenate((recv, send)), "step": step,
        "name": ["hcom_receive__1_0_1"] * recv.size + ["hcom_send__1_0_1"] * send.size,
        "op_type": ["receive"] * recv.size + ["send"] * send.size,
        "group_name": group(recv) + group(send) if scenario == "stage_pg" else None,
        "start_ns": np.concatenate(((c0[recv] - P2P_MS) * _MS, c1[send] * _MS)).astype(np.int64),
        "elapse_ns": int(P2P_MS * _MS)})


def build(out: Path, n_ranks: int, scenario: str, *, culprit: int | None = None, steps: int = 3,
          seed: int = 0, late_steps: int | None = None, kind: str = "allreduce") -> Path:
    """Write the scenario's store to out/profile.duckdb (replaced) and return its path. culprit defaults
    to the middle rank (late / host); late_steps limits its delay to the first that many steps. kind
    "sendrecv": each step's collective is an all-to-all as 2021-2023 traces show it (NCCL's grouped
    `ncclKernel_SendRecv` kernel, op type sendrecv, no group, no collective args)."""
    import duckdb

    from stepdoctor.analysis.ingest.base import schema_sql

    out.mkdir(parents=True, exist_ok=True)
    db = out / "profile.duckdb"
    db.unlink(missing_ok=True)
    tabs = _tables(n_ranks, scenario, n_ranks // 2 if culprit is None else culprit, steps, seed, late_steps)
    if kind == "sendrecv":
        _as_sendrecv(tabs)
    con = duckdb.connect(str(db))
    try:
        con.execute(schema_sql())
        for name, df in tabs.items():
            if df.empty:
                continue
            cols = ", ".join(df.columns)
            con.register("df", df)
            con.execute(f"INSERT INTO {name} ({cols}) SELECT {cols} FROM df")
            con.unregister("df")
    finally:
        con.close()
    return db


def _as_sendrecv(tabs: dict[str, pd.DataFrame]) -> None:
    name = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"
    dev, comm = tabs["device_ops"], tabs["comm_ops"]
    c = dev["category"] == "communication"
    dev.loc[c, "name"] = name
    dev.loc[c, ["collective", "group_name"]] = None
    tabs["comm_ops"] = comm.assign(name=name, op_type="sendrecv", group_name=None)


def open_store(db: Path):
    """Open a store written by `build` read-only as a `Profile`."""
    import duckdb

    from stepdoctor.analysis.store import Profile, profile_info

    con = duckdb.connect(str(db), read_only=True)
    return Profile(path=db.parent, db_path=db, info=profile_info(con, db.parent), warnings=[], con=con)
