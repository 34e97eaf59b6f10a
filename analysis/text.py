"""Words and numbers in sentences, shared by the checks, compare, the tools and the server: one way to write a
duration, and one name for each part of a rank's own work (`metrics.collectives.PARTS`)."""

from __future__ import annotations

# what each part of a compute window is, in a sentence ("... more than the other ranks on data loading")
PART_TEXT = {"compute_kernels": "compute kernels", "data_loading": "data loading", "host_ops": "host work",
             "untraced": "nothing traced (sleep, GC, I/O or an untraced thread)"}


def ms_text(x: float) -> str:
    """A duration for a sentence: two decimals under 10 ms (0.25 ms, not 0.2), one above."""
    return f"{x:.2f} ms" if abs(x) < 10 else f"{x:.1f} ms"
