"""``python -m bench.batch --variants``: kind, share and online reserve parsed, nonsense refused."""

from __future__ import annotations

import argparse

import pytest

from bench.batch import VARIANTS, parse_variant, variant


def test_variants_name_a_share_and_a_reserve() -> None:
    assert parse_variant("prefix") == ("prefix", None, 0)
    assert parse_variant("prefix@0.25") == ("prefix", 0.25, 0)
    assert parse_variant("prefix/1") == ("prefix", None, 1)
    assert parse_variant("prefix@1/2") == ("prefix", 1.0, 2)
    assert all(variant(v) == v for v in VARIANTS)


@pytest.mark.parametrize("bad", ["lifo", "prefix@0", "prefix@1.5", "prefix/x", "prefix/-1", "prefix@a"])
def test_a_variant_that_means_nothing_is_refused(bad: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        variant(bad)
