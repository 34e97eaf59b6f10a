"""The check framework: one module per check, one registry, one context.

A check module defines a subclass of `Check`; the class is the only record of the check (id, title, the
contract's "fires when" line, dimension, vendors, needs, thresholds by name, frameworks) and `run(ctx)`
returns findings. The registry imports every module in this package once and is the check catalog: the
knowledge base, the MCP resources, compare and the generated docs read it. `run_checks` runs each
applicable check and records "not applicable" (with the missing capabilities) for the others, so a missing
optional column turns a check off with a warning and never into a guess.

Checks ask for fixes only through the context's `fixes_for` hook: the knowledge base is data about checks,
so the core never imports it.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, Concatenate, ParamSpec, TypeVar

import pandas as pd

from ..metrics.breakdown import BreakdownRow
from ..models import Finding, Severity, severity_from_impact, sort_findings
from ..store import Profile, is_damaged_cache
from ..text import ranks_text, steps_text
from ..thresholds import T
from .evidence import Evidence
from .view import ProfileView

P = ParamSpec("P")
R = TypeVar("R")

# (check id, vendor, framework, subject, evidence) -> fix ids: the knowledge base chooses (knowledge.loader)
FixLookup = Callable[[str, str | None, str | None, str | None, dict | None], list[str]]


@dataclass
class CheckContext:
    """What a check sees: the profile, its named views, and helpers for impact and severity."""

    profile: Profile
    fixes_for: FixLookup | None = None
    ranks: list[int] | None = None   # restrict to these ranks (None = all)
    notes: list[str] = field(default_factory=list)
    _once: dict[tuple, Any] = field(default_factory=dict, repr=False)

    @cached_property
    def view(self) -> ProfileView:
        """The profile's named views on this context's ranks (analysis/checks/view.py)."""
        return ProfileView(self.profile, self.ranks)

    def once(self, compute: Callable[Concatenate[CheckContext, P], R], *args: P.args) -> R:
        """`compute(self, *args)`, computed once per context: derived data a check shares with a tool view or
        another check (e.g. slow-rank's statistics), keyed by the function and its arguments."""
        key = (compute, args)
        if key not in self._once:
            self._once[key] = compute(self, *args)
        return self._once[key]

    @property
    def breakdown(self) -> list[BreakdownRow]:
        return self.view.breakdown

    @property
    def all_ranks(self) -> list[int]:
        return self.view.all_ranks

    @cached_property
    def rank_info(self) -> pd.DataFrame:
        return self.profile.sql("SELECT * FROM ranks ORDER BY rank")

    @cached_property
    def _vendor_framework(self) -> dict[int | None, tuple[str | None, str | None]]:
        """rank (None = the whole profile) -> (vendor, framework). Every check asks this per rank and per
        finding, so it is worked out once here instead of filtering `rank_info` each time."""
        df = self.rank_info

        def pick(vendors: set[str], frameworks: set[str]) -> tuple[str | None, str | None]:
            vs, fs = sorted(vendors), sorted(frameworks)
            v = vs[0] if len(vs) == 1 else ("ascend" if "ascend" in vs else (vs[0] if vs else None))
            return v, (fs[0] if fs else None)

        out: dict[int | None, tuple[str | None, str | None]] = {}
        by_rank: dict[int, tuple[set[str], set[str]]] = {}
        for rank, v, f in zip(df["rank"], df["vendor"], df["framework"], strict=True):
            vs, fs = by_rank.setdefault(int(rank), (set(), set()))
            if not pd.isna(v):
                vs.add(v)
            if not pd.isna(f):
                fs.add(f)
        for rank, (vs, fs) in by_rank.items():
            out[rank] = pick(vs, fs)
        out[None] = pick({v for vs, _ in by_rank.values() for v in vs},
                         {f for _, fs in by_rank.values() for f in fs})
        return out

    def vendor(self, rank: int | None = None) -> str | None:
        vf = self._vendor_framework.get(rank)
        return vf[0] if vf is not None else None

    def framework(self, rank: int | None = None) -> str | None:
        vf = self._vendor_framework.get(rank)
        return vf[1] if vf is not None else None

    @cached_property
    def _caps(self) -> dict[int, set[str]]:
        out: dict[int, set[str]] = {r: set() for r in self.all_ranks}
        for rank, name in self.profile.rows("SELECT rank, name FROM capabilities"):
            if rank in out:
                out[rank].add(name)
        return out

    def caps(self, rank: int) -> set[str]:
        return self._caps.get(rank, set())

    def ranks_with(self, needs: Iterable[str]) -> list[int]:
        need = set(needs)
        return [r for r in self.all_ranks if need <= self.caps(r)]

    @cached_property
    def _mean_step(self) -> dict[int | None, float | None]:
        """rank (None = all ranks) -> mean step ms over the breakdown rows, summed in row order."""
        xs: dict[int | None, list[float]] = {None: []}
        for r in self.breakdown:
            if r.step_ms is not None:
                xs[None].append(r.step_ms)
                xs.setdefault(r.rank, []).append(r.step_ms)
        return {k: (sum(v) / len(v) if v else None) for k, v in xs.items()}

    def mean_step_ms(self, rank: int | None = None) -> float | None:
        return self._mean_step.get(rank)

    def steps_of(self, rank: int | None = None) -> list[int]:
        return sorted({r.step for r in self.breakdown if r.step is not None and (rank is None or r.rank == rank)})

    def sql(self, query: str, params: list | None = None) -> pd.DataFrame:
        return self.profile.sql(query, params)

    def impact(self, impact_ms: float | None, rank: int | None = None) -> tuple[float | None, Severity]:
        """(impact_pct, severity) from per-step ms lost, against the mean step of `rank` (or all)."""
        step = self.mean_step_ms(rank) or self.mean_step_ms()
        if impact_ms is None or not step:
            return None, "low"
        pct = round(100.0 * impact_ms / step, 2)
        return pct, severity_from_impact(pct)


VENDORS: tuple[str, ...] = ("ascend", "cuda", "rocm", "cpu")   # cpu: a job with no device (gloo on CPUs)
FRAMEWORKS: tuple[str, ...] = ("pytorch", "mindspore")


class Check:
    """Base class of one check (subclass per module). The class is the only record of a check: the
    knowledge base, the MCP resources, compare and the generated docs read these attributes."""

    id: ClassVar[str]                                 # stable, kebab-case; docs/contract.md lists them
    title: ClassVar[str]
    fires_when: ClassVar[str] = ""                    # one line, the contract's "fires when" column
    needs: ClassVar[tuple[str, ...]] = ()            # capabilities required on a rank
    # per-vendor capabilities where they differ (a Kineto trace has runtime calls, Ascend a CANN API table)
    needs_by_vendor: ClassVar[dict[str, tuple[str, ...]]] = {}
    vendors: ClassVar[tuple[str, ...]] = ("ascend", "cuda", "rocm")
    description: ClassVar[str] = ""                   # what it detects and how (generated docs)
    # the breakdown dimension whose time a finding of this check explains: compute | communication | memory |
    # free (device idle, host-caused). `compare` ties a new finding to the dimension its verdict names.
    # None: not declared; compare then counts the finding under compute.
    dimension: ClassVar[str | None] = None
    # names in `analysis/thresholds.py` (`T.<name>`) this check decides with; docs link them to the table
    thresholds: ClassVar[tuple[str, ...]] = ()
    # frameworks whose fix differs on Ascend (the knowledge base must answer each); () = framework-neutral
    frameworks: ClassVar[tuple[str, ...]] = ()
    # `Finding.subject` names exactly what the fix must match (an env var, a replacement API): a fix that
    # does not name the subject is a wrong answer. The fixes themselves name the checks they answer
    # (`checks:` in knowledge/fixes/*.yaml), so the link between a check and its fixes has one home.
    subject_keyed: ClassVar[bool] = False
    # the typed record of this check's evidence (analysis/checks/evidence.py): what its findings may say
    evidence: ClassVar[type[Evidence]] = Evidence   # every check declares its own (a layout test)
    # str.format templates of a finding's title and message, rendered by `finding` over the thresholds by
    # name, the evidence's fields, `worst` / `worst_rank` (the primary map's heaviest entry, where the model
    # has a primary map), `ranks` / `Ranks` / `steps` (the finding's ranks and steps in words; `Ranks` opens a
    # sentence) and the check's own `words`
    title_template: ClassVar[str] = ""
    message_template: ClassVar[str] = ""
    # a check whose findings have several sentence shapes (recorded GC or a conjecture of it; a rank's transport
    # or slow links): shape name -> (title template, message template), rendered over the same names;
    # `finding(shape=...)` picks one
    templates: ClassVar[dict[str, tuple[str, str]]] = {}

    @classmethod
    def describe(cls) -> str:
        """`description` with its `{threshold}` placeholders filled from analysis/thresholds.py (a value is
        written once, in the table; `{name:.0%}` and other format specs work on it)."""
        return cls.description.format_map({k: _Value(getattr(T, k).value) for k in cls.thresholds})

    def needs_for(self, vendor: str | None) -> tuple[str, ...]:
        return self.needs_by_vendor.get(vendor or "", self.needs)

    def missing(self, ctx: CheckContext, rank: int) -> set[str]:
        """Capabilities this check needs on `rank` that the rank's data lacks."""
        return set(self.needs_for(ctx.vendor(rank))) - ctx.caps(rank)

    def applicable_ranks(self, ctx: CheckContext) -> list[int]:
        return [r for r in ctx.all_ranks if (ctx.vendor(r) or "") in self.vendors and not self.missing(ctx, r)]

    def run(self, ctx: CheckContext, ranks: list[int]) -> list[Finding]:  # pragma: no cover - abstract
        """The check's findings on `ranks`: the ranks it applies to (`applicable_ranks`, never empty; the
        framework computes them once and does not call a check that applies to none)."""
        raise NotImplementedError

    # helper so every check builds findings the same way
    def finding(self, ctx: CheckContext, *, shape: str | None = None, subject: str = "",
                ranks: list[int] | None = None, steps: list[int] | None = None, impact_ms: float | None = None,
                evidence: Evidence | None = None, severity: Severity | None = None, impact_rank: int | None = None,
                vendor: str | None = None, words: dict[str, Any] | None = None) -> Finding:
        """One finding of this check. `evidence` is an instance of the check's `evidence` model; the title and
        message are the check's templates (those of `shape`, one of `templates`, where given) rendered with
        `words`."""
        ev = evidence if evidence is not None else self.evidence()
        if not isinstance(ev, self.evidence):
            raise TypeError(f"{self.id}: evidence is {type(ev).__name__}, not {self.evidence.__name__}")
        rk = sorted(set(ranks or []))
        st = sorted(set(steps or []))
        ns = self._template_names(ev, rk, st, impact_rank, words or {})
        title_template, message_template = self._templates_of(shape)
        title, message = title_template.format_map(ns), message_template.format_map(ns)
        pct, sev = ctx.impact(impact_ms, impact_rank if impact_rank is not None else (rk[0] if len(rk) == 1
                                                                                       else None))
        v = vendor or ctx.vendor(rk[0] if rk else None)
        dumped = ev.dump()
        # the knowledge base chooses the fixes, by the finding's subject and evidence: never the check
        fixes = ctx.fixes_for(self.id, v, ctx.framework(rk[0] if rk else None), subject, dumped) \
            if ctx.fixes_for else []
        return Finding(check=self.id, severity=severity or sev, title=title, ranks=rk, steps=st,
                       subject=subject, impact_ms=None if impact_ms is None else round(impact_ms, 3),
                       impact_pct=pct, evidence=dumped, fixes=fixes, message=message)

    def _templates_of(self, shape: str | None) -> tuple[str, str]:
        """(title template, message template) of `shape`, or the check's plain templates without one."""
        if shape is None:
            return self.title_template, self.message_template
        if shape not in self.templates:
            raise KeyError(f"{self.id}: no templates for the shape {shape!r} (it has {sorted(self.templates)})")
        return self.templates[shape]

    def _template_names(self, ev: Evidence, ranks: list[int], steps: list[int], impact_rank: int | None,
                        words: dict[str, Any]) -> dict[str, Any]:
        # the worst rank is the one the impact is taken from where the check says so, else the heaviest
        names: dict[str, Any] = {k: _Value(getattr(T, k).value) for k in self.thresholds}
        names.update({k: getattr(ev, k) for k in type(ev).model_fields})
        if type(ev).primary is not None:
            worst_rank, worst = ev.worst_entry(impact_rank)
            names.update(worst=worst, worst_rank=worst_rank)
        names.update(ranks=ranks_text(ranks), Ranks=ranks_text(ranks).capitalize(), steps=steps_text(steps))
        names.update(words)
        return names


class _Value(float):
    """A threshold's value in a sentence: `{name}` writes it as :g does (3, not 3.0)."""

    def __format__(self, spec: str) -> str:
        return format(float(self), spec or "g")


_REGISTRY: dict[str, type[Check]] = {}


def register(cls: type[Check]) -> type[Check]:
    """Class decorator: add a check to the registry (one id, one class)."""
    if cls.id in _REGISTRY and _REGISTRY[cls.id] is not cls:
        raise ValueError(f"check id {cls.id} registered twice")
    _REGISTRY[cls.id] = cls
    return cls


def registry() -> dict[str, type[Check]]:
    """All checks, importing every module of this package once."""
    from .. import checks as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        if mod.name not in ("base",) and not mod.name.startswith("_"):
            importlib.import_module(f"{pkg.__name__}.{mod.name}")
    return dict(sorted(_REGISTRY.items()))


@dataclass
class CheckRun:
    findings: list[Finding]
    not_applicable: dict[str, str]   # check id -> why
    warnings: list[str]


@dataclass
class _Outcome:
    """What running one check gave."""

    findings: list[Finding] = field(default_factory=list)
    not_applicable: str | None = None   # why the check does not apply
    failure: str | None = None          # the warning when it raised
    notes: list[str] = field(default_factory=list)  # what it added to ctx.notes


def _run_one(ctx: CheckContext, cid: str, cls: type[Check]) -> _Outcome:
    chk = cls()
    ranks = chk.applicable_ranks(ctx)
    if not ranks:
        missing = sorted({n for r in ctx.all_ranks if (ctx.vendor(r) or "") in chk.vendors
                          for n in chk.missing(ctx, r)})
        vendor_ok = any((ctx.vendor(r) or "") in chk.vendors for r in ctx.all_ranks)
        return _Outcome(not_applicable=f"needs {', '.join(missing)}" if missing and vendor_ok
                        else f"applies to {'/'.join(chk.vendors)} profiles")
    before = len(ctx.notes)
    out = _Outcome()
    try:
        out.findings = chk.run(ctx, ranks)
    except Exception as e:  # one broken check must not hide the others' findings
        if is_damaged_cache(e):
            raise   # not this check's failure: the front end discards the database and reads the profile again
        out.failure = f"check {cid} failed: {type(e).__name__}: {e}"
    out.notes = ctx.notes[before:]
    del ctx.notes[before:]
    return out


def run_checks(ctx: CheckContext, only: Iterable[str] | None = None) -> CheckRun:
    """Run every registered check (or `only`) in registry order and collect findings, non-applicability and
    warnings."""
    wanted = set(only) if only is not None else None
    checks = {cid: cls for cid, cls in registry().items() if wanted is None or cid in wanted}
    outcomes = {cid: _run_one(ctx, cid, cls) for cid, cls in checks.items()}
    findings: list[Finding] = []
    na: dict[str, str] = {}
    warnings: list[str] = []
    for cid in checks:
        o = outcomes[cid]
        if o.not_applicable is not None:
            na[cid] = o.not_applicable
        findings.extend(o.findings)
        if o.failure:
            warnings.append(o.failure)
        ctx.notes.extend(o.notes)
    warnings.extend(ctx.notes)
    return CheckRun(sort_findings(findings), na, warnings)
