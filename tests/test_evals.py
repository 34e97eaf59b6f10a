"""Every plantable problem on every vendor is found with its ranks, and nothing unexpected at medium/high;
clean 4-rank profiles of both vendors report nothing at medium or high (the `make evals` matrix)."""

from __future__ import annotations

import pytest

from stepdoctor.evals.generate import Plant, Scenario
from stepdoctor.evals.score import run_case, scenarios

CASES = scenarios(None, None, seed=7)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("evals")


@pytest.mark.parametrize("name,sc", CASES, ids=[n for n, _ in CASES])
def test_planted_problem_found_and_nothing_else(name, sc, workdir):
    case = run_case(name, sc, workdir)
    assert case.error is None, case.error
    assert not case.missing, case.missing
    assert not case.false_positives, case.false_positives
    if name.endswith("-clean"):
        assert case.expected == []


def test_matrix_covers_every_check_for_its_vendors():
    from stepdoctor.evals.generate import PROBLEMS

    names = {n for n, _ in CASES}
    for check, prob in PROBLEMS.items():
        for v in prob.vendors:
            assert f"{v}-{check}" in names
    assert {"ascend-clean", "kineto-clean"} <= names


@pytest.mark.parametrize("plants", [[], [Plant("slow-rank", ranks=[11])], [Plant("slow-link", ranks=[9])]],
                         ids=["clean", "slow-rank-11", "slow-link-9"])
def test_two_nodes_of_eight(plants, workdir):
    """16 ranks: an HCCS mesh per node and an RDMA ring across the two nodes. Clean, nothing at medium or
    high; a planted problem on a rank of the second node is found there, and nothing else."""
    case = run_case(f"ascend-16-{'-'.join(p.check for p in plants) or 'clean'}",
                    Scenario(vendor="ascend", ranks=16, steps=2, seed=7, plants=plants), workdir)
    assert case.error is None, case.error
    assert not case.missing, case.missing
    assert not case.false_positives, case.false_positives
    assert len(case.found) == len(plants)  # (found: a finding of the check naming exactly the planted ranks)
