"""Shared fixtures: every test uses a private cache; shared data is found beside the repo."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

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
