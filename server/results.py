"""The output models the MCP server owns: the catalog's models plus the fields that keep its answers small
(`total`, `truncated`), and what `load_profile` returns."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..analysis.models import ProfileInfo
from ..tools import models as m


class LoadedProfile(BaseModel):
    """What `load_profile` returns: the id to pass to the other tools and what the profile holds."""

    profile_id: str = Field(description="pass as profile_id to the other tools (valid while the server runs)")
    profile: ProfileInfo
    n_ranks: int
    n_steps: int
    from_cache: bool = Field(description="True when the normalized tables came from the cache (no parsing)")
    warnings: list[str] = Field(default_factory=list, description="what ingest skipped, lost or guessed")
    warnings_total: int = 0
    next_steps: list[str] = Field(default_factory=list)


class BreakdownResult(m.Breakdown):
    """`Breakdown` with the rows capped at `limit`."""

    total: int = Field(0, description="rows (rank, step) before the limit")
    truncated: bool = False


class SlowRanksResult(m.SlowRanks):
    """`SlowRanks` with each dimension's list capped at `limit`."""

    total: int = Field(0, description="slow ranks and late arrivals over all dimensions, before the limit")
    truncated: bool = Field(False, description="True if a dimension listed more slow ranks than `limit`")


class EnvAuditResult(m.EnvAudit):
    """`EnvAudit` with the variables capped at `limit` (bad ones first)."""

    total: int = 0
    truncated: bool = False
