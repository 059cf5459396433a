"""The routing policies are one table (``router.policies.POLICIES``), name to factory: the names the
policy file accepts (``config.routing.PolicyName``) are exactly the table's, and a wrong name's error
lists them."""

from __future__ import annotations

from typing import get_args

import pytest

from config import PolicyError, parse_policy
from config.routing import PolicyName, RoutingConfig
from router.policies import POLICIES, make_policy
from router.policies.chwbl import CHWBL
from router.policies.consistent_hash import ConsistentHash
from router.policies.least_load import LeastLoad
from router.policies.prefix_affinity import PrefixAffinity
from router.policies.round_robin import RoundRobin
from router.policies.session import Session

EXPECTED = {
    "round_robin": RoundRobin,
    "least_load": LeastLoad,
    "consistent_hash": ConsistentHash,
    "chwbl": CHWBL,
    "prefix_affinity": PrefixAffinity,
    "session": Session,
}


def test_the_table_registers_exactly_the_names_the_config_accepts() -> None:
    assert set(POLICIES) == set(get_args(PolicyName)) == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_name_builds_its_policy(name: str) -> None:
    assert type(make_policy(RoutingConfig(policy=name))) is EXPECTED[name]


def test_the_factories_pass_the_routing_section_on() -> None:
    ring = make_policy(RoutingConfig(policy="consistent_hash", virtual_nodes=7))
    assert isinstance(ring, ConsistentHash) and ring.ring.virtual_nodes == 7
    session = make_policy(RoutingConfig(policy="session", session_header="x-conversation"))
    assert isinstance(session, Session) and session.header == "x-conversation"


def test_a_wrong_name_is_rejected_with_every_allowed_name() -> None:
    text = (
        "models:\n  - name: m\n    replicas: [{url: 'http://127.0.0.1:9'}]\n    routing: {policy: random}\n"
    )
    with pytest.raises(PolicyError) as err:
        parse_policy(text, "policy.yaml")
    rendered = err.value.render()
    assert "routing.policy" in rendered
    for name in POLICIES:
        assert repr(name) in rendered
