"""`stepdoctor hang`: real Flight Recorder dumps and py-spy stacks (tests/data/real_hang, PROVENANCE.md there),
dumps in torch's format at 1,024 ranks, and damaged or hostile dumps."""

from __future__ import annotations

import pickle
import shutil
import time
from pathlib import Path

import pytest

from stepdoctor.analysis.errors import ProfileError
from stepdoctor.analysis.hang import diagnose_hang
from stepdoctor.evals.generate.fr_dumps import write_hang

REAL = Path(__file__).parent / "data" / "real_hang"


def test_real_gloo_skip_names_rank_group_and_collective():
    r = diagnose_hang(REAL / "skip")
    assert r.dump_ranks == list(range(8)) and r.missing_dumps == []
    d = r.divergences[0]
    assert (d.group_name, d.seq, d.kind, d.ranks) == ("default_pg", 6, "mismatch", [5])
    assert d.op == "gloo:all_reduce" and d.waiting_ranks == [0, 1, 2, 3, 4, 6, 7]
    assert d.positions[0].stack[0].startswith("barrier (distributed_c10d.py")
    assert [g.ranks for g in r.stacks.outliers] == [[5]]
    assert "rank 5 issued gloo:barrier" in r.verdict and "hang_job.py:67" in r.verdict


def test_real_gloo_stuck_before_collective():
    r = diagnose_hang(REAL / "stuck")
    d = r.divergences[0]
    assert (d.group_name, d.seq, d.kind, d.ranks) == ("default_pg", 5, "missing", [5])
    assert d.positions[0].last_issued_seq == 4 and d.positions[0].last_completed_seq == 4  # from pg_status
    out = r.stacks.outliers
    assert [g.ranks for g in out] == [[5]] and out[0].frames[0] == "load_batch (hang_job.py:28)"
    assert "never issued it" in r.verdict and "load_batch (hang_job.py:28)" in r.verdict


def test_real_nccl_timeout_dump_stuck_and_empty_ondemand_dump_stated():
    r = diagnose_hang(REAL / "nccl_ws1_timeout")
    d = r.divergences[0]
    assert (d.seq, d.kind, d.ranks, d.op) == (6, "stuck", [0], "nccl:all_reduce")
    assert d.positions[0].last_completed_seq == 5
    assert any("no entries" in w and "nccl_ondemand" in w for w in r.warnings)


@pytest.mark.parametrize("mode,kind", [("skip", "mismatch"), ("stuck", "missing")])
def test_1024_ranks_in_seconds(tmp_path: Path, mode: str, kind: str):
    write_hang(tmp_path, world=1024, culprit=777, mode=mode)
    t0 = time.perf_counter()
    r = diagnose_hang(tmp_path)
    took = time.perf_counter() - t0
    d = r.divergences[0]
    assert (d.kind, d.ranks, d.seq) == (kind, [777], 20)
    assert len(d.waiting_ranks) == 1023
    assert took < 10, took


def test_missing_and_truncated_dumps_are_stated_not_guessed(tmp_path: Path):
    write_hang(tmp_path, world=8, culprit=3, mode="stuck")
    (tmp_path / "nccl_trace_rank_6").unlink()
    data = (tmp_path / "nccl_trace_rank_7").read_bytes()
    (tmp_path / "nccl_trace_rank_7").write_bytes(data[: len(data) // 2])
    r = diagnose_hang(tmp_path)
    assert r.missing_dumps == [6, 7]
    assert r.divergences[0].ranks == [3]
    assert any("nccl_trace_rank_7" in u for u in r.unreadable)
    assert any("[6, 7]" in w for w in r.warnings)


def test_a_pickle_that_would_run_code_is_refused(tmp_path: Path):
    class Evil:
        def __reduce__(self):
            return (shutil.rmtree, (str(tmp_path / "victim"),))

    (tmp_path / "victim").mkdir()
    (tmp_path / "fr_rank_0").write_bytes(pickle.dumps({"entries": [Evil()]}))
    (tmp_path / "fr_rank_1").write_bytes(b"")
    with pytest.raises(ProfileError, match="unreadable"):
        diagnose_hang(tmp_path)
    assert (tmp_path / "victim").is_dir()


def test_nothing_there_is_one_line_error(tmp_path: Path):
    with pytest.raises(ProfileError, match="no Flight Recorder dump"):
        diagnose_hang(tmp_path)


@pytest.mark.anyio
async def test_the_mcp_tool_answers_like_the_cli(tmp_path: Path):
    from mcp.client import Client

    from stepdoctor.server.app import create_server
    from stepdoctor.tools.live import render_hang

    shutil.copytree(REAL / "stuck", tmp_path / "stuck")
    srv = create_server([tmp_path], cache_dir=tmp_path / "cache")
    async with Client(srv, raise_exceptions=True) as c:
        r = await c.call_tool("diagnose_hang", {"path": str(tmp_path / "stuck")})
        assert not r.is_error, r.content[0].text
        bad = await c.call_tool("diagnose_hang", {"path": "/etc"})
    assert r.structured_content["divergences"][0]["ranks"] == [5]
    assert r.content[0].text == render_hang(diagnose_hang(tmp_path / "stuck"))
    assert bad.is_error and "outside the allowed roots" in bad.content[0].text


STUCK_WORKER = """
import os, sys, time
def wait_in_collective():
    while True:
        time.sleep(0.05)
def load_batch():
    while True:
        time.sleep(0.05)
open(sys.argv[1], "w").close()
(load_batch if os.environ["RANK"] == "6" else wait_in_collective)()
"""


def test_snapshot_of_8_live_processes_names_the_one_stuck_elsewhere(tmp_path: Path):
    import os
    import subprocess
    import sys

    if shutil.which("py-spy", path=str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]) is None:
        pytest.skip("py-spy not installed")
    script = tmp_path / "w.py"
    script.write_text(STUCK_WORKER)
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path / f"up{r}")],
                              env={**os.environ, "RANK": str(r)}) for r in range(8)]
    try:
        while len(list(tmp_path.glob("up*"))) < 8:
            time.sleep(0.05)
        env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
        snap = subprocess.run([sys.executable, "-m", "stepdoctor", "snapshot",
                               *[str(p.pid) for p in procs], "-o", str(tmp_path / "stacks")],
                              capture_output=True, text=True, env=env)
        assert snap.returncode == 0, snap.stderr
    finally:
        for p in procs:
            p.kill()
    r = diagnose_hang(tmp_path / "stacks")
    assert [g.ranks for g in r.stacks.outliers] == [[6]]
    assert r.stacks.outliers[0].frames[0].startswith("load_batch (w.py:")
    assert "rank(s) [6] are elsewhere" in r.verdict


def test_real_debug_server_stack_dump_names_the_stuck_rank():
    r = diagnose_hang(REAL / "stuck_debug_server")
    groups = {tuple(g.ranks): g.frames for g in r.stacks.groups}
    assert groups[(5,)][0] == "load_batch (hang_job.py:28)"
    assert groups[(0, 1, 2, 3, 4, 6, 7)][0] == "all_reduce (distributed_c10d.py:3252)"
    assert [g.ranks for g in r.stacks.outliers] == [[5]]


def test_torch_npu_hccl_dumps_named_by_rank_alone(tmp_path: Path):
    """torch_npu writes TORCH_HCCL_DEBUG_INFO_TEMP_FILE<rank>; with the prefix '/dumps/' the files are named
    '0', '1', ... Its keys are torch's (version 2.4, hccl: op names)."""
    write_hang(tmp_path, world=16, culprit=9, mode="stuck", backend="hccl", prefix="", version="2.4")
    d = diagnose_hang(tmp_path).divergences[0]
    assert (d.kind, d.ranks, d.op) == ("missing", [9], "hccl:all_reduce")


# ---------------------------------------------------------------------------------------------------------
# Recordings of 8-16 gloo ranks with several process groups (tests/data/real_hang/PROVENANCE.md says what was
# planted in each and what the files hold, read without stepdoctor).

def _no_other_culprit(r, culprits: list[int]) -> None:
    assert r.culprits == culprits
    assert all(set(d.ranks) <= set(culprits) for d in r.divergences)
    for c in r.consequences:   # victims wait; they are never listed as culprits
        assert not set(c.waiting_ranks) & set(culprits) or c.waits_for


def test_real_grid16_stuck_tp_rank_across_node_folders():
    r = diagnose_hang(REAL / "grid16_stuck")
    assert r.dump_ranks == list(range(16)) and r.missing_dumps == []   # node0/ and node1/ both read
    _no_other_culprit(r, [6])
    d = r.divergences[0]
    assert (d.kind, d.group_desc, d.seq, d.group_ranks) == ("missing", "TENSOR_MODEL_PARALLEL_GROUP", 4, [4, 5, 6, 7])
    assert d.waiting_ranks == [4, 5, 7]
    assert "TENSOR_MODEL_PARALLEL_GROUP (group " in d.group_name   # the description is shared: the id tells
    # every data-parallel group waits, directly or through the tensor-parallel peers of rank 6
    assert sorted(r for c in r.consequences for r in c.waiting_ranks) == [0, 1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15]
    assert all(c.caused_by == [0] for c in r.consequences)
    assert "load_batch (hang_grid.py" in r.verdict


def test_real_grid16_died_rank_is_the_unknown_cause_and_no_survivor_is_blamed():
    r = diagnose_hang(REAL / "grid16_died")
    assert r.missing_dumps == [9] and 9 not in r.dump_ranks
    assert len(r.divergences) == 1
    d = r.divergences[0]
    assert (d.kind, d.ranks, d.unknown_ranks, d.group_ranks) == ("unknown", [], [9], [8, 9, 10, 11])
    _no_other_culprit(r, [9])
    assert "rank(s) 9" in r.verdict and "left no dump" in r.verdict
    assert any("[9]" in u for u in r.unknowns)


def test_real_order_swap_names_the_rank_that_issued_another_op():
    r = diagnose_hang(REAL / "order_swap8")
    _no_other_culprit(r, [3])
    d = r.divergences[0]
    assert (d.kind, d.op) == ("mismatch", "gloo:all_reduce")
    assert d.positions[0].last_issued_op == "gloo:broadcast"


def test_real_pipeline_deadlock_over_gloo_is_stated_not_guessed():
    """Gloo records no send/recv: every dump is empty, the stacks split 2 and 2 in recv."""
    r = diagnose_hang(REAL / "pp_deadlock4")
    assert r.divergences == [] and r.culprits == []
    assert r.stacks.tie and r.stacks.outliers == []
    assert "point-to-point deadlock" in r.verdict and "recv_grad" in r.verdict and "recv_activation" in r.verdict
    assert any("no entries" in u for u in r.unknowns) and any("equal in size" in u for u in r.unknowns)


def test_real_clean_job_names_nobody():
    r = diagnose_hang(REAL / "clean8")
    assert r.divergences == [] and r.culprits == [] and r.consequences == []
    assert r.verdict.startswith("no divergence found")


def test_1024_ranks_x_20_groups_names_the_one_rank(tmp_path: Path):
    """Group names are global, each rank's pg_id / pg_status keys its own; one rank stops before its 4th kind
    of collective: it alone is the cause, every other waiting group a consequence."""
    from stepdoctor.evals.generate.fr_dumps import write_grid_hang

    write_grid_hang(tmp_path, world=1024, ngroups=20, culprit=777)
    r = diagnose_hang(tmp_path)
    assert r.culprits == [777] and len(r.divergences) == 1
    assert r.divergences[0].kind == "missing" and r.divergences[0].group_desc == "BLOCK4_GROUP"
    assert r.consequences and all(c.caused_by == [0] for c in r.consequences)


def test_a_damaged_dump_is_a_warning_in_words_and_the_others_are_read(tmp_path: Path):
    shutil.copytree(REAL / "stuck" / "fr", tmp_path / "fr")
    (tmp_path / "fr" / "gloo_fr_trace_rank_3").write_bytes(pickle.dumps({"version": "2.10", "entries": {"a": 1}}))
    (tmp_path / "fr" / "gloo_fr_trace_rank_4").write_bytes(b"\x80\x04garbage")
    r = diagnose_hang(tmp_path)
    assert r.missing_dumps == [3, 4] and r.culprits == [5]
    text = " ".join(r.unreadable)
    assert "'entries' is a dict, not a list" in text and "not a readable pickle dump" in text
    assert "Error" not in text and "Exception" not in text


def test_nccl_pipeline_send_never_issued_names_the_stage_not_the_ones_waiting_after_it(tmp_path: Path):
    """NCCL records send/recv (profiling_name 'nccl:send 2->3', group ranks): the k-th send src->dst is the
    k-th recv at dst from src. Stage 2 never sends its last microbatch on; stages 3-5 wait, each for the one
    before it: consequences, not culprits."""
    from stepdoctor.evals.generate.fr_dumps import write_p2p_hang

    write_p2p_hang(tmp_path, stages=6, culprit=2)
    r = diagnose_hang(tmp_path)
    assert r.culprits == [2]
    d = r.divergences[0]
    assert (d.kind, d.seq, d.group_ranks, d.waiting_ranks) == ("missing", 4, [2, 3], [3])
    assert "send 2->3 #4" in r.verdict
    assert sorted(c.waiting_ranks[0] for c in r.consequences) == [4, 5]
    assert all(c.caused_by == [0] for c in r.consequences)


def test_coalesced_collectives_compare_as_one_and_a_different_member_is_named(tmp_path: Path):
    """A coalesced group (entries sharing one collective_seq_id, ending in `nccl:coalesced`) is one collective:
    rank 2 coalesces other shapes at seq 3 and is the odd one; its peers complete seq 3 nowhere."""
    from stepdoctor.evals.generate.fr_dumps import _entry

    pg = ("0", "default_pg")
    for r in range(4):
        entries = [_entry(s, "nccl:all_reduce", 1_795_000_000_000_000_000 + s * 10**6, "completed", pg)
                   for s in (1, 2)]
        sizes = [[512]] if r == 2 else [[1024]]
        for op in ("nccl:all_reduce", "nccl:all_reduce", "nccl:coalesced"):
            e = _entry(3, op, 1_795_000_000_003_000_000, "scheduled", pg)
            e["input_sizes"] = sizes
            entries.append(e)
        for i, e in enumerate(entries):
            e["record_id"] = i
        doc = {"version": "2.8", "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"}},
               "pg_status": {"0": {"last_enqueued_collective": 3, "last_started_collective": -1,
                                   "last_completed_collective": 2}}, "entries": entries}
        (tmp_path / f"nccl_trace_rank_{r}").write_bytes(pickle.dumps(doc))
    r = diagnose_hang(tmp_path)
    assert r.culprits == [2]
    d = r.divergences[0]
    assert (d.kind, d.seq) == ("mismatch", 3) and d.op == "nccl:all_reduce + nccl:all_reduce + nccl:coalesced"
    assert "[[512]]" in d.message and "[[1024]]" in d.message
