"""Words and numbers in sentences, shared by the checks, compare, the replay, the hang analysis, the tools and
the server: one way to write a duration, a list of ranks or steps, and one name for each part of a rank's own
work (`metrics.collectives.PARTS`)."""

from __future__ import annotations

# what each part of a compute window is, in a sentence ("... more than the other ranks on data loading")
PART_TEXT = {"compute_kernels": "compute kernels", "data_loading": "data loading", "host_ops": "host work",
             "untraced": "nothing traced (sleep, GC, I/O or an untraced thread)"}


# why a rank has no slow-rank verdict, in the rank table of every view
RANK_OK_TEXT = "no dimension beyond its peers and no late arrival"


def ms_text(x: float) -> str:
    """A duration for a sentence: two decimals under 10 ms (0.25 ms, not 0.2), one above."""
    return f"{x:.2f} ms" if abs(x) < 10 else f"{x:.1f} ms"


MAX_LISTED = 16   # a list of ranks names this many, then says how many more


def span_text(ranks: list[int] | set[int]) -> str:
    """'0-3' for 3 or more consecutive ranks, else '0, 2, 5', cut after MAX_LISTED ('... and 40 more')."""
    rs = sorted({int(r) for r in ranks})
    if len(rs) > 2 and rs == list(range(rs[0], rs[-1] + 1)):
        return f"{rs[0]}-{rs[-1]}"
    more = f" and {len(rs) - MAX_LISTED} more" if len(rs) > MAX_LISTED else ""
    return ", ".join(map(str, rs[:MAX_LISTED])) + more


def ranks_text(ranks: list[int] | set[int]) -> str:
    """'rank 1', 'ranks 0-3', 'ranks 0, 2, 5'; 'no rank' for none."""
    rs = sorted({int(r) for r in ranks})
    if not rs:
        return "no rank"
    return f"rank {rs[0]}" if len(rs) == 1 else f"ranks {span_text(rs)}"


def steps_text(steps: list[int] | set[int]) -> str:
    """'step 5', 'steps 4, 5, 6'; what a finding says when no step is recorded."""
    ss = sorted({int(s) for s in steps})
    if not ss:
        return "the profile (no steps recorded)"
    return ("step " if len(ss) == 1 else "steps ") + ", ".join(map(str, ss))
