"""env-var: environment variables set to values that cost performance, on every rank.

Rules are msprof-analyze's environment_variable_analysis (advisor 26.2.0), applied to
every rank (the advisor reads only the first metadata file). A variable whose value differs between
ranks is a finding too: a launcher that sets it on some nodes only is a common cause of one slow rank.
Severity follows what the value does, since no env-var finding has a measured impact: a value that slows every
launch (`*_LAUNCH_BLOCKING=1`) is high, as msprof-analyze's fixed priority has it; a non-default value someone
set (a forced HCCL algorithm, debug logging, a traffic class) and values that differ between ranks are medium;
a recommended setting left at its default (an unset cache size or allocator option) is low, because a profile
without the cost it would remove gives no reason to rank it above measured problems (the advisor rates these
high too; the finding's evidence says so).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from ..models import Finding
from ..thresholds import T
from .base import Check, CheckContext, register
from .evidence import Evidence


def _unset(v: str | None) -> bool:
    return v is None or v.strip() == ""


def _int_or_none(v: str | None) -> int | None:
    try:
        return int(str(v).strip())
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class EnvRule:
    name: str
    bad: Callable[[str | None], bool]
    recommended: str            # value to set, or "unset"
    why: str
    # "blocking": the value slows every launch (high); "set": someone set a non-default value (medium);
    # "default": a recommended setting left at its default (low: no cost of it is measured)
    kind: str = "set"
    # one of msprof-analyze's rules (fixed high priority, docs/rules.md §3), or stepdoctor's own
    advisor: bool = True

    @property
    def severity(self) -> str:
        return {"blocking": "high", "set": "medium", "default": "low"}[self.kind]


ENV_RULES: tuple[EnvRule, ...] = (
    EnvRule("ASCEND_LAUNCH_BLOCKING", lambda v: (v or "").strip() == "1", "0 (or unset)",
            "1 makes every operator launch synchronous: the host waits for each kernel", kind="blocking"),
    EnvRule("ASCEND_GLOBAL_LOG_LEVEL", lambda v: not _unset(v) and (v or "").strip() != "3", "3",
            "debug/info logging (0/1) slows host dispatch"),
    EnvRule("ACLNN_CACHE_LIMIT",
            lambda v: _unset(v) or (_int_or_none(v) or 0) < T.aclnn_cache_limit_min.value, "100000",
            "a small aclnn operator cache re-builds operators on the host", kind="default"),
    EnvRule("HOST_CACHE_CAPACITY", lambda v: _unset(v) or _int_or_none(v) == 0, "20",
            "without a shape cache, dynamic-shape ops are re-prepared on the host", kind="default"),
    EnvRule("PYTORCH_NPU_ALLOC_CONF", lambda v: "expandable_segments:true" not in (v or "").replace(" ", "").lower(),
            "expandable_segments:True", "fixed-size segments fragment device memory and force malloc/free",
            kind="default"),
    EnvRule("HCCL_ALGO", lambda v: not _unset(v), "unset",
            "a forced collective algorithm overrides HCCL's topology-aware choice"),
    EnvRule("HCCL_RDMA_TC", lambda v: not _unset(v), "unset unless the network team set it",
            "a non-default RoCE traffic class must match the switch QoS configuration"),
    EnvRule("HCCL_RDMA_SL", lambda v: not _unset(v), "unset unless the network team set it",
            "a non-default RDMA service level must match the PFC priority"),
    EnvRule("CUDA_LAUNCH_BLOCKING", lambda v: (v or "").strip() == "1", "0 (or unset)",
            "1 makes every CUDA launch synchronous", kind="blocking", advisor=False),
    EnvRule("PYTORCH_CUDA_ALLOC_CONF",
            lambda v: v is not None and "expandable_segments:true" not in v.replace(" ", "").lower(),
            "expandable_segments:True", "fixed-size segments fragment device memory", advisor=False),
)
RULES_BY_NAME = {r.name: r for r in ENV_RULES}
_NO_COST = {"default": " No cost of it is measured in this profile, so it ranks below measured problems."}


class EnvVarEvidence(Evidence):
    """A variable's values on the ranks it is flagged on; a rule's recommendation where the value breaks one
    (a variable that only differs between ranks says its values alone)."""

    primary = None   # the values weigh nothing: no rank is worse than another
    values_by_rank: dict[int, str | None]   # None: set empty / without a value on that rank
    recommended: str | None = None
    measured_impact: bool | None = None
    rule: str | None = None


@register
class EnvVarCheck(Check):
    id = "env-var"
    dimension = "free"
    title = "Environment variables that cost performance"
    fires_when = "an environment variable is set to a value that costs performance; `subject` = its name"
    thresholds = ("aclnn_cache_limit_min",)
    frameworks = ("pytorch", "mindspore")
    subject_keyed = True
    needs = ("env",)
    description = ("Audits the environment recorded with the profile (torch_npu profiler_metadata.json "
                   "ENV_VARIABLES) on every rank against msprof-analyze's rules, and flags variables whose "
                   "value differs between ranks.")
    evidence = EnvVarEvidence
    # a rule's finding, and a variable whose value differs between ranks (`n_values` values, `values` quoted)
    templates: ClassVar[dict[str, tuple[str, str]]] = {
        "rule": ("{name}={shown} on {where}", "{name} is {shown} on {where}: {why}. Recommended: {recommended}.{no_cost}"),
        "differs": ("{name} differs between ranks",
                    "{name} has {n_values} different values across ranks ({values}); ranks should run with one "
                    "environment."),
    }

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:
        env = ctx.sql("SELECT rank, name, value FROM env_vars")
        env = env[env["rank"].isin(ranks)]
        out: list[Finding] = []
        for name, grp in env.groupby("name", sort=True):
            by_rank = {int(r): (None if v is None or v != v else str(v)) for r, v in zip(grp["rank"], grp["value"],
                                                                                     strict=True)}
            rule = RULES_BY_NAME.get(str(name))
            bad_ranks = sorted(r for r, v in by_rank.items() if rule and rule.bad(v))
            if rule and bad_ranks:
                values = sorted({by_rank[r] or "" for r in bad_ranks})
                shown = ", ".join(repr(v) if v else "unset" for v in values)
                out.append(self.finding(
                    ctx, shape="rule", subject=str(name), ranks=bad_ranks, severity=rule.severity,
                    evidence=EnvVarEvidence(
                        values_by_rank={r: by_rank[r] for r in bad_ranks}, recommended=rule.recommended,
                        measured_impact=False,
                        rule=("msprof-analyze environment_variable_analysis (fixed high priority)"
                              if rule.advisor else "stepdoctor")),
                    words={"name": name, "shown": shown, "where": _ranks_text(bad_ranks, ranks), "why": rule.why,
                           "no_cost": _NO_COST.get(rule.kind, "")}))
            distinct = {v or "" for v in by_rank.values()}
            if len(distinct) > 1 and len(by_rank) > 1:
                out.append(self.finding(
                    ctx, shape="differs", subject=str(name), ranks=sorted(by_rank), severity="medium",
                    evidence=EnvVarEvidence(values_by_rank=dict(sorted(by_rank.items()))),
                    words={"name": name, "n_values": len(distinct),
                           "values": ", ".join(sorted(repr(v) for v in distinct))}))
        return out


def _ranks_text(bad: list[int], all_ranks: list[int]) -> str:
    if len(bad) == len(all_ranks) and len(all_ranks) > 1:
        return f"all {len(all_ranks)} ranks"
    return ("rank " if len(bad) == 1 else "ranks ") + ", ".join(map(str, bad))
