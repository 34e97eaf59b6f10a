"""Recall and false positives of `issues` on every real profile set under ../shared/data/real.

A set's planted problems are the `must_find` entries of its `expected.json` (gpu-h100), else the known truth its
README / PROVENANCE.md states (table KNOWN below; a set with neither has no planted problem). Per set:
  hit             a planted problem named by a finding of that check (subject containing `subject_contains`
                  when given) whose ranks include every planted rank, at its `min_severity` or above;
  false positive  a medium / high finding that matches no planted problem (the strict count: on sets with no
                  ground truth it counts whatever they really hold, so each one is listed for a human verdict).

Usage: python -m stepdoctor.evals.real_recall [REAL_DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..analysis.models import SEVERITY_ORDER

DEFAULT_DIR = Path("/work/shared/data/real")

# set (relative to REAL_DIR) -> planted problems stated by its README / PROVENANCE.md (not by a stepdoctor run)
KNOWN: dict[str, list[dict[str, Any]]] = {
    # README / scenario.json: SDPA forced to the math backend (a regression against clean); no expected.json
    "gpu-h100/attn_math/traces": [{"check": "affinity-api", "subject_contains": "scaled_dot_product_attention",
                                   "ranks": [0]}],
    # PROVENANCE.md: ResNet-50 with DataLoader num_workers=0 (input-bound)
    "kineto/kineto-tb-resnet50-nw0": [{"check": "slow-dataloader", "ranks": [0]}],
    # PROVENANCE.md: 4-rank pipeline-parallel job, 2 stages; its pipeline CSVs give stage 2 (ranks 2, 3)
    # 123 ms of computation per step against 14.7 ms on stage 1
    "ascend/mindinsight-fixtures/cluster_propose": [{"check": "stage-imbalance", "subject_contains": "stage 2",
                                                     "ranks": [2, 3]}],
}
# sets read by `issues` besides the gpu-h100 runs (each a profile folder a user would pass)
OTHER_SETS = (
    *(f"kineto/{n}" for n in (
        "kineto-docs-h100-sync-after", "kineto-docs-h100-sync-before", "kineto-tb-resnet50-nw0",
        "kineto-tb-resnet50-nw4", "param-linear-1gpu", "param-resnet-1gpu", "tracelens-b200-eager",
        "tracelens-bert-small-h100", "tracelens-bert-small-mi300", "tracelens-mi210-gpu-only",
        "tracelens-mi300-compile-triton", "tracelens-mi300-resnet-actckpt", "tracelens-mi300-xdit-sd35")),
    "ascend/mindinsight-fixtures/cluster_propose", "ascend/msinsight-pt-text-l0", "ascend/msinsight-pt-text-l1",
    "ascend/msinsight-pt-db-l0", "ascend/msinsight-pt-db-l1",
)


@dataclass
class SetScore:
    name: str
    planted: list[dict[str, Any]]
    hits: list[bool] = field(default_factory=list)
    false_positives: list[str] = field(default_factory=list)
    error: str | None = None


def _brief(f) -> str:
    impact = f"{f.impact_ms:.1f} ms" if f.impact_ms is not None else "no impact"
    return f"{f.check} [{f.severity}] ranks={f.ranks[:8]} subject={f.subject!r} ({impact})"


def _matches(p: dict[str, Any], f) -> bool:
    return (f.check == p["check"] and p.get("subject_contains", "") in (f.subject or "")
            and set(p.get("ranks", [])) <= set(f.ranks)
            and SEVERITY_ORDER[f.severity] <= SEVERITY_ORDER[p.get("min_severity", "low")])


def _planted(real: Path, name: str) -> list[dict[str, Any]]:
    if name in KNOWN:
        return KNOWN[name]
    exp = real / name / ".." / "expected.json"
    if name.startswith("gpu-h100/") and exp.resolve().is_file():
        d = json.loads(exp.resolve().read_text())
        return [{**{k: v for k, v in m.items() if k != "rank"}, **({"ranks": [m["rank"]]} if "rank" in m else {})}
                for m in d.get("must_find", [])]
    return []


def score_set(real: Path, name: str) -> SetScore:
    from ..tools import api

    sc = SetScore(name, _planted(real, name))
    try:
        rep = api.issues(str(real / name))
    except Exception as e:  # one unreadable set must not hide the others' numbers
        sc.error = f"{type(e).__name__}: {e}"
        return sc
    sc.hits = [any(_matches(p, f) for f in rep.findings) for p in sc.planted]
    sc.false_positives = [_brief(f) for f in rep.findings if SEVERITY_ORDER[f.severity] <= SEVERITY_ORDER["medium"]
                          and not any(_matches({**p, "min_severity": "low"}, f) for p in sc.planted)]
    return sc


def sets(real: Path) -> list[str]:
    h100 = sorted(f"gpu-h100/{p.parent.name}/traces" for p in (real / "gpu-h100").glob("*/traces") if p.is_dir())
    return h100 + [s for s in OTHER_SETS if (real / s).exists()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("real", nargs="?", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args(argv)
    scores = [score_set(a.real, s) for s in sets(a.real)]
    for sc in scores:
        hit = f"{sum(sc.hits)}/{len(sc.planted)}" if sc.planted else "-"
        print(f"{sc.name}: planted {len(sc.planted)}, hit {hit}, medium/high unplanted {len(sc.false_positives)}"
              + (f", ERROR {sc.error}" if sc.error else ""))
        for p, h in zip(sc.planted, sc.hits, strict=False):
            print(f"    {'hit ' if h else 'MISS'} {p}")
        for fp in sc.false_positives:
            print(f"    unplanted {fp}")
    planted = sum(len(s.planted) for s in scores)
    hits = sum(sum(s.hits) for s in scores)
    fps = sum(len(s.false_positives) for s in scores)
    print(f"recall {hits}/{planted}, medium/high unplanted {fps} on {len(scores)} sets")
    if a.json:
        a.json.write_text(json.dumps([asdict(s) for s in scores], indent=1))
    return 0 if hits == planted else 1


if __name__ == "__main__":
    sys.exit(main())
