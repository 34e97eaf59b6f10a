"""h2d-pageable: host-to-device copies from pageable memory on a generated Kineto profile (the copies are read
back from the tables by a direct query), and its golden answer. Ascend exports record no pageable copies: the
check does not apply there (test_checks_host.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from checkrun import Result, assert_golden, ev

from stepdoctor.evals.generate.problems import Plant

MS = 1e6


def _kineto(gen: Callable[..., Result]) -> Result:
    """The Kineto profile of test_checks_host.test_kineto_plants_on_their_ranks (one generated profile)."""
    return gen(Plant("gc-pause", ranks=[0]), Plant("slow-dataloader", ranks=[1]), Plant("memory-ops", ranks=[1]),
               Plant("h2d-pageable", ranks=[0]), Plant("fp32-compute", ranks=[1]), vendor="kineto", steps=3)


def test_kineto_pageable_copies_on_their_rank(gen: Callable[..., Result]) -> None:
    res = _kineto(gen)
    f = res.one("h2d-pageable")
    e = ev(f, 0)
    copies = res.profile.sql("SELECT step, dur_ns, size_bytes FROM device_ops WHERE rank = 0 AND name LIKE "
                             "'Memcpy HtoD (Pageable%' AND step IN (1, 2)")
    assert (f.ranks, f.steps, e["copies_per_affected_step"]) == ([0], [1, 2], 2)
    assert e["ms_per_step"] == pytest.approx(copies["dur_ns"].sum() / MS / 2, abs=1e-3)
    assert e["bandwidth_gbps"] == pytest.approx(6.0, abs=0.1)     # the plant's 6 GB/s


def test_h2d_pageable_on_the_generated_kineto_profile_is_its_golden_answer(gen: Callable[..., Result]) -> None:
    assert_golden("h2d-pageable", "kineto-planted", _kineto(gen).of("h2d-pageable"))
