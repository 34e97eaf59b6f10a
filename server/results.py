"""The output model of the server's own tool `load_profile` (the catalog's tools answer in `tools/models.py`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from ..analysis.models import ProfileInfo


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
