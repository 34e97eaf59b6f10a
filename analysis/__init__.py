"""analysis: the deterministic core (ingest, store, metrics, checks); never imports tools/ or server/."""

from __future__ import annotations

from collections.abc import MutableMapping

# numpy's BLAS thread pool: nothing here multiplies matrices, and its threads would only spin (measured:
# 0.2-0.4 s CPU in a warm `stepdoctor issues`) and keep a process from being safely forked
BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def one_blas_thread(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Ask for one BLAS thread in `env` (a process's environment, before it imports numpy) unless the
    user chose a number."""
    for v in BLAS_THREAD_VARS:
        env.setdefault(v, "1")
    return env
