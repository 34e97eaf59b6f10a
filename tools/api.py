"""The tool catalog: typed functions (plain arguments in, pydantic models out).

The CLI, the MCP server and the HTML report all call these, so the same question gets the same
numbers and the same JSON everywhere. Each function takes a profile PATH (or an already opened
Profile) and is read-only and idempotent.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..analysis.build import open_profile
from ..analysis.checks.base import CheckContext, CheckRun, registry, run_checks
from ..analysis.checks.env_var import ENV_RULES, RULES_BY_NAME
from ..analysis.checks.slow_link import link_stats
from ..analysis.checks.slow_rank import DIMENSIONS as SLOW_DIMENSIONS
from ..analysis.checks.slow_rank import analyse as analyse_slow_ranks
from ..analysis.checks.slow_rank import arrival as slow_rank_arrival
from ..analysis.errors import ProfileError, UsageError
from ..analysis.metrics.breakdown import compute_breakdown, totals, vendor_mismatches
from ..analysis.metrics.stages import stage_of_ranks
from ..analysis.models import SEVERITY_ORDER, Finding
from ..analysis.store import IngestOptions, Profile
from ..analysis.text import RANK_OK_TEXT, span_text
from .models import (
    Breakdown,
    EnvAudit,
    EnvVariable,
    IssueReport,
    Kernel,
    Link,
    RankVerdict,
    SlowDimension,
    SlowLinks,
    SlowRank,
    SlowRanks,
    TopKernels,
)

ProfileRef = str | Path | Profile


def load(ref: ProfileRef, options: IngestOptions | None = None) -> Profile:
    """Open (ingesting once, then from cache) a profile PATH as `options` say; an opened Profile passes
    through."""
    if isinstance(ref, Profile):
        return ref
    return open_profile(ref, options)


def _fix_lookup(prof: Profile | None = None, notes: list[str] | None = None):
    """The knowledge base's fix lookup, or None when the knowledge base is absent from this build. With a
    profile, only the fixes that can apply to its job (`knowledge.loader.applies_here`: its backends, its
    recorded environment). A knowledge base that cannot be read gives no fixes, said once in `notes` (the
    answer's warnings), never silently."""
    try:
        from ..knowledge.loader import applies_here, fixes_for, load_fixes
    except ImportError:  # pragma: no cover - the knowledge package ships with stepdoctor
        return None
    facts: list = []   # the job's facts, read on the first lookup (most contexts never ask for a fix)
    failed: list = []  # the knowledge base failed to load (said once)

    def lookup(check: str, vendor: str | None, framework: str | None, subject: str | None,
               evidence: dict | None = None) -> list[str]:
        try:
            ids = fixes_for(check, vendor, framework, subject, evidence)
            if prof is None:
                return ids
            if not facts:
                facts.append(job_facts(prof))
            fixes = load_fixes()
            return [i for i in ids if applies_here(fixes[i], facts[0])]
        except Exception as e:  # a broken fix file must not hide findings, nor hide that fixes are missing
            if notes is not None and not failed:
                failed.append(True)
                notes.append("fixes not shown: the knowledge base could not be read (" + " ".join(str(e).split()) + ")")
            return []

    return lookup


def job_facts(prof: Profile):
    """The job's distributed backends and recorded environment, for the fixes that depend on them."""
    from ..analysis.metrics.metadata import decoded
    from ..knowledge.loader import JobFacts

    backends = {v["backend"].lower() for _r, v in decoded(prof.sql, "distributedInfo")
                if isinstance(v, dict) and isinstance(v.get("backend"), str) and v["backend"]}
    if prof.rows("SELECT count(*) FROM comm_ops WHERE name ILIKE '%nccl%'")[0][0]:
        backends.add("nccl")
    if prof.rows("SELECT count(*) FROM comm_ops WHERE name ILIKE 'hcom%' OR name ILIKE '%hccl%'")[0][0] \
            or (prof.info.vendor == "ascend" and len(prof.info.ranks) > 1):
        backends.add("hccl")
    single = (prof.info.world_size or 1) <= 1 and len(prof.info.ranks) == 1
    known = frozenset(backends) if backends or single else None
    rows = prof.rows("SELECT rank, name, value FROM env_vars")
    env: dict[str, set[str | None]] | None = None
    if rows:
        ranks = {int(r) for r, _, _ in rows}
        env = {}
        for _r, name, value in rows:   # torch_npu records an unset variable as ""
            env.setdefault(str(name), set()).add(None if value is None or not str(value).strip() else str(value))
        holders: dict[str, set[int]] = {}
        for r, name, _v in rows:
            holders.setdefault(str(name), set()).add(int(r))
        for name, vals in env.items():   # a variable some recorded rank lacks is unset there
            if len(holders[name]) < len(ranks):
                vals.add(None)
    return JobFacts(known, {k: frozenset(v) for k, v in env.items()} if env is not None else None)


def context(prof: Profile) -> CheckContext:
    ctx = CheckContext(prof)
    ctx.fixes_for = _fix_lookup(prof, ctx.notes)
    return ctx


def _known_ranks(prof: Profile, ranks: list[int]) -> None:
    missing = sorted(set(ranks) - set(prof.info.ranks))
    if missing:
        raise UsageError(f"{prof.path}: rank {missing[0]} not in profile; ranks are {span_text(prof.info.ranks)}")


def issues(ref: ProfileRef, *, min_severity: str = "low", checks: list[str] | None = None,
           ranks: list[int] | None = None, limit: int | None = None) -> IssueReport:
    """Every applicable check on every rank, findings sorted by severity then impact; the filters pick from
    that one report (`min_severity`, `checks`, `ranks`: the findings naming one of them), so a finding keeps
    its place in it as its number (`IssueReport.numbers`) whichever filter listed it."""
    if checks:
        known = sorted(registry())
        bad = [c for c in checks if c not in known]
        if bad:
            raise UsageError(f"unknown check {bad[0]!r}; the checks are {', '.join(known)}")
    prof = load(ref)
    if ranks is not None:
        _known_ranks(prof, ranks)
    run = checks_run(prof)
    cut = SEVERITY_ORDER[min_severity]
    wanted, asked = set(checks or ()), set(ranks or ())
    picked = [(i, f) for i, f in enumerate(run.findings, 1)
              if SEVERITY_ORDER[f.severity] <= cut and (not wanted or f.check in wanted)
              and (ranks is None or asked & set(f.ranks))]
    total = len(picked)
    shown = picked if limit is None else picked[:limit]
    return IssueReport(profile=prof.info, findings=[f for _, f in shown], not_applicable=run.not_applicable,
                       warnings=[*prof.warnings, *run.warnings, *_elsewhere(run, ranks, wanted, cut, picked)],
                       total=total, truncated=len(shown) < total, numbers=[i for i, _ in shown])


def checks_run(prof: Profile, checks: list[str] | None = None) -> CheckRun:
    """The checks' run over every rank (`checks`: only these), once per profile opened: a profile's database
    never changes once open, so a repeated question (an assistant asking list_issues again) is a lookup.
    Callers must not mutate it."""
    key = f"api.checks_run:{sorted(set(checks)) if checks else None}"
    return prof.derived(key, lambda: run_checks(context(prof), only=checks))


def _elsewhere(run: CheckRun, ranks: list[int] | None, wanted: set[str], cut: int, picked: list) -> list[str]:
    """With a rank filter: the checks that fired on other ranks only, said in one line each, so "no finding on
    rank 0" is never read as "the job is fine" (a cross-rank check names the rank that holds the others back)."""
    if not ranks:
        return []
    mine = {f.check for _, f in picked}
    other: dict[str, set[int]] = {}
    for f in run.findings:
        if SEVERITY_ORDER[f.severity] <= cut and (not wanted or f.check in wanted) and f.check not in mine \
                and not set(f.ranks) & set(ranks):
            other.setdefault(f.check, set()).update(f.ranks)
    return [f"{c} fired on rank{'s' if len(rs) > 1 else ''} {span_text(sorted(rs))}, outside the ranks asked "
            f"({span_text(sorted(ranks))})" for c, rs in sorted(other.items())]


def breakdown(ref: ProfileRef, *, ranks: list[int] | None = None, steps: list[int] | None = None) -> Breakdown:
    """Per (rank, step) step/compute/communication/free times from the device timeline."""
    prof = load(ref)
    if ranks is not None:
        _known_ranks(prof, ranks)
    if steps is not None and (bad := sorted(set(steps) - set(prof.info.steps))):
        raise ProfileError(prof.path, f"step {bad[0]} not in profile; steps are {span_text(prof.info.steps)}")
    rows = compute_breakdown(prof, ranks=ranks, steps=steps)
    warnings = list(prof.warnings) + vendor_mismatches(prof, rows)
    if not rows:
        warnings.append("no ProfilerStep annotations: no per-step breakdown")
    elif all(r.compute_ms is None for r in rows):
        warnings.append("no device events: compute / communication / free unknown")
    return Breakdown(profile=prof.info, rows=rows, totals=totals(rows), warnings=warnings, total=len(rows))


def slow_ranks(ref: ProfileRef) -> SlowRanks:
    """Ranks slower than their peers per dimension, with steps and causes (once per profile opened; callers
    must not mutate it)."""
    prof = load(ref)
    return prof.derived("api.slow_ranks", lambda: _slow_ranks(prof))


def _slow_ranks(prof: Profile) -> SlowRanks:
    ctx = context(prof)
    stats = analyse_slow_ranks(ctx)

    def conv(e) -> SlowRank:
        return SlowRank(rank=e.rank, steps=e.steps, value_ms=e.value_ms, excess_ms=e.excess_ms,
                        excess_pct=e.excess_pct, cause=e.cause, median_ms=e.median_ms, impact_ms=e.impact_ms)

    dims = [SlowDimension(name=name, measures=SLOW_DIMENSIONS[name], median_ms=s.median_ms, spread_pct=s.spread_pct,
                          slow=[conv(e) for e in s.slow],
                          late_arrivals=[conv(e) for e in s.fast] if name == "communication" else [])
            for name, s in stats.items()]
    run = checks_run(prof, ["slow-rank", "stage-imbalance", "collective-stall"])
    warnings = list(prof.warnings)
    if len(prof.info.ranks) < 2:
        warnings.append("one rank only: nothing to compare it with")
    return SlowRanks(profile=prof.info, dimensions=dims, findings=run.findings, warnings=warnings,
                     ranks=_rank_verdicts(ctx, run.findings), stragglers=slow_rank_arrival(ctx).stragglers,
                     total=sum(len(d.slow) + len(d.late_arrivals) for d in dims))


def _rank_verdicts(ctx: CheckContext, findings: list[Finding]) -> list[RankVerdict]:
    """Every rank with its verdict: straggler (arrives last) > slow (a dimension) > heavy pipeline stage >
    waits for a straggler > ok, and the cause the finding gives."""
    arr = slow_rank_arrival(ctx)
    st = stage_of_ranks(ctx)
    stages = st[0] if st else {}
    named: dict[int, Finding] = {}
    held: dict[int, Finding] = {}   # ranks held inside collectives none of them is late for (collective-stall)
    for f in findings:
        for r in f.ranks:
            (held if f.check == "collective-stall" else named).setdefault(r, f)
    out = []
    for r in ctx.all_ranks:
        ra = arr.ranks.get(r)
        f = named.get(r)
        common = {"rank": r, "stage": stages[r] + 1 if r in stages else None,
                  "matched_collectives": ra.matched if ra else None, "arrived_last": ra.last if ra else None,
                  "wait_caused_per_step_ms": ra.caused_per_step_ms if ra else None}
        if f is not None:
            verdict = ("straggler" if r in arr.stragglers else
                       "heavy-stage" if f.check == "stage-imbalance" else "slow")
            out.append(RankVerdict(verdict=verdict, cause=f.message, finding=f.title, **common))
        elif r in held:
            g = held[r]
            out.append(RankVerdict(verdict="waits", waits_for=list(g.evidence.get("missing_ranks", [])),
                                   cause=g.message, finding=g.title, **common))
        elif arr.stragglers:
            waits = [s for s in arr.stragglers if s != r]
            out.append(RankVerdict(verdict="waits", waits_for=waits, cause=(
                f"it waits at collectives for rank(s) {', '.join(map(str, waits))}, which arrive last"), **common))
        else:
            out.append(RankVerdict(verdict="ok", cause=RANK_OK_TEXT, **common))
    return out


def slow_links(ref: ProfileRef, *, limit: int = 20) -> SlowLinks:
    """Links with their bandwidth against the median of their transport, slowest first."""
    prof = load(ref)
    ctx = context(prof)
    stats = link_stats(ctx)
    run = run_checks(ctx, only=["slow-link"])
    warnings = list(prof.warnings) + [f"slow-link: {w}" for k, w in run.not_applicable.items()]
    links = [Link(src=s.src, dst=s.dst, transport=s.transport, bandwidth_gbps=s.bandwidth_gbps,
                  median_gbps=s.median_gbps, size_mb=s.size_mb, time_ms=s.time_ms, steps=s.steps) for s in stats]
    return SlowLinks(profile=prof.info, links=links[:limit], findings=run.findings, warnings=warnings,
                     total=len(links), truncated=len(links) > limit)


def top_kernels(ref: ProfileRef, *, rank: int | None = None, step: int | None = None, top: int = 20,
                by: str = "name") -> TopKernels:
    """Top device ops by total time, with count, mean/max, share and shapes."""
    if by not in ("name", "type"):
        raise UsageError(f"--by must be name or type, not {by!r}")
    if top < 1:
        raise UsageError(f"--top must be at least 1, not {top}")
    prof = load(ref)
    if rank is not None:
        _known_ranks(prof, [rank])
    if step is not None and step not in prof.info.steps:
        raise ProfileError(prof.path, f"step {step} not in profile; steps are {span_text(prof.info.steps)}")
    key = "name" if by == "name" else "coalesce(op_type, name)"
    where, params = ["TRUE"], []
    if rank is not None:
        where.append("d.rank = ?")
        params.append(rank)
    if step is not None:
        where.append("d.step = ?")
        params.append(step)
    else:
        where.append("(d.step IS NULL OR d.step IN (SELECT step FROM steps WHERE kept))")
    w = " AND ".join(where)
    df = prof.sql(
        f"""WITH d AS (SELECT *, {key} AS k FROM device_work d WHERE {w})
        SELECT k AS name, any_value(op_type) AS op_type, mode(task_type) AS core_type, mode(category) AS category,
               count(*) AS count, sum(dur_ns) / 1e6 AS total_ms, avg(dur_ns) / 1e6 AS mean_ms,
               max(dur_ns) / 1e6 AS max_ms, list(DISTINCT rank ORDER BY rank) AS ranks,
               (SELECT list(s ORDER BY c DESC)[1:3] FROM (SELECT input_shapes AS s, count(*) AS c FROM d d2
                  WHERE d2.k = d.k AND input_shapes IS NOT NULL GROUP BY 1)) AS shapes
        FROM d GROUP BY k ORDER BY total_ms DESC, name""", params)
    grand = float(df["total_ms"].sum()) if not df.empty else 0.0
    n_ranks = max(len(df.explode("ranks")["ranks"].dropna().unique()), 1) if not df.empty else 1
    n_steps = 1 if step is not None else max(len(prof.info.steps), 1)
    rows = prof.sql("SELECT avg(end_ns - start_ns) / 1e6 AS m FROM steps WHERE kept")
    mean_step = float(rows.at[0, "m"]) if not rows.empty and rows.at[0, "m"] == rows.at[0, "m"] else None
    ks = []
    for r in df.head(top).itertuples(index=False):
        per_step = r.total_ms / n_steps / (1 if rank is not None else n_ranks)
        ks.append(Kernel(name=str(r.name), op_type=r.op_type if isinstance(r.op_type, str) else None,
                         core_type=r.core_type if isinstance(r.core_type, str) else None, count=int(r.count),
                         total_ms=round(float(r.total_ms), 4), mean_ms=round(float(r.mean_ms), 4),
                         max_ms=round(float(r.max_ms), 4),
                         share_pct=round(100.0 * r.total_ms / grand, 2) if grand else 0.0,
                         ranks=[int(x) for x in r.ranks], input_shapes=_shape_list(r.shapes),
                         category=r.category if isinstance(r.category, str) else None,
                         step_share_pct=round(100.0 * per_step / mean_step, 2) if mean_step else None))
    return TopKernels(profile=prof.info, kernels=ks, total=len(df), truncated=len(df) > top, by=by,
                      warnings=list(prof.warnings))


def _shape_list(v) -> list[str]:
    """DuckDB gives a list, a numpy array, or NA when a group has no shapes (hcom ops, most GPU kernels)."""
    if v is None or isinstance(v, float) or v is pd.NA:
        return []
    try:
        return [str(x) for x in v if x is not None and x is not pd.NA]
    except TypeError:
        return []


def env_audit(ref: ProfileRef, status: str | None = None) -> EnvAudit:
    """Every recorded environment variable on every rank: ok / bad / unknown, with the recommendation
    (`status`: only the variables of that status)."""
    prof = load(ref)
    ctx = context(prof)
    env = prof.sql("SELECT rank, name, value FROM env_vars ORDER BY name, rank")
    run = run_checks(ctx, only=["env-var"])
    by_subject: dict[str, Finding] = {}
    for f in run.findings:
        by_subject.setdefault(f.subject, f)
    variables = []
    for name, g in env.groupby("name", sort=True):
        vals = {int(r): (None if v is None or v != v else str(v)) for r, v in zip(g["rank"], g["value"], strict=True)}
        rule = RULES_BY_NAME.get(str(name))
        f = by_subject.get(str(name))
        judged = "bad" if f is not None else ("ok" if rule is not None else "unknown")
        variables.append(EnvVariable(name=str(name), values_by_rank=vals, status=judged,
                                     recommended=rule.recommended if rule else None, finding=f))
    warnings = list(prof.warnings)
    if env.empty:
        warnings.append("no environment recorded in this profile (Kineto traces do not record it; torch_npu "
                        "writes profiler_metadata.json)")
    known = {r.name for r in ENV_RULES}
    missing = sorted(known & {"ASCEND_LAUNCH_BLOCKING", "ACLNN_CACHE_LIMIT"} - set(env["name"]))
    if not env.empty and missing:
        warnings.append(f"not recorded: {', '.join(missing)}")
    if status is not None:
        variables = [v for v in variables if v.status == status]
    return EnvAudit(profile=prof.info, variables=variables, warnings=warnings, total=len(variables))


def what_if(ref: ProfileRef, ranks_at_median: list[int] | None = None, stages_at_median: list[int] | None = None,
            comm_at_median: bool = False, no_stalls: list[int] | None = None, ops: dict[str, float] | None = None):
    """The cross-rank replay's answers (`WhatIf`): the null replay per step, the scenarios asked (or the
    ideal job), the slowdown S split by rank, stage, op type and step, and a verdict."""
    from ..analysis.replay import what_if as replay_what_if

    prof = load(ref)
    st = stage_of_ranks(context(prof))
    # stages are numbered from 1, as stage-imbalance names them ("stage 2 of 2")
    res = replay_what_if(prof, ranks_at_median=ranks_at_median, stages_at_median=stages_at_median,
                         comm_at_median=comm_at_median, stages={r: s + 1 for r, s in st[0].items()} if st else None,
                         no_stalls=no_stalls, ops=ops)
    res.warnings = list(prof.warnings) + res.warnings
    return res


def critical_path(ref: ProfileRef, step: int | None = None):
    """The chain of work across ranks that sets one step's end (`CriticalPath`)."""
    from ..analysis.replay import critical_path_of

    prof = load(ref)
    res = critical_path_of(prof, step)
    res.warnings = list(prof.warnings)
    return res
