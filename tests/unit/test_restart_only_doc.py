"""docs/operations.md names every setting a reload cannot apply (gateway.process.reload.RESTART_ONLY):
the list is read from the code, so a setting added there and not to the operator's page fails here."""

from __future__ import annotations

from pathlib import Path

from gateway.process.reload import RESTART_ONLY

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_every_restart_only_setting_is_in_the_operations_page() -> None:
    text = OPERATIONS.read_text()
    start = text.index("Settings bound to the listening socket or the HTTP server need a restart")
    paragraph = text[start : text.index("\n\n", start)]
    names = [section if name is None else f"{section}.{name}" for section, name in RESTART_ONLY]
    assert [n for n in names if f"`{n}`" not in paragraph] == []
