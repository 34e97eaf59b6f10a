"""host-bound: its cases on generated profiles with the problem planted, on the synthetic cluster4 or the
MindSpore guide cases, the rules it is built on, and the golden answer of one case."""

from __future__ import annotations

from collections.abc import Callable

from checkrun import Result, assert_golden, ev

from stepdoctor.analysis.thresholds import T

MS = 1e6


def test_ascend_host_bound(gen: Callable[..., Result]) -> None:
    res = gen("host-bound", layers=1)
    f = res.one("host-bound")
    assert (f.ranks, f.steps, f.subject) == ([0, 1], [1, 2], "launch")
    for r in (0, 1):
        e = ev(f, r)
        assert e["free_pct"] >= T.host_bound_free_pct.value
        assert e["late_launch_share_pct"] >= T.host_bound_late_launch_pct.value
        assert e["many_tiny_kernels"] and e["median_kernel_us"] < e["median_launch_interval_us"]
    assert f.impact_ms in [v["late_launch_idle_ms_per_step"] for v in f.evidence["per_rank"].values()]
    assert f.severity == "high" and "late host launch" in f.message


def test_kineto_host_bound(gen: Callable[..., Result]) -> None:
    res = gen("host-bound", vendor="kineto", steps=3)
    f = res.one("host-bound")
    assert f.ranks == [0, 1] and f.steps == [1, 2]
    e = ev(f, 0)
    assert e["late_launch_share_pct"] >= 90 and e["many_tiny_kernels"]


def test_host_bound_on_ascend_planted_is_its_golden_answer(gen: Callable[..., Result]) -> None:
    assert_golden("host-bound", "ascend-planted", gen("host-bound", layers=1).of("host-bound"))


def test_device_idle_behind_an_ascend_synchronize_is_sync_not_launch(tmp_path) -> None:
    """Real torch_npu DB export (2 ranks): the device idles behind aclrtSynchronizeStream calls ~4.3 ms per step.
    The idle attribution takes the synchronize calls from the one definition of a drained device
    (timeline.names.DRAINED_RE), so that time is `sync`, not charged to slow launching."""
    from conftest import SHARED, need
    from stepdoctor.analysis.store import IngestOptions
    from stepdoctor.analysis.timeline.names import DRAINED_RE
    from stepdoctor.tools import api

    path = need(SHARED / "real" / "ascend" / "msinsight-pt-db-l0")
    assert DRAINED_RE.match("AscendCL@aclrtSynchronizeStream") and DRAINED_RE.match("cudaMemcpy")
    assert not DRAINED_RE.match("cudaMemcpyAsync")
    rep = api.issues(api.load(path, IngestOptions(cache_dir=tmp_path / "cache")), checks=["host-bound"])
    for rank, sync_ms in ((0, 4.2873), (1, 4.3396)):
        att = ev(rep.findings[0], rank)["idle_attribution_ms_per_step"]
        assert abs(att["sync"] - sync_ms) < 1e-3 and att["launch"] < 26.0
