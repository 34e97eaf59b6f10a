"""The compute and communication checks together (each has its own file, tests/checks/test_<check_id>.py):
silent on a clean profile, none but the planted ones on the synthetic cluster4 (rules doc §8.3 #14-#21), the
same findings from its DB export. Profiles are small (2 ranks x 2 steps, 3 layers), each generated and
ingested once per session (tests/conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from checkrun import COMPUTE_COMM, Result, analyse

from conftest import CLUSTER4, need
from stepdoctor.evals.generate.to_db import convert_profile

MINE = COMPUTE_COMM


# ------------------------------------------------------------------------------------------- clean profiles


def test_clean_ascend_profile_fires_nothing(scenario: Callable[..., Result]) -> None:
    res = scenario()
    assert res.run.findings == []
    assert res.run.not_applicable == {}  # every capability was there: silence means "checked, fine"
    assert res.run.warnings == []


def test_clean_kineto_profile_small_packet_silent_and_ascend_checks_not_applicable(
    scenario: Callable[..., Result],
) -> None:
    res = scenario(vendor="kineto", steps=3)
    assert res.run.findings == []
    assert "small-packet" not in res.run.not_applicable  # it ran on the NCCL message sizes
    assert "affinity-api" not in res.run.not_applicable  # it looked for SDPA's unfused math backend
    assert set(res.run.not_applicable) == set(MINE) - {"small-packet", "affinity-api"}


# ------------------------------------------------------------------------------- the sample (rules doc §8.3)


def test_cluster4_unplanted_checks_silent(cluster4_cc: Result) -> None:
    # dynamic shape (Cast is static), bandwidth contention (no overlap) and retransmission are not planted
    for check in ("dynamic-shape", "bandwidth-contention", "retransmission"):
        assert cluster4_cc.of(check) == [], check
        assert check not in cluster4_cc.run.not_applicable
    loud = sorted((f.check, f.severity) for f in cluster4_cc.run.findings if f.severity != "low")
    assert loud == [("aicpu-op", "medium"), ("freq-throttle", "high")]


def test_cluster4_db_export_gives_the_same_findings(cluster4_cc: Result, tmp_path: Path) -> None:
    convert_profile(need(CLUSTER4), tmp_path / "db")
    db = analyse(tmp_path / "db", tmp_path / "cache")
    assert db.profile.info.format == "ascend_pt_db"

    def key(r: Result) -> list[tuple]:
        return [(f.check, f.subject, f.ranks, f.steps, f.severity, f.impact_ms) for f in r.run.findings]

    assert key(db) == key(cluster4_cc)


# ------------------------------------------------------------------------------------------ pure helpers


