"""The YAML routing policy: pydantic models and a loader with clear errors."""

from config.loader import PolicyError, load_policy, parse_policy
from config.policy import Policy

__all__ = ["Policy", "PolicyError", "load_policy", "parse_policy"]
