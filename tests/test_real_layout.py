"""Layouts recognised by content on the real profiles (../shared/data/real): every folder gives the right kind,
ranks and formats, whatever it is called, or one line (exit 2) that says what it is and what to pass instead;
a folder holding unrelated runs is refused with the runs listed, never merged into one cluster."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SHARED, need
from stepdoctor.analysis.errors import ProfileError
from stepdoctor.analysis.ingest.discover import discover
from stepdoctor.tools import api

REAL = SHARED / "real"
FIX = REAL / "ascend" / "msinsight-server-fixtures"
PROF0 = "ascend/mindinsight-fixtures/profiler/PROF_000001_20230818142704322_COJGGGCANRMICFBC"
PROF1 = "ascend/mindinsight-fixtures/profiler/PROF_000001_20230818142704567_GQFAMHBKGODKJMLA"

# (path under real/, kind, [(rank, format, how the rank was found, source path relative to real/)])
CASES = [
    ("ascend/msinsight-pt-text-l0", "ascend",
     [(0, "ascend_pt_text", "profiler_info_0.json", "ascend/msinsight-pt-text-l0/rank0_ascend_pt"),
      (1, "ascend_pt_text", "profiler_info_1.json", "ascend/msinsight-pt-text-l0/rank1_ascend_pt")]),
    ("ascend/msinsight-pt-text-l1", "ascend",
     [(0, "ascend_pt_text", "profiler_info_0.json", "ascend/msinsight-pt-text-l1/rank0_ascend_pt"),
      (1, "ascend_pt_text", "profiler_info_1.json", "ascend/msinsight-pt-text-l1/rank1_ascend_pt")]),
    ("ascend/msinsight-pt-db-l0", "ascend",
     [(0, "ascend_pt_db", "profiler_info_0.json", "ascend/msinsight-pt-db-l0/rank0_ascend_pt"),
      (1, "ascend_pt_db", "profiler_info_1.json", "ascend/msinsight-pt-db-l0/rank1_ascend_pt")]),
    ("ascend/msinsight-pt-db-l1/rank1_ascend_pt/ASCEND_PROFILER_OUTPUT", "ascend",   # the output folder: its rank
     [(1, "ascend_pt_db", "profiler_info_1.json", "ascend/msinsight-pt-db-l1/rank1_ascend_pt")]),
    ("ascend/msinsight-pt-db-l1/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db", "ascend",
     [(0, "ascend_pt_db", "profiler_info_0.json", "ascend/msinsight-pt-db-l1/rank0_ascend_pt")]),
    # rank folders not named *_ascend_pt: profiler_info_N.json + ASCEND_PROFILER_OUTPUT/, no trace
    ("ascend/msinsight-server-fixtures/test_rank_0", "ascend",
     [(0, "ascend_pt_text", "profiler_info_0.json", "ascend/msinsight-server-fixtures/test_rank_0")]),
    ("ascend/msinsight-server-fixtures/test_rank_1/ASCEND_PROFILER_OUTPUT", "ascend",
     [(1, "ascend_pt_text", "profiler_info_1.json", "ascend/msinsight-server-fixtures/test_rank_1")]),
    # a DB export renamed .dat, found by its SQLite header; the reader gets the file itself
    ("ascend/msinsight-server-fixtures/multiDevice/msprof_db", "ascend",
     [(0, "ascend_pt_db", "placeholder",
       "ascend/msinsight-server-fixtures/multiDevice/msprof_db/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler.dat")]),
    # bare Ascend traces, told from Kineto by their content (array of events, string ts, Ascend tracks)
    ("ascend/msinsight-server-fixtures/heatMap/trace_view.json", "ascend",
     [(0, "ascend_pt_text", "placeholder", "ascend/msinsight-server-fixtures/heatMap")]),
    ("ascend/mstt-fixtures/timeline_advice/trace_view.json", "ascend",
     [(0, "ascend_pt_text", "placeholder", "ascend/mstt-fixtures/timeline_advice")]),
    ("ascend/mstt-fixtures/timeline_advice", "ascend",
     [(0, "ascend_pt_text", "placeholder", "ascend/mstt-fixtures/timeline_advice")]),
    ("ascend/mstt-fixtures/compute_advice_data", "ascend",   # a copied-out kernel_details.csv
     [(0, "ascend_pt_text", "placeholder", "ascend/mstt-fixtures/compute_advice_data")]),
    # raw msprof: PROF_* with device_*/ (rank_id from info.json, not the device id), msprof_*.db,
    # mindstudio_profiler_output/ (its parent is the collection)
    (PROF0, "ascend_msprof", [(0, "ascend_msprof", "device_0/info.json.0", PROF0)]),
    (PROF1, "ascend_msprof", [(1, "ascend_msprof", "device_1/info.json.1", PROF1)]),
    ("ascend/msinsight-server-fixtures/full_db", "ascend_msprof",
     [(0, "ascend_msprof", "placeholder", "ascend/msinsight-server-fixtures/full_db/msprof_0.db")]),
    ("ascend/msinsight-server-fixtures/full_db/msprof_0.db", "ascend_msprof",
     [(0, "ascend_msprof", "placeholder", "ascend/msinsight-server-fixtures/full_db/msprof_0.db")]),
    ("ascend/msinsight-server-fixtures/msprof/normal", "ascend_msprof",
     [(0, "ascend_msprof", "placeholder", "ascend/msinsight-server-fixtures/msprof/normal")]),
    ("ascend/msinsight-server-fixtures/msprof/slice/mindstudio_profiler_output", "ascend_msprof",
     [(0, "ascend_msprof", "placeholder", "ascend/msinsight-server-fixtures/msprof/slice")]),
    # MindSpore <= 2.3 flat profiler folders (their PROF_* children are the raw data, not more ranks)
    ("ascend/mindinsight-fixtures/profiler", "mindspore_legacy",
     [(0, "mindspore_legacy", "step_trace_raw_0_detail_time.csv", "ascend/mindinsight-fixtures/profiler"),
      (10, "mindspore_legacy", "step_trace_raw_10_detail_time.csv", "ascend/mindinsight-fixtures/profiler")]),
    ("ascend/mindinsight-fixtures/run_1", "mindspore_legacy",
     [(1, "mindspore_legacy", "step_trace_raw_1_detail_time.csv", "ascend/mindinsight-fixtures/run_1/normal_run/profiler")]),
    ("ascend/mindinsight-fixtures/run_2/normal_run", "mindspore_legacy",
     [(1, "mindspore_legacy", "step_trace_raw_1_detail_time.csv", "ascend/mindinsight-fixtures/run_2/normal_run/profiler")]),
    ("ascend/mindinsight-fixtures/cluster_propose", "mindspore_legacy",
     [(r, "mindspore_legacy", f"step_trace_raw_{r}_detail_time.csv", "ascend/mindinsight-fixtures/cluster_propose")
      for r in range(4)]),
    ("gpu-h100/gloo2_straggler/traces", "kineto",
     [(0, "kineto", "distributedInfo.rank", "gpu-h100/gloo2_straggler/traces/vm_0.1795736822135944433.pt.trace.json.gz"),
      (1, "kineto", "distributedInfo.rank", "gpu-h100/gloo2_straggler/traces/vm_1.1795736822148655725.pt.trace.json.gz")]),
    ("gpu-h100/ddp1", "kineto",   # the run folder: its traces/ one level down
     [(0, "kineto", "distributedInfo.rank", "gpu-h100/ddp1/traces/vm_0.1795736863741679397.pt.trace.json.gz")]),
]


@pytest.mark.parametrize("rel,kind,want", CASES, ids=[c[0].split("/", 1)[-1] for c in CASES])
def test_layout_by_content(rel: str, kind: str, want: list[tuple[int, str, str, str]]):
    d = discover(need(REAL / rel))
    got = [(s.rank, s.format, s.rank_how, s.path.relative_to(REAL).as_posix()) for s in d.sources]
    assert d.kind == kind and got == want
    # a placeholder rank is always said
    assert sum("placeholder rank" in w for w in d.warnings) == sum(w[2] == "placeholder" for w in want)


# Kineto folders: one trace each; the rank from distributedInfo.rank where the trace has it, else a
# placeholder with a warning (single-process traces carry no distributedInfo)
KINETO_DIST = {"tracelens-b200-eager", "tracelens-mi300-resnet-actckpt", "tracelens-mi300-xdit-sd35"}


def _kineto_dirs() -> list[Path]:
    roots = [REAL / "kineto", REAL / "gpu-h100"]
    if not all(r.is_dir() for r in roots):
        return []
    return sorted(p for p in (REAL / "kineto").iterdir() if p.is_dir()) + \
        sorted(p / "traces" for p in (REAL / "gpu-h100").iterdir() if (p / "traces").is_dir())


@pytest.mark.parametrize("folder", _kineto_dirs(), ids=lambda p: p.relative_to(REAL).as_posix())
def test_every_kineto_folder_is_one_kineto_rank(folder: Path):
    d = discover(folder)
    traces = sorted(f for f in folder.iterdir() if f.name.endswith((".json", ".json.gz")))
    assert d.kind == "kineto" and [s.format for s in d.sources] == ["kineto"] * len(traces)
    assert sorted(s.path for s in d.sources) == traces
    if folder.name == "gloo2_straggler" or folder.parent.name == "gloo2_straggler":
        assert [s.rank for s in d.sources] == [0, 1]
    else:
        dist = folder.name in KINETO_DIST or folder.parent.name == "ddp1"
        assert [(s.rank, s.rank_how) for s in d.sources] == [(0, "distributedInfo.rank" if dist else "placeholder")]


@pytest.mark.parametrize("rel,says", [
    # parents of unrelated runs: one line listing the runs, never one cluster with placeholder ranks
    ("ascend", "separate runs, not one job"),
    ("ascend/mindinsight-fixtures", "holds 4 separate runs, not one job: cluster_propose (MindSpore profiler); "
                                    "profiler (MindSpore profiler); run_1/normal_run/profiler (MindSpore profiler); "
                                    "run_2/normal_run/profiler (MindSpore profiler)"),
    ("ascend/mstt-fixtures", "holds 3 separate runs, not one job: advisor_backend_compute_advice (Ascend); "
                             "compute_advice_data (Ascend); timeline_advice (Ascend trace)"),
    ("ascend/msinsight-server-fixtures", "holds 5 separate runs, not one job: test_rank_0, test_rank_1 (Ascend); "
                                         "full_db (msprof); heatMap (Ascend trace); msprof (msprof); "
                                         "multiDevice (Ascend)"),
    ("ascend/msinsight-server-fixtures/msprof", "holds 2 msprof collections that are not ranks of one job"),
    ("kineto", "holds 13 separate runs, not one job"),
    ("gpu-h100", "holds 12 separate runs, not one job"),
    # not profiles: say what it is and what to pass
    ("ascend/msinsight-server-fixtures/cluster_analysis_output", "msprof-analyze's cluster_analysis_output, not a "
                                                                 "profile"),
    ("ascend/mstt-fixtures/cluster_analysis_output", "msprof-analyze's cluster_analysis_output, not a profile"),
    ("ascend/msinsight-server-fixtures/metadata", "only torch_npu's profiler_metadata.json"),
    ("ascend/msinsight-server-fixtures/metadata/profiler_metadata.json", "run description, not a trace"),
    ("ascend/msinsight-server-fixtures/test_kernel_parse", "only msprof op_summary CSVs"),
])
def test_not_one_job_is_one_line_exit_2(rel: str, says: str):
    with pytest.raises(ProfileError, match="pass "):
        discover(need(REAL / rel))
    r = subprocess.run([sys.executable, "-m", "stepdoctor", "breakdown", str(REAL / rel),
                        "--format", "json"], capture_output=True, text=True)
    assert r.returncode == 2 and says in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert "Traceback" not in r.stderr and r.stdout == ""


def test_rank_id_from_profiler_info_json_as_a_string(tmp_path: Path):
    """A rank folder whose profiler_info file has no rank in its name: rank_id inside (a string here) is the
    rank, not the device id."""
    src = need(FIX / "test_rank_1")
    dst = tmp_path / "anyname"
    shutil.copytree(src, dst)
    (dst / "profiler_info_1.json").rename(dst / "profiler_info.json")
    (dst / "profiler_info.json").write_text('{"rank_id": "5", "device_id": 1}')
    d = discover(dst)
    assert [(s.rank, s.rank_how) for s in d.sources] == [(5, "profiler_info.json rank_id")]


def test_rank_folders_stating_different_world_sizes_are_separate_runs(tmp_path: Path):
    """Two rank folders in different sub-folders, distinct rank ids, but profiler_metadata.json says world size
    8 in one and 2 in the other: two jobs, refused with both listed; with equal world sizes, one job."""
    for r, sub in ((0, "a"), (1, "b")):
        shutil.copytree(need(FIX / f"test_rank_{r}"), tmp_path / sub / f"test_rank_{r}")
    for r, sub, ws in ((0, "a", 8), (1, "b", 2)):
        (tmp_path / sub / f"test_rank_{r}" / "profiler_metadata.json").write_text(
            f'{{"distributed_args": {{"rank": {r}, "world_size": {ws}}}}}')
    with pytest.raises(ProfileError, match=r"holds 2 separate runs, not one job: a \(Ascend\); b \(Ascend\)"):
        discover(tmp_path)
    (tmp_path / "a" / "test_rank_0" / "profiler_metadata.json").write_text(
        '{"distributed_args": {"rank": 0, "world_size": 2}}')
    assert [s.rank for s in discover(tmp_path).sources] == [0, 1]


def test_ranks_with_only_their_step_table_keep_their_breakdown(tmp_path: Path):
    """test_rank_0/1: profiler_info, kernel_details, communication*.json and step_trace_time.csv, no trace."""
    for r in (0, 1):
        shutil.copytree(need(FIX / f"test_rank_{r}"), tmp_path / f"test_rank_{r}")
    b = api.breakdown(str(tmp_path))
    assert b.profile.ranks == [0, 1] and b.profile.steps == [2]
    got = {r.rank: (round(r.compute_ms, 3), round(r.free_ms, 3), round(r.stage_ms, 3)) for r in b.rows}
    assert got == {0: (75.175, 69.91, 291.698), 1: (75.422, 67.861, 294.587)}   # step_trace_time.csv, µs -> ms
    rep = api.issues(str(tmp_path))
    assert rep.profile.ranks == [0, 1]


def test_kineto_traces_of_different_runs_in_one_folder_are_refused(tmp_path):
    """Two single-GPU runs written into one folder (re-running into one tensorboard_trace_handler folder): no
    rank, no distributedInfo; and HTA's trace_diff (its control and test runs state world sizes 8 and 2). Each
    is one line listing the traces, exit 2, never a fake two-rank job whose 'slow rank' is the other run."""
    mix = tmp_path / "prof"
    mix.mkdir()
    for run in ("clean", "host_bound"):
        for f in need(REAL / "gpu-h100" / run / "traces").glob("*.json.gz"):
            shutil.copy(f, mix / f.name)
    with pytest.raises(ProfileError, match=r"holds 2 Kineto traces that are not the ranks of one job \(they do "
                                           r"not say their rank"):
        discover(mix)
    with pytest.raises(ProfileError, match=r"they state different world sizes\): control/control\.json\.gz \(rank 3"):
        discover(need(SHARED / "kineto" / "trace_diff"))
    r = subprocess.run([sys.executable, "-m", "stepdoctor", "issues", str(mix)], capture_output=True,
                       text=True, env={"STEPDOCTOR_CACHE_DIR": str(tmp_path / "c"), "PATH": "/usr/bin:/bin"})
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "pass one run's traces" in r.stderr
    # one job's ranks stay one job
    assert [s.rank for s in discover(need(REAL / "gpu-h100" / "gloo2_straggler" / "traces")).sources] == [0, 1]


def test_a_gpu_trace_beside_an_ascend_rank_is_refused_not_dropped(tmp_path):
    mix = tmp_path / "prof"
    shutil.copytree(need(REAL / "ascend" / "msinsight-pt-text-l1" / "rank0_ascend_pt"), mix / "rank0_ascend_pt")
    for f in need(REAL / "gpu-h100" / "clean" / "traces").glob("*.json.gz"):
        shutil.copy(f, mix / f.name)
    with pytest.raises(ProfileError, match=r"holds two kinds of profile in \.: Ascend rank folders and Kineto "
                                           r"traces \(vm_0\.\d+\.pt\.trace\.json\.gz\)"):
        discover(mix)
