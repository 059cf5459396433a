"""docs/configuration.md is generated from the policy models and must match them."""

from __future__ import annotations

from pathlib import Path

from config.reference import render_reference

DOC = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_configuration_reference_is_up_to_date() -> None:
    assert DOC.read_text() == render_reference(), "run: python -m config.reference > docs/configuration.md"


def test_reference_lists_every_top_level_section() -> None:
    from config.policy import Policy

    text = render_reference()
    for name in Policy.model_fields:
        assert f"| `{name}" in text
