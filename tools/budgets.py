"""What a tool's answer is cut to for a model's context: its `limit` (top-k rows), and evidence maps keyed by
rank trimmed to the ranks that weigh most. A catalog row names its budget; the MCP server applies it, the
CLI prints the whole answer. A budget returns the answer's own model with `total` / `truncated` set."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:   # the catalog reads this module to build the CLI's parser: no models imported for it
    from ..analysis.checks.evidence import Evidence
    from ..analysis.models import Finding
    from . import arguments as g
    from . import models as m

TRIMMED_KEY = "trimmed"   # the evidence key that says what an answer cut, and where to get it

# A finding's evidence holds a map keyed by rank for every rank the check judged: the CLI's JSON keeps them
# all, an MCP answer the EVIDENCE_RANKS that weigh most (on 1,024 ranks list_issues returned 2.1 MB for 20
# findings; trimmed, ~0.1 MB), explain(finding=N) EXPLAIN_RANKS.
EVIDENCE_RANKS = 8
EXPLAIN_RANKS = 32


def issues(rep: m.IssueReport, args: g.IssuesArgs) -> m.IssueReport:
    """The first `limit` findings (numbered as the whole report numbers them), evidence trimmed."""
    shown = rep.numbered()[: args.limit]
    return rep.model_copy(update={
        "findings": [trim_evidence(f, EVIDENCE_RANKS) for _, f in shown],
        "truncated": rep.truncated or len(shown) < len(rep.findings), "numbers": [i for i, _ in shown]})


def breakdown(b: m.Breakdown, args: g.BreakdownArgs) -> m.Breakdown:
    from ..analysis.metrics.breakdown import standing_out  # numpy: not for a CLI that never budgets

    totals, warnings = b.totals, b.warnings
    if len(totals) > args.limit:  # a large cluster: the per-rank totals, too, stay within the limit
        totals = standing_out(totals, args.limit)
        warnings = [*warnings, f"totals: the {args.limit} of {len(b.totals)} ranks that stand out (largest "
                    "distance from the median in step, compute, exposed communication or free time); pass "
                    "ranks=[...] for others"]
    return b.model_copy(update={"rows": b.rows[: args.limit], "totals": totals, "warnings": warnings,
                                "total": len(b.rows), "truncated": len(b.rows) > args.limit})


def slow_ranks(s: m.SlowRanks, args: g.SlowRanksArgs) -> m.SlowRanks:
    n = args.limit
    cut = any(len(d.slow) > n or len(d.late_arrivals) > n for d in s.dimensions)
    dims = [d.model_copy(update={"slow": d.slow[:n], "late_arrivals": d.late_arrivals[:n]}) for d in s.dimensions]
    return s.model_copy(update={"dimensions": dims, "truncated": cut})


def env_audit(e: m.EnvAudit, args: g.EnvAuditArgs) -> m.EnvAudit:
    """Bad variables first, then unknown, then ok; at most `limit`; a large cluster's values per rank cut to
    the ranks of the rarest values."""
    order = {"bad": 0, "unknown": 1, "ok": 2}
    vs = sorted(e.variables, key=lambda v: (order[v.status], v.name))
    shown, warnings = vs[: args.limit], e.warnings
    if any(len(v.values_by_rank) > EVIDENCE_RANKS for v in shown):
        shown = [trimmed_variable(v) for v in shown]
        warnings = [*warnings, f"values_by_rank: at most {EVIDENCE_RANKS} ranks per variable, those of its "
                    "rarest values; `stepdoctor env --format json` lists every rank"]
    return e.model_copy(update={"variables": shown, "warnings": warnings, "total": len(vs),
                                "truncated": len(vs) > args.limit})


def explain(exp: m.Explanation, args: g.ExplainArgs) -> m.Explanation:
    if exp.finding is None:
        return exp
    return exp.model_copy(update={"finding": trim_evidence(exp.finding, EXPLAIN_RANKS)})


def trim_evidence(f: Finding, keep: int, model: type[Evidence] | None = None) -> Finding:
    """`f` with each evidence map its check's evidence model types as keyed by rank (`Evidence.rank_maps`;
    `model` defaults to the registered check's) cut, where it holds more than `keep` ranks, to the `keep` that
    weigh most (the entry's `weighs_by` value, or the value itself), or for text values to the ranks of the
    rarest values first, so a rank that differs stays; ties in rank order. What was cut is said in
    evidence["trimmed"]."""
    from ..analysis.checks.evidence import weight_of

    if model is None:
        from ..analysis.checks.base import registry

        cls = registry().get(f.check)
        model = cls.evidence if cls is not None else None
    evidence = dict(f.evidence)
    trimmed: dict[str, str] = {}
    for key, entries in (model.rank_maps() if model is not None else {}).items():
        value = f.evidence.get(key)
        if not isinstance(value, dict) or len(value) <= keep:
            continue
        if not entries and all(isinstance(v, str | None) for v in value.values()):
            chosen = _rarest_first(value, keep)
            how = "the ranks of the rarest values"
        else:
            chosen = sorted(value, key=lambda r: (-abs(weight_of(value[r], entries)), int(r)))[:keep]
            how = "the largest"
        evidence[key] = {r: value[r] for r in sorted(chosen, key=int)}
        trimmed[key] = (f"{keep} of {len(value)} ranks shown ({how}); `stepdoctor issues --format json` "
                        "lists every rank")
    if not trimmed:
        return f
    evidence[TRIMMED_KEY] = trimmed
    return f.model_copy(update={"evidence": evidence})


def _rarest_first(values: dict[Any, Any], keep: int) -> list[Any]:
    """At most `keep` keys of a rank -> value map: the ranks of the rarest values first, then rank order."""
    freq: dict[Any, int] = {}
    for v in values.values():
        freq[v] = freq.get(v, 0) + 1
    return sorted(values, key=lambda r: (freq[values[r]], int(r)))[:keep]


def trimmed_variable(v: m.EnvVariable) -> m.EnvVariable:
    keep = sorted(_rarest_first(v.values_by_rank, EVIDENCE_RANKS), key=int)
    return v.model_copy(update={
        "values_by_rank": {r: v.values_by_rank[r] for r in keep},
        "finding": None if v.finding is None else trim_evidence(v.finding, EVIDENCE_RANKS),
    })
