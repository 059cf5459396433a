"""Routing policies, one per module, all behind ``router.policies.base.RoutingPolicy``."""
