"""Finding severities, most severe first. Kept apart from the pydantic models so that the command line can
build its parser without importing pydantic (it starts a cold ingest sooner)."""

from __future__ import annotations

from typing import Literal

Severity = Literal["high", "medium", "low"]
SEVERITY_ORDER: dict[str, int] = {"high": 0, "medium": 1, "low": 2}
