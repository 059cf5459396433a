"""Response-cache section of the policy (owned by the response-cache work)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class CacheConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
