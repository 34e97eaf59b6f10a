"""analysis: the deterministic core (ingest, store, metrics, checks); never imports tools/ or server/."""

from __future__ import annotations

from collections.abc import MutableMapping

# numpy's BLAS thread pool: nothing here multiplies matrices, and its threads make a process unsafe to fork
# (they also spin at times: 0.2-0.4 s CPU in 3 warm `stepdoctor issues` runs, no difference beyond noise
# in 8 interleaved ones)
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Ask for one BLAS thread in `env` (a process's environment, before it imports numpy) unless the
    user chose a number."""
    for v in BLAS_THREAD_VARS:
        env.setdefault(v, "1")
    return env
