"""The critical path of a replayed step across ranks: from the rank whose step ends last, back through its
tail, the collective it waited for, the member that arrived last there, the compute that made that member
late, and so on to a step start. Every link is a parameter of the replay, so the links add up to the step.
"""

from __future__ import annotations

from .engine import Trace, own_clock, replay
from .models import CriticalPath, PathLink
from .whatif import Step


def critical_path(s: Step, path: str, error_pct: float) -> CriticalPath:
    si, p = s.si, s.p
    tr = Trace()
    ends = replay(si, p, trace=tr)
    assert tr.launch is not None and tr.end is not None
    r = si.rows
    rank = r["rank"].to_numpy()
    inst = r["inst"].to_numpy()
    sync = r["sync"].to_numpy(bool)
    i_end = int((ends - si.start).argmax())
    end_rank = int(si.ranks[i_end])
    links: list[tuple[str, int, int | None, int, int]] = []   # kind, rank, inst, start, dur (ns)
    links.append(("tail", end_rank, None, int(ends[i_end] - p.t[i_end]), int(p.t[i_end])))
    row, at_end = tr.end_from.get(end_rank, (-1, False))
    node = ("end" if at_end else "after", row, end_rank)
    while True:
        kind, j, rk = node
        if j < 0:
            break
        if kind == "after":   # a rank resumed after row j: its end if it waited for it, else its launch
            node = ("end", j, rk) if sync[j] else ("launch", j, rk)
            continue
        if kind == "end":
            i = int(inst[j])
            links.append(("transfer", int(rank[j]), i, int(tr.end[j] - p.x[j]), int(p.x[j])))
            last = tr.ready_from.get(j, j)
            node = ("start", last, int(rank[last]))
            continue
        if kind == "start":
            if p.q[j]:
                links.append(("latency", int(rank[j]), int(inst[j]), int(tr.end[j] - p.x[j] - p.q[j]), int(p.q[j])))
            if j in tr.lane_from:
                node = ("end", tr.lane_from[j], int(rank[j]))
                continue
            node = ("launch", j, int(rank[j]))
            continue
        # launch: the compute before it, then whatever the rank resumed from
        links.append(("compute", int(rank[j]), int(inst[j]), int(tr.launch[j] - p.c[j]), int(p.c[j])))
        prev = tr.launch_from.get(j, -1)
        if prev < 0:
            break
        node = ("after", prev, int(rank[j]))
    # the chain began at a rank's step start; if that is after the end rank's own start, the gap is the end of
    # the previous step on that rank (its tail there ran late), on the path too
    first = node[2]
    gap = int(si.start[list(si.ranks).index(first)] - si.start[i_end])
    if gap > 0:
        links.append(("late_start", first, None, int(si.start[i_end]), gap))
    links.reverse()
    step_ns = int(ends[i_end] - si.start[i_end])
    # link starts on each rank's own clock, from the earliest step start on the ranks' own clocks
    back = own_clock(si)
    origin = int((si.start - back(si.ranks)).min())
    out = [PathLink(kind=k, rank=rk, collective=i, start_ms=round((t0 - int(back([rk])[0]) - origin) / 1e6, 3),
                    ms=round(d / 1e6, 3),
                    share_pct=round(100 * d / step_ns, 2) if step_ns else 0.0)
           for k, rk, i, t0, d in links if d > 0]
    by_rank: dict[int, float] = {}
    by_kind: dict[str, float] = {}
    for lk in out:
        by_rank[lk.rank] = round(by_rank.get(lk.rank, 0.0) + lk.ms, 3)
        by_kind[lk.kind] = round(by_kind.get(lk.kind, 0.0) + lk.ms, 3)
    top = max(out, key=lambda lk: lk.ms) if out else None
    summary = (f"step {si.step} ({step_ns / 1e6:.2f} ms) ends on rank {end_rank}; the longest link is "
               f"{top.kind} on rank {top.rank} ({top.ms:.2f} ms, {top.share_pct:.1f}%)" if top else
               f"step {si.step}: no link")
    others = sorted(set(by_rank) - {end_rank})
    if others:
        summary += f"; the path runs through ranks {others} before it"
    return CriticalPath(path=path, step=si.step, step_ms=round(step_ns / 1e6, 3), replay_error_pct=error_pct,
                        end_rank=end_rank, links=out, by_rank=by_rank, by_kind=by_kind, summary=summary)
