"""A finding's evidence as one typed record: each check declares its `Evidence` model (`Check.evidence`).

A check fills its model and hands it to `Check.finding`, which validates it, picks the worst rank of its
per-rank map, renders the check's title and message templates and writes the model's JSON into
`Finding.evidence` (the contract's keys: the model's field names).

Invariants:
- A field typed `dict[int, X]` is keyed by rank, and no other field is. The answers' trimming cuts exactly
  those maps (`rank_maps`), by the weight the model declares (`Entry.weighs_by`, or the value itself where the
  map holds numbers), never by guessing from key shapes.
- The JSON leaves out an optional field (default None) the check did not set, so a key a check writes only
  in some cases stays absent in the others, and `None` appears only where the check says so.
- Extra keys are an error (`extra="forbid"`): what a finding can say is what its model declares.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Any, ClassVar, Union

from pydantic import BaseModel, ConfigDict, model_serializer


class Record(BaseModel):
    """A typed part of an evidence record. An optional field left unset is absent from the JSON."""

    model_config = ConfigDict(extra="forbid")

    @model_serializer(mode="wrap")
    def _drop_absent(self, handler: Any) -> dict[str, Any]:
        out = handler(self)
        fields = type(self).model_fields
        for name in [n for n in out if out[n] is None]:
            f = fields.get(name)
            if f is not None and f.default is None and name not in self.model_fields_set:
                del out[name]
        return out


class Entry(Record):
    """One rank's entry of a per-rank map."""

    # the field whose value weighs one rank's entry (larger weighs more): the worst rank of a finding and
    # the ranks an answer keeps when it trims the map
    weighs_by: ClassVar[str | None] = None


class Evidence(Record):
    """The evidence of one check's findings (subclass per check)."""

    impact_method: str | None = None

    # the per-rank map the worst rank is taken from (a field name of `rank_maps()`), if any
    primary: ClassVar[str | None] = "per_rank"

    @classmethod
    def rank_maps(cls) -> dict[str, tuple[type[Entry], ...]]:
        """Field name -> the entry models of each field keyed by rank (several where the map's entries are
        one of several shapes, `dict[int, A] | dict[int, B]`; () where it holds plain values)."""
        return _rank_maps(cls)

    def dump(self) -> dict[str, Any]:
        """The contract's JSON form of this evidence."""
        return self.model_dump(mode="json")

    def worst_entry(self, rank: int | None = None) -> tuple[int | None, Any]:
        """(rank, entry) of the primary map: `rank`'s where it has one, else the heaviest entry (ties: the
        lowest rank); (None, None) if the map is empty."""
        name = type(self).primary
        values = getattr(self, name, None) if name else None
        if not values:
            return None, None
        if rank in values:
            return rank, values[rank]
        entries = type(self).rank_maps().get(name or "", ())
        rank = max(sorted(values), key=lambda r: weight_of(values[r], entries))
        return rank, values[rank]


def weight_of(value: Any, entries: tuple[type[Entry], ...]) -> float:
    """How much one rank's value in a rank map weighs: the `weighs_by` field of the entry model it is (an
    instance, or a dict holding that field), or the value itself where the map holds plain values (`entries`
    empty); 0 where neither applies."""
    if entries:
        value = next((_field(value, e.weighs_by) for e in entries
                      if e.weighs_by is not None and _has(value, e)), None)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _has(value: Any, entry: type[Entry]) -> bool:
    """Whether `value` is an `entry` (an instance of it, or a dict holding its `weighs_by` field)."""
    if isinstance(value, Entry):
        return isinstance(value, entry)
    return isinstance(value, dict) and entry.weighs_by in value


def _field(value: Any, name: str) -> Any:
    return value[name] if isinstance(value, dict) else getattr(value, name)


@functools.cache
def _rank_maps(cls: type[Evidence]) -> dict[str, tuple[type[Entry], ...]]:
    # the annotations pydantic resolved (a string annotation of a local class resolves there, not here)
    return {name: value for name, f in cls.model_fields.items()
            if (value := _rank_map_entries(f.annotation)) is not None}


def _rank_map_entries(annotation: Any) -> tuple[type[Entry], ...] | None:
    """The entry models of a `dict[int, X]` annotation (of each such member of a union, `| None` included),
    () for plain values, or None when it is no map keyed by rank."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        found = [e for arg in typing.get_args(annotation) if (e := _rank_map_entries(arg)) is not None]
        return tuple(m for e in found for m in e) if found else None
    if typing.get_origin(annotation) is dict and typing.get_args(annotation)[:1] == (int,):
        value = typing.get_args(annotation)[1]
        return (value,) if isinstance(value, type) and issubclass(value, Entry) else ()
    return None
