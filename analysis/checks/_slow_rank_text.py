"""slow-rank's sentences: durations, step lists, the host ops of a cause and what a late rank did before arriving."""

from __future__ import annotations

from ..metrics import collectives
from ..text import PART_TEXT, ms_text

# Below this, an excess before a late arrival (ms) or a host op's time is not worth a number in a sentence:
# "0.0 ms more" or "aten::embedding 0.0 ms" reads as a cause and is none.
MIN_SHOWN_MS = 0.05


def host_ops_text(ops: list[dict]) -> str:
    """"name 1.25 ms, name 0.30 ms" for the host ops (dicts with name, ms) of at least MIN_SHOWN_MS."""
    shown = [h for h in ops if h.get("ms", 0.0) >= MIN_SHOWN_MS]
    return ", ".join(f"{h['name']} {ms_text(h['ms'])}" for h in shown)


def arrival_text(ra: collectives.RankArrival) -> str:
    """What the late rank did before its late arrivals, against the other ranks ("" without a record)."""
    b = ra.before
    if not b:
        return ""
    c = b["cause"]
    excess = b["excess_ms"][c]
    if excess < MIN_SHOWN_MS:
        return ("the traced work before its late arrivals matches the other ranks' (no part differs by "
                f"{ms_text(MIN_SHOWN_MS)} or more), so the delay is not in this profile's steps")
    text = (f"before each late arrival it spends {ms_text(excess)} more than the other ranks on "
            f"{PART_TEXT[c]} ({ms_text(b['rank_ms'][c])} against a median of {ms_text(b['peer_median_ms'][c])})")
    if ra.steps and ra.last > len(ra.steps):
        # several late arrivals per step: the per-step sum is what compares with the step time
        text += (f", {ms_text(excess * ra.last / len(ra.steps))} per step over its {ra.last} late arrivals in "
                 f"{len(ra.steps)} steps")
    if c == "host_ops" and (ops := host_ops_text(b["top_host_ops"])):
        text += "; its host ops: " + ops
    return text


def slow_steps_text(steps: list[int]) -> str:
    """"step 2", "steps 1 and 2", "steps 1-4" or "steps 1, 3 and 7": the steps a finding's numbers hold for."""
    if len(steps) == 1:
        return f"step {steps[0]}"
    if len(steps) > 2 and steps == list(range(steps[0], steps[-1] + 1)):
        return f"steps {steps[0]}-{steps[-1]}"
    return f"steps {', '.join(map(str, steps[:-1]))} and {steps[-1]}"


def per_step_text(slow_steps: list[int], impact_ms: float, steps: int) -> str:
    """How the finding's impact (ms per step over all the rank's `steps`) follows from the excess, when the
    rank is slow in only some of its steps (250 ms in 1 of 2 steps: 125 ms per step)."""
    if steps <= len(slow_steps):
        return ""
    return (f" (slow in {len(slow_steps)} of its {steps} steps: {impact_ms:.2f} ms per step over all of them, "
            "the impact)")


_PART_TEXT = {"untraced": "with nothing recorded on its host (a sleep, blocking I/O, GC or untraced work)",
              "data_loading": "in its data loader", "host_ops": "in host ops", "compute_kernels": "in compute kernels"}


def replay_cause_text(before: dict, cpu: bool = False) -> str:
    """What the late rank did in the window where it lost the time, against its peers (compare_parts)."""
    part = before["cause"]
    ex = before["excess_ms"][part]
    where = "after its last collective" if before.get("window") == "tail" else "before one of its collectives"
    what = "in host ops (its compute: no device)" if part == "host_ops" and cpu else _PART_TEXT.get(part, part)
    top = [h for h in before.get("top_host_ops", []) if h.get("ms", 0) > 0][:2]
    ops = f" ({host_ops_text(top)})" if top and part in ("host_ops", "data_loading") else ""
    return (f"{where.capitalize()} it spends {ex:.2f} ms more than its peers ({before['window_ms']:.2f} against "
            f"{before['peer_window_ms']:.2f} ms) {what}{ops}")
