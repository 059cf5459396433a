"""Billing section of the policy (owned by the billing work)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class BillingConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
