"""The profile's free-form metadata (one JSON value per rank and key, `metadata` table), decoded."""

from __future__ import annotations

import json
from typing import Any


def decoded(sql, key: str) -> list[tuple[int, Any]]:
    """(rank, value) of every rank that has `key`, its JSON decoded; a value that does not decode is left out
    (a damaged header costs only what it held)."""
    out = []
    for rank, value in sql(f"SELECT rank, value_json FROM metadata WHERE key = '{key}'").itertuples(index=False):
        try:
            out.append((int(rank), json.loads(value)))
        except (TypeError, ValueError):
            continue
    return out
