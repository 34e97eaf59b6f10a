"""Finding cards of the HTML report: fix texts from the knowledge base and evidence as rows.

`tools/report.py` lays the report out; this module builds what each finding card shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["EvidenceItem", "FixView", "evidence_items", "fix_views", "fmt_value"]


# ------------------------------------------------------------------------------------------------------
# Fix texts from the knowledge base
# ------------------------------------------------------------------------------------------------------


@dataclass
class FixView:
    id: str
    title: str
    before: str | None = None
    after: str | None = None
    env: list[str] = field(default_factory=list)
    known: bool = True
    shown_in: int | None = None  # finding number whose card already shows this fix's code edit


def fix_views(ids: list[str], framework: str | None, n: int, seen: dict[str, int]) -> list[FixView]:
    """Title and code-edit template of each fix id; an id the knowledge base lacks is still shown.

    A fix shared by several findings (e.g. shape alignment) shows its template once, in the first
    finding; later cards point back to it, which keeps the report readable.
    """
    try:
        from ..knowledge.loader import get_fix
    except ImportError:
        return [FixView(id=i, title=i, known=False) for i in ids]
    out = []
    for fid in ids:
        try:
            fix = get_fix(fid)
        except KeyError:
            out.append(FixView(id=fid, title=fid, known=False))
            continue
        if fid in seen:
            out.append(FixView(id=fix.id, title=fix.title, shown_in=seen[fid]))
            continue
        seen[fid] = n
        edits = list(fix.code_edit)
        edit = next((e for e in edits if e.framework == framework), None) or (edits[0] if edits else None)
        env = [f"{e.name}={e.value}" if e.value is not None else f"unset {e.name}" for e in fix.env]
        out.append(
            FixView(
                id=fix.id,
                title=fix.title,
                before=edit.before if edit else None,
                after=edit.after if edit else None,
                env=env,
            )
        )
    return out


@dataclass
class EvidenceItem:
    key: str
    text: str = ""
    rows: list[tuple[str, str]] = field(default_factory=list)  # nested: per rank, per op ...


def fmt_value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e6 else f"{v:,.0f}"
    if isinstance(v, str):
        return v if v else "''"
    if isinstance(v, list):
        head = ", ".join(fmt_value(x) for x in v[:12])
        return head + (f", … ({len(v)})" if len(v) > 12 else "")
    if isinstance(v, dict):
        return "; ".join(f"{k}={fmt_value(x)}" for k, x in list(v.items())[:16])
    return str(v)


def evidence_items(ev: dict[str, Any]) -> list[EvidenceItem]:
    """Evidence as rows; a dict of dicts (per rank) or a list of dicts (per op) becomes a nested table."""
    out = []
    for k, v in ev.items():
        if isinstance(v, dict) and v and all(isinstance(x, dict) for x in v.values()):
            out.append(EvidenceItem(str(k), rows=[(str(sk), fmt_value(sv)) for sk, sv in list(v.items())[:32]]))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            out.append(EvidenceItem(str(k), rows=[(str(i), fmt_value(x)) for i, x in enumerate(v[:32], 1)]))
        else:
            out.append(EvidenceItem(str(k), text=fmt_value(v)))
    return out
