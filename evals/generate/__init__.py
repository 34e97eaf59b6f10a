"""Seeded scenario generators with planted problems.

Write realistic profiles whose problems are known, for the tests of every check, the benchmark and the
evals: `write_ascend_profile` (torch_npu text export, one `*_ascend_pt` directory per rank),
`write_kineto_profile` (one PyTorch-profiler trace per rank) and `repeat_kineto_trace` (enlarge a real
trace). `problems` holds the catalog of plantable problems, the `Scenario` / `Plant` model and
`expected_findings`. CLI: `python -m stepdoctor.evals.generate --help`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .ascend import write_ascend_profile
from .kineto import repeat_kineto_trace, write_kineto_profile
from .problems import (
    PROBLEMS,
    Plant,
    Problem,
    Scenario,
    catalog,
    expected_findings,
    parse_plant_spec,
    tolerated_findings,
)

__all__ = [
    "PROBLEMS",
    "Plant",
    "Problem",
    "Scenario",
    "catalog",
    "expected_findings",
    "parse_plant_spec",
    "repeat_kineto_trace",
    "tolerated_findings",
    "write_ascend_profile",
    "write_kineto_profile",
    "write_profile",
]


def write_profile(scenario: Scenario, out_dir: Path | str, **options: Any) -> Path:
    """Write `scenario` with the writer of its vendor; `options` go to that writer."""
    if scenario.vendor == "ascend":
        return write_ascend_profile(scenario, out_dir, **options)
    return write_kineto_profile(scenario, out_dir, **options)
