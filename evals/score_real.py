"""Score stepdoctor against real profiles with one planted problem each (`expected.json`).

For every `*/expected.json` under DIR, `issues` (or `compare BASE TARGET`) runs through the Python API
on the paths it names (relative to the folder of expected.json), and every entry is scored as
/work/shared/data/real/README.md defines it:

  must_find      passes when some finding has that `check`, a `subject` containing `subject_contains`,
                 `rank` among its ranks and a severity at least `min_severity` (default low);
  must_not_find  fails when some finding matches: the same check (or, for "*", any check outside
                 `except_checks`), severity at least `min_severity` (default low), `subject_contains` /
                 `except_subject_contains`, `rank` among its ranks, and, with `allowed_ranks`, only a
                 finding naming a rank outside that list;
  compare        one entry per key: `delta_sign` (sign of the step delta), `largest_dimension` (the
                 breakdown_delta field that moved most in the direction of delta_sign), `top_change_contains`
                 (the top_changes entry with the largest |delta_ms|, kernel entries preferred),
                 `verdict_contains` (any one, case-insensitive), `env_change` (a changed variable's name).

One line per entry, then the plain "N passed, N failed" line CI reads.

Usage: python -m stepdoctor.evals.score_real [DIR] [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..analysis.models import SEVERITY_ORDER

DEFAULT_DIR = Path("/work/shared/data/real/gpu-h100")


@dataclass
class Entry:
    """One scored entry of one expected.json."""

    scenario: str
    kind: str  # must_find | must_not_find | compare
    spec: dict[str, Any]
    passed: bool
    detail: str


def _at_least(sev: str, floor: str | None) -> bool:
    # SEVERITY_ORDER ranks high=0 < medium=1 < low=2: a smaller number is more severe
    return SEVERITY_ORDER[sev] <= SEVERITY_ORDER[floor or "low"]


def _brief(f) -> str:
    impact = f"{f.impact_ms:.1f} ms" if f.impact_ms is not None else "no impact"
    return f"{f.check} [{f.severity}] ranks={f.ranks} subject={f.subject!r} ({impact}): {f.title}"


def _find_matches(spec: dict, f) -> bool:
    return (f.check == spec["check"]
            and spec.get("subject_contains", "") in (f.subject or "")
            and ("rank" not in spec or spec["rank"] in f.ranks)
            and _at_least(f.severity, spec.get("min_severity")))


def _not_find_matches(spec: dict, f) -> bool:
    check = spec["check"]
    if check == "*":
        if f.check in spec.get("except_checks", []):
            return False
    elif f.check != check:
        return False
    if not _at_least(f.severity, spec.get("min_severity")):
        return False
    subj = f.subject or ""
    if "subject_contains" in spec and spec["subject_contains"] not in subj:
        return False
    if "except_subject_contains" in spec and spec["except_subject_contains"] in subj:
        return False
    if "rank" in spec and spec["rank"] not in f.ranks:
        return False
    # with allowed_ranks only a finding that names a rank outside the list counts
    return "allowed_ranks" not in spec or any(r not in spec["allowed_ranks"] for r in f.ranks)


def score_findings(scenario: str, exp: dict, findings: list) -> list[Entry]:
    """must_find and must_not_find entries against one `issues` result."""
    out = []
    for spec in exp.get("must_find", []):
        hit = next((f for f in findings if _find_matches(spec, f)), None)
        same = [f for f in findings if f.check == spec["check"]]
        detail = (_brief(hit) if hit else
                  "not found" + (f"; closest: {_brief(same[0])}" if same else ""))
        out.append(Entry(scenario, "must_find", spec, hit is not None, detail))
    for spec in exp.get("must_not_find", []):
        hit = next((f for f in findings if _not_find_matches(spec, f)), None)
        out.append(Entry(scenario, "must_not_find", spec, hit is None, _brief(hit) if hit else "absent"))
    return out


def _largest_dimension(bd: dict[str, float | None], sign: int) -> str | None:
    moved = {k.removesuffix("_ms"): v * sign for k, v in bd.items() if v is not None}
    return max(moved, key=moved.__getitem__) if moved else None


def _top_change(changes: list) -> Any:
    kernels = [c for c in changes if c.kind == "kernel"]
    pool = kernels or changes
    return max(pool, key=lambda c: abs(c.delta_ms)) if pool else None


def score_compare(scenario: str, spec: dict, cmp) -> list[Entry]:
    """One entry per key of the `compare` object."""
    out = []
    sign = -1 if spec.get("delta_sign") == "-" else 1
    if "delta_sign" in spec:
        d = cmp.delta_ms
        ok = d is not None and d * sign > 0
        out.append(Entry(scenario, "compare", {"delta_sign": spec["delta_sign"]}, ok, f"delta_ms={d}"))
    if "largest_dimension" in spec:
        got = _largest_dimension(cmp.breakdown_delta.model_dump(), sign)
        out.append(Entry(scenario, "compare", {"largest_dimension": spec["largest_dimension"]},
                         got == spec["largest_dimension"],
                         f"largest={got} {cmp.breakdown_delta.model_dump()}"))
    if "top_change_contains" in spec:
        top = _top_change(cmp.top_changes)
        name = top.name if top else ""
        out.append(Entry(scenario, "compare", {"top_change_contains": spec["top_change_contains"]},
                         spec["top_change_contains"].lower() in name.lower(),
                         f"top change {top.kind}:{name} {top.delta_ms:+.2f} ms" if top else "no changes"))
    if "verdict_contains" in spec:
        want = spec["verdict_contains"]
        wants = [want] if isinstance(want, str) else list(want)
        ok = any(w.lower() in (cmp.verdict or "").lower() for w in wants)
        out.append(Entry(scenario, "compare", {"verdict_contains": want}, ok, f"verdict: {cmp.verdict}"))
    if "env_change" in spec:
        names = [e.name for e in cmp.env_changes]
        out.append(Entry(scenario, "compare", {"env_change": spec["env_change"]},
                         spec["env_change"] in names, f"env changes: {names}"))
    return out


def score_one(path: Path) -> list[Entry]:
    """Every entry of one expected.json; a crash fails each of its entries with the error."""
    from ..tools import api
    from ..tools.compare import compare_runs

    exp = json.loads(path.read_text())
    name = exp.get("scenario") or path.parent.name
    paths = [path.parent / p for p in exp.get("paths", [])]
    try:
        if exp.get("command") == "compare":
            cmp = compare_runs(paths[0], paths[1])
            out = score_compare(name, exp.get("compare") or {}, cmp)
            # a compare's own findings are the target's new findings
            return out + score_findings(name, exp, cmp.findings)
        return score_findings(name, exp, api.issues(paths[0]).findings)
    except Exception as e:  # the scorer reports a crash as failed entries, it does not stop
        err = f"{type(e).__name__}: {e}"
        specs = [("must_find", s) for s in exp.get("must_find", [])] + \
                [("must_not_find", s) for s in exp.get("must_not_find", [])] + \
                [("compare", {k: v}) for k, v in (exp.get("compare") or {}).items()]
        return [Entry(name, kind, s, False, err) for kind, s in specs]


def _spec_text(e: Entry) -> str:
    return json.dumps({k: v for k, v in e.spec.items() if k != "why"}, sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="stepdoctor.evals.score_real", description=__doc__.split("\n")[0])
    ap.add_argument("dir", nargs="?", default=str(DEFAULT_DIR))
    ap.add_argument("--json", dest="json_out", help="write the results here")
    args = ap.parse_args(argv)
    root = Path(args.dir)
    files = sorted(root.glob("*/expected.json"))
    if not files:
        print(f"no */expected.json under {root}", file=sys.stderr)
        return 2
    entries: list[Entry] = []
    for f in files:
        for e in score_one(f):
            entries.append(e)
            print(f"{'pass' if e.passed else 'FAIL'} {e.scenario} {e.kind} {_spec_text(e)}: {e.detail}",
                  flush=True)
    passed = sum(e.passed for e in entries)
    print(f"{passed} passed, {len(entries) - passed} failed")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps([asdict(e) for e in entries], indent=1))
    return 0 if passed == len(entries) else 1


if __name__ == "__main__":
    sys.exit(main())
