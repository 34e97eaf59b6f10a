"""Shared fixtures: every test uses a private cache; shared data is found beside the repo."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import configuration, settings

# tests never write into the repository: hypothesis keeps no example database and its other caches go to a
# temporary folder (the pytest cache plugin is off too: pyproject's addopts)
settings.register_profile("stepdoctor", database=None)
settings.load_profile("stepdoctor")
configuration.set_hypothesis_home_dir(tempfile.mkdtemp(prefix="stepdoctor-hypothesis-"))

REPO = Path(__file__).resolve().parent.parent
SHARED = (REPO.parent / "shared" / "data").resolve()
CLUSTER4 = SHARED / "ascend" / "cluster4"
KINETO = SHARED / "kineto"


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory):
    """Never touch the user's cache from tests."""
    d = tmp_path_factory.mktemp("stepdoctor-cache")
    old = os.environ.get("STEPDOCTOR_CACHE_DIR")
    os.environ["STEPDOCTOR_CACHE_DIR"] = str(d)
    yield d
    if old is None:
        os.environ.pop("STEPDOCTOR_CACHE_DIR", None)
    else:
        os.environ["STEPDOCTOR_CACHE_DIR"] = old


def need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared data not found at {path}")
    return path


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def scenario(tmp_path_factory: pytest.TempPathFactory):
    """Generate (once per distinct arguments), ingest and run the compute and communication checks on a
    profile with the given plants (tests/checkrun.py; the per-check files of tests/checks/ share it)."""
    from checkrun import analyse

    from stepdoctor.evals.generate.ascend import write_ascend_profile
    from stepdoctor.evals.generate.kineto import write_kineto_profile
    from stepdoctor.evals.generate.problems import Plant, Scenario

    done: dict[tuple, Any] = {}

    def run(*plants: Plant | str, vendor: str = "ascend", ranks: int = 2, steps: int = 2, **opts: bool):
        ps = [p if isinstance(p, Plant) else Plant(p) for p in plants]
        key = (vendor, ranks, steps, repr(ps), tuple(sorted(opts.items())))
        if key not in done:
            d = tmp_path_factory.mktemp("gen")
            sc = Scenario(vendor, ranks=ranks, steps=steps, plants=ps)
            writer = write_ascend_profile if vendor == "ascend" else write_kineto_profile
            writer(sc, d / "prof", **opts)
            done[key] = analyse(d / "prof", d / "cache")
        return done[key]

    return run


@pytest.fixture(scope="session")
def cluster4_cc(tmp_path_factory: pytest.TempPathFactory):
    """The synthetic cluster4 (rules doc §8.3 #14-#21 planted) under the compute and communication checks."""
    from checkrun import analyse

    return analyse(need(CLUSTER4), tmp_path_factory.mktemp("c4cache"))


@pytest.fixture(scope="session")
def gen(tmp_path_factory: pytest.TempPathFactory):
    """Generate (once per distinct arguments), ingest and run the host-side checks on a profile with the
    given plants (plants that do not interact share one profile, on different ranks)."""
    from checkrun import HOST, analyse

    from stepdoctor.evals.generate.ascend import write_ascend_profile
    from stepdoctor.evals.generate.kineto import write_kineto_profile
    from stepdoctor.evals.generate.problems import Plant, Scenario

    done: dict[tuple, Any] = {}

    def run(*plants: Plant | str, vendor: str = "ascend", ranks: int = 2, steps: int = 2, layers: int = 3):
        ps = [p if isinstance(p, Plant) else Plant(p) for p in plants]
        key = (vendor, ranks, steps, layers, repr(ps))
        if key not in done:
            out = tmp_path_factory.mktemp(vendor)
            sc = Scenario(vendor=vendor, ranks=ranks, steps=steps, plants=ps)
            (write_ascend_profile if vendor == "ascend" else write_kineto_profile)(sc, out / "p", layers=layers)
            done[key] = analyse(out / "p", out / "cache", HOST)
        return done[key]

    return run


@pytest.fixture(scope="session")
def ms_case(tmp_path_factory: pytest.TempPathFactory):
    """The MindSpore guide cases (mindspore doc §9) under the host-side checks, per layout."""
    from checkrun import HOST, analyse

    from stepdoctor.evals.generate import mindspore as ms_gen

    done: dict[tuple, Any] = {}

    def run(layout: str, case: str, fixed: bool = False):
        if (layout, case, fixed) not in done:
            out = tmp_path_factory.mktemp(f"ms_{layout}")
            path = getattr(ms_gen, f"{layout}_profile")(out / "p", case, fixed=fixed)
            done[(layout, case, fixed)] = analyse(path, out / "cache", HOST)
        return done[(layout, case, fixed)]

    return run


@pytest.fixture(scope="session")
def cluster4_host(tmp_path_factory: pytest.TempPathFactory):
    """The synthetic cluster4 (planted #8-#13 on all four ranks) under the host-side checks."""
    from checkrun import HOST, analyse

    return analyse(need(CLUSTER4), tmp_path_factory.mktemp("c4host") / "cache", HOST)


@pytest.fixture(scope="session")
def cluster4():
    """The synthetic cluster4, opened once through the tools' front door (its checks' run is kept per open)."""
    from stepdoctor.tools import api

    return api.load(need(CLUSTER4))
