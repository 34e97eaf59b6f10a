"""An unreachable Ray address is one line at once, not minutes of Ray's own reconnect attempts."""

from __future__ import annotations

import time

import pytest

from stepdoctor.analysis.errors import ProfileError

pytest.importorskip("ray", reason="the Ray engine's tests need Ray (the dev extras install it)")


@pytest.mark.parametrize("address", ["127.0.0.1:1", "ray://127.0.0.1:1"])
def test_an_unreachable_cluster_is_one_line_at_once(address: str) -> None:
    import ray

    from stepdoctor.analysis.build import ray_engine

    if ray.is_initialized():   # a connection an earlier test left would be reused, not probed
        ray.shutdown()
    t0 = time.monotonic()
    with pytest.raises(ProfileError, match=f"cannot reach the Ray cluster at {address}: ") as e:
        ray_engine.connect(address)
    assert time.monotonic() - t0 < 10 and "\n" not in str(e.value)
