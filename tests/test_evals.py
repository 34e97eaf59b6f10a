"""Every plantable problem on every vendor is found with its ranks, and nothing unexpected at medium/high;
clean 4-rank profiles of both vendors report nothing at medium or high (the `make evals` matrix)."""

from __future__ import annotations

import pytest

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
