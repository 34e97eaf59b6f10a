"""env-var severity follows what the value does: no env-var finding has a measured impact, so only a value that
slows every launch is high; a recommended setting left at its default is low (real torch_npu exports record the
advisor's variables unset) and never outranks a measured finding."""

from __future__ import annotations

import pytest
from checkrun import assert_golden

from conftest import SHARED, need
from stepdoctor.analysis.checks.env_var import ENV_RULES, RULES_BY_NAME
from stepdoctor.tools import api

SEVERITY_RANK = {"high": 0, "medium": 1, "low": 2}


def test_severity_by_what_the_value_does() -> None:
    assert RULES_BY_NAME["ASCEND_LAUNCH_BLOCKING"].severity == "high"
    assert RULES_BY_NAME["CUDA_LAUNCH_BLOCKING"].severity == "high"
    assert {RULES_BY_NAME[n].severity for n in ("ACLNN_CACHE_LIMIT", "HOST_CACHE_CAPACITY",
                                                 "PYTORCH_NPU_ALLOC_CONF")} == {"low"}
    assert {RULES_BY_NAME[n].severity for n in ("HCCL_ALGO", "HCCL_RDMA_TC", "ASCEND_GLOBAL_LOG_LEVEL")} == {"medium"}
    assert all(r.severity in SEVERITY_RANK for r in ENV_RULES)


@pytest.mark.parametrize("folder", ["msinsight-pt-text-l0", "msinsight-pt-db-l1"])
def test_unset_defaults_on_a_real_export_are_low_and_rank_below_measured(folder: str) -> None:
    res = api.issues(str(need(SHARED / "real" / "ascend" / folder)))
    env = [f for f in res.findings if f.check == "env-var"]
    assert {f.subject for f in env} == {"ACLNN_CACHE_LIMIT", "HOST_CACHE_CAPACITY", "PYTORCH_NPU_ALLOC_CONF"}
    assert all(f.severity == "low" and f.evidence["measured_impact"] is False for f in env)
    assert all("No cost of it is measured" in f.message for f in env)
    measured = [i for i, f in enumerate(res.findings) if f.impact_ms is not None and f.severity != "low"]
    assert measured and max(measured) < min(res.findings.index(f) for f in env)


def test_env_var_on_cluster4_is_its_golden_answer(cluster4) -> None:
    assert_golden("env-var", "cluster4", api.issues(cluster4, checks=["env-var"]).findings)
